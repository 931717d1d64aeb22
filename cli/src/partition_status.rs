//! `zkfence status PATH` for a partition set (`Session::partitions`, or Kazoo's
//! `SetPartitioner`): each item, its owner, token, how long it has been queued, and the
//! member it is moving to.

use serde::Serialize;
use zkfence::zookeeper_client as zk;
use zkfence::{Assignment, ItemStatus, Items, PartitionStatus, Session};

use crate::exit::Failure;
use crate::status::{age_ms, columns, session_hex};

/// A partition set as `status` found it.
#[derive(Debug)]
pub struct Seen {
    pub status: PartitionStatus,
    pub assignment: Assignment,
    /// The items were given with --items (else read from the lock directories).
    pub items_given: bool,
    /// Members that divide the items otherwise than `assignment`.
    pub dividing_otherwise: usize,
}

/// True if the children of a path are a partition set's: its party and its item locks.
pub fn is_partition_set(children: &[String]) -> bool {
    children.iter().any(|c| c == "party") && !children.iter().any(|c| c == "leases")
}

/// `--items`: a count (`1000`) or comma-separated names.
pub fn parse_items(text: &str) -> Result<Items, String> {
    if let Ok(n) = text.trim().parse::<usize>() {
        return Ok(Items::count(n));
    }
    let names: Vec<&str> = text.split(',').map(str::trim).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(format!(
            "--items takes a count (1000) or comma-separated names (emails,invoices), not {text:?}"
        ));
    }
    Ok(Items::names(names))
}

/// The items that have a lock directory now: a count if every name is a number (`0` to the
/// largest), else the names in order.
fn items_in(names: Vec<String>) -> Items {
    let numbers: Option<Vec<usize>> = names.iter().map(|n| n.parse().ok()).collect();
    match numbers {
        Some(numbers) if !numbers.is_empty() => {
            Items::count(numbers.into_iter().max().unwrap_or(0) + 1)
        }
        _ => {
            let mut names = names;
            names.sort();
            Items::names(names)
        }
    }
}

pub async fn look(session: &Session, path: &str, items: Option<&Items>) -> Result<Seen, Failure> {
    let items_given = items.is_some();
    let items = match items {
        Some(items) => items.clone(),
        None => {
            let locks = format!("{path}/locks");
            match session.client().list_children(&locks).await {
                Ok(names) => items_in(names),
                Err(zk::Error::NoNode) => Items::count(0),
                Err(e) => {
                    return Err(Failure::new(
                        crate::exit::UNAVAILABLE,
                        format!("could not list {locks}: {e}"),
                    ))
                }
            }
        }
    };
    let sticky = session.partitions(path, items.clone()).status().await?;
    // The members' node names say how they divide: read again with Kazoo's rule when they
    // all use it (a Kazoo SetPartitioner, or zkfence members made kazoo_compatible).
    let kazoo = sticky
        .members
        .iter()
        .filter(|m| m.assignment == Assignment::Kazoo)
        .count();
    let (status, assignment) = if kazoo > 0 && kazoo * 2 >= sticky.members.len() {
        let status = session
            .partitions(path, items)
            .kazoo_compatible()
            .status()
            .await?;
        (status, Assignment::Kazoo)
    } else {
        (sticky, Assignment::Sticky)
    };
    let dividing_otherwise = status
        .members
        .iter()
        .filter(|m| m.assignment != assignment)
        .count();
    Ok(Seen {
        status,
        assignment,
        items_given,
        dividing_otherwise,
    })
}

fn assignment_name(assignment: Assignment) -> &'static str {
    match assignment {
        Assignment::Kazoo => "kazoo",
        _ => "sticky",
    }
}

/// The partition part of the `status --json` document.
#[derive(Debug, Serialize)]
pub struct Report {
    /// "sticky" or "kazoo": how the members divide the items.
    assignment: &'static str,
    /// "given" (--items) or "lock directories" (the items that have one now).
    items_from: &'static str,
    members: Vec<MemberEntry>,
    items: Vec<ItemEntry>,
}

#[derive(Debug, Serialize)]
struct MemberEntry {
    id: String,
    node: String,
    session_id: String,
    assignment: &'static str,
    host: Option<String>,
    pid: Option<u32>,
}

#[derive(Debug, Serialize)]
struct ItemEntry {
    item: String,
    /// The member holding it (found by session), or the id in the holder's node data.
    owner: Option<String>,
    token: Option<u64>,
    session_id: Option<String>,
    node: Option<String>,
    /// Since the holder's node was created (it may have waited before it held).
    age_ms: Option<u64>,
    /// Contenders queued behind the holder.
    waiting: usize,
    /// The member the assignment gives it to under the live members.
    assigned_to: Option<String>,
    /// `assigned_to` when the item is not held by it: the item is moving there.
    moving_to: Option<String>,
}

impl ItemEntry {
    fn of(i: &ItemStatus) -> ItemEntry {
        ItemEntry {
            item: i.item.name().to_string(),
            owner: i.owner_id().map(str::to_string),
            token: i.holder.as_ref().map(|h| h.token.get()),
            session_id: i.holder.as_ref().map(|h| session_hex(h.session_id)),
            node: i.holder.as_ref().map(|h| h.node.clone()),
            age_ms: i.holder.as_ref().map(|h| age_ms(h.created_ms)),
            waiting: i.waiting,
            assigned_to: i.assigned_to.clone(),
            moving_to: i.moving_to().map(str::to_string),
        }
    }
}

pub fn report(seen: &Seen) -> Report {
    Report {
        assignment: assignment_name(seen.assignment),
        items_from: if seen.items_given {
            "given"
        } else {
            "lock directories"
        },
        members: seen
            .status
            .members
            .iter()
            .map(|m| MemberEntry {
                id: m.id.clone(),
                node: m.node.clone(),
                session_id: session_hex(m.session_id),
                assignment: assignment_name(m.assignment),
                host: m.owner.host.clone(),
                pid: m.owner.pid,
            })
            .collect(),
        items: seen.status.items.iter().map(ItemEntry::of).collect(),
    }
}

pub fn describe(path: &str, seen: &Seen) -> String {
    let status = &seen.status;
    let moving = status
        .items
        .iter()
        .filter(|i| i.moving_to().is_some())
        .count();
    let mut ids: Vec<&str> = status.members.iter().map(|m| m.id.as_str()).collect();
    ids.dedup();
    let mut out = format!(
        "{path}: partition set, {} items{} over {} member{} ({} assignment), {moving} moving\n",
        status.items.len(),
        if seen.items_given {
            ""
        } else {
            " (those with a lock directory; --items names the set)"
        },
        ids.len(),
        if ids.len() == 1 { "" } else { "s" },
        assignment_name(seen.assignment),
    );
    if !ids.is_empty() {
        out += &format!("members: {}\n", ids.join(", "));
    }
    if seen.dividing_otherwise > 0 {
        out += &format!(
            "warning: {} member(s) divide the items another way: the items both want do not settle\n",
            seen.dividing_otherwise
        );
    }
    if status.items.is_empty() {
        return out;
    }
    // SINCE is how long the holder's node has existed: it may have waited before it held.
    let header = ["ITEM", "OWNER", "TOKEN", "SINCE", "MOVING TO"].map(String::from);
    let rows: Vec<[String; 5]> = status
        .items
        .iter()
        .map(|i| {
            let moving = match (i.moving_to(), i.waiting) {
                (Some(to), 0) => to.to_string(),
                (Some(to), n) => format!("{to} ({n} waiting)"),
                (None, 0) => String::new(),
                (None, n) => format!("({n} waiting)"),
            };
            [
                i.item.name().to_string(),
                i.owner_id().unwrap_or("-").to_string(),
                i.holder
                    .as_ref()
                    .map_or("-".into(), |h| h.token.to_string()),
                i.holder.as_ref().map_or("-".into(), |h| {
                    format!("{:.1}s", age_ms(h.created_ms) as f64 / 1000.0)
                }),
                moving,
            ]
        })
        .collect();
    out + &columns(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_a_count_or_names() {
        assert_eq!(parse_items("12").unwrap().len(), 12);
        let names = parse_items("a, b,c").unwrap();
        assert_eq!(
            names.iter().map(|i| i.name()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert!(parse_items("a,,b").unwrap_err().contains("--items"));
    }

    #[test]
    fn lock_directories_named_by_numbers_are_a_count_to_the_largest() {
        let items = items_in(vec!["3".into(), "0".into(), "7".into()]);
        assert_eq!(items.len(), 8);
        let items = items_in(vec!["b".into(), "a".into()]);
        assert_eq!(
            items.iter().map(|i| i.name()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn a_partition_set_has_a_party_and_no_leases() {
        assert!(is_partition_set(&["party".into(), "locks".into()]));
        assert!(!is_partition_set(&["locks".into(), "leases".into()]));
        assert!(!is_partition_set(&["_c_x-lock-0000000001".into()]));
    }
}
