//! The ZooKeeper operations: the only code that calls the `zookeeper-client` API.
//!
//! Every answer feeds the lease clock here, classified once ([`Answer`]): reads and what a
//! follower may answer alone are touches, committed writes (also refused ones the leader
//! ordered) are proofs, and a `sync` is a proof only as far as the deposed-leader window
//! allows. One rule decides when an outcome is unknown and the request must be asked again
//! ([`outcome_unknown`], with its pause in [`pause_before_retry`]); one mapping turns a
//! session that ended into the [`Error`] to return ([`ended_error`]); one primitive watches
//! a node ([`NodeWatch`]) and one a directory's children ([`ChildrenWatch`]); multi-reads are
//! split into bounded chunks.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};

use super::clock::Answer;
use super::listing::{self, QueueListing, Turn};
use super::{Counters, SessionState, Shared};

/// True when a request failed without telling whether the server applied it: the
/// connection broke (`ConnectionLoss`, a ping timeout as `Custom`), the client timed out,
/// the session moved to another server, or the server throttled us. Ask again (a read, a
/// delete), or look before asking again (a create).
pub(crate) fn outcome_unknown(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss
            | zk::Error::Custom(_)
            | zk::Error::Timeout
            | zk::Error::SessionMoved
            | zk::Error::Throttled
    )
}

/// The pause before asking again after an unknown outcome. Requests made while
/// disconnected wait for the next connection, so retries do not spin; the pause only keeps
/// a persistent fault from turning into a busy loop.
pub(crate) async fn pause_before_retry() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// What a write's error answer proves for the lease clock, if the server answered at all.
///
/// The leader turns a write that fails against its tree (`NoNode`, `NodeExists`,
/// `BadVersion`, `NotEmpty`, `NoChildrenForEphemerals`) into an error transaction and answers
/// it only once its quorum committed it: a proof, like a success. `NoAuth` is only a touch: a
/// follower with `zookeeper.enableEagerACLCheck` answers it itself, also while cut off from
/// its leader; and the other refusals are counted the same way, as nothing guarantees a
/// leader ordered them.
fn write_error_answer(err: &zk::Error) -> Option<Answer> {
    match err {
        zk::Error::NoNode
        | zk::Error::NodeExists
        | zk::Error::BadVersion
        | zk::Error::NotEmpty
        | zk::Error::NoChildrenForEphemerals => Some(Answer::Committed),
        zk::Error::NoAuth | zk::Error::InvalidAcl | zk::Error::QuotaExceeded => Some(Answer::Read),
        _ => None,
    }
}

/// The error for a session that ended in `state`, or `None` if it has not ended: the one
/// mapping from a terminal session state to [`Error`].
pub(crate) fn ended_error(state: SessionState) -> Option<Error> {
    match state {
        SessionState::Expired => Some(Error::SessionExpired),
        SessionState::Closed => Some(Error::SessionClosed),
        SessionState::AuthFailed => Some(Error::AuthFailed),
        SessionState::Connected | SessionState::Disconnected => None,
    }
}

/// The session state a watch reports when it fired because the session ended.
fn watched_state(event: &zk::WatchedEvent) -> Option<SessionState> {
    if event.event_type != zk::EventType::Session {
        return None;
    }
    Some(match event.session_state {
        zk::SessionState::Expired => SessionState::Expired,
        zk::SessionState::AuthFailed => SessionState::AuthFailed,
        _ => SessionState::Closed,
    })
}

/// What a node watch saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeEvent {
    Deleted,
    /// Its data changed (or it was created): it still exists.
    Changed,
}

/// A watch set on one node that exists.
pub(crate) struct NodeWatch {
    event: Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>,
}

impl NodeWatch {
    fn new(watcher: zk::OneshotWatcher) -> NodeWatch {
        NodeWatch {
            event: Box::pin(watcher.changed()),
        }
    }

    /// Waits for the event. Cancel safe (the watch stays set).
    pub(crate) async fn changed(&mut self) -> Result<NodeEvent> {
        let event = (&mut self.event).await;
        node_event(&event)
    }

    /// The event if it has already arrived. Events arrive in zxid order and are dispatched in
    /// that order, so once a later event was seen, an earlier one is here.
    pub(crate) fn arrived(&mut self) -> Option<Result<NodeEvent>> {
        (&mut self.event).now_or_never().map(|e| node_event(&e))
    }
}

fn node_event(event: &zk::WatchedEvent) -> Result<NodeEvent> {
    if let Some(state) = watched_state(event) {
        return Err(ended_error(state).unwrap_or(Error::SessionClosed));
    }
    Ok(match event.event_type {
        zk::EventType::NodeDeleted => NodeEvent::Deleted,
        _ => NodeEvent::Changed,
    })
}

/// A mark of the client's connection, taken before setting watches: says whether the
/// connection broke since.
///
/// Events of one connection arrive in zxid order. Watches set again after a reconnect do not:
/// the client sends its list of watches and the server fires what changed in that list's
/// order. The client library publishes `Disconnected` when a connection breaks, before it
/// makes the next one, and dispatches that next connection's events after; so an event that
/// arrives while the mark sees no change of state came on the connection the watches were set
/// on. (This reads the library's own state, not a counter our keeper task bumps later.)
pub(crate) struct ConnectionMark {
    states: zk::StateWatcher,
}

impl ConnectionMark {
    /// True if the session's state changed since the mark was taken.
    pub(crate) fn changed(&mut self) -> bool {
        self.states.changed().now_or_never().is_some()
    }
}

/// A watch set on a directory's children.
pub(crate) struct ChildrenWatch {
    watcher: zk::OneshotWatcher,
}

impl ChildrenWatch {
    /// Waits for the next change of the children (or the directory's deletion).
    pub(crate) async fn changed(self) -> Result<()> {
        let event = self.watcher.changed().await;
        match watched_state(&event) {
            Some(state) => Err(ended_error(state).unwrap_or(Error::SessionClosed)),
            None => Ok(()),
        }
    }
}

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

/// The answer to one queue-node create.
pub(crate) struct Created {
    pub(crate) path: String,
    pub(crate) sequence: i32,
    pub(crate) czxid: i64,
}

impl Shared {
    fn answered(&self, answer: Answer, sent: Instant) {
        self.clock.answered(answer, sent);
    }

    /// Runs an idempotent read, asking again while its outcome is unknown.
    async fn read<T, F, Fut>(&self, operation: &'static str, path: &str, f: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        loop {
            let sent = Instant::now();
            match f().await {
                Ok(v) => {
                    self.answered(Answer::Read, sent);
                    return Ok(v);
                }
                Err(e) if outcome_unknown(&e) => pause_before_retry().await,
                Err(e) => {
                    if write_error_answer(&e).is_some() {
                        self.answered(Answer::Read, sent);
                    }
                    return Err(Error::zk(operation, path, e));
                }
            }
        }
    }

    /// A read that treats a missing node as `None`.
    async fn read_node<T, F, Fut>(
        &self,
        operation: &'static str,
        path: &str,
        f: F,
    ) -> Result<Option<T>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        match self.read(operation, path, f).await {
            Ok(v) => Ok(Some(v)),
            Err(Error::ZooKeeper {
                source: zk::Error::NoNode,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The children of `dir`, or `None` if it does not exist.
    pub(crate) async fn list(&self, dir: &str) -> Result<Option<Vec<String>>> {
        Counters::bump(&self.counters.listings);
        self.read_node("list", dir, || self.client.list_children(dir))
            .await
    }

    /// The children of `dir` and a watch on them, or `None` if it does not exist.
    pub(crate) async fn list_watched(
        &self,
        dir: &str,
    ) -> Result<Option<(Vec<String>, ChildrenWatch)>> {
        Counters::bump(&self.counters.listings);
        let listed = self
            .read_node("list", dir, || self.client.list_and_watch_children(dir))
            .await?;
        Ok(listed.map(|(children, watcher)| (children, ChildrenWatch { watcher })))
    }

    /// The node's stat, or `None` if it does not exist.
    pub(crate) async fn stat(&self, path: &str) -> Result<Option<zk::Stat>> {
        self.read("stat", path, || self.client.check_stat(path))
            .await
    }

    /// The node's data and stat, or `None` if it does not exist.
    pub(crate) async fn data(&self, path: &str) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        self.read_node("read", path, || self.client.get_data(path))
            .await
    }

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

    /// The node's data and stat, and a watch on its data (which also fires at its deletion):
    /// `None` if it does not exist.
    pub(crate) async fn data_watched(
        &self,
        path: &str,
    ) -> Result<Option<(Vec<u8>, zk::Stat, NodeWatch)>> {
        Counters::bump(&self.counters.watches);
        let read = self
            .read_node("watch data", path, || self.client.get_and_watch_data(path))
            .await?;
        Ok(read.map(|(data, stat, watcher)| (data, stat, NodeWatch::new(watcher))))
    }

    /// Sets `path`'s data if its version is `version`: one attempt, the raw error for the
    /// caller to decide (an unknown outcome may have been applied). A success and the
    /// refusals the leader orders (`NoNode`, `BadVersion`) are committed answers.
    pub(crate) async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: i32,
    ) -> std::result::Result<zk::Stat, zk::Error> {
        let sent = Instant::now();
        let result = self.client.set_data(path, data, Some(version)).await;
        match &result {
            Ok(_) => self.answered(Answer::Committed, sent),
            Err(e) => {
                if let Some(answer) = write_error_answer(e) {
                    self.answered(answer, sent);
                }
            }
        }
        result
    }

    /// Sets a watch on `path`: `None` if it does not exist.
    pub(crate) async fn watch_node(&self, path: &str) -> Result<Option<NodeWatch>> {
        Counters::bump(&self.counters.watches);
        let (stat, watcher) = self
            .read("watch", path, || self.client.check_and_watch_stat(path))
            .await?;
        Ok(stat.map(|_| NodeWatch::new(watcher)))
    }

    /// Sets watches on `first` and `second` in one round trip (the requests are pipelined
    /// on the connection and answered in order).
    pub(crate) async fn watch_pair(
        &self,
        first: &str,
        second: &str,
    ) -> Result<(Option<NodeWatch>, Option<NodeWatch>)> {
        Counters::bump(&self.counters.watches);
        let (a, b) = self
            .read("watch", first, || {
                let a = self.client.check_and_watch_stat(first);
                let b = self.client.check_and_watch_stat(second);
                async move {
                    let (a, b) = (a.await, b.await);
                    Ok((a?, b?))
                }
            })
            .await?;
        let watch = |(stat, watcher): (Option<zk::Stat>, zk::OneshotWatcher)| {
            stat.map(|_| NodeWatch::new(watcher))
        };
        Ok((watch(a), watch(b)))
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

    /// Waits until `path` does not exist. Cancel safe.
    pub(crate) async fn wait_deleted(&self, path: &str) -> Result<()> {
        loop {
            let Some(mut watch) = self.watch_node(path).await? else {
                return Ok(());
            };
            if watch.changed().await? == NodeEvent::Deleted {
                return Ok(());
            }
        }
    }

    /// Sends the create of a queue node: one attempt, the raw error for the caller's
    /// protected-create rule. A `NoNode` answer means the directory is missing. Returns the
    /// create's number among the session's ordered requests (a listing numbered after it
    /// lists the node) and its answer, to await.
    pub(crate) fn create_queue_node<'a>(
        &'a self,
        prefix: &'a str,
        data: &[u8],
    ) -> (
        u64,
        impl Future<Output = std::result::Result<Created, zk::Error>> + Send + 'a,
    ) {
        let acls = zk::Acls::new(&self.acls);
        let options = zk::CreateMode::EphemeralSequential.with_acls(acls);
        let sent = Instant::now();
        let (number, request) = self
            .listings
            .send_in_order(|| self.client.create(prefix, data, &options));
        let answer = async move {
            match request.await {
                Ok((stat, sequence)) => {
                    self.answered(Answer::Committed, sent);
                    Counters::bump(&self.counters.creates);
                    // ZooKeeper writes the parent's signed 32-bit counter.
                    let sequence = sequence.into_i64() as i32;
                    Ok(Created {
                        path: crate::node::with_sequence(prefix, sequence),
                        sequence,
                        czxid: stat.czxid,
                    })
                }
                Err(e) => {
                    if let Some(answer) = write_error_answer(&e) {
                        self.answered(answer, sent);
                    }
                    Err(e)
                }
            }
        };
        (number, answer)
    }

    /// Sends the create of the lock directory `dir` (its parent must exist), to go in front
    /// of a queue node's create in the same round trip; returns true if it created it. Its
    /// errors are the node's create's to report: `NodeExists` is the directory being there,
    /// `NoNode` a missing parent (the node's create fails with it too).
    pub(crate) fn create_directory_in_front<'a>(
        &'a self,
        dir: &'a str,
    ) -> impl Future<Output = bool> + Send + 'a {
        let acls = zk::Acls::new(&self.acls);
        let options = self.directory_mode.with_acls(acls);
        let sent = Instant::now();
        let request = self.client.create(dir, &[], &options);
        async move {
            match request.await {
                Ok(_) => {
                    self.answered(Answer::Committed, sent);
                    tracing::info!(%dir, mode = ?self.directory_mode, "created lock directory");
                    true
                }
                Err(e) => {
                    if let Some(answer) = write_error_answer(&e) {
                        self.answered(answer, sent);
                    }
                    false
                }
            }
        }
    }

    /// The children of `dir` in queue order (`None` if it does not exist), from a listing
    /// sent after the session's ordered request number `after` (see `listing.rs`): shared
    /// with the session's other waiters on `dir`, asking again while its outcome is unknown.
    pub(crate) async fn list_queue_after(
        &self,
        dir: &std::sync::Arc<str>,
        after: u64,
    ) -> Result<Option<QueueListing>> {
        loop {
            let turn = self
                .listings
                .join_or_send(dir, after, || self.client.list_children(dir));
            let (listed, sent) = match turn {
                Turn::Share(answer) => match listing::shared_answer(answer).await {
                    Some(answer) => answer,
                    None => continue, // its sender was cancelled: ask again
                },
                Turn::After(answer) => {
                    listing::shared_answer(answer).await;
                    continue;
                }
                Turn::Send(sent, request) => {
                    Counters::bump(&self.counters.listings);
                    sent.answer(request.await)
                }
            };
            match listed {
                Ok(queue) => {
                    self.answered(Answer::Read, sent);
                    return Ok(queue);
                }
                Err(e) if outcome_unknown(&e) => pause_before_retry().await,
                Err(e) => {
                    if write_error_answer(&e).is_some() {
                        self.answered(Answer::Read, sent);
                    }
                    return Err(Error::zk("list", dir, e));
                }
            }
        }
    }

    /// Creates `dir` and its missing parents (`mkdir -p`), as containers unless the session
    /// asked for persistent directories.
    pub(crate) async fn make_dirs(&self, dir: &str) -> Result<()> {
        let acls = zk::Acls::new(&self.acls);
        let options = self.directory_mode.with_acls(acls);
        loop {
            let sent = Instant::now();
            match self.client.mkdir(dir, &options).await {
                Ok(()) => {
                    self.answered(Answer::Committed, sent);
                    tracing::info!(%dir, mode = ?self.directory_mode, "created lock directory");
                    return Ok(());
                }
                Err(e) if outcome_unknown(&e) => pause_before_retry().await,
                Err(zk::Error::NoNode) => {
                    return Err(Error::ChrootMissing {
                        chroot: self.client.path().to_string(),
                    })
                }
                Err(zk::Error::NoChildrenForEphemerals) => {
                    return Err(Error::InvalidPath {
                        path: dir.to_string(),
                        reason: "a parent is an ephemeral node, which cannot have children",
                    })
                }
                Err(e) => return Err(Error::zk("create directory", dir, e)),
            }
        }
    }

    /// Deletes `node`, asking again through connection loss and failover, until it is gone
    /// or the session has ended (which removes it too).
    pub(crate) async fn delete_until_gone(&self, node: &str) -> Result<()> {
        loop {
            let sent = Instant::now();
            match self.client.delete(node, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    self.answered(Answer::Committed, sent);
                    Counters::bump(&self.counters.deletes);
                    return Ok(());
                }
                Err(e) if outcome_unknown(&e) => pause_before_retry().await,
                Err(e) => return Err(Error::zk("delete", node, e)),
            }
        }
    }

    /// Makes the connected server catch up with the leader before our next read (a proof for
    /// the lease clock too). A missing `path` is fine: the sync only orders.
    pub(crate) async fn sync(&self, path: &str) -> Result<()> {
        loop {
            let sent = Instant::now();
            match self.client.sync(path).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    self.answered(Answer::Synced, sent);
                    return Ok(());
                }
                Err(e) if outcome_unknown(&e) => pause_before_retry().await,
                Err(e) => return Err(Error::zk("sync", path, e)),
            }
        }
    }

    /// The keepalive. While a lease is held or an acquire waits (and the servers' tickTime
    /// was not declared), a transaction that changes nothing: a `multi` with one `check` at
    /// any version of a node we hold (else of the session's root), which the leader commits
    /// like any write, and so a proof that no newer leader existed when it was sent.
    /// Otherwise a `sync` (a touch, or a bounded proof with the tickTime declared). Returns
    /// whether it was answered.
    pub(crate) async fn keepalive(&self) -> bool {
        if self.clock.syncs_prove || !self.clock.vouching_matters() {
            let sent = Instant::now();
            let ok = self.client.sync("/").await.is_ok();
            if ok {
                self.answered(Answer::Synced, sent);
            }
            return ok;
        }
        Counters::bump(&self.counters.keepalive_transactions);
        // One of our own nodes if we hold one (readable by us whatever the ACLs above it; a
        // check of one that was deleted is an error transaction, a proof all the same), else
        // the session's root.
        let target = self
            .clock
            .any_held_node()
            .unwrap_or_else(|| "/".to_string());
        let mut writer = self.client.new_multi_writer();
        if writer.add_check_version(&target, -1).is_err() {
            return false;
        }
        let sent = Instant::now();
        let source = match writer.commit().await {
            Ok(_) => {
                self.answered(Answer::Committed, sent);
                return true;
            }
            Err(zk::MultiWriteError::OperationFailed { source, .. }) => source,
            Err(zk::MultiWriteError::RequestFailed { source }) => source,
        };
        match write_error_answer(&source) {
            Some(answer) => {
                self.answered(answer, sent);
                if answer == Answer::Read {
                    tracing::warn!(error = %source, node = %target, "keepalive transaction refused: the node it checks must be readable for the lease clock to be renewed");
                }
                answer == Answer::Committed
            }
            None => false,
        }
    }

    /// Confirms with the leader that `node` exists, in one committed round trip: a `multi`
    /// with one `check` of `node` at any version (a transaction that changes nothing), or, with
    /// the servers' tickTime declared, a `sync` and an `exists` pipelined.
    async fn confirm_once(&self, node: &str) -> std::result::Result<bool, zk::Error> {
        let sent = Instant::now();
        if self.clock.syncs_prove {
            let sync = self.client.sync(node);
            let stat = self.client.check_stat(node);
            return match (sync.await, stat.await) {
                (Ok(()), Ok(stat)) => {
                    self.answered(Answer::Synced, sent);
                    Ok(stat.is_some())
                }
                (Err(zk::Error::NoNode), _) => {
                    self.answered(Answer::Synced, sent);
                    Ok(false)
                }
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
        }
        let mut writer = self.client.new_multi_writer();
        writer.add_check_version(node, -1)?;
        let source = match writer.commit().await {
            Ok(_) => {
                self.answered(Answer::Committed, sent);
                return Ok(true);
            }
            Err(zk::MultiWriteError::OperationFailed { source, .. }) => source,
            Err(zk::MultiWriteError::RequestFailed { source }) => source,
        };
        if let Some(answer) = write_error_answer(&source) {
            self.answered(answer, sent);
        }
        match source {
            zk::Error::NoNode => Ok(false),
            e => Err(e),
        }
    }

    /// One round trip that proves the session is alive at the leader and `node` exists
    /// ([`confirm_once`](Self::confirm_once)), asked again while the outcome is unknown,
    /// bounded by the session timeout.
    ///
    /// Errors: [`Error::NodeDeleted`] if the node is gone, [`Error::NoAnswer`] if nothing
    /// answered in time, the session's end.
    pub(crate) async fn confirm(&self, node: &str) -> Result<()> {
        let deadline = Instant::now() + self.session_timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.confirm_once(node)).await {
                Err(_) => {
                    return Err(Error::NoAnswer {
                        operation: "confirm",
                        path: node.to_string(),
                        waited: self.session_timeout,
                    })
                }
                Ok(Ok(true)) => return Ok(()),
                Ok(Ok(false)) => {
                    return Err(Error::NodeDeleted {
                        node: node.to_string(),
                    })
                }
                Ok(Err(e)) if outcome_unknown(&e) => pause_before_retry().await,
                Ok(Err(e)) => return Err(Error::zk("confirm", node, e)),
            }
        }
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
        let sent = Instant::now();
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

    /// Marks the current connection (see [`ConnectionMark`]).
    pub(crate) fn mark_connection(&self) -> ConnectionMark {
        let mut states = self.client.state_watcher();
        states.state();
        ConnectionMark { states }
    }

    /// The error for our session if it has ended.
    pub(crate) fn session_ended(&self) -> Option<Error> {
        ended_error(self.clock.now().state)
    }
}

impl Shared {
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
        let sent = Instant::now();
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
            let sent = Instant::now();
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
