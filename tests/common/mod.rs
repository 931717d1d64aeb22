//! Support shared by the integration tests: ensembles, sessions, unique paths, child processes.
//!
//! Tests that only hurt clients (proxy faults, killed client processes) share one 3-node
//! ensemble per test binary ([`shared_ensemble`]), each under its own path ([`unique_path`]).
//! Tests that hurt servers start their own ([`own_ensemble`]).
#![allow(dead_code)]

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;
use zkfence::{Session, SessionOptions};
use zkfence_testcontainers::Ensemble;

pub mod curator;
pub mod fleet;
pub mod partition;

/// The tick time of test ensembles: session timeouts may range over [0.4 s, 4 s].
pub const TICK: Duration = Duration::from_millis(200);

static SHARED: OnceLock<Ensemble> = OnceLock::new();
static SHARED_RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The 3-node ensemble shared by the tests of this binary, started on first use.
///
/// It is started on a runtime of its own (tests each have theirs and end), and stopped by the
/// harness's watchdog when the test process exits.
pub fn shared_ensemble() -> &'static Ensemble {
    SHARED.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = SHARED_RT.get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap()
            });
            rt.block_on(Ensemble::builder().nodes(3).tick_time(TICK).start())
                .expect("start the shared ensemble")
        })
        .join()
        .expect("ensemble start thread")
    })
}

/// A fresh ensemble of `nodes` servers for a test that hurts servers.
pub async fn own_ensemble(nodes: usize) -> Ensemble {
    Ensemble::builder()
        .nodes(nodes)
        .tick_time(TICK)
        .start()
        .await
        .expect("start an ensemble")
}

/// A path no other test uses.
pub fn unique_path(name: &str) -> String {
    format!("/test/{name}-{}", uuid::Uuid::new_v4().simple())
}

/// Connects with the given session timeout.
pub async fn connect(connect: &str, session_timeout: Duration) -> Session {
    Session::connect(
        connect,
        SessionOptions::new().session_timeout(session_timeout),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {connect}: {e}"))
}

/// Polls `condition` until it returns true or `timeout` passes; panics with `what` then.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Children of `dir` as seen by `session` (empty if the directory does not exist), after a
/// `sync`: reads from one session need not see another session's finished writes otherwise.
pub async fn children(session: &Session, dir: &str) -> Vec<String> {
    let _ = session.client().sync(dir).await;
    match session.client().list_children(dir).await {
        Ok(c) => c,
        Err(zkfence::zookeeper_client::Error::NoNode) => vec![],
        Err(e) => panic!("list {dir}: {e}"),
    }
}

/// Environment variable that tells a re-executed test binary which child role to play.
/// Waits (up to 10 s) until `session` sees exactly `n` children under `dir`: the contenders
/// of a queue.
pub async fn until_children(session: &Session, dir: &str, n: usize) {
    eventually(
        Duration::from_secs(10),
        &format!("{n} contenders under {dir}"),
        || async { children(session, dir).await.len() == n },
    )
    .await;
}

pub const CHILD_ROLE: &str = "ZKFENCE_TEST_CHILD";

/// Re-executes this test binary to run only `test_name`, with `role` and `envs` in its
/// environment, stdout piped. The named test must check [`child_role`] first and act as the
/// child when it is set.
pub fn spawn_child(test_name: &str, role: &str, envs: &[(&str, String)]) -> tokio::process::Child {
    let exe = std::env::current_exe().expect("current test binary");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, role)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child test process")
}

/// The child role this process was started with, if any.
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ROLE).ok()
}

/// Awaits `fut` for at most `timeout`, and panics naming `what` then: a broken build fails
/// instead of hanging the suite.
pub async fn within<F: Future>(timeout: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(timeout, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {timeout:?} waiting for: {what}"),
    }
}

/// `names` (children of a lock directory) in queue order: by the 10-digit sequence suffix.
pub fn queue_order(mut names: Vec<String>) -> Vec<String> {
    names.sort_by_key(|n| {
        n[n.len().saturating_sub(10)..]
            .parse::<u64>()
            .unwrap_or(u64::MAX)
    });
    names
}

/// The last component of a node path.
pub fn name_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A Python that can import kazoo: Debian's `python3-kazoo` lives in the system Python,
/// which may not be the first `python3` on `PATH`. `None` means skip the test: allowed on a
/// developer machine without kazoo, never in CI (`.ci/install-deps` installs it).
pub fn python_with_kazoo() -> Option<&'static str> {
    let found = ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import kazoo"])
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    });
    if found.is_none() {
        eprintln!("python3-kazoo is not installed: skipping (apt-get install -y python3-kazoo)");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have python3-kazoo"
        );
    }
    found
}
