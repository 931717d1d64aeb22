//! The one mechanism: a fair queue of ephemeral sequential nodes under a lock directory.
//!
//! Every recipe is a view over this queue; they differ in who may hold ([`Admission`]: the
//! head only, or every reader with no writer ahead) and in what their guard exposes.
//!
//! # Algorithm
//!
//! 1. **Enqueue** — create `{dir}/{prefix}` as ephemeral-sequential, where the prefix carries
//!    a fresh uuid. The directory is created only when the create says `NoNode` (so the hot
//!    path has one write). If the create's outcome is unknown (connection loss), list the
//!    children and adopt a node carrying our uuid *and* owned by our session; otherwise create
//!    again. A node of another session is never adopted.
//! 2. **Position** — list the children, keep those ending in a sequence, sort by it. Our index
//!    0 means we hold (a reader: no exclusive contender ahead).
//! 3. **Wait on one node** — watch our immediate predecessor (a reader: the last writer
//!    ahead). One release wakes one waiter: no
//!    herd. When it is deleted and it was the last obstacle in our last listing, we hold
//!    without listing again (sequence numbers only grow, so nothing can have appeared ahead
//!    of us); otherwise list again.
//! 4. **Leave** — delete our node by its full path. A cancelled wait (a dropped future) hands
//!    the delete to a background task; if the create's outcome was unknown, the task finds the
//!    node by uuid first.
//!
//! A grant is issued only while the session's lease clock vouches for the session; if it does
//! not at that moment (the session went quiet while we waited), one round trip confirms our
//! node first.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::node::{self, NodeFormat, OwnerInfo};
use crate::session::{Counters, Session, Shared};

/// A queue under one directory.
#[derive(Clone)]
pub(crate) struct Queue {
    pub(crate) session: Session,
    pub(crate) dir: String,
    pub(crate) format: NodeFormat,
    pub(crate) owner: Owner,
    /// What our nodes say we want (shapes the node name only; see [`Admission`]).
    pub(crate) role: node::Role,
    /// Fixed contender uuid, for tests that need a collision; normally a fresh one per join.
    pub(crate) uuid: Option<uuid::Uuid>,
}

/// What our nodes carry as data.
#[derive(Clone, Debug)]
pub(crate) enum Owner {
    /// [`OwnerInfo`] of this process, stamped at each enqueue.
    ThisProcess { id: Option<String> },
    /// Bytes given by the user (e.g. a Kazoo identifier).
    Raw(Vec<u8>),
}

impl Owner {
    fn data(&self) -> Vec<u8> {
        match self {
            Owner::ThisProcess { id } => OwnerInfo::for_this_process(id.as_deref()).encode(),
            Owner::Raw(data) => data.clone(),
        }
    }
}

/// Our node, granted.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    /// Full path of our node.
    pub(crate) node: String,
    pub(crate) sequence: i64,
    pub(crate) czxid: i64,
    /// The lease clock's epoch at the grant.
    pub(crate) epoch: u64,
}

/// What the last listing showed, for timeout errors and progress reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    pub(crate) ahead: usize,
    pub(crate) holder: Option<String>,
}

/// Who may hold: the one parameter in which recipes differ.
///
/// (`Permits(n)` cannot watch one node: a waiter must wake when *any* of the `n` holders
/// leaves. It watches the directory's children instead, which would wake every waiter on
/// every change, so it is only used with waiters serialised by a mutex: see
/// [`Semaphore`](crate::Semaphore).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Only the head holds: a lock, a write lock, an election. Wait on the immediate
    /// predecessor.
    Exclusive,
    /// Hold while no exclusive contender is ahead: a read lock. Wait on the last exclusive
    /// contender ahead.
    Shared,
    /// The first `n` hold: a semaphore's leases. Wait for any change of the directory.
    Permits(usize),
}

impl Admission {
    /// Where we stand in `queue` (sorted) at `index`: hold, or wait on one contender.
    fn place(self, queue: &[(i64, String)], index: usize) -> Place {
        match self {
            Admission::Exclusive if index == 0 => Place::Holds,
            Admission::Exclusive => Place::Waits {
                watched: index - 1,
                // Our predecessor was the head: its deletion makes us the head, since nothing
                // smaller than our sequence can appear.
                holds_when_gone: index == 1,
            },
            Admission::Permits(n) if index < n => Place::Holds,
            Admission::Permits(_) => Place::WaitsForChange,
            Admission::Shared => {
                match queue[..index]
                    .iter()
                    .rposition(|(_, n)| !node::is_shared(n))
                {
                    None => Place::Holds,
                    Some(watched) => Place::Waits {
                        watched,
                        // Only readers ahead of the writer we watch: when it goes, we hold.
                        holds_when_gone: queue[..watched].iter().all(|(_, n)| node::is_shared(n)),
                    },
                }
            }
        }
    }

    /// True if the contenders listed (before we enqueue) would make us wait.
    fn blocked_by(self, names: &[String]) -> bool {
        let mut contenders = names.iter().filter(|c| node::sequence_of(c).is_some());
        match self {
            Admission::Exclusive => contenders.next().is_some(),
            Admission::Shared => contenders.any(|c| !node::is_shared(c)),
            Admission::Permits(n) => contenders.count() >= n,
        }
    }
}

enum Place {
    Holds,
    WaitsForChange,
    Waits {
        watched: usize,
        holds_when_gone: bool,
    },
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
    /// The node's sequence number: the fencing token it holds or will hold.
    pub token: crate::FencingToken,
    /// The ZooKeeper session that owns the node.
    pub session_id: i64,
    /// Owner metadata from the node's data.
    pub owner: OwnerInfo,
    /// When the node was created, in Unix milliseconds (server clock).
    pub created_ms: i64,
    /// The node's czxid.
    pub czxid: i64,
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
    armed: bool,
}

impl Pending {
    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Removes whatever node we may have, and waits until that is done.
    async fn cleanup(&mut self) {
        if !std::mem::replace(&mut self.armed, false) {
            return;
        }
        cleanup(
            self.shared.clone(),
            self.dir.clone(),
            self.marker.clone(),
            self.node.take(),
            self.sent,
        )
        .await;
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
            Ok(Some((node, _, _))) => Some(node),
            Ok(None) => {
                // Unless the connection broke in between and the create commits late: look
                // once more, later, in the background, so no orphan outlives this.
                let (shared, dir, marker) = (shared.clone(), dir.clone(), marker.clone());
                crate::session::spawn_detached(async move {
                    tokio::time::sleep(shared.session_timeout / 2).await;
                    if let Ok(Some((node, _, _))) = find_own(&shared, &dir, &marker).await {
                        tracing::warn!(%node, "deleting a late-committed node of a cancelled acquire");
                        let _ = shared.delete_until_gone(&node).await;
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
/// owned by our session. Returns `(path, sequence, czxid)`.
async fn find_own(shared: &Shared, dir: &str, marker: &str) -> Result<Option<(String, i64, i64)>> {
    let children = match retry_read(shared, "list", dir, || shared.client.list_children(dir)).await
    {
        Ok(children) => children,
        Err(Error::ZooKeeper {
            source: zk::Error::NoNode,
            ..
        }) => return Ok(None),
        Err(err) => return Err(err),
    };
    let my_session = shared.client.session_id().0;
    for name in children.into_iter().filter(|c| c.starts_with(marker)) {
        let Some(sequence) = node::sequence_of(&name) else {
            continue;
        };
        let path = format!("{dir}/{name}");
        let stat = retry_read(shared, "stat", &path, || shared.client.check_stat(&path)).await?;
        if let Some(stat) = stat {
            if stat.ephemeral_owner == my_session {
                return Ok(Some((path, sequence, stat.czxid)));
            }
            tracing::warn!(node = %path, owner = stat.ephemeral_owner, "ignoring a node with our uuid owned by another session");
        }
    }
    Ok(None)
}

/// Retries an idempotent read through connection loss.
pub(crate) async fn retry_read<T, F, Fut>(
    shared: &Shared,
    operation: &'static str,
    path: &str,
    f: F,
) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, zk::Error>>,
{
    loop {
        let sent = Instant::now();
        match f().await {
            Ok(v) => {
                shared.renewed(sent);
                return Ok(v);
            }
            Err(zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(Error::zk(operation, path, e)),
        }
    }
}

impl Queue {
    pub(crate) fn new(session: Session, dir: &str, format: NodeFormat, id: Option<&str>) -> Queue {
        Queue {
            session,
            dir: dir.to_string(),
            format,
            owner: Owner::ThisProcess {
                id: id.map(str::to_string),
            },
            role: node::Role::Lock,
            uuid: None,
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        self.session.shared()
    }

    /// Joins the queue and waits until `admission` lets us hold.
    ///
    /// Cancel safe: dropping the future removes our node in the background. On an error or
    /// when `deadline` passes, the node is removed before this returns.
    pub(crate) async fn join(
        &self,
        admission: Admission,
        deadline: Option<Instant>,
    ) -> Result<Grant> {
        node::validate_path(&self.dir)?;
        let uuid = self.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        let shared = self.shared().clone();
        let mut pending = Pending {
            shared,
            dir: self.dir.clone(),
            marker: self.format.marker(&uuid),
            node: None,
            sent: false,
            armed: true,
        };
        let mut progress = Progress::default();
        let started = Instant::now();
        let span =
            tracing::info_span!("zkfence.acquire", dir = %self.dir, node = tracing::field::Empty);
        let wait = self
            .enqueue_and_wait(&uuid, admission, &mut pending, &mut progress)
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

    /// `name (owner)` of a contender, for error messages; one read, only on the error path.
    async fn describe(&self, name: Option<&str>) -> Option<String> {
        let name = name?;
        let path = format!("{}/{name}", self.dir);
        match tokio::time::timeout(Duration::from_secs(1), self.shared().client.get_data(&path))
            .await
        {
            Ok(Ok((data, _))) => Some(format!("{name} ({})", OwnerInfo::decode(&data))),
            _ => Some(name.to_string()),
        }
    }

    /// Joins without waiting: `Ok(None)` if `admission` would make us wait.
    pub(crate) async fn try_join(&self, admission: Admission) -> Result<Option<Grant>> {
        node::validate_path(&self.dir)?;
        // A read first: when the lock is taken we answer without writing anything.
        let shared = self.shared();
        match retry_read(shared, "list", &self.dir, || {
            shared.client.list_children(&self.dir)
        })
        .await
        {
            Ok(children) if admission.blocked_by(&children) => return Ok(None),
            Ok(_)
            | Err(Error::ZooKeeper {
                source: zk::Error::NoNode,
                ..
            }) => {}
            Err(err) => return Err(err),
        }
        let uuid = self.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        let mut pending = Pending {
            shared: shared.clone(),
            dir: self.dir.clone(),
            marker: self.format.marker(&uuid),
            node: None,
            sent: false,
            armed: true,
        };
        let result = async {
            let (node, sequence, czxid) = self.enqueue(&uuid, &mut pending).await?;
            let mut progress = Progress::default();
            match self
                .position(&node, &pending.marker, admission, &mut progress)
                .await?
            {
                Position::Holds => self.grant(node, sequence, czxid).await.map(Some),
                Position::Waits { .. } | Position::WaitsForChange { .. } => Ok(None),
            }
        }
        .await;
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
        admission: Admission,
        pending: &mut Pending,
        progress: &mut Progress,
    ) -> Result<Grant> {
        let (node, sequence, czxid) = self.enqueue(uuid, pending).await?;
        tracing::Span::current().record("node", node.as_str());
        let marker = pending.marker.clone();
        self.wait(node, sequence, czxid, &marker, admission, progress)
            .await
    }

    /// Step 1: the protected create. Returns `(path, sequence, czxid)`.
    async fn enqueue(
        &self,
        uuid: &uuid::Uuid,
        pending: &mut Pending,
    ) -> Result<(String, i64, i64)> {
        let shared = self.shared();
        let prefix = format!("{}/{}", self.dir, self.format.prefix(uuid, self.role));
        let acls = zk::Acls::new(&shared.acls);
        let options = zk::CreateMode::EphemeralSequential.with_acls(acls);
        loop {
            let sent = Instant::now();
            pending.sent = true;
            match shared
                .client
                .create(&prefix, &self.owner.data(), &options)
                .await
            {
                Ok((stat, sequence)) => {
                    Counters::bump(&shared.counters.creates);
                    shared.renewed(sent);
                    let node = format!("{prefix}{sequence}");
                    pending.node = Some(node.clone());
                    tracing::info!(%node, token = sequence.into_i64(), "enqueued");
                    return Ok((node, sequence.into_i64(), stat.czxid));
                }
                Err(zk::Error::NoNode) => {
                    pending.sent = false;
                    self.make_dir().await?;
                }
                Err(zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout) => {
                    if let Some((node, sequence, czxid)) =
                        find_own(shared, &self.dir, &pending.marker).await?
                    {
                        tracing::info!(%node, token = sequence, "enqueued (found our node after a lost answer)");
                        pending.node = Some(node.clone());
                        return Ok((node, sequence, czxid));
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

    /// Creates the lock directory (and its parents) as plain persistent nodes. Never a
    /// container or TTL node: the directory's child counter makes tokens monotonic, so it
    /// must outlive every contender.
    async fn make_dir(&self) -> Result<()> {
        let shared = self.shared();
        let acls = zk::Acls::new(&shared.acls);
        let options = zk::CreateMode::Persistent.with_acls(acls);
        loop {
            match shared.client.mkdir(&self.dir, &options).await {
                Ok(()) => {
                    tracing::info!(dir = %self.dir, "created lock directory");
                    return Ok(());
                }
                Err(zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(zk::Error::NoNode) => {
                    return Err(Error::ChrootMissing {
                        chroot: shared.client.path().to_string(),
                    })
                }
                Err(zk::Error::NoChildrenForEphemerals) => {
                    return Err(Error::InvalidPath {
                        path: self.dir.clone(),
                        reason: "a parent is an ephemeral node, which cannot have children",
                    })
                }
                Err(e) => return Err(Error::zk("create directory", &self.dir, e)),
            }
        }
    }

    /// Step 2: where we stand.
    ///
    /// Every create retry of one join carries the same uuid (`marker`), so another child with
    /// our marker owned by our session is a create whose answer was lost and which committed
    /// after we had looked for it: an orphan of ours, which would sit ahead of us forever.
    /// It is deleted here, at no cost on the normal path (the listing is needed anyway).
    async fn position(
        &self,
        node: &str,
        marker: &str,
        admission: Admission,
        progress: &mut Progress,
    ) -> Result<Position> {
        let shared = self.shared();
        let watch_children = matches!(admission, Admission::Permits(_));
        loop {
            Counters::bump(&shared.counters.listings);
            let listed = if watch_children {
                retry_read(shared, "list", &self.dir, || {
                    shared.client.list_and_watch_children(&self.dir)
                })
                .await
                .map(|(children, watcher)| (children, Some(watcher)))
            } else {
                retry_read(shared, "list", &self.dir, || {
                    shared.client.list_children(&self.dir)
                })
                .await
                .map(|children| (children, None))
            };
            let (children, children_watch) = match listed {
                Ok(listed) => listed,
                Err(Error::ZooKeeper {
                    source: zk::Error::NoNode,
                    ..
                }) => {
                    return Err(match self.shared().clock().state {
                        // An expired session's node is gone, but the directory is not.
                        crate::SessionState::Connected | crate::SessionState::Disconnected => {
                            Error::LockDirectoryDeleted {
                                path: self.dir.clone(),
                            }
                        }
                        _ => self.vanished(node),
                    });
                }
                Err(err) => return Err(err),
            };
            let queue = node::queue_order(children);
            let name = &node[self.dir.len() + 1..];
            let Some(index) = queue.iter().position(|(_, n)| n == name) else {
                return Err(self.vanished(node));
            };
            if self.delete_own_orphans(&queue, name, marker).await? {
                continue;
            }
            progress.ahead = index;
            progress.holder = queue.first().map(|(_, n)| n.clone());
            return Ok(match admission.place(&queue, index) {
                Place::Holds => Position::Holds,
                Place::WaitsForChange => Position::WaitsForChange {
                    index,
                    watcher: children_watch.expect("listed with a watch"),
                },
                Place::Waits {
                    watched,
                    holds_when_gone,
                } => Position::Waits {
                    index,
                    predecessor: format!("{}/{}", self.dir, queue[watched].1),
                    holds_when_gone,
                },
            });
        }
    }

    /// Deletes children carrying our marker, other than `ours`, that our session owns.
    /// Returns true if it deleted any.
    async fn delete_own_orphans(
        &self,
        queue: &[(i64, String)],
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
            let stat =
                retry_read(shared, "stat", &path, || shared.client.check_stat(&path)).await?;
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
        match self.shared().clock().state {
            crate::SessionState::Expired => Error::SessionExpired,
            crate::SessionState::Closed | crate::SessionState::AuthFailed => Error::SessionClosed,
            _ => Error::NodeDeleted {
                node: node.to_string(),
            },
        }
    }

    /// Steps 2 and 3 until we hold.
    async fn wait(
        &self,
        node: String,
        sequence: i64,
        czxid: i64,
        marker: &str,
        admission: Admission,
        progress: &mut Progress,
    ) -> Result<Grant> {
        let shared = self.shared();
        loop {
            let (index, predecessor, holds_when_gone) =
                match self.position(&node, marker, admission, progress).await? {
                    Position::Holds => return self.grant(node, sequence, czxid).await,
                    Position::WaitsForChange { index, watcher } => {
                        tracing::info!(
                            position = index,
                            ahead = index,
                            "queued: waiting for a permit"
                        );
                        Counters::bump(&shared.counters.watches);
                        let event = watcher.changed().await;
                        Counters::bump(&shared.counters.wakeups);
                        session_event_error(&event)?;
                        continue;
                    }
                    Position::Waits {
                        index,
                        predecessor,
                        holds_when_gone,
                    } => (index, predecessor, holds_when_gone),
                };
            tracing::info!(position = index, ahead = index, holder = ?progress.holder, "queued");
            Counters::bump(&shared.counters.watches);
            let (stat, watcher) = retry_read(shared, "watch", &predecessor, || {
                shared.client.check_and_watch_stat(&predecessor)
            })
            .await?;
            if stat.is_none() {
                continue; // already gone: look again
            }
            tracing::info!(%predecessor, "waiting on predecessor");
            let event = watcher.changed().await;
            Counters::bump(&shared.counters.wakeups);
            match (event.event_type, event.session_state) {
                (zk::EventType::NodeDeleted, _) if holds_when_gone => {
                    // The one we watched was the last thing between us and holding in our
                    // last listing, and nothing smaller than our sequence can appear since:
                    // we hold without listing again.
                    return self.grant(node, sequence, czxid).await;
                }
                _ => session_event_error(&event)?, // else deleted deeper, or changed: look again
            }
        }
    }

    /// Issues the grant if the lease clock vouches for the session now; otherwise confirms
    /// our node with one round trip first (a waiter whose session went quiet must not be
    /// told it holds the lock).
    async fn grant(&self, node: String, sequence: i64, czxid: i64) -> Result<Grant> {
        let shared = self.shared();
        let clock = shared.clock();
        let now = Instant::now();
        if !clock.holds(clock.epoch, now) {
            tracing::info!(%node, "lease clock not current at grant: confirming with the ensemble");
            confirm(shared, &node).await?;
        }
        let clock = shared.clock();
        if !clock.holds(clock.epoch, Instant::now()) {
            return Err(match clock.state {
                crate::SessionState::Expired => Error::SessionExpired,
                crate::SessionState::Closed | crate::SessionState::AuthFailed => {
                    Error::SessionClosed
                }
                _ => Error::Unavailable {
                    operation: "confirm grant",
                    path: node,
                    waited: shared.session_timeout,
                },
            });
        }
        tracing::info!(%node, token = sequence, "granted");
        Ok(Grant {
            node,
            sequence,
            czxid,
            epoch: clock.epoch,
        })
    }

    /// Lists the contenders, holder first, with their owner data (one multi-read).
    pub(crate) async fn contenders(&self) -> Result<Vec<Contender>> {
        node::validate_path(&self.dir)?;
        list_contenders(self.shared(), &self.dir).await
    }
}

/// One round trip that proves the session is alive and our node exists (sync, then exists,
/// pipelined). Renews the lease clock.
pub(crate) async fn confirm(shared: &Shared, node: &str) -> Result<()> {
    loop {
        let sent = Instant::now();
        let sync = shared.client.sync(node);
        let stat = shared.client.check_stat(node);
        let answer =
            tokio::time::timeout(shared.session_timeout, async { (sync.await, stat.await) }).await;
        match answer {
            Err(_) => {
                return Err(Error::Unavailable {
                    operation: "confirm",
                    path: node.to_string(),
                    waited: shared.session_timeout,
                })
            }
            Ok((_, Ok(Some(_)))) => {
                shared.renewed(sent);
                return Ok(());
            }
            Ok((_, Ok(None))) => {
                return Err(Error::NodeDeleted {
                    node: node.to_string(),
                })
            }
            Ok((Err(zk::Error::NoNode), _)) => {
                return Err(Error::NodeDeleted {
                    node: node.to_string(),
                })
            }
            Ok((_, Err(zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout))) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok((_, Err(e))) => return Err(Error::zk("exists", node, e)),
        }
    }
}

/// See [`Queue::contenders`].
pub(crate) async fn list_contenders(shared: &Shared, dir: &str) -> Result<Vec<Contender>> {
    let children = match retry_read(shared, "list", dir, || shared.client.list_children(dir)).await
    {
        Ok(children) => children,
        Err(Error::ZooKeeper {
            source: zk::Error::NoNode,
            ..
        }) => return Ok(vec![]),
        Err(err) => return Err(err),
    };
    let queue = node::queue_order(children);
    if queue.is_empty() {
        return Ok(vec![]);
    }
    let results = retry_read(shared, "read contenders", dir, || {
        let mut reader = shared.client.new_multi_reader();
        for (_, name) in &queue {
            // Paths were validated and come from the server: adding cannot fail.
            let _ = reader.add_get_data(&format!("{dir}/{name}"));
        }
        reader.commit()
    })
    .await?;
    let mut out = Vec::with_capacity(queue.len());
    for ((sequence, name), result) in queue.into_iter().zip(results) {
        // A contender that left between the listing and the read is skipped.
        if let zk::MultiReadResult::Data { data, stat } = result {
            out.push(Contender {
                node: format!("{dir}/{name}"),
                token: crate::FencingToken::from_sequence(sequence),
                session_id: stat.ephemeral_owner,
                owner: OwnerInfo::decode(&data),
                created_ms: stat.ctime,
                czxid: stat.czxid,
            });
        }
    }
    Ok(out)
}

/// A watch that fired because the session ended, as the error to return.
fn session_event_error(event: &zk::WatchedEvent) -> Result<()> {
    match (event.event_type, event.session_state) {
        (zk::EventType::Session, zk::SessionState::Expired) => Err(Error::SessionExpired),
        (zk::EventType::Session, zk::SessionState::AuthFailed) => Err(Error::AuthFailed),
        (zk::EventType::Session, _) => Err(Error::SessionClosed),
        _ => Ok(()),
    }
}

enum Position {
    Holds,
    /// Wait for any change of the directory (a semaphore's permit waiter).
    WaitsForChange {
        index: usize,
        watcher: zk::OneshotWatcher,
    },
    Waits {
        index: usize,
        predecessor: String,
        /// Holding follows from the predecessor's deletion alone.
        holds_when_gone: bool,
    },
}
