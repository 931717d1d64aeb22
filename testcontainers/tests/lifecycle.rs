//! Ensembles start, serve, survive node restarts and pauses, and leave nothing behind.

mod common;

use std::io::ErrorKind;
use std::time::Duration;

use common::{assert_cleaned_up, connect, within};
use zkfence_testcontainers::Ensemble;
use zookeeper_client::{Acls, CreateMode};

#[tokio::test]
async fn one_node_ensemble_starts_serves_and_cleans_up() {
    let zk = Ensemble::builder().nodes(1).start().await.unwrap();
    assert_eq!(zk.len(), 1);
    assert!(!zk.is_empty());
    let srvr = zk.four_letter(0, "srvr").await.unwrap();
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert_eq!(zk.leader().await, Some(0));
    assert!(zk.connect_string().starts_with("127.0.0.1:"));
    assert_eq!(zk.node_connect_string(0), zk.connect_string());
    assert!(zk.log_path(0).starts_with(zk.dir()));
    assert!(zk.log_tail(5).contains("---- node 0"));

    let client = connect(&zk.connect_string(), Duration::from_secs(2)).await;
    let cons = zk.connections(0).await.unwrap();
    assert!(
        cons.iter()
            .any(|c| c.session_id == Some(client.session_id().0)),
        "{cons:?}"
    );
    drop(client);

    let pids = vec![zk.pid(0).unwrap()];
    let dir = zk.dir().to_path_buf();
    drop(zk);
    assert_cleaned_up(&pids, &dir);
}

#[tokio::test]
async fn three_node_ensemble_starts_with_a_quorum_and_cleans_up() {
    let zk = Ensemble::builder().nodes(3).start().await.unwrap();
    assert_eq!(zk.len(), 3);
    let mut modes = Vec::new();
    for i in 0..3 {
        let srvr = zk.four_letter(i, "srvr").await.unwrap();
        let mode = srvr
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .unwrap()
            .to_owned();
        modes.push(mode);
    }
    modes.sort();
    assert_eq!(modes, ["follower", "follower", "leader"]);
    assert!(zk.leader().await.is_some());
    assert_eq!(zk.client_addrs().len(), 3);
    assert_eq!(zk.connect_string().split(',').count(), 3);

    let pids: Vec<u32> = (0..3).map(|i| zk.pid(i).unwrap()).collect();
    let dir = zk.dir().to_path_buf();
    drop(zk);
    assert_cleaned_up(&pids, &dir);
}

#[tokio::test]
async fn paused_node_stops_answering_until_resumed() {
    let zk = Ensemble::builder().nodes(1).start().await.unwrap();
    zk.pause(0);
    let err = zk.four_letter(0, "srvr").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(!zk.serving(0).await);
    assert!(zk.is_running(0), "a paused node is still running");
    zk.resume(0);
    zk.wait_serving(0, Duration::from_secs(10)).await.unwrap();

    // Dropping the ensemble kills a paused server too.
    zk.pause(0);
    let pids = vec![zk.pid(0).unwrap()];
    let dir = zk.dir().to_path_buf();
    drop(zk);
    assert_cleaned_up(&pids, &dir);
}

#[tokio::test]
async fn killed_node_restarts_with_its_data() {
    let zk = Ensemble::builder().nodes(3).start().await.unwrap();
    let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    let node = (leader + 1) % 3;

    let client = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    within(
        Duration::from_secs(10),
        "create",
        client.create(
            "/kept",
            b"v1",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        ),
    )
    .await
    .unwrap();
    drop(client);

    let old_pid = zk.pid(node).unwrap();
    zk.kill(node);
    assert!(!zk.is_running(node));
    assert_eq!(zk.pid(node), None);
    assert!(zk.four_letter(node, "srvr").await.is_err());

    zk.start(node).await.unwrap();
    assert!(zk.is_running(node));
    assert_ne!(zk.pid(node), Some(old_pid));
    let srvr = zk.four_letter(node, "srvr").await.unwrap();
    assert!(srvr.contains("Mode: follower"), "{srvr}");
    let direct = connect(&zk.node_connect_string(node), Duration::from_secs(4)).await;
    let (data, _) = within(Duration::from_secs(10), "get", direct.get_data("/kept"))
        .await
        .unwrap();
    assert_eq!(data, b"v1");
    drop(direct);

    // A graceful restart works too.
    zk.restart(node).await.unwrap();
    assert!(zk.serving(node).await);

    // A follower that came back wiped would also read v1: it resyncs from the leader. So kill
    // every node at once and start them all again: with no peer left to resync from, the
    // data can only come from each node's own disk.
    for i in 0..3 {
        zk.kill(i);
    }
    let (a, b, c) = tokio::join!(zk.start(0), zk.start(1), zk.start(2));
    a.unwrap();
    b.unwrap();
    c.unwrap();
    for i in 0..3 {
        let direct = connect(&zk.node_connect_string(i), Duration::from_secs(4)).await;
        let (data, _) = within(
            Duration::from_secs(20),
            "get after a full restart",
            direct.get_data("/kept"),
        )
        .await
        .unwrap_or_else(|e| panic!("node {i} lost /kept across a restart of every node: {e}"));
        assert_eq!(data, b"v1");
    }
}
