//! Real ZooKeeper server processes on loopback.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Seek, SeekFrom, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::locate::ServerDist;
use crate::{FaultProxy, HarnessError};

const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
/// How long one four-letter-word exchange may take.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long [`Ensemble::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How long [`Ensemble::start`] (of one node) waits for it to serve.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times the whole ensemble start is tried again with new ports after a bind
/// failure.
const START_ATTEMPTS: usize = 4;
/// How long [`Ensemble::pause`] waits for the server's threads to stop.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of each node's log printed when a test panics with a live ensemble.
const PANIC_LOG_LINES: usize = 40;

/// Kills every process whose command line contains the ensemble dir, then removes the dir,
/// once its stdin reaches EOF, i.e. when the owning process is gone (or dropped the
/// ensemble). The dir is passed in the environment, so this shell's own command line does
/// not contain it and `pkill` cannot match the watchdog itself.
const WATCHDOG_SCRIPT: &str =
    r#"trap '' INT HUP; read _; pkill -KILL -f -- "$ZKT_PATTERN"; rm -rf -- "$ZKT_DIR""#;

/// A throwaway ZooKeeper ensemble: `n` real server processes (`QuorumPeerMain` JVMs)
/// listening on loopback, with their data and logs in a temporary directory.
///
/// Client ports are on `127.0.0.1`; the quorum and election ports of each ensemble are on
/// an address of its own in `127.0.0.0/8`, so ensembles of parallel tests do not meet.
///
/// Dropping it kills every server (SIGKILL to each process group, also when paused), waits
/// for them, and removes the directory; if the thread is panicking, it first prints the
/// last lines of every node's log to stderr. Should the owning process die without running
/// `Drop` (e.g. SIGKILL), a watchdog process kills the servers and removes the directory.
///
/// Node indices run from `0` to `len() - 1` (ZooKeeper's `myid` is the index plus one).
/// Methods taking an index panic if it is out of range.
#[derive(Debug)]
pub struct Ensemble {
    dist: ServerDist,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    nodes: Vec<Node>,
    watchdog: Mutex<Option<Watchdog>>,
}

/// One server of the ensemble.
#[derive(Debug)]
struct Node {
    dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    client: SocketAddr,
    process: Mutex<Option<Child>>,
}

/// The watchdog shell and the write end of its stdin pipe.
#[derive(Debug)]
struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// Configures and starts an [`Ensemble`]; see [`Ensemble::builder`].
#[derive(Debug, Clone)]
pub struct EnsembleBuilder {
    nodes: usize,
    tick_time: Duration,
    max_session_timeout: Option<Duration>,
    start_timeout: Duration,
}

impl Default for EnsembleBuilder {
    fn default() -> Self {
        EnsembleBuilder {
            nodes: 3,
            tick_time: Duration::from_millis(200),
            max_session_timeout: None,
            start_timeout: Duration::from_secs(60),
        }
    }
}

impl EnsembleBuilder {
    /// The number of servers: 1 (standalone), 3 (the default) or 5. Any `n >= 1` works; even
    /// sizes are legal but tolerate no more failures than the odd size below them.
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// ZooKeeper's `tickTime`, default 200 ms (whole milliseconds). Sessions timeouts are
    /// clamped by the server to `[2, 20] × tick` unless
    /// [`max_session_timeout`](Self::max_session_timeout) is set.
    pub fn tick_time(mut self, t: Duration) -> Self {
        self.tick_time = t;
        self
    }

    /// The longest session timeout the servers grant (`maxSessionTimeout`), default
    /// 20 × tick. The shortest (`minSessionTimeout`) is 2 × tick.
    pub fn max_session_timeout(mut self, t: Duration) -> Self {
        self.max_session_timeout = Some(t);
        self
    }

    /// How long [`start`](Self::start) waits for the quorum to serve, default 60 s.
    pub fn start_timeout(mut self, t: Duration) -> Self {
        self.start_timeout = t;
        self
    }

    /// Starts the servers and returns once a quorum serves: every node answers `srvr` with
    /// a `Mode:` line (`leader`, `follower` or `standalone`).
    ///
    /// If a server cannot bind one of its ports (taken by someone else meanwhile), the
    /// whole start is retried with new ports.
    pub async fn start(self) -> Result<Ensemble, HarnessError> {
        let tick = self.tick_time.as_millis() as u64;
        if self.nodes == 0 {
            return Err(HarnessError::InvalidConfig(
                "an ensemble needs at least one node".into(),
            ));
        }
        if tick == 0 {
            return Err(HarnessError::InvalidConfig(
                "tick_time must be at least 1 ms".into(),
            ));
        }
        let min_session = 2 * tick;
        let max_session = self
            .max_session_timeout
            .map(|t| t.as_millis() as u64)
            .unwrap_or(20 * tick);
        if max_session < min_session {
            return Err(HarnessError::InvalidConfig(format!(
                "max_session_timeout ({max_session} ms) is below the minimum session timeout \
                 2 × tick ({min_session} ms)"
            )));
        }
        let dist = ServerDist::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("zkt-")
            .tempdir_in(std::env::temp_dir())?;
        let dir_path = dir.path().to_path_buf();
        write_logging_configs(&dir_path)?;
        let watchdog = Watchdog::spawn(&dir_path)?;
        let mut ensemble = Ensemble {
            dist,
            dir: Some(dir),
            dir_path,
            nodes: Vec::new(),
            watchdog: Mutex::new(Some(watchdog)),
        };
        let started = Instant::now();
        let deadline = started + self.start_timeout;
        let mut attempt = 1;
        loop {
            ensemble.kill_all();
            ensemble.nodes = ensemble.prepare_nodes(self.nodes, tick, min_session, max_session)?;
            for i in 0..ensemble.nodes.len() {
                ensemble.spawn(i)?;
            }
            match ensemble.wait_all_serving(deadline).await {
                Ok(()) => break,
                Err(e) if attempt < START_ATTEMPTS && ensemble.any_bind_failure() => {
                    tracing::warn!(attempt, error = %e, "ZooKeeper could not bind a port; retrying with new ports");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        tracing::debug!(
            nodes = self.nodes,
            elapsed = ?started.elapsed(),
            dir = %ensemble.dir_path.display(),
            "ZooKeeper ensemble serving"
        );
        Ok(ensemble)
    }
}

impl Ensemble {
    /// A builder with the defaults: 3 nodes, 200 ms tick, sessions of 2 × tick to
    /// 20 × tick.
    pub fn builder() -> EnsembleBuilder {
        EnsembleBuilder::default()
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the ensemble has no servers (never true for a started ensemble).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The temporary directory holding every node's config, data and log.
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// The client addresses of all nodes as a connect string,
    /// `"127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"`.
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.client.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The connect string of node `i` alone.
    pub fn node_connect_string(&self, i: usize) -> String {
        self.nodes[i].client.to_string()
    }

    /// The client address of node `i`.
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        self.nodes[i].client
    }

    /// The client addresses of all nodes, by index.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.client).collect()
    }

    /// The index of the node that currently reports `Mode: leader` (or `Mode: standalone`),
    /// if any answers so right now. Nodes are asked concurrently; paused ones time out.
    pub async fn leader(&self) -> Option<usize> {
        let mut set = tokio::task::JoinSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let addr = n.client;
            set.spawn(async move { (i, four_letter_at(addr, "srvr", FOUR_LETTER_TIMEOUT).await) });
        }
        let mut found = None;
        while let Some(joined) = set.join_next().await {
            if let Ok((i, Ok((text, _)))) = joined {
                if matches!(mode_of(&text), Some("leader" | "standalone")) {
                    found = Some(found.map_or(i, |f: usize| f.min(i)));
                }
            }
        }
        found
    }

    /// Polls [`leader`](Self::leader) until a node reports being leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<usize, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.leader().await {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::NoLeader {
                    timeout,
                    log_tail: self.log_tail(PANIC_LOG_LINES),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

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

    /// The log file of node `i` (the server's stdout and stderr, across restarts).
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.nodes[i].log.clone()
    }

    /// The last `lines` lines of every node's log, each block headed by the node's index.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for i in 0..self.nodes.len() {
            out.push_str(&self.node_log_tail(i, lines));
        }
        out
    }

    /// Sends a four-letter-word command (e.g. `"srvr"`, `"cons"`, `"mntr"`, `"wchc"`) to
    /// node `i` and returns its answer. Fails with [`io::ErrorKind::TimedOut`] if the node
    /// does not answer within 2 s (e.g. when paused).
    pub async fn four_letter(&self, i: usize, cmd: &str) -> io::Result<String> {
        four_letter_at(self.nodes[i].client, cmd, FOUR_LETTER_TIMEOUT)
            .await
            .map(|(text, _)| text)
    }

    /// Whether node `i` serves clients: it answers `srvr` with a `Mode:` line.
    pub async fn serving(&self, i: usize) -> bool {
        self.serving_within(i, FOUR_LETTER_TIMEOUT).await
    }

    /// Polls until node `i` [serves](Self::serving). Fails early if its process is not
    /// running.
    pub async fn wait_serving(&self, i: usize, timeout: Duration) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self
                .serving_within(
                    i,
                    left.clamp(Duration::from_millis(100), FOUR_LETTER_TIMEOUT),
                )
                .await
            {
                return Ok(());
            }
            self.check_alive(i)?;
            if Instant::now() >= deadline {
                return Err(HarnessError::StartTimeout {
                    node: i,
                    log_tail: self.node_log_tail(i, PANIC_LOG_LINES),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The client connections of node `i`, parsed from `cons` (without the connection that
    /// asks).
    pub async fn connections(&self, i: usize) -> io::Result<Vec<ConnectionInfo>> {
        let (text, me) = four_letter_at(self.nodes[i].client, "cons", FOUR_LETTER_TIMEOUT).await?;
        Ok(parse_cons(&text)
            .into_iter()
            .filter(|c| c.peer != me)
            .collect())
    }

    /// A new [`FaultProxy`] in front of all nodes, in index order.
    pub async fn proxy(&self) -> Result<FaultProxy, HarnessError> {
        Ok(FaultProxy::start(self.client_addrs()).await?)
    }

    /// A new [`FaultProxy`] in front of the given nodes, in the given order.
    pub async fn proxy_to(&self, nodes: &[usize]) -> Result<FaultProxy, HarnessError> {
        let ups = nodes.iter().map(|&i| self.client_addr(i)).collect();
        Ok(FaultProxy::start(ups).await?)
    }

    // ---- internals ----

    async fn serving_within(&self, i: usize, timeout: Duration) -> bool {
        match four_letter_at(self.nodes[i].client, "srvr", timeout).await {
            Ok((text, _)) => mode_of(&text).is_some(),
            Err(_) => false,
        }
    }

    /// `Err(ProcessExited)` if node `i` is not running.
    fn check_alive(&self, i: usize) -> Result<(), HarnessError> {
        let status = match self.nodes[i].process.lock().unwrap().as_mut() {
            None => "not started, or killed".to_owned(),
            Some(child) => match child.try_wait() {
                Ok(None) => return Ok(()),
                Ok(Some(st)) => st.to_string(),
                Err(e) => format!("cannot get its status: {e}"),
            },
        };
        Err(HarnessError::ProcessExited {
            node: i,
            status,
            log_tail: self.node_log_tail(i, PANIC_LOG_LINES),
        })
    }

    async fn wait_all_serving(&self, deadline: Instant) -> Result<(), HarnessError> {
        let mut pending: Vec<usize> = (0..self.nodes.len()).collect();
        loop {
            let mut still = Vec::new();
            for &i in &pending {
                if !self.serving_within(i, Duration::from_millis(500)).await {
                    self.check_alive(i)?;
                    if self.log_shows_bind_failure(i) {
                        return Err(HarnessError::ProcessExited {
                            node: i,
                            status: "could not bind a port".into(),
                            log_tail: self.node_log_tail(i, PANIC_LOG_LINES),
                        });
                    }
                    still.push(i);
                }
            }
            pending = still;
            let Some(&first) = pending.first() else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(HarnessError::StartTimeout {
                    node: first,
                    log_tail: self.log_tail(PANIC_LOG_LINES),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn log_shows_bind_failure(&self, i: usize) -> bool {
        let text = read_tail(&self.nodes[i].log, 256 * 1024);
        text.contains("BindException") || text.contains("Address already in use")
    }

    fn any_bind_failure(&self) -> bool {
        (0..self.nodes.len()).any(|i| self.log_shows_bind_failure(i))
    }

    /// Picks ports and writes the config and data dir of every node (wiping earlier ones).
    fn prepare_nodes(
        &self,
        n: usize,
        tick: u64,
        min_session: u64,
        max_session: u64,
    ) -> Result<Vec<Node>, HarnessError> {
        // The listeners hold the ports until the servers are about to be spawned.
        let mut taken = HashSet::new();
        let clients = reserve_ports(Ipv4Addr::LOCALHOST, n, &mut taken)?;
        let peer_ip = if n > 1 {
            random_loopback_ip()
        } else {
            Ipv4Addr::LOCALHOST
        };
        let mut peer_taken = HashSet::new();
        let peers = if n > 1 {
            reserve_ports(peer_ip, 2 * n, &mut peer_taken)?
        } else {
            Vec::new()
        };
        let mut servers = String::new();
        if n > 1 {
            for id in 1..=n {
                let (p, e) = (peers[2 * (id - 1)].0, peers[2 * (id - 1) + 1].0);
                let _ = writeln!(servers, "server.{id}={peer_ip}:{p}:{e}");
            }
        }
        let mut nodes = Vec::with_capacity(n);
        for (idx, (client_port, _)) in clients.iter().enumerate() {
            let id = idx + 1;
            let dir = self.dir_path.join(format!("node{id}"));
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
            let data = dir.join("data");
            fs::create_dir_all(&data)?;
            fs::write(data.join("myid"), format!("{id}\n"))?;
            let config = dir.join("zoo.cfg");
            let text = format!(
                "tickTime={tick}\n\
                 initLimit=10\n\
                 syncLimit=5\n\
                 dataDir={data}\n\
                 clientPort={client_port}\n\
                 clientPortAddress=127.0.0.1\n\
                 4lw.commands.whitelist=*\n\
                 admin.enableServer=false\n\
                 minSessionTimeout={min_session}\n\
                 maxSessionTimeout={max_session}\n\
                 maxClientCnxns=0\n\
                 {servers}",
                data = data.display(),
            );
            fs::write(&config, text)?;
            nodes.push(Node {
                log: dir.join("zookeeper.log"),
                config,
                dir,
                client: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, *client_port)),
                process: Mutex::new(None),
            });
        }
        drop(clients);
        drop(peers);
        Ok(nodes)
    }

    /// Launches node `i`'s JVM in a process group of its own, appending to its log.
    fn spawn(&self, i: usize) -> Result<(), HarnessError> {
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

    fn kill_all(&self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }

    fn node_log_tail(&self, i: usize, lines: usize) -> String {
        let node = &self.nodes[i];
        let text = read_tail(&node.log, 64 * 1024 + lines * 512);
        let all: Vec<&str> = text.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        let mut out = format!("---- node {i} ({}) ----\n", node.log.display());
        for l in tail {
            out.push_str(l);
            out.push('\n');
        }
        out
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.nodes.is_empty() {
            eprintln!(
                "zkfence-testcontainers: ZooKeeper logs of the ensemble in {}:\n{}",
                self.dir_path.display(),
                self.log_tail(PANIC_LOG_LINES)
            );
        }
        self.kill_all();
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                tracing::warn!(%e, "could not remove the ensemble dir");
            }
        }
        if let Some(mut w) = self.watchdog.lock().unwrap().take() {
            // EOF on its stdin: it finds nothing to kill and nothing to remove, and exits.
            drop(w.stdin.take());
            let _ = w.child.wait();
        }
    }
}

impl Watchdog {
    fn spawn(dir: &Path) -> io::Result<Watchdog> {
        // A trailing slash so that the pattern cannot match a sibling dir with a longer name.
        let dir_slash = format!("{}/", dir.display());
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .env("ZKT_DIR", &dir_slash)
            .env("ZKT_PATTERN", regex_escape(&dir_slash))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: not hit by terminal signals to ours, nor by our group kills.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }
}

/// One client connection of a server, parsed from the `cons` four-letter word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The client's address as the server sees it (a proxy's address if proxied).
    pub peer: SocketAddr,
    /// The session id (`sid=0x..`), if the connection has established a session.
    pub session_id: Option<i64>,
    /// Packets received from the client (`recved`).
    pub received: u64,
    /// Packets sent to the client (`sent`).
    pub sent: u64,
}

/// Parses `cons` output lines such as
/// ` /127.0.0.1:39516[1](queued=0,recved=5,sent=5,sid=0x100009a2c7d0000,lop=PING,...)`.
fn parse_cons(text: &str) -> Vec<ConnectionInfo> {
    text.lines().filter_map(parse_cons_line).collect()
}

fn parse_cons_line(line: &str) -> Option<ConnectionInfo> {
    let line = line.trim().strip_prefix('/')?;
    let (addr, rest) = line.split_once('[')?;
    let peer: SocketAddr = addr.parse().ok()?;
    let fields = rest.split_once('(')?.1;
    let fields = fields.strip_suffix(')').unwrap_or(fields);
    let mut info = ConnectionInfo {
        peer,
        session_id: None,
        received: 0,
        sent: 0,
    };
    for kv in fields.split(',') {
        match kv.split_once('=') {
            Some(("recved", v)) => info.received = v.parse().unwrap_or(0),
            Some(("sent", v)) => info.sent = v.parse().unwrap_or(0),
            Some(("sid", v)) => {
                let hex = v.trim_start_matches("0x");
                info.session_id = u64::from_str_radix(hex, 16).ok().map(|u| u as i64);
            }
            _ => {}
        }
    }
    Some(info)
}

/// The `Mode:` of a `srvr` answer, if it has one.
fn mode_of(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(str::trim)
}

/// Sends a four-letter word, returns the answer and the local address used.
async fn four_letter_at(
    addr: SocketAddr,
    cmd: &str,
    timeout: Duration,
) -> io::Result<(String, SocketAddr)> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await?;
        let me = s.local_addr()?;
        s.write_all(cmd.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok((String::from_utf8_lossy(&out).into_owned(), me))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{addr} did not answer `{cmd}` within {timeout:?}"),
        )),
    }
}

/// Sends `sig` to the process group led by `child` (and to `child` itself).
fn signal_group(child: &Child, sig: libc::c_int) {
    // The child is not reaped yet, so its pid (= its group id) cannot have been reused.
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(-pid, sig);
        libc::kill(pid, sig);
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

fn kill_and_reap(mut child: Child) {
    signal_group(&child, libc::SIGKILL);
    let _ = child.wait();
}

/// The last `max` bytes of a file, lossily decoded; empty if unreadable.
fn read_tail(path: &Path, max: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(max as u64);
    if f.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if from > 0 {
        // Drop the partial first line.
        if let Some(nl) = text.find('\n') {
            text.drain(..=nl);
        }
    }
    text
}

/// Logging to stdout (redirected to the node's log) for log4j 1.2 (Debian) and logback
/// (Apache release), without the line per four-letter word that polling would cause.
fn write_logging_configs(dir: &Path) -> io::Result<()> {
    fs::write(
        dir.join("log4j.properties"),
        "log4j.rootLogger=INFO, CONSOLE\n\
         log4j.logger.org.apache.zookeeper.server.NIOServerCnxn=WARN\n\
         log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n\
         log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n\
         log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n",
    )?;
    fs::write(
        dir.join("logback.xml"),
        "<configuration>\n\
         <appender name=\"CONSOLE\" class=\"ch.qos.logback.core.ConsoleAppender\">\n\
         <encoder><pattern>%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>\n\
         </appender>\n\
         <logger name=\"org.apache.zookeeper.server.NIOServerCnxn\" level=\"WARN\"/>\n\
         <root level=\"INFO\"><appender-ref ref=\"CONSOLE\"/></root>\n\
         </configuration>\n",
    )?;
    Ok(())
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.^$*+?()[]{}|".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A pseudo-random number, different on every call and in every process.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

/// A random address in `127.1.0.1 ..= 127.254.255.254`, away from `127.0.0.1`.
fn random_loopback_ip() -> Ipv4Addr {
    let r = random_u64();
    Ipv4Addr::new(
        127,
        1 + (r % 254) as u8,
        ((r >> 8) & 0xff) as u8,
        1 + ((r >> 16) % 254) as u8,
    )
}

/// The range ports are picked from: below the kernel's ephemeral range, so that the local
/// ports of outgoing connections (clients, proxies) never take them.
fn port_range() -> Option<(u16, u16)> {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let low = text
        .as_deref()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|v| v.parse::<u16>().ok())
        .unwrap_or(32768);
    let (lo, hi) = (10_000u16, low.min(32768));
    (hi > lo + 2000).then_some((lo, hi))
}

/// Binds `count` distinct free ports on `ip` and keeps them bound (the listeners) until the
/// caller drops them.
fn reserve_ports(
    ip: Ipv4Addr,
    count: usize,
    taken: &mut HashSet<u16>,
) -> io::Result<Vec<(u16, TcpListener)>> {
    let mut out = Vec::with_capacity(count);
    let range = port_range();
    while out.len() < count {
        let listener = match range {
            Some((lo, hi)) => {
                let mut found = None;
                for _ in 0..1000 {
                    let p = lo + (random_u64() % u64::from(hi - lo)) as u16;
                    if taken.contains(&p) {
                        continue;
                    }
                    if let Ok(l) = TcpListener::bind((ip, p)) {
                        found = Some(l);
                        break;
                    }
                }
                match found {
                    Some(l) => l,
                    None => TcpListener::bind((ip, 0))?,
                }
            }
            None => TcpListener::bind((ip, 0))?,
        };
        let port = listener.local_addr()?.port();
        if taken.insert(port) {
            out.push((port, listener));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cons() {
        let text = " /127.0.0.1:39516[1](queued=0,recved=5,sent=6,sid=0x100009a2c7d0000,lop=PING,est=1700000000000,to=2000,lcxid=0x1,lzxid=0xffffffffffffffff,lresp=1,llat=0,minlat=0,avglat=0.0,maxlat=3)\n /127.0.0.1:39518[0](queued=0,recved=1,sent=0)\n\n";
        let cons = parse_cons(text);
        assert_eq!(cons.len(), 2);
        assert_eq!(cons[0].peer, "127.0.0.1:39516".parse().unwrap());
        assert_eq!(cons[0].session_id, Some(0x100009a2c7d0000));
        assert_eq!((cons[0].received, cons[0].sent), (5, 6));
        assert_eq!(cons[1].session_id, None);
    }

    #[test]
    fn finds_mode() {
        assert_eq!(
            mode_of("Zxid: 0x0\nMode: follower\nNode count: 5\n"),
            Some("follower")
        );
        assert_eq!(
            mode_of("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }

    #[test]
    fn escapes_regex() {
        assert_eq!(regex_escape("/tmp/a.b+c/"), r"/tmp/a\.b\+c/");
    }
}
