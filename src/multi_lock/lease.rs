//! [`MultiLease`]: the guard of several locks held together.

use std::fmt;

use futures::future::select_all;

use super::normalise;
use crate::error::{LossReason, Result};
use crate::lease::{Claim, Lease, LeaseState};
use crate::session::{Session, Shared};
use crate::token::FencingToken;

/// The guard of a held multi-lock: one [`Lease`] per path.
///
/// Each path fences with its own token ([`token`](Self::token)); [`lost`](Self::lost)
/// resolves when any of them is lost. Dropping the guard releases every path in the
/// background; [`release`](Self::release) deletes all nodes in one transaction and waits
/// for the ensemble to confirm.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// # async fn book(_: &[(&str, zkfence::FencingToken)]) {}
/// let lease = session.multi_lock(&["/seats/12", "/seats/13"]).acquire().await?;
/// let tokens = [
///     ("/seats/12", lease.token("/seats/12").unwrap()),
///     ("/seats/13", lease.token("/seats/13").unwrap()),
/// ];
/// tokio::select! {
///     (path, reason) = lease.lost() => eprintln!("lost {path} mid-way ({reason}): abandoning"),
///     _ = book(&tokens) => lease.release().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "if unused the locks are released at once"]
#[clippy::has_significant_drop]
pub struct MultiLease {
    pub(super) session: Session,
    /// In the order the paths were given; empty once released.
    pub(super) leases: Vec<Lease>,
    pub(super) _claim: Claim,
}

impl fmt::Debug for MultiLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLease")
            .field("leases", &self.leases)
            .finish()
    }
}

impl MultiLease {
    /// The lease of `path` (a path the multi-lock named, as given or normalised).
    ///
    /// ```no_run
    /// # async fn f(lease: zkfence::MultiLease) -> zkfence::Result<()> {
    /// use zkfence::FencedOp;
    /// // A write in ZooKeeper fenced by one seat's lock.
    /// lease.lease("/seats/12").unwrap().fenced_write(&[FencedOp::SetData {
    ///     path: "/bookings/seat-12".into(), data: b"booking-7".to_vec(), version: None,
    /// }]).await?;
    /// # Ok(()) }
    /// ```
    pub fn lease(&self, path: &str) -> Option<&Lease> {
        let path = normalise(path);
        self.leases.iter().find(|l| l.lock_path() == path)
    }

    /// The fencing token of `path`'s lock, or `None` if the multi-lock did not name it.
    /// Pass it to the resource `path` protects: each resource fences with its own lock's
    /// token, which grows with each grant of that lock.
    ///
    /// ```no_run
    /// # fn f(lease: zkfence::MultiLease) {
    /// let token = lease.token("/seats/12").expect("a path we locked");
    /// # }
    /// ```
    pub fn token(&self, path: &str) -> Option<FencingToken> {
        self.lease(path).map(Lease::token)
    }

    /// Every lease, in the order the paths were given.
    ///
    /// ```no_run
    /// # fn f(lease: zkfence::MultiLease) {
    /// for l in lease.leases() {
    ///     println!("{}: {}", l.lock_path(), l.token());
    /// }
    /// # }
    /// ```
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// Where the multi-lease stands: `Lost` if any path is lost, else `Suspended` if any is
    /// suspended, else `Held`. Cheap: no request is sent.
    ///
    /// ```no_run
    /// # fn f(lease: zkfence::MultiLease) {
    /// if lease.state() == zkfence::LeaseState::Held { /* act */ }
    /// # }
    /// ```
    pub fn state(&self) -> LeaseState {
        let mut worst = LeaseState::Held;
        for lease in &self.leases {
            match lease.state() {
                lost @ LeaseState::Lost(_) => return lost,
                LeaseState::Suspended => worst = LeaseState::Suspended,
                LeaseState::Held => {}
            }
        }
        worst
    }

    /// Resolves when any path's lease is lost, with that lock's path and the reason.
    ///
    /// The first call also watches our nodes (one read each), so a deletion by someone else
    /// is noticed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes; the watches on our nodes stay.
    ///
    /// # Notable errors
    /// None: it returns the [`LossReason`].
    ///
    /// ```no_run
    /// # async fn f(lease: zkfence::MultiLease) {
    /// let (path, reason) = lease.lost().await;
    /// eprintln!("stop: lost {path} ({reason})");
    /// # }
    /// ```
    pub async fn lost(&self) -> (&str, LossReason) {
        let losses = self
            .leases
            .iter()
            .map(|lease| Box::pin(async move { (lease.lock_path(), lease.lost().await) }));
        select_all(losses).await.0
    }

    /// The session the leases live on.
    ///
    /// ```no_run
    /// # fn f(lease: zkfence::MultiLease) {
    /// println!("held by session {:#x}", lease.session().id());
    /// # }
    /// ```
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Releases every path: deletes all our nodes in one transaction, and waits until the
    /// ensemble confirms they are gone. Each path's [`Lease`] is marked released then.
    ///
    /// Retries through connection loss and server failover, so once it returns `Ok` no
    /// session keeps any of the nodes.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, each lease deletes its node in the background.
    ///
    /// # Notable errors
    /// - [`Error::SessionExpired`](crate::Error::SessionExpired), [`Error::SessionClosed`](crate::Error::SessionClosed): the session ended, which
    ///   removed the nodes.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let lease = session.multi_lock(&["/seats/12", "/seats/13"]).acquire().await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        let leases = std::mem::take(&mut self.leases);
        release_all(&self.session.shared(), leases).await
    }
}

/// Deletes the leases' nodes in one transaction, then marks each lease released without a
/// request of its own. If this is dropped before the ensemble answers (or the transaction
/// fails), each lease deletes its own node in the background.
async fn release_all(shared: &Shared, leases: Vec<Lease>) -> Result<()> {
    if leases.is_empty() {
        return Ok(());
    }
    let nodes: Vec<String> = leases.iter().map(|l| l.path().to_string()).collect();
    let result = shared.delete_all_until_gone(&nodes).await;
    if result.is_ok() {
        leases.into_iter().for_each(Lease::released_elsewhere);
    }
    result
}

impl Drop for MultiLease {
    fn drop(&mut self) {
        let leases = std::mem::take(&mut self.leases);
        if leases.is_empty() {
            return;
        }
        let shared = self.session.shared();
        crate::session::spawn_detached(async move {
            let _ = release_all(&shared, leases).await;
        });
    }
}
