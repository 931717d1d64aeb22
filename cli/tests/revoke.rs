//! `zkfence revoke` and `exec --revocable` (issue 24), with Curator's protocol against real
//! ensembles: a revocable `exec` stops CMD's group as SIGTERM would and exits 79, one that is
//! not revocable ignores the request, a revocable Curator holder is told, and a path with
//! nothing to revoke is refused with its exit code.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::path::PathBuf;
use std::time::Duration;

use common::curator::Curator;
use common::{children, connect, shared_ensemble, unique_path};
use process::{finish, next_line, signal, zkfence, Ran};

async fn revoke(connect: &str, args: &[&str]) -> Ran {
    let mut all = vec!["revoke"];
    all.extend_from_slice(args);
    finish(
        zkfence(connect, &all).spawn().unwrap(),
        Duration::from_secs(20),
    )
    .await
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zkfence-revoke-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// CMD: says "ready", and records a SIGTERM in `DIR/term` before it exits 3.
fn cmd(dir: &std::path::Path) -> String {
    format!(
        "trap 'echo term > {}/term; exit 3' TERM; echo ready; while :; do sleep 0.05; done",
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocable_exec_stops_cmd_like_sigterm_releases_and_exits_79() {
    let zk = shared_ensemble();
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let path = unique_path("revocable-exec");
    let dir = scratch("revocable");
    let mut cli = zkfence(
        &zk.connect_string(),
        &[
            "exec",
            "--revocable",
            "--grace",
            "2s",
            &path,
            "sh",
            "-c",
            &cmd(&dir),
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let asked = revoke(&zk.connect_string(), &[&path]).await;
    assert_eq!(asked.code, Some(0), "{}", asked.stderr);
    assert!(asked.stdout.starts_with("asked "), "{}", asked.stdout);
    let ran = finish(cli, Duration::from_secs(15)).await;
    assert_eq!(ran.code, Some(79), "{}", ran.stderr);
    assert!(ran.stderr.contains("revocation of"), "{}", ran.stderr);
    assert!(dir.join("term").exists(), "CMD got SIGTERM");
    assert!(
        children(&observer, &path).await.is_empty(),
        "released before exiting"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_that_is_not_revocable_is_not_asked_unless_forced() {
    // Issue 44 item 3: revoking a holder that does not listen looked like success (exit 0)
    // and erased who holds from `status`. Now it is refused without writing (exit 69), and
    // a forced request keeps the owner readable.
    let zk = shared_ensemble();
    let path = unique_path("plain-exec");
    let dir = scratch("plain");
    let mut cli = zkfence(
        &zk.connect_string(),
        &["exec", "--id", "nightly", &path, "sh", "-c", &cmd(&dir)],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let holder = observer.lock(&path).contenders().await.unwrap()[0].clone();
    let asked = revoke(&zk.connect_string(), &[&path]).await;
    assert_eq!(asked.code, Some(69), "{}", asked.stderr);
    assert!(
        asked.stderr.contains("does not take revocation requests")
            && asked.stderr.contains("--force"),
        "{}",
        asked.stderr
    );
    let (data, _) = observer.client().get_data(&holder.node).await.unwrap();
    assert_eq!(data, holder.owner.raw, "nothing was written");

    // Forced: written, ignored by this holder, and its owner still readable.
    let forced = revoke(&zk.connect_string(), &[&path, "--force"]).await;
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    // A revocable exec stops CMD within a few round trips; give this one a second.
    let told = tokio::time::timeout(Duration::from_secs(1), async {
        while !dir.join("term").exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if told.is_ok() {
        let ran = finish(cli, Duration::from_secs(15)).await;
        panic!("CMD was told: exit {:?}: {}", ran.code, ran.stderr);
    }
    let status = finish(
        zkfence(&zk.connect_string(), &["status", &path])
            .spawn()
            .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert!(
        status.stdout.contains("nightly")
            && status.stdout.contains("revocation requested")
            && !status.stdout.contains("__REVOKE__"),
        "{}",
        status.stdout
    );
    let json = finish(
        zkfence(&zk.connect_string(), &["status", &path, "--json"])
            .spawn()
            .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect(&json.stdout);
    let holder = &doc["holders"][0];
    assert_eq!(holder["revocation_requested"], true, "{}", json.stdout);
    assert_eq!(holder["owner"]["id"], "nightly", "{}", json.stdout);
    assert!(holder["owner"]["pid"].is_u64(), "{}", json.stdout);
    // Our own SIGTERM still works: CMD's trap exits 3, which zkfence passes on.
    signal(&cli, libc::SIGTERM);
    let ran = finish(cli, Duration::from_secs(15)).await;
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_revoke_tells_a_revocable_curator_holder() {
    let zk = shared_ensemble();
    let path = unique_path("revoke-curator");
    let Some(mut curator) = Curator::start(&zk.connect_string(), &path).await else {
        return;
    };
    assert_eq!(curator.ask("revocable").await, "revocable");
    assert_eq!(curator.ask("acquire").await, "acquired");
    // Curator's owner data cannot say it listens: not asked unless forced.
    let refused = revoke(&zk.connect_string(), &[&path]).await;
    assert_eq!(refused.code, Some(69), "{}", refused.stderr);
    let asked = revoke(&zk.connect_string(), &[&path, "--force"]).await;
    assert_eq!(asked.code, Some(0), "{}", asked.stderr);
    assert_eq!(curator.next().await, "revoke-requested");
    assert_eq!(curator.ask("release").await, "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_to_revoke_is_refused_with_its_code() {
    let zk = shared_ensemble();
    let session = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let path = unique_path("revoke-nothing");
    let nobody = revoke(&zk.connect_string(), &[&path]).await;
    assert_eq!(nobody.code, Some(1), "{}", nobody.stderr);
    assert!(nobody.stderr.contains("nobody holds"), "{}", nobody.stderr);
    // A given node that is not there: a usage error, and the holder is untouched.
    let lease = session.lock(&path).revocable().acquire().await.unwrap();
    let missing = revoke(
        &zk.connect_string(),
        &[&path, "--node", "_c_x-lock-0000000099"],
    )
    .await;
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(
        missing.stderr.contains("no such node"),
        "{}",
        missing.stderr
    );
    let told = tokio::time::timeout(Duration::from_millis(500), lease.revoke_requested()).await;
    assert!(told.is_err(), "the holder was not asked");
    // Its own name revokes it.
    let name = lease.path().rsplit('/').next().unwrap().to_string();
    let named = revoke(&zk.connect_string(), &[&path, "--node", &name]).await;
    assert_eq!(named.code, Some(0), "{}", named.stderr);
    common::within(
        Duration::from_secs(10),
        "the holder is asked",
        lease.revoke_requested(),
    )
    .await;
    lease.release().await.unwrap();
}
