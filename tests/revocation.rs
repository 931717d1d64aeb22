//! Revocation, Curator's protocol, zkfence on both sides (Curator's side is in
//! `curator_interop.rs`): a request written while the holder is disconnected is still seen
//! once it reconnects, and a path that is not a contender's node is refused with a clear
//! error, writing nothing.

mod common;

use std::time::Duration;

use common::*;
use zkfence::{Error, LeaseState, SessionState};
use zkfence_testcontainers::FaultProxy;

const STEP: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_written_while_the_holder_is_disconnected_is_seen_after_it_reconnects() {
    let zk = shared_ensemble();
    let proxy = FaultProxy::start(vec![zk.client_addr(0)]).await.unwrap();
    let holder = connect(&proxy.connect_string(), Duration::from_secs(4)).await;
    let admin = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let dir = unique_path("revoke-disconnected");
    let lease = holder.lock(&dir).revocable().acquire().await.unwrap();
    // Nobody asked yet.
    let early = tokio::time::timeout(Duration::from_millis(300), lease.revoke_requested()).await;
    assert!(early.is_err(), "resolved without a request");
    // Cut the holder off (new connections go nowhere), revoke, then let it back.
    proxy.blackhole();
    proxy.cut();
    eventually(STEP, "the holder is disconnected", || async {
        holder.state() == SessionState::Disconnected
    })
    .await;
    let revoked = admin.lock(&dir).revoke_holder().await.unwrap().unwrap();
    assert_eq!(revoked.node, lease.path());
    proxy.heal();
    within(
        STEP,
        "revoke_requested() resolves after the reconnect",
        lease.revoke_requested(),
    )
    .await;
    assert_ne!(
        lease.state(),
        LeaseState::Lost(zkfence::LossReason::NodeDeleted),
        "a request releases nothing"
    );
    // Resolved once, it stays resolved.
    within(STEP, "again at once", lease.revoke_requested()).await;
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_path_that_is_no_contenders_node_is_refused_and_writes_nothing() {
    let zk = shared_ensemble();
    let session = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let dir = unique_path("revoke-bad");
    let lease = session.lock(&dir).acquire().await.unwrap();
    let gone = format!("{}9", &lease.path()[..lease.path().len() - 1]);
    let persistent = format!("{dir}-plain-0000000001");
    session
        .client()
        .create(
            &persistent,
            b"data",
            &zkfence::zookeeper_client::CreateMode::Persistent
                .with_acls(zkfence::zookeeper_client::Acls::anyone_all()),
        )
        .await
        .unwrap();
    for (path, says) in [
        (dir.as_str(), "no sequence number"),
        (gone.as_str(), "no such node"),
        (persistent.as_str(), "not ephemeral"),
    ] {
        match session.revoke(path).await {
            Err(err @ Error::NotALockNode { .. }) => {
                let text = err.to_string();
                assert!(text.contains(says) && text.contains(path), "{path}: {text}");
            }
            other => panic!("{path}: expected NotALockNode, got {other:?}"),
        }
    }
    assert!(matches!(
        session.revoke("no-slash").await,
        Err(Error::InvalidPath { .. })
    ));
    // Nothing was written.
    let (data, _) = session.client().get_data(&persistent).await.unwrap();
    assert_eq!(data, b"data");
    let (data, _) = session.client().get_data(lease.path()).await.unwrap();
    assert_ne!(data, b"__REVOKE__");
    session.client().delete(&persistent, None).await.unwrap();
    lease.release().await.unwrap();
}
