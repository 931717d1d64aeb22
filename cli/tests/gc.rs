//! `zkfence gc PATH [--apply]` on a real ensemble: a tree of empty and non-empty lock
//! directories; the dry run lists exactly the empty ones and removes nothing, `--apply`
//! removes exactly those.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use common::{connect, shared_ensemble, unique_path};
use zkfence::zookeeper_client as zk;
use zkfence::Session;

/// Every node under `root` (not `root` itself), after a sync.
async fn tree(session: &Session, root: &str) -> BTreeSet<String> {
    let client = session.client();
    let _ = client.sync(root).await;
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_string()];
    while let Some(path) = stack.pop() {
        for child in client.list_children(&path).await.unwrap_or_default() {
            let p = format!("{path}/{child}");
            out.insert(p.clone());
            stack.push(p);
        }
    }
    out
}

async fn gc(connect: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_zkfence"))
            .arg("--connect")
            .arg(connect)
            .arg("gc")
            .args(args)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("gc finished")
    .expect("run zkfence gc");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn gc_removes_exactly_the_empty_directories() {
    let zk = shared_ensemble();
    let root = unique_path("gc");
    let admin = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let client = &admin.client();
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mk = |path: String, data: &'static [u8]| {
        let options = persistent.clone();
        async move {
            client.create(&path, data, &options).await.unwrap();
        }
    };
    // unique_path's parent may not exist yet in this ensemble.
    let _ = client.create("/test", b"", &persistent).await;
    mk(root.clone(), b"").await;
    // Empty: a leaf, and a chain of empty directories.
    let empty = [
        format!("{root}/empty"),
        format!("{root}/chain"),
        format!("{root}/chain/a"),
        format!("{root}/chain/a/b"),
        format!("{root}/mixed/e"),
    ];
    // Not empty: a lock directory with a queue node (held by a lease), a directory with
    // data, a directory whose only child has data, and the parents of those.
    let kept = [
        format!("{root}/held"),
        format!("{root}/deep"),
        format!("{root}/deep/x"),
        format!("{root}/withdata"),
        format!("{root}/mixed"),
        format!("{root}/mixed/data"),
    ];
    for p in [
        "empty",
        "chain",
        "chain/a",
        "chain/a/b",
        "deep",
        "mixed",
        "mixed/e",
    ] {
        mk(format!("{root}/{p}"), b"").await;
    }
    mk(format!("{root}/withdata"), b"config").await;
    mk(format!("{root}/mixed/data"), b"x").await;
    let held = admin.lock(&format!("{root}/held")).acquire().await.unwrap();
    let deep = admin
        .lock(&format!("{root}/deep/x"))
        .acquire()
        .await
        .unwrap();
    let before = tree(&admin, &root).await;

    let (code, out) = gc(&zk.connect_string(), &[&root]).await;
    assert_eq!(code, Some(0), "{out}");
    let listed: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("would remove "))
        .map(String::from)
        .collect();
    assert_eq!(
        listed,
        empty.iter().cloned().collect(),
        "the dry run lists exactly the empty ones:\n{out}"
    );
    assert!(
        out.contains("5 empty directories") && out.contains("nothing removed"),
        "{out}"
    );
    assert_eq!(
        tree(&admin, &root).await,
        before,
        "the dry run removed nothing"
    );

    let (code, out) = gc(&zk.connect_string(), &[&root, "--apply"]).await;
    assert_eq!(code, Some(0), "{out}");
    let after = tree(&admin, &root).await;
    let removed: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(
        removed,
        empty.iter().cloned().collect(),
        "--apply removed exactly the empty ones:\n{out}"
    );
    for k in &kept {
        assert!(after.contains(k), "{k} is kept");
    }
    assert!(out.contains("removed 5 empty directories"), "{out}");
    assert!(
        client.check_stat(&root).await.unwrap().is_some(),
        "PATH itself stays"
    );
    // The leases still hold: their nodes were never touched.
    held.release().await.unwrap();
    deep.release().await.unwrap();
}
