//! Members of one partition set run in this process, with a worker per owned item, and the
//! history of who owned what, on this process's clock.
//!
//! Each item a member is granted gets a worker task that "acts" from the moment it has the
//! lease until it stops: when asked to release (it stops, records the end, then releases),
//! or when its lease says lost (it records the end at once). The history holds one interval
//! per grant; [`Fleet::assert_one_owner_at_a_time`] checks that no two intervals of an item
//! overlap, as the chaos checker does.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zkfence::{FencingToken, LossReason, OwnershipChange, Partitions};

/// One grant of one item to one member, as its worker saw it.
#[derive(Debug, Clone)]
pub struct Interval {
    pub item: usize,
    pub member: String,
    pub token: FencingToken,
    /// When the worker got the lease (the member's `Acquired` arrived).
    pub granted: Instant,
    /// When the worker stopped acting: asked to release (before it released), or told lost.
    pub ended: Option<Instant>,
    /// Why it ended, when it was lost.
    pub lost: Option<LossReason>,
}

#[derive(Default)]
struct Shared {
    history: Vec<Interval>,
    /// Items whose workers do not release when asked (a slow worker), per member.
    slow: HashMap<String, HashSet<usize>>,
    /// Workers holding on to a slow item: a send releases it.
    held_slow: HashMap<(String, usize), oneshot::Sender<()>>,
    /// Every `Acquired` a member was sent, per member.
    acquired: HashMap<String, usize>,
}

/// The members of one partition set in this process.
#[derive(Clone)]
pub struct Fleet {
    shared: Arc<Mutex<Shared>>,
    runners: Arc<Mutex<HashMap<String, Runner>>>,
}

struct Runner {
    leave: mpsc::UnboundedSender<()>,
    task: JoinHandle<()>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet {
            shared: Arc::default(),
            runners: Arc::default(),
        }
    }

    /// Joins `partitions` as `id` and runs the member until it leaves or is dropped.
    pub async fn join(&self, partitions: &Partitions, id: &str) {
        // A loaded machine can keep a short session's clock from vouching at the grant for a
        // whole session timeout (`NoAnswer`): an application joins again, and so does this.
        let mut attempts = 0;
        let mut member = loop {
            match partitions.join(id).await {
                Ok(member) => break member,
                Err(zkfence::Error::NoAnswer { .. }) if attempts < 3 => attempts += 1,
                Err(e) => panic!("{id} joins: {e}"),
            }
        };
        let (leave, mut leaving) = mpsc::unbounded_channel();
        let shared = self.shared.clone();
        let id_owned = id.to_string();
        let task = tokio::spawn(async move {
            let id = id_owned;
            let mut releases: HashMap<usize, oneshot::Sender<()>> = HashMap::new();
            loop {
                let change = tokio::select! {
                    change = member.next() => change,
                    Some(()) = leaving.recv() => { member.leave(); continue; }
                };
                let Some(change) = change else { return };
                let change = change.unwrap_or_else(|e| panic!("{id}: the member stopped: {e}"));
                match change {
                    OwnershipChange::Acquired { item, lease } => {
                        let index = item.index();
                        let (release, released) = oneshot::channel();
                        releases.insert(index, release);
                        worker(shared.clone(), id.clone(), index, lease, released);
                    }
                    OwnershipChange::ReleaseRequested { item, .. } => {
                        let index = item.index();
                        let Some(release) = releases.remove(&index) else {
                            continue;
                        };
                        let mut s = shared.lock().unwrap();
                        if s.slow.get(&id).is_some_and(|slow| slow.contains(&index)) {
                            s.held_slow.insert((id.clone(), index), release);
                        } else {
                            let _ = release.send(());
                        }
                    }
                    OwnershipChange::Released { item } | OwnershipChange::Lost { item, .. } => {
                        releases.remove(&item.index());
                    }
                    other => panic!("unexpected change {other:?}"),
                }
            }
        });
        self.runners
            .lock()
            .unwrap()
            .insert(id.to_string(), Runner { leave, task });
    }

    /// Asks member `id` to leave in order (`Member::leave`); it runs until every item it held
    /// was released.
    pub fn leave(&self, id: &str) {
        let runners = self.runners.lock().unwrap();
        let _ = runners[id].leave.send(());
    }

    /// True once member `id`'s stream has ended.
    pub fn has_left(&self, id: &str) -> bool {
        self.runners.lock().unwrap()[id].task.is_finished()
    }

    /// Makes member `id`'s worker for `item` ignore release requests until
    /// [`release_slow`](Self::release_slow).
    pub fn slow(&self, id: &str, item: usize) {
        let mut s = self.shared.lock().unwrap();
        s.slow.entry(id.to_string()).or_default().insert(item);
    }

    /// True while member `id`'s worker for `item` holds on to it after being asked to let go.
    pub fn holding_slow(&self, id: &str, item: usize) -> bool {
        let s = self.shared.lock().unwrap();
        s.held_slow.contains_key(&(id.to_string(), item))
    }

    /// Lets member `id`'s slow worker for `item` release it now.
    pub fn release_slow(&self, id: &str, item: usize) {
        let mut s = self.shared.lock().unwrap();
        s.slow.get_mut(id).map(|slow| slow.remove(&item));
        if let Some(release) = s.held_slow.remove(&(id.to_string(), item)) {
            let _ = release.send(());
        }
    }

    /// True if, for each item, the member `owners` names has its worker on it now (an open
    /// interval), and nobody else's worker is.
    pub fn workers_hold(&self, owners: &[String]) -> bool {
        let history = self.history();
        owners.iter().enumerate().all(|(item, owner)| {
            let open: Vec<&Interval> = history
                .iter()
                .filter(|i| i.item == item && i.ended.is_none())
                .collect();
            open.len() == 1 && open[0].member == *owner
        })
    }

    /// [`settled`] as the ensemble shows it, and the workers of this fleet on their items:
    /// the ensemble shows a grant before the member's worker has it.
    pub async fn settled(
        &self,
        view: &Partitions,
        members: usize,
        timeout: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let owners = settled(view, members, deadline - Instant::now()).await;
            let workers = Instant::now() + Duration::from_secs(5).min(deadline - Instant::now());
            while Instant::now() < workers {
                if self.workers_hold(&owners) {
                    return owners;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                Instant::now() < deadline,
                "{}: the workers never held what the ensemble shows",
                view.path()
            );
        }
    }

    /// The history so far.
    pub fn history(&self) -> Vec<Interval> {
        self.shared.lock().unwrap().history.clone()
    }

    /// How many `Acquired` changes member `id` has been sent.
    pub fn acquired(&self, id: &str) -> usize {
        *self.shared.lock().unwrap().acquired.get(id).unwrap_or(&0)
    }

    /// Total `Acquired` changes over every member.
    pub fn grants(&self) -> usize {
        self.shared.lock().unwrap().history.len()
    }

    /// No item ever had two owners: the intervals of each item, by grant, each start after
    /// the previous one ended; and the tokens of an item grow with each grant.
    pub fn assert_one_owner_at_a_time(&self) {
        let history = self.history();
        let mut by_item: HashMap<usize, Vec<&Interval>> = HashMap::new();
        for interval in &history {
            by_item.entry(interval.item).or_default().push(interval);
        }
        for (item, mut intervals) in by_item {
            intervals.sort_by_key(|i| i.granted);
            for pair in intervals.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let ended = a.ended.unwrap_or_else(|| {
                    panic!(
                        "item {item}: {} still owns it (token {}) while {} was granted it (token {})",
                        a.member, a.token, b.member, b.token
                    )
                });
                assert!(
                    ended <= b.granted,
                    "item {item}: {} owned it until {:?} after {} was granted it",
                    a.member,
                    ended - b.granted,
                    b.member
                );
                assert!(
                    b.token > a.token,
                    "item {item}: token {} granted after {}",
                    b.token,
                    a.token
                );
            }
        }
    }
}

/// A worker for one item: acts from now until asked to release (then releases) or until its
/// lease is lost.
fn worker(
    shared: Arc<Mutex<Shared>>,
    member: String,
    item: usize,
    lease: zkfence::Lease,
    released: oneshot::Receiver<()>,
) {
    let at = {
        let mut s = shared.lock().unwrap();
        s.history.push(Interval {
            item,
            member: member.clone(),
            token: lease.token(),
            granted: Instant::now(),
            ended: None,
            lost: None,
        });
        *s.acquired.entry(member.clone()).or_default() += 1;
        s.history.len() - 1
    };
    tokio::spawn(async move {
        tokio::select! {
            reason = lease.lost() => {
                shared.lock().unwrap().history[at].ended = Some(Instant::now());
                shared.lock().unwrap().history[at].lost = Some(reason);
                drop(lease);
            }
            // A dropped sender (the member told of the loss first) is no release request.
            Ok(()) = released => {
                shared.lock().unwrap().history[at].ended = Some(Instant::now());
                // Lost while releasing is fine: the item is free either way.
                let _ = lease.release().await;
            }
        }
    });
}

/// Who owns each item once the partition set `view` (made on an observer's session) has
/// settled: `members` ids are in the party, and every item is held by the member the
/// assignment gives it to, with nobody waiting for it. Waits up to `timeout`.
pub async fn settled(view: &Partitions, members: usize, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        match view.status().await {
            Ok(status) => {
                let ids: HashSet<&str> = status.members.iter().map(|m| m.id.as_str()).collect();
                let unsettled = status
                    .items
                    .iter()
                    .filter(|i| i.holder.is_none() || i.moving_to().is_some() || i.waiting > 0)
                    .count();
                if ids.len() == members && unsettled == 0 {
                    return status
                        .items
                        .iter()
                        .map(|i| i.owner.clone().expect("held by a member"))
                        .collect();
                }
                last = format!("{} members, {unsettled} items unsettled", ids.len());
            }
            Err(e) => last = format!("status failed: {e}"),
        }
        if Instant::now() >= deadline {
            panic!(
                "{} did not settle over {members} members within {timeout:?}: {last}",
                view.path()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many items changed owner between two settled states.
pub fn moved(before: &[String], after: &[String]) -> usize {
    before.iter().zip(after).filter(|(a, b)| a != b).count()
}
