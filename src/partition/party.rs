//! The party: who the live members of a partition set are.
//!
//! A member is a node in `{path}/party`, made by the one queue with no limit on who holds
//! (every contender is admitted at once, as a semaphore with unbounded permits): so the
//! create's unknown outcomes, a cancelled join and the node's end with the session are the
//! queue's, and the member's presence is a [`Lease`] like any other. The node's data names the
//! member's id (the owner lines every queue node carries).
//!
//! Kazoo's `SetPartitioner` keeps its members in the same directory, as a `ShallowParty`:
//! ephemeral nodes `{32 hex}-{identifier}`, the identifier being everything after the first
//! `-`. Both kinds are read here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::lease::{Claim, Lease};
use crate::node::{self, Kind, NodeFormat, OwnerInfo};
use crate::queue::{Owner, Queue};
use crate::session::{ChildrenWatch, Session};
use crate::telemetry::Recipe;

use super::assignment::Assignment;

/// The members' directory of the partition path `path`.
pub(crate) fn party_dir(path: &str) -> String {
    format!("{path}/party")
}

/// The lock directory of the item named `name` under the partition path `path`.
pub(crate) fn item_dir(path: &str, name: &str) -> String {
    format!("{path}/locks/{name}")
}

/// Who is in the party, as one member sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// The ids the assignment divides the items among, sorted, each once.
    pub(crate) members: Vec<String>,
    /// Our id among them.
    pub(crate) me: String,
    /// Nodes of members that divide the items another way (a zkfence member with the other
    /// [`Assignment`], or a Kazoo `SetPartitioner` beside sticky members): items they want
    /// and we assign elsewhere do not settle.
    pub(crate) foreign: Vec<String>,
}

/// How a party node's name says who made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Maker {
    /// A zkfence member with the sticky assignment: `_c_{uuid}-lease-{seq}`.
    Sticky,
    /// A zkfence member with Kazoo's assignment: `{32 hex}__lease__{seq}`.
    KazooCompatible,
    /// Kazoo's `SetPartitioner` (a `ShallowParty` node), or anything else.
    Kazoo,
}

impl Maker {
    pub(crate) fn of(name: &str) -> Maker {
        if node::sequence_of(name).is_some() && name.contains("__lease__") {
            Maker::KazooCompatible
        } else if node::sequence_of(name).is_some()
            && name.starts_with("_c_")
            && name.contains("-lease-")
        {
            Maker::Sticky
        } else {
            Maker::Kazoo
        }
    }

    /// Whether a member made so divides the items as `assignment` does.
    fn agrees_with(self, assignment: Assignment) -> bool {
        match assignment {
            Assignment::Sticky => self == Maker::Sticky,
            Assignment::Kazoo => self != Maker::Sticky,
        }
    }
}

/// What Kazoo's `ShallowParty` reads as a member's identifier from its node's name:
/// everything after the first `-`, or the whole name without one.
pub(crate) fn kazoo_identifier(name: &str) -> &str {
    match name.find('-') {
        Some(at) => &name[at + 1..],
        None => name,
    }
}

/// The party of one partition path, and the ids read from its nodes.
#[derive(Clone)]
pub(crate) struct Party {
    dir: Arc<str>,
    assignment: Assignment,
    /// Ids read from members' node data, by node name: a party node's data never changes,
    /// so each is read once.
    ids: Arc<Mutex<HashMap<String, String>>>,
}

impl Party {
    pub(crate) fn new(path: &str, assignment: Assignment) -> Party {
        Party {
            dir: Arc::from(party_dir(path)),
            assignment,
            ids: Arc::default(),
        }
    }

    /// Joins as `id`: our node, and the lease that is our membership. Our node is the
    /// session's, so the session's end ends the membership with every item's lease.
    pub(crate) async fn join(&self, session: &Session, id: &str) -> Result<Lease> {
        let format = match self.assignment {
            Assignment::Sticky => NodeFormat::Curator,
            Assignment::Kazoo => NodeFormat::Kazoo,
        };
        let queue = Queue::new(
            session.clone(),
            &self.dir,
            Kind::Lease {
                permits: usize::MAX,
            },
        )
        .with_format(format)
        .with_owner(Owner::ThisProcess {
            id: Some(id.to_string()),
            revocable: false,
        })
        .with_recipe(Recipe::PartitionMember);
        let grant = queue.join(None).await?;
        let membership = Lease::new(self.dir.clone(), grant, Claim::none());
        // A lapse of the lease clock ends every item's lease; our presence stays until the
        // session ends, so a blip does not make the others take our items and hand them back.
        membership.keep_node_until_released();
        Ok(membership)
    }

    /// The party as `session` (our membership's, bound to its ZooKeeper session) sees it
    /// now, and a watch on it; `None` when our node `own_node` is not in it (someone deleted
    /// it, or the session ended).
    pub(crate) async fn view(
        &self,
        session: &Session,
        own_node: &str,
        id: &str,
    ) -> Result<Option<(View, ChildrenWatch)>> {
        let shared = session.shared();
        let Some((children, watch)) = shared.list_watched(&self.dir).await? else {
            return Ok(None);
        };
        let own = node_name(own_node);
        if !children.iter().any(|c| c == own) {
            return Ok(None);
        }
        let ids = self.ids_of(&shared, &children).await?;
        let me = match self.assignment {
            Assignment::Sticky => id.to_string(),
            Assignment::Kazoo => kazoo_identifier(own).to_string(),
        };
        Ok(Some((self.view_of(&children, &ids, me), watch)))
    }

    fn view_of(&self, children: &[String], ids: &HashMap<String, String>, me: String) -> View {
        // A node without an id was gone by the time its data was read: it is not a member
        // (named by its node name, it would be a member that is not there).
        let mut members: Vec<String> = children
            .iter()
            .filter_map(|c| match self.assignment {
                Assignment::Sticky => ids.get(c).cloned(),
                Assignment::Kazoo => Some(kazoo_identifier(c).to_string()),
            })
            .collect();
        members.sort_unstable();
        members.dedup();
        let foreign = children
            .iter()
            .filter(|c| !Maker::of(c).agrees_with(self.assignment))
            .cloned()
            .collect();
        View {
            members,
            me,
            foreign,
        }
    }

    /// The id of every child of the party that the sticky assignment needs: read from the
    /// data of zkfence members not seen before, from the name of Kazoo's.
    async fn ids_of(
        &self,
        shared: &crate::session::Shared,
        children: &[String],
    ) -> Result<HashMap<String, String>> {
        if self.assignment == Assignment::Kazoo {
            return Ok(HashMap::new());
        }
        let unknown: Vec<&String> = {
            let ids = self.ids.lock().unwrap();
            children
                .iter()
                .filter(|c| !ids.contains_key(*c) && Maker::of(c) != Maker::Kazoo)
                .collect()
        };
        let paths: Vec<String> = unknown
            .iter()
            .map(|c| format!("{}/{c}", self.dir))
            .collect();
        let read = if paths.is_empty() {
            vec![]
        } else {
            shared.data_many(&paths).await?
        };
        let mut ids = self.ids.lock().unwrap();
        for (name, data) in unknown.into_iter().zip(read) {
            // A node gone since the listing is left out: the next listing will not show it.
            if let Some((data, _)) = data {
                let id = OwnerInfo::decode(&data).id.unwrap_or_else(|| name.clone());
                ids.insert(name.clone(), id);
            }
        }
        for child in children {
            if Maker::of(child) == Maker::Kazoo && !ids.contains_key(child) {
                ids.insert(child.clone(), kazoo_identifier(child).to_string());
            }
        }
        ids.retain(|name, _| children.contains(name));
        Ok(ids.clone())
    }
}

/// The last segment of a node's path.
pub(crate) fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makers_are_told_by_their_names() {
        assert_eq!(
            Maker::of("_c_0f1e2d3c-aaaa-bbbb-cccc-000000000000-lease-0000000004"),
            Maker::Sticky
        );
        assert_eq!(
            Maker::of("0f1e2d3caaaabbbbcccc000000000000__lease__0000000004"),
            Maker::KazooCompatible
        );
        assert_eq!(
            Maker::of("0f1e2d3caaaabbbbcccc000000000000-host-4242"),
            Maker::Kazoo
        );
    }

    #[test]
    fn kazoo_reads_identifiers_after_the_first_dash() {
        assert_eq!(kazoo_identifier("0f1e-worker-1"), "worker-1");
        assert_eq!(
            kazoo_identifier("abc__lease__0000000001"),
            "abc__lease__0000000001"
        );
    }

    #[test]
    fn a_view_counts_each_id_once_and_names_members_that_divide_otherwise() {
        let party = Party::new("/p", Assignment::Sticky);
        let children = vec![
            "_c_1-lease-0000000001".to_string(),
            "_c_2-lease-0000000002".to_string(),
            "ffff-kazoo-worker".to_string(),
        ];
        let ids: HashMap<String, String> = [
            ("_c_1-lease-0000000001", "a"),
            ("_c_2-lease-0000000002", "a"),
            ("ffff-kazoo-worker", "kazoo-worker"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let view = party.view_of(&children, &ids, "a".into());
        assert_eq!(view.members, ["a", "kazoo-worker"]);
        assert_eq!(view.foreign, ["ffff-kazoo-worker"]);
        // A member's node gone before its data was read is no member.
        let mut gone = children.clone();
        gone.push("_c_3-lease-0000000003".to_string());
        assert_eq!(
            party.view_of(&gone, &ids, "a".into()).members,
            ["a", "kazoo-worker"]
        );

        let kazoo = Party::new("/p", Assignment::Kazoo);
        let view = kazoo.view_of(&children, &HashMap::new(), String::new());
        assert_eq!(
            view.members,
            ["kazoo-worker", "lease-0000000001", "lease-0000000002"]
        );
        assert_eq!(view.foreign.len(), 2);
    }
}
