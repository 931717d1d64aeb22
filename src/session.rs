//! The ZooKeeper session and its lease clock.
//!
//! A lock is held exactly as long as the ZooKeeper session that created its node lives. The
//! server expires a silent session about one session timeout `T` after the last packet it
//! received from it; `zookeeper-client` only reports `Expired` after it reconnects, i.e.
//! *later* than another client may already hold the lock. So the session keeps its own clock:
//!
//! ```text
//! valid_until = send time of the latest request that got an answer + T - margin
//! ```
//!
//! Every answered request renews it; when nothing else was sent for `T/3`, a keepalive `sync`
//! does. When `valid_until` passes without a renewal the clock *lapses*: every lease granted
//! before is lost (the holder hears it before the server can give the lock away), and their
//! nodes are deleted as soon as the server answers again, so a surviving session never keeps a
//! lock whose holder was told it is gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::election::Election;
use crate::error::{Error, Result};
use crate::lock::{Lock, LossReason};
use crate::semaphore::Semaphore;

/// Options for [`Session::connect`].
///
/// ```
/// use std::time::Duration;
/// let options = zkfence::SessionOptions::new()
///     .session_timeout(Duration::from_secs(10))
///     .connect_timeout(Duration::from_secs(3))
///     .auth("digest", b"app:secret");
/// ```
#[derive(Clone, Debug)]
pub struct SessionOptions {
    session_timeout: Duration,
    connect_timeout: Option<Duration>,
    auth: Vec<(String, Vec<u8>)>,
    acls: Option<Vec<zk::Acl>>,
    lease_margin: Option<Duration>,
    keepalive_interval: Option<Duration>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions::new()
    }
}

impl SessionOptions {
    /// Defaults: a 10 s session timeout, connect timeout equal to it, no auth, nodes open to
    /// everyone (`world:anyone` all permissions).
    pub fn new() -> Self {
        SessionOptions {
            session_timeout: Duration::from_secs(10),
            connect_timeout: None,
            auth: vec![],
            acls: None,
            lease_margin: None,
            keepalive_interval: None,
        }
    }

    /// The session timeout to negotiate: the lease's time to live. A crashed holder's lock is
    /// freed about this long after its last heartbeat. The server clamps it to
    /// `[2, 20] × tickTime`; [`Session::session_timeout`] tells the negotiated value.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`Session::connect`] may take before it fails with [`Error::Unreachable`].
    /// Defaults to the session timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Adds authentication, e.g. `auth("digest", b"user:password")`. Nodes created by the
    /// session then default to `auth` ACLs (creator has all permissions) unless
    /// [`acls`](Self::acls) says otherwise.
    pub fn auth(mut self, scheme: &str, credentials: &[u8]) -> Self {
        self.auth.push((scheme.to_string(), credentials.to_vec()));
        self
    }

    /// ACLs for every node the session creates (queue nodes and missing lock directories).
    pub fn acls(mut self, acls: Vec<zk::Acl>) -> Self {
        self.acls = Some(acls);
        self
    }

    /// How much earlier than the server's earliest possible expiry the lease clock declares a
    /// lease lost. Defaults to a tenth of the session timeout. Larger is safer against a
    /// stalled local timer, smaller keeps a suspended lease longer.
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.lease_margin = Some(margin);
        self
    }

    /// How long the session may stay silent before a keepalive renews the lease clock.
    /// Defaults to a third of the session timeout.
    pub fn keepalive_interval(mut self, interval: Duration) -> Self {
        self.keepalive_interval = Some(interval);
        self
    }
}

/// The state of a [`Session`], as its lease clock sees it.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) {
/// loop {
///     let state = session.state_changed().await;
///     eprintln!("zookeeper session: {state:?}");
///     if state.is_terminal() {
///         break; // connect a new Session
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected, and the lease clock is running.
    Connected,
    /// Not connected to any server. Leases stay valid until their clock runs out; the client
    /// keeps reconnecting.
    Disconnected,
    /// The server expired the session. Terminal: connect a new `Session`.
    Expired,
    /// Closed: the last handle on the session was dropped. Terminal.
    Closed,
    /// The ensemble rejected the credentials. Terminal.
    AuthFailed,
}

impl SessionState {
    /// True for the states after which the session can do nothing.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
        )
    }
}

/// A snapshot of the lease clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// Until when the server cannot have expired the session.
    pub(crate) valid_until: Instant,
    /// Incremented whenever the clock is renewed after it lapsed: a lease granted in an older
    /// epoch has lost.
    pub(crate) epoch: u64,
    /// `valid_until` passed without a renewal.
    pub(crate) lapsed: bool,
    pub(crate) state: SessionState,
}

impl Clock {
    /// True if a lease granted in `epoch` may still be held now.
    pub(crate) fn holds(&self, epoch: u64, now: Instant) -> bool {
        !self.state.is_terminal() && !self.lapsed && self.epoch == epoch && now < self.valid_until
    }

    pub(crate) fn loss_reason(&self) -> LossReason {
        match self.state {
            SessionState::Expired => LossReason::SessionExpired,
            SessionState::Closed => LossReason::SessionClosed,
            SessionState::AuthFailed => LossReason::SessionClosed,
            _ => LossReason::LeaseExpired,
        }
    }
}

/// Request counters of one session, for operators and for tests that prove there is no herd.
///
/// ```no_run
/// # fn f(session: zkfence::Session) {
/// let m = session.metrics();
/// println!("{} creates, {} listings, {} wake-ups", m.creates, m.listings, m.wakeups);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionMetrics {
    /// Queue nodes created.
    pub creates: u64,
    /// Queue nodes deleted (releases, cancellations, cleanups).
    pub deletes: u64,
    /// `getChildren` calls on lock directories.
    pub listings: u64,
    /// Watches set on a predecessor.
    pub watches: u64,
    /// Watch notifications received while waiting in a queue.
    pub wakeups: u64,
    /// Keepalive round trips of the lease clock.
    pub keepalives: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) creates: AtomicU64,
    pub(crate) deletes: AtomicU64,
    pub(crate) listings: AtomicU64,
    pub(crate) watches: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) keepalives: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A lease registered with the session, so the clock can end it.
pub(crate) struct Holding {
    pub(crate) node: String,
    pub(crate) epoch: u64,
    pub(crate) loss: watch::Sender<Option<LossReason>>,
}

impl Holding {
    /// Records the loss if none was recorded; returns true the first time.
    pub(crate) fn lose(&self, reason: LossReason) -> bool {
        self.loss.send_if_modified(|cur| {
            if cur.is_none() {
                *cur = Some(reason);
                true
            } else {
                false
            }
        })
    }
}

/// State shared by the session handle, its keeper task, and every lease.
pub(crate) struct Shared {
    pub(crate) client: zk::Client,
    pub(crate) session_timeout: Duration,
    margin: Duration,
    keepalive_interval: Duration,
    pub(crate) acls: Vec<zk::Acl>,
    pub(crate) clock: watch::Sender<Clock>,
    holdings: Mutex<HashMap<u64, Weak<Holding>>>,
    next_holding: AtomicU64,
    pub(crate) counters: Counters,
    /// Renewals since the keeper last looked: lets it skip keepalives on a busy session.
    last_renewal_sent: Mutex<Instant>,
}

impl Shared {
    /// Records that a request sent at `sent` was answered by the ensemble.
    pub(crate) fn renewed(&self, sent: Instant) {
        let until = sent + self.session_timeout.saturating_sub(self.margin);
        {
            let mut last = self.last_renewal_sent.lock().unwrap();
            if sent > *last {
                *last = sent;
            }
        }
        self.clock.send_if_modified(|c| {
            if c.state.is_terminal() || until <= c.valid_until && !c.lapsed {
                return false;
            }
            if c.lapsed {
                if until <= Instant::now() {
                    return false;
                }
                c.lapsed = false;
                c.epoch += 1;
            }
            c.valid_until = c.valid_until.max(until);
            true
        });
    }

    pub(crate) fn clock(&self) -> Clock {
        *self.clock.borrow()
    }

    /// Registers a granted lease so the clock can end it.
    pub(crate) fn register(&self, holding: &Arc<Holding>) -> u64 {
        let id = self.next_holding.fetch_add(1, Ordering::Relaxed);
        // Every lease unregisters when released or dropped, so the map holds live leases only.
        self.holdings
            .lock()
            .unwrap()
            .insert(id, Arc::downgrade(holding));
        id
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.holdings.lock().unwrap().remove(&id);
    }

    /// Ends every registered lease with `reason`; with `delete`, removes their nodes as soon
    /// as the server answers (the session survived, so the nodes would still block others).
    fn lose_all(self: &Arc<Self>, reason: LossReason, delete: bool) {
        let holdings: Vec<Arc<Holding>> = self
            .holdings
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for holding in holdings {
            if holding.lose(reason) {
                tracing::warn!(node = %holding.node, %reason, "lease lost");
                if delete {
                    let shared = self.clone();
                    let node = holding.node.clone();
                    spawn_detached(async move {
                        let _ = shared.delete_until_gone(&node).await;
                    });
                }
            }
        }
    }

    /// Deletes `node`, retrying through connection loss and failover, until it is gone or the
    /// session has ended (which removes it too).
    pub(crate) async fn delete_until_gone(&self, node: &str) -> Result<()> {
        use zk::Error as Zk;
        loop {
            let sent = Instant::now();
            match self.client.delete(node, None).await {
                Ok(()) | Err(Zk::NoNode) => {
                    Counters::bump(&self.counters.deletes);
                    self.renewed(sent);
                    return Ok(());
                }
                Err(
                    Zk::ConnectionLoss
                    | Zk::Custom(_)
                    | Zk::Timeout
                    | Zk::SessionMoved
                    | Zk::Throttled,
                ) => {
                    // Outcome unknown: ask again. Requests made while disconnected wait for the
                    // next connection, so this does not spin.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(err) => return Err(Error::zk("delete", node, err)),
            }
        }
    }

    pub(crate) fn metrics(&self) -> SessionMetrics {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SessionMetrics {
            creates: get(&c.creates),
            deletes: get(&c.deletes),
            listings: get(&c.listings),
            watches: get(&c.watches),
            wakeups: get(&c.wakeups),
            keepalives: get(&c.keepalives),
        }
    }
}

/// Spawns `fut` on the current tokio runtime if there is one. Without a runtime (a guard
/// dropped after the runtime shut down) the work is skipped: the node then disappears with
/// the session.
pub(crate) fn spawn_detached<F>(fut: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(fut);
    }
}

struct Inner {
    shared: Arc<Shared>,
    connect: String,
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// A ZooKeeper session: the lease that every lock and leadership made from it lives on.
///
/// Cheap to clone; all clones share one session. A [`Lease`](crate::Lease) keeps its session
/// alive. When the last clone and the last lease are dropped the session closes, and the
/// ensemble deletes its remaining nodes at once (after background deletes still in flight
/// finish).
///
/// # Guarantees
///
/// - A [`Lease`](crate::Lease) is reported [`Lost`](crate::LeaseState::Lost) no later than
///   `valid_until`, which is before the server can expire the session and let another
///   contender in (see the module docs of the lease clock in `session.rs`).
/// - A short disconnection that ends before `valid_until` costs nothing: leases return from
///   `Suspended` to `Held`.
///
/// ```no_run
/// # async fn f() -> zkfence::Result<()> {
/// use std::time::Duration;
/// use zkfence::{Session, SessionOptions};
/// let session = Session::connect(
///     "127.0.0.1:2181,127.0.0.1:2182/app",
///     SessionOptions::new().session_timeout(Duration::from_secs(10)),
/// ).await?;
/// let lease = session.lock("/locks/payments").acquire().await?;
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("connect", &self.inner.connect)
            .field("id", &self.id())
            .field("state", &self.state())
            .finish()
    }
}

impl Session {
    /// Connects to the ensemble and starts the lease clock.
    ///
    /// `connect` is `host:port[,host:port...][/chroot]`.
    ///
    /// # Notable errors
    /// - [`Error::Unreachable`] if no server answered within the connect timeout.
    /// - [`Error::ChrootMissing`] if the chroot does not exist.
    /// - [`Error::AuthFailed`] if the credentials were rejected.
    /// - [`Error::InvalidConnectString`] if `connect` cannot be parsed.
    pub async fn connect(connect: &str, options: SessionOptions) -> Result<Session> {
        let hosts = connect.split('/').next().unwrap_or_default();
        if hosts.is_empty() || hosts.split(',').any(|h| h.trim().is_empty()) {
            return Err(Error::InvalidConnectString {
                connect: connect.to_string(),
                reason: "no host before the chroot, or an empty host between commas".into(),
            });
        }
        let chroot = connect.find('/').map(|i| &connect[i..]);
        if let Some(chroot) = chroot {
            crate::node::validate_path(chroot).map_err(|e| Error::InvalidConnectString {
                connect: connect.to_string(),
                reason: format!("bad chroot: {e}"),
            })?;
        }
        let connect_timeout = options.connect_timeout.unwrap_or(options.session_timeout);
        let mut connector = zk::Client::connector().with_session_timeout(options.session_timeout);
        for (scheme, secret) in &options.auth {
            connector = connector.with_auth(scheme, secret);
        }
        let unreachable = |reason: String| Error::Unreachable {
            connect: connect.to_string(),
            timeout: connect_timeout,
            reason,
        };
        let client = match tokio::time::timeout(connect_timeout, connector.connect(hosts)).await {
            Err(_) => return Err(unreachable("connect timed out".into())),
            Ok(Err(zk::Error::AuthFailed)) => return Err(Error::AuthFailed),
            Ok(Err(zk::Error::BadArguments(reason))) => {
                return Err(Error::InvalidConnectString {
                    connect: connect.to_string(),
                    reason: reason.to_string(),
                })
            }
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Ok(Ok(client)) => client,
        };
        let client = match chroot {
            None => client,
            Some(chroot) => {
                match client.check_stat(chroot).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        return Err(Error::ChrootMissing {
                            chroot: chroot.to_string(),
                        })
                    }
                    Err(e) => return Err(Error::zk("check chroot", chroot, e)),
                }
                client
                    .chroot(chroot.to_string())
                    .map_err(|_| Error::InvalidConnectString {
                        connect: connect.to_string(),
                        reason: "bad chroot".into(),
                    })?
            }
        };
        // The connect handshake itself was answered by a server: start the clock from now.
        let started = Instant::now();
        let session_timeout = client.session_timeout();
        let margin = options.lease_margin.unwrap_or(session_timeout / 10);
        let acls = options.acls.clone().unwrap_or_else(|| {
            if options.auth.is_empty() {
                zk::Acls::anyone_all().to_vec()
            } else {
                zk::Acls::creator_all().to_vec()
            }
        });
        let clock = Clock {
            valid_until: started + session_timeout.saturating_sub(margin),
            epoch: 0,
            lapsed: false,
            state: SessionState::Connected,
        };
        let shared = Arc::new(Shared {
            client: client.clone(),
            session_timeout,
            margin,
            keepalive_interval: options.keepalive_interval.unwrap_or(session_timeout / 3),
            acls,
            clock: watch::channel(clock).0,
            holdings: Mutex::new(HashMap::new()),
            next_holding: AtomicU64::new(0),
            counters: Counters::default(),
            last_renewal_sent: Mutex::new(started),
        });
        let keeper = tokio::spawn(keep(shared.clone(), client.state_watcher()));
        tracing::info!(
            session_id = %client.session_id(),
            timeout_ms = session_timeout.as_millis() as u64,
            "zookeeper session established"
        );
        Ok(Session {
            inner: Arc::new(Inner {
                shared,
                connect: connect.to_string(),
                keeper,
            }),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// A handle on the lock whose queue lives under the directory `path`.
    ///
    /// Cheap: nothing is sent until [`Lock::acquire`]. An invalid path is reported by the
    /// first operation.
    pub fn lock(&self, path: &str) -> Lock {
        Lock::new(self.clone(), path)
    }

    /// A counting semaphore under the directory `path`: up to `permits` holders at once
    /// (Curator's `InterProcessSemaphoreV2` layout). Every contender must agree on `permits`.
    pub fn semaphore(&self, path: &str, permits: usize) -> Semaphore {
        Semaphore::new(self.clone(), path, permits)
    }

    /// The read side of the read/write lock under `path`: shared with other readers,
    /// excluded by writers, FIFO (a reader queued behind a writer waits for it). Node names
    /// match Curator's `InterProcessReadWriteLock` (and Kazoo's `ReadLock` with
    /// [`NodeFormat::Kazoo`](crate::NodeFormat::Kazoo)).
    pub fn read_lock(&self, path: &str) -> Lock {
        Lock::read(self.clone(), path)
    }

    /// The write side of the read/write lock under `path`: exclusive against readers and
    /// writers. A plain [`lock`](Self::lock) on the same path also counts as a writer.
    pub fn write_lock(&self, path: &str) -> Lock {
        Lock::write(self.clone(), path)
    }

    /// A handle on the leader election under the directory `path`.
    pub fn election(&self, path: &str) -> Election {
        Election::new(self.clone(), path)
    }

    /// The session id the ensemble assigned.
    pub fn id(&self) -> i64 {
        self.inner.shared.client.session_id().0
    }

    /// The negotiated session timeout: the lease's time to live.
    pub fn session_timeout(&self) -> Duration {
        self.inner.shared.session_timeout
    }

    /// The session's state now.
    pub fn state(&self) -> SessionState {
        self.inner.shared.clock().state
    }

    /// Until when the lease clock vouches for the session, or `None` if it has lapsed or the
    /// session ended.
    pub fn valid_until(&self) -> Option<Instant> {
        let c = self.inner.shared.clock();
        (c.holds(c.epoch, Instant::now())).then_some(c.valid_until)
    }

    /// Waits for the next change of [`state`](Self::state) and returns the new state.
    /// Returns at once with the terminal state if the session has ended.
    pub async fn state_changed(&self) -> SessionState {
        let mut rx = self.inner.shared.clock.subscribe();
        let start = rx.borrow_and_update().state;
        if start.is_terminal() {
            return start;
        }
        loop {
            if rx.changed().await.is_err() {
                return SessionState::Closed;
            }
            let now = rx.borrow_and_update().state;
            if now != start {
                return now;
            }
        }
    }

    /// Request counters of this session.
    pub fn metrics(&self) -> SessionMetrics {
        self.inner.shared.metrics()
    }

    /// The underlying `zookeeper-client` client, for operations zkfence does not wrap. Nodes
    /// created through it are not tracked by zkfence.
    pub fn client(&self) -> &zk::Client {
        &self.inner.shared.client
    }
}

/// The keeper task: follows session state, renews the clock, and ends leases when it lapses.
async fn keep(shared: Arc<Shared>, mut states: zk::StateWatcher) {
    use zk::SessionState as Zs;
    let mut keepalive: Option<Keepalive> = None;
    loop {
        let clock = shared.clock();
        let next_keepalive = *shared.last_renewal_sent.lock().unwrap() + shared.keepalive_interval;
        tokio::select! {
            state = states.changed() => {
                let new = match state {
                    Zs::SyncConnected | Zs::ConnectedReadOnly => SessionState::Connected,
                    Zs::Disconnected => SessionState::Disconnected,
                    Zs::Expired => SessionState::Expired,
                    Zs::Closed => SessionState::Closed,
                    Zs::AuthFailed => SessionState::AuthFailed,
                };
                shared.clock.send_modify(|c| c.state = new);
                let session_id = shared.client.session_id();
                match new {
                    SessionState::Disconnected => {
                        let left = clock.valid_until.saturating_duration_since(Instant::now());
                        tracing::warn!(%session_id, valid_for_ms = left.as_millis() as u64,
                            "disconnected from the ensemble: leases suspended until the lease clock runs out");
                    }
                    SessionState::Connected => tracing::info!(%session_id, "connected: renewing the lease clock"),
                    _ => tracing::warn!(%session_id, state = ?new, "zookeeper session ended"),
                }
                if new.is_terminal() {
                    let reason = shared.clock().loss_reason();
                    shared.lose_all(reason, false);
                    return;
                }
                if new == SessionState::Connected && keepalive.is_none() {
                    // Renew at once: a blip that ends inside valid_until must cost nobody a lock.
                    keepalive = Some(send_keepalive(&shared));
                }
            }
            _ = tokio::time::sleep_until(next_keepalive), if keepalive.is_none() => {
                // Requests answered while we slept renewed the clock already: a busy session
                // needs no keepalive.
                let last = *shared.last_renewal_sent.lock().unwrap();
                if last + shared.keepalive_interval <= Instant::now() {
                    keepalive = Some(send_keepalive(&shared));
                }
            }
            (sent, ok) = async { keepalive.as_mut().expect("guarded").await }, if keepalive.is_some() => {
                keepalive = None;
                if ok {
                    Counters::bump(&shared.counters.keepalives);
                    shared.renewed(sent);
                }
            }
            _ = tokio::time::sleep_until(clock.valid_until), if !clock.lapsed => {
                let lapsed = shared.clock.send_if_modified(|c| {
                    if !c.lapsed && Instant::now() >= c.valid_until {
                        c.lapsed = true;
                        true
                    } else {
                        false
                    }
                });
                if lapsed {
                    tracing::warn!(
                        session_id = %shared.client.session_id(),
                        "lease clock ran out: no answer from the ensemble within the session timeout"
                    );
                    shared.lose_all(LossReason::LeaseExpired, true);
                }
            }
        }
    }
}

/// A keepalive in flight: resolves to its send time and whether it was answered.
type Keepalive = std::pin::Pin<Box<dyn std::future::Future<Output = (Instant, bool)> + Send>>;

fn send_keepalive(shared: &Arc<Shared>) -> Keepalive {
    let client = shared.client.clone();
    Box::pin(async move {
        let sent = Instant::now();
        // `sync` is answered only once the connected server has caught up with the leader, so
        // an answer also proves that server is still part of the quorum.
        let ok = client.sync("/").await.is_ok();
        (sent, ok)
    })
}
