//! The intervals the rules are about: a contender's holds of each resource, from its grant
//! to its own end of them, the faults that blind a holder (see the module docs of `check`),
//! and what every recipe's rules ask of them: the holds a grant met, and the grants' tokens
//! in grant order.

use std::collections::{BTreeMap, HashMap};

use super::super::{Event, FaultKind, Recipe, Record};
use super::ordered;

/// A contender's hold of one resource (a lock directory), as the checker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The holder.
    pub client: usize,
    /// The grant's token.
    pub token: u64,
    /// The recipe that granted it.
    pub recipe: Recipe,
    /// The resource: the lock directory.
    pub path: String,
    /// A read lock's hold (shared with other readers).
    pub read: bool,
    /// The holder's queue node, if the history names it.
    pub node: String,
    /// A multi-lock's hold: every path its grant asked for.
    pub group: Vec<String>,
    /// When it was granted.
    pub start_us: u64,
    /// When it ended (its `lost`, `released` or `dropped`, its process's death, or the end of
    /// the history).
    pub end_us: u64,
    /// When the holder was blinded while holding, if it was: its process stalled, its
    /// session expired from outside, or an operator deleted its node (`delete-holder`).
    pub blind_us: Option<u64>,
    /// When an operator's delete of its node was answered (`delete-holder`), if one was.
    pub deleted_us: Option<u64>,
    /// A holder that polls its lease's state and saw it lost: when it last saw it held (the
    /// library said lost between then and the `lost` record, which one poll may delay).
    pub seen_held_us: Option<u64>,
    /// How it ended: the event's name, or the loss reason.
    pub ended_by: String,
    /// Index of the `granted` record in the (time-ordered) history.
    pub(super) start_index: usize,
    pub(super) end_index: usize,
}

impl Hold {
    /// The end that counts for the overlap rules: a blinded holder's hold ends when the
    /// fault that blinded it began; a poller's that saw its lease lost, at its last poll that
    /// saw it held (the library may have said lost any time after, and the holder would have
    /// seen it at its next poll).
    pub fn believed_end_us(&self) -> u64 {
        [self.blind_us, self.seen_held_us]
            .into_iter()
            .flatten()
            .fold(self.end_us, u64::min)
    }

    fn blind_from(&mut self, t_us: u64) {
        self.blind_us = Some(self.blind_us.map_or(t_us, |b| b.min(t_us)));
    }
}

/// Every hold of the history, in grant order.
pub fn holds(history: &[Record]) -> Vec<Hold> {
    holds_of(&ordered(history))
}

/// The open holds, by holder and resource.
type Open = HashMap<(usize, String), Hold>;

pub(super) fn holds_of(h: &[Record]) -> Vec<Hold> {
    let mut open: Open = HashMap::new();
    let mut done: Vec<Hold> = Vec::new();
    let close = |open: &mut Open,
                 done: &mut Vec<Hold>,
                 key: (usize, String),
                 i: usize,
                 by: &str,
                 token: Option<u64>| {
        let matches = open
            .get(&key)
            .is_some_and(|o| token.map_or(true, |t| o.token == t));
        if matches {
            let mut hold = open.remove(&key).expect("checked");
            hold.end_us = h[i].t_us;
            hold.end_index = i;
            hold.ended_by = by.to_string();
            done.push(hold);
        }
    };
    let of_client = |open: &Open, client: usize| -> Vec<(usize, String)> {
        open.keys().filter(|k| k.0 == client).cloned().collect()
    };
    let mut fault_starts: HashMap<usize, u64> = HashMap::new();
    for (i, r) in h.iter().enumerate() {
        match &r.event {
            Event::Granted {
                client,
                token,
                recipe,
                path,
                read,
                node,
                group,
                ..
            } => {
                let key = (*client, path.clone());
                close(&mut open, &mut done, key.clone(), i, "a new grant", None);
                open.insert(
                    key,
                    Hold {
                        client: *client,
                        token: *token,
                        recipe: *recipe,
                        path: path.clone(),
                        read: *read,
                        node: node.clone(),
                        group: group.clone(),
                        start_us: r.t_us,
                        end_us: r.t_us,
                        blind_us: None,
                        deleted_us: None,
                        seen_held_us: None,
                        ended_by: String::new(),
                        start_index: i,
                        end_index: i,
                    },
                );
            }
            Event::Lost {
                client,
                token,
                reason,
                path,
                seen_held_us,
            } => {
                let key = (*client, path.clone());
                if let Some(hold) = open.get_mut(&key).filter(|h| h.token == *token) {
                    hold.seen_held_us = *seen_held_us;
                }
                close(
                    &mut open,
                    &mut done,
                    key,
                    i,
                    &format!("lost: {reason}"),
                    Some(*token),
                )
            }
            Event::Released {
                client,
                token,
                path,
            } => close(
                &mut open,
                &mut done,
                (*client, path.clone()),
                i,
                "released",
                Some(*token),
            ),
            Event::Dropped {
                client,
                token,
                path,
                refused,
            } => {
                let by = match refused {
                    true => "dropped: a fence refused it and the lease never said it was lost",
                    false => "dropped",
                };
                close(
                    &mut open,
                    &mut done,
                    (*client, path.clone()),
                    i,
                    by,
                    Some(*token),
                )
            }
            &Event::ContenderExited { client, .. } => {
                for key in of_client(&open, client) {
                    close(&mut open, &mut done, key, i, "process exited", None);
                }
            }
            &Event::FaultStarted {
                fault,
                kind,
                client,
                ..
            } => {
                fault_starts.insert(fault, r.t_us);
                match (kind, client) {
                    (FaultKind::KillClient, Some(client)) => {
                        for key in of_client(&open, client) {
                            close(&mut open, &mut done, key, i, "process killed", None);
                        }
                    }
                    (FaultKind::StallHolder, Some(client)) => {
                        for key in of_client(&open, client) {
                            open.get_mut(&key).expect("listed").blind_from(r.t_us);
                        }
                    }
                    _ => {}
                }
            }
            Event::HolderNodeDeleted {
                fault,
                client,
                path,
                ..
            } => {
                // The next waiter may be granted from the moment the delete was sent: the
                // hold counts for the overlap rules until then, and `told` judges the rest.
                // The holder may have heard before the delete's answer came back.
                let sent = fault_starts.get(fault).copied().unwrap_or(r.t_us);
                let key = (*client, path.clone());
                let ended_meanwhile =
                    |h: &&mut Hold| h.client == *client && h.path == *path && h.end_us >= sent;
                let hold = match open.get_mut(&key) {
                    Some(hold) => Some(hold),
                    None => done.iter_mut().rev().find(ended_meanwhile),
                };
                if let Some(hold) = hold {
                    hold.blind_from(sent);
                    hold.deleted_us = Some(r.t_us);
                }
            }
            _ => {}
        }
    }
    let last = h.len().saturating_sub(1);
    for (_, mut hold) in open {
        hold.end_us = h.last().map_or(hold.start_us, |r| r.t_us);
        hold.end_index = last;
        hold.ended_by = "the end of the history".into();
        done.push(hold);
    }
    // A forced expiry blinds every hold of its client that meets its window.
    for (client, from, to) in expiry_windows(h) {
        for hold in done.iter_mut().filter(|hold| hold.client == client) {
            if hold.start_us <= to && hold.end_us >= from {
                hold.blind_from(hold.start_us.max(from));
            }
        }
    }
    done.sort_by_key(|hold| (hold.start_us, hold.start_index));
    done
}

/// The windows of the forced expiries, as (client, from, to): from the fault's start until
/// the client next hears of its session (a loss, a failed acquire, a new session), reports
/// that the expiry failed, or ends.
/// The expiry lands some time after the fault starts (another connection must take the
/// session over first), so a waiter may be granted in between, and learn of it only after.
fn expiry_windows(h: &[Record]) -> Vec<(usize, u64, u64)> {
    let end = h.last().map_or(0, |r| r.t_us);
    h.iter()
        .enumerate()
        .filter_map(|(i, r)| match r.event {
            Event::FaultStarted {
                kind: FaultKind::ExpireSession,
                client: Some(client),
                ..
            } => {
                let heard = h[i..]
                    .iter()
                    .find(|x| {
                        x.event.client() == Some(client)
                            && matches!(
                                x.event,
                                Event::Lost { .. }
                                    | Event::AcquireFailed { .. }
                                    | Event::ExpiryFailed { .. }
                                    | Event::Connected { .. }
                                    | Event::ContenderExited { .. }
                            )
                    })
                    .map_or(end, |x| x.t_us);
                Some((client, r.t_us, heard))
            }
            _ => None,
        })
        .collect()
}

/// The holds of one recipe, by resource, each resource's in grant order.
pub(super) fn by_resource(holds: &[Hold], recipe: Recipe) -> BTreeMap<&str, Vec<&Hold>> {
    let mut by: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds.iter().filter(|h| h.recipe == recipe) {
        by.entry(hold.path.as_str()).or_default().push(hold);
    }
    by
}

/// For each hold of one resource (given in grant order), the other contenders' holds its
/// grant met: granted before it and still believed held (see [`Hold::believed_end_us`]) at
/// its grant. What the holder was told decides each rule; this is the one place that says
/// what "at the same time" means.
pub(super) fn met_at_grant<'a>(holds: &[&'a Hold]) -> Vec<(&'a Hold, Vec<&'a Hold>)> {
    let mut out = Vec::with_capacity(holds.len());
    for (n, &hold) in holds.iter().enumerate() {
        let met: Vec<&Hold> = holds[..n]
            .iter()
            .copied()
            .filter(|prev| prev.client != hold.client && hold.start_us < prev.believed_end_us())
            .collect();
        out.push((hold, met));
    }
    out
}

/// The holds of one resource granted after `hold` (to other contenders), before `from_us`,
/// and still believed held at `to_us`: the newer holders that held it throughout
/// `from_us..=to_us`. (An older hold believed held that long is the overlap rules' to judge.)
pub(super) fn newer_throughout<'a>(
    holds: &[&'a Hold],
    hold: &Hold,
    from_us: u64,
    to_us: u64,
) -> Vec<&'a Hold> {
    holds
        .iter()
        .copied()
        .filter(|o| {
            o.client != hold.client
                && o.start_us > hold.start_us
                && o.start_us < from_us
                && o.believed_end_us() > to_us
        })
        .collect()
}

/// The message for a grant that met an earlier hold it should not have.
pub(super) fn met_message(what: &str, hold: &Hold, prev: &Hold) -> String {
    format!(
        "client {} was granted {what}token {} at {:.3}s while client {} still held \
         token {} (granted {:.3}s, until {:.3}s: {})",
        hold.client,
        hold.token,
        hold.start_us as f64 / 1e6,
        prev.client,
        prev.token,
        prev.start_us as f64 / 1e6,
        prev.believed_end_us() as f64 / 1e6,
        prev.ended_by
    )
}
