//! The one mechanism: a fair queue of ephemeral sequential nodes under a lock directory.
//!
//! Every recipe is a view over this queue; they differ in what they enqueue as (a
//! [`Kind`], which names the node and gives the [`Admission`] rule: the head only, every
//! reader with no writer ahead, the first `n`) and in what their guard exposes.
//!
//! # Algorithm
//!
//! 1. **Enqueue** — create `{dir}/{prefix}` as ephemeral-sequential, where the prefix carries
//!    a fresh uuid, and send the listing of step 2 right behind it, before the create is
//!    answered: the session's requests are answered in order, so the listing shows our node,
//!    and both take one round trip. The directory's create goes in front, in the same round
//!    trip, only when the session thinks it likely missing (never seen, or idle longer than
//!    the server has been seen to keep an empty container: `session/listing.rs`); otherwise
//!    it is made only when our create says `NoNode`, so a hot lock writes one node per cycle.
//!    If the create's outcome is unknown (connection loss), list the children and adopt a
//!    node carrying our uuid *and* owned by our session; otherwise create again. A node of
//!    another session is never adopted. (`enqueue.rs`)
//! 2. **Position** — keep the children ending in a sequence, sorted by it (serial-number
//!    order, right across the counter's wrap). The admission rule says whether we hold, or
//!    which one node to wait on. Waiters of one session in one directory share listings: one
//!    sent after each one's create serves them all.
//! 3. **Wait on one node** — watch that node. One release wakes one waiter: no herd. When
//!    it was the last obstacle in our last listing (we are second in line), our own node is
//!    watched in the same round trip, and on the watched node's deletion we hold without
//!    listing again (sequence numbers only grow, so nothing can have appeared ahead of us) —
//!    unless our own node's watch fired first (events arrive in zxid order): someone deleted
//!    our node, and nothing is held. Deeper in the queue, a deletion sends us back to step 2,
//!    whose listing shows whether our node still exists — unless the session knows every node
//!    that can still be ahead (its latest listing, above the last node it saw hold) and they
//!    are few: then one round trip reads them and our own node, and if they are all gone and
//!    ours is there, we hold.
//! 4. **Leave** — delete our node by its full path. A cancelled wait (a dropped future) hands
//!    the delete to a background task; if the create's outcome was unknown, the task finds the
//!    node by uuid first.
//!
//! A grant is issued only while the session's lease clock vouches for the session; if it does
//! not at that moment (the session went quiet while we waited), one round trip confirms our
//! node with the leader first.

mod admission;
mod contender;
mod enqueue;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, LockKind, Result};
use crate::node::{self, Kind, NodeFormat};
use crate::session::{Counters, Created, NodeEvent, NodeWatch, QueueListing, Session, Shared};
use crate::telemetry::{self, Recipe, Tag};

pub(crate) use admission::Admission;
use admission::Place;
pub use contender::Contender;
pub(crate) use contender::{contenders_among, list_contenders_now};
pub(crate) use enqueue::{find_own, Owner};
use enqueue::{Enqueued, Pending};

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
    /// Shared with the session's listings and our nodes' cleanup: cloned on every acquire.
    dir: Arc<str>,
    kind: Kind,
    /// What the operator metrics call it (an election enqueues as a plain lock).
    recipe: Recipe,
    format: NodeFormat,
    owner: Owner,
    /// Fixed contender uuid, for tests that need a collision; normally a fresh one per join.
    uuid: Option<uuid::Uuid>,
    /// Set once the directory's path was checked.
    dir_valid: std::sync::OnceLock<()>,
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

/// What the last listing showed, for timeout errors. Not the holder's name: every waiter
/// would keep a copy of it for as long as it waits, and a timeout reads who holds anyway.
#[derive(Debug, Clone, Default)]
struct Progress {
    ahead: usize,
}

/// How step 2 reads the queue for one waiter.
struct Listing {
    /// The listing sent behind our create, read once.
    first: Option<QueueListing>,
    /// For the first listing read: the number of our create, which it must come after.
    /// Later ones come after whatever woke us.
    after: Option<u64>,
    /// Our nodes' marker, when a second node of ours with it may exist.
    orphans_of: Option<String>,
    /// Our create's number, when known: the session's listings sent after it show every
    /// node that can be ahead of us.
    created_number: Option<u64>,
}

impl Queue {
    /// A queue under `dir` that we join as `kind`, with Curator's node names and this
    /// process's owner data.
    pub(crate) fn new(session: Session, dir: &str, kind: Kind) -> Queue {
        Queue {
            session,
            dir: Arc::from(dir),
            kind,
            recipe: Recipe::of(kind),
            format: NodeFormat::default(),
            owner: Owner::ThisProcess {
                id: None,
                revocable: false,
            },
            uuid: None,
            dir_valid: std::sync::OnceLock::new(),
        }
    }

    /// Checks the directory's path once: a lock's path does not change between acquires.
    fn validate_dir(&self) -> Result<()> {
        if self.dir_valid.get().is_none() {
            node::validate_path(&self.dir)?;
            let _ = self.dir_valid.set(());
        }
        Ok(())
    }

    pub(crate) fn with_format(mut self, format: NodeFormat) -> Queue {
        self.format = format;
        self
    }

    pub(crate) fn with_owner(mut self, owner: Owner) -> Queue {
        self.owner = owner;
        self
    }

    /// Says in our owner data that we take revocation requests (raw data is left as given).
    pub(crate) fn mark_revocable(mut self) -> Queue {
        if let Owner::ThisProcess { revocable, .. } = &mut self.owner {
            *revocable = true;
        }
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

    /// The directory, shared (a lease keeps it).
    pub(crate) fn shared_dir(&self) -> Arc<str> {
        self.dir.clone()
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

    /// Joins the queue and waits until the admission rule lets us hold.
    ///
    /// Cancel safe: dropping the future removes our node in the background. On an error or
    /// when `deadline` passes, the node is removed before this returns (or, if the ensemble
    /// does not answer within a short grace, in the background).
    ///
    /// An async block, not an async fn (here and in `join_bound`): an async fn keeps its
    /// arguments twice in its state, and every waiter carries it.
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn join(
        &self,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Grant>> + Send + '_ {
        async move {
            self.validate_dir()?;
            // Bound in a statement of its own: a temporary of `?` kept to the end of an
            // expression would sit in every waiter's state beside the queue itself.
            let bound = self.bound(deadline).await?;
            bound.join_bound(deadline).await
        }
    }

    #[allow(clippy::manual_async_fn)]
    fn join_bound(
        &self,
        deadline: Option<Instant>,
    ) -> impl std::future::Future<Output = Result<Grant>> + Send + '_ {
        async move {
            let mut pending = self.pending(&self.uuid.unwrap_or_else(uuid::Uuid::new_v4));
            let mut progress = Progress::default();
            let started = Instant::now();
            let tag = self.tag();
            telemetry::acquire_started(&tag);
            let span = tracing::info_span!(
                "zkfence.acquire",
                dir = %self.dir,
                node = tracing::field::Empty
            );
            let wait = self
                .enqueue_and_wait(&mut pending, &mut progress)
                .instrument(span);
            // The wait's answer is matched where it arrives, never bound: a binding's room
            // is reserved beside the wait for as long as the waiter waits.
            let failure = match deadline {
                None => match wait.await {
                    Ok(grant) => return Self::granted(grant, &mut pending, &tag, started),
                    Err(err) => Some(err),
                },
                // Boxed: a timer is 96 bytes, and most waiters have no deadline.
                Some(deadline) => match Box::pin(tokio::time::timeout_at(deadline, wait)).await {
                    Ok(Ok(grant)) => return Self::granted(grant, &mut pending, &tag, started),
                    Ok(Err(err)) => Some(err),
                    Err(_) => None,
                },
            };
            // Boxed, and handed what it needs by value: the rare steps of a failed wait,
            // kept in this future, would sit beside the wait in every waiter's state for as
            // long as it waits.
            Box::pin(self.give_up(failure, pending, progress, tag, started)).await
        }
    }

    /// A join that holds: our node is the lease's now.
    fn granted(grant: Grant, pending: &mut Pending, tag: &Tag, started: Instant) -> Result<Grant> {
        let granted = Ok(grant);
        telemetry::waited(tag, started, &granted);
        pending.disarm();
        granted
    }

    /// A join that failed with `failure`, or whose deadline passed (`None`): the error
    /// (a timeout's error names who holds and how many were ahead), and our node cleaned up.
    async fn give_up(
        &self,
        failure: Option<Error>,
        mut pending: Pending,
        progress: Progress,
        tag: Tag,
        started: Instant,
    ) -> Result<Grant> {
        let err = match failure {
            Some(err) => err,
            None => {
                let waited = started.elapsed();
                let (ahead, holder) = self.at_timeout(&pending).await;
                Error::Timeout {
                    path: self.dir.to_string(),
                    waited,
                    // The last look's count if the queue could not be read now.
                    ahead: ahead.unwrap_or(progress.ahead),
                    holder,
                }
            }
        };
        let result = Err(err);
        telemetry::waited(&tag, started, &result);
        pending.cleanup().await;
        result
    }

    /// Joins without waiting: `Ok(None)` if the admission rule would make us wait.
    pub(crate) async fn try_join(&self) -> Result<Option<Grant>> {
        self.validate_dir()?;
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
        // A read first: when the lock is taken we answer without writing anything. But our
        // server may be behind the leader (a follower cut off from it answers reads with
        // what it last heard) and show a lock released before this call as still taken:
        // "taken" is said only after a `sync` (a round trip to the leader, no transaction)
        // and a second read. A lock that looks free needs neither: the create and the
        // listing behind it decide.
        let shared = self.shared();
        if let Some(children) = shared.list(&self.dir).await? {
            if self.admission().blocked_by(&children) {
                // Taken, or by a semaphore: that is said, not "taken".
                let listed = node::queue_order(children);
                if let Some(conflict) = self.kind_conflict(&listed).await? {
                    return Err(conflict);
                }
                shared.sync(&self.dir).await?;
                let still = shared.list(&self.dir).await?;
                if still.is_some_and(|children| self.admission().blocked_by(&children)) {
                    telemetry::timed_out(&tag);
                    return Ok(None);
                }
            }
        }
        let uuid = self.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        let mut pending = self.pending(&uuid);
        let result = async {
            let enqueued = self.enqueue(&uuid, &mut pending).await?;
            let mut progress = Progress::default();
            let mut listing = self.listing(&enqueued, &pending);
            let created = pending.created();
            let (place, ..) = self
                .position(created, &mut listing, &mut progress, false)
                .await?;
            match place {
                Place::Holds => self.grant(created, None).await.map(Some),
                Place::Waits { .. } | Place::WaitsForAnyChange => Ok(None),
            }
        }
        .await;
        telemetry::tried(&tag, started, &result);
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

    /// Steps 1 to 3.
    ///
    /// An async block, not an async fn: an async fn keeps its arguments twice in its state,
    /// and every waiter carries it.
    #[allow(clippy::manual_async_fn)]
    fn enqueue_and_wait<'a>(
        &'a self,
        pending: &'a mut Pending,
        progress: &'a mut Progress,
    ) -> impl std::future::Future<Output = Result<Grant>> + Send + 'a {
        async move {
            // Boxed here and below: a waiter's future is as large as its largest step, and it
            // waits a long time in the small ones (10,000 waiters in one process).
            // The block ends before the wait is awaited, so what it names is not kept beside
            // the wait's own copies for as long as the waiter waits.
            {
                let uuid = pending.uuid;
                let enqueued = Box::pin(self.enqueue(&uuid, pending)).await?;
                let listing = self.listing(&enqueued, pending);
                // Borrowed from `pending` for as long as we wait: one copy of our node's path.
                let created = pending.created();
                tracing::Span::current().record("node", created.path.as_str());
                self.wait(created, listing, progress)
            }
            .await
        }
    }

    /// How step 2 reads the queue for the node `enqueued` made.
    fn listing(&self, enqueued: &Enqueued, pending: &Pending) -> Listing {
        Listing {
            first: enqueued.listed.clone(),
            after: Some(enqueued.number),
            // A fixed uuid (tests) may be shared with a node of an earlier join.
            orphans_of: (pending.uncertain || self.uuid.is_some()).then(|| pending.marker()),
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
        created: &Created,
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
                        path: self.dir.to_string(),
                    },
                });
            };
            if let Some(conflict) = Box::pin(self.kind_conflict(&queue)).await? {
                return Err(conflict);
            }
            let Some(index) = node::index_in_queue(&queue, created.sequence, name) else {
                return Err(self.vanished(&created.path));
            };
            if let Some(marker) = &listing.orphans_of {
                if self.delete_own_orphans(&queue, name, marker).await? {
                    continue;
                }
            }
            progress.ahead = index;
            let place = self.admission().place(&queue, index);
            return Ok((place, index, queue, children_watch));
        }
    }

    /// A semaphore on our directory, as [`Error::KindConflict`], if the listing `queue`
    /// shows its directories (only then: one read of both, for a holder or waiter below).
    ///
    /// Checked on every listing after our create: of a lock and a semaphore racing, each
    /// creates its node before it lists, so the later listing shows the other (a semaphore
    /// reads our directory after its node is in `locks/`, and keeps a node below until its
    /// lease ends).
    async fn kind_conflict(&self, queue: &node::Ordered) -> Result<Option<Error>> {
        let ours = self.recipe.lock_kind();
        if ours == LockKind::Semaphore || !queue.semaphore_below {
            return Ok(None);
        }
        let below = [
            format!("{}/locks", self.dir),
            format!("{}/leases", self.dir),
        ];
        let listed = self.shared().list_many(&below).await?;
        for (dir, children) in below.iter().zip(listed) {
            if let Some(name) = children
                .into_iter()
                .flatten()
                .find(|name| node::sequence_of(name).is_some())
            {
                let node = format!("{dir}/{name}");
                tracing::warn!(path = %self.dir, %ours, %node, "a semaphore uses this path: refused");
                return Ok(Some(Error::KindConflict {
                    path: self.dir.to_string(),
                    ours,
                    theirs: LockKind::Semaphore,
                    node,
                }));
            }
        }
        Ok(None)
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
    ///
    /// An async block, not an async fn: an async fn moves its arguments into locals of its
    /// state beside the room they arrived in, and every waiter carries that state.
    #[allow(clippy::manual_async_fn)]
    fn wait<'a>(
        &'a self,
        created: &'a Created,
        mut listing: Listing,
        progress: &'a mut Progress,
    ) -> impl std::future::Future<Output = Result<Grant>> + Send + 'a {
        async move {
            let shared = self.shared();
            let permits = matches!(self.admission(), Admission::Permits(_));
            let tag = self.tag();
            // The waiters gauge counts us while this is set: from the first wait on.
            let mut waiting: Option<telemetry::Waiting> = None;
            // The latest notification that someone ahead left, for the release-to-grant time.
            let mut woke: Option<telemetry::Woke> = None;
            loop {
                // One look, in a block: a local's room is kept from its statement to the end
                // of its block, across every await in between, and the wait below needs only
                // the predecessor. The listing can be large (every contender's name): it ends
                // with the block, or a deep queue would hold one copy per waiter.
                let (predecessor, predecessor_sequence, holds_when_gone) = {
                    let (place, index, queue, children_watch) =
                        Box::pin(self.position(created, &mut listing, progress, permits)).await?;
                    if !matches!(place, Place::Holds) && waiting.is_none() {
                        waiting = Some(telemetry::Waiting::start(&tag));
                    }
                    let (watched, holds_when_gone) = match place {
                        Place::Holds => {
                            let grant = Box::pin(self.grant(created, None)).await?;
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
                            // Boxed: the largest step of this future, which every waiter carries.
                            Box::pin(watch.changed()).await?;
                            woke = Some(telemetry::Woke::now());
                            Counters::bump(&shared.counters.wakeups);
                            continue;
                        }
                        Place::Waits {
                            watched,
                            holds_when_gone,
                        } => (watched, holds_when_gone),
                    };
                    let holder = queue.first().map(|(_, n)| n.as_str());
                    tracing::info!(position = index, ahead = index, holder, "queued");
                    (
                        format!("{}/{}", self.dir, queue[watched].1),
                        queue[watched].0,
                        holds_when_gone,
                    )
                };
                if !holds_when_gone {
                    // Deeper in the queue: the deletion of what we watch only sends us back to
                    // list, and the listing shows whether our node still exists.
                    let Some(mut predecessor_watch) =
                        Box::pin(shared.watch_node(&predecessor)).await?
                    else {
                        continue; // already gone: look again
                    };
                    tracing::info!(%predecessor, "waiting on predecessor");
                    // The client library keeps its own copy of the path while the watch is
                    // set: ours is not kept as well for as long as we wait.
                    drop(predecessor);
                    let event = predecessor_watch.changed().await?;
                    woke = Some(telemetry::Woke::now());
                    Counters::bump(&shared.counters.wakeups);
                    if event == NodeEvent::Deleted
                        && Box::pin(self.all_ahead_gone(created, predecessor_sequence, &listing))
                            .await?
                    {
                        let grant = Box::pin(self.grant(created, None)).await?;
                        telemetry::release_to_grant(&tag, woke);
                        return Ok(grant);
                    }
                    continue;
                }
                // Second in line, we hold on the predecessor's deletion alone, without listing
                // again. Our own node is watched in the same round trip: its deletion is seen
                // before the predecessor's (events arrive in zxid order), so a waiter whose node
                // was deleted is never granted.
                let mut connection = shared.mark_connection();
                // Unwrapped in the match, not bound first and unwrapped after: the bound pair
                // would sit beside the unwrapped one in every waiter's state.
                let (mut predecessor_watch, mut own_watch) =
                    match Box::pin(shared.watch_pair(&predecessor, &created.path)).await? {
                        (_, None) => return Err(self.vanished(&created.path)),
                        (None, Some(_)) => continue, // already gone: look again
                        (Some(predecessor_watch), Some(own_watch)) => {
                            (predecessor_watch, own_watch)
                        }
                    };
                tracing::info!(%predecessor, "waiting on predecessor (second in line)");
                drop(predecessor);
                let predecessor_event = tokio::select! {
                    biased;
                    own = own_watch.changed() => match own? {
                        NodeEvent::Deleted => return Err(self.vanished(&created.path)),
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
                    // The grant is awaited after the match, not in its arm: the match's
                    // scrutinee (72 bytes) lives to the match's end, and would sit in every
                    // waiter's state.
                    match own_watch.arrived() {
                        Some(Ok(NodeEvent::Deleted)) => return Err(self.vanished(&created.path)),
                        Some(Err(err)) => return Err(err),
                        Some(Ok(NodeEvent::Changed)) => continue,
                        None => {}
                    }
                    // The one we watched was the last thing between us and holding in our
                    // last listing, nothing smaller than our sequence can appear since, and
                    // our node outlived it: we hold without listing again.
                    let grant = Box::pin(self.grant(created, Some(own_watch))).await?;
                    telemetry::release_to_grant(&tag, woke);
                    return Ok(grant);
                }
                // Deleted deeper in the queue, or changed: look again.
            }
        }
    }

    /// After the node we watched deeper in the queue (at `gone`) was deleted: true if we
    /// now hold, false to list again. A lock's waiter holds once every node ahead of it is
    /// gone and its own exists; the session's latest listing of the queue names every node
    /// that can still be ahead (nothing new can appear ahead of us), and when they are few
    /// they are read in one request instead of listing the whole queue: in a deep queue
    /// drained in order, each handoff reads a few nodes, not all.
    async fn all_ahead_gone(
        &self,
        created: &Created,
        gone: i32,
        listing: &Listing,
    ) -> Result<bool> {
        if self.admission() != Admission::Exclusive {
            return Ok(false);
        }
        let shared = self.shared();
        let Some(created_number) = listing.created_number else {
            return Ok(false);
        };
        let Some(ahead) = shared.listings.ahead_of(&self.dir, created_number, gone) else {
            return Ok(false);
        };
        let ahead: Vec<String> = ahead
            .into_iter()
            .map(|name| format!("{}/{name}", self.dir))
            .collect();
        // Someone still ahead, or our node gone: the listing says which.
        let holds = shared
            .all_gone_and_own_exists(&ahead, &created.path)
            .await?;
        if holds {
            tracing::debug!(checked = ahead.len(), "every node ahead is gone");
        }
        Ok(holds)
    }

    /// Issues the grant if the lease clock vouches for the session now. Otherwise (the
    /// session went quiet while we waited, so the notification may be stale) it confirms our
    /// node with the leader, and waits until the clock vouches again: after an outage that is
    /// once a proof has covered a touch made after it (about a quarter of the timeout), so
    /// a waiter whose session went quiet is never told it holds on the strength of what it
    /// heard before. Gives up after the session timeout.
    async fn grant(&self, created: &Created, own_watch: Option<NodeWatch>) -> Result<Grant> {
        let shared = self.shared();
        let node = created.path.clone();
        let mut clock_changes = shared.clock.clock.subscribe();
        // The time before the clock: a renewal this reading misses then either vouches past
        // it or wakes us (renewals of a clock that vouches are silent).
        let now = shared.clock.instant();
        let mut clock = *clock_changes.borrow_and_update();
        if !clock.holds(clock.epoch, now) {
            tracing::info!(%node, "lease clock not current at grant: confirming with the ensemble");
            Counters::bump(&shared.counters.grant_confirms);
            let deadline = Instant::now() + shared.session_timeout();
            loop {
                shared.confirm(&node).await?;
                let now = shared.clock.instant();
                clock = *clock_changes.borrow_and_update();
                if clock.holds(clock.epoch, now) {
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
                        waited: shared.session_timeout(),
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
}

/// Entry points for a multi-lock, which creates the nodes of several queues in one
/// transaction and then waits in each as a plain lock does.
impl Queue {
    /// The full prefix (directory and name before the sequence) of our node for `uuid`.
    pub(crate) fn node_prefix(&self, uuid: &uuid::Uuid) -> String {
        self.format.prefix_in(&self.dir, uuid, self.kind)
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
    pub(crate) async fn find_own_node(&self, marker: &str) -> Result<Option<Created>> {
        find_own(&self.shared(), &self.dir, marker).await
    }

    /// True if a newcomer would wait behind `children` (a listing of this directory).
    pub(crate) fn blocked_by(&self, children: &[String]) -> bool {
        self.admission().blocked_by(children)
    }

    /// Steps 2 and 3 for a node someone else created (with `marker`): waits until it holds,
    /// under the same grant rule as [`join`](Self::join). Leaves the node on error: the
    /// caller owns it.
    pub(crate) async fn wait_created(&self, created: Created, marker: &str) -> Result<Grant> {
        let mut progress = Progress::default();
        let listing = Listing {
            first: None,
            // The caller's create was answered: any listing sent from now on shows it.
            after: None,
            orphans_of: Some(marker.to_string()),
            created_number: None,
        };
        self.wait(&created, listing, &mut progress).await
    }

    /// The grant for `created` if `children` (a listing of this directory read after the
    /// create) shows it holds, as [`position`](Self::position) would decide; `None` when it
    /// waits, or when the listing shows anything unusual (our node missing, a duplicate of
    /// ours): the caller then goes the normal way, [`wait_created`](Self::wait_created).
    pub(crate) async fn grant_if_holds_in(
        &self,
        created: &Created,
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
            Place::Holds => self.grant(created, None).await.map(Some),
            Place::Waits { .. } | Place::WaitsForAnyChange => Ok(None),
        }
    }
}
