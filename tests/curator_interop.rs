//! Interop with the real Apache Curator (Debian's `libcurator-recipes-java`): a zkfence lock
//! and Curator's `InterProcessMutex` on the same path exclude each other and queue FIFO,
//! whichever of the two made the (container) directory.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";

/// A Curator client driven line by line over stdin (Java 17 runs a single source file).
const DRIVER: &str = r#"
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        CuratorFramework client =
            CuratorFrameworkFactory.newClient(args[0], 4000, 4000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        // With a third argument: InterProcessSemaphoreV2 with that many leases instead.
        InterProcessSemaphoreV2 semaphore = args.length > 2
            ? new InterProcessSemaphoreV2(client, args[1], Integer.parseInt(args[2])) : null;
        java.util.ArrayDeque<Lease> leases = new java.util.ArrayDeque<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("acquire")) {
                if (semaphore != null) leases.push(semaphore.acquire()); else mutex.acquire();
                System.out.println("acquired");
            } else if (line.startsWith("try ")) {
                long ms = Long.parseLong(line.substring(4));
                boolean ok;
                if (semaphore != null) {
                    Lease lease = semaphore.acquire(ms, TimeUnit.MILLISECONDS);
                    if (lease != null) leases.push(lease);
                    ok = lease != null;
                } else {
                    ok = mutex.acquire(ms, TimeUnit.MILLISECONDS);
                }
                System.out.println(ok ? "acquired" : "timeout");
            } else if (line.equals("release")) {
                if (semaphore != null) semaphore.returnLease(leases.pop()); else mutex.release();
                System.out.println("released");
            } else {
                break;
            }
        }
        client.close();
    }
}
"#;

struct Curator {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    _dir: std::path::PathBuf,
}

impl Curator {
    /// `None` when Java or Curator is missing, outside CI (CI must never skip).
    async fn start(connect: &str, path: &str) -> Option<Curator> {
        Curator::start_with(connect, path, &[]).await
    }

    /// `start`, with more arguments for the driver (a number: a semaphore of that many).
    async fn start_with(connect: &str, path: &str, more: &[&str]) -> Option<Curator> {
        let java = std::process::Command::new("java").arg("-version").output();
        if java.is_err() || !std::path::Path::new(CURATOR_JAR).exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "Curator interop needs java and {CURATOR_JAR} (apt-get install libcurator-recipes-java)"
            );
            eprintln!("skipping: java or {CURATOR_JAR} missing");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("zkfence-curator-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("CuratorLock.java");
        std::fs::write(&source, DRIVER).unwrap();
        let mut child = Command::new("java")
            .args(["-Xmx64m", "-cp", CURATOR_JAR])
            .arg(&source)
            .args([connect, path])
            .args(more)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start java");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut curator = Curator {
            _child: child,
            stdin,
            lines,
            _dir: dir,
        };
        assert_eq!(curator.next().await, "ready");
        Some(curator)
    }

    async fn next(&mut self) -> String {
        within(
            Duration::from_secs(60),
            "Curator answers",
            self.lines.next_line(),
        )
        .await
        .expect("read Curator's output")
        .expect("Curator exited")
    }

    async fn send(&mut self, command: &str) {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn ask(&mut self, command: &str) -> String {
        self.send(command).await;
        self.next().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_and_curator_exclude_each_other_in_one_fifo_queue() {
    let zk = shared_ensemble();
    // Once with Curator making the directory first, once with zkfence.
    for curator_first in [true, false] {
        let dir = unique_path("curator");
        let ours = connect(&zk.connect_string(), Duration::from_secs(4)).await;
        let admin = connect(&zk.connect_string(), Duration::from_secs(4)).await;
        let Some(mut curator) = Curator::start(&zk.connect_string(), &dir).await else {
            return;
        };
        if curator_first {
            assert_eq!(curator.ask("acquire").await, "acquired");
            assert!(
                ours.lock(&dir).try_acquire().await.unwrap().is_none(),
                "zkfence sees Curator's holder"
            );
            // We queue behind Curator, and get the lock when it releases.
            let lock = ours.lock(&dir);
            let waiting = tokio::spawn(async move { lock.acquire().await });
            until_children(&admin, &dir, 2).await;
            assert!(!waiting.is_finished());
            assert_eq!(curator.ask("release").await, "released");
            let lease = within(Duration::from_secs(10), "granted after Curator", waiting)
                .await
                .unwrap()
                .unwrap();
            // Curator cannot get it while we hold.
            assert_eq!(curator.ask("try 500").await, "timeout");
            lease.release().await.unwrap();
        } else {
            let lease = ours.lock(&dir).acquire().await.unwrap();
            assert_eq!(curator.ask("try 500").await, "timeout");
            // Curator queues behind us and gets the lock when we release.
            curator.send("try 20000").await;
            until_children(&admin, &dir, 2).await;
            lease.release().await.unwrap();
            assert_eq!(curator.next().await, "acquired");
            assert!(ours.lock(&dir).try_acquire().await.unwrap().is_none());
            assert_eq!(curator.ask("release").await, "released");
        }
        // Both make containers: nothing is left once both are done.
        eventually(Duration::from_secs(5), "the queue is empty", || async {
            children(&admin, &dir).await.is_empty()
        })
        .await;
    }
}

/// Issue 21 item 6: zkfence records its limit in each permit, which Curator's
/// `InterProcessSemaphoreV2` ignores: the two still share one set of permits on one path,
/// and a zkfence participant with another limit is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_and_curator_share_a_semaphore_and_a_different_limit_is_refused() {
    let zk = shared_ensemble();
    let dir = unique_path("curator-semaphore");
    let ours = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let Some(mut curator) = Curator::start_with(&zk.connect_string(), &dir, &["2"]).await else {
        return;
    };
    assert_eq!(curator.ask("acquire").await, "acquired");
    let lease = within(
        Duration::from_secs(10),
        "zkfence takes the second permit",
        ours.semaphore(&dir, 2).with_id("z1").acquire(),
    )
    .await
    .unwrap();
    // Full: Curator counts ours, we count Curator's.
    assert_eq!(curator.ask("try 500").await, "timeout");
    assert!(ours
        .semaphore(&dir, 2)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    // Our holder recorded 2: a zkfence participant with 3 is refused, waiting or not.
    for waiting in [false, true] {
        let other = ours.semaphore(&dir, 3);
        let result = if waiting {
            other
                .acquire_timeout(Duration::from_secs(5))
                .await
                .map(Some)
        } else {
            other.try_acquire().await
        };
        match result {
            Err(zkfence::Error::PermitsMismatch {
                ours: 3,
                theirs: 2,
                holder,
                ..
            }) => assert_eq!(holder.owner.id.as_deref(), Some("z1")),
            other => panic!("waiting={waiting}: expected PermitsMismatch, got {other:?}"),
        }
    }
    // Our release frees a permit for Curator.
    lease.release().await.unwrap();
    assert_eq!(curator.ask("try 10000").await, "acquired");
    assert_eq!(curator.ask("release").await, "released");
    assert_eq!(curator.ask("release").await, "released");
}
