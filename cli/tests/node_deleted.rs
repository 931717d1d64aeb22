//! Issue 43, item 2, from the command line: an operator deletes the node of a `zkfence exec`
//! holder (`zkCli.sh delete`, to clear a lock they think stuck). The next waiter may be
//! granted at once, as for any lock; the holder must be told at once too, and `exec` stops
//! CMD's process group and exits 76, as for any loss.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::time::Duration;

use common::{children, connect, eventually, shared_ensemble, unique_path};
use process::{finish, next_line, zkfence};
use tokio::time::Instant;

#[tokio::test]
async fn exec_stops_cmd_when_an_operator_deletes_its_node() {
    let zk = shared_ensemble();
    let path = unique_path("exec-node-deleted");
    let mut cli = zkfence(
        &zk.connect_string(),
        &[
            "--session-timeout",
            "3s",
            "exec",
            &path,
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            "echo ready; exec sleep 60",
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let operator = connect(&zk.connect_string(), Duration::from_secs(3)).await;
    let nodes = children(&operator, &path).await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    operator
        .client()
        .delete(&format!("{path}/{}", nodes[0]), None)
        .await
        .unwrap();
    let deleted = Instant::now();
    let ran = finish(cli, Duration::from_secs(20)).await;
    // Told within a keepalive interval (T/6 = 0.5 s) and a round trip of the grant; then CMD
    // gets SIGTERM (and `sleep` dies of it).
    let took = deleted.elapsed();
    assert_eq!(ran.code, Some(76), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("deleted"),
        "the reason is named: {}",
        ran.stderr
    );
    assert!(
        took < Duration::from_secs(3),
        "exec ended {took:?} after the delete"
    );
    eventually(Duration::from_secs(5), "nothing is left", || async {
        children(&operator, &path).await.is_empty()
    })
    .await;
}
