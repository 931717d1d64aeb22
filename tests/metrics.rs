//! The operator metrics (crate feature `metrics`) against a real ensemble, read back through
//! a Prometheus recorder installed for this test binary alone: counters, gauges and
//! histograms move as the tests acquire, wait, time out, release, lose, expire and reopen.
//!
//! The feature is on under `cargo test --workspace` (the CLI depends on zkfence with it, and
//! features unify across the workspace); `cargo test -p zkfence` alone compiles this file
//! empty, and `cargo test -p zkfence --features metrics` runs it.
#![cfg(feature = "metrics")]

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use zkfence::{Error, LeaseState, LossReason, Session, SessionOptions};

const SESSION: Duration = Duration::from_secs(4);
/// A generous bound for a step of a few round trips: a broken build fails instead of hanging.
const STEP: Duration = Duration::from_secs(10);

/// The recorder of this test binary: installed once, shared by its tests. Each test labels
/// its series by its own unique path (the session option), so tests running at once do not
/// see each other's counts.
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this test binary");
        zkfence::describe_metrics();
        handle
    })
}

/// The value of the series `name{labels}` (exactly that label set) in the exposition text,
/// if present.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}')?),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let mut found: Vec<(String, String)> = rest
                .split("\",")
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    let (k, v) = p.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            let mut wanted: Vec<(String, String)> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            found.sort();
            wanted.sort();
            (found == wanted).then(|| value.parse().ok())?
        })
}

/// What the recorder shows for `name` with `kind` and `path` labels (0 if absent).
fn metric(name: &str, kind: &str, path: &str) -> f64 {
    value(
        &recorder().render(),
        name,
        &[("kind", kind), ("path", path)],
    )
    .unwrap_or(0.0)
}

async fn labelled_session(connect: &str) -> Session {
    Session::connect(
        connect,
        SessionOptions::new()
            .session_timeout(SESSION)
            .metrics_path_labels(true),
    )
    .await
    .unwrap()
}

/// Polls until `name{kind, path}` reads `want`, or fails after [`STEP`].
async fn until_metric(name: &str, kind: &str, path: &str, want: f64) {
    eventually(
        STEP,
        &format!("{name}{{{kind}, {path}}} = {want}"),
        || async { metric(name, kind, path) == want },
    )
    .await;
}

#[tokio::test]
async fn counters_follow_acquires_waits_timeouts_releases_and_losses() {
    recorder();
    let zk = shared_ensemble();
    let path = unique_path("metrics-lock");
    let holder_session = labelled_session(&zk.connect_string()).await;
    let waiter_session = labelled_session(&zk.connect_string()).await;
    let admin = connect(&zk.connect_string(), SESSION).await;
    let m = |name: &str| metric(name, "lock", &path);

    let first = holder_session.lock(&path).acquire().await.unwrap();
    assert_eq!(m("zkfence_acquires_total"), 1.0);
    assert_eq!(m("zkfence_grants_total"), 1.0);
    assert_eq!(m("zkfence_leases_held"), 1.0);
    assert_eq!(m("zkfence_wait_seconds_count"), 1.0);

    // A timeout behind the holder: counted, and the waiter no longer counts as waiting.
    let err = waiter_session
        .lock(&path)
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(m("zkfence_timeouts_total"), 1.0);
    assert_eq!(m("zkfence_acquires_total"), 2.0);
    assert_eq!(m("zkfence_waiters"), 0.0);
    // So does a try that finds the lock taken.
    assert!(waiter_session
        .lock(&path)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert_eq!(m("zkfence_timeouts_total"), 2.0);
    assert_eq!(m("zkfence_grants_total"), 1.0);

    // A waiter: the gauge shows it; the release hands it the lock.
    let lock = waiter_session.lock(&path);
    let waiting = tokio::spawn(async move { lock.acquire().await });
    until_metric("zkfence_waiters", "lock", &path, 1.0).await;
    first.release().await.unwrap();
    let second = within(STEP, "the waiter is granted", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m("zkfence_releases_total"), 1.0);
    assert_eq!(m("zkfence_grants_total"), 2.0);
    assert_eq!(m("zkfence_waiters"), 0.0);
    assert_eq!(m("zkfence_leases_held"), 1.0);
    assert_eq!(m("zkfence_wait_seconds_count"), 2.0);
    assert_eq!(m("zkfence_held_seconds_count"), 1.0);
    assert_eq!(
        m("zkfence_release_to_grant_seconds_count"),
        1.0,
        "the waiter's grant after its predecessor left"
    );

    // Someone deletes the holder's node: a loss by reason, not a release.
    admin.client().delete(second.path(), None).await.unwrap();
    assert_eq!(
        within(STEP, "the loss is noticed", second.lost()).await,
        LossReason::NodeDeleted
    );
    assert_eq!(second.state(), LeaseState::Lost(LossReason::NodeDeleted));
    let losses = value(
        &recorder().render(),
        "zkfence_losses_total",
        &[
            ("kind", "lock"),
            ("reason", "node_deleted"),
            ("path", &path),
        ],
    );
    assert_eq!(losses, Some(1.0));
    assert_eq!(m("zkfence_leases_held"), 0.0);
    assert_eq!(m("zkfence_held_seconds_count"), 2.0);
    // Dropping the lost lease is neither a second loss nor a release.
    drop(second);
    assert_eq!(m("zkfence_releases_total"), 1.0);
    assert_eq!(m("zkfence_leases_held"), 0.0);
}

#[tokio::test]
async fn without_the_option_series_carry_no_path_and_elections_always_do() {
    recorder();
    let zk = shared_ensemble();
    // No path labels (the default): a semaphore's series are labelled by kind alone. No
    // other test of this binary uses a semaphore, so the count is this test's.
    let session = connect(&zk.connect_string(), SESSION).await;
    let path = unique_path("metrics-semaphore");
    let lease = session.semaphore(&path, 2).acquire().await.unwrap();
    let text = recorder().render();
    assert_eq!(
        value(&text, "zkfence_acquires_total", &[("kind", "semaphore")]),
        Some(1.0),
        "{text}"
    );
    assert!(
        !text.contains(&path),
        "a path label without the option: {text}"
    );
    lease.release().await.unwrap();

    // A multi-lock counts its acquire once and its lease once per path (no other test uses
    // a multi-lock either); its read/write sides are kinds of their own.
    let (a, b) = (
        unique_path("metrics-multi-a"),
        unique_path("metrics-multi-b"),
    );
    let multi = session.multi_lock(&[&a, &b]).acquire().await.unwrap();
    let read = session.read_lock(&a).try_acquire().await.unwrap();
    assert!(read.is_none(), "the multi-lock holds a exclusively");
    let text = recorder().render();
    let kind = |name: &str, kind: &str| value(&text, name, &[("kind", kind)]);
    assert_eq!(kind("zkfence_acquires_total", "multi"), Some(1.0), "{text}");
    assert_eq!(kind("zkfence_grants_total", "multi"), Some(1.0), "{text}");
    assert_eq!(kind("zkfence_leases_held", "multi"), Some(2.0), "{text}");
    assert_eq!(kind("zkfence_timeouts_total", "read"), Some(1.0), "{text}");
    multi.release().await.unwrap();
    let text = recorder().render();
    let kind = |name: &str, kind: &str| value(&text, name, &[("kind", kind)]);
    assert_eq!(kind("zkfence_leases_held", "multi"), Some(0.0), "{text}");
    assert_eq!(kind("zkfence_releases_total", "multi"), Some(2.0), "{text}");

    // An election is labelled by its path anyway; its leader gauge is 0 while it only
    // campaigns, 1 while it leads, 0 again once it resigned.
    let election = unique_path("metrics-election");
    let other = connect(&zk.connect_string(), SESSION).await;
    let first = other.election(&election).campaign("first").await.unwrap();
    let leader = |text: &str| value(text, "zkfence_leader", &[("path", &election)]);
    let candidate = session.election(&election);
    let campaign = tokio::spawn(async move { candidate.campaign("second").await });
    until_children(&session, &election, 2).await;
    assert_eq!(leader(&recorder().render()), Some(1.0), "first leads");
    first.resign().await.unwrap();
    let second = within(STEP, "second is elected", campaign)
        .await
        .unwrap()
        .unwrap();
    let text = recorder().render();
    assert_eq!(leader(&text), Some(1.0), "{text}");
    assert_eq!(
        value(
            &text,
            "zkfence_grants_total",
            &[("kind", "election"), ("path", &election)]
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "zkfence_releases_total",
            &[("kind", "election"), ("path", &election)]
        ),
        Some(1.0),
        "{text}"
    );
    second.resign().await.unwrap();
    assert_eq!(leader(&recorder().render()), Some(0.0));
}

#[tokio::test]
async fn a_partition_past_the_timeout_counts_a_loss_an_expiry_and_a_reopen() {
    recorder();
    let zk = shared_ensemble();
    let path = unique_path("metrics-expiry");
    let proxy = zk.proxy().await.unwrap();
    let short = Duration::from_secs(2);
    let victim = Session::connect(
        &proxy.connect_string(),
        SessionOptions::new()
            .session_timeout(short)
            .metrics_path_labels(true),
    )
    .await
    .unwrap();
    let admin = connect(&zk.connect_string(), SESSION).await;
    let expiries =
        || value(&recorder().render(), "zkfence_session_expiries_total", &[]).unwrap_or(0.0);
    let reconnects = || value(&recorder().render(), "zkfence_reconnects_total", &[]).unwrap_or(0.0);
    let reopens =
        || value(&recorder().render(), "zkfence_session_reopens_total", &[]).unwrap_or(0.0);
    let lease = victim.lock(&path).acquire().await.unwrap();

    // A cut connection: the client reconnects at once (through the proxy, to the same server).
    let before = reconnects();
    proxy.cut();
    eventually(STEP, "the client reconnected", || async {
        reconnects() > before
    })
    .await;

    // A partition past the timeout: the lease clock gives the lease up first, then the
    // ensemble expires the session, which the client learns once healed.
    let (before, reopened_before) = (expiries(), reopens());
    proxy.blackhole();
    let reason = within(STEP, "the lease is lost", lease.lost()).await;
    assert_eq!(reason, LossReason::ClockLapsed, "lost before the expiry");
    eventually(STEP, "the server expired the session", || async {
        children(&admin, &path).await.is_empty()
    })
    .await;
    proxy.heal();
    eventually(STEP, "the expiry is counted", || async {
        expiries() > before
    })
    .await;
    eventually(STEP, "a new session replaces the expired one", || async {
        reopens() > reopened_before
    })
    .await;
    let losses = value(
        &recorder().render(),
        "zkfence_losses_total",
        &[
            ("kind", "lock"),
            ("reason", "clock_lapsed"),
            ("path", &path),
        ],
    );
    assert_eq!(losses, Some(1.0));
    assert_eq!(metric("zkfence_leases_held", "lock", &path), 0.0);

    // The same Session acquires again on its new ZooKeeper session, still labelled by path.
    let again = within(
        STEP,
        "the same Session acquires again",
        victim.lock(&path).acquire(),
    )
    .await
    .unwrap();
    assert_eq!(metric("zkfence_grants_total", "lock", &path), 2.0);
    assert_eq!(metric("zkfence_leases_held", "lock", &path), 1.0);
    again.release().await.unwrap();
    assert_eq!(metric("zkfence_leases_held", "lock", &path), 0.0);
}
