//! Services that run for months: a `Session` outlives the expiry of its ZooKeeper session,
//! retries with backoff while the ensemble is down, and closes for good when told to.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tokio::time::Instant;
use zkfence::{Error, LeaseState, Session, SessionOptions, SessionState};

const T: Duration = Duration::from_secs(2);

/// Records every state change of `session` with its instant and the session id after it.
fn record_states(session: &Session) -> Arc<Mutex<Vec<(SessionState, Instant, i64)>>> {
    let log = Arc::new(Mutex::new(vec![]));
    let (session, record) = (session.clone(), log.clone());
    // Until the session ends for good: `state_changed` says so with `None` after every
    // terminal state that no new session follows (closed, refused, expired without
    // reopening), so this task never outlives the session nor spins.
    tokio::spawn(async move {
        while let Some(state) = session.state_changed().await {
            record
                .lock()
                .unwrap()
                .push((state, Instant::now(), session.id()));
        }
    });
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_reopens_after_its_leases_are_lost() {
    let zk = shared_ensemble();
    let dir = unique_path("reopen");
    let proxy = zk.proxy().await.unwrap();
    let session = connect(&proxy.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    let states = record_states(&session);
    let first_id = session.id();
    let lease = session.lock(&dir).acquire().await.unwrap();
    let old_node = lease.path().to_string();

    let lost = lease.lost();
    proxy.blackhole();
    let reason = within(3 * T, "the holder hears lost", lost).await;
    let lost_at = Instant::now();
    eventually(
        Duration::from_secs(10),
        "the server expired the session",
        || async { children(&admin, &dir).await.is_empty() },
    )
    .await;
    proxy.heal();
    eventually(
        Duration::from_secs(15),
        "a new zookeeper session",
        || async { session.state() == SessionState::Connected && session.id() != first_id },
    )
    .await;

    // Nothing of the old session looked held once the new one existed.
    let log = states.lock().unwrap().clone();
    let (_, reopened_at, _) = *log
        .iter()
        .find(|(state, _, id)| *state == SessionState::Connected && *id != first_id)
        .unwrap_or_else(|| panic!("no Connected of a new session in {log:?}"));
    assert!(
        lost_at <= reopened_at,
        "lost {:?} after the new session existed ({reason})",
        lost_at - reopened_at
    );
    assert!(
        log.iter()
            .any(|(state, _, _)| *state == SessionState::Expired),
        "the expiry shows in the states: {log:?}"
    );
    assert!(matches!(lease.state(), LeaseState::Lost(_)));
    assert_eq!(lease.session().state(), SessionState::Expired);
    assert_eq!(
        lease.session().id(),
        first_id,
        "a lease keeps its own session"
    );
    let metrics = session.metrics();
    assert_eq!(metrics.expiries, 1);
    assert!(metrics.reopen_attempts >= 1);

    // The same Session acquires again, on the new session, with a larger token; the old node
    // is gone.
    let again = session.lock(&dir).acquire().await.unwrap();
    assert!(again.token() > lease.token());
    assert_eq!(again.session().id(), session.id());
    assert!(admin
        .client()
        .check_stat(&old_node)
        .await
        .unwrap()
        .is_none());
    assert!(matches!(lease.release().await, Err(Error::SessionExpired)));
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_retries_with_backoff_while_the_ensemble_is_down() {
    let zk = own_ensemble(1).await;
    let (initial, max) = (Duration::from_millis(200), Duration::from_millis(800));
    let session = Session::connect(
        &zk.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .connect_timeout(Duration::from_secs(1))
            .reopen_backoff(initial, max),
    )
    .await
    .unwrap();
    let first_id = session.id();
    let lease = session.lock(&unique_path("down")).acquire().await.unwrap();

    let stopped = {
        let zk = &zk;
        tokio::task::block_in_place(|| zk.stop(0));
        Instant::now()
    };
    // The client gives its session up after 1.4 T without a server (zookeeper-client's
    // rule), then the Session tries to open a new one, pausing between attempts.
    eventually(
        Duration::from_secs(10),
        "the session is given up for expired",
        || async { session.metrics().expiries == 1 },
    )
    .await;
    assert!(matches!(lease.state(), LeaseState::Lost(_)));
    eventually(Duration::from_secs(10), "a few attempts fail", || async {
        session.metrics().reopen_attempts >= 4
    })
    .await;
    let expired_for = stopped.elapsed();
    zk.start(0).await.unwrap();
    let started = Instant::now();
    eventually(Duration::from_secs(15), "a new session", || async {
        session.state() == SessionState::Connected && session.id() != first_id
    })
    .await;
    let attempts = session.metrics().reopen_attempts;
    // Pauses of at least 200, 400, 800, 800, ... ms: a busy loop would make hundreds of
    // attempts in this time; the schedule allows one per pause, plus the successful one.
    let window = started.elapsed() + expired_for;
    let mut allowed = 1;
    let (mut pause, mut spent) = (initial, Duration::ZERO);
    while spent < window {
        spent += pause;
        pause = (pause * 2).min(max);
        allowed += 1;
    }
    assert!(
        (4..=allowed).contains(&attempts),
        "{attempts} attempts in {window:?} (backoff allows {allowed})"
    );
    // And it works again: a fresh lock is granted on the new session.
    let fresh = session
        .lock(&unique_path("down-after"))
        .acquire()
        .await
        .unwrap();
    assert_eq!(fresh.session().id(), session.id());
    fresh.release().await.unwrap();
}

/// `close` is cancel safe: a caller that stops waiting at the first pending step (here a
/// zero timeout, while the lease's node is being deleted) still leaves the session closed
/// and the node gone.
#[tokio::test]
async fn a_close_whose_caller_stops_waiting_still_closes() {
    let zk = shared_ensemble();
    let dir = unique_path("close-cancelled");
    let session = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    let lease = session.lock(&dir).acquire().await.unwrap();
    let node = lease.path().to_string();
    let clone = session.clone();
    let cancelled = tokio::time::timeout(Duration::ZERO, session.close()).await;
    assert!(cancelled.is_err(), "close finished without a round trip");
    // Marked closed before the first pending step.
    assert_eq!(clone.state(), SessionState::Closed);
    eventually(
        2 * T,
        "the abandoned close deletes the lease's node",
        || async { admin.client().check_stat(&node).await.unwrap().is_none() },
    )
    .await;
    assert!(matches!(
        clone.lock(&dir).try_acquire().await,
        Err(Error::SessionClosed)
    ));
    drop(lease);
}

#[tokio::test]
async fn close_ends_the_session_at_the_server_and_stops_reopening() {
    let zk = shared_ensemble();
    let dir = unique_path("close");
    let session = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    let id = session.id();
    let lease = session.lock(&dir).acquire().await.unwrap();
    let node = lease.path().to_string();
    let waiter = admin.lock(&dir);
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    until_children(&admin, &dir, 2).await;

    // The lease is told at once and its node deleted, so the waiter is granted; close returns
    // once the server ended the session (the lease, dropped, was the last other handle).
    let lease_session = lease.session().clone();
    let closing = tokio::spawn(session.close());
    let reason = within(T, "the lease hears lost", lease.lost()).await;
    assert_eq!(reason, zkfence::LossReason::SessionClosed);
    let granted = within(T, "the waiter is granted", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(admin.client().check_stat(&node).await.unwrap().is_none());
    // Marked closed before the deletion was sent.
    assert_eq!(lease_session.state(), SessionState::Closed);
    // A closed session opens nothing new.
    assert!(matches!(
        lease_session.lock(&dir).try_acquire().await,
        Err(Error::SessionClosed)
    ));
    drop((lease, lease_session));
    let started = Instant::now();
    within(T, "close returns", closing).await.unwrap();
    assert!(
        started.elapsed() < T,
        "close waited for its timeout, not the server"
    );
    // The server ended the session: a connection of it still listed right after the answer
    // shows the close as its last operation (the server drops the socket just after it
    // answers), and then none is left.
    let listed = || async {
        let mut listed = Vec::new();
        for i in 0..3 {
            let cons = zk.connections(i).await.unwrap();
            listed.extend(cons.into_iter().filter(|c| c.session_id == Some(id)));
        }
        listed
    };
    let left = listed().await;
    assert!(
        left.iter()
            .all(|c| c.last_operation.as_deref() == Some("CLOS")),
        "session {id:#x} still connected, not closed: {left:?}"
    );
    eventually(
        T,
        "the server drops the closed session's connection",
        || async { listed().await.is_empty() },
    )
    .await;
    granted.release().await.unwrap();
}

/// Rejected credentials end the session for good: when the reopen after an expiry is refused
/// (the server's password for the user changed while it was down), the `Session` stops
/// trying instead of retrying forever.
#[cfg(feature = "sasl")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_credentials_stop_the_reopening() {
    let zk = zkfence_testcontainers::Ensemble::builder()
        .nodes(1)
        .tick_time(TICK)
        .sasl_digest_users(&[("alice", "first-password")])
        .start()
        .await
        .unwrap();
    let session = Session::connect(
        &zk.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .connect_timeout(Duration::from_secs(2))
            .reopen_backoff(Duration::from_millis(100), Duration::from_millis(200))
            .sasl_digest("alice", "first-password"),
    )
    .await
    .unwrap();
    let lease = session.lock(&unique_path("auth")).acquire().await.unwrap();

    // Down past 1.4 T, so the client gives the session up; meanwhile alice's password changes.
    tokio::task::block_in_place(|| zk.stop(0));
    eventually(
        Duration::from_secs(10),
        "the session is given up",
        || async { session.metrics().expiries == 1 },
    )
    .await;
    assert!(matches!(lease.state(), LeaseState::Lost(_)));
    let jaas = zk.dir().join("jaas.conf");
    let text = std::fs::read_to_string(&jaas).unwrap();
    std::fs::write(&jaas, text.replace("first-password", "second-password")).unwrap();
    zk.start(0).await.unwrap();

    eventually(
        Duration::from_secs(15),
        "the Session stops reopening",
        || async { !session.reopens() },
    )
    .await;
    let attempts = session.metrics().reopen_attempts;
    assert!(attempts >= 1);
    // No more attempts: ten backoff periods later the count has not moved.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(session.metrics().reopen_attempts, attempts);
    assert_eq!(session.state(), SessionState::Expired);
    assert!(matches!(
        session.lock(&unique_path("auth-after")).try_acquire().await,
        Err(Error::SessionExpired)
    ));
}

/// Issue 21, item 8: `close` marks the session closing before it deletes the leases' nodes,
/// so a waiter of the same session behind one of them is never granted in between (it was:
/// granted, reported `Lost(SessionClosed)` at once, it kept its node and, through its lease,
/// the ZooKeeper session). Its acquire fails with `SessionClosed` and leaves no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_session_grants_nothing_to_its_own_waiters() {
    let zk = shared_ensemble();
    let dir = unique_path("close-own-waiter");
    let session = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    let lease = session.lock(&dir).acquire().await.unwrap();
    let waiter = session.lock(&dir);
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    until_children(&admin, &dir, 2).await;

    let closing = tokio::spawn(session.close());
    let acquired = within(T, "the waiter's acquire ends", waiting)
        .await
        .unwrap();
    let granted = acquired.as_ref().map(|l| l.path().to_string());
    assert!(
        matches!(acquired, Err(Error::SessionClosed)),
        "a waiter of the closing session was granted {granted:?}"
    );
    drop(lease);
    within(2 * T, "close returns", closing).await.unwrap();
    eventually(T, "no node of the closed session is left", || async {
        children(&admin, &dir).await.is_empty()
    })
    .await;
}

/// Issue 21, item 10: after an expiry with reopening off, `state_changed` reports the
/// terminal state once and then says the stream is over, instead of returning at once on
/// every call (a loop on it busy-spun a core, and hung a test binary that panicked meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changed_ends_after_an_expiry_without_reopening() {
    let zk = shared_ensemble();
    let dir = unique_path("no-reopen-states");
    let proxy = zk.proxy().await.unwrap();
    let session = Session::connect(
        &proxy.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .reopen_after_expiry(false),
    )
    .await
    .unwrap();
    let admin = connect(&zk.connect_string(), T).await;
    let lease = session.lock(&dir).acquire().await.unwrap();
    const CAP: u64 = 10_000;
    let follower = tokio::spawn({
        let session = session.clone();
        async move {
            let (mut seen, mut calls) = (vec![], 0u64);
            while calls < CAP {
                calls += 1;
                match session.state_changed().await {
                    Some(state) => seen.push(state),
                    None => break,
                }
            }
            (seen, calls)
        }
    });
    proxy.blackhole();
    eventually(
        Duration::from_secs(10),
        "the server expired the session",
        || async { children(&admin, &dir).await.is_empty() },
    )
    .await;
    proxy.heal();
    let (seen, calls) = within(Duration::from_secs(10), "the state stream ends", follower)
        .await
        .unwrap();
    assert!(
        calls < 10,
        "{calls} calls of state_changed (the loop was capped at {CAP}); states: {:?}",
        &seen[..seen.len().min(8)]
    );
    assert_eq!(seen.last(), Some(&SessionState::Expired), "{seen:?}");
    assert_eq!(session.state(), SessionState::Expired);
    assert!(matches!(lease.state(), LeaseState::Lost(_)));
}
