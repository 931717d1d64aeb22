//! The lease clock: until when the ensemble cannot have expired our session, and the registry
//! of the leases that live on it. The task that renews it is [`keeper`](super::keeper).
//!
//! # The rule
//!
//! Only a ZooKeeper **leader** expires sessions, at (the time it last processed a touch of the
//! session) + `T`, rounded up to its next tick; a **new** leader sets every session's expiry
//! to (its own start + `T`). A request touches the session on the server that receives it; a
//! follower reports the sessions its clients touched to the leader in its replies to the
//! leader's pings (every `tickTime/2`), on the same connection on which it forwards writes
//! and syncs. Two kinds of server go on answering after they should not be trusted:
//!
//! - a follower cut off from its leader answers reads (for `syncLimit × tickTime`);
//! - a leader cut off from its peers answers `sync` at once, with no quorum round, until it
//!   notices it lost its quorum, which is up to about one `tickTime` *after* the others have
//!   elected a new leader (measured here up to 0.87 `tickTime`).
//!
//! Neither can commit a write: a write is answered only after a quorum acknowledged it, and
//! a quorum that acknowledged it after we sent it had not yet moved to a newer leader. So:
//!
//! - every request that gets an answer is a **touch**: it reached the server after its send
//!   time and before its answer arrived;
//! - a **committed** write ([`Answer::Committed`]: a success, or an error the leader proposes
//!   as an error transaction: `NoNode`, `NodeExists`, `BadVersion`, `NotEmpty`) sent at `s`
//!   is a **proof**: the leader that ordered it had its quorum after `s`, so no newer leader
//!   existed before `s` (any newer one sets deadlines to its start + `T`, later still), and
//!   it had processed every ping reply our server sent it before, in particular those that
//!   reported the touches our server *received* at least `tickTime/2` before `s`. ZooKeeper
//!   clamps `T` to at least `2 × tickTime`, so `T/4` bounds `tickTime/2`: the *report lag* is
//!   `T/4 + slack`. A touch counts as received by the time its **answer arrived** (a request
//!   held back in the client or the network reaches the server after its send time);
//! - an answered `sync` ([`Answer::Synced`]) proves less: a deposed leader answers it. Unless
//!   the servers' `tickTime` is declared (`SessionOptions::server_tick_time`), it is a touch
//!   only. With it declared, the deposed leader answers for at most `W = 2 × tickTime` after a
//!   new leader started (one tick for its once-per-tick quorum check, one for its scheduling,
//!   the last acknowledgement's fsync and a GC pause), so a sync sent at `s` proves the new
//!   leader started after `s − W`, and vouches for at most `s + T − W`;
//! - reads, and answers a follower can give on its own (`NoAuth` with eager ACL checks), are
//!   touches only.
//!
//! ```text
//! valid_until = t* + T - slack                       (committed proof sent at s*)
//! valid_until = min(t* + T, s* + T - W) - slack      (sync proof, tickTime declared)
//!     t* = the send time of the latest touch whose answer arrived at or before s* - report lag
//! ```
//!
//! The connect request counts as a proven touch at its send time (the leader creates the
//! session in a transaction). A touch on a connection to another server before a reconnect is
//! safe to use: the reconnect revalidates the session at the leader later still. `slack` (the
//! `lease_margin` option, `T/20` by default) covers timer jitter and the leader's ping period
//! running late.
//!
//! The keeper sends a keepalive every `T/6` unless a proof was sent meanwhile (a busy
//! session's own writes stand in for it). While the session has a node in a queue (a lease
//! held or an acquire in progress) it is a **transaction** that changes nothing: a `multi`
//! with one `check` of a node we hold (else of the session's root), which the leader commits
//! like any write (by default; with `server_tick_time` declared, a `sync`). An idle session's keepalive is a
//! `sync`: a touch that its next acquire's create then proves. Without other traffic `t*` is
//! the keepalive before last and a holder is told `Lost` about `0.6 T` after its last answered
//! keepalive was sent; the leader cannot expire the session before about `0.8 T` after it.
//!
//! When `valid_until` passes without a renewal the clock **lapses**: every lease granted
//! before is lost, and their nodes are deleted as soon as the ensemble answers again (the
//! session may have survived). A later renewal starts a new *epoch*; leases of an older epoch
//! stay lost, whatever late answer arrives.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::LossReason;

use super::listing::FastHash;
use super::{SessionState, Shared};

/// What an answered request proves, as the lease clock counts it (the module docs' rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A read (getChildren, exists, getData), or an answer a server can give without the
    /// leader (`NoAuth`): a touch only.
    Read,
    /// An answered `sync`: a touch, and a proof bounded by the deposed-leader window when the
    /// servers' tickTime is declared.
    Synced,
    /// A write the leader committed (also one it refused as an error transaction): a touch
    /// and a proof.
    Committed,
}

/// A snapshot of the lease clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// Until when the server cannot have expired the session.
    pub(crate) valid_until: Instant,
    /// Incremented whenever the clock is renewed after it lapsed: a lease granted in an older
    /// epoch has lost.
    pub(crate) epoch: u64,
    /// `valid_until` passed without a renewal.
    pub(crate) lapsed: bool,
    pub(crate) state: SessionState,
}

impl Clock {
    /// True if a lease granted in `epoch` may still be held at `now`.
    pub(crate) fn holds(&self, epoch: u64, now: Instant) -> bool {
        !self.state.is_terminal() && !self.lapsed && self.epoch == epoch && now < self.valid_until
    }

    pub(crate) fn loss_reason(&self) -> LossReason {
        match self.state {
            SessionState::Expired => LossReason::SessionExpired,
            SessionState::Closed | SessionState::AuthFailed => LossReason::SessionClosed,
            _ => LossReason::ClockLapsed,
        }
    }

    /// Moves `valid_until` forward to `until`; after a lapse only if `until` is still ahead
    /// of `now`, and then in a new epoch. Returns true if it changed.
    pub(crate) fn extend(&mut self, until: Instant, now: Instant) -> bool {
        if self.state.is_terminal() {
            return false;
        }
        if self.lapsed {
            if until <= now {
                return false;
            }
            self.lapsed = false;
            self.epoch += 1;
            self.valid_until = until;
            return true;
        }
        if until <= self.valid_until {
            return false;
        }
        self.valid_until = until;
        true
    }

    /// Marks the clock lapsed if `valid_until` has passed. Returns true if it changed.
    pub(crate) fn lapse_if_due(&mut self, now: Instant) -> bool {
        if !self.lapsed && now >= self.valid_until {
            self.lapsed = true;
            return true;
        }
        false
    }
}

/// A touch: when the request was sent, and when its answer arrived (the server received it
/// in between).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Touch {
    sent: Instant,
    arrived: Instant,
    /// The arrival of the first answer merged into this touch (see `record_touch`).
    first_arrived: Instant,
}

/// The touches and proofs seen so far, and what they vouch for: the rule of the module docs,
/// free of I/O so it can be tested alone.
#[derive(Debug)]
pub(crate) struct Evidence {
    timeout: Duration,
    report_lag: Duration,
    slack: Duration,
    /// How long a deposed leader may go on answering syncs after a new leader started
    /// (`2 × tickTime`), if the servers' tickTime was declared; `None`: syncs prove nothing.
    deposed_window: Option<Duration>,
    /// Answered requests not yet known to be reported, by arrival; the first is the latest
    /// proven touch.
    touches: VecDeque<Touch>,
    latest_proof: Option<Instant>,
}

impl Evidence {
    /// Evidence for a session of timeout `timeout` whose connect request was sent at
    /// `connect_sent` (a proven touch).
    pub(crate) fn new(
        timeout: Duration,
        slack: Duration,
        deposed_window: Option<Duration>,
        connect_sent: Instant,
    ) -> Evidence {
        Evidence {
            timeout,
            report_lag: timeout / 4 + slack,
            slack,
            deposed_window,
            touches: VecDeque::from([Touch {
                sent: connect_sent,
                arrived: connect_sent,
                first_arrived: connect_sent,
            }]),
            latest_proof: None,
        }
    }

    /// Until when the connect request alone vouches.
    pub(crate) fn initial_valid_until(&self) -> Instant {
        self.touches[0].sent + self.timeout.saturating_sub(self.slack)
    }

    /// Records an answer that arrived at `arrived` to a request sent at `sent`; returns the
    /// `valid_until` the evidence now supports, if a proof moved it.
    pub(crate) fn answered(
        &mut self,
        answer: Answer,
        sent: Instant,
        arrived: Instant,
    ) -> Option<Instant> {
        self.record_touch(Touch {
            sent,
            arrived,
            first_arrived: arrived,
        });
        let cap = match answer {
            Answer::Read => return None,
            Answer::Committed => None,
            // A deposed leader answered it, at worst: a new leader started after
            // `sent - W` and gave the session `T` from its start.
            Answer::Synced => Some(sent + self.timeout.checked_sub(self.deposed_window?)?),
        };
        if self.latest_proof.is_some_and(|p| p >= sent) {
            return None;
        }
        self.latest_proof = Some(sent);
        let reported_by = sent.checked_sub(self.report_lag)?;
        // The latest touch whose answer arrived at or before `reported_by` (the server had it
        // by then); older ones can never matter again.
        let newer = self.touches.partition_point(|t| t.arrived <= reported_by);
        if newer == 0 {
            return None;
        }
        self.touches.drain(..newer - 1);
        let until = self.touches[0].sent + self.timeout;
        let until = cap.map_or(until, |cap| until.min(cap));
        until.checked_sub(self.slack)
    }

    fn record_touch(&mut self, touch: Touch) {
        // Answers mostly arrive in order; those arriving within a millisecond of the first
        // answer of the newest touch are merged into it, so a busy session keeps at most one
        // touch a millisecond. The merged touch is sent at the later send time and arrived at
        // the later arrival: the request sent later reached the server between the two, so it
        // is a touch; keeping the earlier send time dated a read from the slow keepalive whose
        // answer came just before it. The window is anchored at the first arrival so a steady
        // stream of answers cannot keep pushing one touch's arrival past every proof. The
        // head (the latest proven touch) is never merged into: moving its arrival could
        // un-prove it.
        let len = self.touches.len();
        match self.touches.back_mut() {
            Some(last)
                if len > 1
                    && touch.arrived >= last.arrived
                    && touch.arrived <= last.first_arrived + Duration::from_millis(1) =>
            {
                last.sent = last.sent.max(touch.sent);
                last.arrived = touch.arrived;
            }
            Some(last) if touch.arrived < last.arrived => {
                let at = self.touches.partition_point(|t| t.arrived <= touch.arrived);
                self.touches.insert(at, touch);
            }
            _ => self.touches.push_back(touch),
        }
    }
}

/// A lease registered with the session, so the clock can end it.
pub(crate) struct Holding {
    pub(crate) node: String,
    pub(crate) epoch: u64,
    /// The first loss recorded (a release counts), under a lock that also orders the
    /// lease's operator metrics with it.
    loss: Mutex<Option<LossReason>>,
    /// Wakes whoever waits for the loss. One list, inline: a `watch` channel here cost an
    /// allocation and eight wake-up lists, each locked on every send and on the drop, for a
    /// lease that nobody watches in the common acquire-and-release.
    lost: Notify,
    shared: Weak<Shared>,
    /// The operator metrics of this lease (nothing without the `metrics` feature).
    telemetry: crate::telemetry::HeldSlot,
    /// Set by `Lease::keep_node_until_released`: a lapse leaves the node to the release.
    pub(crate) keep_node: std::sync::atomic::AtomicBool,
}

impl Holding {
    /// Records the loss if none was recorded; returns true the first time.
    ///
    /// Whoever records a loss that leaves the session alive (the clock lapsed) also starts
    /// the deletion of the node: the holder was told it is gone, so the node must not keep
    /// blocking the queue once the ensemble answers again. Unless the holder asked to keep
    /// it until it releases (`keep_node`): it must stop its work first, and the session's
    /// expiry still bounds how long the node stays.
    pub(crate) fn lose(&self, reason: LossReason) -> bool {
        let first = {
            let mut loss = self.loss.lock().unwrap();
            if loss.is_none() {
                *loss = Some(reason);
                self.telemetry.end(reason);
                true
            } else {
                false
            }
        };
        if !first {
            return false;
        }
        // After the record: a waiter enables its wake-up before it reads the loss.
        self.lost.notify_waiters();
        if reason != LossReason::Released {
            tracing::warn!(node = %self.node, %reason, "lease lost");
        }
        if reason == LossReason::ClockLapsed && !self.keep_node.load(Ordering::SeqCst) {
            if let Some(shared) = self.shared.upgrade() {
                let node = self.node.clone();
                super::spawn_detached(async move {
                    let _ = shared.delete_until_gone(&node).await;
                });
            }
        }
        true
    }

    /// The loss recorded, if any.
    pub(crate) fn loss(&self) -> Option<LossReason> {
        *self.loss.lock().unwrap()
    }

    /// Resolves at the next [`lose`](Self::lose) that records a loss, or at once if one
    /// is recorded. Cancel safe.
    pub(crate) async fn recorded(&self) {
        let next = self.lost.notified();
        tokio::pin!(next);
        // Enabled before the read: a loss recorded after it also wakes this one.
        next.as_mut().enable();
        if self.loss().is_none() {
            next.await;
        }
    }

    /// Starts the lease's operator metrics, unless it is already lost. Under the loss's
    /// lock, as [`lose`](Self::lose) ends them: a loss racing the start is counted exactly
    /// once or not at all.
    pub(crate) fn track(&self, tag: crate::telemetry::Tag) {
        let loss = self.loss.lock().unwrap();
        if loss.is_none() {
            self.telemetry.start(tag);
        }
    }
}

/// The clock, its evidence, and the leases it vouches for.
pub(crate) struct LeaseClock {
    /// The clock. Its receivers are told of every change but one: a renewal of a clock that
    /// still vouches (see [`answered`](Self::answered)), unless someone follows renewals
    /// ([`follow_renewals`](Self::follow_renewals)). Whoever waits for a clock that has run
    /// out to be renewed must read the time *before* the clock (as the grant does).
    pub(crate) clock: watch::Sender<Clock>,
    /// How many follow renewals (`Session::valid_until_changed`).
    renewal_followers: AtomicUsize,
    evidence: Mutex<Evidence>,
    /// Send time of the latest proof, for the keeper's schedule.
    last_proof_sent: Mutex<Instant>,
    pub(crate) keepalive_interval: Duration,
    /// The servers' tickTime was declared: a `sync` is a proof (bounded by the deposed-leader
    /// window), and the keepalive is a `sync`, never a transaction.
    pub(crate) syncs_prove: bool,
    /// Acquires in progress (their nodes wait in a queue): the keepalive must be a proof then.
    acquiring: AtomicUsize,
    holdings: Mutex<HashMap<u64, Weak<Holding>, FastHash>>,
    next_holding: AtomicU64,
}

impl LeaseClock {
    pub(crate) fn new(
        timeout: Duration,
        slack: Duration,
        keepalive_interval: Duration,
        deposed_window: Option<Duration>,
        connect_sent: Instant,
    ) -> LeaseClock {
        let evidence = Evidence::new(timeout, slack, deposed_window, connect_sent);
        let clock = Clock {
            valid_until: evidence.initial_valid_until(),
            epoch: 0,
            lapsed: false,
            state: SessionState::Connected,
        };
        LeaseClock {
            clock: watch::channel(clock).0,
            renewal_followers: AtomicUsize::new(0),
            evidence: Mutex::new(evidence),
            last_proof_sent: Mutex::new(connect_sent),
            keepalive_interval,
            syncs_prove: deposed_window.is_some(),
            acquiring: AtomicUsize::new(0),
            holdings: Mutex::new(HashMap::default()),
            next_holding: AtomicU64::new(0),
        }
    }

    /// Records that a request sent at `sent` was answered by the ensemble just now.
    pub(crate) fn answered(&self, answer: Answer, sent: Instant) {
        let arrived = Instant::now();
        let proof = match answer {
            Answer::Read => false,
            Answer::Synced => self.syncs_prove,
            Answer::Committed => true,
        };
        if proof {
            let mut last = self.last_proof_sent.lock().unwrap();
            *last = (*last).max(sent);
        }
        let Some(until) = self
            .evidence
            .lock()
            .unwrap()
            .answered(answer, sent, arrived)
        else {
            return;
        };
        self.clock.send_if_modified(|c| {
            // Read under the clock's lock: a reader that saw the clock run out read the time
            // before it, so if this renewal came after that reading, this reading is later.
            let ran_out = c.lapsed || c.valid_until <= Instant::now();
            // A renewal of a clock that still vouches changes what it says, not whether it
            // holds: it is recorded silently (every reader sees it), and nobody is woken,
            // unless someone follows renewals. On a busy session this is most answers, and
            // each notification locks eight wake-up lists.
            c.extend(until, arrived)
                && (ran_out || self.renewal_followers.load(Ordering::SeqCst) > 0)
        });
    }

    /// Wakes the clock's receivers on every renewal while the returned guard lives. Take it
    /// before subscribing.
    pub(crate) fn follow_renewals(&self) -> FollowingRenewals<'_> {
        self.renewal_followers.fetch_add(1, Ordering::SeqCst);
        FollowingRenewals(self)
    }

    /// Whether the keepalive must be a proof now: a lease is held, or an acquire waits.
    pub(crate) fn vouching_matters(&self) -> bool {
        self.acquiring.load(Ordering::Relaxed) > 0
            || self
                .holdings
                .lock()
                .unwrap()
                .values()
                .any(|h| h.strong_count() > 0)
    }

    pub(crate) fn now(&self) -> Clock {
        *self.clock.borrow()
    }

    pub(crate) fn last_proof_sent(&self) -> Instant {
        *self.last_proof_sent.lock().unwrap()
    }

    /// Registers a granted lease so the clock can end it.
    pub(crate) fn register(
        &self,
        shared: &Arc<Shared>,
        node: String,
        epoch: u64,
    ) -> (Arc<Holding>, u64) {
        let holding = Arc::new(Holding {
            node,
            epoch,
            loss: Mutex::new(None),
            lost: Notify::new(),
            shared: Arc::downgrade(shared),
            telemetry: Default::default(),
            keep_node: Default::default(),
        });
        let id = self.next_holding.fetch_add(1, Ordering::Relaxed);
        // Every lease unregisters when released or dropped, so the map holds live leases only.
        self.holdings
            .lock()
            .unwrap()
            .insert(id, Arc::downgrade(&holding));
        (holding, id)
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.holdings.lock().unwrap().remove(&id);
    }

    /// Marks the session closed: nothing of it looks held from now on. Returns false if the
    /// session had already ended.
    pub(crate) fn mark_closed(&self) -> bool {
        self.clock.send_if_modified(|c| {
            if c.state.is_terminal() {
                return false;
            }
            c.state = SessionState::Closed;
            true
        })
    }

    /// The nodes of the registered leases.
    pub(crate) fn held_nodes(&self) -> Vec<String> {
        self.holdings
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .map(|h| h.node.clone())
            .collect()
    }

    /// The node of one registered lease, if any.
    pub(crate) fn any_held_node(&self) -> Option<String> {
        self.holdings
            .lock()
            .unwrap()
            .values()
            .find_map(Weak::upgrade)
            .map(|h| h.node.clone())
    }

    /// Ends every registered lease with `reason`.
    pub(crate) fn lose_all(&self, reason: LossReason) {
        let holdings: Vec<Arc<Holding>> = self
            .holdings
            .lock()
            .unwrap()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for holding in holdings {
            holding.lose(reason);
        }
    }
}

/// An acquire in progress, for [`LeaseClock::vouching_matters`]: counted until dropped.
/// See [`LeaseClock::follow_renewals`].
pub(crate) struct FollowingRenewals<'a>(&'a LeaseClock);

impl Drop for FollowingRenewals<'_> {
    fn drop(&mut self) {
        self.0.renewal_followers.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) struct Acquiring(Arc<Shared>);

impl Acquiring {
    pub(crate) fn new(shared: &Arc<Shared>) -> Acquiring {
        shared.clock.acquiring.fetch_add(1, Ordering::Relaxed);
        Acquiring(shared.clone())
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.0.clock.acquiring.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 10, item 6: a clock renewed by another task after it lapsed is watched again at
    /// once. (A watcher that took the deadline only at its own wake-ups slept with its timer
    /// off after the lapse, and never lapsed the renewed clock.)
    #[tokio::test(start_paused = true)]
    async fn a_clock_renewed_after_a_lapse_lapses_again_on_time() {
        let lease_clock = Arc::new(LeaseClock::new(T, SLACK, T / 6, None, Instant::now()));
        let watcher = {
            let lease_clock = lease_clock.clone();
            tokio::spawn(async move {
                super::super::keeper::watch_lapses(&lease_clock, zookeeper_client::SessionId(1))
                    .await
            })
        };
        let first = lease_clock.now().valid_until;
        tokio::time::sleep_until(first + Duration::from_millis(1)).await;
        assert!(lease_clock.now().lapsed, "lapsed at its valid_until");

        // Renewed by someone else (a grant's confirmation): a new epoch, 1 s ahead.
        let renewed_until = Instant::now() + Duration::from_secs(1);
        lease_clock
            .clock
            .send_modify(|c| assert!(c.extend(renewed_until, Instant::now())));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!lease_clock.now().lapsed);
        tokio::time::sleep_until(renewed_until + Duration::from_millis(1)).await;
        assert!(
            lease_clock.now().lapsed,
            "the renewed clock lapsed at its own valid_until"
        );

        // And a renewal that moves a running clock later is not lapsed at the old deadline.
        let until = Instant::now() + Duration::from_secs(1);
        lease_clock
            .clock
            .send_modify(|c| assert!(c.extend(until, Instant::now())));
        let later = until + Duration::from_secs(2);
        tokio::time::sleep(Duration::from_millis(10)).await;
        lease_clock
            .clock
            .send_modify(|c| assert!(c.extend(later, Instant::now())));
        tokio::time::sleep_until(until + Duration::from_millis(1)).await;
        assert!(
            !lease_clock.now().lapsed,
            "not lapsed at a deadline that moved"
        );
        tokio::time::sleep_until(later + Duration::from_millis(1)).await;
        assert!(lease_clock.now().lapsed);
        watcher.abort();
    }

    const T: Duration = Duration::from_secs(8);
    const SLACK: Duration = Duration::from_millis(400);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_connect_request_vouches_for_a_timeout_less_slack() {
        let t0 = Instant::now();
        let e = Evidence::new(T, SLACK, None, t0);
        assert_eq!(e.initial_valid_until(), t0 + T - SLACK);
    }

    #[test]
    fn reads_never_renew() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        for i in 1..100 {
            assert_eq!(
                e.answered(Answer::Read, t0 + ms(100 * i), t0 + ms(100 * i)),
                None
            );
        }
    }

    #[test]
    fn a_proof_vouches_only_for_touches_a_report_lag_older() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        // report lag = T/4 + slack = 2.4 s.
        e.answered(Answer::Read, t0 + ms(1000), t0 + ms(1000));
        e.answered(Answer::Read, t0 + ms(2000), t0 + ms(2000));
        e.answered(Answer::Read, t0 + ms(3000), t0 + ms(3000));
        // A proof at 4.0 s proves the touch at 1.0 s (<= 1.6 s), not the one at 2.0 s.
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(4000), t0 + ms(4000)),
            Some(t0 + ms(1000) + T - SLACK)
        );
        // A proof at 5.5 s proves the touch at 3.0 s.
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(5500), t0 + ms(5500)),
            Some(t0 + ms(3000) + T - SLACK)
        );
    }

    #[test]
    fn keepalives_alone_lose_at_about_six_tenths_of_the_timeout() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        let k = T / 6;
        let mut until = e.initial_valid_until();
        let mut last = t0;
        for i in 1..=12 {
            last = t0 + k * i;
            if let Some(u) = e.answered(Answer::Committed, last, last) {
                assert!(u >= until, "the clock only moves forward");
                until = u;
            }
            // Never a lapse between keepalives.
            assert!(
                until > last + k,
                "keepalive {i}: {until:?} vs {:?}",
                last + k
            );
        }
        let left = until - last;
        assert!(
            left >= T * 55 / 100 && left <= T * 65 / 100,
            "lost {left:?} after the last keepalive"
        );
    }

    #[test]
    fn a_late_or_out_of_order_proof_never_moves_the_clock_back() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        e.answered(Answer::Read, t0 + ms(500), t0 + ms(500));
        let a = e
            .answered(Answer::Committed, t0 + ms(5000), t0 + ms(5000))
            .unwrap();
        // An older proof answered late proves nothing new.
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(4000), t0 + ms(4000)),
            None
        );
        let b = e
            .answered(Answer::Committed, t0 + ms(6000), t0 + ms(6000))
            .unwrap();
        assert!(b >= a);
    }

    /// Issue 25, item 2: a request held back in the client (a stalled process, a full socket
    /// buffer) reaches the server after its send time, so it counts as received only when
    /// its answer arrived. Counted by its send time, the read sent at 1.0 s (answered at 3.0 s)
    /// looked reported by the proof at 4.0 s, though the server may have had it only after
    /// its last report to the leader.
    #[test]
    fn a_held_back_touch_counts_as_received_only_when_its_answer_arrived() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        // report lag = T/4 + slack = 2.4 s: the proof at 4.0 s vouches for touches the
        // server had by 1.6 s.
        e.answered(Answer::Read, t0 + ms(1000), t0 + ms(3000));
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(4000), t0 + ms(4010)),
            Some(t0 + T - SLACK),
            "only the connect was surely reported"
        );
        // Once a proof is a report lag past the answer, the touch counts, from its send time.
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(5500), t0 + ms(5510)),
            Some(t0 + ms(1000) + T - SLACK)
        );
    }

    /// Answers that arrive together (a slow keepalive's, then a read sent long after it, in
    /// one socket read) are kept as one touch; it must carry the *later* send time. Keeping
    /// the keepalive's dated the read's touch from the keepalive, so a renew a report lag
    /// later vouched for less than the read (CI: `renew_confirms_and_extends_valid_until`).
    #[test]
    fn answers_arriving_together_keep_the_latest_send_time() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        e.answered(Answer::Read, t0 + ms(100), t0 + ms(200));
        // A keepalive sent at 0.5 s answers at 1.0 s; a read sent at 0.9 s answers 0.3 ms later.
        e.answered(Answer::Read, t0 + ms(500), t0 + ms(1000));
        e.answered(
            Answer::Read,
            t0 + ms(900),
            t0 + ms(1000) + Duration::from_micros(300),
        );
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(4000), t0 + ms(4000)),
            Some(t0 + ms(900) + T - SLACK),
            "the read's send time is vouched for"
        );
    }

    /// A busy session's answers, one every half millisecond, are merged into touches at
    /// most a millisecond wide, so a proof still finds one a report lag old.
    #[test]
    fn a_steady_stream_of_answers_still_gets_proven() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        let half = Duration::from_micros(500);
        let mut at = t0 + ms(100);
        while at < t0 + ms(3000) {
            e.answered(Answer::Read, at - Duration::from_micros(200), at);
            at += half;
        }
        // reported_by = 4.0 s - 2.4 s = 1.6 s: a touch sent within a millisecond before it.
        let until = e.answered(Answer::Committed, t0 + ms(4000), t0 + ms(4000));
        let until = until.expect("a proof");
        assert!(
            until >= t0 + ms(1598) + T - SLACK && until <= t0 + ms(1600) + T - SLACK,
            "{:?}",
            until - t0
        );
        assert!(e.touches.len() < 3000, "{} touches kept", e.touches.len());
    }

    /// Issue 25: a deposed leader answers syncs, so without a declared tickTime an answered
    /// sync renews nothing; a committed write does.
    #[test]
    fn a_sync_proves_nothing_unless_the_tick_time_is_declared() {
        let t0 = Instant::now();
        let mut e = Evidence::new(T, SLACK, None, t0);
        for i in 1..40 {
            let at = t0 + ms(250 * i);
            assert_eq!(e.answered(Answer::Synced, at, at), None, "sync {i}");
        }
        let at = t0 + ms(10_000);
        assert_eq!(
            e.answered(Answer::Committed, at, at),
            Some(t0 + ms(7500) + T - SLACK),
            "the syncs were touches, proven by the write"
        );
    }

    /// With the tickTime declared, a sync sent at `s` vouches for at most `s + T - W - slack`:
    /// a new leader may have started up to `W` before the deposed one answered it.
    #[test]
    fn a_sync_vouches_at_most_the_timeout_less_the_deposed_window_after_it() {
        let t0 = Instant::now();
        let window = ms(6000); // tickTime 3 s
        let mut e = Evidence::new(T, SLACK, Some(window), t0);
        e.answered(Answer::Read, t0 + ms(1000), t0 + ms(1000));
        // The touch at 1.0 s alone would give 9.0 s - slack; the window caps it at 6.0 s.
        assert_eq!(
            e.answered(Answer::Synced, t0 + ms(4000), t0 + ms(4000)),
            Some(t0 + ms(4000) + T - window - SLACK)
        );
        // A committed write is not capped.
        assert_eq!(
            e.answered(Answer::Committed, t0 + ms(4500), t0 + ms(4500)),
            Some(t0 + ms(1000) + T - SLACK)
        );
        // A small window leaves the touch rule in charge.
        let mut e = Evidence::new(T, SLACK, Some(ms(400)), t0);
        e.answered(Answer::Read, t0 + ms(1000), t0 + ms(1000));
        assert_eq!(
            e.answered(Answer::Synced, t0 + ms(4000), t0 + ms(4000)),
            Some(t0 + ms(1000) + T - SLACK)
        );
    }

    /// The issue's scenario, on the rule alone: T = 4 s at tickTime 2 s, a holder whose
    /// server is the leader, a sync or a keepalive every 100 ms. The leader is cut at 10 s, the others
    /// have a new leader at 14.2 s (syncLimit 2 × tickTime after the last ping, and an
    /// election), and the deposed leader answers syncs until 15.9 s (1.7 s after, as measured).
    /// The new leader expires the session at 14.2 + 4 = 18.2 s at the earliest. Syncs counted
    /// as proofs (the old rule) vouch past that; the rule vouches for nothing after the cut.
    #[test]
    fn syncs_answered_by_a_deposed_leader_never_vouch_past_the_new_leaders_deadline() {
        let t = Duration::from_secs(4);
        let slack = t / 20;
        let t0 = Instant::now();
        let new_leader = t0 + ms(14_200);
        let deadline = new_leader + t;
        let every = ms(100);
        let cut = t0 + ms(10_000);
        let mut old = Evidence::new(t, slack, Some(Duration::ZERO), t0); // no window: old rule
        let mut new = Evidence::new(t, slack, None, t0);
        let (mut old_until, mut new_until) = (t0, t0);
        let mut at = t0 + every;
        while at <= t0 + ms(15_900) {
            // Before the cut the leader commits our keepalive transactions.
            let answer = if at < cut {
                Answer::Committed
            } else {
                Answer::Synced
            };
            if let Some(u) = old.answered(Answer::Synced, at, at) {
                old_until = old_until.max(u);
            }
            if let Some(u) = new.answered(answer, at, at) {
                new_until = new_until.max(u);
            }
            at += every;
        }
        assert!(
            old_until > deadline,
            "the old rule vouched until {:?} after the new leader's deadline",
            old_until.checked_duration_since(deadline)
        );
        assert!(
            new_until < cut + t - slack && new_until < deadline,
            "vouched {:?} past the cut",
            new_until - cut
        );
    }

    fn clock(valid_until: Instant) -> Clock {
        Clock {
            valid_until,
            epoch: 0,
            lapsed: false,
            state: SessionState::Connected,
        }
    }

    #[test]
    fn a_lapse_ends_the_epoch_and_a_late_answer_does_not_resurrect_it() {
        let now = Instant::now();
        let mut c = clock(now + ms(100));
        assert!(c.holds(0, now));
        assert!(!c.lapse_if_due(now), "not yet due");
        assert!(c.lapse_if_due(now + ms(100)));
        assert!(!c.holds(0, now + ms(100)));
        // A late answer whose evidence ends in the past does not renew a lapsed clock.
        assert!(!c.extend(now + ms(150), now + ms(200)));
        assert!(c.lapsed);
        // A fresh one does, in a new epoch: leases of the old epoch stay lost.
        assert!(c.extend(now + ms(5000), now + ms(200)));
        assert_eq!(c.epoch, 1);
        assert!(!c.holds(0, now + ms(300)));
        assert!(c.holds(1, now + ms(300)));
    }

    #[test]
    fn terminal_states_never_hold() {
        let now = Instant::now();
        let mut c = clock(now + T);
        c.state = SessionState::Expired;
        assert!(!c.holds(0, now));
        assert!(!c.extend(now + T * 2, now));
        assert_eq!(c.loss_reason(), LossReason::SessionExpired);
    }
}
