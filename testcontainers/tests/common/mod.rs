//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whether a process with this pid exists, is not a zombie, and (if `marker` is given) has
/// `marker` in its command line (so a reused pid does not count).
pub fn process_alive(pid: u32, marker: Option<&str>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z') | Some('X') | None) {
        return false;
    }
    match marker {
        None => true,
        Some(m) => std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(m))
            .unwrap_or(false),
    }
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that the servers and the directory of a dropped ensemble are gone.
pub fn assert_cleaned_up(pids: &[u32], dir: &Path) {
    let marker = dir.to_string_lossy().into_owned();
    for &pid in pids {
        assert!(
            !process_alive(pid, Some(&marker)),
            "server process {pid} survived the ensemble"
        );
    }
    assert!(!dir.exists(), "{} survived the ensemble", dir.display());
}

/// `fut` with a deadline, panicking with `what` if it passes.
pub async fn within<F: Future>(timeout: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(timeout, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {timeout:?}: {what}"),
    }
}

/// Connects a client with the given session timeout (bounded by a deadline).
pub async fn connect(cs: &str, session: Duration) -> zookeeper_client::Client {
    within(
        Duration::from_secs(20),
        "connecting a client",
        zookeeper_client::Client::connector()
            .with_session_timeout(session)
            .connect(cs),
    )
    .await
    .expect("client connects")
}

/// Like [`poll_until`], but sleeps on the tokio timer, so the runtime keeps running
/// (e.g. the proxy's relay tasks on a current-thread runtime).
pub async fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
