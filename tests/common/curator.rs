//! A real Apache Curator client (Debian's `libcurator-recipes-java`, Curator 5) driven line
//! by line over stdin, for the interop tests of the library and of the CLI.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::within;

pub const CURATOR_JAR: &str = "/usr/share/java/curator-recipes.jar";

/// A Curator client driven line by line over stdin (Java 17 runs a single source file).
const DRIVER: &str = r#"
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
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
            } else if (line.equals("revocable")) {
                // Curator's revocation: told when someone writes __REVOKE__ on our node.
                mutex.makeRevocable(m -> System.out.println("revoke-requested"));
                System.out.println("revocable");
            } else if (line.startsWith("revoke ")) {
                Revoker.attemptRevoke(client, line.substring(7));
                System.out.println("revoke-sent");
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

pub struct Curator {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    _dir: ScratchDir,
}

/// The driver's source directory, removed with the driver (a run of the interop tests left
/// one per Curator under the temp dir). Dropped after the child, which is killed first.
struct ScratchDir(std::path::PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Curator {
    /// `None` when Java or Curator is missing, outside CI (CI must never skip).
    pub async fn start(connect: &str, path: &str) -> Option<Curator> {
        Curator::start_with(connect, path, &[]).await
    }

    /// `start`, with more arguments for the driver (a number: a semaphore of that many).
    pub async fn start_with(connect: &str, path: &str, more: &[&str]) -> Option<Curator> {
        let java = std::process::Command::new("java").arg("-version").output();
        if java.is_err() || !std::path::Path::new(CURATOR_JAR).exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "Curator interop needs java and {CURATOR_JAR} (apt-get install libcurator-recipes-java)"
            );
            eprintln!("skipping: java or {CURATOR_JAR} missing");
            return None;
        }
        let dir = ScratchDir(
            std::env::temp_dir().join(format!("zkfence-curator-{}", uuid::Uuid::new_v4())),
        );
        std::fs::create_dir_all(&dir.0).unwrap();
        let source = dir.0.join("CuratorLock.java");
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

    pub async fn next(&mut self) -> String {
        within(
            Duration::from_secs(60),
            "Curator answers",
            self.lines.next_line(),
        )
        .await
        .expect("read Curator's output")
        .expect("Curator exited")
    }

    pub async fn send(&mut self, command: &str) {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    pub async fn ask(&mut self, command: &str) -> String {
        self.send(command).await;
        self.next().await
    }
}
