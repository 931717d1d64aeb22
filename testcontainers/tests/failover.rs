//! Killing the leader of a 3-node ensemble elects another one, which serves writes.

mod common;

use std::time::Duration;

use common::{connect, within};
use zkfence_testcontainers::Ensemble;
use zookeeper_client::{Acls, CreateMode};

#[tokio::test]
async fn killing_the_leader_elects_another_that_serves_writes() {
    let zk = Ensemble::builder().nodes(3).start().await.unwrap();
    let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    zk.kill(leader);
    assert!(!zk.is_running(leader));

    let new_leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    assert_ne!(new_leader, leader);

    let client = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    within(
        Duration::from_secs(10),
        "create after failover",
        client.create(
            "/after-failover",
            b"x",
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        ),
    )
    .await
    .unwrap();
    let (data, _) = within(
        Duration::from_secs(10),
        "get",
        client.get_data("/after-failover"),
    )
    .await
    .unwrap();
    assert_eq!(data, b"x");
}
