//! Interoperability with Python Kazoo's `Lock` (Debian's `python3-kazoo`) on the same path:
//! each excludes the other, with either of our node formats.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use zkfence::NodeFormat;

const DRIVER: &str = r#"
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
from kazoo.recipe.lock import Lock, ReadLock, WriteLock
hosts, path, mode, patterns = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start()
kind, _, mode = mode.rpartition("-")
if kind == "read":
    lock = ReadLock(zk, path, identifier="kazoo")
elif kind == "write":
    lock = WriteLock(zk, path, identifier="kazoo")
else:
    lock = Lock(zk, path, identifier="kazoo", extra_lock_patterns=[p for p in patterns.split(",") if p])
if mode == "hold":
    lock.acquire()
    print("HELD", flush=True)
    sys.stdin.readline()
    lock.release()
    print("RELEASED", flush=True)
else:
    try:
        got = lock.acquire(timeout=1.0)
    except LockTimeout:
        got = False
    print("GOT" if got else "BLOCKED", flush=True)
    if got:
        lock.release()
zk.stop()
"#;

fn kazoo(python: &str, path: &str, mode: &str, patterns: &str) -> Child {
    Command::new(python)
        .args([
            "-c",
            DRIVER,
            &shared_ensemble().connect_string(),
            path,
            mode,
            patterns,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run python3")
}

async fn next_line(child: &mut Child) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        BufReader::new(out).read_line(&mut line),
    )
    .await
    .expect("kazoo answers")
    .unwrap();
    line.trim().to_string()
}

async fn interop(format: NodeFormat, patterns: &str) {
    let Some(py) = python_with_kazoo() else {
        return;
    };
    let dir = unique_path("kazoo");
    let s = connect(&shared_ensemble().connect_string(), Duration::from_secs(4)).await;

    // Kazoo holds: we are excluded, and get it after Kazoo releases.
    let mut holder = kazoo(py, &dir, "hold", patterns);
    assert_eq!(next_line(&mut holder).await, "HELD");
    let lock = s.lock(&dir).with_format(format);
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "Kazoo holds the lock"
    );
    assert!(matches!(
        lock.acquire_timeout(Duration::from_millis(500)).await,
        Err(zkfence::Error::Timeout { ahead: 1, .. })
    ));
    let waiting = tokio::spawn(async move { lock.acquire().await.map(|l| (l.token(), l)) });
    eventually(Duration::from_secs(5), "we queue behind Kazoo", || async {
        children(&s, &dir).await.len() == 2
    })
    .await;
    holder
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"go\n")
        .await
        .unwrap();
    assert_eq!(next_line(&mut holder).await, "RELEASED");
    let (_, lease) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    // We hold: Kazoo is excluded.
    let mut probe = kazoo(py, &dir, "try", patterns);
    assert_eq!(next_line(&mut probe).await, "BLOCKED");
    lease.release().await.unwrap();
    let mut probe = kazoo(py, &dir, "try", patterns);
    assert_eq!(next_line(&mut probe).await, "GOT");
}

#[tokio::test]
async fn kazoo_format_excludes_and_is_excluded_by_kazoo() {
    interop(NodeFormat::Kazoo, "").await;
}

#[tokio::test]
async fn curator_format_interoperates_with_kazoo_extra_lock_patterns() {
    interop(NodeFormat::Curator, "-lock-").await;
}

#[tokio::test]
async fn read_write_locks_share_and_exclude_with_kazoos() {
    let Some(py) = python_with_kazoo() else {
        return;
    };
    let dir = unique_path("kazoo-rw");
    let s = connect(&shared_ensemble().connect_string(), Duration::from_secs(4)).await;

    // Kazoo reads: we may read too, but not write.
    let mut reader = kazoo(py, &dir, "read-hold", "");
    assert_eq!(next_line(&mut reader).await, "HELD");
    let ours = s
        .read_lock(&dir)
        .with_format(NodeFormat::Kazoo)
        .try_acquire()
        .await
        .unwrap();
    let ours = ours.expect("readers share with Kazoo's ReadLock");
    assert!(s
        .write_lock(&dir)
        .with_format(NodeFormat::Kazoo)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // … and Kazoo cannot write while we (and it) read.
    let mut probe = kazoo(py, &dir, "write-try", "");
    assert_eq!(next_line(&mut probe).await, "BLOCKED");
    ours.release().await.unwrap();
    reader
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"go\n")
        .await
        .unwrap();
    assert_eq!(next_line(&mut reader).await, "RELEASED");

    // Kazoo writes: we can neither read nor write.
    let mut writer = kazoo(py, &dir, "write-hold", "");
    assert_eq!(next_line(&mut writer).await, "HELD");
    assert!(s
        .read_lock(&dir)
        .with_format(NodeFormat::Kazoo)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert!(s
        .write_lock(&dir)
        .with_format(NodeFormat::Kazoo)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    writer
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"go\n")
        .await
        .unwrap();
    assert_eq!(next_line(&mut writer).await, "RELEASED");

    // We write: Kazoo can neither read nor write.
    let ours = s
        .write_lock(&dir)
        .with_format(NodeFormat::Kazoo)
        .acquire()
        .await
        .unwrap();
    let mut probe = kazoo(py, &dir, "read-try", "");
    assert_eq!(next_line(&mut probe).await, "BLOCKED");
    ours.release().await.unwrap();
    let mut probe = kazoo(py, &dir, "read-try", "");
    assert_eq!(next_line(&mut probe).await, "GOT");
}
