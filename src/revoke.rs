//! Revocation, Curator's protocol: whoever wants a holder to let go writes `__REVOKE__` as
//! the data of the holder's node ([`Session::revoke`]; `Lock::revoke_holder` finds the
//! holder's); a holder made revocable (`Lock::revocable`) watches its own node's data and is
//! told ([`Lease::revoke_requested`](crate::Lease::revoke_requested)). Nothing is released by
//! force: the holder decides, and a holder that is not revocable never looks.
//!
//! Below the lease in the layers: it knows sessions and nodes, no recipe.
//!
//! The bytes and the place are Curator's (`LockInternals.REVOKE_MESSAGE`, written by
//! `Revoker.attemptRevoke`), so a zkfence holder can be revoked by Curator and the other way
//! round.

use std::sync::Arc;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::node::{self, OwnerInfo, REVOKE_REQUEST, REVOKE_REQUEST_THEN_OWNER};
use crate::session::{NodeEvent, Session, Shared};

/// A revocable lease's watch on its node's data; stops watching when dropped.
pub(crate) struct RevocationWatch {
    requested: watch::Receiver<bool>,
    task: tokio::task::AbortHandle,
}

impl RevocationWatch {
    /// Watches `node`'s data until it is `__REVOKE__` or the node is gone.
    pub(crate) fn start(shared: Arc<Shared>, node: String) -> RevocationWatch {
        let (tx, requested) = watch::channel(false);
        let task = tokio::spawn(async move {
            // Every round reads the data as it sets the watch again, so a request written
            // while the watch was not set (between rounds, or while disconnected, if the
            // client's re-set watch missed it) is seen at the next read.
            loop {
                let mut watch = match shared.data_watched(&node).await {
                    Ok(Some((data, _, _))) if node::is_revoke_request(&data) => {
                        tracing::info!(%node, "revocation requested");
                        let _ = tx.send(true);
                        return;
                    }
                    Ok(Some((_, _, watch))) => watch,
                    // The node is gone (released or deleted): nothing left to revoke. A session
                    // that ended reports through the lease clock.
                    Ok(None) | Err(_) => return,
                };
                match watch.changed().await {
                    Ok(NodeEvent::Changed) => continue,
                    Ok(NodeEvent::Deleted) | Err(_) => return,
                }
            }
        })
        .abort_handle();
        RevocationWatch { requested, task }
    }

    /// Resolves once a revocation was requested. Cancel safe.
    pub(crate) async fn requested(&self) {
        let mut requested = self.requested.clone();
        // An error means the watch ended without a request: then none will come.
        if requested.wait_for(|r| *r).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for RevocationWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Session {
    /// Asks the holder of the lock node `node` to let go (Curator's `Revoker.attemptRevoke`):
    /// writes `__REVOKE__` as the node's data. A holder whose lock was made
    /// [revocable](crate::Lock::revocable) (or a revocable Curator `InterProcessMutex`) is told and
    /// decides; any other holder ignores it. Nothing is released here.
    ///
    /// A zkfence holder's owner data is kept after the request (`__REVOKE__`, a newline, the
    /// owner lines), so [`Lock::contenders`](crate::Lock::contenders) still names it; any
    /// other client's data is replaced by Curator's bare request, the only form Curator
    /// knows. Whether the holder listens is in its owner data
    /// ([`OwnerInfo::revocable`](crate::OwnerInfo::revocable)): ask that first if a request
    /// that is ignored would mislead you, as `zkfence revoke` does.
    ///
    /// `node` is the full path of a contender's node, as [`Lock::contenders`](crate::Lock::contenders) and
    /// the CLI's `status` show it; [`Lock::revoke_holder`](crate::Lock::revoke_holder) finds
    /// the holder's for you.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let lock = session.lock("/locks/nightly-report");
    /// if let Some(holder) = lock.contenders().await?.first() {
    ///     session.revoke(&holder.node).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Once sent, a dropped request may still have been written: the holder may be told.
    ///
    /// # Notable errors
    /// - [`Error::NotALockNode`] if `node` does not exist (the holder left) or is not a
    ///   contender's node (not ephemeral, or not named like a queue node); nothing is written.
    /// - [`Error::InvalidPath`] for a path that is not an absolute node path.
    /// - [`Error::NoAuth`] if the node's ACL forbids writing.
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`].
    pub async fn revoke(&self, node: &str) -> Result<()> {
        node::validate_path(node)?;
        let not_a_lock_node = |reason| Error::NotALockNode {
            path: node.to_string(),
            reason,
        };
        let name = node.rsplit('/').next().unwrap_or_default();
        if node::sequence_of(name).is_none() {
            return Err(not_a_lock_node(
                "its name has no sequence number (is it the lock directory?)",
            ));
        }
        let shared = self.shared();
        loop {
            let Some((data, stat)) = shared.data(node).await? else {
                return Err(not_a_lock_node("no such node (the holder may have left)"));
            };
            if stat.ephemeral_owner == 0 {
                return Err(not_a_lock_node("it is not ephemeral"));
            }
            // A zkfence holder's owner stays readable behind the request (it takes either
            // form); any other holder gets Curator's bare request, the only one it knows.
            let owner = OwnerInfo::decode(&data);
            let request = if node::is_revoke_request(&data) {
                data.clone()
            } else if owner.host.is_some() || owner.pid.is_some() {
                [REVOKE_REQUEST_THEN_OWNER, &data].concat()
            } else {
                REVOKE_REQUEST.to_vec()
            };
            // Versioned, so a node deleted and re-created (or rewritten) since we looked is
            // looked at again rather than overwritten blindly.
            match shared.set_data(node, &request, stat.version).await {
                Ok(_) => {
                    tracing::info!(%node, "revocation requested of the holder");
                    return Ok(());
                }
                Err(zookeeper_client::Error::NoNode) => {
                    return Err(not_a_lock_node("no such node (the holder may have left)"))
                }
                Err(zookeeper_client::Error::BadVersion) => continue,
                Err(e) if crate::session::outcome_unknown(&e) => {
                    crate::session::pause_before_retry().await
                }
                Err(e) => return Err(Error::zk("revoke", node, e)),
            }
        }
    }
}
