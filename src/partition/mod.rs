//! Partitioned ownership: many members divide many items, each item owned by one member at a
//! time, fenced, and moved without stopping the others. The user-facing explanation is on
//! [`Partitions`].
//!
//! One concept per file: `items.rs` (what is divided), `assignment.rs` (who should own what:
//! a pure function), `party.rs` (who the members are), `member.rs` (the member's handle and
//! its stream of changes), `driver.rs` (the task that reconciles what a member holds with its
//! assignment), `status.rs` (the operator's view).

mod assignment;
mod driver;
mod items;
mod member;
mod party;
mod status;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::session::Session;

pub use assignment::Assignment;
pub use items::{Item, Items, MAX_PARTITION_ITEMS};
pub use member::{Member, OwnershipChange};
pub use status::{ItemStatus, PartitionStatus, PartyMember};

use party::Party;

/// How long the party must be still before a member acts on a change, by default.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(1);

/// How long a worker is given to release an item the assignment moved away, by default.
pub const DEFAULT_RELEASE_WITHIN: Duration = Duration::from_secs(30);

/// A set of items divided among the live members of a party at `path`: each item owned by
/// exactly one member at a time, with a fencing token, moved from member to member as
/// members join and leave, without a coordinator and without stopping the others. Made by
/// [`Session::partitions`]; a member joins with [`join`](Self::join) and follows what it
/// owns on the [`Member`] stream.
///
/// Use it where a fleet of workers divides shards, queues, tenants or Kafka partitions so
/// that no two work on the same one ("partition ownership often removes the need for a lock
/// on every operation"): each worker then owns its items for a long time and fences its
/// writes with the item's token.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// use std::collections::HashMap;
/// use zkfence::OwnershipChange;
/// let mut member = session.partitions("/partitions/shards", 64).join("worker-3").await?;
/// let mut held = HashMap::new();
/// while let Some(change) = member.next().await {
///     match change? {
///         OwnershipChange::Acquired { item, lease } => {
///             println!("now own shard {item} (token {})", lease.token());
///             held.insert(item.index(), lease); // hand it to the shard's worker
///         }
///         OwnershipChange::ReleaseRequested { item, .. } => {
///             // The shard's worker finishes what it does, then:
///             if let Some(lease) = held.remove(&item.index()) {
///                 lease.release().await?; // its next owner is granted now
///             }
///         }
///         OwnershipChange::Lost { item, reason } => {
///             eprintln!("lost shard {item}: {reason}"); // its worker has stopped already
///             held.remove(&item.index());
///         }
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
///
/// # Guarantees
///
/// - **One owner per item, and the holder knows first.** Each item is a zkfence lock, the
///   directory `{path}/locks/{item}`; owning it is holding it, with a [`Lease`](crate::Lease):
///   its token grows with every grant of the item, and the lease is
///   [`Lost`](crate::LeaseState::Lost) before the ensemble can give the item to anyone else
///   (the lease clock; see [`Lock`](crate::Lock)).
/// - **A member that loses its session loses all its items first.** Every item a member holds
///   lives on its one ZooKeeper session, as its membership does: when the session goes quiet
///   the lease clock ends every one of those leases, and only the session's expiry frees the
///   items (and removes the member from the party).
/// - **An item moves only when its old owner let go.** The new owner waits in the item's
///   queue behind the old owner's node, and is granted when that node is gone: released by
///   the worker, or removed with the old owner's session. Nobody forces a release.
/// - **Deterministic, balanced, sticky.** Every member computes who should own each item
///   from the live members' ids and the items alone ([`Assignment`]): each of `m` members
///   gets `⌊n/m⌋` or `⌈n/m⌉` of `n` items, and a join or a leave moves about `n/m` items
///   (about 1.2 × the fewest possible, at 1,000 items over 10 members), not all of them.
///
/// # Liveness
///
/// Once the party stops changing, each item is held by the member the assignment gives it to
/// within: the [settle time](Self::settle), plus the time its old owner's worker takes to
/// release it (a worker that keeps the [`release_within`](Self::release_within) contract:
/// at most that), plus a few round trips. A member that dies leaves the party when the
/// ensemble expires its session (about its session timeout after its last heartbeat), and
/// its items are free from that same moment. An item whose old owner is slow to release
/// waits for it — and only that item: the others move on — and moves within the old owner's
/// session timeout if that owner dies.
///
/// # How it works
///
/// A member is a node in `{path}/party`, joined through the one queue (every contender
/// admitted at once), whose data names the member's id. Each member watches the party; once
/// it has been still for the settle time, the member computes the assignment and reconciles:
/// it queues for the items that are its own, cancels its waits for the others, and asks for
/// the release ([`OwnershipChange::ReleaseRequested`]) of the items it holds that are no
/// longer its own. There is no second wait loop: every wait is a lock's. Each member costs
/// the ensemble its session's keepalives while the party is still (no request per item);
/// each move costs the new owner one create and one listing, the old owner one delete.
///
/// # With Kazoo's `SetPartitioner`
///
/// The layout is the one Python Kazoo's `SetPartitioner` uses (`{path}/party` for members,
/// `{path}/locks/{item}` for a Kazoo `Lock` per item, whose node names ours match), so a
/// Kazoo member and zkfence members can divide one set: give every zkfence member
/// [`kazoo_compatible`](Self::kazoo_compatible), which divides as Kazoo does (sorted
/// identifiers, every `m`-th sorted item). Kazoo still releases every item on every change
/// (its stop-the-world rebalance); the zkfence members move only what their assignment moves.
/// A sticky zkfence member that sees a member dividing otherwise logs a warning: the items
/// both want would not settle.
#[derive(Debug, Clone)]
pub struct Partitions {
    session: Session,
    path: String,
    items: Items,
    assignment: Assignment,
    settle: Duration,
    release_within: Duration,
}

impl Session {
    /// The partition set at `path` dividing `items` (a count, `0..n`, or a set of names:
    /// see [`Items`]) among its members. Every member of one path must give the same items
    /// and the same [`Assignment`].
    ///
    /// Cheap: nothing is sent until [`Partitions::join`] or [`Partitions::status`].
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// let member = session.partitions("/partitions/tenants", ["acme", "globex", "initech"])
    ///     .join("worker-1").await?;
    /// # Ok(()) }
    /// ```
    pub fn partitions(&self, path: &str, items: impl Into<Items>) -> Partitions {
        Partitions {
            session: self.unbound(),
            path: path.to_string(),
            items: items.into(),
            assignment: Assignment::default(),
            settle: DEFAULT_SETTLE,
            release_within: DEFAULT_RELEASE_WITHIN,
        }
    }
}

impl Partitions {
    /// The partition path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The items divided.
    pub fn items(&self) -> &Items {
        &self.items
    }

    /// How the items are divided ([`Assignment::Sticky`] unless set).
    pub fn assignment(&self) -> Assignment {
        self.assignment
    }

    /// Divides the items with `assignment`. Every member of one path must use the same.
    pub fn with_assignment(mut self, assignment: Assignment) -> Self {
        self.assignment = assignment;
        self
    }

    /// Divides the items as Kazoo's `SetPartitioner` does ([`Assignment::Kazoo`]), so that
    /// Kazoo members can share the set. Our member's identifier is then what Kazoo reads from
    /// our party node's name (`{32 hex}__lease__{sequence}`), not our id.
    ///
    /// ```no_run
    /// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
    /// // Beside Python workers running kazoo's SetPartitioner("/work_queues", set=range(16)).
    /// let member = session.partitions("/work_queues", 16).kazoo_compatible()
    ///     .join("rust-worker").await?;
    /// # Ok(()) }
    /// ```
    pub fn kazoo_compatible(self) -> Self {
        self.with_assignment(Assignment::Kazoo)
    }

    /// How long the party must be still before a member acts on a change
    /// ([`DEFAULT_SETTLE`] unless set): a burst of joins (a deployment) then moves items
    /// once, not once per join. Zero acts on every change at once.
    pub fn settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// The time a worker is given to release an item the assignment moved away
    /// ([`DEFAULT_RELEASE_WITHIN`] unless set): the `deadline` of each
    /// [`ReleaseRequested`](OwnershipChange::ReleaseRequested). A release later than that
    /// still moves the item (and only then), with a warning.
    pub fn release_within(mut self, within: Duration) -> Self {
        self.release_within = within;
        self
    }

    fn validate(&self) -> Result<()> {
        crate::node::validate_path(&self.path)?;
        self.items.validate(&self.path)
    }

    /// Joins the party as member `id` and starts taking the items the assignment gives it:
    /// returns once our node is in the party, with the stream of what this member owns.
    ///
    /// The id is what the assignment divides the items by: give each member its own, and the
    /// same one across restarts (a restarted member is then given the same items back, and
    /// the others move nothing: Kafka's static membership). Two live members with one id
    /// are assigned the same items, and the second waits for them behind the first.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped join leaves no node behind.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`], [`Error::InvalidPartitions`] (bad items or id): nothing is
    ///   left behind.
    /// - [`Error::NoAuth`] if an ACL forbids joining.
    /// - [`Error::SessionExpired`] (right after an expiry, the join waits for the new session
    ///   unless reopening is off), [`Error::SessionClosed`].
    pub async fn join(&self, id: &str) -> Result<Member> {
        self.validate()?;
        if let Some(reason) = bad_id(id) {
            return Err(Error::InvalidPartitions {
                path: self.path.clone(),
                reason: format!("member id {id:?} {reason}"),
            });
        }
        let party = Party::new(&self.path, self.assignment);
        let membership = party.join(&self.session, id).await?;
        Ok(driver::start(self, id, party, membership))
    }
}

/// Why `id` cannot be a member id, if it cannot.
fn bad_id(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("is empty")
    } else if id.len() > 255 {
        Some("is longer than 255 bytes")
    } else if id.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    }
}
