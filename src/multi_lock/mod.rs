//! Several locks taken as one: [`MultiLock`] and its guard [`MultiLease`], and the
//! constructor on [`Session`].
//!
//! The queue nodes of every directory are created in one `multi` transaction, then the
//! contender waits in each queue exactly as a plain [`Lock`](crate::Lock) does (the queue's
//! own wait and grant rule), and holds once it holds in all of them.
//!
//! `enqueue.rs` is the protected create of all the nodes in one transaction and their
//! cleanup; `lease.rs` the guard.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::lease::{Claim, Lease, LeaseState};
use crate::node::{self, Kind};
use crate::queue::{Grant, Owner, Queue};
use crate::session::Session;
use crate::telemetry::{self, Recipe, Tag};

mod enqueue;
mod lease;

use enqueue::{enqueue, Pending};
pub use lease::MultiLease;

/// How many paths one multi-lock may name: its creates travel in one request, which
/// ZooKeeper caps at 1 MiB (`jute.maxbuffer`); 256 paths of the longest valid length and
/// their owner data stay well below that.
///
/// ```no_run
/// # async fn f(session: zkfence::Session, seats: Vec<String>) -> zkfence::Result<()> {
/// // Book a large group in batches that each fit one multi-lock.
/// for batch in seats.chunks(zkfence::MAX_MULTI_LOCK_PATHS) {
///     let paths: Vec<&str> = batch.iter().map(String::as_str).collect();
///     let lease = session.multi_lock(&paths).acquire().await?;
///     lease.release().await?;
/// }
/// # Ok(()) }
/// ```
pub const MAX_MULTI_LOCK_PATHS: usize = 256;

/// How long a failed or timed-out acquire waits for its own cleanup before handing it to
/// the background (as a plain lock's does).
const CLEANUP_GRACE: Duration = Duration::from_millis(300);

/// How often a create that finds a directory missing makes one and tries again, beyond one
/// round per directory: a container directory can vanish between our mkdir and our create.
const EXTRA_DIRECTORY_RETRIES: usize = 8;

/// How often a search after a lost answer looks again when it finds our nodes in some
/// directories only (a late commit between its listings).
const PARTIAL_FIND_RETRIES: usize = 5;

/// A handle on several locks taken together: all of them or none.
///
/// Made by [`Session::multi_lock`]. Each path is a lock directory shared with plain
/// [`Lock`](crate::Lock)s on the same path: a multi-lock naming `/seats/13` and a plain lock
/// on `/seats/13` exclude each other, first come first served in that queue.
///
/// # Why it cannot deadlock
///
/// Taking locks one at a time deadlocks when two clients name them in different orders
/// (each holds one and waits for the other), unless every client sorts its paths the same
/// way. A multi-lock instead creates its node in every queue in **one** ZooKeeper
/// transaction, committed at one point of the ensemble's total order. So for any two
/// contenders, the one whose commit came first is ahead of the other in *every* queue they
/// share (a plain lock is a transaction of one). A contender only ever waits for contenders
/// committed before it, and "committed before" has no cycles: no deadlock, whatever order
/// the caller names the paths in.
///
/// # Guarantees
///
/// Those of [`Lock`](crate::Lock), per path: mutual exclusion (each held path's [`Lease`]
/// is told `Lost` before the ensemble can give that path to anyone else), FIFO per queue, no
/// herd, and a [`FencingToken`](crate::FencingToken) per path that grows with each grant of that path. A
/// multi-lock holds *all* its paths from the moment [`acquire`](Self::acquire) returns; while
/// waiting it already stands (and may already be first) in some queues, as a plain waiter
/// does.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// use std::time::Duration;
/// // A group booking: seats 12, 13 and 14, or none of them.
/// let seats = session.multi_lock(&["/seats/14", "/seats/12", "/seats/13"]).with_id("booking-7");
/// let lease = seats.acquire_timeout(Duration::from_secs(5)).await?;
/// for seat in ["/seats/12", "/seats/13", "/seats/14"] {
///     println!("{seat}: token {}", lease.token(seat).unwrap());
/// }
/// lease.release().await?;
/// # Ok(()) }
/// ```
pub struct MultiLock {
    session: Session,
    /// The paths as given, validated at each acquire.
    given: Vec<String>,
    owner: Owner,
    busy: Arc<AtomicBool>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("paths", &self.given)
            .finish()
    }
}

impl Session {
    /// A handle on the locks under the directories `paths`, taken together: all or none.
    ///
    /// Cheap: nothing is sent until [`MultiLock::acquire`]. Bad input (an empty list, a path
    /// named twice, more than [`MAX_MULTI_LOCK_PATHS`] paths, an invalid path) is reported
    /// by the first operation.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// // A transfer locks both accounts; the order named does not matter.
    /// let lease = session.multi_lock(&["/accounts/b", "/accounts/a"]).acquire().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock(&self, paths: &[&str]) -> MultiLock {
        MultiLock {
            session: self.unbound(),
            given: paths.iter().map(|p| p.to_string()).collect(),
            owner: Owner::ThisProcess {
                id: None,
                revocable: false,
            },
            busy: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// `path` with runs of `/` collapsed and a trailing `/` removed, so `/a//b/` and `/a/b` name
/// one lock.
fn normalise(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    if out.len() > 1 && out.ends_with('/') {
        out.pop();
    }
    out
}

/// The normalised, validated paths of a multi-lock, in the order given.
fn validate(given: &[String]) -> Result<Vec<String>> {
    if given.is_empty() {
        return Err(Error::InvalidPath {
            path: String::new(),
            reason: "a multi-lock needs at least one path",
        });
    }
    if given.len() > MAX_MULTI_LOCK_PATHS {
        return Err(Error::InvalidPath {
            path: format!("{} (and {} more)", given[0], given.len() - 1),
            reason: "a multi-lock takes at most MAX_MULTI_LOCK_PATHS (256) paths: they must fit one request",
        });
    }
    let mut paths = Vec::with_capacity(given.len());
    for path in given {
        let path = normalise(path);
        node::validate_path(&path)?;
        if paths.contains(&path) {
            return Err(Error::InvalidPath {
                path,
                reason: "it is named twice in one multi-lock",
            });
        }
        paths.push(path);
    }
    Ok(paths)
}

impl MultiLock {
    /// Names this contender in the owner data of each of its nodes (what
    /// [`Lock::contenders`](crate::Lock::contenders) and the CLI's `status` show).
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let seats = session.multi_lock(&["/seats/1", "/seats/2"]).with_id("booking-9");
    /// # Ok(()) }
    /// ```
    pub fn with_id(mut self, id: &str) -> Self {
        self.owner = Owner::ThisProcess {
            id: Some(id.to_string()),
            revocable: false,
        };
        self
    }

    /// The paths as given to [`Session::multi_lock`].
    ///
    /// ```no_run
    /// # fn f(session: zkfence::Session) {
    /// assert_eq!(session.multi_lock(&["/a", "/b"]).paths(), ["/a", "/b"]);
    /// # }
    /// ```
    pub fn paths(&self) -> &[String] {
        &self.given
    }

    fn claim(&self) -> Result<Claim> {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyHeld {
                path: self.given.join(","),
            });
        }
        Ok(Claim::of(self.busy.clone()))
    }

    /// The metrics labels of a whole multi-lock acquire (its paths joined by commas, when
    /// path labels are on; the join is skipped otherwise).
    fn tag(&self) -> Tag {
        if self.session.shared().metrics_path_labels {
            Tag::new(Recipe::Multi, &self.given.join(","), true)
        } else {
            Tag::new(Recipe::Multi, "", false)
        }
    }

    /// One queue per path (validated), joined as a plain exclusive lock, all bound to the
    /// live ZooKeeper session (waited for until `deadline` right after an expiry).
    async fn queues(&self, deadline: Option<Instant>) -> Result<(Session, Vec<Queue>)> {
        let dirs = validate(&self.given)?;
        let session = self.session.bind(deadline).await?;
        let queues = dirs
            .iter()
            .map(|dir| {
                Queue::new(session.clone(), dir, Kind::Lock)
                    .with_recipe(Recipe::Multi)
                    .with_owner(self.owner.clone())
            })
            .collect();
        Ok((session, queues))
    }

    /// Waits until this contender holds every path.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future gives up its place in every queue; its nodes are
    /// deleted in the background, in one transaction (found by their uuid first if the
    /// create's answer never arrived).
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`] for an empty list, a path named twice, more than
    ///   [`MAX_MULTI_LOCK_PATHS`] paths, or an invalid path; nothing was sent.
    /// - [`Error::AlreadyHeld`] if this handle holds or is acquiring.
    /// - [`Error::NoAuth`] if a directory's ACL forbids the create (or making the directory);
    ///   no node was created in any directory.
    /// - [`Error::SessionExpired`]: the session expired while we waited; right after an
    ///   expiry, an acquire waits for the new session the `Session` opens (unless reopening
    ///   is off). [`Error::SessionClosed`]: the session was closed.
    /// - [`Error::NodeDeleted`] if someone deleted one of our nodes while we waited;
    ///   [`Error::LockDirectoryDeleted`] if a directory kept vanishing. Our other nodes are
    ///   deleted.
    /// - [`Error::NoAnswer`] if the ensemble did not vouch for the session at a grant.
    /// - [`Error::LockLost`] if a path granted first was lost before the last was granted
    ///   (the session's lease clock lapsed meanwhile); nothing is held.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let lease = session.multi_lock(&["/accounts/a", "/accounts/b"]).acquire().await?;
    /// let (a, b) = (lease.token("/accounts/a").unwrap(), lease.token("/accounts/b").unwrap());
    /// // ... debit a, credit b, each write fenced with its account's token ...
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<MultiLease> {
        let claim = self.claim()?;
        let grants = self.join(None).await?;
        self.lease(grants, claim).await
    }

    /// Like [`acquire`](Self::acquire), giving up after `timeout` with [`Error::Timeout`],
    /// which names the first path not yet held, its holder and how many were ahead.
    ///
    /// Returns within `timeout` plus a fraction of a second even when the ensemble does not
    /// answer: the nodes are deleted before the error is returned if the ensemble answers in
    /// that time, else in the background (and with the session, if nothing else works).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Notable errors
    /// - [`Error::Timeout`] when `timeout` passed; nothing is held, in any queue.
    /// - The errors of [`acquire`](Self::acquire).
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// use std::time::Duration;
    /// match session.multi_lock(&["/seats/12", "/seats/13"]).acquire_timeout(Duration::from_secs(2)).await {
    ///     Ok(lease) => lease.release().await?,
    ///     Err(zkfence::Error::Timeout { path, .. }) => println!("{path} is taken"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<MultiLease> {
        let claim = self.claim()?;
        let grants = self.join(Some(Instant::now() + timeout)).await?;
        self.lease(grants, claim).await
    }

    /// Takes every path if none is held or waited for; never waits behind a holder.
    /// Returns `Ok(None)` when any is taken: without writing anything, after one read per
    /// path (sent together) and, to confirm, a `sync` with the leader and a second read (so a
    /// server behind the leader cannot report a path released before the call as taken);
    /// or, if one was taken between those reads and our create, after removing our nodes
    /// again.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves no node behind (deleted in the background).
    ///
    /// # Notable errors
    /// The errors of [`acquire`](Self::acquire) but [`Error::Timeout`].
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// if let Some(lease) = session.multi_lock(&["/seats/12", "/seats/13"]).try_acquire().await? {
    ///     lease.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<MultiLease>> {
        let claim = self.claim()?;
        let (session, queues) = self.queues(Some(Instant::now())).await?;
        let started = Instant::now();
        let tag = self.tag();
        telemetry::acquire_started(&tag);
        // Reads first (pipelined on the connection): when a path is taken we answer without
        // writing anything. As for one lock, "taken" is said only after a `sync` with the
        // leader and a second read: our server may be behind it (a follower cut off from it
        // answers with what it last heard) and show a path released before this call as
        // held. One `sync` brings the whole server up to date, not only its path.
        let shared = session.shared();
        let dirs: Vec<String> = queues.iter().map(|q| q.dir().to_string()).collect();
        let blocked = |listed: &[Option<Vec<String>>]| {
            queues
                .iter()
                .zip(listed)
                .position(|(q, children)| children.as_deref().is_some_and(|c| q.blocked_by(c)))
        };
        if let Some(first) = blocked(&shared.list_many(&dirs).await?) {
            shared.sync(&dirs[first]).await?;
            if blocked(&shared.list_many(&dirs).await?).is_some() {
                telemetry::timed_out(&tag);
                return Ok(None);
            }
        }
        let uuid = uuid::Uuid::new_v4();
        let mut pending = Pending::new(&queues, &uuid);
        let result = async {
            let created = enqueue(&queues, &uuid, &mut pending).await?;
            let marker = pending.marker.clone();
            // One read of every directory decides.
            let listed = shared.list_many(&dirs).await?;
            let grants = try_join_all(queues.iter().zip(&created).zip(listed).map(
                |((queue, created), children)| {
                    let marker = &marker;
                    async move {
                        match children {
                            Some(children) => {
                                queue.grant_if_holds_in(created, children, marker).await
                            }
                            None => Ok(None),
                        }
                    }
                },
            ))
            .await?;
            Ok(grants.into_iter().collect::<Option<Vec<Grant>>>())
        }
        .await;
        telemetry::tried(&tag, started, &result);
        match result {
            Ok(Some(grants)) => {
                pending.disarm();
                Ok(Some(self.lease(grants, claim).await?))
            }
            other => {
                pending.cleanup_until(Instant::now() + CLEANUP_GRACE).await;
                other.map(|_| None)
            }
        }
    }

    /// Enqueues in every queue and waits until every one grants.
    async fn join(&self, deadline: Option<Instant>) -> Result<Vec<Grant>> {
        let (session, queues) = self.queues(deadline).await?;
        let uuid = uuid::Uuid::new_v4();
        let mut pending = Pending::new(&queues, &uuid);
        let started = Instant::now();
        let tag = self.tag();
        telemetry::acquire_started(&tag);
        let granted: Vec<AtomicBool> = queues.iter().map(|_| AtomicBool::new(false)).collect();
        let shared = session.shared();
        let dirs: Vec<String> = queues.iter().map(|q| q.dir().to_string()).collect();
        let span = tracing::info_span!("zkfence.multi_acquire", dirs = %self.given.join(","));
        let wait = async {
            let created = enqueue(&queues, &uuid, &mut pending).await?;
            let marker = pending.marker.clone();
            // One read of every directory: uncontended, every queue grants from it.
            let listed = shared.list_many(&dirs).await?;
            // Otherwise each queue waits on its own predecessor, as a plain lock does, all at
            // once: we hold once all have granted. A failure in one drops the others' waits.
            try_join_all(queues.iter().zip(created).zip(listed).zip(&granted).map(
                |(((queue, created), children), granted)| {
                    let marker = &marker;
                    async move {
                        let fast = match children {
                            Some(children) => {
                                queue.grant_if_holds_in(&created, children, marker).await?
                            }
                            None => None,
                        };
                        let grant = match fast {
                            Some(grant) => grant,
                            None => queue.wait_created(created, marker).await?,
                        };
                        granted.store(true, Ordering::Release);
                        Ok::<_, Error>(grant)
                    }
                },
            ))
            .await
        }
        .instrument(span);
        let timed = match deadline {
            None => Ok(wait.await),
            Some(deadline) => tokio::time::timeout_at(deadline, wait).await,
        };
        let result = match timed {
            Ok(result) => result,
            Err(_) => {
                // The progress read (for the message) and the cleanup share one grace, so
                // a silent ensemble delays the error by it once, not once per step. The
                // read goes first: on one connection it is answered before the delete, so
                // it still sees our node.
                let waited = started.elapsed();
                let grace_ends = Instant::now() + CLEANUP_GRACE;
                let nodes = pending.nodes.clone();
                let progress = tokio::time::timeout_at(
                    grace_ends,
                    self.timeout_error(&queues, nodes.as_deref(), &granted, waited),
                );
                let cleanup = pending.cleanup_until(grace_ends);
                let (err, ()) = tokio::join!(progress, cleanup);
                Err(err.unwrap_or_else(|_| self.bare_timeout_error(&queues, &granted, waited)))
            }
        };
        telemetry::waited(&tag, started, &result);
        match result {
            Ok(grants) => {
                pending.disarm();
                Ok(grants)
            }
            Err(err) => {
                pending.cleanup_until(Instant::now() + CLEANUP_GRACE).await;
                Err(err)
            }
        }
    }

    /// The first path not granted yet.
    fn first_waiting(granted: &[AtomicBool]) -> usize {
        granted
            .iter()
            .position(|g| !g.load(Ordering::Acquire))
            .unwrap_or(0)
    }

    /// The timeout error without the progress the ensemble did not tell in time.
    fn bare_timeout_error(
        &self,
        queues: &[Queue],
        granted: &[AtomicBool],
        waited: Duration,
    ) -> Error {
        Error::Timeout {
            path: queues[Self::first_waiting(granted)].dir().to_string(),
            waited,
            ahead: 0,
            holder: None,
        }
    }

    /// The timeout error, naming the first path not granted yet.
    async fn timeout_error(
        &self,
        queues: &[Queue],
        nodes: Option<&[String]>,
        granted: &[AtomicBool],
        waited: Duration,
    ) -> Error {
        let i = Self::first_waiting(granted);
        let (ahead, holder) = match nodes.and_then(|n| n.get(i)) {
            Some(node) => queues[i].progress_of(node).await,
            None => (0, None),
        };
        Error::Timeout {
            path: queues[i].dir().to_string(),
            waited,
            ahead,
            holder,
        }
    }

    async fn lease(&self, grants: Vec<Grant>, claim: Claim) -> Result<MultiLease> {
        #[cfg(test)]
        tests::assembly_gate().await;
        // Every grant is bound to the one ZooKeeper session the nodes were created on.
        let session = grants[0].session.clone();
        let leases: Vec<Lease> = grants
            .into_iter()
            .map(|grant| {
                let dir = Arc::from(&grant.node[..grant.node.rfind('/').unwrap_or(0)]);
                Lease::new(dir, grant, Claim::none())
            })
            .collect();
        let lease = MultiLease {
            session,
            leases,
            _claim: claim,
        };
        // The grants came one queue at a time: if the clock lapsed between the first and the
        // last, the first may no longer be ours. Nothing is held then.
        if let Some((path, LeaseState::Lost(reason))) = lease
            .leases
            .iter()
            .map(|l| (l.lock_path().to_string(), l.state()))
            .find(|(_, s)| matches!(s, LeaseState::Lost(_)))
        {
            // Released in the background (the guard's drop): the ensemble may be silent
            // right now, and the caller's timeout must not wait for it.
            drop(lease);
            return Err(Error::LockLost { path, reason });
        }
        Ok(lease)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A test's hold on the moment between the last grant and the assembly of the
    /// multi-lease: armed, the next assembly tells `REACHED` and waits for `OPEN`.
    static GATE_ARMED: AtomicBool = AtomicBool::new(false);
    static REACHED: tokio::sync::Notify = tokio::sync::Notify::const_new();
    static OPEN: tokio::sync::Notify = tokio::sync::Notify::const_new();

    pub(super) async fn assembly_gate() {
        if GATE_ARMED.swap(false, Ordering::AcqRel) {
            REACHED.notify_one();
            OPEN.notified().await;
        }
    }

    /// Issue 21, item 7: a path whose lease is already lost when the multi-lease is
    /// assembled (the clock lapsed after the grants, the ensemble silent) no longer makes
    /// `acquire_timeout` wait for the release inline: it fails at once with `LockLost`, and
    /// the nodes go in the background once the ensemble answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_lost_at_assembly_does_not_stretch_acquire_timeout() {
        use zkfence_testcontainers::Ensemble;
        let t = Duration::from_secs(2);
        let zk = Ensemble::builder()
            .nodes(1)
            .tick_time(Duration::from_millis(200))
            .start()
            .await
            .expect("start an ensemble");
        let proxy = zk.proxy().await.unwrap();
        let options = || crate::SessionOptions::new().session_timeout(t);
        let session = Session::connect(&proxy.connect_string(), options())
            .await
            .unwrap();
        let admin = Session::connect(&zk.connect_string(), options())
            .await
            .unwrap();
        let (a, b) = ("/assembly/a", "/assembly/b");
        let other = admin.lock(b).acquire().await.unwrap();
        let children = |dir: &'static str| {
            let admin = admin.clone();
            async move {
                let _ = admin.client().sync(dir).await;
                admin.client().list_children(dir).await.unwrap_or_default()
            }
        };
        GATE_ARMED.store(true, Ordering::Release);
        let group = session.multi_lock(&[a, b]);
        let acquiring = tokio::spawn(async move {
            let result = group.acquire_timeout(Duration::from_secs(30)).await;
            (result, Instant::now())
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while children(b).await.len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the multi-lock never queued on {b}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        other.release().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), REACHED.notified())
            .await
            .expect("the multi-lock was granted both paths");
        // Silent ensemble, lapsed clock: both grants are lost before the assembly.
        proxy.blackhole();
        let deadline = Instant::now() + 3 * t;
        while session.valid_until().is_some() {
            assert!(Instant::now() < deadline, "the lease clock never lapsed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let opened = Instant::now();
        OPEN.notify_one();
        let (result, returned) = tokio::time::timeout(Duration::from_secs(10), acquiring)
            .await
            .expect("acquire_timeout returned within 10 s")
            .unwrap();
        let took = returned - opened;
        assert!(
            took < CLEANUP_GRACE + Duration::from_millis(200),
            "acquire_timeout returned {took:?} after the assembly began ({result:?})"
        );
        assert!(matches!(result, Err(Error::LockLost { .. })), "{result:?}");
        // The cleanup went on in the background: once the ensemble answers (or the session
        // expires), nothing of ours is left.
        proxy.heal();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(children(a).await.is_empty() && children(b).await.is_empty()) {
            assert!(Instant::now() < deadline, "our nodes outlived the heal");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn normalises_and_rejects_bad_input() {
        assert_eq!(normalise("/a//b/"), "/a/b");
        assert_eq!(normalise("/"), "/");
        assert_eq!(validate(&paths(&["/b", "/a/"])).unwrap(), ["/b", "/a"]);
        let err = |p: &[&str]| match validate(&paths(p)) {
            Err(Error::InvalidPath { reason, .. }) => reason,
            other => panic!("{p:?}: expected InvalidPath, got {other:?}"),
        };
        assert!(err(&[]).contains("at least one"));
        assert!(err(&["/a", "/a//"]).contains("twice"));
        assert!(err(&["/a", "relative"]).contains("start with '/'"));
        let many: Vec<String> = (0..=MAX_MULTI_LOCK_PATHS)
            .map(|i| format!("/r/{i}"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(err(&many).contains("at most"));
        let max: Vec<String> = (0..MAX_MULTI_LOCK_PATHS)
            .map(|i| format!("/r/{i}"))
            .collect();
        assert!(validate(&max).is_ok());
    }
}

#[cfg(test)]
mod bounds {
    #[test]
    fn send_sync() {
        fn send_sync<T: Send + Sync + 'static>() {}
        fn send<T: Send>(_: &T) {}
        send_sync::<super::MultiLock>();
        send_sync::<super::MultiLease>();
        #[allow(unreachable_code, clippy::diverging_sub_expression)]
        fn futures_are_send(lock: &super::MultiLock, lease: super::MultiLease) {
            send(&lock.acquire());
            send(&lock.try_acquire());
            send(&lock.acquire_timeout(std::time::Duration::ZERO));
            send(&lease.lost());
            send(&lease.release());
        }
        let _ = futures_are_send;
    }
}
