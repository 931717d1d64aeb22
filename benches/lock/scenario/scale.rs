//! 5. Scale: a curve of queue lengths, each queue of waiters in one process behind one
//!    holder (enqueue time, RSS and getChildren per waiter, drain rate, FIFO order), and how
//!    each cost grows per 10× waiters; at the goal's point, the protocol by hand beside it,
//!    and both again over one session.

use serde_json::{json, Value};

use super::queue::{by_hand_waiting, queue_run, ByHandRss, QueueRun};
use crate::report::{Goal, Report, Row};
use crate::server::Bench;
use crate::stats::round3;
use crate::{progress, Result};

/// The figure: its goals are for this many waiters (scaled to the point measured
/// when the run does not reach it).
const GOAL_WAITERS: usize = 10_000;
/// Enqueue time for [`GOAL_WAITERS`].
const GOAL_ENQUEUE_S: f64 = 5.0;
const GOAL_RSS_KIB: f64 = 3.0;
/// Drain rate against the herd scenario's handoffs at depth, measured in the same run.
const GOAL_DRAIN_VS_HERD: f64 = 0.8;

/// One point of the curve.
struct Point {
    n: usize,
    run: QueueRun,
    per_waiter: f64,
    per_waiter_trimmed: f64,
}

impl Point {
    fn measured(n: usize, run: QueueRun) -> Point {
        let per_waiter = run.rss_waiting.saturating_sub(run.rss_before) as f64 / n as f64;
        let per_waiter_trimmed =
            run.rss_waiting_trimmed.saturating_sub(run.rss_before) as f64 / n as f64;
        Point {
            n,
            run,
            per_waiter,
            per_waiter_trimmed,
        }
    }

    fn enqueue_s(&self) -> f64 {
        self.run.enqueue.as_secs_f64()
    }

    /// Live heap per waiter: what fragmentation cannot move.
    fn heap_per_waiter(&self) -> f64 {
        self.run.heap_waiting.saturating_sub(self.run.heap_before) as f64 / self.n as f64
    }

    fn handoffs_per_s(&self) -> f64 {
        self.n as f64 / self.run.drain.as_secs_f64()
    }

    fn listings_per_enqueue(&self) -> f64 {
        self.run.enqueue_listings as f64 / self.n as f64
    }

    fn json(&self) -> Value {
        json!({
            "waiters": self.n,
            "enqueue_s": round3(self.enqueue_s()),
            "enqueue_per_s": round3(self.n as f64 / self.enqueue_s()),
            "enqueue_listings": self.run.enqueue_listings,
            "listings_per_enqueue": round3(self.listings_per_enqueue()),
            "rss_before_bytes": self.run.rss_before,
            "rss_waiting_bytes": self.run.rss_waiting,
            "rss_bytes_per_waiter": self.per_waiter.round(),
            "rss_bytes_per_waiter_trimmed": self.per_waiter_trimmed.round(),
            "heap_bytes_per_waiter": self.heap_per_waiter().round(),
            "drain_s": round3(self.run.drain.as_secs_f64()),
            "handoffs_per_s": round3(self.handoffs_per_s()),
            "wakeups_per_release": round3(self.run.drained.wakeups as f64 / self.n as f64),
            "server_notifications_per_release": round3(self.run.server_notifications as f64 / self.n as f64),
            "fifo": self.run.fifo,
        })
    }
}

/// The goal's waiters over one session, ours and the protocol by hand.
struct OneSession {
    ours: Point,
    by_hand: ByHandRss,
}

impl OneSession {
    async fn measure(bench: &Bench, n: usize) -> Result<OneSession> {
        let run = queue_run(bench, &format!("scale-one-session-{n}"), n, 1).await?;
        let by_hand =
            by_hand_waiting(bench, &format!("scale-one-session-by-hand-{n}"), n, 1).await?;
        Ok(OneSession {
            ours: Point::measured(n, run),
            by_hand,
        })
    }

    fn json(&self) -> Value {
        let b = self.by_hand.per_waiter(self.ours.n);
        json!({
            "ours": self.ours.json(),
            "by_hand": {
                "rss_bytes_per_waiter": b.rss.round(),
                "rss_bytes_per_waiter_trimmed": b.rss_trimmed.round(),
                "heap_bytes_per_waiter": b.heap.round(),
            },
        })
    }

    fn rows(&self, report: &mut Report, scenario: &str) {
        let (o, b) = (&self.ours, self.by_hand.per_waiter(self.ours.n));
        report.row(
            Row::new(
                scenario,
                format!(
                    "{} waiters over one session (a process sharing one Session): RSS per waiter, KiB (after malloc_trim) / live heap",
                    o.n
                ),
            )
            .ours(format!(
                "{:.2} ({:.2}) / {:.2}",
                o.per_waiter / 1024.0,
                o.per_waiter_trimmed / 1024.0,
                o.heap_per_waiter() / 1024.0
            ))
            .floor(format!(
                "{:.2} ({:.2}) / {:.2} (by hand)",
                b.rss / 1024.0,
                b.rss_trimmed / 1024.0,
                b.heap / 1024.0
            ))
            .ratio(format!(
                "ours/by hand {:.2}; enqueued in {:.1} s, drained at {:.0}/s",
                o.per_waiter / b.rss,
                o.enqueue_s(),
                o.handoffs_per_s()
            )),
        );
    }
}

/// How `y` grows per 10× `x` between two points: `(y₂/y₁)^(1/log₁₀(x₂/x₁))`; 10 for a
/// cost linear in `x`, 1 for a constant one, 100 for a quadratic one.
fn per_decade(x1: usize, y1: f64, x2: usize, y2: f64) -> f64 {
    (y2 / y1).powf(1.0 / (x2 as f64 / x1 as f64).log10())
}

/// The acquire future's size this library keeps to (680 bytes with Rust 1.95 here; 768
/// before the join's steps became async blocks, 792 before a waiter borrowed its node's path,
/// 1,144 before the join stopped keeping its answer's binding, its failure steps and a look's
/// listing beside the wait), with room for a compiler's layout to move a little. A unit test
/// (`an_acquire_future_is_at_most_720_bytes`) holds the same bound.
const MAX_ACQUIRE_FUTURE_BYTES: f64 = 720.0;

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let points_wanted = bench.plan.scale_points.clone();
    let mut points = Vec::with_capacity(points_wanted.len());
    for &n in &points_wanted {
        progress(format!(
            "5/8 scale: {n} waiters in this process over {} sessions (curve {:?})",
            bench.plan.waiter_sessions, points_wanted
        ));
        let run = queue_run(bench, &format!("scale-{n}"), n, bench.plan.waiter_sessions).await?;
        let point = Point::measured(n, run);
        progress(format!(
            "5/8 scale: {n} waiters enqueued in {:.1} s, {:.1} KiB each, drained at {:.0}/s",
            point.enqueue_s(),
            point.per_waiter / 1024.0,
            point.handoffs_per_s()
        ));
        points.push(point);
    }
    let future_bytes = {
        // Not polled, so nothing is sent: only its size is of interest.
        let session = bench.session().await?;
        let lock = session.lock(&bench.path("scale-size"));
        let acquire = lock.acquire();
        std::mem::size_of_val(&acquire)
    };
    // The goals' point: the 10,000 waiters, or the largest point under it.
    let Some(goal_point) = points
        .iter()
        .filter(|p| p.n <= GOAL_WAITERS)
        .max_by_key(|p| p.n)
        .or(points.first())
    else {
        return Ok(());
    };
    // The protocol by hand at the goal's point, right after ours: what a waiter costs this
    // process with this client library and nothing of ours.
    progress(format!(
        "5/8 scale: {} waiters by hand (raw zookeeper-client calls), for their memory",
        goal_point.n
    ));
    let by_hand = by_hand_waiting(
        bench,
        &format!("scale-by-hand-{}", goal_point.n),
        goal_point.n,
        bench.plan.waiter_sessions,
    )
    .await?;
    let by_hand = by_hand.per_waiter(goal_point.n);
    // The same waiters over one session, as a process sharing one `Session` has them: one
    // read buffer and one kept listing instead of one a session. Ours, then by hand.
    let n = goal_point.n;
    progress(format!(
        "5/8 scale: {n} waiters over one session, ours and by hand"
    ));
    let one_session = OneSession::measure(bench, n).await?;
    let herd_rate = report
        .get("herd")
        .and_then(|h| h["handoffs_per_s"].as_f64());
    let growth: Vec<Value> = points
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            json!({
                "from": a.n,
                "to": b.n,
                "enqueue_s_per_10x": round3(per_decade(a.n, a.enqueue_s(), b.n, b.enqueue_s())),
                "rss_trimmed_per_10x": round3(per_decade(a.n, a.per_waiter_trimmed * a.n as f64, b.n, b.per_waiter_trimmed * b.n as f64)),
                "listings_per_10x": round3(per_decade(a.n, a.run.enqueue_listings.max(1) as f64, b.n, b.run.enqueue_listings.max(1) as f64)),
            })
        })
        .collect();
    report.set(
        "scale",
        json!({
            "points": points.iter().map(Point::json).collect::<Vec<_>>(),
            "growth": growth,
            "goal_waiters": goal_point.n,
            "herd_handoffs_per_s": herd_rate.map(round3),
            "acquire_future_bytes": future_bytes,
            "by_hand": {
                "waiters": goal_point.n,
                "rss_bytes_per_waiter": by_hand.rss.round(),
                "rss_bytes_per_waiter_trimmed": by_hand.rss_trimmed.round(),
                "heap_bytes_per_waiter": by_hand.heap.round(),
            },
            "one_session": one_session.json(),
        }),
    );
    // The point of the goals, also under the keys earlier runs wrote.
    report.set("scale", goal_point.json());

    let scenario = "5 scale (waiters in one process)";
    for p in &points {
        report.row(
            Row::new(
                scenario,
                format!(
                    "{} waiters: enqueue / RSS per waiter (after malloc_trim) / getChildren per enqueue (client)",
                    p.n
                ),
            )
            .ours(format!(
                "{:.1} s / {:.1} KiB ({:.1} KiB) / {:.2}",
                p.enqueue_s(),
                p.per_waiter / 1024.0,
                p.per_waiter_trimmed / 1024.0,
                p.listings_per_enqueue()
            ))
            .ratio(format!(
                "drained in {:.1} s ({:.0} handoffs/s)",
                p.run.drain.as_secs_f64(),
                p.handoffs_per_s()
            )),
        );
    }
    for w in points.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        report.row(
            Row::new(
                scenario,
                format!(
                    "growth per 10× waiters, {} → {}: enqueue time / RSS after malloc_trim / getChildren",
                    a.n, b.n
                ),
            )
            .ours(format!(
                "× {:.1} / × {:.1} / × {:.1}",
                per_decade(a.n, a.enqueue_s(), b.n, b.enqueue_s()),
                per_decade(
                    a.n,
                    a.per_waiter_trimmed * a.n as f64,
                    b.n,
                    b.per_waiter_trimmed * b.n as f64
                ),
                per_decade(
                    a.n,
                    a.run.enqueue_listings.max(1) as f64,
                    b.n,
                    b.run.enqueue_listings.max(1) as f64
                ),
            ))
            .floor("× 10 (linear)"),
        );
    }

    let g = goal_point;
    let scaled = GOAL_ENQUEUE_S * g.n as f64 / GOAL_WAITERS as f64;
    report.row(
        Row::new(scenario, format!("{} waiters: enqueue time (s)", g.n))
            .ours(format!("{:.2}", g.enqueue_s()))
            .floor(format!(
                "{scaled:.2} (goal: {GOAL_ENQUEUE_S} s per {GOAL_WAITERS})"
            ))
            .goal(Goal::at_most(
                "scale.enqueue_s",
                g.enqueue_s(),
                round3(scaled),
            )),
    );
    report.row(
        Row::new(
            scenario,
            format!("{} waiters: RSS per waiter (KiB; after malloc_trim)", g.n),
        )
        .ours(format!(
            "{:.2} ({:.2})",
            g.per_waiter / 1024.0,
            g.per_waiter_trimmed / 1024.0
        ))
        .goal(Goal::at_most(
            "scale.rss_kib_per_waiter",
            g.per_waiter / 1024.0,
            GOAL_RSS_KIB,
        )),
    );
    report.row(
        Row::new(
            scenario,
            format!(
                "{} waiters: live heap per waiter (KiB; mallinfo2, what fragmentation cannot move): ours / by hand",
                g.n
            ),
        )
        .ours(format!("{:.2}", g.heap_per_waiter() / 1024.0))
        .floor(format!("{:.2}", by_hand.heap / 1024.0))
        .ratio(format!("ours/by hand {:.2}", g.heap_per_waiter() / by_hand.heap)),
    );
    report.row(
        Row::new(
            scenario,
            format!(
                "{} waiters: … the protocol by hand (a task, its create, a listing per session then dropped, an exists watch)",
                g.n
            ),
        )
        .floor(format!(
            "{:.2} ({:.2})",
            by_hand.rss / 1024.0,
            by_hand.rss_trimmed / 1024.0
        ))
        .ratio(format!(
            "ours/by hand {:.2} ({:.2} after malloc_trim)",
            g.per_waiter / by_hand.rss,
            g.per_waiter_trimmed / by_hand.rss_trimmed
        )),
    );
    report.row(
        Row::new(
            scenario,
            "bytes of one waiter's acquire future (`size_of_val`)",
        )
        .ours(future_bytes.to_string())
        .floor("768 the two rounds before (792 before them), 1,144 three rounds before, 1,472 before issue 22")
        .goal(
            Goal::at_most(
                "scale.acquire_future_bytes",
                future_bytes as f64,
                MAX_ACQUIRE_FUTURE_BYTES,
            )
            .checked()
            .detail(
                "what every waiting task carries: a step kept beside the one awaited \
                     (a finished step's local, a temporary of `?`) shows here first",
            ),
        ),
    );
    one_session.rows(report, scenario);
    let drain_vs_herd = herd_rate.map(|h| g.handoffs_per_s() / h);
    let mut drain = Row::new(scenario, format!("{} waiters: drain (handoffs/s)", g.n))
        .ours(format!("{:.0}", g.handoffs_per_s()));
    if let (Some(h), Some(r)) = (herd_rate, drain_vs_herd) {
        drain = drain
            .floor(format!("{h:.0} (herd at depth, this run)"))
            .ratio(format!("ours/herd {r:.2}"))
            .goal(Goal::at_least("scale.drain_vs_herd", r, GOAL_DRAIN_VS_HERD));
    }
    report.row(drain);
    report.row(
        Row::new(
            scenario,
            format!("{} waiters: getChildren per enqueue (client)", g.n),
        )
        .ours(format!("{:.3}", g.listings_per_enqueue()))
        .floor("< 1 (a listing shared by one session's waiters)")
        .goal(
            Goal::new(
                "scale.listings_per_enqueue",
                g.listings_per_enqueue(),
                "< 1.0",
                g.listings_per_enqueue() < 1.0,
            )
            .checked()
            .detail(format!(
                "{} getChildren (SessionMetrics::listings) by the waiters' {} sessions while \
                 {} waiters enqueued",
                g.run.enqueue_listings, bench.plan.waiter_sessions, g.n
            )),
        ),
    );
    let fifo = points.iter().all(|p| p.run.fifo);
    report.row(
        Row::new(scenario, "all granted, in FIFO order (every point)")
            .ours(fifo.to_string())
            .goal(
                Goal::holds("scale.fifo", fifo, "true")
                    .checked()
                    .detail("every waiter granted, each with a larger token than the one before"),
            ),
    );
    Ok(())
}
