//! A member of a partition set, as its user sees it: [`Member`] and the stream of its
//! [`OwnershipChange`]s. The task behind it is `driver.rs`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::error::{LossReason, Result};
use crate::lease::{Lease, LeaseState, LossWatch};

use super::Item;
#[cfg(doc)]
use super::Partitions;
#[cfg(doc)]
use crate::error::Error;

/// A change of what a [`Member`] owns, from [`Member::next`].
///
/// Each item's changes come in the order they happen: `Acquired`, then (perhaps)
/// `ReleaseRequested`, then `Released` or `Lost`; then perhaps `Acquired` again.
#[derive(Debug)]
#[non_exhaustive]
pub enum OwnershipChange {
    /// This member now owns `item`. The lease is the item's lock, held: pass
    /// [`token`](Lease::token) with every write for the item (the resource refuses older
    /// tokens), and stop acting for the item when [`lost`](Lease::lost) resolves or
    /// [`state`](Lease::state) says [`Lost`](LeaseState::Lost) — before anyone else can be
    /// granted the item. Release it (or drop it) when asked: the item moves only then.
    Acquired {
        /// The item.
        item: Item,
        /// The item's lock, held.
        lease: Lease,
    },
    /// The assignment gives `item` to another member now: finish the work in hand, then
    /// release the item's lease, by `deadline`. Nobody else is granted the item before the
    /// lease is released or lost, however late that is: past `deadline` the member logs a
    /// warning, and [`Partitions::status`] shows the item as still moving.
    ReleaseRequested {
        /// The item.
        item: Item,
        /// When the release is due.
        deadline: Instant,
    },
    /// The worker released (or dropped) `item`'s lease.
    Released {
        /// The item.
        item: Item,
    },
    /// `item`'s lease was lost (the same reason its [`lost`](Lease::lost) gave, which came
    /// first): stop acting for it, and drop the lease. A lease lost to a lapse of the lease
    /// clock keeps its node until it is dropped, so nobody else is granted the item while the
    /// worker may still be stopping. The member takes the item again if it is still its own.
    Lost {
        /// The item.
        item: Item,
        /// Why.
        reason: LossReason,
    },
}

impl OwnershipChange {
    /// The item the change is about.
    pub fn item(&self) -> &Item {
        match self {
            OwnershipChange::Acquired { item, .. }
            | OwnershipChange::ReleaseRequested { item, .. }
            | OwnershipChange::Released { item }
            | OwnershipChange::Lost { item, .. } => item,
        }
    }
}

/// One member of a partition set, joined with [`Partitions::join`]: the stream of what it
/// comes to own and must give up.
///
/// Poll it ([`next`](Self::next), or as a `futures::Stream`) for as long as the member
/// should take part: every item it is granted arrives as an
/// [`Acquired`](OwnershipChange::Acquired) with the item's [`Lease`]. Dropping it leaves the
/// party at once: its waits are cancelled and its node deleted in the background; the
/// leases already handed out stay with whoever holds them (the items move when those are
/// released). [`leave`](Self::leave) leaves in order instead.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// use zkfence::OwnershipChange;
/// let mut member = session.partitions("/partitions/shards", 64).join("worker-3").await?;
/// let mut workers = std::collections::HashMap::new();
/// while let Some(change) = member.next().await {
///     match change? {
///         OwnershipChange::Acquired { item, lease } => {
///             workers.insert(item.index(), tokio::spawn(async move {
///                 // Work on the shard, fenced by lease.token(), until told to stop.
///                 # let _ = &lease;
///                 lease
///             }));
///         }
///         OwnershipChange::ReleaseRequested { item, .. } => {
///             if let Some(worker) = workers.remove(&item.index()) {
///                 let lease = worker.await.expect("worker");
///                 lease.release().await?; // the next owner is granted now
///             }
///         }
///         OwnershipChange::Lost { item, .. } => drop(workers.remove(&item.index())),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Member {
    pub(super) id: String,
    pub(super) path: String,
    pub(super) changes: mpsc::UnboundedReceiver<Result<OwnershipChange>>,
    pub(super) state: Arc<MemberState>,
    pub(super) leave: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

/// What the member's task shares with the handle.
#[derive(Default)]
pub(super) struct MemberState {
    /// The items whose lease was handed out and has not yet been seen to end.
    pub(super) owned: Mutex<BTreeMap<usize, (Item, LossWatch)>>,
}

impl std::fmt::Debug for MemberState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberState").finish_non_exhaustive()
    }
}

impl Member {
    /// The next change of what this member owns; `None` once the member has left (after
    /// [`leave`](Self::leave), once every item is released) or after an error item.
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet taken stays queued for the next call.
    ///
    /// # Notable errors
    /// The stream ends after an error, which says why the member stopped:
    /// - [`Error::SessionExpired`] (when the session does not reopen),
    ///   [`Error::SessionClosed`], [`Error::AuthFailed`]: the session ended for good.
    /// - [`Error::NoAuth`]: an ACL forbids joining the party or an item's queue.
    pub async fn next(&mut self) -> Option<Result<OwnershipChange>> {
        self.changes.recv().await
    }

    /// The items this member holds now: each one's lease was handed out in an
    /// [`Acquired`](OwnershipChange::Acquired) and is neither released nor lost. In item
    /// order.
    pub fn owned(&self) -> Vec<Item> {
        self.state
            .owned
            .lock()
            .unwrap()
            .values()
            .filter(|(_, watch)| !matches!(watch.state(), LeaseState::Lost(_)))
            .map(|(item, _)| item.clone())
            .collect()
    }

    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The partition path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Leaves the party in order: our node is deleted (the others divide the items without
    /// us), our waits are cancelled, and every item held is asked to be released
    /// ([`ReleaseRequested`](OwnershipChange::ReleaseRequested)); the stream ends once none
    /// is held. Keep polling it until then.
    pub fn leave(&self) {
        let _ = self.leave.send(true);
    }
}

impl futures::Stream for Member {
    type Item = Result<OwnershipChange>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.changes.poll_recv(cx)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // The task's waits (its JoinSet) and its membership lease are dropped with it: the
        // waits' nodes and ours are deleted in the background.
        self.task.abort();
    }
}
