//! The lock under real faults: lost answers, killed holders, partitions, session expiry,
//! release through connection loss, and a ZooKeeper server failover.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;
use zkfence::zookeeper_client as zk;
use zkfence::{Error, LeaseState, LossReason, Session, SessionOptions, SessionState};

const SHORT: Duration = Duration::from_secs(2);
const LONG: Duration = Duration::from_secs(4);
/// Generous bound for a step of a few round trips: a broken build fails instead of hanging.
const STEP: Duration = Duration::from_secs(10);

async fn mkdir(s: &zkfence::Session, dir: &str) {
    s.client()
        .mkdir(
            dir,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn protected_create_adopts_its_own_node_after_a_lost_answer() {
    let zk = shared_ensemble();
    let proxy = zk.proxy().await.unwrap();
    let victim = connect(&proxy.connect_string(), LONG).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let dir = unique_path("protected");
    mkdir(&admin, &dir).await;

    proxy.hold_responses();
    let lock = victim.lock(&dir);
    let task = tokio::spawn(async move { lock.acquire().await });
    eventually(
        Duration::from_secs(5),
        "the create reached the server",
        || async { children(&admin, &dir).await.len() == 1 },
    )
    .await;
    let created = children(&admin, &dir).await.remove(0);
    proxy.cut();
    proxy.heal();

    let lease = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("acquire finishes")
        .unwrap()
        .unwrap();
    assert!(
        lease.path().ends_with(&created),
        "adopted {} but the server has {created}",
        lease.path()
    );
    assert_eq!(
        children(&admin, &dir).await,
        vec![created.clone()],
        "no duplicate node"
    );
    assert_eq!(victim.metrics().creates, 0, "no second create was made");
    let stat = admin
        .client()
        .check_stat(lease.path())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, victim.id());

    lease.release().await.unwrap();
    assert!(children(&admin, &dir).await.is_empty(), "no orphan");
    victim
        .lock(&dir)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_node_of_another_session_with_our_uuid_is_never_adopted() {
    let zk = shared_ensemble();
    let proxy = zk.proxy().await.unwrap();
    let victim = connect(&proxy.connect_string(), LONG).await;
    let old = connect(&zk.connect_string(), LONG).await;
    let dir = unique_path("foreign-uuid");
    mkdir(&old, &dir).await;
    let uuid = uuid::Uuid::new_v4();
    // Another session already has a node carrying the same uuid (as an earlier session of
    // the same client would): it is ahead of us in the queue.
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, seq) = old
        .client()
        .create(
            &format!("{dir}/_c_{}-lock-", uuid.hyphenated()),
            b"",
            &ephemeral,
        )
        .await
        .unwrap();
    let foreign = format!("_c_{}-lock-{seq}", uuid.hyphenated());

    proxy.hold_responses();
    let lock = victim.lock(&dir).__with_contender_uuid(uuid);
    let task = tokio::spawn(async move { lock.acquire().await });
    eventually(
        Duration::from_secs(5),
        "our create reached the server",
        || async { children(&old, &dir).await.len() == 2 },
    )
    .await;
    proxy.cut();
    proxy.heal();
    // We found our own node, not the foreign one: so we wait behind it.
    eventually(
        Duration::from_secs(10),
        "the victim is waiting on the foreign node",
        || async { victim.metrics().watches >= 1 },
    )
    .await;
    assert!(
        !task.is_finished(),
        "the foreign node must not be adopted as ours"
    );
    assert_eq!(children(&old, &dir).await.len(), 2, "no duplicate create");

    old.client()
        .delete(&format!("{dir}/{foreign}"), None)
        .await
        .unwrap();
    let lease = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let stat = old
        .client()
        .check_stat(lease.path())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stat.ephemeral_owner, victim.id());
    assert!(!lease.path().ends_with(&foreign));
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_killed_holder_frees_the_lock_within_the_session_timeout() {
    if child_role().as_deref() == Some("holder") {
        let s = connect(&std::env::var("ZKF_CS").unwrap(), SHORT).await;
        let lease = s
            .lock(&std::env::var("ZKF_DIR").unwrap())
            .acquire()
            .await
            .unwrap();
        println!("HELD {}", lease.token());
        std::future::pending::<()>().await;
    }
    let zk = shared_ensemble();
    let dir = unique_path("crash");
    let mut child = spawn_child(
        "a_killed_holder_frees_the_lock_within_the_session_timeout",
        "holder",
        &[("ZKF_CS", zk.connect_string()), ("ZKF_DIR", dir.clone())],
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held_token: u64 = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        // libtest may print its own "test name ... " in front of ours on the same line.
        if let Some((_, t)) = line.split_once("HELD ") {
            break t.trim().parse().unwrap();
        }
    };
    let waiter = connect(&zk.connect_string(), SHORT).await;
    let lock = waiter.lock(&dir);
    let task = tokio::spawn(async move { lock.acquire().await.map(|l| (Instant::now(), l)) });
    eventually(Duration::from_secs(5), "waiter enqueued", || async {
        children(&waiter, &dir).await.len() == 2
    })
    .await;

    child.start_kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    within(STEP, "the child dies", child.wait()).await.unwrap();
    let (granted, lease) = within(STEP, "the waiter's grant", task)
        .await
        .unwrap()
        .unwrap();
    let took = granted - killed;
    assert!(
        took <= SHORT + Duration::from_secs(1),
        "granted {took:?} after the kill"
    );
    assert!(lease.token().get() > held_token);
}

/// The README's claim: the holder learns it lost the lock before the ensemble can give it to
/// anyone. Compared against the server-side deletion of the holder's node (an exists-watch of
/// an admin session on the ZooKeeper leader, where the expiry is decided), with the margin
/// the lease clock promises (the bound is derived in `common/partition.rs`), in three trials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_knows_it_lost_well_before_the_server_deletes_its_node() {
    let zk = shared_ensemble();
    let leader = zk.leader().await.expect("the shared ensemble has a leader");
    let follower = (leader + 1) % zk.len();
    // The admin hears the deletion from the leader, which commits it before any follower:
    // the waiter, on a follower, cannot hear of it earlier.
    let admin = connect(&zk.node_connect_string(leader), LONG).await;
    let waiter = connect(&zk.node_connect_string(follower), LONG).await;
    for trial in 0..3 {
        let dir = unique_path(&format!("partition-{trial}"));
        let proxy = zk.proxy().await.unwrap();
        let holder = connect(&proxy.connect_string(), LONG).await;
        partition::partition_the_holder(partition::Setup {
            admin: &admin,
            waiter: &waiter,
            holder: &holder,
            proxy: &proxy,
            dir: &dir,
            t: LONG,
        })
        .await
        .assert_the_holder_learned_first(&format!("trial {trial}"))
        .await;
    }
}

/// With reopening off, an expired `Session` stays expired, as a plain ZooKeeper handle does
/// (the reopening default is tested in `long_running.rs`).
#[tokio::test]
async fn session_expiry_while_holding_without_reopening() {
    let zk = shared_ensemble();
    let dir = unique_path("expiry");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = Session::connect(
        &proxy.connect_string(),
        SessionOptions::new()
            .session_timeout(SHORT)
            .reopen_after_expiry(false),
    )
    .await
    .unwrap();
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    let old_token = lease.token();

    proxy.blackhole();
    assert_eq!(
        within(2 * SHORT, "the holder hears lost", lease.lost()).await,
        LossReason::ClockLapsed
    );
    // The server expires the session and deletes the node.
    eventually(
        Duration::from_secs(10),
        "the server deleted the node",
        || async { children(&admin, &dir).await.is_empty() },
    )
    .await;
    proxy.heal();
    eventually(
        Duration::from_secs(15),
        "the client learns the session expired",
        || async { holder_session.state() == SessionState::Expired },
    )
    .await;
    assert!(matches!(lease.state(), LeaseState::Lost(_)));
    assert!(matches!(lease.renew().await, Err(Error::LockLost { .. })));
    assert!(matches!(
        holder_session.lock(&dir).acquire().await,
        Err(Error::SessionExpired)
    ));

    let fresh = connect(&proxy.connect_string(), SHORT).await;
    let new_lease = fresh.lock(&dir).acquire().await.unwrap();
    assert!(new_lease.token() > old_token);
    new_lease.release().await.unwrap();
}

/// A blip (the connection drops and the client cannot get through for a moment) shows as
/// `Suspended`, then `Held` again on its own (the keeper renews; nobody calls `renew`), and
/// the waiter stays queued throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_blip_costs_nobody_the_lock() {
    let zk = shared_ensemble();
    let dir = unique_path("blip");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), LONG).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    let lock = admin.lock(&dir);
    let mut waiter = tokio::spawn(async move { lock.acquire().await });
    eventually(STEP, "waiter queued", || async {
        children(&admin, &dir).await.len() == 2
    })
    .await;

    // Start right after a keepalive, so the blip fits in the lease with room to spare.
    within(
        STEP,
        "a keepalive renews the clock",
        holder_session.valid_until_changed(),
    )
    .await
    .expect("renewed");
    // Close the connections and keep new ones from getting through: the client sees the
    // drop at once, and stays disconnected until the heal.
    proxy.blackhole();
    proxy.cut();
    eventually(LONG / 4, "the lease is suspended", || async {
        lease.state() == LeaseState::Suspended
    })
    .await;
    let keepalives = holder_session.metrics().keepalives;
    let valid_until = lease.valid_until().expect("still vouched for");
    proxy.heal();
    eventually(STEP, "the lease is held again, without a renew", || async {
        lease.state() == LeaseState::Held
    })
    .await;
    eventually(STEP, "the keeper renews the clock", || async {
        lease.valid_until().is_some_and(|v| v > valid_until)
    })
    .await;
    assert!(holder_session.metrics().keepalives > keepalives);
    assert_eq!(lease.state(), LeaseState::Held);
    assert_eq!(holder_session.state(), SessionState::Connected);

    // The waiter stayed queued behind the holder's node.
    let queue = queue_order(children(&admin, &dir).await);
    assert_eq!(queue.len(), 2, "{queue:?}");
    assert_eq!(
        queue[0],
        name_of(lease.path()),
        "the holder's node is first"
    );
    if let Ok(done) = tokio::time::timeout(Duration::from_millis(500), &mut waiter).await {
        panic!("the waiter was granted while the holder holds: {done:?}");
    }
    let token = lease.token();
    lease.release().await.unwrap();
    let next = within(STEP, "the waiter's grant", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(next.token() > token);
}

#[tokio::test]
async fn release_retries_through_a_lost_answer() {
    let zk = shared_ensemble();
    let dir = unique_path("release-lost");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), LONG).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();

    proxy.hold_responses();
    let release = tokio::spawn(lease.release());
    eventually(
        Duration::from_secs(5),
        "the delete reached the server",
        || async { children(&admin, &dir).await.is_empty() },
    )
    .await;
    assert!(
        !release.is_finished(),
        "release must wait for the ensemble's answer"
    );
    proxy.cut();
    proxy.heal();
    tokio::time::timeout(Duration::from_secs(10), release)
        .await
        .expect("release returns")
        .unwrap()
        .unwrap();
    assert!(children(&admin, &dir).await.is_empty());
}

#[tokio::test]
async fn release_while_partitioned_completes_after_healing() {
    let zk = shared_ensemble();
    let dir = unique_path("release-partitioned");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), LONG).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    let node = lease.path().to_string();

    proxy.blackhole();
    let release = tokio::spawn(lease.release());
    // By the time the client notices the partition the delete has long been sent.
    eventually(Duration::from_secs(5), "client disconnected", || async {
        holder_session.state() == SessionState::Disconnected
    })
    .await;
    assert!(
        !release.is_finished(),
        "no answer yet: release must not claim success"
    );
    assert!(admin.client().check_stat(&node).await.unwrap().is_some());
    proxy.heal();
    proxy.cut(); // drop the stale connection so the client reconnects now
    tokio::time::timeout(Duration::from_secs(10), release)
        .await
        .expect("release returns")
        .unwrap()
        .unwrap();
    admin.client().sync(&node).await.unwrap();
    assert!(admin.client().check_stat(&node).await.unwrap().is_none());
}

#[tokio::test]
async fn release_after_the_session_expired_says_so() {
    let zk = shared_ensemble();
    let dir = unique_path("release-expired");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), SHORT).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    proxy.blackhole();
    eventually(
        Duration::from_secs(10),
        "the server expired the session",
        || async { children(&admin, &dir).await.is_empty() },
    )
    .await;
    let release = tokio::spawn(lease.release());
    proxy.heal();
    let err = tokio::time::timeout(Duration::from_secs(15), release)
        .await
        .expect("release returns")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::SessionExpired), "{err}");
    assert!(err.to_string().contains("released every lock"));
}

#[tokio::test]
async fn a_dropped_lease_is_released_in_the_background_through_faults() {
    let zk = shared_ensemble();
    let dir = unique_path("drop-release");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), LONG).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    let node = lease.path().to_string();
    proxy.blackhole();
    drop(lease);
    eventually(Duration::from_secs(5), "client disconnected", || async {
        holder_session.state() == SessionState::Disconnected
    })
    .await;
    assert!(admin.client().check_stat(&node).await.unwrap().is_some());
    proxy.heal();
    proxy.cut();
    eventually(
        Duration::from_secs(10),
        "the dropped lease's node is deleted",
        || async { admin.client().check_stat(&node).await.unwrap().is_none() },
    )
    .await;
    assert_eq!(
        holder_session.state(),
        SessionState::Connected,
        "deleted by us, not by expiry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_leader_failover_keeps_the_lease_and_the_queue() {
    let zk = own_ensemble(3).await;
    let dir = unique_path("failover");
    let sessions = [
        connect(&zk.connect_string(), LONG).await,
        connect(&zk.connect_string(), LONG).await,
        connect(&zk.connect_string(), LONG).await,
    ];
    let holders = Arc::new(AtomicUsize::new(0));
    let lease = sessions[0].lock(&dir).acquire().await.unwrap();
    holders.fetch_add(1, Ordering::SeqCst);
    let mut waiters = vec![];
    for (i, s) in sessions.iter().enumerate().skip(1) {
        let (lock, holders) = (s.lock(&dir), holders.clone());
        waiters.push(tokio::spawn(async move {
            let lease = lock.acquire().await.unwrap();
            assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "double grant");
            (i, lease, holders)
        }));
        eventually(Duration::from_secs(5), "enqueued", || async {
            children(&sessions[0], &dir).await.len() == i + 1
        })
        .await;
    }

    let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    zk.kill(leader);
    let new_leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    assert_ne!(leader, new_leader);
    for s in &sessions {
        eventually(Duration::from_secs(15), "sessions reconnect", || async {
            s.state() == SessionState::Connected
        })
        .await;
    }
    lease
        .renew()
        .await
        .expect("the holder keeps its lease through the failover");
    assert_eq!(lease.state(), LeaseState::Held);
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "nobody else granted while the holder holds"
    );

    let first_token = lease.token();
    holders.fetch_sub(1, Ordering::SeqCst);
    lease.release().await.unwrap();
    let (i1, l1, h) = within(STEP, "the first waiter's grant", waiters.remove(0))
        .await
        .unwrap();
    assert_eq!(i1, 1, "granted in queue order");
    assert!(l1.token() > first_token);

    // A release that meets a second failover still completes, and the last waiter gets in.
    zk.start(leader).await.unwrap();
    let current = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    h.fetch_sub(1, Ordering::SeqCst);
    let t1 = l1.token();
    let node = l1.path().to_string();
    let deletes = sessions[1].metrics().deletes;
    // Freeze the ZooKeeper leader first: no write can commit without it, so the release's
    // delete is certainly in flight when the leader dies (the followers give up on a silent
    // leader only after syncLimit ticks, 1 s, so nothing else changes meanwhile).
    zk.pause(current);
    let mut release = tokio::spawn(l1.release());
    if let Ok(done) = tokio::time::timeout(Duration::from_millis(400), &mut release).await {
        panic!("the release finished while the ZooKeeper leader was frozen: {done:?}");
    }
    assert_eq!(
        sessions[1].metrics().deletes,
        deletes,
        "the delete is not answered yet"
    );
    zk.kill(current);
    within(Duration::from_secs(30), "the release completes", release)
        .await
        .unwrap()
        .unwrap();
    sessions[0].client().sync(&node).await.unwrap();
    assert!(
        sessions[0]
            .client()
            .check_stat(&node)
            .await
            .unwrap()
            .is_none(),
        "release returned, so the node must be gone"
    );
    let (i2, l2, _) = tokio::time::timeout(Duration::from_secs(30), waiters.remove(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(i2, 2);
    assert!(l2.token() > t1);
}

#[tokio::test]
async fn a_late_committed_duplicate_of_ours_is_removed_not_waited_on() {
    let zk = shared_ensemble();
    let s = connect(&zk.connect_string(), LONG).await;
    let dir = unique_path("own-orphan");
    mkdir(&s, &dir).await;
    let uuid = uuid::Uuid::new_v4();
    // What a create whose answer was lost leaves when it commits after we looked for it and
    // created again: a node with our uuid, owned by our session, ahead of our real node.
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    s.client()
        .create(
            &format!("{dir}/_c_{}-lock-", uuid.hyphenated()),
            b"",
            &ephemeral,
        )
        .await
        .unwrap();

    let lease = s
        .lock(&dir)
        .__with_contender_uuid(uuid)
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("must not wait behind its own orphan");
    let left = children(&s, &dir).await;
    assert_eq!(left.len(), 1, "the orphan is deleted: {left:?}");
    assert!(lease.path().ends_with(&left[0]));
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_whose_lease_clock_lapsed_confirms_before_it_is_granted() {
    // etcd issue 11456: a waiter whose session went quiet while it waited must not be told
    // it holds the lock on the strength of a stale notification.
    let zk = shared_ensemble();
    let dir = unique_path("stale-grant");
    let proxy = zk.proxy().await.unwrap();
    // The clock lapses about 0.6 T after the last keepalive, well before the server could
    // expire the session (about T after the outage began), so the session survives the
    // outage and the waiter's node is still queued afterwards.
    let waiter_session = connect(&proxy.connect_string(), LONG).await;
    let holder_session = connect(&zk.connect_string(), LONG).await;
    let holder = holder_session.lock(&dir).acquire().await.unwrap();
    let lock = waiter_session.lock(&dir);
    let waiter = tokio::spawn(async move { lock.acquire().await });
    eventually(Duration::from_secs(5), "waiter queued", || async {
        children(&holder_session, &dir).await.len() == 2
    })
    .await;

    proxy.blackhole();
    eventually(
        Duration::from_secs(5),
        "the waiter's lease clock lapsed",
        || async { waiter_session.valid_until().is_none() },
    )
    .await;
    // The lock is released while the waiter cannot hear anything.
    holder.release().await.unwrap();
    assert!(!waiter.is_finished());
    // When does the clock vouch again after the outage (the keeper's keepalive), and when is
    // the waiter granted? A grant before the renewal must have confirmed first.
    let renewals = waiter_session.clone();
    let renewed = tokio::spawn(async move {
        while renewals.valid_until_changed().await.is_none() {}
        Instant::now()
    });
    proxy.heal();

    let lease = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    let healed_at = Instant::now();
    let renewed_at = tokio::time::timeout(Duration::from_secs(10), renewed)
        .await
        .expect("the clock vouches again")
        .unwrap();
    // On reconnect the notification usually arrives before the keepalive's answer; then the
    // grant itself must confirm with the ensemble first. Granted only with a clock renewed
    // after the outage: the lease is held and vouched for.
    assert_eq!(lease.state(), LeaseState::Held);
    let valid_until = lease.valid_until().expect("vouched for");
    assert!(
        valid_until > healed_at,
        "the grant must come with a fresh lease clock"
    );
    assert_eq!(waiter_session.state(), SessionState::Connected);
    let confirms = waiter_session.metrics().grant_confirms;
    assert!(
        confirms >= 1 || renewed_at <= healed_at,
        "granted before the clock vouched again ({renewed_at:?} vs {healed_at:?}) without confirming"
    );
    lease.release().await.unwrap();
}

/// The session `id`'s server, as the servers' `cons` lists report it.
async fn server_of(zk: &zkfence_testcontainers::Ensemble, id: i64, among: &[usize]) -> usize {
    let deadline = Instant::now() + STEP;
    loop {
        for &i in among {
            if let Ok(cons) = zk.connections(i).await {
                if cons.iter().any(|c| c.session_id == Some(id)) {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "session {id:#x} on no server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Servers stopped by SIGSTOP, as a long GC pause or a frozen VM stops them: first the
/// follower the holder is connected to, then the ZooKeeper leader, each while the lock is
/// held and waited for. Neither costs the holder its lease, and the waiter stays queued;
/// each pause lasts until the holder's client gives up on its server (checked), and the
/// holder's session reconnects within what the lease clock tolerates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_follower_or_the_zookeeper_leader_costs_nobody_the_lock() {
    // A paused leader is given up on after syncLimit ticks (1 s), then the followers elect
    // another and the clients reconnect (~1.5 s); a paused follower's clients notice after
    // ~0.4 T of silence. The lease lapses ~0.6 T after the last keepalive: 8 s sessions.
    const PAUSE_T: Duration = Duration::from_secs(8);
    let zk = zkfence_testcontainers::Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(Duration::from_secs(10))
        .start()
        .await
        .expect("start an ensemble");
    let leader = zk.wait_for_leader(STEP).await.unwrap();
    let followers: Vec<usize> = (0..zk.len()).filter(|i| *i != leader).collect();
    // Clients only on the followers, so a paused leader disconnects them all.
    let cs = followers
        .iter()
        .map(|i| zk.node_connect_string(*i))
        .collect::<Vec<_>>()
        .join(",");
    let dir = unique_path("paused-server");
    let holder_session = connect(&cs, PAUSE_T).await;
    let waiter_session = connect(&cs, PAUSE_T).await;
    assert_eq!(holder_session.session_timeout(), PAUSE_T);
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    let lock = waiter_session.lock(&dir);
    let mut waiter = tokio::spawn(async move { lock.acquire().await });
    eventually(STEP, "waiter queued", || async {
        children(&holder_session, &dir).await.len() == 2
    })
    .await;

    let on = server_of(&zk, holder_session.id(), &followers).await;
    // The follower is resumed as soon as the holder's client gives up on it: left paused,
    // the client's reconnect may pick it again (the library shuffles the servers) and wait
    // out a connect timeout, by which time the lease has rightly lapsed.
    for (what, server, resume_at_disconnect) in [
        ("the holder's follower", on, true),
        ("the ZooKeeper leader", leader, false),
    ] {
        // Pause right after a keepalive: the lease then has its full ~0.6 T ahead.
        within(
            STEP,
            "a keepalive renews the clock",
            holder_session.valid_until_changed(),
        )
        .await
        .expect("renewed");
        let disconnected = tokio::spawn({
            let s = holder_session.clone();
            async move {
                while let Some(state) = s.state_changed().await {
                    if state.is_terminal() {
                        break;
                    }
                    if s.state() == SessionState::Disconnected {
                        return true;
                    }
                }
                false
            }
        });
        zk.pause(server);
        let paused = Instant::now();
        let recovered = async {
            eventually(2 * PAUSE_T, "the holder's session disconnected", || async {
                disconnected.is_finished()
            })
            .await;
            if resume_at_disconnect {
                zk.resume(server);
            }
            eventually(
                2 * PAUSE_T,
                "the holder's session connected again",
                || async { holder_session.state() == SessionState::Connected },
            )
            .await;
            let back = paused.elapsed();
            eventually(
                2 * PAUSE_T,
                "the waiter's session connected again",
                || async { waiter_session.state() == SessionState::Connected },
            )
            .await;
            // Served by the others now: the renewal's sync is answered without `server`.
            lease
                .renew()
                .await
                .expect("renewed while the server is paused");
            back
        };
        let back = tokio::select! {
            reason = lease.lost() => panic!("{what} paused: the lease was lost ({reason}) after {:?}", paused.elapsed()),
            granted = &mut waiter => panic!("{what} paused: the waiter was granted: {granted:?}"),
            back = recovered => back,
        };
        eprintln!("{what} paused: the holder's session was back after {back:?}");
        assert!(
            disconnected.await.unwrap(),
            "the pause did not disconnect the holder"
        );
        zk.resume(server);
        zk.wait_serving(server, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(lease.state(), LeaseState::Held, "{what}");
        let queue = queue_order(children(&waiter_session, &dir).await);
        assert_eq!(queue.len(), 2, "{what}: {queue:?}");
        assert_eq!(
            queue[0],
            name_of(lease.path()),
            "{what}: the holder is first"
        );
        assert!(!waiter.is_finished(), "{what}: the waiter stays queued");
    }
    let token = lease.token();
    lease.release().await.unwrap();
    let next = within(STEP, "the waiter's grant", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(next.token() > token);
}
