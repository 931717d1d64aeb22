//! Step 1 of the algorithm and its undoing: the protected create of our node (with the
//! listing of step 2 right behind it and, when likely missing, the directory's create in
//! front), and the removal of a node whose acquire failed or was cancelled.

use std::sync::Arc;

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::node::{self, NodeFormat, OwnerInfo};
use crate::session::{answered_in_order, Acquiring, Created, QueueListing, Shared};

use super::{Admission, Queue, CLEANUP_GRACE, MAX_DIRECTORY_RETRIES};

/// What our nodes carry as data.
#[derive(Clone, Debug)]
pub(crate) enum Owner {
    /// [`OwnerInfo`] of this process, stamped at each enqueue; `revocable` says the holder
    /// takes revocation requests.
    ThisProcess { id: Option<String>, revocable: bool },
    /// A semaphore's permit: [`OwnerInfo`] of this process with the semaphore's limit, which
    /// every participant reads to refuse a different one.
    Permit { id: Option<String>, permits: usize },
    /// Bytes given by the user (e.g. a Kazoo identifier).
    Raw(Vec<u8>),
}

impl Owner {
    pub(super) fn data(&self) -> Vec<u8> {
        match self {
            Owner::ThisProcess { id, revocable } => {
                OwnerInfo::encode_for_this_process(id.as_deref(), None, *revocable)
            }
            Owner::Permit { id, permits } => {
                OwnerInfo::encode_for_this_process(id.as_deref(), Some(*permits), false)
            }
            Owner::Raw(data) => data.clone(),
        }
    }
}

/// Our node, just created, and the listing sent right behind its create, if answered.
pub(super) struct Enqueued {
    /// The create's number among the session's ordered requests.
    pub(super) number: u64,
    pub(super) listed: Option<QueueListing>,
}

/// Our node between create and grant. If dropped while armed (the acquire was cancelled),
/// it removes the node in the background.
pub(super) struct Pending {
    pub(super) shared: Arc<Shared>,
    pub(super) dir: Arc<str>,
    /// Names our node (with `uuid`): its marker is written out only when needed, to find
    /// the node again after a create whose answer was lost.
    pub(super) format: NodeFormat,
    pub(super) uuid: uuid::Uuid,
    /// Known once the create was answered (or our node found again). The one copy of our
    /// node's path a waiter keeps: the wait borrows it from here.
    pub(super) created: Option<Created>,
    /// A create was sent, so a node may exist even if `node` is unknown.
    pub(super) sent: bool,
    /// A create's outcome was unknown: one of ours may commit late, beside the node we use.
    pub(super) uncertain: bool,
    pub(super) armed: bool,
    /// While our node waits, the lease clock's keepalive must be a proof.
    pub(super) _acquiring: Acquiring,
}

impl Pending {
    pub(super) fn marker(&self) -> String {
        self.format.marker(&self.uuid)
    }

    /// Our node, once [`Queue::enqueue`] returned.
    pub(super) fn created(&self) -> &Created {
        self.created.as_ref().expect("enqueued")
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Removes whatever node we may have; waits for that at most [`CLEANUP_GRACE`], then
    /// leaves it to the background.
    pub(super) async fn cleanup(&mut self) {
        if !std::mem::replace(&mut self.armed, false) {
            return;
        }
        let task = tokio::spawn(cleanup(
            self.shared.clone(),
            self.dir.clone(),
            self.marker(),
            self.created.take().map(|c| c.path),
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
                self.marker(),
                self.created.take().map(|c| c.path),
                self.sent,
            );
            crate::session::spawn_detached(cleanup(shared, dir, marker, node, sent));
        }
    }
}

async fn cleanup(
    shared: Arc<Shared>,
    dir: Arc<str>,
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
                // once more, later, in the background, so no orphan outlives this. It holds
                // the session weakly: a session closed or dropped meanwhile takes any such
                // node with it, and `Session::close` must not wait for this look.
                let (weak, wait) = (Arc::downgrade(&shared), shared.session_timeout() / 2);
                let (dir, marker) = (dir.clone(), marker.clone());
                crate::session::spawn_detached(async move {
                    tokio::time::sleep(wait).await;
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
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
pub(crate) async fn find_own(shared: &Shared, dir: &str, marker: &str) -> Result<Option<Created>> {
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
                return Ok(Some(Created {
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

/// Step 1.
impl Queue {
    pub(super) fn pending(&self, uuid: &uuid::Uuid) -> Pending {
        let shared = self.shared();
        Pending {
            _acquiring: Acquiring::new(&shared),
            shared,
            dir: self.dir.clone(),
            format: self.format,
            uuid: *uuid,
            created: None,
            sent: false,
            uncertain: false,
            armed: true,
        }
    }

    /// Step 1: the protected create, with the listing of step 2 sent right behind it (and,
    /// when the directory is likely missing, the directory's create in front): one round trip
    /// for all three.
    ///
    /// An async block, not an async fn: an async fn keeps its arguments twice in its state.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn enqueue<'a>(
        &'a self,
        uuid: &'a uuid::Uuid,
        pending: &'a mut Pending,
    ) -> impl std::future::Future<Output = Result<Enqueued>> + Send + 'a {
        async move {
            let shared = self.shared();
            let prefix = self.format.prefix_in(&self.dir, uuid, self.kind);
            // A semaphore's waiters list with a watch on the children, which is theirs alone.
            let list_behind = !matches!(self.admission(), Admission::Permits(_));
            let mut directory_made = 0;
            loop {
                let in_front = shared.directories.likely_missing(&self.dir);
                // Boxed: rare, and the step's state is what every enqueue allocates.
                let directory =
                    in_front.then(|| Box::pin(shared.create_directory_in_front(&self.dir)));
                pending.sent = true;
                let (number, created, listed) = {
                    // The data is in the request once sent: not kept in the step while it waits
                    // (a create sent again stamps its node again).
                    let (number, create) = {
                        let data = self.owner.data();
                        shared.create_queue_node(&prefix, &data)
                    };
                    // Every request is on the wire once called, and they are answered in the
                    // order sent. Pinned in place, so awaiting them copies nothing into the
                    // step's state, and dropped at the end of this block, so the retries below
                    // do not sit beside them in it.
                    let create = std::pin::pin!(create);
                    let mut listing = std::pin::pin!(
                        list_behind.then(|| shared.list_queue_after(&self.dir, number))
                    );
                    if let Some(directory) = directory {
                        directory.await;
                    }
                    let (created, listed) = match listing.as_mut().as_pin_mut() {
                        // The listing's answer alone wakes us: the create's came before it. A
                        // listing left unawaited when the create failed is dropped: one we sent
                        // goes off the table at once (its sharers ask again), not after the
                        // retry below.
                        Some(listing) => {
                            let (created, listed) = answered_in_order(create, listing).await;
                            (created, listed.and_then(|listed| listed.ok().flatten()))
                        }
                        None => (create.await, None),
                    };
                    (number, created, listed)
                };
                match created {
                    Ok(created) => {
                        shared.directories.created_in(&self.dir);
                        tracing::info!(node = %created.path, token = created.czxid, sequence = created.sequence, "enqueued");
                        pending.created = Some(created);
                        return Ok(Enqueued { number, listed });
                    }
                    Err(zk::Error::NoNode) => {
                        pending.sent = false;
                        shared.directories.found_missing(&self.dir);
                        // A container directory can be removed between our mkdir and our create
                        // (empty at the leader's check): make it again, a bounded number of times.
                        directory_made += 1;
                        if directory_made > MAX_DIRECTORY_RETRIES {
                            return Err(Error::LockDirectoryDeleted {
                                path: self.dir.to_string(),
                            });
                        }
                        if in_front {
                            // The directory's own parent is missing: make the whole path.
                            // Boxed, as the lost answer's look below: rare steps that would
                            // widen every enqueue's state.
                            Box::pin(shared.make_dirs(&self.dir)).await?;
                        }
                        // Otherwise the next round sends the directory's create in front.
                    }
                    Err(e) if crate::session::outcome_unknown(&e) => {
                        pending.uncertain = true;
                        if let Some(created) =
                            Box::pin(find_own(&shared, &self.dir, &pending.marker())).await?
                        {
                            tracing::info!(node = %created.path, token = created.czxid, "enqueued (found our node after a lost answer)");
                            shared.directories.created_in(&self.dir);
                            pending.created = Some(created);
                            let number = shared.listings.last_sent();
                            return Ok(Enqueued {
                                number,
                                listed: None,
                            });
                        }
                        tracing::debug!(dir = %self.dir, "create outcome unknown and no node of ours found: creating again");
                    }
                    Err(zk::Error::NoChildrenForEphemerals) => {
                        pending.sent = false;
                        return Err(Error::InvalidPath {
                            path: self.dir.to_string(),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns, without calling it: the size of an async fn's future
    /// without a session to make one with.
    fn returned_size<'a, A, B, C, R>(_f: impl FnOnce(&'a A, &'a B, &'a mut C) -> R) -> usize
    where
        A: 'a,
        B: 'a,
        C: 'a,
    {
        std::mem::size_of::<R>()
    }

    /// Every waiter of a burst (10,000 enqueued at once by one process) holds its step until
    /// the create's answer: that is the process's peak, and the allocator keeps it. 1,280
    /// bytes while the listing was an async block that kept its turn twice, and
    /// `answered_in_order` and this step async fns that kept their arguments twice; 768
    /// since (with a second listing turn inline), with room for a compiler's layout to move.
    #[test]
    fn an_enqueue_step_is_at_most_840_bytes() {
        let step = returned_size(Queue::enqueue);
        assert!(step <= 840, "an enqueue step is {step} bytes");
    }
}
