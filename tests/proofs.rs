//! What the lease clock counts as proof, and what the fast grant trusts (issue 25, items 3
//! and 4), on real ensembles:
//!
//! - a keepalive that is a transaction is committed by the leader (its zxid moves), and so
//!   is a write the leader refuses (an error transaction);
//! - a `NoAuth` a follower answers by itself (eager ACL checks), also while cut off from its
//!   leader, renews nothing: the holder on it still hears `Lost` before the waiter on the
//!   leader is granted;
//! - a waiter whose own node and whose predecessor were both deleted while its connection was
//!   down is not granted when the watches set again fire in the wrong order;
//! - a declared tickTime too long for the session is refused at connect.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::time::Instant;
use zkfence::zookeeper_client as zk;
use zkfence::{Error, LossReason, Session, SessionOptions};
use zkfence_testcontainers::{Ensemble, FaultProxy};

/// The zxid the leader last committed, from `srvr`.
async fn leader_zxid(zk: &Ensemble) -> i64 {
    let leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let text = zk.four_letter(leader, "srvr").await.unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Zxid: "))
        .expect("srvr shows the zxid");
    i64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap()
}

/// ZooKeeper 3.8 facts the rule builds on: a `multi` with one `check` at any version is a
/// transaction (it takes a zxid), and a write that fails against the tree (`BadVersion`,
/// `NoNode`) is one too, an error transaction. A read is not.
#[tokio::test]
async fn a_check_only_multi_and_a_refused_write_are_committed_transactions() {
    // An ensemble of its own: nobody else's transactions may move the zxid.
    let zk = &own_ensemble(3).await;
    let session = connect(&zk.node_connect_string(0), Duration::from_secs(4)).await;
    let client = session.client();
    let zxid = |zk| leader_zxid(zk);

    let before = zxid(zk).await;
    let mut writer = client.new_multi_writer();
    writer.add_check_version("/", -1).unwrap();
    writer.commit().await.expect("a check of / at any version");
    let after_check = zxid(zk).await;
    assert!(after_check > before, "the check-only multi took a zxid");

    let mut writer = client.new_multi_writer();
    writer.add_check_version("/", 123_456).unwrap();
    assert!(
        writer.commit().await.is_err(),
        "a check at a wrong version fails"
    );
    let after_bad_version = zxid(zk).await;
    assert!(
        after_bad_version > after_check,
        "the failed check took a zxid"
    );

    let missing = unique_path("missing");
    assert!(matches!(
        client.delete(&missing, None).await,
        Err(zk::Error::NoNode)
    ));
    let after_no_node = zxid(zk).await;
    assert!(
        after_no_node > after_bad_version,
        "the refused delete took a zxid"
    );

    client.list_children("/").await.unwrap();
    client.check_stat("/").await.unwrap();
    assert_eq!(zxid(zk).await, after_no_node, "reads take none");
}

/// While a lease is held, the keepalive is a transaction (none while idle); its answer renews
/// the clock.
#[tokio::test]
async fn a_holding_session_keeps_alive_with_transactions_and_an_idle_one_with_syncs() {
    let zk = shared_ensemble();
    let t = Duration::from_secs(2);
    let session = connect(&zk.connect_string(), t).await;
    let idle_from = session.metrics();
    let started = Instant::now();
    eventually(Duration::from_secs(5), "idle keepalives", || async {
        session.metrics().keepalives >= idle_from.keepalives + 3
    })
    .await;
    // Paced at T/6 (a keepalive that proves nothing must not be sent again at once).
    let idle = session.metrics().keepalives - idle_from.keepalives;
    let most = (started.elapsed().as_secs_f64() / (t.as_secs_f64() / 6.0)).ceil() as u64 + 1;
    assert!(
        idle <= most,
        "{idle} idle keepalives in {:?}: at most {most} at T/6",
        started.elapsed()
    );
    assert_eq!(
        session.metrics().keepalive_transactions,
        idle_from.keepalive_transactions,
        "an idle session sends no transaction"
    );
    let lease = session
        .lock(&unique_path("keepalive"))
        .acquire()
        .await
        .unwrap();
    let held = session.metrics();
    let renewed_from = Instant::now();
    eventually(Duration::from_secs(5), "keepalive transactions", || async {
        session.metrics().keepalive_transactions >= held.keepalive_transactions + 3
    })
    .await;
    assert!(
        lease
            .valid_until()
            .is_some_and(|v| v > renewed_from + t / 2),
        "the transactions renewed the clock"
    );
    lease.release().await.unwrap();
    eprintln!(
        "keepalives: {} in {:?}",
        session.metrics().keepalives - idle_from.keepalives,
        started.elapsed()
    );
}

/// Issue 25, item 4: with `zookeeper.enableEagerACLCheck=true` a follower answers `NoAuth`
/// itself, also while cut off from its leader. A holder on that follower whose session keeps
/// getting such answers (an acquire loop on a lock it may not create nodes in) must still
/// hear `Lost` before the leader expires its session and the waiter there is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noauth_answered_by_a_cut_off_follower_renews_nothing() {
    const T: Duration = Duration::from_secs(2);
    let zk = Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        // A cut-off follower serves its clients for 3 s, longer than the session timeout.
        .sync_limit(15)
        .peer_links(true)
        .system_property("zookeeper.enableEagerACLCheck", "true")
        .start()
        .await
        .expect("start an ensemble with eager ACL checks");
    let leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let follower = (0..zk.len()).find(|&i| i != leader).unwrap();
    let admin = connect(&zk.node_connect_string(leader), T).await;
    // A lock directory nobody may create nodes in.
    let closed = unique_path("closed");
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin.client().mkdir("/test", &open).await.unwrap();
    admin
        .client()
        .create(
            &closed,
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_read()),
        )
        .await
        .unwrap();

    let holder = connect(&zk.node_connect_string(follower), T).await;
    let dir = unique_path("eager-acl");
    let lease = Arc::new(holder.lock(&dir).acquire().await.unwrap());
    let denied = holder.lock(&closed).try_acquire().await;
    assert!(
        matches!(denied, Err(Error::NoAuth { .. })),
        "the closed lock refuses us: {denied:?}"
    );
    let waiter = connect(&zk.node_connect_string(leader), T).await;
    let lock = waiter.lock(&dir);
    let granted = tokio::spawn(async move {
        let lease = lock.acquire().await;
        (Instant::now(), lease)
    });
    eventually(Duration::from_secs(5), "the waiter is queued", || async {
        children(&admin, &dir).await.len() == 2
    })
    .await;
    let renewed_from = Instant::now();
    eventually(Duration::from_secs(5), "the clock is renewed", || async {
        lease
            .valid_until()
            .is_some_and(|v| v > renewed_from + T / 2)
    })
    .await;
    // The holder's session gets a NoAuth answer every 50 ms.
    let denials = {
        let lock = holder.lock(&closed);
        tokio::spawn(async move {
            let mut noauth = 0u32;
            loop {
                if let Ok(Err(Error::NoAuth { .. })) =
                    tokio::time::timeout(Duration::from_millis(500), lock.try_acquire()).await
                {
                    noauth += 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                if noauth > 10_000 {
                    return noauth;
                }
            }
        })
    };

    zk.isolate(follower);
    let cut = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .map(|reason| (Instant::now(), reason))
        .expect("the holder is told it lost");
    let (granted_at, new_lease) = tokio::time::timeout(Duration::from_secs(20), granted)
        .await
        .expect("the waiter is granted")
        .unwrap();
    denials.abort();
    let new_lease = new_lease.expect("the waiter holds the lock");
    eprintln!(
        "eager ACL: lost ({}) {:?} after the cut, waiter granted {:?} after it",
        lost.1,
        lost.0 - cut,
        granted_at - cut
    );
    assert_eq!(lost.1, LossReason::ClockLapsed);
    assert!(
        lost.0 < granted_at,
        "the waiter was granted {:?} after the cut, before the holder heard Lost ({:?})",
        granted_at - cut,
        lost.0 - cut
    );
    new_lease.release().await.unwrap();
}

/// Issue 25, item 3: after a reconnect the client sets its watches again and the server fires
/// what changed in the order of the client's list, not in zxid order. A waiter second in line
/// whose own node and predecessor were both deleted while its connection was down must not be
/// granted, whichever of the two events comes first. One waiting session on 16 locks at once,
/// so that many waits wake together with the session's own reconnect handling (the order of
/// the client's list is a hash map's), in 3 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_was_deleted_during_a_disconnection_is_not_granted() {
    const LOCKS: usize = 16;
    let zk = shared_ensemble();
    let t = Duration::from_secs(4);
    for round in 0..3 {
        let admin = connect(&zk.connect_string(), t).await;
        let holder = connect(&zk.connect_string(), t).await;
        let proxy = FaultProxy::start(vec![zk.client_addr(round % zk.len())])
            .await
            .unwrap();
        let waiter = connect(&proxy.connect_string(), t).await;
        let dirs: Vec<String> = (0..LOCKS)
            .map(|i| unique_path(&format!("reconnect-order-{round}-{i}")))
            .collect();
        let mut leases = Vec::new();
        let mut waits = Vec::new();
        let mut waiter_nodes = Vec::new();
        for dir in &dirs {
            leases.push(holder.lock(dir).acquire().await.unwrap());
            let lock = waiter.lock(dir);
            waits.push(tokio::spawn(async move { lock.acquire().await }));
        }
        for dir in &dirs {
            until_children(&admin, dir, 2).await;
            waiter_nodes.push(format!(
                "{dir}/{}",
                queue_order(children(&admin, dir).await)[1]
            ));
        }
        // Every wait has its watches set (at the server the waiter is connected to).
        eventually(
            Duration::from_secs(10),
            "the waiter watches its nodes",
            || async {
                let mut watched = String::new();
                for i in 0..zk.len() {
                    watched.push_str(&zk.four_letter(i, "wchp").await.unwrap_or_default());
                }
                waiter_nodes.iter().all(|n| watched.contains(n.as_str()))
            },
        )
        .await;

        proxy.blackhole();
        eventually(
            Duration::from_secs(5),
            "the waiter is disconnected",
            || async { waiter.state() == zkfence::SessionState::Disconnected },
        )
        .await;
        for (node, lease) in waiter_nodes.iter().zip(leases) {
            admin.client().delete(node, None).await.unwrap();
            lease.release().await.unwrap();
        }
        // Back within the session timeout: the watches are set again and all fire at once.
        proxy.cut();
        proxy.heal();
        for ((wait, node), dir) in waits.into_iter().zip(&waiter_nodes).zip(&dirs) {
            let outcome = tokio::time::timeout(Duration::from_secs(10), wait)
                .await
                .expect("the waiter's acquire ends")
                .unwrap();
            match outcome {
                Err(Error::NodeDeleted { .. }) => {}
                Ok(granted) => {
                    let exists = admin
                        .client()
                        .check_stat(granted.path())
                        .await
                        .unwrap()
                        .is_some();
                    assert!(
                        exists && granted.path() != node,
                        "round {round}, {dir}: granted on {} whose node is gone",
                        granted.path()
                    );
                }
                Err(other) => panic!("round {round}, {dir}: {other}"),
            }
        }
    }
}

/// A declared tickTime that leaves the clock too little of the session is refused at connect,
/// with a reason; one that fits is taken and renews on syncs alone.
#[tokio::test]
async fn a_declared_tick_time_too_long_for_the_session_is_refused_at_connect() {
    let zk = shared_ensemble();
    let refused = Session::connect(
        &zk.connect_string(),
        SessionOptions::new()
            .session_timeout(Duration::from_secs(4))
            .server_tick_time(Duration::from_millis(2000)),
    )
    .await;
    match refused {
        Err(Error::UnsoundSettings { reason }) => {
            assert!(reason.contains("tickTime"), "{reason}");
        }
        other => panic!("expected UnsoundSettings, got {other:?}"),
    }
    // The ensemble's real tickTime is 200 ms.
    let session = Session::connect(
        &zk.connect_string(),
        SessionOptions::new()
            .session_timeout(Duration::from_secs(2))
            .server_tick_time(TICK),
    )
    .await
    .unwrap();
    let lease = session
        .lock(&unique_path("declared"))
        .acquire()
        .await
        .unwrap();
    let renewed_from = Instant::now();
    let before = session.metrics();
    eventually(Duration::from_secs(5), "sync keepalives renew", || async {
        session.metrics().keepalives >= before.keepalives + 3
            && lease
                .valid_until()
                .is_some_and(|v| v > renewed_from + Duration::from_secs(1))
    })
    .await;
    assert_eq!(
        session.metrics().keepalive_transactions,
        before.keepalive_transactions,
        "with the tickTime declared, keepalives are syncs"
    );
    lease.release().await.unwrap();
}
