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
use zkfence::{Error, LeaseState, LossReason, SessionState};

const SHORT: Duration = Duration::from_secs(2);
const LONG: Duration = Duration::from_secs(4);

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
    child.wait().await.unwrap();
    let (granted, lease) = task.await.unwrap().unwrap();
    let took = granted - killed;
    assert!(
        took <= SHORT + Duration::from_secs(1),
        "granted {took:?} after the kill"
    );
    assert!(lease.token().get() > held_token);
}

/// Samples a lease's state every few milliseconds, recording when it first was in each state.
fn sample_states(
    lease: Arc<zkfence::Lease>,
) -> tokio::task::JoinHandle<(Option<Instant>, Option<Instant>)> {
    tokio::spawn(async move {
        let (mut suspended, mut lost) = (None, None);
        loop {
            match lease.state() {
                LeaseState::Suspended if suspended.is_none() => suspended = Some(Instant::now()),
                LeaseState::Lost(_) => {
                    lost.get_or_insert(Instant::now());
                    return (suspended, lost);
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

#[tokio::test]
async fn a_partitioned_holder_knows_it_lost_before_the_waiter_is_granted() {
    let zk = shared_ensemble();
    for trial in 0..3 {
        let dir = unique_path(&format!("partition-{trial}"));
        let proxy = zk.proxy().await.unwrap();
        let holder_session = connect(&proxy.connect_string(), SHORT).await;
        let waiter_session = connect(&zk.connect_string(), SHORT).await;
        let lease = Arc::new(holder_session.lock(&dir).acquire().await.unwrap());
        let lock = waiter_session.lock(&dir);
        let waiter = tokio::spawn(async move { lock.acquire().await.map(|l| (Instant::now(), l)) });
        eventually(Duration::from_secs(5), "waiter enqueued", || async {
            children(&waiter_session, &dir).await.len() == 2
        })
        .await;
        let sampler = sample_states(lease.clone());

        proxy.blackhole();
        let reason = lease.lost().await;
        let lost_at = Instant::now();
        let (granted_at, new_lease) = waiter.await.unwrap().unwrap();
        let (suspended, sampled_lost) = sampler.await.unwrap();

        assert_eq!(reason, LossReason::ClockLapsed, "trial {trial}");
        assert!(
            lost_at < granted_at,
            "trial {trial}: lost at {lost_at:?} but the waiter was granted at {granted_at:?}"
        );
        assert!(
            sampled_lost.unwrap() < granted_at,
            "trial {trial}: state() said Lost only after the grant"
        );
        // The client library reports the disconnection after about 0.4 T of silence; the
        // lease clock may lapse first (it must, when the last keepalive was early), so the
        // lease goes through Suspended only sometimes, and then before it is lost.
        if let Some(suspended) = suspended {
            assert!(suspended < lost_at, "trial {trial}");
        }
        assert!(new_lease.token() > lease.token());
        eprintln!(
            "trial {trial}: suspended after blackhole, lost {:?} before the waiter's grant",
            granted_at - lost_at
        );
    }
}

#[tokio::test]
async fn session_expiry_while_holding() {
    let zk = shared_ensemble();
    let dir = unique_path("expiry");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), SHORT).await;
    let admin = connect(&zk.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    let old_token = lease.token();

    proxy.blackhole();
    assert_eq!(lease.lost().await, LossReason::ClockLapsed);
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

#[tokio::test]
async fn a_short_blip_costs_nobody_the_lock() {
    let zk = shared_ensemble();
    let dir = unique_path("blip");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), LONG).await;
    let lease = holder_session.lock(&dir).acquire().await.unwrap();
    proxy.cut(); // connections drop; the client reconnects through the proxy at once
    eventually(Duration::from_secs(5), "reconnected", || async {
        holder_session.state() == SessionState::Connected && proxy.connection_count() > 0
    })
    .await;
    let renewed = lease.renew().await.unwrap();
    assert_eq!(lease.state(), LeaseState::Held);
    assert!(renewed > Instant::now());
    lease.release().await.unwrap();
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
    let (i1, l1, h) = waiters.remove(0).await.unwrap();
    assert_eq!(i1, 1, "granted in queue order");
    assert!(l1.token() > first_token);

    // A release that meets a second failover still completes, and the last waiter gets in.
    zk.start(leader).await.unwrap();
    let current = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    h.fetch_sub(1, Ordering::SeqCst);
    let t1 = l1.token();
    let release = tokio::spawn(l1.release());
    zk.kill(current);
    tokio::time::timeout(Duration::from_secs(30), release)
        .await
        .expect("release completes")
        .unwrap()
        .unwrap();
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
    proxy.heal();

    let lease = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    let healed_at = Instant::now();
    // On reconnect the notification arrives before the keepalive's answer, so the grant
    // itself must confirm with the ensemble first. Granted only with a clock renewed after
    // the outage: the lease is held and vouched for.
    assert_eq!(lease.state(), LeaseState::Held);
    let valid_until = lease.valid_until().expect("vouched for");
    assert!(
        valid_until > healed_at,
        "the grant must come with a fresh lease clock"
    );
    assert_eq!(waiter_session.state(), SessionState::Connected);
    assert!(
        waiter_session.metrics().grant_confirms >= 1,
        "the grant confirmed with the ensemble first"
    );
    lease.release().await.unwrap();
}
