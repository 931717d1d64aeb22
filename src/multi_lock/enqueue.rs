//! The protected create of a multi-lock's nodes, one per queue in one transaction, and
//! their removal when the acquire fails or is cancelled.

use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::{EXTRA_DIRECTORY_RETRIES, PARTIAL_FIND_RETRIES};
use crate::error::{Error, Result};
use crate::queue::{find_own, Queue};
use crate::session::{outcome_unknown, Acquiring, Created, Shared};

/// The protected create of one node per queue, in one transaction.
pub(super) async fn enqueue(
    queues: &[Queue],
    uuid: &uuid::Uuid,
    pending: &mut Pending,
) -> Result<Vec<Created>> {
    let shared = queues[0].session().shared();
    let prefixes: Vec<String> = queues.iter().map(|q| q.node_prefix(uuid)).collect();
    let data = queues[0].owner_data();
    let dir_of = |index: Option<usize>| queues[index.unwrap_or(0).min(queues.len() - 1)].dir();
    let mut directories_made = 0;
    loop {
        pending.sent = true;
        match shared.create_queue_nodes(&prefixes, &data).await {
            Ok(created) => {
                pending.nodes = Some(created.iter().map(|c| c.path.clone()).collect());
                for c in &created {
                    tracing::info!(node = %c.path, token = c.czxid, sequence = c.sequence, "enqueued");
                }
                return Ok(created);
            }
            Err((Some(index), zk::Error::NoNode)) => {
                // The transaction created nothing; one directory (the first missing) is named.
                pending.sent = false;
                directories_made += 1;
                if directories_made > queues.len() + EXTRA_DIRECTORY_RETRIES {
                    return Err(Error::LockDirectoryDeleted {
                        path: dir_of(Some(index)).to_string(),
                    });
                }
                shared.make_dirs(dir_of(Some(index))).await?;
            }
            Err((_, e)) if outcome_unknown(&e) => {
                if let Some(found) = find_all(queues, &pending.marker).await? {
                    for c in &found {
                        tracing::info!(node = %c.path, token = c.czxid, "enqueued (found our node after a lost answer)");
                    }
                    pending.nodes = Some(found.iter().map(|c| c.path.clone()).collect());
                    return Ok(found);
                }
                tracing::debug!(
                    "multi create outcome unknown and no node of ours found: creating again"
                );
            }
            Err((index, zk::Error::NoChildrenForEphemerals)) => {
                pending.sent = false;
                return Err(Error::InvalidPath {
                    path: dir_of(index).to_string(),
                    reason: "it is an ephemeral node, which cannot have children",
                });
            }
            Err((index, e)) => {
                // A definite error: the server created nothing, in any directory.
                pending.sent = false;
                let prefix = &prefixes[index.unwrap_or(0).min(prefixes.len() - 1)];
                return Err(Error::zk("create", prefix, e));
            }
        }
    }
}

/// After a create whose answer was lost: our nodes in every queue, or `None` if there are
/// none. The transaction is all-or-nothing, so finding some but not all means it committed
/// between our listings (look again) or someone deleted one of ours.
async fn find_all(queues: &[Queue], marker: &str) -> Result<Option<Vec<Created>>> {
    for _ in 0..PARTIAL_FIND_RETRIES {
        let found = try_join_all(queues.iter().map(|q| q.find_own_node(marker))).await?;
        let count = found.iter().filter(|f| f.is_some()).count();
        if count == 0 {
            return Ok(None);
        }
        if count == queues.len() {
            return Ok(Some(found.into_iter().flatten().collect()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let missing = find_missing(queues, marker).await;
    Err(missing.unwrap_or_else(|| Error::NodeDeleted {
        node: queues[0].dir().to_string(),
    }))
}

async fn find_missing(queues: &[Queue], marker: &str) -> Option<Error> {
    for queue in queues {
        if let Ok(None) = queue.find_own_node(marker).await {
            return Some(Error::NodeDeleted {
                node: format!("{}/{marker}…", queue.dir()),
            });
        }
    }
    None
}

/// Our nodes between create and grant. If dropped while armed (the acquire was
/// cancelled), it removes them in the background.
pub(super) struct Pending {
    pub(super) shared: Arc<Shared>,
    /// The queues' directories, not the queues: a queue holds its session, and the
    /// cleanup's late look must not (see [`cleanup`]).
    pub(super) dirs: Vec<Arc<str>>,
    pub(super) marker: String,
    /// Known once the create was answered (or our nodes found again).
    pub(super) nodes: Option<Vec<String>>,
    /// A create was sent, so nodes may exist even if `nodes` is unknown.
    pub(super) sent: bool,
    pub(super) armed: bool,
    /// While our nodes wait, the lease clock's keepalive must be a proof.
    pub(super) _acquiring: Acquiring,
}

impl Pending {
    pub(super) fn new(queues: &[Queue], uuid: &uuid::Uuid) -> Pending {
        let shared = queues[0].session().shared();
        Pending {
            _acquiring: Acquiring::new(&shared),
            shared,
            dirs: queues.iter().map(Queue::shared_dir).collect(),
            marker: queues[0].marker(uuid),
            nodes: None,
            sent: false,
            armed: true,
        }
    }

    pub(super) fn disarm(&mut self) {
        self.armed = false;
    }

    pub(super) fn task(
        &mut self,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        if !std::mem::replace(&mut self.armed, false) {
            return None;
        }
        Some(cleanup(
            self.shared.clone(),
            self.dirs.clone(),
            self.marker.clone(),
            self.nodes.take(),
            self.sent,
        ))
    }

    /// Removes whatever nodes we may have; waits for that until `until` at most, then
    /// leaves it to the background. (A second call does nothing: the first disarmed.)
    pub(super) async fn cleanup_until(&mut self, until: Instant) {
        if let Some(task) = self.task() {
            let task = tokio::spawn(task);
            if tokio::time::timeout_at(until, task).await.is_err() {
                tracing::debug!(
                    "no answer yet while leaving the queues: the delete goes on in the background"
                );
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(task) = self.task() {
            crate::session::spawn_detached(task);
        }
    }
}

async fn cleanup(
    shared: Arc<Shared>,
    dirs: Vec<Arc<str>>,
    marker: String,
    nodes: Option<Vec<String>>,
    sent: bool,
) {
    let nodes = match nodes {
        Some(nodes) => nodes,
        // The create may still have happened: requests on one connection are answered in
        // order, so listing after it sees its result.
        None if sent => {
            let found = find_ours(&shared, &dirs, &marker).await;
            if found.is_empty() {
                // Unless the connection broke in between and the transaction commits late:
                // look once more, later, so no orphan outlives this. It holds the session
                // weakly, as a plain lock's late look does: a session closed or dropped
                // meanwhile takes any such nodes with it, and `Session::close` must not wait
                // half a session timeout for this look.
                let (weak, wait) = (Arc::downgrade(&shared), shared.session_timeout() / 2);
                let (dirs, marker) = (dirs.clone(), marker.clone());
                crate::session::spawn_detached(async move {
                    tokio::time::sleep(wait).await;
                    let Some(shared) = weak.upgrade() else {
                        return;
                    };
                    let late = find_ours(&shared, &dirs, &marker).await;
                    if !late.is_empty() {
                        tracing::warn!(nodes = ?late, "deleting late-committed nodes of a cancelled multi-lock acquire");
                        let _ = shared.delete_all_until_gone(&late).await;
                    }
                });
            }
            found
        }
        None => vec![],
    };
    if nodes.is_empty() {
        return;
    }
    match shared.delete_all_until_gone(&nodes).await {
        Ok(()) => tracing::debug!(?nodes, "left the queues"),
        Err(err) => {
            tracing::warn!(?nodes, %err, "could not delete our nodes; they disappear with the session")
        }
    }
}

/// Our nodes carrying `marker`, in every directory where one is found.
async fn find_ours(shared: &Shared, dirs: &[Arc<str>], marker: &str) -> Vec<String> {
    let found =
        futures::future::join_all(dirs.iter().map(|dir| find_own(shared, dir, marker))).await;
    found
        .into_iter()
        .filter_map(|f| f.ok().flatten().map(|c| c.path))
        .collect()
}
