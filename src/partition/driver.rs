//! The task behind a [`Member`]: it keeps what the member holds equal to what the
//! assignment gives it.
//!
//! It waits for nothing itself. Each item it should own is the one queue's join (a plain
//! lock's), each lease it handed out is watched through the lease, and the party through a
//! watch on its children; each of those runs as a task of its own and reports here. This
//! task only reconciles: once the party has been still for the settle time it computes the
//! assignment, then for every item it
//! - joins the item's queue if the item is its own and it neither holds nor waits for it,
//! - cancels its wait (which deletes its node) if the item is not its own,
//! - asks the worker to release the item ([`OwnershipChange::ReleaseRequested`]) if it holds
//!   one that is not its own.
//!
//! So an item moves only through its queue: the new owner is granted when the old owner's
//! node is gone (released, or with its session), and each grant is a lock's grant, with its
//! token and the lease clock's "the holder knows first".

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::error::{Error, LossReason, Result};
use crate::lease::{Claim, Lease, LeaseState};
use crate::node::{Kind, NodeFormat};
use crate::queue::{Owner, Queue};
use crate::session::{ChildrenWatch, Session};
use crate::telemetry::Recipe;

use super::member::{Member, MemberState, OwnershipChange};
use super::party::{item_dir, Party, View};
use super::{Assignment, Item, Items, Partitions};

/// The first pause before something that failed for a reason that can pass is tried again,
/// and the most it doubles to.
const PAUSE_MIN: Duration = Duration::from_millis(100);
const PAUSE_MAX: Duration = Duration::from_secs(5);

/// Starts the task of a member of `partitions` that joined as `id` with `membership`.
pub(super) fn start(partitions: &Partitions, id: &str, party: Party, membership: Lease) -> Member {
    let (changes_tx, changes) = mpsc::unbounded_channel();
    let (leave, leaving) = watch::channel(false);
    let state = Arc::new(MemberState::default());
    let session = partitions.session.clone();
    let queues = partitions
        .items
        .iter()
        .map(|item| {
            Queue::new(
                session.clone(),
                &item_dir(&partitions.path, item.name()),
                Kind::Lock,
            )
            // Kazoo's Lock sees only its own node names: ours are those, so a Kazoo
            // SetPartitioner on the same path is excluded by them.
            .with_format(NodeFormat::Kazoo)
            .with_owner(Owner::ThisProcess {
                id: Some(id.to_string()),
                revocable: false,
            })
            .with_recipe(Recipe::Partition)
        })
        .collect();
    let n = partitions.items.len();
    let driver = Driver {
        path: partitions.path.clone(),
        id: id.to_string(),
        items: partitions.items.clone(),
        assignment: partitions.assignment,
        settle: partitions.settle,
        release_within: partitions.release_within,
        session,
        party,
        queues,
        changes: changes_tx,
        state: state.clone(),
        leaving,
        slots: vec![Slot::idle(); n],
        target: vec![false; n],
        tasks: JoinSet::new(),
        generation: 0,
        membership: None,
        epoch: 0,
        seen: None,
        acted: None,
        act_at: None,
        warned_foreign: Vec::new(),
        leaving_now: false,
        rejoin_pause: PAUSE_MIN,
    };
    let task = tokio::spawn(driver.run(membership));
    Member {
        id: id.to_string(),
        path: partitions.path.clone(),
        changes,
        state,
        leave,
        task,
    }
}

#[derive(Clone)]
enum Slot {
    /// Neither held nor waited for; after `failures` failed waits, not tried again before
    /// `retry_at`.
    Idle {
        retry_at: Option<Instant>,
        failures: u32,
    },
    /// Our node is in the item's queue.
    Waiting {
        generation: u64,
        abort: AbortHandle,
        failures: u32,
    },
    /// A worker holds the item's lease.
    Held {
        generation: u64,
        /// Set once the worker was asked to release it: by when.
        release_by: Option<Instant>,
        overdue_told: bool,
    },
}

impl Slot {
    fn idle() -> Slot {
        Slot::Idle {
            retry_at: None,
            failures: 0,
        }
    }
}

/// What the member's tasks report.
enum Done {
    /// A wait in an item's queue ended.
    Granted {
        item: usize,
        generation: u64,
        result: Result<Lease>,
    },
    /// The lease handed out for an item ended.
    Ended {
        item: usize,
        generation: u64,
        reason: LossReason,
    },
    /// Our node joined the party again.
    Joined { result: Result<Lease> },
    /// The party as listed during membership `epoch`: `None` if our node was not in it.
    Listed {
        epoch: u64,
        result: Result<Option<(View, ChildrenWatch)>>,
    },
    /// The party changed (or its watch failed) since the last listing of `epoch`.
    PartyChanged { epoch: u64, result: Result<()> },
    /// Our membership lease of `epoch` ended.
    MembershipLost { epoch: u64, reason: LossReason },
}

struct Driver {
    path: String,
    id: String,
    items: Items,
    assignment: Assignment,
    settle: Duration,
    release_within: Duration,
    session: Session,
    party: Party,
    /// Each item's queue, by index.
    queues: Vec<Queue>,
    changes: mpsc::UnboundedSender<Result<OwnershipChange>>,
    state: Arc<MemberState>,
    leaving: watch::Receiver<bool>,
    slots: Vec<Slot>,
    /// Our items under the party acted upon.
    target: Vec<bool>,
    /// Every task this member runs: dropped with the driver, which cancels them (a
    /// cancelled wait deletes its node).
    tasks: JoinSet<Done>,
    /// Numbers the waits and the leases handed out, so a late report of an earlier one is
    /// told apart.
    generation: u64,
    /// Our presence in the party, while we have one.
    membership: Option<Lease>,
    /// Numbers memberships, so a late report about an earlier one is told apart.
    epoch: u64,
    /// The party as last listed.
    seen: Option<View>,
    /// The party the assignment was last computed for.
    acted: Option<View>,
    /// When to act on `seen`: the settle time after it last changed.
    act_at: Option<Instant>,
    warned_foreign: Vec<String>,
    /// Set by `Member::leave`: every item goes, none is taken.
    leaving_now: bool,
    rejoin_pause: Duration,
}

impl Driver {
    async fn run(mut self, membership: Lease) {
        self.joined(membership);
        loop {
            if self.leaving_now && self.nothing_held() {
                tracing::info!(path = %self.path, id = %self.id, "left the partition set");
                return;
            }
            let wake = self.next_wake();
            tokio::select! {
                done = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    let Some(Ok(done)) = done else { continue }; // a cancelled task
                    if let Err(err) = self.on(done) {
                        tracing::warn!(path = %self.path, id = %self.id, %err, "member stops");
                        let _ = self.changes.send(Err(err));
                        return;
                    }
                }
                _ = sleep_until(wake) => self.on_time(),
                changed = self.leaving.changed(), if !self.leaving_now => {
                    if changed.is_ok() && *self.leaving.borrow() {
                        self.leave();
                    }
                }
                _ = self.changes.closed() => return,
            }
        }
    }

    fn item(&self, index: usize) -> Item {
        self.items.get(index).expect("an item of the set").clone()
    }

    fn nothing_held(&self) -> bool {
        !self.slots.iter().any(|s| matches!(s, Slot::Held { .. }))
    }

    /// True while the member takes items: in the party, and not leaving.
    fn taking(&self) -> bool {
        self.membership.is_some() && !self.leaving_now
    }

    /// The earliest instant something is due: acting on the party, a retry, an overdue
    /// release.
    fn next_wake(&self) -> Option<Instant> {
        let slots = self.slots.iter().filter_map(|s| match s {
            Slot::Idle {
                retry_at: Some(at), ..
            } => Some(*at),
            Slot::Held {
                release_by: Some(at),
                overdue_told: false,
                ..
            } => Some(*at),
            _ => None,
        });
        self.act_at.into_iter().chain(slots).min()
    }

    fn on_time(&mut self) {
        let now = Instant::now();
        if self.act_at.is_some_and(|at| at <= now) {
            self.act_at = None;
            self.act();
        }
        for index in 0..self.slots.len() {
            let due = match &self.slots[index] {
                Slot::Idle {
                    retry_at: Some(at), ..
                } => *at <= now,
                Slot::Held {
                    release_by: Some(at),
                    overdue_told: false,
                    ..
                } => *at <= now,
                _ => false,
            };
            if !due {
                continue;
            }
            if let Slot::Held { overdue_told, .. } = &mut self.slots[index] {
                *overdue_told = true;
                tracing::warn!(path = %self.path, id = %self.id, item = %self.item(index),
                    "release overdue: the item's next owner waits until its lease is released (or this session ends)");
            } else {
                self.reconcile(index);
            }
        }
    }

    /// Our node is in the party: list it, and follow our membership's end.
    fn joined(&mut self, membership: Lease) {
        self.epoch += 1;
        self.rejoin_pause = PAUSE_MIN;
        tracing::info!(path = %self.path, id = %self.id, node = %membership.path(), "joined the partition set");
        let epoch = self.epoch;
        let lost = membership.loss_watch();
        self.tasks.spawn(async move {
            let reason = lost.lost().await;
            Done::MembershipLost { epoch, reason }
        });
        self.membership = Some(membership);
        self.list();
    }

    fn list(&mut self) {
        let Some(membership) = &self.membership else {
            return;
        };
        // On the membership's own ZooKeeper session: read after our create, from the
        // session our node belongs to.
        let (party, id, epoch) = (self.party.clone(), self.id.clone(), self.epoch);
        let session = membership.session().clone();
        let node = membership.path().to_string();
        self.tasks.spawn(async move {
            let result = party.view(&session, &node, &id).await;
            Done::Listed { epoch, result }
        });
    }

    fn list_after_pause(&mut self) {
        let epoch = self.epoch;
        self.tasks.spawn(async move {
            tokio::time::sleep(PAUSE_MAX / 5).await;
            Done::PartyChanged {
                epoch,
                result: Ok(()),
            }
        });
    }

    /// Out of the party: forget it, stop waiting for items, and hold on to what is held (if
    /// the session ended its leases end too; if someone deleted our node, we join again as
    /// the same id and are given the same items).
    fn out_of_party(&mut self) {
        self.epoch += 1;
        // Dropping it deletes our node if it is still there: a second node of ours would be
        // a second member to Kazoo's assignment.
        self.membership = None;
        self.seen = None;
        self.acted = None;
        self.act_at = None;
        self.target.iter_mut().for_each(|t| *t = false);
        for index in 0..self.slots.len() {
            self.reconcile(index);
        }
    }

    fn rejoin(&mut self, why: &str) {
        tracing::warn!(path = %self.path, id = %self.id, why, "no longer in the party: joining again");
        self.out_of_party();
        let pause = self.rejoin_pause;
        self.rejoin_pause = (pause * 2).min(PAUSE_MAX);
        let (party, session, id) = (self.party.clone(), self.session.clone(), self.id.clone());
        self.tasks.spawn(async move {
            tokio::time::sleep(pause).await;
            Done::Joined {
                result: party.join(&session, &id).await,
            }
        });
    }

    fn leave(&mut self) {
        tracing::info!(path = %self.path, id = %self.id, "leaving the partition set");
        self.leaving_now = true;
        self.out_of_party();
    }

    fn on(&mut self, done: Done) -> Result<()> {
        match done {
            Done::Granted {
                item,
                generation,
                result,
            } => self.granted(item, generation, result)?,
            Done::Ended {
                item,
                generation,
                reason,
            } => self.ended(item, generation, reason),
            Done::Joined { result } => match result {
                Ok(membership) if !self.leaving_now => self.joined(membership),
                Ok(_) => {}
                Err(err) if self.may_pass(&err) => self.rejoin("joining failed"),
                Err(err) => return Err(err),
            },
            Done::Listed { epoch, .. } | Done::PartyChanged { epoch, .. }
                if epoch != self.epoch => {}
            Done::MembershipLost { epoch, .. } if epoch != self.epoch => {}
            Done::Listed { result, .. } => match result {
                Ok(Some((view, watch))) => {
                    let epoch = self.epoch;
                    self.tasks.spawn(async move {
                        Done::PartyChanged {
                            epoch,
                            result: watch.changed().await,
                        }
                    });
                    self.seen_view(view);
                }
                Ok(None) => self.rejoin("our party node is gone"),
                Err(err) => self.party_failed(err)?,
            },
            Done::PartyChanged { result, .. } => match result {
                Ok(()) => self.list(),
                Err(err) => self.party_failed(err)?,
            },
            Done::MembershipLost { reason, .. } => match reason {
                // Our node stays through a lapse (`Party::join`): the listings tell whether
                // it is still there once the ensemble answers again.
                LossReason::ClockLapsed | LossReason::Released => {}
                LossReason::SessionExpired if !self.session.reopens() => {
                    return Err(Error::SessionExpired)
                }
                LossReason::SessionClosed => return Err(Error::SessionClosed),
                _ => self.rejoin("our membership ended"),
            },
        }
        Ok(())
    }

    /// A listing or a watch of the party failed.
    fn party_failed(&mut self, err: Error) -> Result<()> {
        if err.is_session_terminal() && self.session.reopens() {
            self.rejoin("the session ended");
        } else if self.may_pass(&err) {
            self.list_after_pause();
        } else {
            return Err(err);
        }
        Ok(())
    }

    /// True if an error of a wait, a join or a listing may pass when tried again.
    fn may_pass(&self, err: &Error) -> bool {
        match err {
            Error::NodeDeleted { .. }
            | Error::NoAnswer { .. }
            | Error::LockDirectoryDeleted { .. }
            | Error::Timeout { .. }
            | Error::ZooKeeper { .. } => true,
            Error::SessionExpired => self.session.reopens(),
            _ => false,
        }
    }

    fn seen_view(&mut self, view: View) {
        for node in &view.foreign {
            if !self.warned_foreign.contains(node) {
                tracing::warn!(path = %self.path, %node, assignment = ?self.assignment,
                    "a member of this party divides the items another way (a Kazoo SetPartitioner beside \
                     sticky members, or zkfence members with the other assignment): the items both want \
                     never settle; give every member of one path the same assignment");
                self.warned_foreign.push(node.clone());
            }
        }
        if self.seen.as_ref() == Some(&view) {
            return;
        }
        tracing::info!(path = %self.path, id = %self.id, members = view.members.len(), "party changed");
        let unchanged = self.acted.as_ref() == Some(&view);
        self.seen = Some(view);
        self.act_at = if unchanged {
            None // back to what we act on already
        } else if self.settle.is_zero() {
            self.act();
            None
        } else {
            Some(Instant::now() + self.settle)
        };
    }

    /// The party has been still for the settle time: our items under it.
    fn act(&mut self) {
        let Some(view) = self.seen.clone() else {
            return;
        };
        let members: Vec<&str> = view.members.iter().map(String::as_str).collect();
        let owners = self.assignment.assign(&members, &self.items);
        self.target = owners
            .iter()
            .map(|owner| *owner == Some(view.me.as_str()))
            .collect();
        tracing::info!(path = %self.path, id = %self.id, members = members.len(),
            ours = self.target.iter().filter(|t| **t).count(), "assignment computed");
        self.acted = Some(view);
        for index in 0..self.slots.len() {
            self.reconcile(index);
        }
    }

    /// Makes item `index`'s slot follow the target: wait for it if it is ours, stop waiting
    /// if not, ask for its release if it is held and not ours — only under a party we acted
    /// on, or when leaving: out of the party, or back in it but not yet acted on its
    /// members, the target is empty and says nothing about what we hold.
    fn reconcile(&mut self, index: usize) {
        let ours = self.target[index] && self.taking();
        let now = Instant::now();
        match self.slots[index].clone() {
            Slot::Idle { retry_at, failures } => {
                if !ours {
                    self.slots[index] = Slot::idle();
                } else if !retry_at.is_some_and(|at| at > now) {
                    self.wait_for(index, failures);
                }
            }
            Slot::Waiting { abort, .. } if !ours => {
                abort.abort();
                self.slots[index] = Slot::idle();
            }
            Slot::Held {
                generation,
                release_by: None,
                ..
            } if !ours && (self.acted.is_some() || self.leaving_now) => {
                let deadline = now + self.release_within;
                self.slots[index] = Slot::Held {
                    generation,
                    release_by: Some(deadline),
                    overdue_told: false,
                };
                let item = self.item(index);
                tracing::info!(path = %self.path, id = %self.id, %item, "release requested");
                let _ = self
                    .changes
                    .send(Ok(OwnershipChange::ReleaseRequested { item, deadline }));
            }
            _ => {}
        }
    }

    fn wait_for(&mut self, index: usize, failures: u32) {
        self.generation += 1;
        let generation = self.generation;
        let queue = self.queues[index].clone();
        let abort = self.tasks.spawn(async move {
            let dir = queue.shared_dir();
            let result = queue
                .join(None)
                .await
                .map(|grant| Lease::new(dir, grant, Claim::none()));
            Done::Granted {
                item: index,
                generation,
                result,
            }
        });
        self.slots[index] = Slot::Waiting {
            generation,
            abort,
            failures,
        };
    }

    fn granted(&mut self, index: usize, generation: u64, result: Result<Lease>) -> Result<()> {
        let failures = match self.slots[index] {
            Slot::Waiting {
                generation: g,
                failures,
                ..
            } if g == generation => failures,
            // A wait we gave up on: its lease, if any, is dropped here, which releases it.
            _ => return Ok(()),
        };
        let lease = match result {
            Ok(lease) => lease,
            Err(err) if self.may_pass(&err) => {
                let failures = failures + 1;
                let pause = (PAUSE_MIN * 2u32.saturating_pow(failures.min(6))).min(PAUSE_MAX);
                tracing::info!(path = %self.path, id = %self.id, item = %self.item(index), %err,
                    retry_in_ms = pause.as_millis() as u64, "waiting for the item failed: trying again");
                self.slots[index] = Slot::Idle {
                    retry_at: Some(Instant::now() + pause),
                    failures,
                };
                return Ok(());
            }
            Err(err) => return Err(err),
        };
        self.slots[index] = Slot::idle();
        if !(self.target[index] && self.taking()) {
            // No longer ours by the time we were granted: dropping the lease releases it.
            drop(lease);
            self.reconcile(index);
            return Ok(());
        }
        // A lapse of the lease clock must not let anyone else be granted the item while the
        // worker may still act: its node stays until the worker drops the lease (or the
        // session ends).
        if let LeaseState::Lost(reason) = lease.keep_node_until_released() {
            tracing::info!(path = %self.path, item = %self.item(index), %reason, "lost at the grant: waiting again");
            drop(lease);
            self.slots[index] = Slot::Idle {
                retry_at: Some(Instant::now() + PAUSE_MIN),
                failures,
            };
            return Ok(());
        }
        self.generation += 1;
        let generation = self.generation;
        let watch = lease.loss_watch();
        self.tasks.spawn(async move {
            let reason = watch.lost().await;
            Done::Ended {
                item: index,
                generation,
                reason,
            }
        });
        let item = self.item(index);
        self.state
            .owned
            .lock()
            .unwrap()
            .insert(index, (item.clone(), lease.loss_watch()));
        self.slots[index] = Slot::Held {
            generation,
            release_by: None,
            overdue_told: false,
        };
        tracing::info!(path = %self.path, id = %self.id, %item, token = %lease.token(), "acquired");
        let _ = self
            .changes
            .send(Ok(OwnershipChange::Acquired { item, lease }));
        Ok(())
    }

    fn ended(&mut self, index: usize, generation: u64, reason: LossReason) {
        if !matches!(self.slots[index], Slot::Held { generation: g, .. } if g == generation) {
            return;
        }
        self.slots[index] = Slot::idle();
        self.state.owned.lock().unwrap().remove(&index);
        let item = self.item(index);
        let change = if reason == LossReason::Released {
            tracing::info!(path = %self.path, id = %self.id, %item, "released");
            OwnershipChange::Released { item }
        } else {
            tracing::warn!(path = %self.path, id = %self.id, %item, %reason, "lost");
            OwnershipChange::Lost { item, reason }
        };
        let _ = self.changes.send(Ok(change));
        self.reconcile(index);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
