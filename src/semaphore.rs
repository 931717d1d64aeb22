//! A counting semaphore: up to `n` holders at once.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lease::{Claim, Lease};
use crate::node::Kind;
use crate::queue::{self, Contender, Owner, Queue};
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
/// Every contender must use the same `permits`. Each holder records its `permits` in its
/// lease node's data, and an acquire with a different number is refused with
/// [`Error::PermitsMismatch`] before it creates anything. Curator's `InterProcessSemaphoreV2`
/// records nothing (and ignores the record): its holders are counted, never checked.
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
    id: Option<String>,
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
            id: None,
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

    /// Names this contender in the owner data that [`holders`](Self::holders) and the CLI's
    /// `status` show.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let permit = session.semaphore("/limits/api", 3).with_id("worker-7").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_id(mut self, id: &str) -> Self {
        self.id = Some(id.to_string());
        self
    }

    fn leases(&self) -> Queue {
        Queue::new(
            self.session.clone(),
            &self.leases_dir(),
            Kind::Lease {
                permits: self.permits,
            },
        )
        .with_owner(Owner::Permit {
            id: self.id.clone(),
            permits: self.permits,
        })
    }

    fn turn(&self) -> crate::Lock {
        let mutex = self.session.lock(&format!("{}/locks", self.path));
        match &self.id {
            Some(id) => mutex.with_id(id),
            None => mutex,
        }
    }

    /// Refuses a limit other than the one the current holders recorded, and a path that
    /// another kind of lock uses ([`Error::KindConflict`]). Checked before we queue (so a
    /// mismatch is told at once) and again once we hold the turn: only the turn's holder adds
    /// a lease, so then the holders cannot change their limit under us.
    ///
    /// The path's own children are read in the same request as the leases: a plain or
    /// read/write lock's nodes sit there, beside our `locks/` and `leases/`. Once we hold the
    /// turn our node is in `locks/` (and then in `leases/` until the lease ends), so a lock
    /// that lists the path after this read sees us, and one that listed it before is seen here.
    async fn check_permits(&self) -> Result<()> {
        let shared = self.session.shared();
        let leases_dir = self.leases_dir();
        let mut listed = shared
            .list_many(&[leases_dir.clone(), self.path.clone()])
            .await?
            .into_iter();
        let (leases, beside) = (listed.next().flatten(), listed.next().flatten());
        if let Some(name) = beside
            .into_iter()
            .flatten()
            .find(|name| crate::node::sequence_of(name).is_some())
        {
            let theirs = crate::node::kind_of(&name);
            let node = format!("{}/{name}", self.path);
            tracing::warn!(path = %self.path, %theirs, %node, "another kind of lock uses this semaphore's path: refused");
            return Err(Error::KindConflict {
                path: self.path.clone(),
                ours: crate::LockKind::Semaphore,
                theirs,
                node,
            });
        }
        let holders = match leases {
            Some(children) => {
                queue::contenders_among(&shared, &leases_dir, children, usize::MAX).await?
            }
            None => vec![],
        };
        match holders
            .into_iter()
            .find(|h| h.owner.permits.is_some_and(|p| p != self.permits))
        {
            None => Ok(()),
            Some(holder) => {
                tracing::warn!(
                    path = %self.path,
                    ours = self.permits,
                    theirs = ?holder.owner.permits,
                    holder = %holder,
                    "semaphore limit differs from its holders': refused"
                );
                Err(Error::PermitsMismatch {
                    path: self.path.clone(),
                    ours: self.permits,
                    theirs: holder.owner.permits.unwrap_or_default(),
                    holder: Box::new(holder),
                })
            }
        }
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
    /// - [`Error::PermitsMismatch`] if the holders recorded another number of permits.
    /// - [`Error::KindConflict`] if a plain or read/write lock uses the path.
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
        let started = Instant::now();
        self.check_permits_until(deadline, started).await?;
        let mutex = self.turn();
        let turn = match deadline {
            None => mutex.acquire().await?,
            Some(deadline) => mutex
                .acquire_timeout(deadline.saturating_duration_since(Instant::now()))
                .await
                .map_err(|e| self.timeout_for_semaphore(e, started))?,
        };
        // Our turn: we are the only one waiting for a permit. Dropping the turn on an error
        // hands it on (the delete goes on in the background).
        self.check_permits_until(deadline, started).await?;
        let grant = self.leases().join(deadline).await;
        drop(turn);
        let grant = grant.map_err(|e| self.timeout_for_semaphore(e, started))?;
        Ok(Lease::new(self.leases_dir().into(), grant, Claim::none()))
    }

    /// [`check_permits`](Self::check_permits) within the acquire's deadline: a silent ensemble
    /// must not hold a timed acquire past it (the listing would wait for the session to end).
    async fn check_permits_until(&self, deadline: Option<Instant>, started: Instant) -> Result<()> {
        let Some(deadline) = deadline else {
            return self.check_permits().await;
        };
        match tokio::time::timeout_at(deadline, self.check_permits()).await {
            Ok(checked) => checked,
            Err(_) => {
                tracing::debug!(path = %self.path, "semaphore acquire timed out checking the holders' limit");
                Err(Error::Timeout {
                    path: self.path.clone(),
                    waited: started.elapsed(),
                    // Not looked at: the listing that would tell did not answer.
                    ahead: 0,
                    holder: None,
                })
            }
        }
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
        self.check_permits().await?;
        let mutex = self.turn();
        // Someone holding the turn is waiting for a permit: none is free.
        let Some(turn) = mutex.try_acquire().await? else {
            return Ok(None);
        };
        self.check_permits().await?;
        let grant = self.leases().try_join().await;
        drop(turn);
        Ok(grant?.map(|grant| Lease::new(self.leases_dir().into(), grant, Claim::none())))
    }

    /// The current holders of permits, oldest first (not the acquirer waiting for one), read
    /// after a `sync` with the ZooKeeper leader as [`Lock::contenders`](crate::Lock::contenders).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`] for a bad path; [`Error::NoAuth`] if the ACL forbids reading.
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`].
    pub async fn holders(&self) -> Result<Vec<Contender>> {
        crate::node::validate_path(&self.path)?;
        queue::list_contenders_now(&self.session.shared(), &self.leases_dir(), self.permits).await
    }

    /// A timeout of the inner lock or leases queue, reported against the semaphore.
    fn timeout_for_semaphore(&self, err: Error, started: Instant) -> Error {
        match err {
            Error::Timeout { ahead, holder, .. } => Error::Timeout {
                path: self.path.clone(),
                waited: started.elapsed(),
                ahead,
                holder,
            },
            other => other,
        }
    }
}
