//! Who owns what in a partition set, as an operator sees it: [`PartitionStatus`].

use crate::error::Result;
use crate::node::{self, OwnerInfo};
use crate::queue::Contender;
use crate::session::Shared;

use super::party::{item_dir, kazoo_identifier, party_dir, Maker};
use super::{Assignment, Item, Partitions};

/// A partition set now: its members and each item's owner, from [`Partitions::status`].
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// let status = session.partitions("/partitions/shards", 64).status().await?;
/// println!("{} members", status.members.len());
/// for item in &status.items {
///     let owner = item.owner_id().unwrap_or("-");
///     match item.moving_to() {
///         Some(next) => println!("{}: {owner} -> {next}", item.item),
///         None => println!("{}: {owner}", item.item),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStatus {
    /// The live members, by id, each once (sorted).
    pub members: Vec<PartyMember>,
    /// Every item, in order.
    pub items: Vec<ItemStatus>,
}

/// A live member of a partition set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartyMember {
    /// Its id: what the assignment divides the items among (with
    /// [`Assignment::Kazoo`], the identifier Kazoo reads from its node's name).
    pub id: String,
    /// Its node in the party.
    pub node: String,
    /// Its ZooKeeper session.
    pub session_id: i64,
    /// Its owner data (host, pid, and for a zkfence member its id).
    pub owner: OwnerInfo,
    /// How it divides the items, as its node's name tells: a zkfence member's
    /// [`Assignment`] (sticky unless [`kazoo_compatible`](Partitions::kazoo_compatible)),
    /// [`Assignment::Kazoo`] for a Kazoo `SetPartitioner`.
    pub assignment: Assignment,
}

/// One item of a partition set: who holds its lock, and whom the assignment gives it to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemStatus {
    /// The item.
    pub item: Item,
    /// The holder of the item's lock: its node, token, session and owner data, and when
    /// its node was created (`created_ms`; it may have waited before it held).
    pub holder: Option<Contender>,
    /// The member holding it, found by the holder's session among the members'.
    pub owner: Option<String>,
    /// How many wait in the item's queue behind the holder.
    pub waiting: usize,
    /// The member the assignment gives the item to under the live members.
    pub assigned_to: Option<String>,
}

impl ItemStatus {
    /// The member holding the item, as best known: the member whose session holds it, else
    /// the id in the holder's node data.
    pub fn owner_id(&self) -> Option<&str> {
        self.owner
            .as_deref()
            .or_else(|| self.holder.as_ref().and_then(|h| h.owner.id.as_deref()))
    }

    /// The member the item is moving to: assigned to one member, held by another or by
    /// nobody. `None` when it is where it belongs (or there are no members).
    pub fn moving_to(&self) -> Option<&str> {
        match (&self.assigned_to, &self.owner) {
            (Some(assigned), Some(owner)) if assigned == owner => None,
            (Some(assigned), _) => Some(assigned),
            (None, _) => None,
        }
    }
}

impl Partitions {
    /// The partition set now: the live members, and for every item its holder, the member
    /// holding it and the member the assignment gives it to. Read after a `sync` (our server
    /// catches up with the leader first), with one listing of the party and a few
    /// multi-reads (hundreds of items per request), whether or not this session is a member.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Notable errors
    /// - [`Error::InvalidPath`](crate::Error::InvalidPath),
    ///   [`Error::InvalidPartitions`](crate::Error::InvalidPartitions) for bad input.
    /// - [`Error::NoAuth`](crate::Error::NoAuth) if an ACL forbids reading.
    /// - [`Error::SessionExpired`](crate::Error::SessionExpired),
    ///   [`Error::SessionClosed`](crate::Error::SessionClosed).
    pub async fn status(&self) -> Result<PartitionStatus> {
        self.validate()?;
        let shared = self.session.shared();
        shared.sync(&self.path).await?;
        let members = read_members(&shared, &self.path, self.assignment).await?;
        let ids: Vec<&str> = {
            let mut ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
            ids.dedup();
            ids
        };
        let assigned = self.assignment.assign(&ids, &self.items);
        let dirs: Vec<String> = self
            .items
            .iter()
            .map(|item| item_dir(&self.path, item.name()))
            .collect();
        let listed = shared.list_many(&dirs).await?;
        let queues: Vec<Vec<(i32, String)>> = listed
            .into_iter()
            .map(|children| node::queue_order(children.unwrap_or_default()).queue)
            .collect();
        let heads: Vec<String> = dirs
            .iter()
            .zip(&queues)
            .filter_map(|(dir, queue)| queue.first().map(|(_, name)| format!("{dir}/{name}")))
            .collect();
        let mut read = shared.data_many(&heads).await?.into_iter();
        let mut items = Vec::with_capacity(self.items.len());
        for ((item, queue), assigned) in self.items.iter().zip(&queues).zip(assigned) {
            let holder = match queue.first() {
                None => None,
                Some((sequence, name)) => read.next().flatten().map(|(data, stat)| Contender {
                    node: format!("{}/{name}", item_dir(&self.path, item.name())),
                    token: crate::FencingToken::from_zxid(stat.czxid),
                    sequence: *sequence,
                    session_id: stat.ephemeral_owner,
                    owner: OwnerInfo::decode(&data),
                    created_ms: stat.ctime,
                }),
            };
            let owner = holder.as_ref().and_then(|h| {
                members
                    .iter()
                    .find(|m| m.session_id == h.session_id)
                    .map(|m| m.id.clone())
            });
            items.push(ItemStatus {
                item: item.clone(),
                holder,
                owner,
                waiting: queue.len().saturating_sub(1),
                assigned_to: assigned.map(str::to_string),
            });
        }
        Ok(PartitionStatus { members, items })
    }
}

/// The party's members, with their ids as `assignment` reads them, sorted by id.
async fn read_members(
    shared: &Shared,
    path: &str,
    assignment: Assignment,
) -> Result<Vec<PartyMember>> {
    let dir = party_dir(path);
    let Some(children) = shared.list(&dir).await? else {
        return Ok(vec![]);
    };
    let paths: Vec<String> = children.iter().map(|c| format!("{dir}/{c}")).collect();
    let read = shared.data_many(&paths).await?;
    let mut members: Vec<PartyMember> = children
        .iter()
        .zip(paths)
        .zip(read)
        .filter_map(|((name, node), read)| {
            let (data, stat) = read?;
            let owner = OwnerInfo::decode(&data);
            let id = match (assignment, Maker::of(name)) {
                (Assignment::Kazoo, _) | (_, Maker::Kazoo) => kazoo_identifier(name).to_string(),
                _ => owner.id.clone().unwrap_or_else(|| name.clone()),
            };
            Some(PartyMember {
                id,
                node,
                session_id: stat.ephemeral_owner,
                owner,
                assignment: match Maker::of(name) {
                    Maker::Sticky => Assignment::Sticky,
                    Maker::KazooCompatible | Maker::Kazoo => Assignment::Kazoo,
                },
            })
        })
        .collect();
    members.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(members)
}
