//! The lock's behaviour without faults: exclusion, FIFO, no herd, cancellation, fencing,
//! renewal, and bad input. All on one shared 3-node ensemble, each test under its own path.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tokio::sync::mpsc;
use zkfence::zookeeper_client as zk;
use zkfence::{
    Error, Fence, FencedOp, FencingToken, LeaseState, LossReason, Session, SessionOptions,
};

const T: Duration = Duration::from_secs(4);
/// Generous bound for a step of a few round trips: a broken build fails instead of hanging.
const STEP: Duration = Duration::from_secs(10);

async fn session() -> Session {
    connect(&shared_ensemble().connect_string(), T).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_contention() {
    let dir = unique_path("mutex");
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    // Every holder checks, through this session's listing after a write, that the server has
    // its node at the head of the queue. That is also two round trips held inside the
    // critical section, long enough for a wrong grant elsewhere to overlap them.
    let admin = session().await;
    let barrier = unique_path("mutex-barrier");
    admin
        .client()
        .mkdir(
            &barrier,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let mut tasks = vec![];
    for _ in 0..8 {
        let s = session().await;
        let (dir, inside, max_inside, grants, admin, barrier) = (
            dir.clone(),
            inside.clone(),
            max_inside.clone(),
            grants.clone(),
            admin.clone(),
            barrier.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let lock = s.lock(&dir);
            for _ in 0..50 {
                let lease = lock.acquire().await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max_inside.fetch_max(now, Ordering::SeqCst);
                grants.lock().unwrap().push(lease.token());
                // A write through the ZooKeeper leader first: it is ordered after every
                // commit this grant could rest on, so the listing after it shows them. (A
                // `sync` was seen not to: once in ~10 runs the synced listing still had the
                // previous holder's node, gone when looked at again.)
                admin.client().set_data(&barrier, b"", None).await.unwrap();
                let queue = queue_order(children(&admin, &dir).await);
                if queue.first().map(String::as_str) != Some(name_of(lease.path())) {
                    // Say enough to tell a wrong grant from a stale listing.
                    let head = queue.first().cloned().unwrap_or_default();
                    let owner = admin
                        .client()
                        .check_stat(&format!("{dir}/{head}"))
                        .await
                        .map(|s| s.map(|s| format!("{:#x}", s.ephemeral_owner)));
                    let again = queue_order(children(&admin, &dir).await);
                    panic!(
                        "a holder ({}, session {:#x}) whose node is not first in the server's \
                         queue {queue:?}; the head's owner: {owner:?}; inside: {}; listed \
                         again: {again:?}",
                        name_of(lease.path()),
                        s.id(),
                        inside.load(Ordering::SeqCst),
                    );
                }
                let now = inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(now, 1, "another holder entered during the round trip");
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within(Duration::from_secs(120), "400 acquisitions", t)
            .await
            .unwrap();
    }
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two holders were inside at once"
    );
    let grants = grants.lock().unwrap();
    assert_eq!(grants.len(), 400);
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase in grant order"
    );
}

#[tokio::test]
async fn waiters_are_granted_in_enqueue_order() {
    let dir = unique_path("fifo");
    let observer = session().await;
    let holder = observer.lock(&dir).acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..5 {
        let s = session().await;
        let (d, tx) = (dir.clone(), tx.clone());
        tokio::spawn(async move {
            let lease = s.lock(&d).acquire().await.unwrap();
            tx.send((i, lease.token())).unwrap();
            lease.release().await.unwrap();
        });
        // Enqueue one at a time, so the enqueue order is known.
        until_children(&observer, &dir, i + 2).await;
    }
    holder.release().await.unwrap();
    let mut order = vec![];
    for _ in 0..5 {
        order.push(within(STEP, "the next grant", rx.recv()).await.unwrap());
    }
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_exactly_one_of_100_waiters() {
    let dir = unique_path("herd");
    let holder_session = session().await;
    let holder = holder_session.lock(&dir).acquire().await.unwrap();
    let sessions: Vec<Session> = futures_join(10).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..100 {
        let s = sessions[i % 10].clone();
        let (dir, tx) = (dir.clone(), tx.clone());
        tokio::spawn(async move {
            let lease = s.lock(&dir).acquire().await.unwrap();
            tx.send((i, lease)).unwrap();
        });
    }
    let sum = |f: fn(&zkfence::SessionMetrics) -> u64| {
        sessions.iter().map(|s| f(&s.metrics())).sum::<u64>()
    };
    eventually(
        Duration::from_secs(20),
        "all 100 waiters watching",
        || async { sessions.iter().map(|s| s.metrics().watches).sum::<u64>() >= 100 },
    )
    .await;
    let (wakeups, listings) = (sum(|m| m.wakeups), sum(|m| m.listings));
    assert_eq!(wakeups, 0);

    holder.release().await.unwrap();
    let (_, first) = within(STEP, "the first waiter's grant", rx.recv())
        .await
        .unwrap();
    // Let any stray notification arrive: a sync on each session is answered after every
    // notification the delete caused on that session's server.
    holder_session.client().sync("/").await.unwrap();
    for s in &sessions {
        s.client().sync("/").await.unwrap();
    }
    assert_eq!(
        sum(|m| m.wakeups) - wakeups,
        1,
        "one release must wake exactly one waiter"
    );
    assert_eq!(
        sum(|m| m.listings) - listings,
        0,
        "the woken waiter was next in line: no re-listing"
    );

    // The second release, too. Its waiter was third when it listed, so it cannot tell a
    // release from an abandoned wait ahead of it: it reads the nodes its session knows may
    // be ahead, or lists once more — it alone.
    let (wakeups, listings) = (sum(|m| m.wakeups), sum(|m| m.listings));
    first.release().await.unwrap();
    let (_, second) = within(STEP, "the second waiter's grant", rx.recv())
        .await
        .unwrap();
    for s in &sessions {
        s.client().sync("/").await.unwrap();
    }
    assert_eq!(
        sum(|m| m.wakeups) - wakeups,
        1,
        "one release must wake exactly one waiter"
    );
    assert!(
        sum(|m| m.listings) - listings <= 1,
        "only the woken waiter may list again"
    );
    drop(second);
    // Drain: every waiter is granted in turn.
    for _ in 0..98 {
        let (_, lease) = within(STEP, "the next grant", rx.recv()).await.unwrap();
        lease.release().await.unwrap();
    }
}

async fn futures_join(n: usize) -> Vec<Session> {
    let mut out = vec![];
    for _ in 0..n {
        out.push(session().await);
    }
    out
}

#[tokio::test]
async fn a_waiter_leaving_the_middle_does_not_let_the_next_one_in() {
    let dir = unique_path("middle");
    let s = session().await;
    let holder = s.lock(&dir).acquire().await.unwrap();
    let (w1s, w2s, w3s) = (session().await, session().await, session().await);
    let d = dir.clone();
    let w1 = tokio::spawn(async move { w1s.lock(&d).acquire().await.unwrap() });
    until_children(&s, &dir, 2).await;
    let d = dir.clone();
    let w2 = tokio::spawn(async move { w2s.lock(&d).acquire().await });
    until_children(&s, &dir, 3).await;
    let d = dir.clone();
    let w3_session = w3s.clone();
    let w3 = tokio::spawn(async move { w3s.lock(&d).acquire().await.unwrap() });
    until_children(&s, &dir, 4).await;
    eventually(Duration::from_secs(5), "w3 watching", || async {
        w3_session.metrics().watches == 1
    })
    .await;

    w2.abort(); // w2 leaves from the middle
    until_children(&s, &dir, 3).await;
    // w3 is woken, looks again and watches w1 instead.
    eventually(
        Duration::from_secs(5),
        "w3 re-listed and watches w1",
        || async {
            let m = w3_session.metrics();
            m.wakeups == 1 && m.watches == 2
        },
    )
    .await;
    assert!(
        !w3.is_finished(),
        "w3 must not be granted while the holder holds"
    );
    assert!(!w1.is_finished());
    holder.release().await.unwrap();
    let l1 = within(STEP, "w1 granted", w1).await.unwrap();
    assert!(!w3.is_finished(), "w3 must wait for w1");
    let t1 = l1.token();
    l1.release().await.unwrap();
    let l3 = within(STEP, "w3 granted", w3).await.unwrap();
    assert!(l3.token() > t1);
}

#[tokio::test]
async fn cancelled_acquires_and_timeouts_leave_no_node() {
    let dir = unique_path("cancel");
    let s = session().await;
    let holder = s.lock(&dir).acquire().await.unwrap();
    let waiter = session().await;

    // Dropped at once: the create may or may not have been answered yet.
    for _ in 0..5 {
        let lock = waiter.lock(&dir);
        let task = tokio::spawn(async move { lock.acquire().await });
        task.abort();
        let _ = within(STEP, "the aborted task ends", task).await;
    }
    // Dropped while waiting.
    let lock = waiter.lock(&dir);
    let task = tokio::spawn(async move { lock.acquire().await });
    until_children(&s, &dir, 2).await;
    task.abort();
    eventually(
        Duration::from_secs(10),
        "only the holder remains",
        || async { children(&s, &dir).await.len() == 1 },
    )
    .await;

    // A timeout removes the node before it returns.
    let err = waiter
        .lock(&dir)
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    match &err {
        Error::Timeout {
            ahead,
            holder: Some(h),
            ..
        } => {
            assert_eq!(*ahead, 1);
            // The structured holder: its node, token, session and owner.
            assert_eq!(h.node, holder.path(), "{h}");
            assert_eq!(h.token, holder.token(), "{h}");
            assert_eq!(h.session_id, s.id(), "{h}");
            assert_eq!(
                h.owner.pid,
                Some(std::process::id()),
                "names the owner: {h}"
            );
            assert!(err.to_string().contains(&format!("held by {h}")), "{err}");
        }
        other => panic!("expected a timeout, got {other}"),
    }
    assert_eq!(
        children(&s, &dir).await.len(),
        1,
        "the timed-out waiter's node must be gone on return"
    );
    holder.release().await.unwrap();
    assert!(children(&s, &dir).await.is_empty());
}

/// A timeout that falls before the acquire's first look at the queue (shorter than a round
/// trip) still says how many are ahead and who holds: read when it gives up, not left at
/// "0 ahead" because it never looked.
#[tokio::test]
async fn a_timeout_before_the_first_look_still_counts_who_is_ahead() {
    let dir = unique_path("timeout-before-look");
    let s = session().await;
    let holder = s.lock(&dir).acquire().await.unwrap();
    let waiter = session().await;
    for round in 0..5 {
        let err = waiter
            .lock(&dir)
            .acquire_timeout(Duration::from_micros(50))
            .await
            .unwrap_err();
        match &err {
            Error::Timeout {
                ahead,
                holder: Some(h),
                ..
            } => {
                assert_eq!(*ahead, 1, "round {round}: {err}");
                assert_eq!(h.node, holder.path(), "round {round}: {err}");
            }
            other => panic!("round {round}: expected a timeout naming the holder, got {other}"),
        }
        until_children(&s, &dir, 1).await;
    }
    holder.release().await.unwrap();
}

/// The hardest case behind "no orphaned nodes": the acquire is cancelled while its create is
/// at the server but its answer has not come back, so the acquire cannot know its node's
/// name. The proxy holds the answers back; the node is seen on the server first, then the
/// acquire is aborted, then the connection heals (the held one is closed, the session
/// reconnects). The cancelled acquire's node must go, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cancelled_while_its_create_is_in_flight_leaves_no_node() {
    let zk = shared_ensemble();
    let dir = unique_path("cancel-in-flight");
    let admin = session().await;
    let holder = admin.lock(&dir).acquire().await.unwrap();
    let holder_name = name_of(holder.path()).to_string();
    let proxy = zk.proxy().await.unwrap();
    let waiter = connect(&proxy.connect_string(), T).await;
    for round in 0..4 {
        proxy.hold_responses();
        let lock = waiter.lock(&dir);
        let task = tokio::spawn(async move { lock.acquire().await });
        eventually(
            STEP,
            &format!("round {round}: the create reached the server"),
            || async { children(&admin, &dir).await.len() == 2 },
        )
        .await;
        assert!(
            !task.is_finished(),
            "round {round}: the acquire returned without the create's answer"
        );
        task.abort();
        let joined = within(STEP, "the aborted acquire ends", task).await;
        assert!(
            joined.as_ref().is_err_and(|e| e.is_cancelled()),
            "round {round}: the acquire was not cancelled: {:?}",
            joined.map(|r| r.map(|l| l.path().to_string()))
        );
        proxy.heal();
        eventually(
            STEP,
            &format!("round {round}: the cancelled acquire's node is deleted"),
            || async { children(&admin, &dir).await == [holder_name.clone()] },
        )
        .await;
        assert_eq!(
            waiter.state(),
            zkfence::SessionState::Connected,
            "round {round}: deleted by the cleanup, not by an expiry"
        );
    }
    // Nothing of the waiter's turns up later either (a late-committed create would).
    let waiter_id = waiter.id();
    for name in children(&admin, &dir).await {
        let stat = admin
            .client()
            .check_stat(&format!("{dir}/{name}"))
            .await
            .unwrap();
        assert_ne!(stat.map(|s| s.ephemeral_owner), Some(waiter_id), "{name}");
    }
    holder.release().await.unwrap();
    assert!(children(&admin, &dir).await.is_empty());
}

#[tokio::test]
async fn try_acquire_never_waits() {
    let dir = unique_path("try");
    let (a, b) = (session().await, session().await);
    let lease = a
        .lock(&dir)
        .try_acquire()
        .await
        .unwrap()
        .expect("free lock");
    // b's server has seen the holder (it may be a follower a little behind the leader; one
    // that has not yet sees a free lock, and the create and listing behind it decide).
    eventually(STEP, "b's server lists the holder", || async {
        children(&b, &dir).await.len() == 1
    })
    .await;
    let creates = b.metrics().creates;
    assert!(b.lock(&dir).try_acquire().await.unwrap().is_none());
    assert_eq!(
        b.metrics().creates,
        creates,
        "a taken lock is answered without writing"
    );
    lease.release().await.unwrap();
    let lease = b
        .lock(&dir)
        .try_acquire()
        .await
        .unwrap()
        .expect("free again");
    lease.release().await.unwrap();
    assert!(children(&a, &dir).await.is_empty());
}

#[tokio::test]
async fn deleting_our_node_loses_the_lease() {
    let dir = unique_path("deleted");
    let (a, admin) = (session().await, session().await);
    let lease = a.lock(&dir).acquire().await.unwrap();
    let lost = lease.lost();
    tokio::pin!(lost);
    // Start watching before the deletion.
    assert!(tokio::time::timeout(Duration::from_millis(100), &mut lost)
        .await
        .is_err());
    admin.client().delete(lease.path(), None).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() resolves");
    assert_eq!(reason, LossReason::NodeDeleted);
    assert_eq!(lease.state(), LeaseState::Lost(LossReason::NodeDeleted));
    assert!(matches!(
        lease.renew().await,
        Err(Error::LockLost {
            reason: LossReason::NodeDeleted,
            ..
        })
    ));
}

#[tokio::test]
async fn renew_confirms_and_extends_valid_until() {
    // The rule (see the lease clock's docs): an answered sync sent at s vouches for the
    // touches sent at least T/4 + slack before s, until touch + T - slack.
    let slack = T / 20;
    let lag = T / 4 + slack;
    let dir = unique_path("renew");
    let (a, admin) = (session().await, session().await);
    let lease = a.lock(&dir).acquire().await.unwrap();
    let before = lease.valid_until().unwrap();
    // A touch (a read) at a known time, then a renew sent more than the report lag later.
    // Every request of the read is sent in [touched, read_done]; the renew is sent more than
    // the report lag after read_done, so the latest of them is vouched for however slowly the
    // read ran (CI once took longer than a fixed allowance measured from `touched`).
    let touched = tokio::time::Instant::now();
    a.lock(&dir).contenders().await.unwrap();
    let read_done = tokio::time::Instant::now();
    tokio::time::sleep_until(read_done + lag + Duration::from_millis(20)).await;
    let keepalives = a.metrics().keepalives;
    let renewed = lease.renew().await.unwrap();
    let answered = tokio::time::Instant::now();
    assert!(renewed > before, "renew must extend valid_until");
    assert_eq!(lease.valid_until(), Some(renewed));
    // Lower bound: the read's touch is proven. Upper bound: no proof newer than now, so
    // nothing newer than now - lag is vouched for.
    assert!(
        renewed >= touched + T - slack,
        "the touch sent before the renew is vouched for"
    );
    assert!(
        renewed <= answered - lag + T - slack,
        "valid_until {:?} beyond what a proof sent by now can vouch for ({:?})",
        renewed - touched,
        answered - lag + T - slack - touched
    );
    assert_eq!(
        a.metrics().keepalives,
        keepalives,
        "renew is its own round trip"
    );
    admin.client().delete(lease.path(), None).await.unwrap();
    let err = lease.renew().await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    assert_eq!(lease.valid_until(), None);
}

#[tokio::test]
async fn fenced_writes_stop_when_the_lease_is_lost() {
    let dir = unique_path("fenced");
    let data = unique_path("fenced-data");
    let (a, admin) = (session().await, session().await);
    admin
        .client()
        .mkdir(
            &data,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let lease = a.lock(&dir).acquire().await.unwrap();
    let token = lease.token().get().to_string();
    lease
        .fenced_write(&[FencedOp::SetData {
            path: data.clone(),
            data: token.clone().into_bytes(),
            version: None,
        }])
        .await
        .unwrap();
    admin.client().sync(&data).await.unwrap();
    assert_eq!(
        admin.client().get_data(&data).await.unwrap().0,
        token.as_bytes()
    );

    admin.client().delete(lease.path(), None).await.unwrap();
    let err = lease
        .fenced_write(&[FencedOp::SetData {
            path: data.clone(),
            data: b"stale".to_vec(),
            version: None,
        }])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LockLost {
                reason: LossReason::NodeDeleted,
                ..
            }
        ),
        "{err}"
    );
    admin.client().sync(&data).await.unwrap();
    assert_eq!(
        admin.client().get_data(&data).await.unwrap().0,
        token.as_bytes(),
        "the stale write must not land"
    );
}

#[tokio::test]
async fn fence_rejects_a_stale_holder() {
    let dir = unique_path("fence");
    let (a, b) = (session().await, session().await);
    let fence = Fence::new();
    let old = a.lock(&dir).acquire().await.unwrap();
    let old_token = old.token();
    fence.admit(old_token).unwrap();
    drop(old);
    let new = b.lock(&dir).acquire().await.unwrap();
    fence.admit(new.token()).unwrap();
    let stale = fence.admit(old_token).unwrap_err();
    assert_eq!(stale.newest, new.token());
    assert!(stale.to_string().contains("stale fencing token"));
    assert!(old_token < new.token());
    assert_eq!(fence.newest(), new.token());
    assert!(fence
        .admit(FencingToken::new(new.token().get() + 1))
        .is_ok());
}

#[tokio::test]
async fn second_acquire_on_a_held_handle_fails_at_once_and_release_works_from_another_task() {
    let dir = unique_path("again");
    let a = session().await;
    let lock = a.lock(&dir);
    let lease = lock.acquire().await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(1), lock.acquire())
        .await
        .expect("no self-deadlock");
    assert!(matches!(err, Err(Error::AlreadyHeld { .. })));
    assert!(matches!(
        lock.try_acquire().await,
        Err(Error::AlreadyHeld { .. })
    ));
    within(
        STEP,
        "release from another task",
        tokio::spawn(async move { lease.release().await }),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(children(&a, &dir).await.is_empty());
    // The handle can acquire again once released.
    lock.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn bad_input_gives_clear_errors_and_leaves_nothing() {
    let s = session().await;
    for bad in [
        "",
        "locks/x",
        "/locks/x/",
        "//x",
        "/a//b",
        "/a\0b",
        "/zookeeper/x",
    ] {
        let err = s.lock(bad).acquire().await.unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{bad:?}: {err}");
        assert!(err.to_string().contains("invalid path"), "{err}");
    }
    let long = format!("/{}", "x".repeat(2000));
    assert!(matches!(
        s.lock(&long).acquire().await,
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        s.election("rel").campaign("x").await,
        Err(Error::InvalidPath { .. })
    ));

    // A missing chroot.
    let cs = format!(
        "{}/no-such-chroot-{}",
        shared_ensemble().connect_string(),
        uuid::Uuid::new_v4().simple()
    );
    let err = Session::connect(&cs, SessionOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ChrootMissing { .. }), "{err}");

    // An unreachable ensemble: a port nobody listens on. A clear error within the timeout.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let err = Session::connect(
        &format!("127.0.0.1:{port}"),
        SessionOptions::new().connect_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap_err();
    match &err {
        Error::ConnectFailed { servers, .. } => assert_eq!(
            servers,
            &[zkfence::ServerFailure {
                server: format!("127.0.0.1:{port}"),
                reason: zkfence::ConnectFailure::Refused,
            }],
            "{err}"
        ),
        other => panic!("expected ConnectFailed, got {other}"),
    }
    // A server that takes the TCP connection but never answers, and a name that does not
    // resolve: each named, at the connect timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_at = silent.local_addr().unwrap().to_string();
    let err = Session::connect(
        &format!("{silent_at},nosuchhost.invalid:2181"),
        SessionOptions::new().connect_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap_err();
    match &err {
        Error::ConnectFailed { servers, .. } => {
            let reasons: Vec<_> = servers.iter().map(|s| s.reason.clone()).collect();
            assert_eq!(
                reasons,
                [
                    zkfence::ConnectFailure::TimedOut,
                    zkfence::ConnectFailure::UnknownHost
                ],
                "{err}"
            );
        }
        other => panic!("expected ConnectFailed, got {other}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("check that the ensemble runs"));

    // An ACL that denies us create: a clear error, nothing created.
    let dir = unique_path("acl");
    let read_only = [zk::Acl::new(
        zk::Permission::READ,
        zk::AuthId::new("world", "anyone"),
    )];
    s.client()
        .mkdir(
            &dir,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&read_only)),
        )
        .await
        .unwrap();
    let err = s.lock(&dir).acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoAuth {
                operation: "create",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("SessionOptions::auth"));
    assert!(children(&s, &dir).await.is_empty());

    // A lock directory under an ephemeral node cannot exist.
    let eph = unique_path("eph");
    s.client()
        .mkdir(
            &parent_of(&eph),
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    s.client()
        .create(
            &eph,
            b"",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let err = s.lock(&format!("{eph}/lock")).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
}

fn parent_of(path: &str) -> String {
    path[..path.rfind('/').unwrap()].to_string()
}

#[tokio::test]
async fn digest_auth_and_creator_acls() {
    let dir = unique_path("digest");
    let owner = Session::connect(
        &shared_ensemble().connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .auth("digest", b"alice:secret"),
    )
    .await
    .unwrap();
    let lease = owner.lock(&dir).acquire().await.unwrap();
    // The directory alice created carries creator-only ACLs: another identity cannot queue …
    let stranger = session().await;
    let err = stranger.lock(&dir).acquire().await.unwrap_err();
    assert!(matches!(err, Error::NoAuth { .. }), "{err}");
    // … and alice can release.
    lease.release().await.unwrap();
}

#[tokio::test]
async fn contenders_show_holder_then_waiters_with_owner_data() {
    let dir = unique_path("status");
    let (a, b) = (session().await, session().await);
    let lease = a.lock(&dir).with_id("alpha").acquire().await.unwrap();
    let lock_b = b.lock(&dir).with_id("beta");
    let waiting = tokio::spawn(async move { lock_b.acquire().await.map(|l| l.token()) });
    until_children(&a, &dir, 2).await;
    let c = a.lock(&dir).contenders().await.unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].owner.id.as_deref(), Some("alpha"));
    assert_eq!(c[0].session_id, a.id());
    assert_eq!(c[0].token, lease.token());
    assert_eq!(c[1].owner.id.as_deref(), Some("beta"));
    assert_eq!(c[1].session_id, b.id());
    assert_eq!(c[0].owner.pid, Some(std::process::id()));
    lease.release().await.unwrap();
    assert!(
        within(STEP, "beta granted", waiting)
            .await
            .unwrap()
            .unwrap()
            > c[0].token
    );
}

#[tokio::test]
async fn a_deleted_lock_directory_is_a_clear_error() {
    let dir = unique_path("dir-deleted");
    let (holder_session, waiters, admin) = (session().await, session().await, session().await);
    let holder = holder_session.lock(&dir).acquire().await.unwrap();
    let middle = waiters.lock(&dir);
    let _middle = tokio::spawn(async move { middle.acquire().await });
    until_children(&admin, &dir, 2).await;
    let last = waiters.lock(&dir);
    let last = tokio::spawn(async move { last.acquire().await });
    until_children(&admin, &dir, 3).await;

    // An operator removes the whole queue and the directory, in one transaction, so the
    // woken waiter cannot look before the directory is gone.
    let client = admin.client();
    let mut writer = client.new_multi_writer();
    for n in children(&admin, &dir).await {
        writer.add_delete(&format!("{dir}/{n}"), None).unwrap();
    }
    writer.add_delete(&dir, None).unwrap();
    writer.commit().await.unwrap();

    let err = tokio::time::timeout(Duration::from_secs(5), last)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::LockDirectoryDeleted { .. }), "{err}");
    assert!(err.to_string().contains("acquire again"), "{err}");
    drop(holder);
}

/// A loopback relay to `server` that passes the handshake of each connection (its first two
/// answers) and throws every later answer away: the server gets every request, the client
/// hears nothing after the handshake.
async fn answers_only_the_handshake(server: std::net::SocketAddr) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
                continue;
            };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = upstream.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
            });
            tokio::spawn(async move {
                // The session's answer and that of the ping the client sends right after it
                // (its connect waits for both); each a 4-byte big-endian length, then that
                // many bytes.
                for _ in 0..2 {
                    let mut len = [0u8; 4];
                    if server_read.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
                    if server_read.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let _ = client_write.write_all(&len).await;
                    let _ = client_write.write_all(&frame).await;
                }
                let _ = tokio::io::copy(&mut server_read, &mut tokio::io::sink()).await;
                drop(client_write);
            });
        }
    });
    addr
}

/// Issue 21, item 9: every step of `connect` counts against its one connect timeout, the
/// chroot check after the handshake included (it had no timeout of its own: with answers
/// lost after the handshake, connect waited until the connection broke).
#[tokio::test]
async fn connect_with_a_chroot_keeps_its_timeout_when_answers_stop_after_the_handshake() {
    let zk = shared_ensemble();
    let server: std::net::SocketAddr = zk
        .connect_string()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let relay = answers_only_the_handshake(server).await;
    let connect_timeout = Duration::from_secs(1);
    let started = tokio::time::Instant::now();
    let result = within(
        Duration::from_secs(20),
        "connect returns",
        Session::connect(
            &format!("{relay}/chroot-{}", uuid::Uuid::new_v4().simple()),
            SessionOptions::new()
                .session_timeout(T)
                .connect_timeout(connect_timeout),
        ),
    )
    .await;
    let took = started.elapsed();
    assert!(
        took < connect_timeout + Duration::from_millis(300),
        "connect with a {connect_timeout:?} timeout returned after {took:?}: {result:?}"
    );
    assert!(
        matches!(result, Err(Error::ConnectFailed { .. })),
        "{result:?}"
    );
}

/// Waiting for a lease's loss costs nothing while the lease holds: the session's commits renew
/// its lease clock (it moves up to once a millisecond on a busy session), and a waiter woken
/// by each renewal would cost every holder that watches its lease a task wake-up each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_loss_is_not_woken_by_renewals() {
    use std::future::Future;
    use std::task::{Context, Poll};

    struct CountWakes(AtomicUsize);
    impl futures::task::ArcWake for CountWakes {
        fn wake_by_ref(me: &Arc<Self>) {
            me.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    let s = session().await;
    let held = within(STEP, "acquire", s.lock(&unique_path("watched")).acquire())
        .await
        .unwrap();
    let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
    let waker = futures::task::waker(wakes.clone());
    let mut lost = Box::pin(held.lost());
    assert!(matches!(
        lost.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Pending
    ));
    // Cycles of another lock on the same session, each with two commits, until they have
    // renewed the clock ten times (it moves when a proof vouches for a newer touch, at most
    // about once a millisecond).
    let busy = s.lock(&unique_path("busy"));
    let (mut cycles, mut renewals) = (0, 0);
    let mut until = s.valid_until().expect("held");
    within(STEP, "ten renewals of the clock by the cycles", async {
        while renewals < 10 {
            busy.acquire().await.unwrap().release().await.unwrap();
            cycles += 1;
            let now = s.valid_until().expect("held");
            if now > until {
                (renewals, until) = (renewals + 1, now);
            }
            // Polled again after each cycle, as a runtime would after a wake-up, so that
            // each renewal could wake it again.
            assert!(matches!(
                lost.as_mut().poll(&mut Context::from_waker(&waker)),
                Poll::Pending
            ));
        }
    })
    .await;
    let woken = wakes.0.load(Ordering::SeqCst);
    assert!(
        woken == 0,
        "a loss watcher was woken {woken} times by {renewals} renewals in {cycles} cycles"
    );
    assert!(matches!(
        lost.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Pending
    ));
    drop(lost);
    held.release().await.unwrap();
}
