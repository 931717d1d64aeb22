//! Fencing tokens that never go backwards (the node's czxid), queues ordered right across the
//! sequence counter's wrap, and lock directories that clean up after themselves (container
//! nodes), on real ensembles.

mod common;

use std::time::Duration;

use common::*;
use tokio::time::Instant;
use zkfence::zookeeper_client as zk;
use zkfence::{Error, FencingToken, Session, SessionOptions};
use zkfence_testcontainers::Ensemble;

const T: Duration = Duration::from_secs(2);
/// How often the ensembles of this file look for empty containers.
const CONTAINER_CHECK: Duration = Duration::from_millis(100);

async fn ensemble() -> Ensemble {
    Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .container_check_interval(CONTAINER_CHECK)
        .start()
        .await
        .expect("start an ensemble")
}

async fn exists(session: &Session, path: &str) -> bool {
    let _ = session.client().sync(path).await;
    session.client().check_stat(path).await.unwrap().is_some()
}

/// One acquire+release; returns (token, sequence).
async fn cycle(session: &Session, dir: &str) -> (FencingToken, i32) {
    let lease = session.lock(dir).acquire().await.unwrap();
    let got = (lease.token(), lease.sequence());
    lease.release().await.unwrap();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_across_grants_recreated_directories_failover_and_expiry() {
    let zk = ensemble().await;
    let dir = unique_path("tokens");
    let s = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;

    // Many grants.
    let mut tokens = vec![];
    for _ in 0..20 {
        tokens.push(cycle(&s, &dir).await.0);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens strictly grow: {tokens:?}"
    );

    // The directory deleted while idle (an operator, or the container check) and the lock
    // taken again: the sequence restarts, the token does not.
    // The container check may remove it first: either way it is gone.
    match admin.client().delete(&dir, None).await {
        Ok(()) | Err(zk::Error::NoNode) => {}
        Err(e) => panic!("delete {dir}: {e}"),
    }
    let (token, sequence) = cycle(&s, &dir).await;
    assert_eq!(sequence, 0, "a new directory's counter starts again");
    assert!(
        token > *tokens.last().unwrap(),
        "after re-creation: {token} vs {}",
        tokens.last().unwrap()
    );
    tokens.push(token);

    // A ZooKeeper leader failover.
    let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    zk.kill(leader);
    zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let token = tokio::time::timeout(Duration::from_secs(20), cycle(&s, &dir))
        .await
        .expect("the lock works after the failover")
        .0;
    assert!(token > *tokens.last().unwrap(), "after a failover");
    tokens.push(token);

    // A session that expires while holding, and a new session.
    let proxy = zk.proxy().await.unwrap();
    let doomed = connect(&proxy.connect_string(), T).await;
    let held = doomed.lock(&dir).acquire().await.unwrap();
    let held_token = held.token();
    assert!(held_token > *tokens.last().unwrap());
    proxy.blackhole();
    eventually(
        Duration::from_secs(15),
        "the ensemble expired the holder",
        || {
            let node = held.path().to_string();
            let admin = admin.clone();
            async move { !exists(&admin, &node).await }
        },
    )
    .await;
    drop(held);
    let fresh = connect(&zk.connect_string(), T).await;
    let token = cycle(&fresh, &dir).await.0;
    assert!(token > held_token, "a new session after an expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_lock_directories_disappear() {
    let zk = ensemble().await;
    let parent = unique_path("seats");
    let s = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    // 50 seat locks, 10 at a time, each acquired and released.
    for batch in 0..5 {
        let locks: Vec<_> = (0..10)
            .map(|i| s.lock(&format!("{parent}/seat-{}", batch * 10 + i)))
            .collect();
        let leases = futures::future::join_all(locks.iter().map(|l| l.acquire())).await;
        for lease in leases {
            lease.unwrap().release().await.unwrap();
        }
    }
    eventually(
        Duration::from_secs(10),
        "every empty directory is removed, the parent too",
        || async { !exists(&admin, &parent).await },
    )
    .await;

    // Persistent directories stay when asked for.
    let keep = Session::connect(
        &zk.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .persistent_directories(true),
    )
    .await
    .unwrap();
    let kept = unique_path("kept");
    cycle(&keep, &kept).await;
    // Several container checks later it is still there.
    let checked_until = Instant::now() + CONTAINER_CHECK * 10;
    while Instant::now() < checked_until {
        assert!(exists(&admin, &kept).await, "a persistent directory stays");
        tokio::time::sleep(CONTAINER_CHECK).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_as_its_directory_is_removed_still_works() {
    let zk = ensemble().await;
    let dir = unique_path("race");
    let s = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    let mut last = FencingToken::new(0);
    let mut found_removed = 0;
    for i in 0..40u64 {
        // Acquire at varied moments around the leader's container check, so some acquires
        // find the directory gone and some race its removal.
        tokio::time::sleep(Duration::from_millis((i * 37) % 150)).await;
        if !exists(&admin, &dir).await {
            found_removed += 1;
        }
        let lease = tokio::time::timeout(Duration::from_secs(10), s.lock(&dir).acquire())
            .await
            .expect("acquire completes")
            .unwrap_or_else(|e| panic!("acquire {i}: {e}"));
        assert!(lease.token() > last, "tokens keep growing: {i}");
        last = lease.token();
        lease.release().await.unwrap();
    }
    assert!(
        found_removed >= 5,
        "the race was exercised: only {found_removed} of 40 acquires found the directory removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_named_across_the_sequence_wrap_are_ordered_right() {
    let zk = shared_ensemble();
    let dir = unique_path("wrap");
    let admin = connect(&zk.connect_string(), T).await;
    admin
        .client()
        .mkdir(
            &dir,
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    // Contenders named as ZooKeeper names them just before and after its signed 32-bit
    // counter wraps (%010d), created in a scrambled order.
    let names = [
        "_c_00000000-0000-0000-0000-000000000003-lock--2147483648",
        "_c_00000000-0000-0000-0000-000000000001-lock-2147483646",
        "0000000000000000000000000000000a__lock__-2147483647",
        "_c_00000000-0000-0000-0000-000000000002-lock-2147483647",
        "_c_00000000-0000-0000-0000-000000000005-__READ__-2147483646",
    ];
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    for name in names {
        admin
            .client()
            .create(&format!("{dir}/{name}"), b"", &ephemeral)
            .await
            .unwrap();
    }
    let observer = connect(&zk.connect_string(), T).await;
    let listed: Vec<String> = observer
        .lock(&dir)
        .contenders()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.node.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(
        listed,
        [names[1], names[3], names[0], names[2], names[4]],
        "every contender, in creation order across the wrap"
    );
    let sequences: Vec<i32> = observer
        .lock(&dir)
        .contenders()
        .await
        .unwrap()
        .iter()
        .map(|c| c.sequence)
        .collect();
    assert_eq!(
        sequences,
        [
            2147483646,
            2147483647,
            -2147483648,
            -2147483647,
            -2147483646
        ]
    );
    // The head holds: a newcomer cannot take the lock.
    assert!(observer.lock(&dir).try_acquire().await.unwrap().is_none());
    let leader = observer.election(&dir).leader().await.unwrap().unwrap();
    assert!(leader.node.ends_with(names[1]));
}

#[tokio::test]
async fn a_directory_deleted_under_a_waiter_says_to_acquire_again() {
    let zk = shared_ensemble();
    let dir = unique_path("dir-gone");
    let s = connect(&zk.connect_string(), T).await;
    let admin = connect(&zk.connect_string(), T).await;
    let holder = s.lock(&dir).acquire().await.unwrap();
    let waiter_session = connect(&zk.connect_string(), T).await;
    let lock = waiter_session.lock(&dir);
    let waiter = tokio::spawn(async move { lock.acquire().await });
    eventually(Duration::from_secs(5), "waiter queued", || async {
        children(&admin, &dir).await.len() == 2
    })
    .await;
    let client = admin.client();
    let mut writer = client.new_multi_writer();
    for n in children(&admin, &dir).await {
        writer.add_delete(&format!("{dir}/{n}"), None).unwrap();
    }
    writer.add_delete(&dir, None).unwrap();
    writer.commit().await.unwrap();
    // The holder's node and ours went in one transaction. Either the waiter saw its own
    // node's deletion first and says so, or (events of one transaction come back to back)
    // it was granted at that very commit and its lease is lost at once: never a lease that
    // stays held on a node that is gone.
    match tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
    {
        Err(err) => assert!(
            matches!(
                err,
                Error::LockDirectoryDeleted { .. } | Error::NodeDeleted { .. }
            ),
            "{err}"
        ),
        Ok(lease) => {
            let reason = tokio::time::timeout(Duration::from_secs(1), lease.lost())
                .await
                .expect("a lease on a deleted node is lost at once");
            assert_eq!(reason, zkfence::LossReason::NodeDeleted);
        }
    }
    let held_token = holder.token();
    drop(holder);
    // And the lock works again, in a new directory, with a larger token.
    let again = s.lock(&dir).acquire().await.unwrap();
    assert_eq!(again.sequence(), 0);
    assert!(again.token() > held_token);
}
