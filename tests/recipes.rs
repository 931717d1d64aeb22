//! The recipes (cargo examples in `recipes/`) run and their behaviour holds: each exits 0 only
//! if it did. They run against this binary's shared ensemble through `ZKFENCE_CONNECT`, and
//! once without it, starting their own.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::shared_ensemble;
use tokio::process::Command;

struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

/// `cargo run --quiet --example NAME` with the same cargo, manifest and target directory as
/// this test (the first run builds the example).
async fn run_example(name: &str, connect: Option<String>) -> Ran {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let mut cmd = Command::new(cargo);
    cmd.args([
        "run",
        "--quiet",
        "--manifest-path",
        manifest,
        "--example",
        name,
    ])
    .env_remove("ZKFENCE_CONNECT")
    .stdin(Stdio::null())
    .kill_on_drop(true);
    if let Some(connect) = connect {
        cmd.env("ZKFENCE_CONNECT", connect);
    }
    // Generous: the first run of each example compiles and links it.
    let out = tokio::time::timeout(Duration::from_secs(600), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("example {name} did not finish"))
        .expect("run cargo");
    Ran {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn check(name: &str, ran: &Ran) {
    assert!(
        ran.success,
        "example {name} failed:\n{}\n{}",
        ran.stdout, ran.stderr
    );
}

#[tokio::test]
async fn fenced_storage_refuses_the_paused_holders_write() {
    let ran = run_example("fenced_storage", Some(shared_ensemble().connect_string())).await;
    check("fenced_storage", &ran);
    assert!(
        ran.stdout.contains("refused (stale fencing token"),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("final balance: 80"), "{}", ran.stdout);
}

#[tokio::test]
async fn seat_hold_sells_every_seat_once_and_passes_on_an_abandoned_hold() {
    let ran = run_example("seat_hold", Some(shared_ensemble().connect_string())).await;
    check("seat_hold", &ran);
    assert!(ran.stdout.contains("card declined"), "{}", ran.stdout);
    for seat in ["12A", "12B", "12C"] {
        assert_eq!(
            ran.stdout.matches(&format!(": bought {seat}")).count(),
            1,
            "{}",
            ran.stdout
        );
    }
}

#[tokio::test]
async fn cron_dedupe_runs_each_minute_once() {
    let ran = run_example("cron_dedupe", Some(shared_ensemble().connect_string())).await;
    check("cron_dedupe", &ran);
    assert_eq!(ran.stdout.matches(": running").count(), 3, "{}", ran.stdout);
    assert_eq!(ran.stdout.matches("skipping").count(), 9, "{}", ran.stdout);
}

#[tokio::test]
async fn a_recipe_without_a_connect_string_starts_its_own_ensemble() {
    let ran = run_example("cron_dedupe", None).await;
    check("cron_dedupe", &ran);
    assert!(
        ran.stderr.contains("starting a local ZooKeeper ensemble"),
        "{}",
        ran.stderr
    );
}
