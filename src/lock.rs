//! The distributed lock: [`Lock`], its guard [`Lease`], and [`FencingToken`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::node::NodeFormat;
use crate::node::Role;
use crate::queue::{Admission, Contender, Grant, Owner, Queue};
use crate::session::{Holding, Session, SessionState};

/// A number that grows with every grant of one lock: give it to the protected resource with
/// every write, and let the resource refuse anything older than the newest it has seen (see
/// [`Fence`](crate::Fence)).
///
/// It is the queue node's sequence number, which ZooKeeper takes from the lock directory's
/// child counter; zkfence never deletes a lock directory, so the counter — and the token —
/// only grows. (The signed 32-bit counter is read as unsigned, so tokens stay ordered for
/// 2³² grants.)
///
/// ```
/// use zkfence::FencingToken;
/// // A resource receiving tokens over the wire compares them as numbers.
/// let (old, new) = (FencingToken::new(33), FencingToken::new(34));
/// assert!(old < new);
/// assert_eq!(new.get(), 34);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token, e.g. one received by a resource over the wire.
    pub const fn new(raw: u64) -> Self {
        FencingToken(raw)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }

    pub(crate) fn from_sequence(sequence: i64) -> Self {
        FencingToken(u64::from(sequence as i32 as u32))
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a lease ended.
///
/// ```
/// use zkfence::LossReason;
/// let reason = LossReason::LeaseExpired;
/// // Only a session that ended is useless; after the others, the same session may acquire again.
/// assert!(!reason.is_session_terminal());
/// println!("lost the lock: {reason}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The server expired the session: its nodes are gone.
    SessionExpired,
    /// The ensemble did not answer within the session timeout, so the server may expire the
    /// session any moment. Reported *before* it can; our node is deleted once the server
    /// answers again, if the session survived.
    LeaseExpired,
    /// Our node was deleted by someone else.
    NodeDeleted,
    /// The session was closed.
    SessionClosed,
    /// The lease was released by its holder.
    Released,
}

impl LossReason {
    /// True when the session itself ended.
    pub fn is_session_terminal(self) -> bool {
        matches!(self, LossReason::SessionExpired | LossReason::SessionClosed)
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::SessionExpired => "the ZooKeeper session expired",
            LossReason::LeaseExpired => "no answer from the ensemble within the session timeout",
            LossReason::NodeDeleted => "the lock node was deleted by someone else",
            LossReason::SessionClosed => "the ZooKeeper session was closed",
            LossReason::Released => "released",
        })
    }
}

/// Where a [`Lease`] stands.
///
/// ```no_run
/// # async fn f(lease: zkfence::Lease) {
/// use zkfence::LeaseState;
/// match lease.state() {
///     LeaseState::Held => { /* act, passing lease.token() along */ }
///     LeaseState::Suspended => { /* act only if done before lease.valid_until() */ }
///     LeaseState::Lost(reason) => eprintln!("stop: {reason}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held: the lease clock vouches for the session.
    Held,
    /// Disconnected from the ensemble but still inside [`Lease::valid_until`]. The lock is
    /// still ours; act only if the work finishes before `valid_until` (or is fenced).
    Suspended,
    /// Final: stop acting as the holder.
    Lost(LossReason),
}

/// A handle on one distributed lock: a queue under the lock directory `path`.
///
/// Made by [`Session::lock`]. Each handle holds the lock at most once; to have two tasks of
/// one process contend, give each its own handle.
///
/// # Guarantees
///
/// - **Mutual exclusion** while every holder respects [`Lease::state`]: a holder is told
///   `Lost` before the ensemble can give the lock to anyone else.
/// - **FIFO**: contenders are granted in the order they enqueued.
/// - **No herd**: a release wakes exactly one waiter.
/// - **Fencing**: each grant carries a [`FencingToken`] larger than every earlier grant's.
///
/// The limit: a holder that stalls (GC, VM pause) past `valid_until` *without looking* may
/// act after its lease ended. Only the resource can stop that: make it check the token
/// ([`Fence`](crate::Fence), or [`Lease::fenced_write`] for data in ZooKeeper).
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// use std::time::Duration;
/// let lock = session.lock("/locks/seat-42").with_id("booking-7");
/// let lease = lock.acquire_timeout(Duration::from_secs(5)).await?;
/// println!("holding with token {}", lease.token());
/// lease.release().await?;
/// # Ok(()) }
/// ```
pub struct Lock {
    queue: Queue,
    admission: Admission,
    busy: Arc<AtomicBool>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("path", &self.queue.dir)
            .field("format", &self.queue.format)
            .field("admission", &self.admission)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(session: Session, path: &str) -> Lock {
        Lock::with_rule(session, path, Role::Lock, Admission::Exclusive)
    }

    /// The read side of a read/write lock: held together with other readers, never with a
    /// writer. A reader behind a waiting writer waits (no writer starvation).
    pub(crate) fn read(session: Session, path: &str) -> Lock {
        Lock::with_rule(session, path, Role::Read, Admission::Shared)
    }

    /// The write side of a read/write lock: exclusive against readers and writers.
    pub(crate) fn write(session: Session, path: &str) -> Lock {
        Lock::with_rule(session, path, Role::Write, Admission::Exclusive)
    }

    fn with_rule(session: Session, path: &str, role: Role, admission: Admission) -> Lock {
        let mut queue = Queue::new(session, path, NodeFormat::default(), None);
        queue.role = role;
        Lock {
            queue,
            admission,
            busy: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Uses another node layout, e.g. [`NodeFormat::Kazoo`] to share the lock with Python
    /// Kazoo's `Lock`.
    pub fn with_format(mut self, format: NodeFormat) -> Self {
        self.queue.format = format;
        self
    }

    /// Names this contender in the owner data that [`contenders`](Self::contenders) and the
    /// CLI's `status` show.
    pub fn with_id(mut self, id: &str) -> Self {
        self.queue.owner = Owner::ThisProcess {
            id: Some(id.to_string()),
        };
        self
    }

    /// Replaces the owner data with raw bytes (Kazoo, for one, stores its identifier).
    pub fn with_data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.queue.owner = Owner::Raw(data.into());
        self
    }

    /// The lock directory.
    pub fn path(&self) -> &str {
        &self.queue.dir
    }

    /// Test hook: use this contender uuid instead of a fresh one per acquire, to provoke a
    /// collision with another session's node. Not part of the API.
    #[doc(hidden)]
    pub fn __with_contender_uuid(mut self, uuid: uuid::Uuid) -> Self {
        self.queue.uuid = Some(uuid);
        self
    }

    fn claim(&self) -> Result<Claim> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyHeld {
                path: self.queue.dir.clone(),
            });
        }
        Ok(Claim {
            busy: Some(self.busy.clone()),
        })
    }

    /// Waits in the queue until this contender holds the lock.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future gives up our place in the queue, and our node is
    /// deleted in the background (found by its uuid if the create's answer never arrived).
    ///
    /// # Notable errors
    /// - [`Error::AlreadyHeld`] if this handle holds or is acquiring the lock.
    /// - [`Error::InvalidPath`], [`Error::NoAuth`] for bad input; nothing is left behind.
    /// - [`Error::SessionExpired`]: connect a new session.
    /// - [`Error::NodeDeleted`] if someone deleted our node while we waited.
    pub async fn acquire(&self) -> Result<Lease> {
        let claim = self.claim()?;
        let grant = self.queue.join(self.admission, None).await?;
        Ok(self.lease(grant, claim))
    }

    /// Like [`acquire`](Self::acquire), giving up after `timeout` with [`Error::Timeout`],
    /// which names the holder and how many were ahead. Our node is deleted before the error
    /// is returned.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Lease> {
        let claim = self.claim()?;
        let grant = self
            .queue
            .join(self.admission, Some(Instant::now() + timeout))
            .await?;
        Ok(self.lease(grant, claim))
    }

    /// Takes the lock if nobody holds or waits for it; never waits behind a holder.
    /// Returns `Ok(None)` when it is taken (after one read, without writing anything).
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        let claim = self.claim()?;
        Ok(self
            .queue
            .try_join(self.admission)
            .await?
            .map(|grant| self.lease(grant, claim)))
    }

    /// The contenders now: holder first, then the waiters in order.
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        self.queue.contenders().await
    }

    fn lease(&self, grant: Grant, claim: Claim) -> Lease {
        Lease::new(
            self.queue.session.clone(),
            self.queue.dir.clone(),
            grant,
            claim,
        )
    }
}

/// Marks a `Lock` handle busy; clears the mark when dropped.
pub(crate) struct Claim {
    busy: Option<Arc<AtomicBool>>,
}

impl Claim {
    /// A claim that marks nothing, for recipes without a handle-level check.
    pub(crate) fn none() -> Claim {
        Claim { busy: None }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(busy) = &self.busy {
            busy.store(false, Ordering::Release);
        }
    }
}

/// One operation of a [`Lease::fenced_write`].
///
/// ```no_run
/// # async fn f(lease: zkfence::Lease) -> zkfence::Result<()> {
/// use zkfence::FencedOp;
/// // Written only if our lock node still exists: a stale holder's write is refused.
/// lease.fenced_write(&[
///     FencedOp::SetData { path: "/app/config".into(), data: b"v2".to_vec(), version: None },
///     FencedOp::Create { path: "/app/history/v2".into(), data: vec![] },
/// ]).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedOp {
    /// Create a persistent node.
    Create {
        /// Node path.
        path: String,
        /// Node data.
        data: Vec<u8>,
    },
    /// Set a node's data, optionally only at `version`.
    SetData {
        /// Node path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Delete a node, optionally only at `version`.
    Delete {
        /// Node path.
        path: String,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
}

/// The guard of a held lock.
///
/// Dropping it releases the lock in the background; [`release`](Self::release) does the same
/// and waits for the ensemble to confirm. It keeps its [`Session`] alive, and may be moved to
/// and released from any task.
///
/// Always check [`state`](Self::state) (or race your work against [`lost`](Self::lost))
/// before an action the lock protects, and pass [`token`](Self::token) to the resource.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// # async fn do_the_work(_: zkfence::FencingToken) {}
/// let lease = session.lock("/locks/nightly-report").acquire().await?;
/// tokio::select! {
///     reason = lease.lost() => eprintln!("lost the lock mid-way ({reason}): abandoning"),
///     _ = do_the_work(lease.token()) => lease.release().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
pub struct Lease {
    session: Session,
    dir: String,
    grant: Grant,
    holding: Arc<Holding>,
    holding_id: u64,
    loss: watch::Receiver<Option<LossReason>>,
    watching: AtomicBool,
    released: bool,
    _claim: Claim,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("node", &self.grant.node)
            .field("token", &self.token())
            .field("state", &self.state())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(session: Session, dir: String, grant: Grant, claim: Claim) -> Lease {
        let (tx, loss) = watch::channel(None);
        let holding = Arc::new(Holding {
            node: grant.node.clone(),
            epoch: grant.epoch,
            loss: tx,
        });
        let holding_id = session.shared().register(&holding);
        let lease = Lease {
            session,
            dir,
            grant,
            holding,
            holding_id,
            loss,
            watching: AtomicBool::new(false),
            released: false,
            _claim: claim,
        };
        // The clock may have lapsed between the grant and the registration.
        lease.state();
        lease
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> FencingToken {
        FencingToken::from_sequence(self.grant.sequence)
    }

    /// The zxid that created our node: grows across every path of the ensemble.
    pub fn zxid(&self) -> i64 {
        self.grant.czxid
    }

    /// Full path of our queue node.
    pub fn path(&self) -> &str {
        &self.grant.node
    }

    /// The lock directory.
    pub fn lock_path(&self) -> &str {
        &self.dir
    }

    /// The session the lease lives on.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Where the lease stands now. Cheap: no request is sent.
    ///
    /// Node deletion by a third party is noticed once something looked: [`lost`](Self::lost),
    /// [`renew`](Self::renew) or [`fenced_write`](Self::fenced_write).
    pub fn state(&self) -> LeaseState {
        lease_state(&self.session, &self.holding, &self.loss)
    }

    /// Until when the lease is vouched for, or `None` once it is lost.
    pub fn valid_until(&self) -> Option<Instant> {
        match self.state() {
            LeaseState::Lost(_) => None,
            _ => Some(self.session.shared().clock().valid_until),
        }
    }

    /// Resolves when the lease is lost, with the reason. Cancel safe.
    ///
    /// The first call also watches our node, so deletion by someone else is noticed.
    pub async fn lost(&self) -> LossReason {
        self.loss_watch().lost().await
    }

    /// A detached observer of this lease's loss, for code that must watch the lease while
    /// something else owns it.
    pub(crate) fn loss_watch(&self) -> LossWatch {
        self.watch_node();
        LossWatch {
            session: self.session.clone(),
            holding: self.holding.clone(),
            loss: self.loss.clone(),
        }
    }

    /// Sets one watch on our node, so a deletion by someone else ends the lease.
    fn watch_node(&self) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let holding = Arc::downgrade(&self.holding);
        let shared = self.session.shared().clone();
        let node = self.grant.node.clone();
        crate::session::spawn_detached(async move {
            loop {
                let watch = crate::queue::retry_read(&shared, "watch", &node, || {
                    shared.client.check_and_watch_stat(&node)
                });
                let deleted = match watch.await {
                    Ok((None, _)) => true,
                    Ok((Some(_), watcher)) => {
                        let event = watcher.changed().await;
                        event.event_type == zk::EventType::NodeDeleted
                    }
                    Err(_) => return,
                };
                let Some(holding) = holding.upgrade() else {
                    return;
                };
                if deleted {
                    if holding.lose(LossReason::NodeDeleted) {
                        tracing::warn!(%node, "lease lost: our node was deleted by someone else");
                    }
                    return;
                }
                if holding.loss.borrow().is_some() {
                    return;
                }
            }
        });
    }

    /// Confirms with the quorum that we still hold the lock (one round trip: `sync`, then
    /// `exists` on our node) and returns the new [`valid_until`](Self::valid_until).
    ///
    /// # Notable errors
    /// [`Error::LockLost`] if the lease is already lost or our node is gone.
    pub async fn renew(&self) -> Result<Instant> {
        self.check_held()?;
        match crate::queue::confirm(self.session.shared(), &self.grant.node).await {
            Ok(()) => {}
            Err(Error::NodeDeleted { .. }) => {
                self.holding.lose(LossReason::NodeDeleted);
            }
            Err(err) => return Err(err),
        }
        self.check_held()?;
        self.valid_until().ok_or_else(|| self.lost_error())
    }

    fn lost_error(&self) -> Error {
        let reason = match self.state() {
            LeaseState::Lost(reason) => reason,
            _ => LossReason::LeaseExpired,
        };
        Error::LockLost {
            path: self.dir.clone(),
            reason,
        }
    }

    fn check_held(&self) -> Result<()> {
        match self.state() {
            LeaseState::Lost(_) => Err(self.lost_error()),
            _ => Ok(()),
        }
    }

    /// Writes to ZooKeeper only if we still hold the lock: one multi-op that first checks our
    /// node exists, so a stale holder's write is refused by the ensemble itself.
    ///
    /// # Notable errors
    /// - [`Error::LockLost`] if the lease is lost or the check fails (nothing was written).
    /// - [`Error::FencedWriteFailed`] if an operation failed (nothing was written).
    pub async fn fenced_write(&self, ops: &[FencedOp]) -> Result<()> {
        self.check_held()?;
        let shared = self.session.shared();
        let client = &shared.client;
        let mut writer = client
            .new_check_writer(&self.grant.node, None)
            .map_err(|e| Error::zk("fenced write", &self.grant.node, e))?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&shared.acls));
        for op in ops {
            let (path, added) = match op {
                FencedOp::Create { path, data } => {
                    (path, writer.add_create(path, data, &persistent))
                }
                FencedOp::SetData {
                    path,
                    data,
                    version,
                } => (path, writer.add_set_data(path, data, *version)),
                FencedOp::Delete { path, version } => (path, writer.add_delete(path, *version)),
            };
            added.map_err(|_| Error::InvalidPath {
                path: path.clone(),
                reason: "not a valid node path",
            })?;
        }
        let sent = Instant::now();
        match writer.commit().await {
            Ok(_) => {
                shared.renewed(sent);
                Ok(())
            }
            Err(zk::CheckWriteError::CheckFailed { .. }) => {
                self.holding.lose(LossReason::NodeDeleted);
                Err(self.lost_error())
            }
            Err(zk::CheckWriteError::OperationFailed { index, source }) => {
                Err(Error::FencedWriteFailed {
                    path: self.dir.clone(),
                    index,
                    source,
                })
            }
            Err(zk::CheckWriteError::RequestFailed { source }) => {
                Err(Error::zk("fenced write", &self.grant.node, source))
            }
        }
    }

    /// Releases the lock and waits until the ensemble confirms our node is gone.
    ///
    /// Retries through connection loss and server failover, so once it returns `Ok` no
    /// session keeps the node. If the session ends first the error says so — the lock is
    /// free then too.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped the delete goes on in the background.
    pub async fn release(mut self) -> Result<()> {
        if !self.mark_released() {
            return Ok(());
        }
        // The delete is sent inline (no task hop on the hot path); if this future is dropped
        // before the ensemble confirms, the guard hands the retries to a background task.
        let mut guard = DeleteOnDrop {
            shared: Some(self.session.shared().clone()),
            node: self.grant.node.clone(),
        };
        let result = self
            .session
            .shared()
            .delete_until_gone(&self.grant.node)
            .await;
        guard.shared = None;
        result
    }

    /// Marks the lease released; returns false if it already was.
    fn mark_released(&mut self) -> bool {
        if std::mem::replace(&mut self.released, true) {
            return false;
        }
        self.holding.lose(LossReason::Released);
        self.session.shared().unregister(self.holding_id);
        tracing::info!(node = %self.grant.node, token = %self.token(), "released");
        true
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.mark_released() {
            drop(DeleteOnDrop {
                shared: Some(self.session.shared().clone()),
                node: self.grant.node.clone(),
            });
        }
    }
}

/// Deletes `node` in the background when dropped while `shared` is set. Without a runtime
/// the node disappears with the session.
struct DeleteOnDrop {
    shared: Option<Arc<crate::session::Shared>>,
    node: String,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let node = std::mem::take(&mut self.node);
            crate::session::spawn_detached(async move {
                let _ = shared.delete_until_gone(&node).await;
            });
        }
    }
}

fn lease_state(
    session: &Session,
    holding: &Holding,
    loss: &watch::Receiver<Option<LossReason>>,
) -> LeaseState {
    if let Some(reason) = *loss.borrow() {
        return LeaseState::Lost(reason);
    }
    let clock = session.shared().clock();
    if !clock.holds(holding.epoch, Instant::now()) {
        let reason = clock.loss_reason();
        holding.lose(reason);
        return LeaseState::Lost(loss.borrow().unwrap_or(reason));
    }
    if clock.state == SessionState::Disconnected {
        LeaseState::Suspended
    } else {
        LeaseState::Held
    }
}

/// Observes a lease's loss without owning the lease.
pub(crate) struct LossWatch {
    session: Session,
    holding: Arc<Holding>,
    loss: watch::Receiver<Option<LossReason>>,
}

impl LossWatch {
    pub(crate) fn state(&self) -> LeaseState {
        lease_state(&self.session, &self.holding, &self.loss)
    }

    /// Resolves when the lease is lost. Cancel safe.
    pub(crate) async fn lost(&self) -> LossReason {
        let mut loss = self.loss.clone();
        let mut clock = self.session.shared().clock.subscribe();
        loop {
            if let LeaseState::Lost(reason) = self.state() {
                return reason;
            }
            let valid_until = clock.borrow_and_update().valid_until;
            tokio::select! {
                _ = loss.changed() => {}
                _ = clock.changed() => {}
                _ = tokio::time::sleep_until(valid_until) => {}
            }
        }
    }
}
