//! The picture of a campaign: an SVG timeline drawn with plotters. One lane per contender
//! with its holds as bars, colored by recipe (a read lock's narrower; the part after its
//! holder was blinded, by a stall, a forced expiry or its node deleted, in a pale blue),
//! accepted writes as dots,
//! refused late writes as red crosses (and the stores' refusals, with `--sink`, as purple
//! triangles); faults as shaded bands (across every lane for a server
//! fault, across its victim's lane for a client fault) and as bars in a lane of their own;
//! violations as red lines.

use std::io;
use std::path::Path;
use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::check::holds;
use super::{Event, FaultKind, Recipe, Record, Violation, WriteOutcome};

/// Above this many accepted writes the dots are left out (a long run's picture stays small).
const MAX_WRITE_DOTS: usize = 2_000;

/// One color per fault kind, in [`FaultKind::ALL`]'s order.
const FAULT_COLORS: [RGBColor; 12] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(44, 160, 44),
    RGBColor(31, 119, 180),
    RGBColor(0, 0, 0),
    RGBColor(255, 187, 120),
];

/// Room under the chart for the legend's rows.
const LEGEND_HEIGHT: u32 = 64;

const HOLD: RGBColor = RGBColor(60, 110, 200);

/// A hold's color by its recipe (the plain lock's is [`HOLD`]); a read lock's hold is drawn
/// narrower, in its writer's color.
fn hold_color(recipe: Recipe) -> RGBColor {
    match recipe {
        Recipe::Lock => HOLD,
        Recipe::Election => RGBColor(120, 60, 170),
        Recipe::Rwlock => RGBColor(0, 140, 140),
        Recipe::Semaphore => RGBColor(190, 120, 20),
        Recipe::Multi => RGBColor(40, 140, 60),
        Recipe::Partitions => RGBColor(200, 60, 120),
    }
}
/// The rest of a hold once its holder was blinded: it believes it holds, but cannot know.
const BLINDED: RGBColor = RGBColor(170, 195, 235);
/// The stores' refusals (`--sink`): purple triangles, apart from the register's crosses.
const PG_REFUSED: RGBColor = RGBColor(130, 40, 170);

fn color_of(kind: FaultKind) -> RGBColor {
    let i = FaultKind::ALL.iter().position(|&k| k == kind).unwrap_or(0);
    FAULT_COLORS[i]
}

/// Draws `history` (with `violations` marked) as an SVG file at `path`.
///
/// ```no_run
/// # fn f() -> std::io::Result<()> {
/// use zkfence_testcontainers::chaos;
/// let history = chaos::read_jsonl("zkfence-chaos/history.jsonl".as_ref())?;
/// chaos::draw(&history, &chaos::check(&history), "again.svg".as_ref())?;
/// # Ok(()) }
/// ```
pub fn draw(history: &[Record], violations: &[Violation], path: &Path) -> io::Result<()> {
    draw_window(history, violations, path, None)
}

/// [`draw`], of the seconds `from..to` of the campaign only (`None`: all of it): a long
/// run's picture is wide, a window of it is readable.
///
/// ```no_run
/// # fn f() -> std::io::Result<()> {
/// use std::time::Duration;
/// use zkfence_testcontainers::chaos;
/// let history = chaos::read_jsonl("zkfence-chaos/history.jsonl".as_ref())?;
/// let minutes_5_to_10 = (Duration::from_secs(300), Duration::from_secs(600));
/// chaos::draw_window(&history, &[], "window.svg".as_ref(), Some(minutes_5_to_10))?;
/// # Ok(()) }
/// ```
pub fn draw_window(
    history: &[Record],
    violations: &[Violation],
    path: &Path,
    window: Option<(Duration, Duration)>,
) -> io::Result<()> {
    let mut h = history.to_vec();
    h.sort_by_key(|r| r.t_us);
    let (clients, title) = match h.iter().find_map(|r| match &r.event {
        Event::Campaign {
            seed,
            nodes,
            clients,
            session_timeout_ms,
            tick_time_ms,
            ..
        } => Some((
            *clients,
            format!(
                "zkfence chaos: seed {seed}, {nodes} servers, {clients} clients, session timeout \
             {session_timeout_ms} ms, tickTime {tick_time_ms} ms"
            ),
        )),
        _ => None,
    }) {
        Some(found) => found,
        None => (
            h.iter()
                .filter_map(|r| r.event.client())
                .max()
                .map_or(1, |c| c + 1),
            "zkfence chaos".to_string(),
        ),
    };
    let last_s = (h.last().map_or(0, |r| r.t_us) as f64 / 1e6).max(1.0);
    let (span, title) = match window {
        None => ((0.0, last_s), title),
        Some((from, to)) => {
            let (from, to) = (from.as_secs_f64(), to.as_secs_f64().min(last_s));
            if from >= to {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the window {from}s..{to}s is empty (the history ends at {last_s:.0}s)"
                    ),
                ));
            }
            ((from, to), format!("{title}; seconds {from:.0} to {to:.0}"))
        }
    };
    // About 8 px per second, within reason.
    let width = (((span.1 - span.0) * 8.0) as u32).clamp(1200, 14_400);
    let lanes = clients + 1;
    let height = 120 + LEGEND_HEIGHT + 44 * lanes as u32;
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    draw_on(&root, &h, violations, clients, span, &title).map_err(io::Error::other)?;
    root.present().map_err(io::Error::other)
}

type DrawResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

fn draw_on(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    h: &[Record],
    violations: &[Violation],
    clients: usize,
    (start_s, end_s): (f64, f64),
    title: &str,
) -> DrawResult {
    // Everything is clipped to the window by hand.
    let clip =
        |a: f64, b: f64| (b >= start_s && a <= end_s).then(|| (a.max(start_s), b.min(end_s)));
    let inside = |t: f64| (start_s..=end_s).contains(&t);
    root.fill(&WHITE)?;
    let (_, total_height) = root.dim_in_pixel();
    let (upper, legend) = root.split_vertically(total_height - LEGEND_HEIGHT);
    let faults_lane = clients as f64;
    let mut chart = ChartBuilder::on(&upper)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .build_cartesian_2d(start_s..end_s, -0.5f64..faults_lane + 0.5)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(WHITE)
        .y_labels(clients + 2)
        .y_label_formatter(&|y| {
            let lane = y.round();
            if (y - lane).abs() > 1e-6 || lane < 0.0 {
                String::new()
            } else if lane as usize == clients {
                "faults".into()
            } else {
                format!("client {lane}")
            }
        })
        .x_desc("seconds since the start")
        .draw()?;

    let s = |t_us: u64| t_us as f64 / 1e6;
    // Faults: a band over the lanes they hurt, and a bar in the faults lane.
    let kinds = FaultKind::ALL.len() as f64;
    for (start, end, kind, client) in fault_spans(h) {
        let c = color_of(kind);
        // Instantaneous faults get a sliver that still shows.
        let end = end.max(start + ((end_s - start_s) / 2_000.0).max(0.05));
        let Some((start, end)) = clip(start, end) else {
            continue;
        };
        let (lo, hi) = match client {
            Some(c) => (c as f64 - 0.5, c as f64 + 0.5),
            None => (-0.5, faults_lane - 0.5),
        };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(start, lo), (end, hi)],
            c.mix(0.15).filled(),
        )))?;
        let k = FaultKind::ALL.iter().position(|&x| x == kind).unwrap_or(0) as f64;
        let y = faults_lane - 0.45 + 0.9 * k / kinds;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(start, y), (end, y + 0.9 / kinds)],
            c.filled(),
        )))?;
    }
    // Holds.
    let all_holds = holds(h);
    for hold in &all_holds {
        let lane = hold.client as f64;
        let half = if hold.read { 0.15 } else { 0.3 };
        let believed = s(hold.believed_end_us()).max(s(hold.start_us));
        if let Some((a, b)) = clip(s(hold.start_us), believed) {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, lane - half), (b, lane + half)],
                hold_color(hold.recipe).mix(0.8).filled(),
            )))?;
        }
        if let Some((a, b)) =
            clip(believed, s(hold.end_us)).filter(|_| hold.end_us > hold.believed_end_us())
        {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, lane - half), (b, lane + half)],
                BLINDED.filled(),
            )))?;
        }
    }
    // Writes.
    let accepted = h
        .iter()
        .filter(|r| matches!(r.event, Event::WriteAccepted { .. }) && inside(s(r.t_us)))
        .count();
    if accepted <= MAX_WRITE_DOTS {
        chart.draw_series(h.iter().filter_map(|r| match r.event {
            Event::WriteAccepted { client, .. } if inside(s(r.t_us)) => {
                Some(Circle::new((s(r.t_us), client as f64), 2, BLACK.filled()))
            }
            _ => None,
        }))?;
    }
    chart.draw_series(h.iter().filter_map(|r| match r.event {
        Event::WriteRefused { client, .. } if inside(s(r.t_us)) => Some(Cross::new(
            (s(r.t_us), client as f64),
            5,
            RED.stroke_width(2),
        )),
        _ => None,
    }))?;
    // The stores' refusals: a triangle just above the lane, so that a write the register and
    // a store both refused shows both marks.
    chart.draw_series(h.iter().filter_map(|r| match r.event {
        Event::PgWriteRefused { client, .. }
        | Event::StoreWrite {
            client,
            outcome: WriteOutcome::Refused,
            ..
        } if inside(s(r.t_us)) => Some(TriangleMarker::new(
            (s(r.t_us), client as f64 + 0.2),
            5,
            PG_REFUSED.filled(),
        )),
        _ => None,
    }))?;
    // Violations.
    for v in violations.iter().filter(|v| inside(s(v.t_us))) {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(s(v.t_us), -0.5), (s(v.t_us), faults_lane + 0.5)],
            RED.stroke_width(3),
        )))?;
    }

    // The legend, one row under the chart.
    let mut recipes: Vec<Recipe> = all_holds.iter().map(|hold| hold.recipe).collect();
    recipes.sort();
    recipes.dedup();
    let mut entries: Vec<(String, RGBColor)> = match recipes[..] {
        [] | [Recipe::Lock] => vec![("hold".into(), HOLD)],
        _ => (recipes.iter())
            .map(|&r| (format!("{r} hold"), hold_color(r)))
            .collect(),
    };
    entries.extend([
        (
            "hold after its holder was blinded (stall, forced expiry, its node deleted)".into(),
            BLINDED,
        ),
        ("refused late write (x)".into(), RED),
    ]);
    let stores = super::check::stores_of(h);
    if !stores.is_empty() {
        let names: Vec<&str> = stores.iter().map(|s| s.title()).collect();
        entries.push((
            format!("late write refused by {} (triangle)", names.join(", ")),
            PG_REFUSED,
        ));
    }
    if accepted <= MAX_WRITE_DOTS {
        entries.push(("accepted write (dot)".into(), BLACK));
    }
    let present: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| {
            h.iter()
                .any(|r| matches!(r.event, Event::FaultStarted { kind, .. } if kind == *k))
        })
        .collect();
    entries.extend(
        present
            .into_iter()
            .map(|k| (k.name().to_string(), color_of(k))),
    );
    if !violations.is_empty() {
        entries.push((format!("violation ({})", violations.len()), RED));
    }
    // Rows of entries, wrapped at the picture's width (text widths estimated).
    let (width, _) = legend.dim_in_pixel();
    let (mut x, mut y) = (90, 8);
    for (label, color) in entries {
        let w = 30 + 7 * label.len() as i32;
        if x + w > width as i32 - 10 {
            (x, y) = (90, y + 20);
        }
        legend.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], color.filled()))?;
        legend.draw(&Text::new(label, (x + 16, y), ("sans-serif", 13)))?;
        x += w;
    }
    Ok(())
}

/// Every fault as (start s, end s, kind, victim client), from the history.
fn fault_spans(h: &[Record]) -> Vec<(f64, f64, FaultKind, Option<usize>)> {
    let end = h.last().map_or(0, |r| r.t_us) as f64 / 1e6;
    let mut spans = Vec::new();
    for (i, r) in h.iter().enumerate() {
        if let Event::FaultStarted {
            fault,
            kind,
            client,
            ..
        } = r.event
        {
            let healed = h[i..]
                .iter()
                .find(|x| matches!(x.event, Event::FaultHealed { fault: f, .. } if f == fault))
                .map_or(end, |x| x.t_us as f64 / 1e6);
            spans.push((r.t_us as f64 / 1e6, healed, kind, client));
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::check::fixtures::{accepted, granted, lost, refused, released};
    use crate::chaos::history::at;
    use crate::chaos::{Recipe, LOCK_PATH};

    #[test]
    fn the_picture_has_a_lane_per_client_its_holds_faults_and_violations() {
        let history = vec![
            at(
                0,
                Event::Campaign {
                    seed: 5,
                    duration_ms: 3_000,
                    nodes: 3,
                    clients: 2,
                    session_timeout_ms: 2_000,
                    tick_time_ms: 200,
                    faults: vec![FaultKind::StallHolder],
                    grant_bound_ms: 18_000,
                    postgres: false,
                    sinks: vec![],
                    recipes: vec![Recipe::Lock],
                    permits: 0,
                },
            ),
            granted(100, 0, 7),
            at(
                200,
                Event::FaultStarted {
                    fault: 0,
                    kind: FaultKind::StallHolder,
                    client: Some(0),
                    server: None,
                },
            ),
            granted(2_500, 1, 8),
            accepted(2_600, 1, 8),
            at(
                3_000,
                Event::FaultHealed {
                    fault: 0,
                    kind: FaultKind::StallHolder,
                },
            ),
            refused(3_001, 0, 7, 8),
            lost(3_002, 0, 7, LOCK_PATH),
            released(3_500, 1, 8),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.svg");
        draw(&history, &[], &path).unwrap();
        let clean = std::fs::read_to_string(&path).unwrap();
        assert!(clean.starts_with("<svg") && clean.trim_end().ends_with("</svg>"));
        for text in [
            "seed 5",
            "client 0",
            "client 1",
            "faults",
            "stall-holder",
            "refused late write",
        ] {
            assert!(clean.contains(text), "no {text:?} in the picture");
        }
        assert!(!clean.contains("violation"), "no violation was given");
        // Holds are bars in the hold color; the stalled part of client 0's is paler.
        assert_eq!(
            clean.matches(r##"fill="#3C6EC8""##).count(),
            3,
            "two holds and the legend's box"
        );

        // A window of it: the title says which seconds; an empty one is refused.
        let window = Some((Duration::from_secs(2), Duration::from_secs(3)));
        draw_window(&history, &[], &path, window).unwrap();
        let part = std::fs::read_to_string(&path).unwrap();
        assert!(part.contains("seconds 2 to 3"), "the window's title");
        assert_eq!(
            part.matches(r##"fill="#3C6EC8""##).count(),
            2,
            "client 1's hold and the legend's"
        );
        let past_the_end = Some((Duration::from_secs(9), Duration::from_secs(10)));
        assert!(draw_window(&history, &[], &path, past_the_end).is_err());

        let violations = super::super::check(&history);
        assert!(!violations.is_empty(), "no finished record: at least that");
        draw(&history, &violations, &path).unwrap();
        let marked = std::fs::read_to_string(&path).unwrap();
        assert!(marked.contains(&format!("violation ({})", violations.len())));
    }

    #[test]
    fn postgres_refusals_are_marked_apart_from_the_registers() {
        let campaign = |postgres| {
            at(
                0,
                Event::Campaign {
                    seed: 5,
                    duration_ms: 4_000,
                    nodes: 3,
                    clients: 2,
                    session_timeout_ms: 4_000,
                    tick_time_ms: 200,
                    faults: vec![],
                    grant_bound_ms: 18_000,
                    postgres,
                    sinks: vec![],
                    recipes: vec![Recipe::Lock],
                    permits: 0,
                },
            )
        };
        let refused = at(
            3_001,
            Event::PgWriteRefused {
                client: 0,
                token: 7,
                seq: 2,
                newest: 8,
                path: LOCK_PATH.into(),
            },
        );
        let triangle = r##"fill="#8228AA""##;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.svg");
        draw(&[campaign(true), refused.clone()], &[], &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("refused by PostgreSQL"), "the legend names it");
        assert_eq!(
            svg.matches(triangle).count(),
            2,
            "the triangle and the legend's box"
        );
        draw(&[campaign(false)], &[], &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(!svg.contains("PostgreSQL") && !svg.contains(triangle));
    }
}
