//! The one guard every recipe returns: [`Lease`], where it stands ([`LeaseState`]), and
//! what watches it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use crate::error::{Error, LossReason, Result};
use crate::queue::Grant;
use crate::revoke::RevocationWatch;
use crate::session::{FencedFailure, FencedOp, Holding, Session, SessionState, Shared};
use crate::token::FencingToken;

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

/// Marks a [`Lock`](crate::Lock) handle busy while its lease lives; clears the mark when
/// dropped.
pub(crate) struct Claim {
    busy: Option<Arc<AtomicBool>>,
}

impl Claim {
    /// A claim that marks nothing, for recipes without a handle-level check.
    pub(crate) fn none() -> Claim {
        Claim { busy: None }
    }

    /// A claim on a handle's busy flag, already set.
    pub(crate) fn of(busy: Arc<AtomicBool>) -> Claim {
        Claim { busy: Some(busy) }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(busy) = &self.busy {
            busy.store(false, Ordering::Release);
        }
    }
}

/// The guard of a held lock (also of a leadership and a semaphore permit).
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
    /// Shared with the lock it came from: a grant copies no path.
    dir: Arc<str>,
    node: String,
    sequence: i32,
    token: FencingToken,
    holding: Arc<Holding>,
    holding_id: u64,
    /// Set on a revocable lease (see [`Lock::revocable`](crate::Lock::revocable)).
    revocation: Option<RevocationWatch>,
    released: bool,
    _claim: Claim,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("node", &self.node)
            .field("token", &self.token)
            .field("state", &self.state())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(dir: Arc<str>, grant: Grant, claim: Claim) -> Lease {
        let session = grant.session;
        let (holding, holding_id) = session.shared().register(grant.node.clone(), grant.epoch);
        holding.track(crate::telemetry::Tag::new(
            grant.recipe,
            &dir,
            session.shared().metrics_path_labels,
        ));
        let lease = Lease {
            session,
            dir,
            node: grant.node,
            sequence: grant.sequence,
            token: FencingToken::from_zxid(grant.czxid),
            holding,
            holding_id,
            revocation: None,
            released: false,
            _claim: claim,
        };
        // A grant through the queue comes with a watch on our node (it proved the node
        // existed): follow it from now on, so a deletion by someone else ends the lease at
        // once. A grant without one is watched a keepalive interval later (`holding.rs`).
        if let Some(own_watch) = grant.own_watch {
            lease.holding.watch_node(Some(own_watch));
        }
        // The clock may have lapsed between the grant and the registration.
        lease.state();
        // Or `Session::close` marked the session closed after the grant was decided: its
        // list of nodes to delete may not have this one (it was read before we registered),
        // and nothing would delete it while this lease keeps the ZooKeeper session open.
        if lease.session.shared().clock.now().state == SessionState::Closed {
            drop(DeleteOnDrop {
                shared: Some(&lease.session.shared()),
                node: &lease.node,
            });
        }
        lease
    }

    /// The fencing token of this grant: our node's creation zxid, larger than the token of
    /// every earlier grant of this lock (see [`FencingToken`]).
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// Our node's sequence number, which orders the queue (not the token: it restarts with a
    /// re-created directory and wraps after 2³¹ creates).
    pub fn sequence(&self) -> i32 {
        self.sequence
    }

    /// Full path of our queue node.
    pub fn path(&self) -> &str {
        &self.node
    }

    /// The lock directory.
    pub fn lock_path(&self) -> &str {
        &self.dir
    }

    /// The session the lease lives on, bound to the ZooKeeper session of its node: its
    /// [`id`](Session::id) and [`state`](Session::state) are that session's even after the
    /// `Session` opened a new one. Locks and elections made from it use the live one.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Keeps our node in the queue when the lease clock lapses, until this lease is released
    /// or dropped. Returns where the lease stands once that holds.
    ///
    /// By default a lapse of the clock ends the lease *and* deletes its node as soon as the
    /// ensemble answers again, so the lock is not blocked by a holder that was told it lost.
    /// A holder that must first stop work it cannot stop at once (the CLI's `exec` stops a
    /// whole process group, which can take a while) keeps the node instead: the lease is
    /// still [`Lost`](LeaseState::Lost)`(ClockLapsed)` at the lapse, but nobody else can be
    /// granted before it releases. The session's expiry still bounds that: a holder that
    /// dies or stays silent loses the node with its session.
    ///
    /// Call it before acting on the lease. If the lease is already `Lost` (the returned
    /// state says so), its node may already be going.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// # async fn stop_the_work() {}
    /// let lease = session.lock("/locks/job").acquire().await?;
    /// if let zkfence::LeaseState::Lost(_) = lease.keep_node_until_released() {
    ///     return Ok(()); // lost before the work started
    /// }
    /// let reason = lease.lost().await;
    /// stop_the_work().await; // nobody else holds the lock meanwhile
    /// lease.release().await.ok(); // now the next holder may be granted
    /// # let _ = reason; Ok(()) }
    /// ```
    pub fn keep_node_until_released(&self) -> LeaseState {
        self.holding.keep_node.store(true, Ordering::SeqCst);
        // A lapse recorded before the flag was seen has started the deletion; one after it
        // reads the flag. The state, read after, tells which.
        self.state()
    }

    /// Where the lease stands now. Cheap: no request is sent.
    ///
    /// Every way the lease can end shows here: the lease clock ran out (or the machine was
    /// suspended past it), the session expired or was closed, the lease was released, or
    /// our node was deleted by someone else. The last one is noticed through a watch on
    /// our node: a lease granted after waiting watches from the grant on, one granted at once
    /// from one keepalive interval after the grant (or at the first
    /// [`lost`](Self::lost), [`renew`](Self::renew) or [`fenced_write`](Self::fenced_write)),
    /// and the session's keepalives check a node nobody watches yet.
    pub fn state(&self) -> LeaseState {
        lease_state(&self.session, &self.holding)
    }

    /// Until when the lease is vouched for, or `None` once it is lost.
    pub fn valid_until(&self) -> Option<Instant> {
        match self.state() {
            LeaseState::Lost(_) => None,
            _ => {
                let shared = self.session.shared();
                Some(shared.clock.boot.to_tokio(shared.clock.now().valid_until))
            }
        }
    }

    /// Resolves when the lease is lost, with the reason.
    ///
    /// The first call also watches our node (one read), so a deletion by someone else is
    /// noticed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes; the watch on our node stays.
    ///
    /// # Notable errors
    /// None: it resolves with the [`LossReason`] instead.
    pub async fn lost(&self) -> LossReason {
        self.loss_watch().lost().await
    }

    /// Resolves once someone asked this lease to let go ([`Session::revoke`],
    /// [`Lock::revoke_holder`](crate::Lock::revoke_holder), Curator's
    /// `Revoker.attemptRevoke`): our node's data became `__REVOKE__`. Only a lease of a
    /// [revocable](crate::Lock::revocable) lock watches for that; on any other lease, and
    /// after our node is gone, it never resolves. Resolving releases nothing: stop the work,
    /// then [`release`](Self::release).
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let lease = session.lock("/locks/job").revocable().acquire().await?;
    /// lease.revoke_requested().await;
    /// lease.release().await?; // let the next contender have it
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes; the watch stays, and a request that came meanwhile
    /// resolves the next call at once.
    ///
    /// # Notable errors
    /// None: it resolves with `()`, or never.
    pub async fn revoke_requested(&self) {
        match &self.revocation {
            Some(revocation) => revocation.requested().await,
            None => std::future::pending().await,
        }
    }

    /// Starts watching for revocation requests (a revocable lock's leases).
    pub(crate) fn watch_revocation(mut self) -> Lease {
        self.revocation = Some(RevocationWatch::start(
            self.session.shared(),
            self.node.clone(),
        ));
        self
    }

    /// A detached observer of this lease's loss, for code that must watch the lease while
    /// something else owns it.
    pub(crate) fn loss_watch(&self) -> LossWatch {
        self.watch_node();
        LossWatch {
            session: self.session.clone(),
            holding: self.holding.clone(),
        }
    }

    /// Watches our node (once), so a deletion by someone else ends the lease.
    fn watch_node(&self) {
        self.holding.watch_node(None);
    }

    /// Confirms with the leader that we still hold the lock and returns the new
    /// [`valid_until`](Self::valid_until). One round trip: a `multi` with one `check` of our
    /// node, a transaction that changes nothing, which only a leader with its quorum can
    /// answer (with [`SessionOptions::server_tick_time`](crate::SessionOptions::server_tick_time)
    /// declared: a `sync`, then `exists` on our node).
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing, whether or not it completes.
    ///
    /// # Notable errors
    /// - [`Error::LockLost`] if the lease is already lost or our node is gone.
    /// - [`Error::NoAnswer`] if the ensemble did not answer within the session timeout.
    pub async fn renew(&self) -> Result<Instant> {
        self.check_held()?;
        self.watch_node();
        match self.session.shared().confirm(&self.node).await {
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
            _ => LossReason::ClockLapsed,
        };
        Error::LockLost {
            path: self.dir.to_string(),
            reason,
        }
    }

    /// Records that our node is gone (someone deleted it) and returns the error to report.
    pub(crate) fn node_gone(&self) -> Error {
        self.holding.lose(LossReason::NodeDeleted);
        self.lost_error()
    }

    pub(crate) fn check_held(&self) -> Result<()> {
        match self.state() {
            LeaseState::Lost(_) => Err(self.lost_error()),
            _ => Ok(()),
        }
    }

    /// Writes to ZooKeeper only if we still hold the lock: one multi-op that first checks our
    /// node exists, so a stale holder's write is refused by the ensemble itself.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that matters: once sent, a dropped write may still have
    /// been applied (all of it or none, as one transaction). Read back to know.
    ///
    /// # Notable errors
    /// - [`Error::LockLost`] if the lease is lost or the check fails (nothing was written).
    /// - [`Error::FencedWriteFailed`] if an operation failed (nothing was written).
    /// - [`Error::InvalidPath`] if an operation's path is invalid (nothing was sent).
    pub async fn fenced_write(&self, ops: &[FencedOp]) -> Result<()> {
        self.check_held()?;
        match self.session.shared().fenced_write(&self.node, ops).await {
            Ok(()) => Ok(()),
            Err(FencedFailure::NodeGone) => {
                self.holding.lose(LossReason::NodeDeleted);
                Err(self.lost_error())
            }
            Err(FencedFailure::Failed(err)) => Err(err),
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
    ///
    /// # Notable errors
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`]: the session ended, which
    ///   removed the node.
    pub async fn release(mut self) -> Result<()> {
        if !self.mark_released() {
            return Ok(());
        }
        // The delete is sent inline (no task hop on the hot path); if this future is dropped
        // before the ensemble confirms, the guard hands the retries to a background task.
        let shared = self.session.shared();
        let mut guard = DeleteOnDrop {
            shared: Some(&shared),
            node: &self.node,
        };
        let result = shared.delete_until_gone(&self.node).await;
        guard.shared = None;
        result
    }

    /// Marks the lease released after someone else deleted its node (a multi-lock's one
    /// transaction): nothing more is sent.
    pub(crate) fn released_elsewhere(mut self) {
        self.mark_released();
    }

    /// Marks the lease released; returns false if it already was.
    fn mark_released(&mut self) -> bool {
        if std::mem::replace(&mut self.released, true) {
            return false;
        }
        self.holding.lose(LossReason::Released);
        self.session.shared().clock.unregister(self.holding_id);
        tracing::info!(node = %self.node, token = %self.token, "released");
        true
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.mark_released() {
            drop(DeleteOnDrop {
                shared: Some(&self.session.shared()),
                node: &self.node,
            });
        }
    }
}

/// Deletes `node` in the background when dropped while `shared` is set. Without a runtime
/// the node disappears with the session.
/// It borrows: the common release, answered in time, copies nothing.
struct DeleteOnDrop<'a> {
    shared: Option<&'a Arc<Shared>>,
    node: &'a str,
}

impl Drop for DeleteOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let (shared, node) = (shared.clone(), self.node.to_owned());
            crate::session::spawn_detached(async move {
                let _ = shared.delete_until_gone(&node).await;
            });
        }
    }
}

fn lease_state(session: &Session, holding: &Holding) -> LeaseState {
    if let Some(reason) = holding.loss() {
        return LeaseState::Lost(reason);
    }
    let shared = session.shared();
    let clock = shared.clock.now();
    if !clock.holds(holding.epoch, shared.clock.instant()) {
        // Recording the loss here also starts the node's deletion (see `Holding::lose`).
        let reason = clock.loss_reason();
        holding.lose(reason);
        return LeaseState::Lost(holding.loss().unwrap_or(reason));
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
}

impl LossWatch {
    pub(crate) fn state(&self) -> LeaseState {
        lease_state(&self.session, &self.holding)
    }

    /// Resolves when the lease is lost. Cancel safe.
    ///
    /// Not woken by the clock's renewals (up to one a millisecond on a busy session): every
    /// loss is recorded in the lease's `Holding` (a lapse, the session's end and `Session::close`
    /// record it in every registered lease, a deleted node in its own), and the clock running
    /// out before the keeper records it is caught by sleeping to the deadline; woken there, it
    /// looks at the current deadline, which a renewal only ever moved later.
    pub(crate) async fn lost(&self) -> LossReason {
        loop {
            // It reads the loss again once its wake-up is enabled: a loss recorded after the
            // read below still wakes us.
            let recorded = self.holding.recorded();
            if let LeaseState::Lost(reason) = self.state() {
                return reason;
            }
            // A suspend of the machine during the sleep makes it wake late; the keeper lapses
            // the clock within a keepalive interval of the wake-up, which `recorded` hears.
            let shared = self.session.shared();
            let valid_until = shared.clock.boot.to_tokio(shared.clock.now().valid_until);
            tokio::select! {
                _ = recorded => {}
                _ = tokio::time::sleep_until(valid_until) => {}
            }
        }
    }
}
