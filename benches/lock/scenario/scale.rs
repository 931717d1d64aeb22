//! 5. Scale: 10,000 waiters in one process (enqueue time, RSS per waiter, FIFO order).

use serde_json::json;

use super::queue::queue_run;
use crate::report::{Goal, Report, Row};
use crate::server::Bench;
use crate::stats::round3;
use crate::{progress, Result};

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let n = bench.plan.scale_waiters;
    progress(format!(
        "5/8 scale: {n} waiters in this process over {} sessions",
        bench.plan.waiter_sessions
    ));
    let run = queue_run(bench, "scale", n).await?;
    let per_waiter = run.rss_waiting.saturating_sub(run.rss_before) as f64 / n as f64;
    let future_bytes = {
        // Not polled, so nothing is sent: only its size is of interest.
        let session = bench.session().await?;
        let lock = session.lock(&bench.path("scale-size"));
        let acquire = lock.acquire();
        std::mem::size_of_val(&acquire)
    };
    let per_waiter_trimmed =
        run.rss_waiting_trimmed.saturating_sub(run.rss_before) as f64 / n as f64;
    report.set(
        "scale",
        json!({
            "waiters": n,
            "enqueue_s": round3(run.enqueue.as_secs_f64()),
            "enqueue_per_s": round3(n as f64 / run.enqueue.as_secs_f64()),
            "rss_before_bytes": run.rss_before,
            "rss_waiting_bytes": run.rss_waiting,
            "rss_bytes_per_waiter": per_waiter.round(),
            "rss_bytes_per_waiter_trimmed": per_waiter_trimmed.round(),
            "acquire_future_bytes": future_bytes,
            "drain_s": round3(run.drain.as_secs_f64()),
            "handoffs_per_s": round3(n as f64 / run.drain.as_secs_f64()),
            "wakeups_per_release": round3(run.drained.wakeups as f64 / n as f64),
            "server_notifications_per_release": round3(run.server_notifications as f64 / n as f64),
            "fifo": run.fifo,
        }),
    );
    report.row(
        Row::new(
            "5 scale",
            format!("{n} waiters: enqueue time / RSS per waiter (after malloc_trim)"),
        )
        .ours(format!(
            "{:.1} s / {:.1} KiB ({:.1} KiB)",
            run.enqueue.as_secs_f64(),
            per_waiter / 1024.0,
            per_waiter_trimmed / 1024.0
        ))
        .ratio(format!("drained in {:.1} s", run.drain.as_secs_f64())),
    );
    report.row(
        Row::new("5 scale", "all granted, in FIFO order")
            .ours(run.fifo.to_string())
            .goal(
                Goal::holds("scale.fifo", run.fifo, "true")
                    .checked()
                    .detail("every waiter granted, each with a larger token than the one before"),
            ),
    );
    Ok(())
}
