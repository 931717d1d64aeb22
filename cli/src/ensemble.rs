//! `zkfence ensemble up`: a throwaway local ZooKeeper ensemble for trying zkfence out.

use std::io::Write;
use std::time::Duration;

use zkfence_testcontainers::Ensemble;

use crate::exit::{self, Failure};
use crate::signals::{self, Signals};

pub async fn up(
    nodes: usize,
    tick_time: Duration,
    max_session_timeout: Duration,
) -> Result<u8, Failure> {
    if nodes == 0 {
        return Err(Failure::new(exit::USAGE, "--nodes must be at least 1"));
    }
    let mut signals = Signals::catch()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot catch signals: {e}")))?;
    eprintln!("zkfence: starting {nodes} ZooKeeper server(s) (tickTime {tick_time:?})...");
    let start = Ensemble::builder()
        .nodes(nodes)
        .tick_time(tick_time)
        .max_session_timeout(max_session_timeout)
        .start();
    let zk = tokio::select! {
        zk = start => zk?,
        // The harness cleans up what it started when its future is dropped.
        sig = signals.recv() => return Ok(exit::by_signal(sig)),
    };
    // The first line of stdout is exactly the connect string, for scripts.
    println!("{}", zk.connect_string());
    let _ = std::io::stdout().flush();
    eprintln!(
        "zkfence: ensemble up; sessions may last {:?} to {max_session_timeout:?}. Try:\n  \
         export ZKFENCE_CONNECT={}\n  zkfence exec /locks/demo -- sh -c 'echo token $ZKFENCE_TOKEN; sleep 5'\n\
         Ctrl-C stops it and deletes its data.",
        tick_time * 2,
        zk.connect_string()
    );
    let sig = signals.recv().await;
    eprintln!("zkfence: {}: stopping the ensemble", signals::name(sig));
    // A graceful stop per server (SIGTERM, then SIGKILL after a grace); it blocks, so off the
    // async threads. Dropping the ensemble then removes its directory.
    tokio::task::spawn_blocking(move || {
        for i in 0..zk.len() {
            zk.stop(i);
        }
        drop(zk);
    })
    .await
    .map_err(|e| Failure::new(exit::ERROR, format!("stopping the ensemble failed: {e}")))?;
    Ok(exit::OK)
}
