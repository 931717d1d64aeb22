//! Leader election: the lock's queue, seen from the candidates' side. The user-facing
//! explanation (guarantees, election or lock) is on [`Election`].

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::error::{Error, LossReason, Result};
use crate::lease::{Claim, Lease, LeaseState};
use crate::node::{self, Kind, OwnerInfo};
use crate::queue::{self, Owner, Queue};
use crate::session::{NodeWatch, Session, Shared};
use crate::token::FencingToken;

/// A leader election under the directory `path`: several candidates campaign, exactly one
/// leads at a time. Made by [`Session::election`].
///
/// # Guarantees
///
/// - **At most one leader that knows it leads.** Candidates queue as for a
///   [`Lock`](crate::Lock), and the head of the queue leads. A leader is told its leadership
///   is lost ([`Leadership::lost`], [`Leadership::state`]) *before* the ensemble can elect
///   anyone else, also when it is partitioned from the ensemble: the session's lease clock
///   runs out before the server can expire the session.
/// - **Order.** Candidates are elected in the order they campaigned;
///   [`Leadership::resign`] hands over to the next in line.
/// - **Fencing.** Each leadership's [`token`](Leadership::token) is larger than every earlier
///   leader's. Pass it with every write and let the resource refuse older ones
///   ([`Fence`](crate::Fence), or [`Lease::fenced_write`] for data in ZooKeeper).
/// - **A new session is a new candidate.** A candidate's node belongs to its ZooKeeper
///   session. After it expires, the [`Session`] opens a new one and [`Election::run`]
///   campaigns again on it: the new candidate queues behind whatever node the dead session
///   left, and never takes that node for its own (Curator's `LeaderLatch` did, and elected two
///   leaders: CURATOR-696).
/// - **A server failover costs nothing.** The crash of a ZooKeeper server, the ensemble's
///   leader included, changes no leadership when the sessions reconnect within their lease.
///
/// The limit is the lock's: a leader that stalls (a GC pause) between looking at its state and
/// acting may act after it lost. Only a resource that checks the token can stop that.
///
/// # Election or lock?
///
/// Both are the same fair queue of ephemeral sequential nodes, fenced the same way. They
/// differ in use:
///
/// | | [`Lock`](crate::Lock) | `Election` |
/// |---|---|---|
/// | held | for one piece of work, then released | for the life of the process |
/// | the others | wait to do *their* work | stand by to take over the *same* work |
/// | who holds it | [`Lock::contenders`](crate::Lock::contenders) | [`leader`](Self::leader); [`observe`](Self::observe) follows every change |
/// | the loop | yours | [`run`](Self::run): campaign, lead, queue again, until shut down |
///
/// Use a lock when the question is "may I do this now?", an election when it is "which of
/// us is in charge?". The job-scheduler recipe (`recipes/scheduler_leader.rs`) shows an
/// election with failover and fenced writes.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// let election = session.election("/election/scheduler");
/// let leadership = election.campaign("node-a").await?;
/// println!("leading with token {}", leadership.token());
/// tokio::select! {
///     reason = leadership.lost() => eprintln!("lost leadership: {reason}"),
///     _ = tokio::signal::ctrl_c() => leadership.resign().await?,
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    session: Session,
    path: String,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("path", &self.path)
            .finish()
    }
}

/// The current leader of an election, as others see it.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// match session.election("/election/scheduler").leader().await? {
///     Some(leader) => println!("{} leads with token {}", leader.id.as_deref().unwrap_or("?"), leader.token),
///     None => println!("nobody leads"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The candidate id given to [`Election::campaign`] (or what another client stored).
    pub id: Option<String>,
    /// The leader's node.
    pub node: String,
    /// The leadership's fencing token.
    pub token: FencingToken,
    /// The leader's ZooKeeper session.
    pub session_id: i64,
    /// The owner data of the leader's node.
    pub owner: OwnerInfo,
}

/// Being the leader. The guard of [`Election::campaign`]: dropping it resigns.
///
/// ```no_run
/// # async fn f(session: zkfence::Session, jobs: zkfence::Fence) -> zkfence::Result<()> {
/// let leadership = session.election("/election/scheduler").campaign("node-a").await?;
/// // Every job the leader runs carries its token; the job store refuses older tokens, so a
/// // deposed leader that has not noticed yet cannot write.
/// jobs.admit(leadership.token()).expect("newest leader");
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the leadership is given up at once"]
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
    id: String,
    /// One proclaim at a time, so values land in the order they were proclaimed.
    proclaiming: tokio::sync::Mutex<()>,
}

impl Leadership {
    /// This leadership's fencing token: larger than every earlier leader's.
    pub fn token(&self) -> FencingToken {
        self.lease.token()
    }

    /// The candidate id we campaigned with.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the leadership stands; see [`Lease::state`].
    pub fn state(&self) -> LeaseState {
        self.lease.state()
    }

    /// Resolves when leadership is lost, with the reason: before any other candidate can be
    /// elected. Cancel safe.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    ///
    /// # Notable errors
    /// None: it resolves with the reason instead.
    pub async fn lost(&self) -> LossReason {
        self.lease.lost().await
    }

    /// Hands leadership to the next candidate in line: deletes our node and waits until the
    /// ensemble confirms it. Dropping a `Leadership` resigns too, in the background.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped the delete goes on in the background.
    ///
    /// # Notable errors
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`]: the session ended, which
    ///   removed the node (leadership is given up either way).
    pub async fn resign(self) -> Result<()> {
        tracing::info!(id = %self.id, token = %self.token(), "resigning leadership");
        self.lease.release().await
    }

    /// Advertises `value` as this leader's, without giving up leadership (etcd's
    /// `Election.Proclaim`): [`Election::leader`] and [`Election::observe`] show it as
    /// [`OwnerInfo::proclaimed`], and the CLI's `leader` prints it. Each proclaim replaces
    /// the last.
    ///
    /// The value is written into our node's data, next to the owner lines, with a
    /// version-checked write: it lands only while our node exists, so a deposed leader
    /// cannot advertise (a write that finds the node changed reads it again and retries).
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let leadership = session.election("/election/api").campaign("node-a").await?;
    /// leadership.proclaim(b"http://10.0.0.7:8080").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Once sent, a dropped proclaim may still have been written: read
    /// [`Election::leader`] to know.
    ///
    /// # Notable errors
    /// - [`Error::LockLost`] if leadership is lost, or our node is gone; nothing was written.
    /// - [`Error::NoAuth`] if the node's ACL forbids writing.
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`].
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<()> {
        let value = value.as_ref();
        let _turn = self.proclaiming.lock().await;
        let shared = self.lease.session().shared();
        let node = self.lease.path();
        loop {
            self.lease.check_held()?;
            let Some((data, stat)) = shared.data(node).await? else {
                return Err(self.lease.node_gone());
            };
            let data = OwnerInfo::with_proclaimed(&data, value);
            match shared.set_data(node, &data, stat.version).await {
                Ok(_) => {
                    tracing::info!(id = %self.id, token = %self.token(), bytes = value.len(), "proclaimed");
                    return Ok(());
                }
                Err(zookeeper_client::Error::NoNode) => return Err(self.lease.node_gone()),
                // Written in between (or by our own attempt whose answer was lost): read again.
                Err(zookeeper_client::Error::BadVersion) => {}
                Err(e) if crate::session::outcome_unknown(&e) => {
                    crate::session::pause_before_retry().await
                }
                Err(e) => return Err(Error::zk("proclaim", node, e)),
            }
        }
    }

    /// The underlying lease, e.g. for [`Lease::fenced_write`].
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// Work done only while leading, for [`Election::run`].
///
/// `lead` is called each time this candidate becomes leader. When leadership is lost, the
/// future is dropped (cancelled) at its next await point; when `lead` returns, leadership is
/// given up and the candidate queues again.
///
/// An async trait method, through the `async-trait` crate: implement it under
/// [`#[zkfence::async_trait]`](crate::async_trait), re-exported so a program needs no
/// dependency of its own for it.
///
/// ```
/// use zkfence::{LeaderTask, Leadership};
/// struct Scheduler;
/// #[zkfence::async_trait]
/// impl LeaderTask for Scheduler {
///     async fn lead(&mut self, leadership: Leadership) -> zkfence::Result<()> {
///         loop {
///             // run due jobs, passing leadership.token() to every write
///             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
///         }
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait LeaderTask: Send {
    /// Leads until done, or until cancelled by the loss of leadership.
    async fn lead(&mut self, leadership: Leadership) -> Result<()>;
}

impl Session {
    /// A handle on the leader election under the directory `path`.
    ///
    /// Give an election a path of its own. Its candidates queue as a plain lock's contenders
    /// do (the layout of Curator's `LeaderSelector`), so on a lock's path the leader would
    /// hold the lock and the lock's holder would lead; the names cannot tell them apart, so
    /// that mix is not refused. A semaphore's path is refused ([`Error::KindConflict`]).
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let leadership = session.election("/election/scheduler").campaign("node-a").await?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, path: &str) -> Election {
        Election {
            session: self.unbound(),
            path: path.to_string(),
        }
    }
}

impl Election {
    /// The election directory.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn queue(&self, id: &str) -> Queue {
        Queue::new(self.session.clone(), &self.path, Kind::Lock)
            .with_recipe(crate::telemetry::Recipe::Election)
            .with_owner(Owner::ThisProcess {
                id: Some(id.to_string()),
                revocable: false,
            })
    }

    /// Joins the election as candidate `id` and waits until it leads.
    ///
    /// A program that campaigns in its own loop (rather than through [`run`](Self::run),
    /// which does this) campaigns again after an error that can pass,
    /// [`Error::is_retryable`]: notably [`Error::SessionExpired`], which the first campaign
    /// after its session lapsed returns while the `Session` opens a new one.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let election = session.election("/election/scheduler");
    /// loop {
    ///     let leadership = match election.campaign("node-a").await {
    ///         Ok(leadership) => leadership,
    ///         Err(e) if e.is_retryable() => continue, // e.g. the session expired meanwhile
    ///         Err(e) => return Err(e),
    ///     };
    ///     // lead until leadership.lost(), then campaign again
    /// #   drop(leadership);
    /// }
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped campaign (also one under `tokio::time::timeout`) leaves no node
    /// behind.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`], [`Error::NoAuth`] for bad input; nothing is left behind.
    /// - [`Error::SessionExpired`]: the session expired while we waited; campaign again (the
    ///   `Session` opens a new one unless reopening is off). [`Error::SessionClosed`].
    /// - [`Error::NodeDeleted`] if someone deleted our node while we waited.
    /// - [`Error::NoAnswer`] if the ensemble did not vouch for the session when elected.
    /// - [`Error::KindConflict`] if a semaphore uses the path.
    pub async fn campaign(&self, id: &str) -> Result<Leadership> {
        let queue = self.queue(id);
        crate::telemetry::candidate(&queue.tag());
        let grant = queue.join(None).await?;
        tracing::info!(election = %self.path, %id, token = grant.czxid, "elected leader");
        let lease = Lease::new(self.path.as_str().into(), grant, Claim::none());
        Ok(Leadership {
            lease,
            id: id.to_string(),
            proclaiming: tokio::sync::Mutex::new(()),
        })
    }

    /// The current leader, or `None` if nobody campaigns. Reads only the head of the queue,
    /// after a `sync` (a round trip to the ZooKeeper leader, no transaction): a server behind
    /// the ZooKeeper leader (a follower cut off from it still answers reads) does not report
    /// nobody leading for an election won before the call. (A ZooKeeper leader itself cut
    /// off from its peers answers a `sync` alone for up to about one tickTime after a new
    /// one exists.)
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`] for a bad path; [`Error::NoAuth`] if the ACL forbids reading.
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`].
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        node::validate_path(&self.path)?;
        let contenders = queue::list_contenders_now(&self.session.shared(), &self.path, 1).await?;
        Ok(contenders.into_iter().next().map(|c| LeaderInfo {
            id: c.owner.id.clone(),
            node: c.node,
            token: c.token,
            session_id: c.session_id,
            owner: c.owner,
        }))
    }

    /// Follows leader changes: the first item is the leader now (as of the call, as
    /// [`leader`](Self::leader): our server catches up first), then one item per change
    /// (`None` when nobody leads), in the order of the elections (tokens only grow), and one
    /// per value the leader [proclaims](Leadership::proclaim), in the order proclaimed. A
    /// leadership or a value that lasts less than one round trip may be skipped. Works from any session, also
    /// one that never campaigns.
    ///
    /// Observers see the ensemble's view, which lags the candidates' own: a partitioned or
    /// crashed leader is reported until the ensemble expires its session (the leader itself
    /// has heard [`Leadership::lost`] by then). Every observer is woken by every change of the
    /// candidate list, so keep observers few. The stream ends after an error item, e.g. when
    /// the observing session expires. [`LeaderChanges`] is also a `futures::Stream`.
    pub fn observe(&self) -> LeaderChanges {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = self.session.shared().clone();
        let path = self.path.clone();
        let task = tokio::spawn(async move {
            // The head's name and data last sent: an item goes out when either changes.
            let mut last: Option<Option<(String, Vec<u8>)>> = None;
            // The first item is the leader as of the call, not as of a server behind the
            // ZooKeeper leader: our server catches up first (see `leader`).
            if let Err(err) = shared.sync(&path).await {
                let _ = tx.send(Err(err));
                return;
            }
            loop {
                let (head, children) = match shared.list_watched(&path).await {
                    Ok(Some((children, watch))) => {
                        (node::queue_order(children).into_iter().next(), Some(watch))
                    }
                    Ok(None) => (None, None),
                    Err(err) => {
                        let _ = tx.send(Err(err));
                        return;
                    }
                };
                // The head's data is read with a watch every round, so a proclaim that came
                // while we looked at the children is seen at the next read.
                let led = head.is_some();
                let (info, mut data_watch) = match head {
                    None => (None, None),
                    Some((_, name)) => match read_leader(&shared, &path, &name).await {
                        Some((info, watch)) => (Some(info), Some(watch)),
                        // The head left before we read it: its deletion fires the children
                        // watch, and we look again.
                        None => (None, None),
                    },
                };
                let seen = info.as_ref().map(|i| (i.node.clone(), i.owner.raw.clone()));
                let vanished = led && info.is_none();
                if !vanished && last.as_ref() != Some(&seen) {
                    if tx.send(Ok(info)).is_err() {
                        return;
                    }
                    last = Some(seen);
                }
                let changed = match (children, &mut data_watch) {
                    (Some(children), Some(data)) => tokio::select! {
                        changed = children.changed() => changed,
                        changed = data.changed() => changed.map(drop),
                    },
                    (Some(children), None) => children.changed().await,
                    // No directory yet: poll until a candidate creates it.
                    (None, _) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Ok(())
                    }
                };
                if let Err(err) = changed {
                    let _ = tx.send(Err(err));
                    return;
                }
            }
        });
        LeaderChanges { rx, task }
    }

    /// Campaigns as `id` and runs `task` while leading, until `shutdown` resolves: Curator's
    /// `LeaderSelector` with auto-requeue, for services that run for months.
    ///
    /// - When leadership is **lost** (the lease clock ran out, our node was deleted, or the
    ///   session expired), `lead` is cancelled — dropped at its next await point — and the
    ///   candidate queues again: after an expiry on the new ZooKeeper session the [`Session`]
    ///   opens. On a lapse of the clock our node stays until `lead` is dropped
    ///   ([`Lease::keep_node_until_released`](crate::Lease::keep_node_until_released)), so no
    ///   other candidate is elected while it still runs.
    /// - When `lead` **returns** `Ok`, leadership is handed on: our node is deleted, so the
    ///   next candidate in line is elected, and this one queues again behind it. (Alone in the
    ///   election, it is elected again at once: a `lead` that returns immediately then spins.)
    /// - A campaign that fails for a reason that can pass (our waiting node deleted, the
    ///   session expired or went quiet) is retried after a pause that doubles from 100 ms up
    ///   to 5 s, and starts over at 100 ms after the next leadership.
    /// - When `shutdown` resolves, `lead` is cancelled and leadership resigned; `run` returns
    ///   `Ok` once the ensemble has deleted our node, or after the session timeout if no
    ///   server answers (the lease clock has then given leadership up too).
    ///
    /// `lead` must not keep the [`Leadership`] beyond its return: `run` gives it up then.
    ///
    /// # Cancel safety
    /// Dropping the future cancels `lead` and resigns in the background, like dropping a
    /// [`Leadership`].
    ///
    /// # Notable errors
    /// - [`Error::AuthFailed`], [`Error::SessionClosed`]: the session ended for good (also
    ///   [`Error::SessionExpired`] when the session does not reopen, see
    ///   [`SessionOptions::reopen_after_expiry`](crate::SessionOptions::reopen_after_expiry)).
    /// - [`Error::InvalidPath`], [`Error::NoAuth`]: bad input, nothing to retry.
    /// - Any error `lead` returns, after leadership was handed on.
    pub async fn run<T: LeaderTask>(
        &self,
        id: &str,
        task: &mut T,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        enum Ended {
            Shutdown,
            Lost(LossReason),
            Returned(Result<()>),
        }
        tokio::pin!(shutdown);
        let mut pause = RETRY_PAUSE_MIN;
        loop {
            let leadership = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                leadership = self.campaign(id) => match leadership {
                    Ok(leadership) => leadership,
                    Err(err) if self.may_pass(&err) => {
                        tracing::warn!(%id, %err, retry_in_ms = pause.as_millis() as u64,
                            "campaign failed: queueing again");
                        tokio::select! {
                            _ = &mut shutdown => return Ok(()),
                            _ = tokio::time::sleep(pause) => {}
                        }
                        pause = (pause * 2).min(RETRY_PAUSE_MAX);
                        continue;
                    }
                    Err(err) => return Err(err),
                },
            };
            pause = RETRY_PAUSE_MIN;
            // The node belongs to the ZooKeeper session of this leadership, whatever the
            // Session does after an expiry.
            let leadership_session = leadership.lease().session().shared();
            let node = leadership.lease().path().to_string();
            // A lapse of the clock must not delete our node before `lead` is dropped: the
            // next candidate could be elected while our task still runs (it is dropped only
            // when this select is next polled). The drop of the Leadership, with `lead`,
            // releases the node; the session's expiry still bounds it.
            leadership.lease.keep_node_until_released();
            let watch = leadership.lease.loss_watch();
            let token = leadership.token();
            let ended = tokio::select! {
                _ = &mut shutdown => Ended::Shutdown,
                reason = watch.lost() => Ended::Lost(reason),
                result = task.lead(leadership) => Ended::Returned(result),
            };
            // `lead` (and the Leadership it owned) has been dropped by now, which started a
            // background release; the cases below only decide what to wait for.
            match ended {
                Ended::Lost(reason) => {
                    tracing::warn!(%id, %token, %reason, "leadership lost: leader task cancelled");
                    if reason.is_session_terminal() && !self.session.reopens() {
                        return Err(leadership_session
                            .session_ended()
                            .unwrap_or(Error::SessionClosed));
                    }
                    // The Leadership, dropped with `lead`, deletes the node once a server
                    // answers (or it went with the session); after an expiry the next
                    // campaign waits for the new session.
                }
                Ended::Shutdown => {
                    tracing::info!(%id, %token, "shutting down: resigning leadership");
                    hand_on(&leadership_session, &node).await;
                    return Ok(());
                }
                Ended::Returned(result) => {
                    hand_on(&leadership_session, &node).await;
                    result?;
                    tracing::info!(%id, %token, "leader task finished: leadership handed on, queueing again");
                }
            }
        }
    }

    /// True if a failed campaign may succeed when tried again: our waiting node was deleted
    /// by someone, the session went quiet at the grant, or it expired and the `Session`
    /// opens a new one.
    fn may_pass(&self, err: &Error) -> bool {
        match err {
            Error::NodeDeleted { .. }
            | Error::NoAnswer { .. }
            | Error::LockDirectoryDeleted { .. } => true,
            Error::SessionExpired => self.session.reopens(),
            _ => false,
        }
    }
}

/// The first pause before a failed campaign is tried again, and the most it doubles to.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(5);

/// Waits until our leadership node is deleted, so the next candidate in line is elected
/// before we queue again or return. Bounded by the session timeout: if no server answers
/// for that long, the lease clock has ended the leadership anyway, and the node goes when
/// a server answers or the session expires.
async fn hand_on(shared: &Shared, node: &str) {
    match tokio::time::timeout(shared.session_timeout(), shared.delete_until_gone(node)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::debug!(%node, %err, "leadership node not deleted: the session ended, which removes it")
        }
        Err(_) => {
            tracing::warn!(%node, "no answer while resigning; the node goes with the session")
        }
    }
}

/// The leader whose node is `name`, and a watch on its data (which a proclaim changes).
async fn read_leader(shared: &Shared, dir: &str, name: &str) -> Option<(LeaderInfo, NodeWatch)> {
    let node = format!("{dir}/{name}");
    let (data, stat, watch) = shared.data_watched(&node).await.ok()??;
    let owner = OwnerInfo::decode(&data);
    let info = LeaderInfo {
        id: owner.id.clone(),
        token: FencingToken::from_zxid(stat.czxid),
        node,
        session_id: stat.ephemeral_owner,
        owner,
    };
    Some((info, watch))
}

/// The stream of leader changes from [`Election::observe`]. Dropping it stops observing.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// let mut changes = session.election("/election/scheduler").observe();
/// while let Some(change) = changes.next().await {
///     match change? {
///         Some(leader) => println!("leader: {} (token {})", leader.node, leader.token),
///         None => println!("no leader"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderChanges {
    rx: mpsc::UnboundedReceiver<Result<Option<LeaderInfo>>>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderChanges {
    /// The next leader change: `Some(Ok(None))` means nobody leads. `None` after an error
    /// was delivered (e.g. the session expired).
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet taken stays queued for the next call.
    ///
    /// # Notable errors
    /// - [`Error::SessionExpired`], [`Error::SessionClosed`], [`Error::AuthFailed`] as the
    ///   last item when the observing session ends.
    /// - [`Error::NoAuth`] if the election directory's ACL forbids reading.
    pub async fn next(&mut self) -> Option<Result<Option<LeaderInfo>>> {
        self.rx.recv().await
    }
}

impl futures::Stream for LeaderChanges {
    type Item = Result<Option<LeaderInfo>>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for LeaderChanges {
    fn drop(&mut self) {
        self.task.abort();
    }
}
