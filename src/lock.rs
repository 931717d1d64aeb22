//! The distributed lock: [`Lock`] (also the two sides of a read/write lock), and the
//! constructors on [`Session`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lease::{Claim, Lease};
use crate::node::{Kind, NodeFormat};
use crate::queue::{Contender, Grant, Owner, Queue};
use crate::session::Session;

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
/// - **Fencing**: each grant carries a [`FencingToken`](crate::FencingToken) larger than
///   every earlier grant's.
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
    busy: Arc<AtomicBool>,
    revocable: bool,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("path", &self.queue.dir())
            .field("format", &self.queue.format())
            .finish()
    }
}

impl Session {
    /// A handle on the lock whose queue lives under the directory `path`.
    ///
    /// Cheap: nothing is sent until [`Lock::acquire`]. An invalid path is reported by the
    /// first operation.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let lease = session.lock("/locks/payments").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, path: &str) -> Lock {
        Lock::of(self, path, Kind::Lock)
    }

    /// The read side of the read/write lock under `path`: shared with other readers,
    /// excluded by writers, FIFO (a reader queued behind a writer waits for it). Node names
    /// match Curator's `InterProcessReadWriteLock` (and Kazoo's `ReadLock` with
    /// [`NodeFormat::Kazoo`]).
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let reading = session.read_lock("/locks/catalog").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self, path: &str) -> Lock {
        Lock::of(self, path, Kind::Read)
    }

    /// The write side of the read/write lock under `path`: exclusive against readers and
    /// writers. A plain [`lock`](Self::lock) on the same path also counts as a writer.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let writing = session.write_lock("/locks/catalog").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self, path: &str) -> Lock {
        Lock::of(self, path, Kind::Write)
    }
}

impl Lock {
    fn of(session: &Session, path: &str, kind: Kind) -> Lock {
        Lock {
            queue: Queue::new(session.unbound(), path, kind),
            busy: Arc::new(AtomicBool::new(false)),
            revocable: false,
        }
    }

    /// Makes each lease of this handle revocable, as Curator's
    /// `InterProcessMutex.makeRevocable`: the lease watches its node's data from the grant
    /// on, and [`Lease::revoke_requested`] resolves once someone asks it to let go
    /// ([`Session::revoke`], [`Lock::revoke_holder`], Curator's `Revoker.attemptRevoke`). The
    /// lease still decides: nothing is released for it. Costs one watch per lease.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// # async fn do_the_work() {}
    /// let lease = session.lock("/locks/job").revocable().acquire().await?;
    /// tokio::select! {
    ///     _ = lease.revoke_requested() => eprintln!("asked to let go: stopping"),
    ///     reason = lease.lost() => eprintln!("lost: {reason}"),
    ///     _ = do_the_work() => {}
    /// }
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn revocable(mut self) -> Self {
        self.revocable = true;
        // Said in the owner data too, so `zkfence revoke` asks only holders that listen.
        self.queue = self.queue.mark_revocable();
        self
    }

    /// The session this handle acquires on.
    pub(crate) fn session(&self) -> &Session {
        self.queue.session()
    }

    /// Uses another node layout, e.g. [`NodeFormat::Kazoo`] to share the lock with Python
    /// Kazoo's `Lock`.
    pub fn with_format(mut self, format: NodeFormat) -> Self {
        self.queue = self.queue.with_format(format);
        self
    }

    /// Names this contender in the owner data that [`contenders`](Self::contenders) and the
    /// CLI's `status` show.
    pub fn with_id(mut self, id: &str) -> Self {
        self.queue = self.queue.with_owner(Owner::ThisProcess {
            id: Some(id.to_string()),
            revocable: self.revocable,
        });
        self
    }

    /// Replaces the owner data with raw bytes (Kazoo, for one, stores its identifier).
    pub fn with_data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.queue = self.queue.with_owner(Owner::Raw(data.into()));
        self
    }

    /// The lock directory.
    pub fn path(&self) -> &str {
        self.queue.dir()
    }

    /// Test hook: use this contender uuid instead of a fresh one per acquire, to provoke a
    /// collision with another session's node. Not part of the API.
    #[doc(hidden)]
    pub fn __with_contender_uuid(mut self, uuid: uuid::Uuid) -> Self {
        self.queue = self.queue.with_uuid(uuid);
        self
    }

    fn claim(&self) -> Result<Claim> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyHeld {
                path: self.path().to_string(),
            });
        }
        Ok(Claim::of(self.busy.clone()))
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
    /// - [`Error::SessionExpired`]: the session expired while we waited; right after an
    ///   expiry, an acquire waits for the new session the `Session` opens (unless reopening
    ///   is off). [`Error::SessionClosed`]: the session was closed.
    /// - [`Error::NodeDeleted`] if someone deleted our node while we waited;
    ///   [`Error::LockDirectoryDeleted`] if the whole directory went.
    /// - [`Error::NoAnswer`] if the ensemble did not vouch for the session at the grant.
    /// - [`Error::KindConflict`] if a semaphore uses the path.
    pub async fn acquire(&self) -> Result<Lease> {
        let claim = self.claim()?;
        let grant = self.queue.join(None).await?;
        Ok(self.lease(grant, claim))
    }

    /// Like [`acquire`](Self::acquire), giving up after `timeout` with [`Error::Timeout`],
    /// which names the holder and how many were ahead.
    ///
    /// Returns within `timeout` plus a fraction of a second even when the ensemble does not
    /// answer: our node is deleted before the error is returned if the ensemble answers in
    /// that time, else in the background (and with the session, if nothing else works).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Notable errors
    /// - [`Error::Timeout`] when `timeout` passed; nothing is held.
    /// - The errors of [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Lease> {
        let claim = self.claim()?;
        let grant = self.queue.join(Some(Instant::now() + timeout)).await?;
        Ok(self.lease(grant, claim))
    }

    /// Takes the lock if nobody holds or waits for it; never waits behind a holder.
    /// Returns `Ok(None)` when it is taken, without writing anything: after a read and, when
    /// that read shows it taken, a `sync` with the leader and a second read, so that a server
    /// behind the leader (a follower cut off from it still answers reads) does not report a
    /// lock released before this call as taken. (A leader itself cut off from its peers
    /// answers a `sync` alone for up to about one tickTime after a new leader exists; only a
    /// write would rule that out.)
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves no node behind.
    ///
    /// # Notable errors
    /// The errors of [`acquire`](Self::acquire) but [`Error::Timeout`].
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        let claim = self.claim()?;
        Ok(self
            .queue
            .try_join()
            .await?
            .map(|grant| self.lease(grant, claim)))
    }

    /// The contenders now: holder first, then the waiters in order. Read after a `sync` (a
    /// round trip to the ZooKeeper leader, no transaction), so that a server behind the
    /// leader does not show the queue as it was before the call.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`] for a bad path.
    /// - [`Error::NoAuth`] if the directory's ACL forbids reading.
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`].
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        self.queue.contenders().await
    }

    /// Asks the current holder of this lock to let go ([`Session::revoke`] on the node at
    /// the head of the queue) and returns who that was, or `None` if nobody holds it.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// match session.lock("/locks/nightly-report").revoke_holder().await? {
    ///     Some(holder) => println!("asked {holder} to let go"),
    ///     None => println!("nobody holds it"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`Session::revoke`]: once sent, the request may have been written.
    ///
    /// # Notable errors
    /// - [`Error::NotALockNode`] if the holder left between the listing and the write.
    /// - The errors of [`contenders`](Self::contenders) and [`Session::revoke`].
    pub async fn revoke_holder(&self) -> Result<Option<Contender>> {
        let Some(holder) = self.contenders().await?.into_iter().next() else {
            return Ok(None);
        };
        self.session().revoke(&holder.node).await?;
        Ok(Some(holder))
    }

    fn lease(&self, grant: Grant, claim: Claim) -> Lease {
        let lease = Lease::new(self.queue.shared_dir(), grant, claim);
        if self.revocable {
            lease.watch_revocation()
        } else {
            lease
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it: an acquire's future without a
    /// session to make one with.
    fn returned_size<'a, A: 'a, R>(_f: impl FnOnce(&'a A) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// What every waiting task carries for as long as it waits (10,000 of them in one
    /// process): 768 bytes while the join, the join's bound half and the enqueue-and-wait
    /// were async fns (each kept its arguments twice) and the second in line bound its two
    /// watches before unwrapping them; 680 since, with room for a compiler's layout to move.
    #[test]
    #[cfg(not(feature = "metrics"))]
    fn an_acquire_future_is_at_most_720_bytes() {
        let acquire = returned_size(Lock::acquire);
        assert!(acquire <= 720, "an acquire future is {acquire} bytes");
    }

    /// As above with the `metrics` feature (on in `cargo test --workspace`: the CLI turns it
    /// on), where the wait keeps its metrics' labels: 856 bytes before, 768 since.
    #[test]
    #[cfg(feature = "metrics")]
    fn an_acquire_future_with_metrics_is_at_most_808_bytes() {
        let acquire = returned_size(Lock::acquire);
        assert!(acquire <= 808, "an acquire future is {acquire} bytes");
    }
}
