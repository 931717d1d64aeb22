//! The server JVMs: spawning each in a process group of its own, signalling (kill, stop,
//! pause, resume). The watchdog that cleans up after a process that died without dropping
//! its ensemble lives in `crate::hygiene` (the PostgreSQL harness uses it too).

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Ensemble, NODE_START_TIMEOUT};
use crate::hygiene::{kill_and_reap, signal_group};
use crate::HarnessError;

const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// How long [`Ensemble::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// How long [`Ensemble::pause`] waits for the server's threads to stop.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(5);

impl Ensemble {
    /// Kills node `i` with SIGKILL (its whole process group, also when paused) and reaps
    /// it. Does nothing if it is not running.
    pub fn kill(&self, i: usize) {
        let child = self.nodes[i].process.lock().unwrap().take();
        if let Some(child) = child {
            kill_and_reap(child);
        }
    }

    /// Stops node `i` gracefully: SIGTERM (and SIGCONT, in case it is paused), then SIGKILL
    /// if it has not exited after a short grace (3 s). Blocks the calling thread meanwhile.
    /// Does nothing if it is not running.
    pub fn stop(&self, i: usize) {
        let child = self.nodes[i].process.lock().unwrap().take();
        if let Some(mut child) = child {
            signal_group(&child, libc::SIGTERM);
            signal_group(&child, libc::SIGCONT);
            let deadline = Instant::now() + STOP_GRACE;
            while Instant::now() < deadline {
                if !matches!(child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            kill_and_reap(child);
        }
    }

    /// Starts node `i` again after [`kill`](Self::kill) or [`stop`](Self::stop), with the same
    /// ports, config and data directory, and waits (up to 60 s) until it serves. If it is
    /// still running, only resumes it (in case it is paused) and waits until it serves.
    pub async fn start(&self, i: usize) -> Result<(), HarnessError> {
        if self.is_running(i) {
            self.resume(i);
        } else {
            self.spawn(i)?;
        }
        self.wait_serving(i, NODE_START_TIMEOUT).await
    }

    /// [`stop`](Self::stop)s node `i` (without blocking the runtime) and
    /// [`start`](Self::start)s it again.
    pub async fn restart(&self, i: usize) -> Result<(), HarnessError> {
        let child = self.nodes[i].process.lock().unwrap().take();
        if let Some(mut child) = child {
            signal_group(&child, libc::SIGTERM);
            signal_group(&child, libc::SIGCONT);
            let deadline = Instant::now() + STOP_GRACE;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            kill_and_reap(child);
        }
        self.start(i).await
    }

    /// Removes the state a stopped node `i` keeps on disk (its snapshots, transaction logs
    /// and epoch files) but not its `myid`, so that its next [`start`](Self::start) rejoins
    /// as an empty follower and fetches everything from the leader, as an operator recovers
    /// a server whose data ZooKeeper refuses to load (e.g. "The current epoch, a, is older
    /// than the last zxid", ZOOKEEPER-2354: killed while writing a snapshot from the leader).
    /// Only for a node that is not running, in an ensemble of 3 or more whose others hold
    /// the data: wiping a majority (or a single node) loses the ensemble's data.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let zk = zkfence_testcontainers::Ensemble::builder().nodes(3).start().await?;
    /// zk.kill(2);
    /// if zk.start(2).await.is_err() {
    ///     zk.wipe_data(2)?;
    ///     zk.start(2).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Notable errors
    /// [`HarnessError::Io`] if the node is running (nothing is removed), or if its files
    /// cannot be removed.
    pub fn wipe_data(&self, i: usize) -> Result<(), HarnessError> {
        if self.is_running(i) {
            return Err(std::io::Error::other(format!(
                "node {i} is running: stop or kill it before wiping its data"
            ))
            .into());
        }
        let data = self.data_dir(i);
        for entry in fs::read_dir(&data)? {
            let entry = entry?;
            if entry.file_name() == "myid" {
                continue;
            }
            if entry.file_type()?.is_dir() {
                fs::remove_dir_all(entry.path())?;
            } else {
                fs::remove_file(entry.path())?;
            }
        }
        tracing::info!(node = i, dir = %data.display(), "wiped a stopped server's data (kept its myid)");
        Ok(())
    }

    /// Node `i`'s `dataDir`: its `myid`, and under `version-2` its epochs, snapshots and
    /// transaction logs.
    pub fn data_dir(&self, i: usize) -> std::path::PathBuf {
        self.nodes[i].dir.join("data")
    }

    /// Freezes node `i` with SIGSTOP: its sockets stay open but it answers nothing.
    ///
    /// Returns once every thread of the server is stopped (the kernel stops them
    /// asynchronously; on a busy machine a thread woken by network I/O may otherwise still
    /// answer a request after `kill` returned), or after 5 s at most.
    pub fn pause(&self, i: usize) {
        let pid = match self.nodes[i].process.lock().unwrap().as_ref() {
            Some(child) => {
                signal_group(child, libc::SIGSTOP);
                child.id()
            }
            None => return,
        };
        let deadline = Instant::now() + PAUSE_TIMEOUT;
        while all_threads_stopped(pid) == Some(false) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Lets a [`pause`](Self::pause)d node `i` run again (SIGCONT).
    pub fn resume(&self, i: usize) {
        if let Some(child) = self.nodes[i].process.lock().unwrap().as_ref() {
            signal_group(child, libc::SIGCONT);
        }
    }

    /// Whether node `i`'s process exists and has not exited (a paused node is running).
    pub fn is_running(&self, i: usize) -> bool {
        match self.nodes[i].process.lock().unwrap().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The process id of node `i`, if it is running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        let mut guard = self.nodes[i].process.lock().unwrap();
        let child = guard.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Launches node `i`'s JVM in a process group of its own, appending to its log.
    pub(super) fn spawn(&self, i: usize) -> Result<(), HarnessError> {
        let node = &self.nodes[i];
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)?;
        writeln!(
            log,
            "==== zkfence-testcontainers: starting node {i} (myid {}) ====",
            i + 1
        )?;
        let dir = &self.dir_path;
        let mut cmd = Command::new(&self.dist.java);
        cmd.args([
            "-Xmx256m",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-XX:-UsePerfData",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.net.preferIPv4Stack=true",
            "-Djava.awt.headless=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
        ])
        .arg(format!("-Dzookeeper.log.dir={}", node.dir.display()))
        .args(
            self.settings
                .jvm_props
                .iter()
                .map(|(k, v)| format!("-D{k}={v}")),
        )
        .arg(format!(
            "-Dlog4j.configuration=file:{}",
            dir.join("log4j.properties").display()
        ))
        .arg(format!(
            "-Dlogback.configurationFile={}",
            dir.join("logback.xml").display()
        ))
        .arg("-cp")
        .arg(self.dist.classpath_string())
        .arg(MAIN_CLASS)
        .arg(&node.config)
        .current_dir(&node.dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
        let child = cmd.spawn()?;
        tracing::debug!(node = i, pid = child.id(), "spawned ZooKeeper server");
        let old = self.nodes[i].process.lock().unwrap().replace(child);
        if let Some(old) = old {
            kill_and_reap(old);
        }
        Ok(())
    }

    pub(super) fn kill_all(&self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// Whether every thread of process `pid` is stopped; `None` if the process is gone.
fn all_threads_stopped(pid: u32) -> Option<bool> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let Ok(stat) = fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread just exited
        };
        // The state follows the parenthesised thread name, which may contain anything.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if !matches!(state, Some('T' | 't' | 'Z' | 'X') | None) {
            return Some(false);
        }
    }
    Some(true)
}
