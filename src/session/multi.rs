//! The operations of several nodes in one request: multi-reads split into bounded chunks,
//! and the transactions (a multi-lock's creates, a bulk delete, a fenced write) that commit
//! all of their parts at one zxid or none. Their answers feed the lease clock as
//! [`ops`](super::ops) classifies them.

use zookeeper_client as zk;

use crate::error::{Error, Result};

use super::clock::Answer;
use super::ops::{outcome_unknown, pause_before_retry, write_error_answer, Created};
use super::{Counters, Shared};

/// How many reads one multi-read carries at most, and how many bytes of paths: ZooKeeper
/// refuses a request over 1 MiB (jute.maxbuffer), and the answer carries each node's data.
const READ_CHUNK_OPS: usize = 256;
const READ_CHUNK_BYTES: usize = 128 * 1024;

/// One operation of a [`Lease::fenced_write`](crate::Lease::fenced_write).
///
/// ```no_run
/// # async fn f(lease: zkfence::Lease) -> zkfence::Result<()> {
/// use zkfence::FencedOp;
/// // Written only if our lock node still exists: a stale holder's write is refused.
/// lease.fenced_write(&[
///     FencedOp::SetData { path: "/app/config".into(), data: b"v2".to_vec(), version: None },
///     FencedOp::Create { path: "/app/history/v2".into(), data: vec![] },
/// ]).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedOp {
    /// Create a persistent node.
    Create {
        /// Node path.
        path: String,
        /// Node data.
        data: Vec<u8>,
    },
    /// Set a node's data, optionally only at `version`.
    SetData {
        /// Node path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
    /// Delete a node, optionally only at `version`.
    Delete {
        /// Node path.
        path: String,
        /// Expected version, or `None` for any.
        version: Option<i32>,
    },
}

/// Why a fenced write was not applied.
pub(crate) enum FencedFailure {
    /// Our node is gone: nothing was written.
    NodeGone,
    Failed(Error),
}

impl Shared {
    /// The data and stat of each of `paths` (`None` for one that does not exist), in
    /// bounded multi-reads.
    pub(crate) async fn data_many(
        &self,
        paths: &[String],
    ) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
        let mut out = Vec::with_capacity(paths.len());
        let mut rest = paths;
        while !rest.is_empty() {
            let mut bytes = 0;
            let n = rest
                .iter()
                .take(READ_CHUNK_OPS)
                .take_while(|p| {
                    bytes += p.len();
                    bytes <= READ_CHUNK_BYTES
                })
                .count()
                .max(1);
            let (chunk, tail) = rest.split_at(n);
            rest = tail;
            let results = self
                .read("read contenders", &chunk[0], || {
                    let mut reader = self.client.new_multi_reader();
                    for path in chunk {
                        // Paths come from a listing of the server: adding cannot fail.
                        let _ = reader.add_get_data(path);
                    }
                    reader.commit()
                })
                .await?;
            out.extend(results.into_iter().map(|r| match r {
                zk::MultiReadResult::Data { data, stat } => Some((data, stat)),
                _ => None,
            }));
        }
        Ok(out)
    }

    /// In one request (a multi-read, answered at one point of the server's state): true if
    /// every one of `ahead` is gone and `own` exists. No watch is set: a watch on a missing
    /// node would wait for its creation, and one on our own node would notify its release.
    pub(crate) async fn all_gone_and_own_exists(
        &self,
        ahead: &[String],
        own: &str,
    ) -> Result<bool> {
        let results = self
            .read("check ahead", own, || {
                let mut reader = self.client.new_multi_reader();
                for path in ahead.iter().map(String::as_str).chain([own]) {
                    // Paths of listed nodes and our own: adding cannot fail.
                    let _ = reader.add_get_data(path);
                }
                reader.commit()
            })
            .await?;
        let gone = |r: &zk::MultiReadResult| {
            matches!(
                r,
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode
                }
            )
        };
        Ok(match results.split_last() {
            Some((own, ahead)) => {
                ahead.iter().all(gone) && matches!(own, zk::MultiReadResult::Data { .. })
            }
            None => false,
        })
    }

    /// Applies `ops` in one multi-op that first checks `node` exists.
    pub(crate) async fn fenced_write(
        &self,
        node: &str,
        ops: &[FencedOp],
    ) -> std::result::Result<(), FencedFailure> {
        let mut writer = self
            .client
            .new_check_writer(node, None)
            .map_err(|e| FencedFailure::Failed(Error::zk("fenced write", node, e)))?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&self.acls));
        for op in ops {
            let (path, added) = match op {
                FencedOp::Create { path, data } => {
                    (path, writer.add_create(path, data, &persistent))
                }
                FencedOp::SetData {
                    path,
                    data,
                    version,
                } => (path, writer.add_set_data(path, data, *version)),
                FencedOp::Delete { path, version } => (path, writer.add_delete(path, *version)),
            };
            added.map_err(|_| {
                FencedFailure::Failed(Error::InvalidPath {
                    path: path.clone(),
                    reason: "not a valid node path",
                })
            })?;
        }
        let sent = self.clock.instant();
        match writer.commit().await {
            Ok(_) => {
                self.answered(Answer::Committed, sent);
                Ok(())
            }
            Err(zk::CheckWriteError::CheckFailed { .. }) => {
                // The check of our node failed (NoNode): an error transaction.
                self.answered(Answer::Committed, sent);
                Err(FencedFailure::NodeGone)
            }
            Err(zk::CheckWriteError::OperationFailed { index, source }) => {
                if let Some(answer) = write_error_answer(&source) {
                    self.answered(answer, sent);
                }
                Err(FencedFailure::Failed(Error::FencedWriteFailed {
                    path: node.to_string(),
                    index,
                    source,
                }))
            }
            Err(zk::CheckWriteError::RequestFailed { source }) => Err(FencedFailure::Failed(
                Error::zk("fenced write", node, source),
            )),
        }
    }

    /// Creates one ephemeral-sequential queue node per prefix in one `multi` transaction:
    /// all of them or none, committed at one zxid. One attempt, the raw error for the
    /// caller's protected-create rule: `(Some(index), e)` when the server refused operation
    /// `index` (`NoNode`: its directory is missing) and created nothing, `(None, e)` when the
    /// request failed as a whole; then [`outcome_unknown`] says whether all nodes may exist.
    pub(crate) async fn create_queue_nodes(
        &self,
        prefixes: &[String],
        data: &[u8],
    ) -> std::result::Result<Vec<Created>, (Option<usize>, zk::Error)> {
        let acls = zk::Acls::new(&self.acls);
        let options = zk::CreateMode::EphemeralSequential.with_acls(acls);
        let mut writer = self.client.new_multi_writer();
        for prefix in prefixes {
            writer
                .add_create(prefix, data, &options)
                .map_err(|e| (None, e))?;
        }
        let sent = self.clock.instant();
        let results = match writer.commit().await {
            Ok(results) => results,
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                if let Some(answer) = write_error_answer(&source) {
                    self.answered(answer, sent);
                }
                return Err((Some(index), source));
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                if let Some(answer) = write_error_answer(&source) {
                    self.answered(answer, sent);
                }
                return Err((None, source));
            }
        };
        self.answered(Answer::Committed, sent);
        let mut created = Vec::with_capacity(results.len());
        for (result, prefix) in results.into_iter().zip(prefixes) {
            let zk::MultiWriteResult::Create { path, stat } = result else {
                return Err((
                    None,
                    zk::Error::UnexpectedError(
                        "a multi of creates answered with another operation".into(),
                    ),
                ));
            };
            Counters::bump(&self.counters.creates);
            let name = &path[path.rfind('/').map_or(0, |i| i + 1)..];
            let sequence = crate::node::sequence_of(name)
                .or_else(|| path.get(prefix.len()..).and_then(|s| s.parse().ok()))
                .unwrap_or_default();
            // Servers with ZOOKEEPER-4026 (3.8.0 among them) answer a create inside a multi
            // without its stat: the creation zxid (the fencing token) is read below then.
            let czxid = if stat.is_invalid() || stat.czxid <= 0 {
                -1
            } else {
                stat.czxid
            };
            created.push(Created {
                path,
                sequence,
                czxid,
            });
        }
        let unknown: Vec<String> = created
            .iter()
            .filter(|c| c.czxid < 0)
            .map(|c| c.path.clone())
            .collect();
        if !unknown.is_empty() {
            // One multi-read for all of them. An error leaves the outcome to the caller's
            // search by marker, which reads each node's stat.
            let read = self
                .data_many(&unknown)
                .await
                .map_err(|_| (None, zk::Error::ConnectionLoss))?;
            let mut read = unknown.iter().zip(read);
            for c in created.iter_mut().filter(|c| c.czxid < 0) {
                // Gone already (deleted by someone, or the session ended): the caller's
                // wait reports it; the token is never handed out.
                c.czxid = read
                    .next()
                    .and_then(|(_, r)| r)
                    .map_or(-1, |(_, stat)| stat.czxid);
            }
        }
        Ok(created)
    }

    /// The children of each of `dirs` (`None` for one that does not exist), in bounded
    /// multi-reads: one request for a multi-lock's directories.
    pub(crate) async fn list_many(&self, dirs: &[String]) -> Result<Vec<Option<Vec<String>>>> {
        let mut out = Vec::with_capacity(dirs.len());
        for chunk in dirs.chunks(READ_CHUNK_OPS) {
            for _ in chunk {
                Counters::bump(&self.counters.listings);
            }
            let results = self
                .read("list", &chunk[0], || {
                    let mut reader = self.client.new_multi_reader();
                    for dir in chunk {
                        // Paths were validated by the caller: adding cannot fail.
                        let _ = reader.add_get_children(dir);
                    }
                    reader.commit()
                })
                .await?;
            out.extend(results.into_iter().map(|r| match r {
                zk::MultiReadResult::Children { children } => Some(children),
                _ => None,
            }));
        }
        Ok(out)
    }

    /// Deletes `nodes` in one `multi` transaction, asking again through connection loss and
    /// failover, until all are gone or the session has ended (which removes them too). A
    /// node already gone fails the transaction as a whole: it is dropped from the set and
    /// the rest deleted again, so the common case is one request.
    pub(crate) async fn delete_all_until_gone(&self, nodes: &[String]) -> Result<()> {
        let mut left: Vec<&str> = nodes.iter().map(String::as_str).collect();
        while !left.is_empty() {
            let mut writer = self.client.new_multi_writer();
            for node in &left {
                if let Err(e) = writer.add_delete(node, None) {
                    return Err(Error::zk("delete", node, e));
                }
            }
            let sent = self.clock.instant();
            match writer.commit().await {
                Ok(_) => {
                    self.answered(Answer::Committed, sent);
                    for _ in &left {
                        Counters::bump(&self.counters.deletes);
                    }
                    return Ok(());
                }
                Err(zk::MultiWriteError::OperationFailed {
                    index,
                    source: zk::Error::NoNode,
                }) if index < left.len() => {
                    self.answered(Answer::Committed, sent);
                    left.remove(index);
                }
                Err(zk::MultiWriteError::RequestFailed { source }) if outcome_unknown(&source) => {
                    pause_before_retry().await
                }
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    if let Some(answer) = write_error_answer(&source) {
                        self.answered(answer, sent);
                    }
                    let node = left.get(index).copied().unwrap_or_default();
                    return Err(Error::zk("delete", node, source));
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    return Err(Error::zk("delete", left[0], source))
                }
            }
        }
        Ok(())
    }
}
