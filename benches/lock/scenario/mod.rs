//! The scenarios, one file each, in the order they run (8, multi, runs on the main ensemble,
//! before 7 starts its own): each drives zkfence and the arms it is compared with, and adds
//! its rows (with their goals) and its JSON to the report.

pub mod directories;
pub mod handoff;
pub mod herd;
pub mod keepalive;
pub mod multi;
pub mod parallel;
pub mod partitions;
mod queue;
pub mod round_trips;
pub mod scale;
pub mod sessions;
#[cfg(feature = "tls")]
pub mod tls;
pub mod uncontended;

use std::future::Future;
use std::time::Instant;

use tokio::task::JoinSet;

use crate::stats::Samples;
use crate::Result;

pub async fn join_all_ok(mut tasks: JoinSet<Result<()>>) -> Result<()> {
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    Ok(())
}

/// One task per directory of `dirs`, all at once, each made by `task` and running `cycles`
/// cycles on its directory: throughput only (no per-cycle latencies).
pub async fn cycles_on_each<F, Fut>(dirs: &[String], cycles: usize, task: F) -> Result<Samples>
where
    F: Fn(&str) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for dir in dirs {
        tasks.spawn(task(dir));
    }
    join_all_ok(tasks).await?;
    Ok(Samples {
        ops: dirs.len() * cycles,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

/// `n` cycles of `cycle` one after the other, each timed.
pub async fn timed_cycles<F, Fut>(n: usize, mut cycle: F) -> Result<Samples>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        cycle().await?;
        latencies.push(t.elapsed());
    }
    Ok(Samples {
        latencies,
        ops: n,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}
