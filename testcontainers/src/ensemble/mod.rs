//! Real ZooKeeper server processes on loopback.
//!
//! This module holds the public half (the [`Ensemble`] and its builder); the submodules hold
//! one concern each: `process` (the JVMs, their process groups and the watchdog), `config`
//! (zoo.cfg, myid, logging configs), `four_letter` (four-letter words and their parsing) and
//! `ports` (picking free ports and addresses).

mod config;
mod four_letter;
mod peers;
pub(crate) mod ports;
mod process;
mod security;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::locate::ServerDist;
use crate::{FaultProxy, HarnessError};

use crate::hygiene::Watchdog;
use config::{write_logging_configs, ServerSettings};
pub use four_letter::ConnectionInfo;
use four_letter::{four_letter_at, mode_of, FOUR_LETTER_TIMEOUT};
use peers::PeerLinks;
pub use security::{ClientAuth, ClientIdentity, TlsMaterial};

/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long [`Ensemble::start`] (of one node) waits for it to serve.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times the whole ensemble start is tried again with new ports after a bind
/// failure.
const START_ATTEMPTS: usize = 4;

/// Lines of each node's log printed when a test panics with a live ensemble.
const PANIC_LOG_LINES: usize = 40;

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
    settings: ServerSettings,
    peers: Option<PeerLinks>,
    watchdog: Mutex<Option<Watchdog>>,
    tls: Option<TlsMaterial>,
}

/// One server of the ensemble.
#[derive(Debug)]
struct Node {
    dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    client: SocketAddr,
    /// The `secureClientPort`, on a TLS ensemble.
    secure_client: Option<SocketAddr>,
    process: Mutex<Option<Child>>,
}

/// Configures and starts an [`Ensemble`]; see [`Ensemble::builder`].
#[derive(Debug, Clone)]
pub struct EnsembleBuilder {
    nodes: usize,
    tick_time: Duration,
    max_session_timeout: Option<Duration>,
    min_session_timeout: Option<Duration>,
    sync_limit: u32,
    init_limit: u32,
    peer_links: bool,
    system_properties: Vec<(String, String)>,
    start_timeout: Duration,
    tls: Option<ClientAuth>,
    tls_material: Option<TlsMaterial>,
    sasl_users: Vec<(String, String)>,
    client_port_base: Option<u16>,
}

impl Default for EnsembleBuilder {
    fn default() -> Self {
        EnsembleBuilder {
            nodes: 3,
            tick_time: Duration::from_millis(200),
            max_session_timeout: None,
            min_session_timeout: None,
            sync_limit: 5,
            init_limit: 10,
            peer_links: false,
            system_properties: Vec::new(),
            start_timeout: Duration::from_secs(60),
            tls: None,
            tls_material: None,
            sasl_users: Vec::new(),
            client_port_base: None,
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

    /// Serves node `i`'s clients on port `base + i` of 127.0.0.1 (the secure ports, with
    /// [`tls`](Self::tls), follow the last), instead of free ports picked at random: for an
    /// operator who wants to know them in advance. Starting fails if one is taken.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .client_port_base(12181)
    ///     .start()
    ///     .await?;
    /// assert_eq!(zk.client_addr(1).port(), 12182);
    /// # Ok(()) }
    /// ```
    pub fn client_port_base(mut self, base: u16) -> Self {
        self.client_port_base = Some(base);
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
    /// 20 × tick (or the [`min_session_timeout`](Self::min_session_timeout), if that is
    /// longer). The shortest is 2 × tick unless set.
    pub fn max_session_timeout(mut self, t: Duration) -> Self {
        self.max_session_timeout = Some(t);
        self
    }

    /// The shortest session timeout the servers grant (`minSessionTimeout`), default
    /// 2 × tick. A client asking for less gets this.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// // Sessions of at least 4 s, whatever the client asks for.
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .min_session_timeout(Duration::from_secs(4))
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn min_session_timeout(mut self, t: Duration) -> Self {
        self.min_session_timeout = Some(t);
        self
    }

    /// ZooKeeper's `syncLimit`, in ticks, default 5: how long a follower goes on without
    /// hearing from its leader (and the leader without a quorum of followers) before it
    /// gives up on it. A follower cut off from its leader answers reads from its own copy
    /// of the tree for up to `sync_limit × tick_time`, then drops its clients.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// // A follower notices a lost leader after 10 × 200 ms = 2 s.
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .tick_time(Duration::from_millis(200))
    ///     .sync_limit(10)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks;
        self
    }

    /// ZooKeeper's `initLimit`, in ticks, default 10: how long a new leader waits for a
    /// quorum of followers to connect and sync before it gives up and elects again. At a long
    /// tickTime a small value keeps an election that went astray (a follower that gave up on
    /// the new leader before it listened) from stalling for `10 × tickTime`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .tick_time(Duration::from_millis(2000))
    ///     .init_limit(3)
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn init_limit(mut self, ticks: u32) -> Self {
        self.init_limit = ticks;
        self
    }

    /// Puts a proxy on every server-to-server link (quorum and election ports, each
    /// direction), so that [`Ensemble::isolate`] can cut a server off from its peers while
    /// its clients stay connected. Off by default: the links are then direct.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .nodes(3)
    ///     .peer_links(true)
    ///     .start()
    ///     .await?;
    /// zk.isolate(0);
    /// // ... node 0 still accepts clients, but hears nothing from the other two ...
    /// zk.heal_all_peers();
    /// # Ok(()) }
    /// ```
    pub fn peer_links(mut self, on: bool) -> Self {
        self.peer_links = on;
        self
    }

    /// Sets the Java system property `znode.container.checkIntervalMs` of every server: how
    /// often the leader looks for container nodes without children (and expired TTL nodes)
    /// to delete. ZooKeeper's default is 60 s; a test of container cleanup wants a fraction
    /// of a second. (The leader deletes at most `znode.container.maxPerMinute` of them a
    /// minute, 10,000 by default.)
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .container_check_interval(Duration::from_millis(100))
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn container_check_interval(self, t: Duration) -> Self {
        let ms = t.as_millis().max(1);
        self.system_property("znode.container.checkIntervalMs", ms.to_string())
    }

    /// Sets a Java system property (`-Dkey=value`) of every server JVM, e.g.
    /// `zookeeper.commitLogCount`. Setting a key again replaces its value.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .system_property("zookeeper.snapCount", "1000")
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn system_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        self.system_properties.retain(|(k, _)| *k != key);
        self.system_properties.push((key, value.into()));
        self
    }

    /// Serves TLS on a `secureClientPort` of every node besides the plaintext `clientPort`
    /// (which the harness keeps for its four-letter words; a test of TLS connects to
    /// [`Ensemble::secure_connect_string`]). The servers use the Netty connection factory
    /// and PEM key and trust stores made fresh in the ensemble's directory
    /// ([`Ensemble::tls`] gives the CA for clients, and makes client certificates); `auth`
    /// says whether clients must present a certificate. With [`ClientAuth::Need`] a
    /// client's certificate subject is its identity (`x509:CN=...`, for ACLs).
    ///
    /// Needs the `openssl` command.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use zkfence_testcontainers::{ClientAuth, Ensemble};
    /// let zk = Ensemble::builder().nodes(1).tls(ClientAuth::Need).start().await?;
    /// let tls = zk.tls().expect("a TLS ensemble");
    /// let alice = tls.client_identity("alice")?;
    /// println!("connect to {} trusting {}", zk.secure_connect_string(), tls.ca_cert().display());
    /// # Ok(()) }
    /// ```
    pub fn tls(mut self, auth: ClientAuth) -> Self {
        self.tls = Some(auth);
        self
    }

    /// [`tls`](Self::tls) with the given material instead of a fresh one, e.g. a server
    /// certificate for other names ([`TlsMaterial::generate_for`]).
    ///
    /// ```no_run
    /// # async fn example(dir: &std::path::Path) -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use zkfence_testcontainers::{ClientAuth, Ensemble, TlsMaterial};
    /// let misnamed = TlsMaterial::generate_for(dir, &["DNS:elsewhere.invalid"])?;
    /// let zk = Ensemble::builder().nodes(1).tls_material(misnamed, ClientAuth::None).start().await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_material(mut self, material: TlsMaterial, auth: ClientAuth) -> Self {
        self.tls = Some(auth);
        self.tls_material = Some(material);
        self
    }

    /// Accepts SASL DIGEST-MD5 authentication for these users (name, password): a JAAS
    /// `Server` section with `user_<name>="<password>"` entries, and
    /// `authProvider.sasl`. A client authenticated so has the identity `sasl:<name>`.
    /// Works on the plaintext and the TLS port.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let zk = zkfence_testcontainers::Ensemble::builder()
    ///     .nodes(1)
    ///     .sasl_digest_users(&[("alice", "alice-pw"), ("bob", "bob-pw")])
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sasl_digest_users(mut self, users: &[(&str, &str)]) -> Self {
        self.sasl_users = users
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect();
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
        if self.sync_limit == 0 {
            return Err(HarnessError::InvalidConfig(
                "sync_limit must be at least 1 tick".into(),
            ));
        }
        let min_session = self
            .min_session_timeout
            .map(|t| t.as_millis() as u64)
            .unwrap_or(2 * tick);
        let max_session = self
            .max_session_timeout
            .map(|t| t.as_millis() as u64)
            .unwrap_or((20 * tick).max(min_session));
        if max_session < min_session {
            return Err(HarnessError::InvalidConfig(format!(
                "max_session_timeout ({max_session} ms) is below the minimum session timeout \
                 ({min_session} ms)"
            )));
        }
        let mut settings = ServerSettings {
            tick,
            init_limit: self.init_limit.max(1),
            sync_limit: self.sync_limit,
            min_session,
            max_session,
            jvm_props: self.system_properties.clone(),
            secure: self.tls.is_some(),
            client_port_base: self.client_port_base,
        };
        let mut dist = ServerDist::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("zkt-")
            .tempdir_in(std::env::temp_dir())?;
        let dir_path = dir.path().to_path_buf();
        write_logging_configs(&dir_path)?;
        let tls = match self.tls {
            None => None,
            Some(auth) => {
                let material = match &self.tls_material {
                    Some(given) => given.clone(),
                    None => TlsMaterial::generate(&dir_path.join("tls"))?,
                };
                settings.jvm_props.extend(material.server_properties(auth));
                dist.classpath.extend(security::netty_extras());
                Some(material)
            }
        };
        if !self.sasl_users.is_empty() {
            let props = security::sasl_server(&dir_path, &self.sasl_users)?;
            settings.jvm_props.extend(props);
        }
        let watchdog = Watchdog::for_dir(&dir_path)?;
        let mut ensemble = Ensemble {
            dist,
            dir: Some(dir),
            dir_path,
            nodes: Vec::new(),
            settings,
            peers: None,
            watchdog: Mutex::new(Some(watchdog)),
            tls,
        };
        let started = Instant::now();
        let deadline = started + self.start_timeout;
        let mut attempt = 1;
        loop {
            ensemble.kill_all();
            ensemble.peers = None;
            let (nodes, peers) = ensemble
                .prepare_nodes(self.nodes, &ensemble.settings, self.peer_links)
                .await?;
            ensemble.nodes = nodes;
            ensemble.peers = peers;
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

    /// The TLS material of a [TLS ensemble](EnsembleBuilder::tls): its CA, and client
    /// certificates on demand. `None` for a plaintext one.
    pub fn tls(&self) -> Option<&TlsMaterial> {
        self.tls.as_ref()
    }

    /// The `secureClientPort` addresses of all nodes, by index (empty for a plaintext
    /// ensemble).
    pub fn secure_client_addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().filter_map(|n| n.secure_client).collect()
    }

    /// The TLS addresses of all nodes as a connect string (empty for a plaintext ensemble).
    pub fn secure_connect_string(&self) -> String {
        self.secure_client_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A new [`FaultProxy`] in front of the TLS ports of all nodes. It relays bytes, so TLS
    /// goes through it end to end.
    pub async fn secure_proxy(&self) -> Result<FaultProxy, HarnessError> {
        Ok(FaultProxy::start(self.secure_client_addrs()).await?)
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

    /// What node `i` says it is right now (`Mode:` of its `srvr` answer: "leader",
    /// "follower", "standalone", ...), or `None` if it does not answer in time.
    ///
    /// ```no_run
    /// # async fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// for i in 0..zk.len() {
    ///     println!("server {}: {:?}", i + 1, zk.role(i).await);
    /// }
    /// # }
    /// ```
    pub async fn role(&self, i: usize) -> Option<String> {
        let (text, _) = four_letter_at(self.nodes[i].client, "srvr", FOUR_LETTER_TIMEOUT)
            .await
            .ok()?;
        mode_of(&text).map(str::to_string)
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

    /// A new [`FaultProxy`] in front of all nodes, in index order.
    pub async fn proxy(&self) -> Result<FaultProxy, HarnessError> {
        Ok(FaultProxy::start(self.client_addrs()).await?)
    }

    /// A new [`FaultProxy`] in front of the given nodes, in the given order.
    pub async fn proxy_to(&self, nodes: &[usize]) -> Result<FaultProxy, HarnessError> {
        let ups = nodes.iter().map(|&i| self.client_addr(i)).collect();
        Ok(FaultProxy::start(ups).await?)
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
        // The servers are gone: nothing is relayed any more.
        drop(self.peers.take());
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                tracing::warn!(%e, "could not remove the ensemble dir");
            }
        }
        if let Some(w) = self.watchdog.lock().unwrap().take() {
            w.dismiss();
        }
    }
}

/// The last `max` bytes of a file, lossily decoded; empty if unreadable.
pub(crate) fn read_tail(path: &Path, max: usize) -> String {
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
