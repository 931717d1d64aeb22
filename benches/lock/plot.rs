//! The picture: one panel per scenario, the latency distribution (CDF) of each of its arms,
//! on a log time axis, drawn with `plotters`' SVG backend into `target/bench/latency.svg`.

use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use crate::stats::ms;
use crate::Result;

/// Series colours, in arm order: zkfence first, in the palette's strongest colour.
const COLOURS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(127, 127, 127),
];

/// One panel of the picture: a scenario and each of its arms' latencies.
pub struct Panel {
    pub scenario: String,
    pub arms: Vec<(String, Vec<Duration>)>,
}

pub fn latency_cdfs(path: &Path, panels: &[Panel]) -> Result<()> {
    let height = 300 * panels.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    for (area, Panel { scenario, arms }) in root.split_evenly((panels.len(), 1)).iter().zip(panels)
    {
        let all: Vec<f64> = arms
            .iter()
            .flat_map(|(_, l)| l.iter().map(|d| ms(*d)))
            .collect();
        // A log axis from a bit under the fastest sample to a bit over the slowest.
        let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(0.01) * 0.8;
        let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 2.0) * 1.25;
        let mut chart = ChartBuilder::on(area)
            .caption(scenario, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(
                (lo..hi).log_scale().with_key_points(ticks(lo, hi)),
                0.0..1.0,
            )?;
        chart
            .configure_mesh()
            .x_desc("latency (ms, log scale)")
            .y_desc("fraction ≤ x")
            .x_labels(10)
            .y_labels(6)
            .draw()?;
        for (i, (arm, latencies)) in arms.iter().enumerate() {
            let mut sorted: Vec<f64> = latencies.iter().map(|d| ms(*d)).collect();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len() as f64;
            let colour = COLOURS[i % COLOURS.len()];
            let points = sorted
                .iter()
                .enumerate()
                .map(|(k, x)| (*x, (k + 1) as f64 / n));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
                .label(format!(
                    "{arm} (n = {}, p50 {:.2} ms)",
                    sorted.len(),
                    median(&sorted)
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// 1-2-5 ticks (…, 0.5, 1, 2, 5, 10, …) within `lo..hi`: a log axis's own choice labels
/// only the decade when the range is under two decades wide.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if (lo..=hi).contains(&t) {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

fn median(sorted: &[f64]) -> f64 {
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(f64::NAN)
}
