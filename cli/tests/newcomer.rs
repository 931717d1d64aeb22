//! The CLI as a newcomer tried it (issue 44): each test runs the `zkfence` process and
//! checks its exit code and output, as the user saw them.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::time::Duration;

use common::{eventually, shared_ensemble, unique_path};
use process::{run, zkfence};
use tokio::process::Child;

const RUN: Duration = Duration::from_secs(30);

/// Starts `zkfence exec ARGS... -- sh -c 'touch FILE; exec sleep 60'` and waits until CMD
/// runs (FILE exists).
async fn holding(connect: &str, args: &[&str], name: &str) -> Child {
    let file = std::env::temp_dir().join(format!(
        "zkfence-newcomer-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let script = format!("touch {}; exec sleep 60", file.display());
    let mut all: Vec<&str> = vec!["exec"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", &script]);
    let child = zkfence(connect, &all).spawn().unwrap();
    eventually(Duration::from_secs(20), &format!("{name} runs CMD"), || {
        let file = file.clone();
        async move { file.exists() }
    })
    .await;
    let _ = std::fs::remove_file(&file);
    child
}

// ---- item 1 ------------------------------------------------------------------------------

#[tokio::test]
async fn two_kinds_of_lock_on_one_path_are_refused_with_exit_2() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("mix");
    let mut plain = holding(&c, &[&path], "plain").await;
    let ran = run(
        zkfence(
            &c,
            &[
                "exec",
                "--no-wait",
                "--limit",
                "2",
                &path,
                "sh",
                "-c",
                "echo SEMAPHORE RAN",
            ],
        ),
        RUN,
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        !ran.stdout.contains("SEMAPHORE RAN"),
        "CMD ran: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("a semaphore") && ran.stderr.contains("a plain lock"),
        "names both kinds: {}",
        ran.stderr
    );
    plain.kill().await.unwrap();

    // The reverse: both permits of a --limit 2 held, a plain --no-wait is refused.
    let path = unique_path("mix-reverse");
    let mut a = holding(&c, &["--limit", "2", &path], "a").await;
    let mut b = holding(&c, &["--limit", "2", &path], "b").await;
    let ran = run(
        zkfence(
            &c,
            &["exec", "--no-wait", &path, "sh", "-c", "echo PLAIN RAN"],
        ),
        RUN,
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(!ran.stdout.contains("PLAIN RAN"), "CMD ran: {}", ran.stdout);
    assert!(ran.stderr.contains("a semaphore"), "{}", ran.stderr);
    a.kill().await.unwrap();
    b.kill().await.unwrap();
}

// ---- item 2 ------------------------------------------------------------------------------

#[tokio::test]
async fn exec_keeps_cmd_arguments_out_of_node_data() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("secret");
    let secret = "postgres://app:hunter2@db/prod";
    // As holding() does, with the secret an argument of CMD.
    let file = std::env::temp_dir().join(format!(
        "zkfence-newcomer-secret-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let script = format!("touch {}; exec sleep 60", file.display());
    let mut child = zkfence(&c, &["exec", &path, "sh", "-c", &script, secret])
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(20), "CMD runs", || {
        let file = file.clone();
        async move { file.exists() }
    })
    .await;
    let _ = std::fs::remove_file(&file);
    let status = run(zkfence(&c, &["status", "--json", &path]), RUN).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert!(
        !status.stdout.contains("hunter2"),
        "the secret is in node data: {}",
        status.stdout
    );
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let id = json["holders"][0]["owner"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(id.ends_with(":sh"), "HOST:PROGRAM, as elect's: {id}");
    // And the raw data, as zkCli's `get` shows it.
    let session = common::connect(&c, Duration::from_secs(4)).await;
    for node in common::children(&session, &path).await {
        let (data, _) = session
            .client()
            .get_data(&format!("{path}/{node}"))
            .await
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&data).contains("hunter2"),
            "the secret is in {node}'s data"
        );
    }
    child.kill().await.unwrap();
}
