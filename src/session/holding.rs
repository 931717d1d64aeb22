//! A lease as the session knows it: [`Holding`], registered with the lease clock so that
//! every way the lease can end reaches it — the clock lapsing, the session ending, the
//! session closed, a release, and its node deleted by someone else, which the holding
//! watches for.
//!
//! # A node deleted by someone else
//!
//! An operator clearing a "stuck" lock (`zkCli.sh delete`), or a session ended from outside
//! (a JMX `terminateSession`, a process that attached with our session's id and password and
//! closed it), deletes our node while the lease clock still vouches for the session. Nobody
//! can be told *first* (the deletion is committed before anyone hears of it, and the next
//! waiter is told at the same moment), but the holder must be told at once, as ZooKeeper
//! tells the waiter: the holding watches its node.
//!
//! - A lease granted through the queue already has a watch on its node (the waiter second
//!   in line watched it beside its predecessor): it is followed from the grant, at no cost.
//! - A lease granted at once has none, and an `exists` watch would be a fourth request in
//!   every short hold (create, list, delete are the protocol's three), and its release would
//!   notify its own session. So it is watched from one keepalive interval after the grant
//!   on ([`WATCH_AFTER`] keepalive intervals): the keeper starts the watch of every holding
//!   that old ([`LeaseClock::watch_due`](super::clock::LeaseClock::watch_due)). A lease held
//!   shorter than that is never watched; one deleted meanwhile is told when the watch is set
//!   (the node is gone then).
//! - A keepalive that checks a node of ours and hears `NoNode`, a `renew` and a
//!   `fenced_write` that find it gone, end that lease at once.
//!
//! So a holder is told within one notification of the deletion, or within a keepalive
//! interval and a round trip of its grant at worst.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::LossReason;

use super::{Counters, NodeEvent, NodeWatch, Shared};

/// How many keepalive intervals after its grant a lease granted at once starts watching its
/// node (see the module docs).
pub(crate) const WATCH_AFTER: u32 = 1;

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
    pub(crate) keep_node: AtomicBool,
    /// When it was registered, in the lease clock's (boot) time: when the keeper starts
    /// watching its node if nothing did before.
    pub(crate) registered_at: Instant,
    /// Set once a watch on the node was started.
    watched: AtomicBool,
}

impl Holding {
    pub(crate) fn new(
        shared: &Arc<Shared>,
        node: String,
        epoch: u64,
        registered_at: Instant,
    ) -> Holding {
        Holding {
            node,
            epoch,
            loss: Mutex::new(None),
            lost: Notify::new(),
            shared: Arc::downgrade(shared),
            telemetry: Default::default(),
            keep_node: AtomicBool::new(false),
            registered_at,
            watched: AtomicBool::new(false),
        }
    }

    /// Whether a watch on the node was started.
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Acquire)
    }

    /// Watches the node, once, so that its deletion by someone else ends the lease:
    /// with `granted` (the watch the grant set) if there is one, else with a new `exists`
    /// watch. Returns at once; a task follows the watch. It holds the holding and the
    /// session weakly: a released lease and a closed session end it.
    pub(crate) fn watch_node(self: &Arc<Self>, granted: Option<NodeWatch>) {
        if self.watched.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let holding = Arc::downgrade(self);
        let node = self.node.clone();
        super::spawn_detached(async move {
            let deleted = match granted {
                Some(mut watch) => match watch.changed().await {
                    Ok(NodeEvent::Deleted) => true,
                    Ok(NodeEvent::Changed) => shared.wait_deleted(&node).await.is_ok(),
                    Err(_) => false,
                },
                None => {
                    // Not for a lease released meanwhile (the common short hold).
                    match holding.upgrade() {
                        Some(h) if h.loss().is_none() => {}
                        _ => return,
                    }
                    Counters::bump(&shared.counters.lease_watches);
                    shared.wait_deleted(&node).await.is_ok()
                }
            };
            // A session that ended reports its own loss through the clock.
            if deleted {
                if let Some(holding) = holding.upgrade() {
                    holding.lose(LossReason::NodeDeleted);
                }
            }
        });
    }

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
        match reason {
            LossReason::Released => {}
            LossReason::NodeDeleted => tracing::warn!(
                node = %self.node,
                %reason,
                "lease lost: its node was deleted by someone else (an operator, or a session ended from outside)"
            ),
            _ => tracing::warn!(node = %self.node, %reason, "lease lost"),
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
