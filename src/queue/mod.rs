//! The one mechanism: a fair queue of ephemeral sequential nodes under a lock directory.
//!
//! Every recipe is a view over this queue; they differ in what they enqueue as (a
//! [`Kind`], which names the node and gives the [`Admission`] rule: the head only, every
//! reader with no writer ahead, the first `n`) and in what their guard exposes.
//!
//! # Algorithm
//!
//! 1. **Enqueue** — create `{dir}/{prefix}` as ephemeral-sequential, where the prefix carries
//!    a fresh uuid. The directory is created only when the create says `NoNode` (so the hot
//!    path has one write). If the create's outcome is unknown (connection loss), list the
//!    children and adopt a node carrying our uuid *and* owned by our session; otherwise create
//!    again. A node of another session is never adopted.
//! 2. **Position** — list the children, keep those ending in a sequence, sort them by it
//!    (serial-number order, right across the counter's wrap). The admission rule says whether
//!    we hold, or which one node to wait on.
//! 3. **Wait on one node** — watch that node. One release wakes one waiter: no herd. When
//!    it was the last obstacle in our last listing (we are second in line), our own node is
//!    watched in the same round trip, and on the watched node's deletion we hold without
//!    listing again (sequence numbers only grow, so nothing can have appeared ahead of us) —
//!    unless our own node's watch fired first (events arrive in zxid order): someone deleted
//!    our node, and nothing is held. Deeper in the queue, a deletion sends us back to step 2,
//!    whose listing shows whether our node still exists.
//! 4. **Leave** — delete our node by its full path. A cancelled wait (a dropped future) hands
//!    the delete to a background task; if the create's outcome was unknown, the task finds the
//!    node by uuid first.
//!
//! A grant is issued only while the session's lease clock vouches for the session; if it does
//! not at that moment (the session went quiet while we waited), one round trip confirms our
//! node with the leader first.

mod admission;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::node::{self, Kind, NodeFormat, OwnerInfo};
use crate::session::{Acquiring, Counters, NodeEvent, NodeWatch, QueueListing, Session, Shared};
use crate::telemetry::{self, Recipe, Tag};
use crate::token::FencingToken;

pub(crate) use admission::Admission;
use admission::Place;

/// How long an acquire that failed or timed out waits for its own cleanup before handing it
/// to the background: the error must come back within its deadline plus this, even when the
/// ensemble does not answer (the session's expiry removes the node then).
const CLEANUP_GRACE: Duration = Duration::from_millis(300);

/// How often an enqueue makes the directory again when its create keeps finding none (a
/// container removed under us, or someone deleting it) before it says so.
const MAX_DIRECTORY_RETRIES: u32 = 8;

/// A queue under one directory, and what we enqueue in it as.
#[derive(Clone)]
pub(crate) struct Queue {
    session: Session,
    dir: String,
    kind: Kind,
    /// What the operator metrics call it (an election enqueues as a plain lock).
    recipe: Recipe,
    format: NodeFormat,
    owner: Owner,
    /// Fixed contender uuid, for tests that need a collision; normally a fresh one per join.
    uuid: Option<uuid::Uuid>,
}

/// What our nodes carry as data.
#[derive(Clone, Debug)]
pub(crate) enum Owner {
    /// [`OwnerInfo`] of this process, stamped at each enqueue.
    ThisProcess { id: Option<String> },
    /// A semaphore's permit: [`OwnerInfo`] of this process with the semaphore's limit, which
    /// every participant reads to refuse a different one.
    Permit { id: Option<String>, permits: usize },
    /// Bytes given by the user (e.g. a Kazoo identifier).
    Raw(Vec<u8>),
}

impl Owner {
    fn data(&self) -> Vec<u8> {
        match self {
            Owner::ThisProcess { id } => OwnerInfo::for_this_process(id.as_deref()).encode(),
            Owner::Permit { id, permits } => OwnerInfo {
                permits: Some(*permits),
                ..OwnerInfo::for_this_process(id.as_deref())
            }
            .encode(),
            Owner::Raw(data) => data.clone(),
        }
    }
}

/// Our node, granted.
pub(crate) struct Grant {
    /// Full path of our node.
    pub(crate) node: String,
    pub(crate) sequence: i32,
    pub(crate) czxid: i64,
    /// The lease clock's epoch at the grant.
    pub(crate) epoch: u64,
    /// The watch on our own node that proved it existed at the grant, if the wait set one:
    /// the guard keeps watching with it.
    pub(crate) own_watch: Option<NodeWatch>,
    /// The session bound to the ZooKeeper session the node belongs to.
    pub(crate) session: Session,
    /// The recipe, for the lease's metrics.
    pub(crate) recipe: Recipe,
}

/// What the last listing showed, for timeout errors.
#[derive(Debug, Clone, Default)]
struct Progress {
    ahead: usize,
    holder: Option<String>,
}

/// Our node, just created, and the listing sent right behind its create, if answered.
struct Enqueued {
    created: crate::session::Created,
    /// The create's number among the session's ordered requests.
    number: u64,
    listed: Option<QueueListing>,
}

/// How step 2 reads the queue for one waiter.
struct Listing {
    /// The listing sent behind our create, read once.
    first: Option<QueueListing>,
    /// For the first listing read: the number of our create, which it must come after.
    /// Later ones come after whatever woke us.
    after: Option<u64>,
    /// Our nodes' marker, and whether a second node of ours with it may exist.
    marker: String,
    check_orphans: bool,
    /// Our create's number, when known: the session's listings sent after it show every
    /// node that can be ahead of us.
    created_number: Option<u64>,
}

/// One contender in a queue, as [`Lock::contenders`](crate::Lock::contenders) reports it.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// for (i, c) in session.lock("/locks/backup").contenders().await?.iter().enumerate() {
///     let role = if i == 0 { "holds" } else { "waits" };
///     println!("{role}: token {} by {} (session {:#x})", c.token, c.owner, c.session_id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// Full path of the contender's node.
    pub node: String,
    /// The fencing token it holds or will hold: its node's creation zxid.
    pub token: FencingToken,
    /// The node's sequence number, which orders the queue.
    pub sequence: i32,
    /// The ZooKeeper session that owns the node.
    pub session_id: i64,
    /// Owner metadata from the node's data.
    pub owner: OwnerInfo,
    /// When the node was created, in Unix milliseconds (server clock).
    pub created_ms: i64,
}

/// "ID (host, pid N), token T, session 0x…": how zkfence names a contender to an operator.
impl std::fmt::Display for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} with token {}, session 0x{:x}",
            self.owner, self.token, self.session_id as u64
        )
    }
}

impl Contender {
    /// True for the read side of a read/write lock (ours, Curator's `__READ__` or Kazoo's
    /// `__rlock__` node), which holds together with the other readers ahead of any writer;
    /// false for every exclusive contender (a lock, a writer, a candidate, a permit).
    ///
    /// ```
    /// # use zkfence::{Contender, FencingToken, OwnerInfo};
    /// let reader = Contender {
    ///     node: "/locks/catalog/_c_0f1e-__READ__0000000003".into(),
    ///     token: FencingToken::new(7),
    ///     sequence: 3,
    ///     session_id: 1,
    ///     owner: OwnerInfo::default(),
    ///     created_ms: 0,
    /// };
    /// assert!(reader.is_shared());
    /// ```
    pub fn is_shared(&self) -> bool {
        node::is_shared(self.node.rsplit('/').next().unwrap_or(&self.node))
    }
}

/// Our node between create and grant. If dropped while armed (the acquire was cancelled),
/// it removes the node in the background.
struct Pending {
    shared: Arc<Shared>,
    dir: String,
    marker: String,
    /// Known once the create was answered (or our node found again).
    node: Option<String>,
    /// A create was sent, so a node may exist even if `node` is unknown.
    sent: bool,
    /// A create's outcome was unknown: one of ours may commit late, beside the node we use.
    uncertain: bool,
    armed: bool,
    /// While our node waits, the lease clock's keepalive must be a proof.
    _acquiring: Acquiring,
}

impl Pending {
    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Removes whatever node we may have; waits for that at most [`CLEANUP_GRACE`], then
    /// leaves it to the background.
    async fn cleanup(&mut self) {
        if !std::mem::replace(&mut self.armed, false) {
            return;
        }
        let task = tokio::spawn(cleanup(
            self.shared.clone(),
            self.dir.clone(),
            self.marker.clone(),
            self.node.take(),
            self.sent,
        ));
        if tokio::time::timeout(CLEANUP_GRACE, task).await.is_err() {
            tracing::debug!(dir = %self.dir, "no answer yet while leaving the queue: the delete goes on in the background");
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            let (shared, dir, marker, node, sent) = (
                self.shared.clone(),
                self.dir.clone(),
                self.marker.clone(),
                self.node.take(),
                self.sent,
            );
            crate::session::spawn_detached(cleanup(shared, dir, marker, node, sent));
        }
    }
}

async fn cleanup(
    shared: Arc<Shared>,
    dir: String,
    marker: String,
    node: Option<String>,
    sent: bool,
) {
    let node = match node {
        Some(node) => Some(node),
        // The create may still have happened: requests on one connection are answered in
        // order, so listing after it sees its result.
        None if sent => match find_own(&shared, &dir, &marker).await {
            Ok(Some(created)) => Some(created.path),
            Ok(None) => {
                // Unless the connection broke in between and the create commits late: look
                // once more, later, in the background, so no orphan outlives this.
                let (shared, dir, marker) = (shared.clone(), dir.clone(), marker.clone());
                crate::session::spawn_detached(async move {
                    tokio::time::sleep(shared.session_timeout / 2).await;
                    if let Ok(Some(created)) = find_own(&shared, &dir, &marker).await {
                        tracing::warn!(node = %created.path, "deleting a late-committed node of a cancelled acquire");
                        let _ = shared.delete_until_gone(&created.path).await;
                    }
                });
                None
            }
            Err(_) => None,
        },
        None => None,
    };
    if let Some(node) = node {
        match shared.delete_until_gone(&node).await {
            Ok(()) => tracing::debug!(%node, "left the queue"),
            Err(err) => {
                tracing::warn!(%node, %err, "could not delete our node; it disappears with the session")
            }
        }
    }
}

/// Finds our node after a create whose outcome is unknown: a child carrying our marker and
/// owned by our session.
async fn find_own(
    shared: &Shared,
    dir: &str,
    marker: &str,
) -> Result<Option<crate::session::Created>> {
    // A server behind the leader could miss a create that committed: catch up first (rare
    // path: only after a lost answer).
    shared.sync(dir).await?;
    let Some(children) = shared.list(dir).await? else {
        return Ok(None);
    };
    let my_session = shared.client.session_id().0;
    for name in children.into_iter().filter(|c| c.starts_with(marker)) {
        let Some(sequence) = node::sequence_of(&name) else {
            continue;
        };
        let path = format!("{dir}/{name}");
        if let Some(stat) = shared.stat(&path).await? {
            if stat.ephemeral_owner == my_session {
                return Ok(Some(crate::session::Created {
                    path,
                    sequence,
                    czxid: stat.czxid,
                }));
            }
            tracing::warn!(node = %path, owner = stat.ephemeral_owner, "ignoring a node with our uuid owned by another session");
        }
    }
    Ok(None)
}

impl Queue {
    /// A queue under `dir` that we join as `kind`, with Curator's node names and this
    /// process's owner data.
    pub(crate) fn new(session: Session, dir: &str, kind: Kind) -> Queue {
        Queue {
            session,
            dir: dir.to_string(),
            kind,
            recipe: Recipe::of(kind),
            format: NodeFormat::default(),
            owner: Owner::ThisProcess { id: None },
            uuid: None,
        }
    }

    pub(crate) fn with_format(mut self, format: NodeFormat) -> Queue {
        self.format = format;
        self
    }

    pub(crate) fn with_owner(mut self, owner: Owner) -> Queue {
        self.owner = owner;
        self
    }

    /// Names the recipe in the metrics, for those that enqueue as another kind.
    pub(crate) fn with_recipe(mut self, recipe: Recipe) -> Queue {
        self.recipe = recipe;
        self
    }

    /// The metrics labels of this queue.
    pub(crate) fn tag(&self) -> Tag {
        Tag::new(self.recipe, &self.dir, self.shared().metrics_path_labels)
    }

    pub(crate) fn with_uuid(mut self, uuid: uuid::Uuid) -> Queue {
        self.uuid = Some(uuid);
        self
    }

    pub(crate) fn dir(&self) -> &str {
        &self.dir
    }

    pub(crate) fn format(&self) -> NodeFormat {
        self.format
    }

    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    fn shared(&self) -> Arc<Shared> {
        self.session.shared()
    }

    /// This queue bound to the live ZooKeeper session (waiting until `deadline` for a new
    /// one right after an expiry): a node and the lease it becomes belong to one session.
    pub(crate) async fn bound(&self, deadline: Option<Instant>) -> Result<Queue> {
        Ok(Queue {
            session: self.session.bind(deadline).await?,
            ..self.clone()
        })
    }

    fn admission(&self) -> Admission {
        Admission::of(self.kind)
    }

    fn pending(&self, uuid: &uuid::Uuid) -> Pending {
        let shared = self.shared();
        Pending {
            _acquiring: Acquiring::new(&shared),
            shared,
            dir: self.dir.clone(),
            marker: self.format.marker(uuid),
            node: None,
            sent: false,
            uncertain: false,
            armed: true,
        }
    }

    /// Joins the queue and waits until the admission rule lets us hold.
    ///
    /// Cancel safe: dropping the future removes our node in the background. On an error or
    /// when `deadline` passes, the node is removed before this returns (or, if the ensemble
    /// does not answer within a short grace, in the background).
    pub(crate) async fn join(&self, deadline: Option<Instant>) -> Result<Grant> {
        node::validate_path(&self.dir)?;
        self.bound(deadline).await?.join_bound(deadline).await
    }

    async fn join_bound(&self, deadline: Option<Instant>) -> Result<Grant> {
        let uuid = self.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        let mut pending = self.pending(&uuid);
        let mut progress = Progress::default();
        let started = Instant::now();
        let tag = self.tag();
        telemetry::acquire_started(&tag);
        let span =
            tracing::info_span!("zkfence.acquire", dir = %self.dir, node = tracing::field::Empty);
        let wait = self
            .enqueue_and_wait(&uuid, &mut pending, &mut progress)
            .instrument(span);
        let timed = match deadline {
            None => Ok(wait.await),
            Some(deadline) => tokio::time::timeout_at(deadline, wait).await,
        };
        let result = match timed {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout {
                path: self.dir.clone(),
                waited: started.elapsed(),
                ahead: progress.ahead,
                holder: self.describe(progress.holder.as_deref()).await,
            }),
        };
        telemetry::waited(&tag, started.elapsed(), &result);
        match result {
            Ok(grant) => {
                pending.disarm();
                Ok(grant)
            }
            Err(err) => {
                pending.cleanup().await;
                Err(err)
            }
        }
    }

    /// `name (owner)` of a contender, for error messages; one read, only on the error path,
    /// and bounded so a silent ensemble does not delay the error.
    /// The holder named `name`, read (bounded) for [`Error::Timeout`]; `None` if it could
    /// not be read (gone meanwhile, or no answer).
    async fn describe(&self, name: Option<&str>) -> Option<Box<Contender>> {
        let name = name?;
        let path = format!("{}/{name}", self.dir);
        match tokio::time::timeout(CLEANUP_GRACE, self.shared().data(&path)).await {
            Ok(Ok(Some((data, stat)))) => Some(Box::new(Contender {
                node: path,
                token: FencingToken::from_zxid(stat.czxid),
                sequence: node::sequence_of(name).unwrap_or_default(),
                session_id: stat.ephemeral_owner,
                owner: OwnerInfo::decode(&data),
                created_ms: stat.ctime,
            })),
            _ => None,
        }
    }

    /// Joins without waiting: `Ok(None)` if the admission rule would make us wait.
    pub(crate) async fn try_join(&self) -> Result<Option<Grant>> {
        node::validate_path(&self.dir)?;
        // Not waiting for a new session either: right after an expiry this fails with it.
        self.bound(Some(Instant::now()))
            .await?
            .try_join_bound()
            .await
    }

    async fn try_join_bound(&self) -> Result<Option<Grant>> {
        let started = Instant::now();
        let tag = self.tag();
        telemetry::acquire_started(&tag);
        // A read first: when the lock is taken we answer without writing anything.
        if let Some(children) = self.shared().list(&self.dir).await? {
            if self.admission().blocked_by(&children) {
                telemetry::timed_out(&tag);
                return Ok(None);
            }
        }
        let uuid = self.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        let mut pending = self.pending(&uuid);
        let result = async {
            let enqueued = self.enqueue(&uuid, &mut pending).await?;
            let mut progress = Progress::default();
            let mut listing = self.listing(&enqueued, &pending);
            let (place, ..) = self
                .position(&enqueued.created, &mut listing, &mut progress, false)
                .await?;
            let created = enqueued.created;
            match place {
                Place::Holds => self.grant(created, None).await.map(Some),
                Place::Waits { .. } | Place::WaitsForAnyChange => Ok(None),
            }
        }
        .await;
        telemetry::tried(&tag, started.elapsed(), &result);
        match result {
            Ok(Some(grant)) => {
                pending.disarm();
                Ok(Some(grant))
            }
            other => {
                pending.cleanup().await;
                other
            }
        }
    }

    async fn enqueue_and_wait(
        &self,
        uuid: &uuid::Uuid,
        pending: &mut Pending,
        progress: &mut Progress,
    ) -> Result<Grant> {
        let enqueued = self.enqueue(uuid, pending).await?;
        tracing::Span::current().record("node", enqueued.created.path.as_str());
        let listing = self.listing(&enqueued, pending);
        self.wait(enqueued.created, listing, progress).await
    }

    /// Step 1: the protected create, with the listing of step 2 sent right behind it (and,
    /// when the directory is likely missing, the directory's create in front): one round trip
    /// for all three.
    async fn enqueue(&self, uuid: &uuid::Uuid, pending: &mut Pending) -> Result<Enqueued> {
        let shared = self.shared();
        let prefix = format!("{}/{}", self.dir, self.format.prefix(uuid, self.kind));
        let data = self.owner.data();
        // A semaphore's waiters list with a watch on the children, which is theirs alone.
        let list_behind = !matches!(self.admission(), Admission::Permits(_));
        let mut directory_made = 0;
        loop {
            let in_front = shared.directories.likely_missing(&self.dir);
            let directory = in_front.then(|| shared.create_directory_in_front(&self.dir));
            pending.sent = true;
            let (number, create) = shared.create_queue_node(&prefix, &data);
            let (_, created, listed) = futures::join!(
                async {
                    if let Some(directory) = directory {
                        directory.await;
                    }
                },
                create,
                async {
                    if list_behind {
                        shared.list_queue_after(&self.dir, number).await.ok()
                    } else {
                        None
                    }
                }
            );
            match created {
                Ok(created) => {
                    shared.directories.created_in(&self.dir);
                    pending.node = Some(created.path.clone());
                    tracing::info!(node = %created.path, token = created.czxid, sequence = created.sequence, "enqueued");
                    return Ok(Enqueued {
                        created,
                        number,
                        listed: listed.flatten(),
                    });
                }
                Err(zk::Error::NoNode) => {
                    pending.sent = false;
                    shared.directories.found_missing(&self.dir);
                    // A container directory can be removed between our mkdir and our create
                    // (empty at the leader's check): make it again, a bounded number of times.
                    directory_made += 1;
                    if directory_made > MAX_DIRECTORY_RETRIES {
                        return Err(Error::LockDirectoryDeleted {
                            path: self.dir.clone(),
                        });
                    }
                    if in_front {
                        // The directory's own parent is missing: make the whole path.
                        shared.make_dirs(&self.dir).await?;
                    }
                    // Otherwise the next round sends the directory's create in front.
                }
                Err(e) if crate::session::outcome_unknown(&e) => {
                    pending.uncertain = true;
                    if let Some(created) = find_own(&shared, &self.dir, &pending.marker).await? {
                        tracing::info!(node = %created.path, token = created.czxid, "enqueued (found our node after a lost answer)");
                        shared.directories.created_in(&self.dir);
                        pending.node = Some(created.path.clone());
                        let number = shared.listings.last_sent();
                        return Ok(Enqueued {
                            created,
                            number,
                            listed: None,
                        });
                    }
                    tracing::debug!(dir = %self.dir, "create outcome unknown and no node of ours found: creating again");
                }
                Err(zk::Error::NoChildrenForEphemerals) => {
                    pending.sent = false;
                    return Err(Error::InvalidPath {
                        path: self.dir.clone(),
                        reason: "it is an ephemeral node, which cannot have children",
                    });
                }
                Err(e) => {
                    // A definite error: the server created nothing.
                    pending.sent = false;
                    return Err(Error::zk("create", &prefix, e));
                }
            }
        }
    }

    /// How step 2 reads the queue for the node `enqueued` made.
    fn listing(&self, enqueued: &Enqueued, pending: &Pending) -> Listing {
        Listing {
            first: enqueued.listed.clone(),
            after: Some(enqueued.number),
            marker: pending.marker.clone(),
            // A fixed uuid (tests) may be shared with a node of an earlier join.
            check_orphans: pending.uncertain || self.uuid.is_some(),
            created_number: Some(enqueued.number),
        }
    }

    /// Step 2: where we stand. Returns the place, our index, the queue, and (with
    /// `watch_children`) a watch on the directory's children.
    ///
    /// Every create retry of one join carries the same uuid (the marker), so another child
    /// with our marker owned by our session is a create whose answer was lost and which
    /// committed after we had looked for it: an orphan of ours, which would sit ahead of us
    /// forever. It is deleted here; only a join that lost a create's answer looks for one.
    async fn position(
        &self,
        created: &crate::session::Created,
        listing: &mut Listing,
        progress: &mut Progress,
        watch_children: bool,
    ) -> Result<(
        Place,
        usize,
        QueueListing,
        Option<crate::session::ChildrenWatch>,
    )> {
        let shared = self.shared();
        let name = &created.path[self.dir.len() + 1..];
        loop {
            let (queue, children_watch) = if watch_children {
                match shared.list_watched(&self.dir).await? {
                    Some((children, watch)) => {
                        (Some(Arc::new(node::queue_order(children))), Some(watch))
                    }
                    None => (None, None),
                }
            } else if let Some(first) = listing.first.take() {
                (Some(first), None)
            } else {
                // Right after our create, a listing sent after it; later, one sent after
                // whatever woke us.
                let after = listing
                    .after
                    .take()
                    .unwrap_or_else(|| shared.listings.last_sent());
                (shared.list_queue_after(&self.dir, after).await?, None)
            };
            listing.after = None;
            let Some(queue) = queue else {
                return Err(match shared.session_ended() {
                    Some(err) => err,
                    // An expired session's node is gone, but the directory is not.
                    None => Error::LockDirectoryDeleted {
                        path: self.dir.clone(),
                    },
                });
            };
            let Some(index) = node::index_in_queue(&queue, created.sequence, name) else {
                return Err(self.vanished(&created.path));
            };
            if listing.check_orphans
                && self
                    .delete_own_orphans(&queue, name, &listing.marker)
                    .await?
            {
                continue;
            }
            progress.ahead = index;
            progress.holder = queue.first().map(|(_, n)| n.clone());
            let place = self.admission().place(&queue, index);
            return Ok((place, index, queue, children_watch));
        }
    }

    /// Deletes children carrying our marker, other than `ours`, that our session owns.
    /// Returns true if it deleted any.
    async fn delete_own_orphans(
        &self,
        queue: &[(i32, String)],
        ours: &str,
        marker: &str,
    ) -> Result<bool> {
        let shared = self.shared();
        let mut deleted = false;
        for (_, name) in queue
            .iter()
            .filter(|(_, n)| n != ours && n.starts_with(marker))
        {
            let path = format!("{}/{name}", self.dir);
            let stat = shared.stat(&path).await?;
            if stat.is_some_and(|s| s.ephemeral_owner == shared.client.session_id().0) {
                tracing::warn!(node = %path, "deleting a duplicate node of ours left by a create whose answer was lost");
                shared.delete_until_gone(&path).await?;
                deleted = true;
            }
        }
        Ok(deleted)
    }

    /// Our node is gone: the session ended, or someone deleted it.
    fn vanished(&self, node: &str) -> Error {
        self.shared()
            .session_ended()
            .unwrap_or_else(|| Error::NodeDeleted {
                node: node.to_string(),
            })
    }

    /// Steps 2 and 3 until we hold.
    async fn wait(
        &self,
        created: crate::session::Created,
        mut listing: Listing,
        progress: &mut Progress,
    ) -> Result<Grant> {
        let shared = self.shared();
        let node = created.path.clone();
        let permits = matches!(self.admission(), Admission::Permits(_));
        let tag = self.tag();
        // The waiters gauge counts us while this is set: from the first wait on.
        let mut waiting: Option<telemetry::Waiting> = None;
        // The latest notification that someone ahead left, for the release-to-grant time.
        let mut woke: Option<telemetry::Woke> = None;
        loop {
            let (place, index, queue, children_watch) = self
                .position(&created, &mut listing, progress, permits)
                .await?;
            if !matches!(place, Place::Holds) && waiting.is_none() {
                waiting = Some(telemetry::Waiting::start(&tag));
            }
            let (watched, holds_when_gone) = match place {
                Place::Holds => {
                    let grant = self.grant(created, None).await?;
                    telemetry::release_to_grant(&tag, woke);
                    return Ok(grant);
                }
                Place::WaitsForAnyChange => {
                    tracing::info!(
                        position = index,
                        ahead = index,
                        "queued: waiting for a permit"
                    );
                    Counters::bump(&shared.counters.watches);
                    let watch = children_watch.expect("listed with a watch");
                    watch.changed().await?;
                    woke = Some(telemetry::Woke::now());
                    Counters::bump(&shared.counters.wakeups);
                    continue;
                }
                Place::Waits {
                    watched,
                    holds_when_gone,
                } => (watched, holds_when_gone),
            };
            let predecessor = format!("{}/{}", self.dir, queue[watched].1);
            let predecessor_sequence = queue[watched].0;
            // The listing can be large (every contender's name): do not keep it across the
            // wait, or a deep queue holds one copy per waiter.
            drop(queue);
            tracing::info!(position = index, ahead = index, holder = ?progress.holder, "queued");
            if !holds_when_gone {
                // Deeper in the queue: the deletion of what we watch only sends us back to
                // list, and the listing shows whether our node still exists.
                let Some(mut predecessor_watch) = shared.watch_node(&predecessor).await? else {
                    continue; // already gone: look again
                };
                tracing::info!(%predecessor, "waiting on predecessor");
                let event = predecessor_watch.changed().await?;
                woke = Some(telemetry::Woke::now());
                Counters::bump(&shared.counters.wakeups);
                if event == NodeEvent::Deleted {
                    if let Some(own_watch) = self
                        .all_ahead_gone(&created, predecessor_sequence, &listing)
                        .await?
                    {
                        let grant = self.grant(created, Some(own_watch)).await?;
                        telemetry::release_to_grant(&tag, woke);
                        return Ok(grant);
                    }
                }
                continue;
            }
            // Second in line, we hold on the predecessor's deletion alone, without listing
            // again. Our own node is watched in the same round trip: its deletion is seen
            // before the predecessor's (events arrive in zxid order), so a waiter whose node
            // was deleted is never granted.
            let mut connection = shared.mark_connection();
            let (predecessor_watch, own_watch) = shared.watch_pair(&predecessor, &node).await?;
            let Some(mut own_watch) = own_watch else {
                return Err(self.vanished(&node));
            };
            let Some(mut predecessor_watch) = predecessor_watch else {
                continue; // already gone: look again
            };
            tracing::info!(%predecessor, "waiting on predecessor (second in line)");
            let predecessor_event = tokio::select! {
                biased;
                own = own_watch.changed() => match own? {
                    NodeEvent::Deleted => return Err(self.vanished(&node)),
                    // Someone wrote our node's data: it exists; look again.
                    NodeEvent::Changed => continue,
                },
                event = predecessor_watch.changed() => event?,
            };
            woke = Some(telemetry::Woke::now());
            Counters::bump(&shared.counters.wakeups);
            if connection.changed() {
                // The connection broke since the watches were set: they were set again, and
                // such watches need not fire in zxid order. List again rather than trust the
                // order of the two events.
                continue;
            }
            if predecessor_event == NodeEvent::Deleted {
                // An event of the same transaction (a multi that deleted both nodes) may be
                // in the client's hands but not yet dispatched: let it run once first.
                tokio::task::yield_now().await;
                match own_watch.arrived() {
                    Some(Ok(NodeEvent::Deleted)) => return Err(self.vanished(&node)),
                    Some(Err(err)) => return Err(err),
                    Some(Ok(NodeEvent::Changed)) => continue,
                    // The one we watched was the last thing between us and holding in our
                    // last listing, nothing smaller than our sequence can appear since, and
                    // our node outlived it: we hold without listing again.
                    None => {
                        let grant = self.grant(created, Some(own_watch)).await?;
                        telemetry::release_to_grant(&tag, woke);
                        return Ok(grant);
                    }
                }
            }
            // Deleted deeper in the queue, or changed: look again.
        }
    }

    /// After the node we watched deeper in the queue (at `gone`) was deleted: our node's
    /// watch if we now hold, `None` to list again. A lock's waiter holds once every node
    /// ahead of it is gone and its own exists; the session's latest listing of the queue
    /// names every node that can still be ahead (nothing new can appear ahead of us), and
    /// when they are few they are checked in one round trip instead of listing the whole
    /// queue: in a deep queue drained in order, each handoff reads a few nodes, not all.
    async fn all_ahead_gone(
        &self,
        created: &crate::session::Created,
        gone: i32,
        listing: &Listing,
    ) -> Result<Option<NodeWatch>> {
        if self.admission() != Admission::Exclusive {
            return Ok(None);
        }
        let shared = self.shared();
        let Some(created_number) = listing.created_number else {
            return Ok(None);
        };
        let Some(ahead) = shared.listings.ahead_of(&self.dir, created_number, gone) else {
            return Ok(None);
        };
        let ahead: Vec<String> = ahead
            .into_iter()
            .map(|name| format!("{}/{name}", self.dir))
            .collect();
        match shared.all_gone_and_watch(&ahead, &created.path).await? {
            (true, Some(own_watch)) => {
                tracing::debug!(checked = ahead.len(), "every node ahead is gone");
                Ok(Some(own_watch))
            }
            // Someone is still ahead, or our node is gone: the listing says which.
            _ => Ok(None),
        }
    }

    /// Issues the grant if the lease clock vouches for the session now. Otherwise (the
    /// session went quiet while we waited, so the notification may be stale) it confirms our
    /// node with the leader, and waits until the clock vouches again: after an outage that is
    /// once a proof has covered a touch made after it (about a quarter of the timeout), so
    /// a waiter whose session went quiet is never told it holds on the strength of what it
    /// heard before. Gives up after the session timeout.
    async fn grant(
        &self,
        created: crate::session::Created,
        own_watch: Option<NodeWatch>,
    ) -> Result<Grant> {
        let shared = self.shared();
        let node = created.path;
        let mut clock_changes = shared.clock.clock.subscribe();
        let mut clock = *clock_changes.borrow_and_update();
        if !clock.holds(clock.epoch, Instant::now()) {
            tracing::info!(%node, "lease clock not current at grant: confirming with the ensemble");
            Counters::bump(&shared.counters.grant_confirms);
            let deadline = Instant::now() + shared.session_timeout;
            loop {
                shared.confirm(&node).await?;
                clock = *clock_changes.borrow_and_update();
                if clock.holds(clock.epoch, Instant::now()) {
                    break;
                }
                if let Some(err) = shared.session_ended() {
                    return Err(err);
                }
                // A keepalive's answer will move the clock; then confirm again, so the node
                // is known to exist under the renewed clock.
                if tokio::time::timeout_at(deadline, clock_changes.changed())
                    .await
                    .is_err()
                {
                    return Err(Error::NoAnswer {
                        operation: "confirm grant",
                        path: node,
                        waited: shared.session_timeout,
                    });
                }
            }
        }
        tracing::info!(%node, token = created.czxid, sequence = created.sequence, "granted");
        if self.admission() == Admission::Exclusive {
            shared
                .listings
                .granted_exclusive(&self.dir, created.sequence);
        }
        Ok(Grant {
            node,
            sequence: created.sequence,
            czxid: created.czxid,
            epoch: clock.epoch,
            own_watch,
            session: self.session.clone(),
            recipe: self.recipe,
        })
    }

    /// Lists the contenders, holder first, with their owner data (bounded multi-reads).
    pub(crate) async fn contenders(&self) -> Result<Vec<Contender>> {
        node::validate_path(&self.dir)?;
        list_contenders(&self.shared(), &self.dir, usize::MAX).await
    }
}

/// The first `limit` contenders under `dir`, holder first, with their owner data. A
/// contender that left between the listing and the read is skipped.
pub(crate) async fn list_contenders(
    shared: &Shared,
    dir: &str,
    limit: usize,
) -> Result<Vec<Contender>> {
    let Some(children) = shared.list(dir).await? else {
        return Ok(vec![]);
    };
    let mut queue = node::queue_order(children);
    queue.truncate(limit);
    let paths: Vec<String> = queue
        .iter()
        .map(|(_, name)| format!("{dir}/{name}"))
        .collect();
    let read = shared.data_many(&paths).await?;
    Ok(queue
        .into_iter()
        .zip(paths)
        .zip(read)
        .filter_map(|(((sequence, _), node), read)| {
            let (data, stat) = read?;
            Some(Contender {
                node,
                token: FencingToken::from_zxid(stat.czxid),
                sequence,
                session_id: stat.ephemeral_owner,
                owner: OwnerInfo::decode(&data),
                created_ms: stat.ctime,
            })
        })
        .collect())
}

/// Entry points for a multi-lock, which creates the nodes of several queues in one
/// transaction and then waits in each as a plain lock does.
impl Queue {
    /// The full prefix (directory and name before the sequence) of our node for `uuid`.
    pub(crate) fn node_prefix(&self, uuid: &uuid::Uuid) -> String {
        format!("{}/{}", self.dir, self.format.prefix(uuid, self.kind))
    }

    /// The marker that finds our node for `uuid` again.
    pub(crate) fn marker(&self, uuid: &uuid::Uuid) -> String {
        self.format.marker(uuid)
    }

    /// The data our node carries.
    pub(crate) fn owner_data(&self) -> Vec<u8> {
        self.owner.data()
    }

    /// Our node carrying `marker` under this directory, owned by our session, if any.
    pub(crate) async fn find_own_node(
        &self,
        marker: &str,
    ) -> Result<Option<crate::session::Created>> {
        find_own(&self.shared(), &self.dir, marker).await
    }

    /// True if a newcomer would wait behind `children` (a listing of this directory).
    pub(crate) fn blocked_by(&self, children: &[String]) -> bool {
        self.admission().blocked_by(children)
    }

    /// Steps 2 and 3 for a node someone else created (with `marker`): waits until it holds,
    /// under the same grant rule as [`join`](Self::join). Leaves the node on error: the
    /// caller owns it.
    pub(crate) async fn wait_created(
        &self,
        created: crate::session::Created,
        marker: &str,
    ) -> Result<Grant> {
        let mut progress = Progress::default();
        let listing = Listing {
            first: None,
            // The caller's create was answered: any listing sent from now on shows it.
            after: None,
            marker: marker.to_string(),
            check_orphans: true,
            created_number: None,
        };
        self.wait(created, listing, &mut progress).await
    }

    /// The grant for `created` if `children` (a listing of this directory read after the
    /// create) shows it holds, as [`position`](Self::position) would decide; `None` when it
    /// waits, or when the listing shows anything unusual (our node missing, a duplicate of
    /// ours): the caller then goes the normal way, [`wait_created`](Self::wait_created).
    pub(crate) async fn grant_if_holds_in(
        &self,
        created: &crate::session::Created,
        children: Vec<String>,
        marker: &str,
    ) -> Result<Option<Grant>> {
        let queue = node::queue_order(children);
        let name = &created.path[self.dir.len() + 1..];
        let Some(index) = queue.iter().position(|(_, n)| n == name) else {
            return Ok(None);
        };
        if queue
            .iter()
            .any(|(_, n)| n != name && n.starts_with(marker))
        {
            return Ok(None);
        }
        match self.admission().place(&queue, index) {
            Place::Holds => {
                let created = crate::session::Created {
                    path: created.path.clone(),
                    sequence: created.sequence,
                    czxid: created.czxid,
                };
                self.grant(created, None).await.map(Some)
            }
            Place::Waits { .. } | Place::WaitsForAnyChange => Ok(None),
        }
    }

    /// How many are ahead of `node` and who holds (`name (owner)`), for a timeout error;
    /// bounded by the cleanup grace so a silent ensemble does not delay the error.
    pub(crate) async fn progress_of(&self, node: &str) -> (usize, Option<Box<Contender>>) {
        let listed = tokio::time::timeout(CLEANUP_GRACE, self.shared().list(&self.dir)).await;
        let Ok(Ok(Some(children))) = listed else {
            return (0, None);
        };
        let queue = node::queue_order(children);
        let name = node.rsplit('/').next().unwrap_or(node);
        let ahead = queue
            .iter()
            .position(|(_, n)| n == name)
            .unwrap_or(queue.len());
        let holder = queue.first().map(|(_, n)| n.clone());
        (ahead, self.describe(holder.as_deref()).await)
    }
}
