//! A counting semaphore: up to `n` holders at once.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lease::{Claim, Lease};
use crate::node::Kind;
use crate::queue::{self, Contender, Queue};
use crate::session::Session;

/// Up to `permits` holders at once, first come first served. Made by
/// [`Session::semaphore`].
///
/// The layout is Apache Curator's `InterProcessSemaphoreV2`: a lock at `{path}/locks`
/// serialises the acquirers, and the permits are ephemeral sequential *lease* nodes in
/// `{path}/leases`. Only the acquirer that holds the lock waits for a permit, watching the
/// leases directory, so a release wakes one waiter and the queue stays fair. A permit is a
/// [`Lease`] like a lock's: session-tied, `Lost` before the server can expire it, released
/// on drop, with a token from the leases directory's counter.
///
/// Every contender must use the same `permits`.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// // At most 3 workers call the rate-limited API at once.
/// let api = session.semaphore("/semaphores/partner-api", 3);
/// let permit = api.acquire().await?;
/// // ... call the API ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Semaphore {
    session: Session,
    path: String,
    permits: usize,
}

impl Session {
    /// A counting semaphore under the directory `path`: up to `permits` holders at once
    /// (Curator's `InterProcessSemaphoreV2` layout). Every contender must agree on `permits`.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let permit = session.semaphore("/limits/exports", 4).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, path: &str, permits: usize) -> Semaphore {
        Semaphore {
            session: self.unbound(),
            path: path.to_string(),
            permits: permits.max(1),
        }
    }
}

impl Semaphore {
    /// The semaphore directory.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How many may hold at once.
    pub fn permits(&self) -> usize {
        self.permits
    }

    fn leases(&self) -> Queue {
        Queue::new(
            self.session.clone(),
            &self.leases_dir(),
            Kind::Lease {
                permits: self.permits,
            },
        )
    }

    fn leases_dir(&self) -> String {
        format!("{}/leases", self.path)
    }

    /// Waits for a permit.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future gives up our place and removes our nodes in the
    /// background.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`], [`Error::NoAuth`] for bad input; nothing is left behind.
    /// - [`Error::SessionExpired`]: the session expired while we waited; right after an
    ///   expiry, an acquire waits for the new session the `Session` opens (unless reopening
    ///   is off). [`Error::SessionClosed`]: the session was closed.
    /// - [`Error::NodeDeleted`] if someone deleted our node while we waited.
    /// - [`Error::NoAnswer`] if the ensemble did not vouch for the session at the grant.
    pub async fn acquire(&self) -> Result<Lease> {
        self.acquire_until(None).await
    }

    /// Like [`acquire`](Self::acquire), giving up after `timeout` with [`Error::Timeout`];
    /// nothing is left behind. Returns within `timeout` plus a fraction of a second even when
    /// the ensemble does not answer.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Notable errors
    /// - [`Error::Timeout`] when `timeout` passed; nothing is held.
    /// - The errors of [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Lease> {
        self.acquire_until(Some(Instant::now() + timeout)).await
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<Lease> {
        crate::node::validate_path(&self.path)?;
        let mutex = self.session.lock(&format!("{}/locks", self.path));
        let turn = match deadline {
            None => mutex.acquire().await?,
            Some(deadline) => mutex
                .acquire_timeout(deadline.saturating_duration_since(Instant::now()))
                .await
                .map_err(|e| self.timeout_for_semaphore(e))?,
        };
        // Our turn: we are the only one waiting for a permit.
        let grant = self.leases().join(deadline).await;
        // Hand the turn on at once (the delete goes on in the background).
        drop(turn);
        let grant = grant.map_err(|e| self.timeout_for_semaphore(e))?;
        Ok(Lease::new(self.leases_dir(), grant, Claim::none()))
    }

    /// Takes a permit if one is free and nobody is waiting for one; never waits.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves no node behind.
    ///
    /// # Notable errors
    /// The errors of [`acquire`](Self::acquire) but [`Error::NodeDeleted`].
    pub async fn try_acquire(&self) -> Result<Option<Lease>> {
        crate::node::validate_path(&self.path)?;
        let mutex = self.session.lock(&format!("{}/locks", self.path));
        // Someone holding the turn is waiting for a permit: none is free.
        let Some(turn) = mutex.try_acquire().await? else {
            return Ok(None);
        };
        let grant = self.leases().try_join().await;
        drop(turn);
        Ok(grant?.map(|grant| Lease::new(self.leases_dir(), grant, Claim::none())))
    }

    /// The current holders of permits, oldest first (not the acquirer waiting for one).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`] for a bad path; [`Error::NoAuth`] if the ACL forbids reading.
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`].
    pub async fn holders(&self) -> Result<Vec<Contender>> {
        crate::node::validate_path(&self.path)?;
        queue::list_contenders(&self.session.shared(), &self.leases_dir(), self.permits).await
    }

    /// A timeout of the inner lock or leases queue, reported against the semaphore.
    fn timeout_for_semaphore(&self, err: Error) -> Error {
        match err {
            Error::Timeout {
                waited,
                ahead,
                holder,
                ..
            } => Error::Timeout {
                path: self.path.clone(),
                waited,
                ahead,
                holder,
            },
            other => other,
        }
    }
}
