//! Interop with the real Apache Curator (Debian's `libcurator-recipes-java`): a zkfence lock
//! and Curator's `InterProcessMutex` on the same path exclude each other and queue FIFO,
//! whichever of the two made the (container) directory; and each revokes the other's
//! revocable holder with Curator's protocol (`__REVOKE__` as the holder node's data).

mod common;

use std::time::Duration;

use common::curator::Curator;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_and_curator_exclude_each_other_in_one_fifo_queue() {
    let zk = shared_ensemble();
    // Once with Curator making the directory first, once with zkfence.
    for curator_first in [true, false] {
        let dir = unique_path("curator");
        let ours = connect(&zk.connect_string(), Duration::from_secs(4)).await;
        let admin = connect(&zk.connect_string(), Duration::from_secs(4)).await;
        let Some(mut curator) = Curator::start(&zk.connect_string(), &dir).await else {
            return;
        };
        if curator_first {
            assert_eq!(curator.ask("acquire").await, "acquired");
            assert!(
                ours.lock(&dir).try_acquire().await.unwrap().is_none(),
                "zkfence sees Curator's holder"
            );
            // We queue behind Curator, and get the lock when it releases.
            let lock = ours.lock(&dir);
            let waiting = tokio::spawn(async move { lock.acquire().await });
            until_children(&admin, &dir, 2).await;
            assert!(!waiting.is_finished());
            assert_eq!(curator.ask("release").await, "released");
            let lease = within(Duration::from_secs(10), "granted after Curator", waiting)
                .await
                .unwrap()
                .unwrap();
            // Curator cannot get it while we hold.
            assert_eq!(curator.ask("try 500").await, "timeout");
            lease.release().await.unwrap();
        } else {
            let lease = ours.lock(&dir).acquire().await.unwrap();
            assert_eq!(curator.ask("try 500").await, "timeout");
            // Curator queues behind us and gets the lock when we release.
            curator.send("try 20000").await;
            until_children(&admin, &dir, 2).await;
            lease.release().await.unwrap();
            assert_eq!(curator.next().await, "acquired");
            assert!(ours.lock(&dir).try_acquire().await.unwrap().is_none());
            assert_eq!(curator.ask("release").await, "released");
        }
        // Both make containers: nothing is left once both are done.
        eventually(Duration::from_secs(5), "the queue is empty", || async {
            children(&admin, &dir).await.is_empty()
        })
        .await;
    }
}

/// Issue 21 item 6: zkfence records its limit in each permit, which Curator's
/// `InterProcessSemaphoreV2` ignores: the two still share one set of permits on one path,
/// and a zkfence participant with another limit is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_and_curator_share_a_semaphore_and_a_different_limit_is_refused() {
    let zk = shared_ensemble();
    let dir = unique_path("curator-semaphore");
    let ours = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let Some(mut curator) = Curator::start_with(&zk.connect_string(), &dir, &["2"]).await else {
        return;
    };
    assert_eq!(curator.ask("acquire").await, "acquired");
    let lease = within(
        Duration::from_secs(10),
        "zkfence takes the second permit",
        ours.semaphore(&dir, 2).with_id("z1").acquire(),
    )
    .await
    .unwrap();
    // Full: Curator counts ours, we count Curator's.
    assert_eq!(curator.ask("try 500").await, "timeout");
    assert!(ours
        .semaphore(&dir, 2)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // Our holder recorded 2: a zkfence participant with 3 is refused, waiting or not.
    for waiting in [false, true] {
        let other = ours.semaphore(&dir, 3);
        let result = if waiting {
            other
                .acquire_timeout(Duration::from_secs(5))
                .await
                .map(Some)
        } else {
            other.try_acquire().await
        };
        match result {
            Err(zkfence::Error::PermitsMismatch {
                ours: 3,
                theirs: 2,
                holder,
                ..
            }) => assert_eq!(holder.owner.id.as_deref(), Some("z1")),
            other => panic!("waiting={waiting}: expected PermitsMismatch, got {other:?}"),
        }
    }
    // Our release frees a permit for Curator.
    lease.release().await.unwrap();
    assert_eq!(curator.ask("try 10000").await, "acquired");
    assert_eq!(curator.ask("release").await, "released");
    assert_eq!(curator.ask("release").await, "released");
}

/// Issue 24: Curator's `Revoker.attemptRevoke` on a revocable zkfence holder's node resolves
/// its `revoke_requested()`, and releases nothing; a holder that is not revocable is not told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curators_revoker_revokes_a_revocable_zkfence_holder_and_not_another() {
    let zk = shared_ensemble();
    let ours = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let dir = unique_path("curator-revoke");
    let Some(mut curator) = Curator::start(&zk.connect_string(), &dir).await else {
        return;
    };
    // Not revocable: the request is written, and ignored.
    let plain = ours.lock(&dir).acquire().await.unwrap();
    assert_eq!(
        curator.ask(&format!("revoke {}", plain.path())).await,
        "revoke-sent"
    );
    let told = tokio::time::timeout(Duration::from_secs(1), plain.revoke_requested()).await;
    assert!(told.is_err(), "a holder that is not revocable is not told");
    assert_eq!(plain.state(), zkfence::LeaseState::Held);
    plain.release().await.unwrap();
    // Revocable: told, and still the holder until it releases.
    let lease = ours.lock(&dir).revocable().acquire().await.unwrap();
    assert_eq!(
        curator.ask(&format!("revoke {}", lease.path())).await,
        "revoke-sent"
    );
    within(
        Duration::from_secs(10),
        "revoke_requested() resolves",
        lease.revoke_requested(),
    )
    .await;
    assert_eq!(lease.state(), zkfence::LeaseState::Held);
    assert_eq!(
        curator.ask("try 300").await,
        "timeout",
        "nothing was released"
    );
    lease.release().await.unwrap();
    assert_eq!(curator.ask("try 10000").await, "acquired");
    assert_eq!(curator.ask("release").await, "released");
}

/// Issue 24: zkfence's `revoke_holder` (what `zkfence revoke LOCKPATH` calls) tells a
/// revocable Curator `InterProcessMutex` holder: its `RevocationListener` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_revokes_a_revocable_curator_holder() {
    let zk = shared_ensemble();
    let ours = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let dir = unique_path("curator-revoked");
    let Some(mut curator) = Curator::start(&zk.connect_string(), &dir).await else {
        return;
    };
    assert_eq!(curator.ask("revocable").await, "revocable");
    assert_eq!(curator.ask("acquire").await, "acquired");
    let lock = ours.lock(&dir);
    let holder = lock
        .revoke_holder()
        .await
        .unwrap()
        .expect("Curator holds it");
    assert_eq!(
        children(&ours, &dir).await,
        vec![name_of(&holder.node).to_string()]
    );
    assert_eq!(curator.next().await, "revoke-requested");
    // The listener decides; here it lets go, and we get the lock.
    assert_eq!(curator.ask("release").await, "released");
    let lease = within(
        Duration::from_secs(10),
        "granted after Curator",
        lock.acquire(),
    )
    .await
    .unwrap();
    lease.release().await.unwrap();
    assert!(
        lock.revoke_holder().await.unwrap().is_none(),
        "nobody holds it now"
    );
}
