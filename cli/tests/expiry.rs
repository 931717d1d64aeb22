//! `zkfence elect` and `zkfence exec` across a session expiry: the process keeps going on the
//! new ZooKeeper session its `Session` opens, without a restart.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::time::Duration;

use common::{children, connect, eventually, shared_ensemble, unique_path, until_children};
use process::{next_line, signal, zkfence};
use tokio::io::AsyncReadExt;

const T: Duration = Duration::from_secs(2);

/// Waits (at most 10 s, else panics with `what`) for the process to exit: its exit code and
/// what it wrote on stderr.
async fn exit_of(mut cli: tokio::process::Child, what: &str) -> (Option<i32>, String) {
    let status = tokio::time::timeout(Duration::from_secs(10), cli.wait())
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
        .unwrap();
    let mut stderr = String::new();
    cli.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    (status.code(), stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_campaigns_again_after_its_session_expired() {
    let zk = shared_ensemble();
    let path = unique_path("elect-expiry");
    let proxy = zk.proxy().await.unwrap();
    let observer = connect(&zk.connect_string(), T).await;
    let script = r#"echo "term $ZKFENCE_TOKEN"; exec sleep 600"#;
    let mut cli = zkfence(
        &proxy.connect_string(),
        &[
            "--session-timeout",
            "2s",
            "elect",
            &path,
            "--id",
            "partitioned",
            "--",
            "sh",
            "-c",
            script,
        ],
    )
    .spawn()
    .unwrap();
    let first_term = next_line(&mut cli, Duration::from_secs(20)).await;
    assert!(first_term.starts_with("term "), "{first_term}");
    let first_session = observer.lock(&path).contenders().await.unwrap()[0].session_id;

    // Another candidate waits; the leader's network goes silent past its session timeout.
    let other = observer.election(&path);
    let other_elected = tokio::spawn(async move { other.campaign("other").await });
    until_children(&observer, &path, 2).await;
    proxy.blackhole();
    let other_leads = tokio::time::timeout(6 * T, other_elected)
        .await
        .expect("the other candidate is elected")
        .unwrap()
        .unwrap();
    proxy.heal();

    // Healed, the same process is a candidate again, on a new session, behind the leader.
    eventually(4 * T, "the old leader campaigns again", || async {
        let contenders = observer.lock(&path).contenders().await.unwrap();
        contenders.len() == 2
            && contenders[1].owner.id.as_deref() == Some("partitioned")
            && contenders[1].session_id != first_session
    })
    .await;
    other_leads.resign().await.unwrap();
    let second_term = next_line(&mut cli, Duration::from_secs(20)).await;
    assert!(second_term.starts_with("term "), "{second_term}");
    assert_ne!(second_term, first_term, "a new term, with a new token");

    signal(&cli, libc::SIGTERM);
    let (code, stderr) = exit_of(cli, "zkfence exits on SIGTERM").await;
    assert_eq!(code, Some(128 + libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("campaigning again"), "{stderr}");
    assert!(children(&observer, &path).await.is_empty(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_waiting_when_its_session_expires_queues_again() {
    let zk = shared_ensemble();
    let path = unique_path("exec-expiry");
    let proxy = zk.proxy().await.unwrap();
    let admin = connect(&zk.connect_string(), T).await;
    let holder = admin.lock(&path).acquire().await.unwrap();
    let mut cli = zkfence(
        &proxy.connect_string(),
        &[
            "--session-timeout",
            "2s",
            "exec",
            &path,
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            "echo ran with $ZKFENCE_TOKEN",
        ],
    )
    .spawn()
    .unwrap();
    until_children(&admin, &path, 2).await;
    let first_waiter = admin.lock(&path).contenders().await.unwrap()[1].session_id;
    proxy.blackhole();
    // The server expires the waiter's session, which deletes its node.
    eventually(6 * T, "the waiter's node is gone", || async {
        children(&admin, &path).await.len() == 1
    })
    .await;
    proxy.heal();
    eventually(
        4 * T,
        "the waiter queues again on a new session",
        || async {
            let contenders = admin.lock(&path).contenders().await.unwrap();
            contenders.len() == 2 && contenders[1].session_id != first_waiter
        },
    )
    .await;
    holder.release().await.unwrap();
    let ran = next_line(&mut cli, Duration::from_secs(20)).await;
    assert!(ran.starts_with("ran with "), "{ran}");
    let (code, stderr) = exit_of(cli, "zkfence exits after CMD").await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("lost our place in the queue; queueing again"),
        "{stderr}"
    );
}
