//! The ZooKeeper session: [`Session`] and its state, its options (`options.rs`), and the
//! layers under it — the lease clock (`clock.rs`) and its keeper task (`keeper.rs`), and the
//! ZooKeeper operations (`ops.rs`, `multi.rs`), the only code that calls the client library.

mod boot_clock;
mod clock;
mod holding;
mod keeper;
mod kept;
mod listing;
mod multi;
mod ops;
mod options;
mod reopen;
mod security;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};

pub(crate) use clock::Acquiring;
pub(crate) use holding::Holding;
pub(crate) use listing::QueueListing;
pub(crate) use multi::FencedFailure;
pub use multi::FencedOp;
pub(crate) use ops::{
    answered_in_order, outcome_unknown, pause_before_retry, ChildrenWatch, Created, NodeEvent,
    NodeWatch,
};
pub use options::SessionOptions;

/// The state of a [`Session`], as its lease clock sees it.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) {
/// while let Some(state) = session.state_changed().await {
///     eprintln!("zookeeper session: {state:?}");
/// }
/// // Ended for good: closed, refused, or expired with reopening off.
/// eprintln!("zookeeper session over: {:?}", session.state());
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Connected, and the lease clock is running.
    Connected,
    /// Not connected to any server. Leases stay valid until their clock runs out; the client
    /// keeps reconnecting.
    Disconnected,
    /// The server expired the ZooKeeper session: every lease of it is lost. Unless
    /// [`reopen_after_expiry`](SessionOptions::reopen_after_expiry) is off, the `Session`
    /// is opening a new ZooKeeper session, and [`Session::state_changed`] reports
    /// `Connected` once it has.
    Expired,
    /// Closed: the last handle on the session was dropped, or [`Session::close`] was called.
    /// Terminal.
    Closed,
    /// The ensemble rejected the credentials. Terminal.
    AuthFailed,
}

impl SessionState {
    /// True for the states in which the ZooKeeper session has ended, with every lease of it.
    /// (After `Expired`, a reopening [`Session`] goes on with a new ZooKeeper session.)
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
        )
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
    /// Keepalives sent as a transaction (a `multi` with one `check`): while a lease is held
    /// or an acquire waits, unless the servers' tickTime was declared.
    pub keepalive_transactions: u64,
    /// Grants that had to confirm the session with the ensemble first, because the lease
    /// clock did not vouch for it at that moment.
    pub grant_confirms: u64,
    /// Times the session reconnected (to the same or another server) after a disconnection.
    pub reconnects: u64,
    /// ZooKeeper sessions of this `Session` that the ensemble expired.
    pub expiries: u64,
    /// Attempts to open a new ZooKeeper session after an expiry (successful or not).
    pub reopen_attempts: u64,
    /// Reconnections at which the servers granted a shorter session timeout, which the
    /// lease clock counts with from then on ([`Session::session_timeout`]).
    pub timeout_changes: u64,
    /// Watches set on a held lease's own node (one `exists`, once per lease held longer than
    /// a keepalive interval that was granted without one), so that its deletion by someone
    /// else reaches it.
    pub lease_watches: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) creates: AtomicU64,
    pub(crate) deletes: AtomicU64,
    pub(crate) listings: AtomicU64,
    pub(crate) watches: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) keepalives: AtomicU64,
    pub(crate) keepalive_transactions: AtomicU64,
    pub(crate) grant_confirms: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) expiries: AtomicU64,
    pub(crate) reopen_attempts: AtomicU64,
    pub(crate) timeout_changes: AtomicU64,
    pub(crate) lease_watches: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared by the session handle, its keeper task, and every lease.
pub(crate) struct Shared {
    pub(crate) client: zk::Client,
    pub(crate) acls: Vec<zk::Acl>,
    /// How directories are created: container (removed once empty) or persistent.
    pub(crate) directory_mode: zk::CreateMode,
    pub(crate) clock: clock::LeaseClock,
    /// Shared by every ZooKeeper session of one [`Session`], so the counts survive a reopen.
    pub(crate) counters: Arc<Counters>,
    /// Label lock metrics by path too ([`SessionOptions::metrics_path_labels`]).
    pub(crate) metrics_path_labels: bool,
    /// Ordered creates and the listings the waiters of this session share.
    pub(crate) listings: Arc<listing::Listings>,
    /// Which lock directories this session has reason to think exist.
    pub(crate) directories: listing::Directories,
}

impl Shared {
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
            keepalive_transactions: get(&c.keepalive_transactions),
            grant_confirms: get(&c.grant_confirms),
            reconnects: get(&c.reconnects),
            expiries: get(&c.expiries),
            reopen_attempts: get(&c.reopen_attempts),
            timeout_changes: get(&c.timeout_changes),
            lease_watches: get(&c.lease_watches),
        }
    }

    /// The session timeout the lease clock counts with: the shortest the servers granted
    /// since the session was created (see `clock.rs`, `Timing::timeout`).
    pub(crate) fn session_timeout(&self) -> Duration {
        self.clock.now().timeout
    }

    /// Registers a granted lease so the clock can end it.
    pub(crate) fn register(self: &Arc<Self>, node: String, epoch: u64) -> (Arc<Holding>, u64) {
        self.clock.register(self, node, epoch)
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

/// The handle's side of the reopening: the live ZooKeeper session, replaced after an expiry.
struct Inner {
    current: Arc<reopen::Current>,
    connect: String,
    /// Opens a new ZooKeeper session after each expiry; `None` when reopening is off.
    reopener: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(reopener) = &self.reopener {
            reopener.abort();
        }
        self.current.stop_keeper();
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
///   [`valid_until`](Self::valid_until), which is before any leader can expire the session
///   and let another contender in. The clock is renewed only by writes a leader committed
///   (also a deposed leader cannot commit one), each vouching for the touches answered at
///   least `T/4 + slack` before it was sent, until `touch + T − slack`; reads and syncs never
///   renew it (see [`SessionOptions::server_tick_time`] for syncs). Without other traffic a
///   keepalive every `T/6` (a transaction that changes nothing, while a lease is held or an
///   acquire waits) keeps it running, and a holder is told `Lost` about `0.6 T` after the
///   last answered one ([the safety model](crate::guide::safety)).
/// - A short disconnection that ends while the clock vouches costs nothing: leases stay, or
///   return from `Suspended` to, `Held`.
/// - **It outlives an expiry.** When the ensemble expires the ZooKeeper session (or the
///   client gives it up after 1.4 T without a server), every lease of it is reported `Lost`
///   first; then a new ZooKeeper session is opened with the same connect string and options,
///   retried with jittered exponential backoff while the ensemble is unreachable
///   ([`SessionOptions::reopen_backoff`]). Leases stay bound to the session their node
///   belongs to; new acquires use the new one, and [`id`](Self::id) and
///   [`state_changed`](Self::state_changed) show it. Rejected credentials end it for good;
///   [`SessionOptions::reopen_after_expiry`] turns reopening off.
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
    /// Set for the session of a lease or a queue in progress: its operations must go to the
    /// ZooKeeper session its node belongs to, never to a newer one.
    bound: Option<Arc<Shared>>,
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
    /// Connects to the ensemble and starts the lease clock. Unless
    /// [`reopen_after_expiry`](SessionOptions::reopen_after_expiry) is off, the `Session`
    /// also opens a new ZooKeeper session whenever the ensemble expires the current one.
    ///
    /// `connect` is `host:port[,host:port...][/chroot]`.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped connect closes whatever session it had opened.
    ///
    /// # Notable errors
    /// - [`Error::ConnectFailed`] if the session was not established within the connect
    ///   timeout, which bounds every step (the handshake, then the chroot check).
    /// - [`Error::ChrootMissing`] if the chroot does not exist.
    /// - [`Error::AuthFailed`] if the credentials were rejected.
    /// - [`Error::InvalidConnectString`] if `connect` cannot be parsed.
    /// - [`Error::UnsoundSettings`] if the declared
    ///   [`server_tick_time`](SessionOptions::server_tick_time) is too long for the negotiated
    ///   session timeout.
    pub async fn connect(connect: &str, options: SessionOptions) -> Result<Session> {
        let counters = Arc::new(Counters::default());
        let (shared, keeper) = open(connect, &options, counters, false).await?;
        let current = Arc::new(reopen::Current::new(shared, &keeper));
        let reopener = options.reopen_after_expiry.then(|| {
            tokio::spawn(reopen::reopen(
                current.clone(),
                keeper,
                connect.to_string(),
                options.clone(),
            ))
        });
        if reopener.is_none() {
            current.stop_reopening();
        }
        Ok(Session {
            inner: Arc::new(Inner {
                current,
                connect: connect.to_string(),
                reopener,
            }),
            bound: None,
        })
    }

    /// The ZooKeeper session operations go to: the bound one, or the live one.
    pub(crate) fn shared(&self) -> Arc<Shared> {
        match &self.bound {
            Some(shared) => shared.clone(),
            None => self.inner.current.live(),
        }
    }

    /// This handle without its binding: what recipes made from a lease's session use, so
    /// that they follow the live ZooKeeper session.
    pub(crate) fn unbound(&self) -> Session {
        Session {
            inner: self.inner.clone(),
            bound: None,
        }
    }

    /// True if, after an expiry, this handle goes on with a new ZooKeeper session: reopening
    /// is on, and the session was neither closed nor refused by the ensemble. (A lease's
    /// session, bound to its own ZooKeeper session, never does.)
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) {
    /// match session.lock("/locks/backup").acquire().await {
    ///     Err(zkfence::Error::SessionExpired) if session.reopens() => { /* queue again */ }
    ///     _ => {}
    /// }
    /// # }
    /// ```
    pub fn reopens(&self) -> bool {
        self.bound.is_none() && self.inner.current.reopening()
    }

    /// This handle bound to the live ZooKeeper session, for a queue node and the lease it
    /// becomes. Right after an expiry, while a new session is being opened, waits for it
    /// until `deadline`; past the deadline, or when no new session will come, fails with the
    /// ended session's error.
    pub(crate) async fn bind(&self, deadline: Option<Instant>) -> Result<Session> {
        let shared = match &self.bound {
            Some(shared) => shared.clone(),
            None => self.inner.current.live_or_next(deadline).await,
        };
        // Nothing new is started on a session that ended (closed, or expired for good).
        if let Some(err) = shared.session_ended() {
            return Err(err);
        }
        Ok(Session {
            inner: self.inner.clone(),
            bound: Some(shared),
        })
    }

    /// Closes the session for good: stops reopening, marks the session
    /// [`Closed`](SessionState::Closed) (clones see it at once, and nothing is granted on it
    /// from then on: its own waiters' acquires fail with [`Error::SessionClosed`] and remove
    /// their nodes), reports every lease of it [`Lost`](crate::LeaseState::Lost)`(SessionClosed)`
    /// and deletes their nodes, and waits until the server has ended the ZooKeeper session.
    ///
    /// The client library ends a ZooKeeper session when the last handle on it is gone, so
    /// drop the other clones and the (now lost) leases first: if some remain, `close` waits
    /// for them at most one session timeout, then returns with their nodes deleted; the
    /// server ends the session when they drop.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) {
    /// session.close().await;
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: once called, the session is closed whether or not the future is polled
    /// to the end; dropping it only stops waiting for the server.
    ///
    /// # Notable errors
    /// None: a session that had already ended returns at once.
    pub async fn close(self) {
        if let Some(reopener) = &self.inner.reopener {
            reopener.abort();
        }
        self.inner.current.stop_reopening();
        let shared = self.shared();
        let mut states = shared.client.state_watcher();
        let timeout = shared.session_timeout();
        if shared.clock.now().state.is_terminal() {
            return;
        }
        tracing::info!(session_id = %shared.client.session_id(), "closing the zookeeper session");
        // Marked closed first, so nothing more is granted on it: a waiter of this session
        // behind one of the nodes deleted below would otherwise be granted in between, and
        // its lease (lost at once) would keep its node and the ZooKeeper session. Its grant
        // fails instead and its acquire removes its node. Then the leases are told, then
        // their nodes go (the client still sends: only zkfence's view is closed); the
        // server ends the session once the last handle is gone.
        shared.clock.mark_closed();
        // The keeper has nothing left to renew, and must not report a later disconnection
        // over the mark while the deletes below are in flight.
        self.inner.current.stop_keeper();
        shared
            .clock
            .lose_all(crate::error::LossReason::SessionClosed);
        // A grant decided just before the mark registers its lease after it: the lease sees
        // the mark and deletes its own node (`Lease::new`) if it is not in this list.
        // Not the nodes of leases kept until their holders release them
        // (`Lease::keep_node_until_released`): their holders are stopping work they could not
        // stop at once (the CLI's `exec` stops a process group), and the node must keep the
        // lock until then. Those leases keep the ZooKeeper session open; each deletes its
        // node when released or dropped.
        let nodes = shared.clock.held_nodes_not_kept();
        // In a task of its own, so that a caller who stops waiting (drops this future) still
        // gets the leases' nodes deleted, as the cancel-safety note promises.
        let finishing = tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, shared.delete_all_until_gone(&nodes)).await;
        });
        let _ = finishing.await;
        drop(self);
        let ended = async {
            use zookeeper_client::SessionState as Zs;
            while !matches!(
                states.changed().await,
                Zs::Closed | Zs::Expired | Zs::AuthFailed
            ) {}
        };
        if tokio::time::timeout(timeout, ended).await.is_err() {
            tracing::warn!("other handles on the closed session remain: it ends when they drop");
        }
    }

    /// The id the ensemble assigned to the current ZooKeeper session (for a lease's
    /// session, the one the lease lives on). It changes when a new session replaces an
    /// expired one.
    pub fn id(&self) -> i64 {
        self.shared().client.session_id().0
    }

    /// The session timeout the lease clock counts with: the lease's time to live.
    ///
    /// The servers negotiate it at every connect, not only the first: a server clamps the
    /// requested value to its own `minSessionTimeout`/`maxSessionTimeout` (by default 2 and
    /// 20 × its `tickTime`), so a reconnect to a server configured otherwise (a rolling
    /// config change) can change it. A shorter one applies at once; a longer one is not
    /// counted on (a new leader restores the timeout the session was created with), so this
    /// is the shortest the servers granted since the ZooKeeper session was created.
    /// [`session_timeout_changed`](Self::session_timeout_changed) reports each change.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) {
    /// println!("leases live {:?} past the last heartbeat", session.session_timeout());
    /// # }
    /// ```
    pub fn session_timeout(&self) -> Duration {
        self.shared().session_timeout()
    }

    /// Waits until the session timeout the lease clock counts with changes (the servers
    /// granted a shorter one at a reconnect, or a new ZooKeeper session replaced an expired
    /// one) and returns the new value; `None` once the session has ended for good.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) {
    /// while let Some(timeout) = session.session_timeout_changed().await {
    ///     eprintln!("the servers now grant a {timeout:?} session timeout");
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    ///
    /// # Notable errors
    /// None: `None` says the session has ended for good.
    pub async fn session_timeout_changed(&self) -> Option<Duration> {
        let start = self.session_timeout();
        match self.follow_clock(|c| c.timeout != start).await {
            ClockFollowed::Changed(clock) => Some(clock.timeout),
            _ => None,
        }
    }

    /// Follows the lease clock of this handle's ZooKeeper session (an unbound handle's into
    /// each new one after an expiry) until `changed` says so, or nothing more can change.
    async fn follow_clock(&self, changed: impl Fn(&clock::Clock) -> bool) -> ClockFollowed {
        let mut sessions = self.inner.current.subscribe();
        loop {
            let shared = match &self.bound {
                Some(shared) => shared.clone(),
                None => sessions.borrow_and_update().clone(),
            };
            let mut clock = shared.clock.clock.subscribe();
            let now = *clock.borrow_and_update();
            if changed(&now) {
                return ClockFollowed::Changed(now);
            }
            // Only an unbound handle follows its Session into a new ZooKeeper session.
            let next_session_may_come = self.bound.is_none() && self.inner.current.reopening();
            if now.state.is_terminal() && !next_session_may_come {
                // Called after the end (no change since the start), or woken because
                // reopening stopped: nothing more will change.
                return ClockFollowed::Over;
            }
            tokio::select! {
                closed = clock.changed(), if !now.state.is_terminal() => {
                    if closed.is_err() {
                        return ClockFollowed::ClockGone;
                    }
                }
                closed = sessions.changed(), if next_session_may_come => {
                    if closed.is_err() {
                        return ClockFollowed::SessionGone;
                    }
                }
            }
        }
    }

    /// The session's state now.
    pub fn state(&self) -> SessionState {
        self.shared().clock.now().state
    }

    /// Until when the lease clock vouches for the session, or `None` if it has lapsed or the
    /// session ended.
    pub fn valid_until(&self) -> Option<Instant> {
        let shared = self.shared();
        let c = shared.clock.now();
        c.holds(c.epoch, shared.clock.instant())
            .then(|| shared.clock.boot.to_tokio(c.valid_until))
    }

    /// Waits for the next change of [`state`](Self::state) and returns the new state. After
    /// an expiry, the next change is the new ZooKeeper session's `Connected`.
    ///
    /// A session that ends for good (closed, authentication failed, or expired without
    /// reopening) reports its terminal state once, to a call that was waiting or made after
    /// the change; every later call returns `None` at once: the stream of changes is over, so
    /// a loop on it ends instead of spinning.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) {
    /// while let Some(state) = session.state_changed().await {
    ///     eprintln!("zookeeper session: {state:?}");
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    ///
    /// # Notable errors
    /// None: `None` says the session has ended for good, and [`state`](Self::state) tells
    /// how.
    pub async fn state_changed(&self) -> Option<SessionState> {
        let start = self.state();
        match self.follow_clock(|c| c.state != start).await {
            ClockFollowed::Changed(clock) => Some(clock.state),
            // Never "at once, the same state" on every call after the end.
            ClockFollowed::Over => None,
            ClockFollowed::ClockGone => {
                (start != SessionState::Closed).then_some(SessionState::Closed)
            }
            ClockFollowed::SessionGone => {
                let now = self.state();
                (now != start).then_some(now)
            }
        }
    }

    /// Waits until the lease clock moves — renewed, lapsed, the session's state changed or
    /// ended — and returns the new [`valid_until`](Self::valid_until) (`None` while lapsed;
    /// called while lapsed, it waits for the next renewal). A supervisor that must stop work
    /// when the clock runs out (the CLI's `exec`) follows it with this.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) {
    /// while let Some(until) = session.valid_until_changed().await {
    ///     println!("vouched for another {:?}", until - tokio::time::Instant::now());
    /// }
    /// // The clock lapsed or the session ended.
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    ///
    /// # Notable errors
    /// None: `None` stands for a lapsed clock or an ended session.
    pub async fn valid_until_changed(&self) -> Option<Instant> {
        let shared = self.shared();
        // Before subscribing: renewals of a clock that vouches wake only its followers.
        let _following = shared.clock.follow_renewals();
        let mut rx = shared.clock.clock.subscribe();
        if rx.borrow_and_update().state.is_terminal() {
            return None;
        }
        // A clock that is not renewed lapses at valid_until: report that too. A lapsed one
        // waits for its next renewal.
        // (Through a suspend of the machine, the keeper lapses the clock within a keepalive
        // interval of the wake-up, which wakes this.)
        let lapses = self.valid_until();
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return None;
                }
            }
            _ = async {
                match lapses {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        self.valid_until()
    }

    /// Request counters of this session, summed over its ZooKeeper sessions.
    pub fn metrics(&self) -> SessionMetrics {
        self.shared().metrics()
    }

    /// The underlying `zookeeper-client` client of the current ZooKeeper session, for
    /// operations zkfence does not wrap. Nodes created through it are not tracked by
    /// zkfence, and after an expiry it is a client of the expired session: ask again.
    pub fn client(&self) -> zk::Client {
        self.shared().client.clone()
    }
}

/// How [`Session::follow_clock`] ended.
enum ClockFollowed {
    /// The clock changed as asked; its new reading.
    Changed(clock::Clock),
    /// The session ended for good: nothing more will change.
    Over,
    /// The clock's channel closed (the session's state is gone).
    ClockGone,
    /// The `Session`'s handle on its live ZooKeeper session closed.
    SessionGone,
}

/// Opens one ZooKeeper session and starts its lease clock's keeper. `fail_eagerly`: give up
/// once every server refused, instead of cycling through them until the connect timeout (a
/// reopen has its own backoff between attempts).
async fn open(
    connect: &str,
    options: &SessionOptions,
    counters: Arc<Counters>,
    fail_eagerly: bool,
) -> Result<(Arc<Shared>, tokio::task::JoinHandle<()>)> {
    let (hosts, chroot) = crate::node::split_connect_string(connect)?;
    let connect_timeout = options.connect_timeout.unwrap_or(options.session_timeout);
    let mut connector = zk::Client::connector().with_session_timeout(options.session_timeout);
    if fail_eagerly {
        connector = connector.with_fail_eagerly();
    }
    for (scheme, secret) in &options.auth {
        connector = connector.with_auth(scheme, secret);
    }
    let secured = security::configure(connector, options)?;
    let boot = boot_clock::BootClock::Real;
    // In the lease clock's time (which counts a suspend); the deadline below is tokio's.
    let connect_sent = boot.now();
    let deadline = Instant::now() + connect_timeout;
    // One deadline for every step of connect: the handshake (which gives up at it itself,
    // naming each server's reason) and the chroot check after it.
    let client = match secured.connect(connect, hosts, connect_timeout).await {
        Err(security::Failed::Found(e)) => return Err(e),
        Err(security::Failed::Client(zk::Error::AuthFailed)) => return Err(Error::AuthFailed),
        Err(security::Failed::Client(e)) => {
            return Err(Error::InvalidConnectString {
                connect: connect.to_string(),
                reason: e.to_string(),
            })
        }
        Ok(client) => client,
    };
    let client = match chroot {
        None => client,
        Some(chroot) => {
            // Before the chroot applies, the only direct call outside ops.rs: the session
            // does not exist for zkfence yet.
            match tokio::time::timeout_at(deadline, client.check_stat(chroot)).await {
                Err(_) => {
                    return Err(Error::ConnectFailed {
                        connect: connect.to_string(),
                        timeout: connect_timeout,
                        servers: vec![crate::error::ServerFailure {
                            server: hosts.to_string(),
                            reason: crate::error::ConnectFailure::Other {
                                reason: format!(
                                    "the session was established, but the check that the chroot {chroot} exists got no answer in time"
                                ),
                            },
                        }],
                    })
                }
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => {
                    return Err(Error::ChrootMissing {
                        chroot: chroot.to_string(),
                    })
                }
                Ok(Err(e)) => return Err(Error::zk("check chroot", chroot, e)),
            }
            client
                .chroot(chroot.to_string())
                .map_err(|_| Error::InvalidConnectString {
                    connect: connect.to_string(),
                    reason: "bad chroot".into(),
                })?
        }
    };
    let session_timeout = client.session_timeout();
    let timing = clock::TimingOptions {
        margin: options.lease_margin,
        keepalive_interval: options.keepalive_interval,
        tick_time: options.server_tick_time,
        observer_master: options.via_observer_master,
    };
    if let Some(reason) = timing.unsound_tick_time(session_timeout) {
        return Err(Error::UnsoundSettings { reason });
    }
    let acls = options.acls.clone().unwrap_or_else(|| {
        if options.auth.is_empty() && !options.security.authenticates() {
            zk::Acls::anyone_all().to_vec()
        } else {
            zk::Acls::creator_all().to_vec()
        }
    });
    let shared = Arc::new(Shared {
        client: client.clone(),
        acls,
        directory_mode: if options.persistent_directories {
            zk::CreateMode::Persistent
        } else {
            zk::CreateMode::Container
        },
        // The leader created the session after we sent the connect request.
        clock: clock::LeaseClock::new(timing, session_timeout, connect_sent, boot),
        counters,
        metrics_path_labels: options.metrics_path_labels,
        listings: Arc::default(),
        directories: listing::Directories::new(!options.persistent_directories),
    });
    let keeper = tokio::spawn(keeper::keep(shared.clone(), client.state_watcher()));
    tracing::info!(
        session_id = %client.session_id(),
        timeout_ms = session_timeout.as_millis() as u64,
        "zookeeper session established"
    );
    Ok((shared, keeper))
}
