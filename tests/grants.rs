//! Grants that never outrun the ensemble, and errors that come back in time: a waiter whose
//! node was deleted is not granted; a timed-out acquire returns on time when the ensemble is
//! silent; a large queue can be listed; a lapsed lease does not keep its node.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::time::Instant;
use zkfence::zookeeper_client as zk;
use zkfence::{Error, LeaseState, LossReason, SessionState};

const T: Duration = Duration::from_secs(4);

#[tokio::test]
async fn a_waiter_whose_node_was_deleted_is_not_granted() {
    let zk = shared_ensemble();
    let dir = unique_path("deleted-waiter");
    let (h, b, d, admin) = (
        connect(&zk.connect_string(), T).await,
        connect(&zk.connect_string(), T).await,
        connect(&zk.connect_string(), T).await,
        connect(&zk.connect_string(), T).await,
    );
    let holder = h.lock(&dir).acquire().await.unwrap();
    let lock_b = b.lock(&dir);
    let second = tokio::spawn(async move { lock_b.acquire().await });
    eventually(Duration::from_secs(5), "B queued second", || async {
        children(&admin, &dir).await.len() == 2
    })
    .await;
    let lock_d = d.lock(&dir);
    let third = tokio::spawn(async move { lock_d.acquire().await });
    eventually(Duration::from_secs(5), "D queued third", || async {
        children(&admin, &dir).await.len() == 3
    })
    .await;
    // B waits on the holder with its own node watched (seen at the server); then someone
    // deletes B's node.
    let b_node = {
        let mut names = children(&admin, &dir).await;
        names.sort_by_key(|n| n[n.len() - 10..].to_string());
        format!("{dir}/{}", names[1])
    };
    eventually(Duration::from_secs(5), "B watches its own node", || async {
        for i in 0..zk.len() {
            if zk
                .four_letter(i, "wchp")
                .await
                .is_ok_and(|w| w.contains(&b_node))
            {
                return true;
            }
        }
        false
    })
    .await;
    admin.client().delete(&b_node, None).await.unwrap();
    holder.release().await.unwrap();

    let b_result = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("B answers")
        .unwrap();
    assert!(
        matches!(b_result, Err(Error::NodeDeleted { .. })),
        "B must not be granted a lease on a deleted node: {b_result:?}"
    );
    let d_lease = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("D answers")
        .unwrap()
        .expect("D holds");
    assert_eq!(d_lease.state(), LeaseState::Held);
    let left = children(&admin, &dir).await;
    assert_eq!(left.len(), 1, "only D's node: {left:?}");
    assert!(d_lease.path().ends_with(&left[0]));
}

#[tokio::test]
async fn acquire_timeout_returns_on_time_when_the_ensemble_stops_answering() {
    let zk = shared_ensemble();
    for semaphore in [false, true] {
        let dir = unique_path("silent-timeout");
        let holder_session = connect(&zk.connect_string(), T).await;
        let proxy = zk.proxy().await.unwrap();
        let waiter_session = connect(&proxy.connect_string(), T).await;
        let _held = if semaphore {
            holder_session.semaphore(&dir, 1).acquire().await.unwrap()
        } else {
            holder_session.lock(&dir).acquire().await.unwrap()
        };
        let timeout = Duration::from_secs(2);
        let started = Instant::now();
        let attempt = {
            let s = waiter_session.clone();
            let dir = dir.clone();
            tokio::spawn(async move {
                let result = if semaphore {
                    s.semaphore(&dir, 1).acquire_timeout(timeout).await
                } else {
                    s.lock(&dir).acquire_timeout(timeout).await
                };
                (Instant::now(), result)
            })
        };
        // Once the waiter is queued, nothing it sends is answered any more.
        let queued = if semaphore {
            format!("{dir}/locks")
        } else {
            dir.clone()
        };
        // The waiter's own node, by its session: the holder may still have one of its own
        // in the semaphore's turn directory for a moment.
        let waiter_id = waiter_session.client().session_id().0;
        eventually(Duration::from_secs(5), "the waiter is queued", || async {
            let contenders = holder_session.lock(&queued).contenders().await.unwrap();
            contenders.iter().any(|c| c.session_id == waiter_id)
        })
        .await;
        proxy.blackhole();
        let (returned, result) = tokio::time::timeout(Duration::from_secs(15), attempt)
            .await
            .expect("acquire_timeout returns")
            .unwrap();
        let took = returned - started;
        assert!(
            matches!(result, Err(Error::Timeout { .. })),
            "semaphore={semaphore}: {result:?}"
        );
        assert!(
            took < timeout + Duration::from_secs(1),
            "semaphore={semaphore}: acquire_timeout({timeout:?}) returned after {took:?}"
        );
        // The node goes: with the session, or once the ensemble answers again.
        proxy.heal();
        eventually(
            Duration::from_secs(15),
            "the waiter's node is gone",
            || async {
                let n = children(&holder_session, &queued).await.len();
                if semaphore {
                    n == 0
                } else {
                    n == 1
                }
            },
        )
        .await;
    }
}

/// Every step of a timed acquire is inside its deadline, the ones before it queues too: the
/// semaphore's check of its holders' limit waited for the session to expire (CI: `Err
/// (SessionExpired)` instead of `Timeout` when the ensemble went silent before the waiter
/// queued).
#[tokio::test]
async fn acquire_timeout_returns_on_time_when_the_ensemble_is_silent_from_the_start() {
    let zk = shared_ensemble();
    for kind in ["lock", "semaphore", "multi-lock"] {
        let dir = unique_path("silent-from-start");
        let proxy = zk.proxy().await.unwrap();
        let session = connect(&proxy.connect_string(), T).await;
        proxy.blackhole();
        let timeout = Duration::from_secs(2);
        let started = Instant::now();
        let result = tokio::time::timeout(Duration::from_secs(15), async {
            match kind {
                "lock" => session.lock(&dir).acquire_timeout(timeout).await.map(drop),
                "semaphore" => session
                    .semaphore(&dir, 1)
                    .acquire_timeout(timeout)
                    .await
                    .map(drop),
                _ => {
                    let (a, b) = (format!("{dir}/a"), format!("{dir}/b"));
                    session
                        .multi_lock(&[&a, &b])
                        .acquire_timeout(timeout)
                        .await
                        .map(drop)
                }
            }
        })
        .await
        .expect("acquire_timeout returns");
        let took = started.elapsed();
        assert!(
            matches!(result, Err(Error::Timeout { .. })),
            "{kind}: {result:?} after {took:?}"
        );
        assert!(
            took < timeout + Duration::from_secs(1),
            "{kind}: acquire_timeout({timeout:?}) returned after {took:?}"
        );
        proxy.heal();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_5000_contenders_with_long_paths_can_be_listed() {
    let zk = shared_ensemble();
    // A directory path long enough that the contenders' full paths are ~200 characters:
    // one multi-read of them all would exceed ZooKeeper's 1 MiB request limit.
    let dir = format!("{}/{}", unique_path("big"), "d".repeat(112));
    let admin = connect(&zk.connect_string(), T).await;
    admin
        .client()
        .mkdir(
            &dir,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4().hyphenated());
    assert!(prefix.len() + 10 >= 200, "{}", prefix.len());
    let sequential = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
    for _ in 0..10 {
        let client = admin.client();
        let mut writer = client.new_multi_writer();
        for _ in 0..500 {
            writer
                .add_create(&prefix, b"id=bulk\n", &sequential)
                .unwrap();
        }
        writer.commit().await.unwrap();
    }
    let observer = connect(&zk.connect_string(), T).await;
    let listed = tokio::time::timeout(Duration::from_secs(30), observer.lock(&dir).contenders())
        .await
        .expect("listing 5,000 contenders returns")
        .unwrap();
    assert_eq!(listed.len(), 5000);
    assert!(listed.windows(2).all(|w| w[0].sequence < w[1].sequence));
    assert_eq!(listed[0].owner.id.as_deref(), Some("bulk"));
    let leader = tokio::time::timeout(Duration::from_secs(10), observer.election(&dir).leader())
        .await
        .expect("leader() returns")
        .unwrap()
        .unwrap();
    assert_eq!(leader.node, listed[0].node);
    // The session is still healthy afterwards.
    assert_eq!(observer.state(), SessionState::Connected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_does_not_keep_its_node_while_the_session_survives() {
    let zk = shared_ensemble();
    let dir = unique_path("lapsed-keeps");
    let proxy = zk.proxy().await.unwrap();
    let holder_session = connect(&proxy.connect_string(), T).await;
    let waiter_session = connect(&zk.connect_string(), T).await;
    let lease = Arc::new(holder_session.lock(&dir).acquire().await.unwrap());
    let lock = waiter_session.lock(&dir);
    let waiter = tokio::spawn(async move { lock.acquire().await });
    eventually(Duration::from_secs(5), "waiter queued", || async {
        children(&waiter_session, &dir).await.len() == 2
    })
    .await;
    // Observe the lapse through `state()` as fast as possible, so it is recorded there
    // (racing the keeper) and not only by the keeper.
    let watched = lease.clone();
    let observer = tokio::spawn(async move {
        loop {
            if let LeaseState::Lost(reason) = watched.state() {
                return (Instant::now(), reason);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    proxy.blackhole();
    let (lost_at, reason) = tokio::time::timeout(Duration::from_secs(10), observer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, LossReason::ClockLapsed);
    // Heal before the server could expire the session: the session survives, and the Lost
    // lease is still alive in the application.
    proxy.heal();
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is granted while the lapsed lease still lives")
        .unwrap()
        .unwrap();
    assert!(Instant::now() > lost_at);
    assert_eq!(
        holder_session.state(),
        SessionState::Connected,
        "the holder's session survived the outage"
    );
    assert_eq!(lease.state(), LeaseState::Lost(LossReason::ClockLapsed));
    drop(granted);

    // The same for an election: campaigning again while the lost Leadership still lives
    // must not wait behind its own node.
    let path = unique_path("lapsed-election");
    let leadership = holder_session.election(&path).campaign("a").await.unwrap();
    proxy.blackhole();
    tokio::time::timeout(Duration::from_secs(10), leadership.lost())
        .await
        .unwrap();
    proxy.heal();
    let again = tokio::time::timeout(
        Duration::from_secs(10),
        holder_session.election(&path).campaign("a"),
    )
    .await
    .expect("campaigning again does not deadlock behind the lost leadership's node")
    .unwrap();
    assert!(again.token() > leadership.token());
    drop(leadership);
}
