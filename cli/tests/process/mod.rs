//! Running the `zkfence` binary from the CLI's tests: one copy of the helpers every test file
//! of this crate uses.

#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The binary under test: this crate's, or another build named by `ZKFENCE_TEST_BIN` (e.g.
/// one from before a fix, to see the tests fail).
pub fn bin() -> String {
    std::env::var("ZKFENCE_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_zkfence").into())
}

/// `zkfence --connect CONNECT ARGS...`, with piped output, killed if the test ends first.
pub fn zkfence(connect: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("--connect")
        .arg(connect)
        .args(args)
        .env_remove("ZKFENCE_CONNECT")
        .env_remove("ZKFENCE_SERVER_TICK_TIME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Reads the next line of the child's stdout (at most `limit`).
pub async fn next_line(child: &mut Child, limit: Duration) -> String {
    let stdout = child.stdout.take().expect("stdout piped");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    tokio::time::timeout(limit, reader.read_line(&mut line))
        .await
        .unwrap_or_else(|_| panic!("no line from zkfence within {limit:?}"))
        .expect("read a line");
    // Give the pipe back, so later reads (and `finish`) see the rest.
    child.stdout = Some(reader.into_inner());
    line.trim_end().to_string()
}

/// Sends `sig` to our own child.
pub fn signal(child: &Child, sig: i32) {
    let pid = child.id().expect("still running") as i32;
    // SAFETY: kill(2) on our own unreaped child.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// The pid CMD wrote to `file`.
pub fn read_pid(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("CMD wrote {}: {e}", file.display()))
        .trim()
        .parse()
        .expect("a pid")
}

/// How a `zkfence` run ended, and what it wrote.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// From the call until it ended.
    pub took: Duration,
}

/// Runs to completion (at most `limit`).
pub async fn run(mut cmd: Command, limit: Duration) -> Ran {
    let started = Instant::now();
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("zkfence did not finish within {limit:?}"))
        .expect("run zkfence");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// Waits for `child` to exit (at most `limit`) and collects what it wrote.
pub async fn finish(mut child: Child, limit: Duration) -> Ran {
    let started = Instant::now();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let status = tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("zkfence did not exit within {limit:?}"))
        .expect("wait for zkfence");
    let mut out = String::new();
    let mut err = String::new();
    if let Some(s) = stdout.as_mut() {
        s.read_to_string(&mut out).await.unwrap();
    }
    if let Some(s) = stderr.as_mut() {
        s.read_to_string(&mut err).await.unwrap();
    }
    Ran {
        code: status.code(),
        stdout: out,
        stderr: err,
        took: started.elapsed(),
    }
}

/// Starts `zkfence exec ARGS... -- sh -c 'touch FILE; exec sleep 60'` and waits (at most 20 s)
/// until CMD runs (FILE exists): a holder for a test to contend with.
pub async fn holding(connect: &str, args: &[&str], name: &str) -> Child {
    let file = std::env::temp_dir().join(format!(
        "zkfence-holding-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let script = format!("touch {}; exec sleep 60", file.display());
    let mut all: Vec<&str> = vec!["exec"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", &script]);
    let child = zkfence(connect, &all).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(
            Instant::now() < deadline,
            "{name} did not run CMD within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = std::fs::remove_file(&file);
    child
}
