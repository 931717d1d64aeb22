//! The acquire's requests go out together: the listing right behind the create (one round trip
//! to the grant), the directory's create in front when it is likely missing, and one listing
//! shared by the waiters of a session that enqueue together.
//!
//! Counted at the server: a proxy that lets requests through but holds every answer shows
//! which requests the client sent before it had heard anything back.

mod common;

use std::time::Duration;

use common::*;
use zkfence::zookeeper_client as zk;
use zkfence::{Session, SessionOptions};
use zkfence_testcontainers::{Ensemble, FaultProxy};

/// Long enough that neither the lease clock's keepalive (T/6: 30 s) nor the client's ping
/// falls in the seconds the test runs, even on a loaded machine.
const T: Duration = Duration::from_secs(180);
const CONTAINER_CHECK: Duration = Duration::from_millis(100);

async fn ensemble() -> Ensemble {
    Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(T)
        .container_check_interval(CONTAINER_CHECK)
        .start()
        .await
        .expect("start an ensemble")
}

/// What server 0 has received from `session` so far, and the last operation it processed.
async fn at_server(zk: &Ensemble, session: &Session) -> (u64, Option<String>) {
    let sid = session.client().session_id().0;
    let connection = zk
        .connections(0)
        .await
        .expect("cons")
        .into_iter()
        .find(|c| c.session_id == Some(sid))
        .expect("our connection at server 0");
    (connection.received, connection.last_operation)
}

/// Holds the answers, starts an acquire of `dir`, and returns the requests server 0 received
/// from it before any answer could reach it, and the last one's operation. The acquire is
/// then dropped (its node goes in the background, checked by the caller).
async fn sent_before_any_answer(
    zk: &Ensemble,
    proxy: &FaultProxy,
    session: &Session,
    dir: &str,
    want: u64,
) -> (u64, Option<String>) {
    let (before, _) = at_server(zk, session).await;
    proxy.hold_responses();
    let lock = session.lock(dir);
    let acquire = tokio::spawn(async move { lock.acquire().await });
    // Polled until the server has received as many as we expect and processed the listing
    // (the server counts a request when it arrives, names it once processed); the old
    // sequential acquire stays at one (its create) until the deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut seen = at_server(zk, session).await;
    while (seen.0 < before + want || seen.1.as_deref() != Some("GETC"))
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = at_server(zk, session).await;
    }
    acquire.abort();
    proxy.heal();
    (seen.0 - before, seen.1)
}

async fn until_gone(session: &Session, path: &str) {
    eventually(
        Duration::from_secs(10),
        &format!("{path} removed"),
        || async {
            let _ = session.client().sync(path).await;
            session
                .client()
                .check_stat(path)
                .await
                .ok()
                .flatten()
                .is_none()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_sends_its_listing_behind_its_create_and_the_directory_in_front_when_likely_missing(
) {
    let zk = ensemble().await;
    let proxy = zk.proxy_to(&[0]).await.unwrap();
    let session = Session::connect(
        &proxy.connect_string(),
        SessionOptions::new().session_timeout(T),
    )
    .await
    .unwrap();
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let parent = unique_path("pipelining");
    observer
        .client()
        .mkdir(
            &parent,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();

    // A directory this session never saw: its create goes in front, the listing behind.
    let fresh = format!("{parent}/fresh");
    let (requests, last) = sent_before_any_answer(&zk, &proxy, &session, &fresh, 3).await;
    assert_eq!(
        (requests, last.as_deref()),
        (3, Some("GETC")),
        "a never-seen directory: want its create, the node's create and the listing sent before any answer"
    );
    eventually(
        Duration::from_secs(10),
        "the dropped acquire's node deleted",
        || async { children(&observer, &fresh).await.is_empty() },
    )
    .await;

    // A hot lock: its directory exists and was just used, so no directory create, and the
    // listing goes right behind the node's create.
    let hot = format!("{parent}/hot");
    // Released and answered before counting: a dropped lease deletes its node in the
    // background, and that delete would be counted as ours.
    session
        .lock(&hot)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let (requests, last) = sent_before_any_answer(&zk, &proxy, &session, &hot, 2).await;
    assert_eq!(
        (requests, last.as_deref()),
        (2, Some("GETC")),
        "a hot lock: want the node's create and the listing sent before any answer, no directory create"
    );

    // A lock whose directory the container check removed while it was idle: the first time,
    // the create finds it missing (the session learns how soon the server removes them); after
    // the next removal, its create goes in front again.
    let idle = format!("{parent}/idle");
    let first = tokio::time::Instant::now();
    drop(session.lock(&idle).acquire().await.unwrap());
    until_gone(&observer, &idle).await;
    let second = tokio::time::Instant::now();
    drop(session.lock(&idle).acquire().await.unwrap());
    until_gone(&observer, &idle).await;
    // Idle at least as long as before the removal the session learned from (it takes half of
    // that as the time after which a directory is likely gone).
    tokio::time::sleep_until(second + (second - first)).await;
    let (requests, last) = sent_before_any_answer(&zk, &proxy, &session, &idle, 3).await;
    assert_eq!(
        (requests, last.as_deref()),
        (3, Some("GETC")),
        "a directory seen removed while idle: want its create in front of the node's create and the listing"
    );
    eventually(Duration::from_secs(10), "no node left", || async {
        children(&observer, &idle).await.is_empty() && children(&observer, &hot).await.is_empty()
    })
    .await;
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_enqueue_together_share_listings_and_a_deep_queue_drains_without_listing_again(
) {
    const SESSIONS: usize = 4;
    const WAITERS: usize = 200;
    let zk = shared_ensemble();
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(connect(&zk.connect_string(), Duration::from_secs(4)).await);
    }
    let listings =
        |sessions: &[Session]| -> u64 { sessions.iter().map(|s| s.metrics().listings).sum() };
    let watches =
        |sessions: &[Session]| -> u64 { sessions.iter().map(|s| s.metrics().watches).sum() };
    let dir = unique_path("shared-listing");
    let holder = sessions[0].lock(&dir).acquire().await.unwrap();
    let (listings_before, watches_before) = (listings(&sessions), watches(&sessions));
    let (granted_tx, mut granted_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let lock = sessions[i % SESSIONS].lock(&dir);
        let granted = granted_tx.clone();
        waiters.push(tokio::spawn(async move {
            let lease = lock.acquire().await.unwrap();
            granted.send(lease.token()).unwrap();
            // Released at once: the next waiter's turn.
            drop(lease);
        }));
    }
    // Every waiter sets one watch once it has read where it stands.
    eventually(Duration::from_secs(30), "every waiter queued", || async {
        watches(&sessions) - watches_before >= WAITERS as u64
    })
    .await;
    let enqueue_listings = listings(&sessions) - listings_before;
    assert!(
        enqueue_listings <= WAITERS as u64 / 4,
        "{WAITERS} waiters on {SESSIONS} sessions enqueued together listed the directory {enqueue_listings} times: want at most {} (shared listings)",
        WAITERS / 4
    );
    drop(holder);
    let mut tokens = Vec::new();
    for _ in 0..WAITERS {
        let token = within(
            Duration::from_secs(60),
            "every waiter granted",
            granted_rx.recv(),
        )
        .await
        .unwrap();
        tokens.push(token);
    }
    let drain_listings = listings(&sessions) - listings_before - enqueue_listings;
    eprintln!("{WAITERS} waiters on {SESSIONS} sessions: {enqueue_listings} listings to enqueue, {drain_listings} to drain");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "grants in queue order (tokens ascending)"
    );
    assert!(
        drain_listings <= WAITERS as u64 / 4,
        "draining {WAITERS} waiters in order listed the queue {drain_listings} times: want at most {} (the few nodes ahead checked instead)",
        WAITERS / 4
    );
    for w in waiters {
        w.await.unwrap();
    }
    eventually(Duration::from_secs(10), "no node left", || async {
        children(&sessions[0], &dir).await.is_empty()
    })
    .await;
}

/// A deep waiter woken because the node it watched left (not released by a holder) checks the
/// few nodes its session knows are still ahead of it, in one round trip, instead of listing
/// the queue again: those nodes must be the real ones. Named wrongly (the session keeps its
/// deep listing compactly and writes the names back), they would all look gone and the
/// waiter would be granted while the holder still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_waiter_whose_predecessor_left_is_not_granted_while_others_are_ahead() {
    // Deeper than the queues a session keeps (32), with every waiter on one session, so
    // that session keeps its latest listing; the holder on a session of its own.
    const WAITERS: usize = 40;
    let zk = shared_ensemble();
    let holder_session = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let session = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let dir = unique_path("deep-leaver");
    let holder = holder_session.lock(&dir).acquire().await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let lock = session.lock(&dir);
        waiters.push(tokio::spawn(async move { lock.acquire().await }));
        // One at a time, so the queue's order is the order here.
        until_children(&holder_session, &dir, i + 2).await;
    }
    eventually(Duration::from_secs(10), "every waiter watching", || async {
        session.metrics().watches >= WAITERS as u64
    })
    .await;
    let (watches, wakeups) = (session.metrics().watches, session.metrics().wakeups);

    // The second waiter leaves: the third, woken, has the holder and the first ahead.
    waiters[1].abort();
    eventually(
        Duration::from_secs(10),
        "the third waiter woken, then watching again or granted",
        || async {
            let m = session.metrics();
            m.wakeups > wakeups && (m.watches > watches || waiters[2].is_finished())
        },
    )
    .await;
    assert!(
        !waiters[2].is_finished(),
        "the third waiter was granted while the holder and the first waiter were ahead of it"
    );
    assert!(
        !waiters[0].is_finished(),
        "the first waiter was granted while the holder holds"
    );
    holder.release().await.unwrap();
    let first = within(
        Duration::from_secs(10),
        "the first waiter granted",
        &mut waiters[0],
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        !waiters[2].is_finished(),
        "the third waiter must wait for the first"
    );
    first.release().await.unwrap();
    within(
        Duration::from_secs(10),
        "the third waiter granted",
        &mut waiters[2],
    )
    .await
    .unwrap()
    .unwrap()
    .release()
    .await
    .unwrap();
    for waiter in waiters.into_iter().skip(3) {
        waiter.abort();
    }
    eventually(Duration::from_secs(10), "no node left", || async {
        children(&holder_session, &dir).await.is_empty()
    })
    .await;
}
