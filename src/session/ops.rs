//! The ZooKeeper operations: the only code that calls the `zookeeper-client` API.
//!
//! Every answer feeds the lease clock here, classified once ([`Answer`]): reads and what a
//! follower may answer alone are touches, committed writes (also refused ones the leader
//! ordered) are proofs, and a `sync` is a proof only as far as the deposed-leader window
//! allows. One rule decides when an outcome is unknown and the request must be asked again
//! ([`outcome_unknown`], with its pause in [`pause_before_retry`]); one mapping turns a
//! session that ended into the [`Error`] to return ([`ended_error`]); one primitive watches
//! a node ([`NodeWatch`]) and one a directory's children ([`ChildrenWatch`]). Requests on
//! several nodes at once are in [`multi`](super::multi).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, LossReason, Result};

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
pub(super) fn write_error_answer(err: &zk::Error) -> Option<Answer> {
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

/// The answer to one queue-node create.
pub(crate) struct Created {
    pub(crate) path: String,
    pub(crate) sequence: i32,
    pub(crate) czxid: i64,
}

/// A listing turn's answer, settled: the listing's result, or ask again (after a pause when
/// its outcome is unknown).
enum Settled {
    Listed(Result<Option<QueueListing>>),
    Again { pause: bool },
}

/// Awaits two requests sent one right after the other on one connection, which ZooKeeper
/// answers in the order they were sent: the result of the `first`, and the `second`'s if the
/// first succeeded.
///
/// Only the second's answer wakes us: until it comes, the first is looked at without
/// leaving a waker (a no-op one), since its answer is already there whenever the second's
/// is. On a busy session the two answers often arrive in separate reads, and a wake-up
/// for the first alone was a trip through the scheduler for nothing. A first that fails
/// ends the wait at once: a connection that broke fails both, and the second's failure
/// wakes us to see the first's.
///
/// A `poll_fn`, not an async fn: the answers are kept once, in its closure (an async fn kept
/// its arguments twice and padded its first state to its largest, 184 bytes against 128, in
/// every enqueue's state).
pub(crate) fn answered_in_order<'a, T, E, B>(
    mut first: Pin<&'a mut impl Future<Output = std::result::Result<T, E>>>,
    mut second: Pin<&'a mut impl Future<Output = B>>,
) -> impl Future<Output = (std::result::Result<T, E>, Option<B>)> + 'a
where
    T: 'a,
    E: 'a,
    B: 'a,
{
    let (mut first_answer, mut second_answer) = (None, None);
    std::future::poll_fn(move |cx| {
        if second_answer.is_none() {
            if let Poll::Ready(answer) = second.as_mut().poll(cx) {
                second_answer = Some(answer);
            }
        }
        if first_answer.is_none() {
            let waker = match second_answer {
                Some(_) => cx.waker(),
                None => futures::task::noop_waker_ref(),
            };
            if let Poll::Ready(answer) = first.as_mut().poll(&mut Context::from_waker(waker)) {
                first_answer = Some(answer);
            }
        }
        match first_answer.take() {
            Some(Err(err)) => Poll::Ready((Err(err), None)),
            Some(Ok(first)) if second_answer.is_some() => {
                Poll::Ready((Ok(first), second_answer.take()))
            }
            pending => {
                first_answer = pending;
                Poll::Pending
            }
        }
    })
}

impl Shared {
    /// Feeds an answer to the lease clock, after the timeout the servers granted the
    /// connection it came on (the client library updates that before it hands out any
    /// answer of the connection).
    pub(super) fn answered(&self, answer: Answer, sent: Instant) {
        self.follow_granted_timeout();
        self.clock.answered(answer, sent);
    }

    /// Makes the lease clock count with the timeout the servers granted the latest
    /// connection, if that changed it; says so to operators.
    pub(super) fn follow_granted_timeout(&self) {
        let granted = self.client.session_timeout();
        if let Some((before, after)) = self.clock.follow_granted(granted) {
            Counters::bump(&self.counters.timeout_changes);
            crate::telemetry::session_timeout_changed(after);
            tracing::warn!(
                session_id = %self.client.session_id(),
                before_ms = before.as_millis() as u64,
                after_ms = after.as_millis() as u64,
                "the servers granted a shorter session timeout at a reconnect: the lease clock \
                 counts with it from now on, at once for what it had counted"
            );
        }
    }

    /// Runs an idempotent read, asking again while its outcome is unknown.
    pub(super) async fn read<T, F, Fut>(
        &self,
        operation: &'static str,
        path: &str,
        f: F,
    ) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        loop {
            let sent = self.clock.instant();
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
        let sent = self.clock.instant();
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
        let sent = self.clock.instant();
        let (number, request) = self
            .listings
            .send_in_order(|| self.client.create(prefix, data, &options));
        // A map, not an async block: a block would keep the request twice, once as what it
        // captured and once as what it awaits (216 bytes each), in every enqueue's state.
        let answer = request.map(move |answer| match answer {
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
        });
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
        let sent = self.clock.instant();
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
    ///
    /// The listing is sent (or joined) at the call, not at the first poll: an enqueue calls
    /// this right after sending its create and awaits the create first, with nothing to poll
    /// side by side.
    ///
    /// Combinators over two turns, not an async block: a block keeps the turn it captured
    /// beside the one it matched and what it awaits (648 bytes), and every enqueue carries
    /// this future while it waits for its listing (10,000 at once in one process). Two
    /// turns inline: in a burst of enqueues, most find their session's listing in flight
    /// sent before their create, wait for it, and share the next one. A third (rare) is boxed.
    pub(crate) fn list_queue_after<'a>(
        &'a self,
        dir: &'a std::sync::Arc<str>,
        after: u64,
    ) -> impl Future<Output = Result<Option<QueueListing>>> + Send + 'a {
        self.listing_turn(dir, after)
            .then(move |answer| match self.settle_listing(dir, answer) {
                Settled::Listed(listed) => futures::future::ready(listed).left_future(),
                Settled::Again { pause: false } => self
                    .listing_turn(dir, after)
                    .then(move |answer| match self.settle_listing(dir, answer) {
                        Settled::Listed(listed) => futures::future::ready(listed).left_future(),
                        Settled::Again { pause } => {
                            Box::pin(self.list_queue_again(dir, after, pause)).right_future()
                        }
                    })
                    .left_future()
                    .right_future(),
                Settled::Again { pause: true } => Box::pin(self.list_queue_again(dir, after, true))
                    .right_future()
                    .right_future(),
            })
    }

    /// [`Self::list_queue_after`] past its turns inline: asks until a listing answers or
    /// fails for good, pausing first after an unknown outcome.
    async fn list_queue_again(
        &self,
        dir: &std::sync::Arc<str>,
        after: u64,
        mut pause: bool,
    ) -> Result<Option<QueueListing>> {
        loop {
            if pause {
                pause_before_retry().await;
            }
            match self.settle_listing(dir, self.listing_turn(dir, after).await) {
                Settled::Listed(listed) => return listed,
                Settled::Again { pause: unknown } => pause = unknown,
            }
        }
    }

    /// One turn at a listing of `dir` sent after request number `after`: shares the one in
    /// flight or sends one (at the call), and answers with it, or `None` to ask again (its
    /// sender gave up, or it was sent too early for us and is answered now).
    fn listing_turn<'a>(
        &'a self,
        dir: &'a std::sync::Arc<str>,
        after: u64,
    ) -> impl Future<Output = Option<(listing::Listed, Instant)>> + Send + 'a {
        match self
            .listings
            .join_or_send(dir, after, || self.client.list_children(dir))
        {
            Turn::Share(answer) => listing::shared_answer(answer).left_future(),
            Turn::After(answer) => listing::shared_answer(answer)
                .map(|_| None)
                .left_future()
                .right_future(),
            Turn::Send(sent, request) => {
                Counters::bump(&self.counters.listings);
                request
                    .map(move |children| Some(sent.answer(children)))
                    .right_future()
                    .right_future()
            }
        }
    }

    /// What a listing turn's answer comes to, fed to the lease clock.
    fn settle_listing(&self, dir: &str, answer: Option<(listing::Listed, Instant)>) -> Settled {
        let Some((listed, sent)) = answer else {
            return Settled::Again { pause: false };
        };
        match listed {
            Ok(queue) => {
                self.answered(Answer::Read, sent);
                Settled::Listed(Ok(queue))
            }
            Err(e) if outcome_unknown(&e) => Settled::Again { pause: true },
            Err(e) => {
                if write_error_answer(&e).is_some() {
                    self.answered(Answer::Read, sent);
                }
                Settled::Listed(Err(Error::zk("list", dir, e)))
            }
        }
    }

    /// Creates `dir` and its missing parents (`mkdir -p`), as containers unless the session
    /// asked for persistent directories.
    pub(crate) async fn make_dirs(&self, dir: &str) -> Result<()> {
        let acls = zk::Acls::new(&self.acls);
        let options = self.directory_mode.with_acls(acls);
        loop {
            let sent = self.clock.instant();
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
            let sent = self.clock.instant();
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
            let sent = self.clock.instant();
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
        if self.clock.syncs_prove() || !self.clock.vouching_matters() {
            let sent = self.clock.instant();
            let ok = self.client.sync("/").await.is_ok();
            if ok {
                self.answered(Answer::Synced, sent);
            }
            return ok;
        }
        Counters::bump(&self.counters.keepalive_transactions);
        // One of our own nodes if we hold one (readable by us whatever the ACLs above it; a
        // check of one that was deleted is an error transaction, a proof all the same, and
        // ends that lease), else the session's root. A node nobody watches yet first: the
        // check is then what tells its holder of a deletion.
        let held = self.clock.keepalive_target();
        let target = held.as_ref().map_or("/", |h| h.node.as_str());
        let mut writer = self.client.new_multi_writer();
        if writer.add_check_version(target, -1).is_err() {
            return false;
        }
        let sent = self.clock.instant();
        let source = match writer.commit().await {
            Ok(_) => {
                self.answered(Answer::Committed, sent);
                return true;
            }
            Err(zk::MultiWriteError::OperationFailed { source, .. }) => source,
            Err(zk::MultiWriteError::RequestFailed { source }) => source,
        };
        if let (zk::Error::NoNode, Some(held)) = (&source, &held) {
            // Our node is gone while our session lives: someone deleted it. That lease ends
            // now, before the proof renews the clock for the session's other leases.
            held.lose(LossReason::NodeDeleted);
        }
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
        let sent = self.clock.instant();
        if self.clock.syncs_prove() {
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
        let deadline = Instant::now() + self.session_timeout();
        loop {
            match tokio::time::timeout_at(deadline, self.confirm_once(node)).await {
                Err(_) => {
                    return Err(Error::NoAnswer {
                        operation: "confirm",
                        path: node.to_string(),
                        waited: self.session_timeout(),
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
