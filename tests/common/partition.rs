//! One trial of the lock's first promise under a client partition, shared by
//! `lock_faults.rs` (plaintext) and `security.rs` (over TLS and SASL): the holder learns it
//! lost the lock before the ensemble can give it to anyone.
//!
//! The holder reaches the ensemble through a proxy, a waiter is queued behind it, and an
//! admin session watches the holder's node (from the ZooKeeper leader where it can, where the
//! expiry is decided and committed first). The proxy blackholes right after a keepalive was
//! answered; then the holder must hear `Lost` well before the node is deleted, and the waiter
//! must not be granted before the deletion.
//!
//! The bound: the partition starts right after a keepalive sent at `s` was answered, so the
//! server got that touch and none later, and the leader cannot expire the session before
//! `s + T`. The clock vouches for touches sent at least `T/4 + slack` before its latest
//! proof (`s`), until `touch + T - slack`: it lapses by `s + T - T/4 - 2 slack = s + 0.65 T`.
//! So the deletion comes at least `0.35 T` after the lapse; `T/5` is asserted, which leaves
//! `0.15 T` for our timer running late on a loaded machine. A clock with no margin lapses at
//! `s + T`, at most the report interval and the expiry rounding (1.5 tickTime) before the
//! deletion: it fails this.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use zkfence::zookeeper_client as zk;
use zkfence::{Lease, LeaseState, LossReason, Session};
use zkfence_testcontainers::FaultProxy;

use super::{children, eventually, within};

/// Generous bound for a step of a few round trips: a broken build fails instead of hanging.
const STEP: Duration = Duration::from_secs(10);

/// The sessions of one trial. `holder` reaches the ensemble through `proxy` only; all of them
/// have the session timeout `t`.
pub struct Setup<'a> {
    pub admin: &'a Session,
    pub waiter: &'a Session,
    pub holder: &'a Session,
    pub proxy: &'a FaultProxy,
    pub dir: &'a str,
    pub t: Duration,
}

/// What one trial saw, from the moment of the cut.
pub struct Trial {
    t: Duration,
    cut: Instant,
    reason: LossReason,
    lost_at: Instant,
    deleted_at: Instant,
    deletion: zk::EventType,
    granted_at: Instant,
    /// When `state()` first said `Suspended` and `Lost`, sampled every 5 ms.
    sampled: (Option<Instant>, Option<Instant>),
    old_token: zkfence::FencingToken,
    new_lease: Lease,
}

/// Runs one trial: the holder acquires, the waiter queues, the proxy is blackholed after a
/// keepalive, and everyone's view is timed until the waiter holds.
pub async fn partition_the_holder(s: Setup<'_>) -> Trial {
    let Setup {
        admin,
        waiter,
        holder,
        proxy,
        dir,
        t,
    } = s;
    let lease = Arc::new(holder.lock(dir).acquire().await.unwrap());
    let lock = waiter.lock(dir);
    let waiting = tokio::spawn(async move { lock.acquire().await.map(|l| (Instant::now(), l)) });
    eventually(STEP, "the waiter is enqueued", || async {
        children(admin, dir).await.len() == 2
    })
    .await;
    let (stat, deleted) = admin
        .client()
        .check_and_watch_stat(lease.path())
        .await
        .unwrap();
    assert!(stat.is_some(), "the holder's node exists");
    let deletion = tokio::spawn(async move {
        let event = deleted.changed().await;
        (Instant::now(), event.event_type)
    });
    let sampler = sample_states(lease.clone());

    within(
        STEP,
        "a keepalive renews the clock",
        holder.valid_until_changed(),
    )
    .await
    .expect("renewed, not lapsed");
    proxy.blackhole();
    let cut = Instant::now();
    let reason = within(2 * t, "the holder hears lost", lease.lost()).await;
    let lost_at = Instant::now();
    let (deleted_at, event) = within(2 * t, "the server deletes the node", deletion)
        .await
        .unwrap();
    let (granted_at, new_lease) = within(2 * t, "the waiter is granted", waiting)
        .await
        .unwrap()
        .unwrap();
    let sampled = within(STEP, "the sampler ends", sampler).await.unwrap();
    Trial {
        t,
        cut,
        reason,
        lost_at,
        deleted_at,
        deletion: event,
        granted_at,
        sampled,
        old_token: lease.token(),
        new_lease,
    }
}

impl Trial {
    /// Asserts the promise, naming the trial `label` in every failure; then releases the
    /// waiter's lease.
    pub async fn assert_the_holder_learned_first(self, label: &str) {
        eprintln!(
            "{label}: after the cut, lost at {:?}, node deleted at {:?}, waiter granted at {:?}",
            self.lost_at - self.cut,
            self.deleted_at - self.cut,
            self.granted_at - self.cut
        );
        assert_eq!(self.reason, LossReason::ClockLapsed, "{label}");
        assert_eq!(self.deletion, zk::EventType::NodeDeleted, "{label}");
        assert!(
            self.lost_at < self.deleted_at,
            "{label}: lost after the deletion"
        );
        assert!(
            self.deleted_at - self.lost_at >= self.t / 5,
            "{label}: lost only {:?} before the server deleted the node; the clock promises \
             about 0.35 T",
            self.deleted_at - self.lost_at
        );
        // Two sessions hear of one commit: the waiter, on a follower, after the admin on the
        // ZooKeeper leader, by a hop (~0.1 ms measured). A small tolerance keeps the race of
        // two notifications out; a grant before the deletion would be ~0.35 T early.
        assert!(
            self.deleted_at <= self.granted_at + Duration::from_millis(20),
            "{label}: granted {:?} before the deletion was seen",
            self.deleted_at - self.granted_at
        );
        let (suspended, sampled_lost) = self.sampled;
        assert!(
            sampled_lost.unwrap() < self.deleted_at,
            "{label}: state() said Lost only after the deletion"
        );
        // The client library reports the disconnection after about 0.4 T of silence; the
        // lease clock may lapse first, so the lease goes through Suspended only sometimes,
        // and then before it is lost.
        if let Some(suspended) = suspended {
            assert!(suspended < self.lost_at, "{label}");
        }
        assert!(self.new_lease.token() > self.old_token, "{label}");
        self.new_lease.release().await.unwrap();
    }
}

/// Samples a lease's state every few milliseconds, recording when it first was in each state.
fn sample_states(lease: Arc<Lease>) -> JoinHandle<(Option<Instant>, Option<Instant>)> {
    tokio::spawn(async move {
        let (mut suspended, mut lost) = (None, None);
        loop {
            match lease.state() {
                LeaseState::Suspended if suspended.is_none() => suspended = Some(Instant::now()),
                LeaseState::Lost(_) => {
                    lost.get_or_insert(Instant::now());
                    return (suspended, lost);
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}
