//! The intervals the rules are about: a contender's holds, from its grant to its own end
//! of them, and the faults that blind a holder (see the module docs of `check`).

use std::collections::HashMap;

use super::super::{Event, FaultKind, Record};
use super::ordered;

/// A contender's hold of the lock, as the checker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The holder.
    pub client: usize,
    /// The grant's token.
    pub token: u64,
    /// When it was granted.
    pub start_us: u64,
    /// When it ended (its `lost`, `released` or `dropped`, its process's death, or the end of
    /// the history).
    pub end_us: u64,
    /// When the holder was blinded while holding, if it was: its process stalled, or its
    /// session expired from outside.
    pub blind_us: Option<u64>,
    /// How it ended: the event's name, or the loss reason.
    pub ended_by: String,
    /// Index of the `granted` record in the (time-ordered) history.
    pub(super) start_index: usize,
    pub(super) end_index: usize,
}

impl Hold {
    /// The end that counts for the overlap rule: a blinded holder's hold ends when the fault
    /// that blinded it began.
    pub fn believed_end_us(&self) -> u64 {
        self.blind_us.map_or(self.end_us, |s| s.min(self.end_us))
    }
}

/// Every hold of the history, in grant order.
pub fn holds(history: &[Record]) -> Vec<Hold> {
    holds_of(&ordered(history))
}

pub(super) fn holds_of(h: &[Record]) -> Vec<Hold> {
    let mut open: HashMap<usize, Hold> = HashMap::new();
    let mut done = Vec::new();
    let mut close =
        |open: &mut HashMap<usize, Hold>, client, i: usize, by: &str, token: Option<u64>| {
            let matches = open
                .get(&client)
                .is_some_and(|o| token.map_or(true, |t| o.token == t));
            if matches {
                let mut hold = open.remove(&client).expect("checked");
                hold.end_us = h[i].t_us;
                hold.end_index = i;
                hold.ended_by = by.to_string();
                done.push(hold);
            }
        };
    for (i, r) in h.iter().enumerate() {
        match &r.event {
            &Event::Granted { client, token, .. } => {
                close(&mut open, client, i, "a new grant", None);
                open.insert(
                    client,
                    Hold {
                        client,
                        token,
                        start_us: r.t_us,
                        end_us: r.t_us,
                        blind_us: None,
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
            } => close(
                &mut open,
                *client,
                i,
                &format!("lost: {reason}"),
                Some(*token),
            ),
            &Event::Released { client, token } => {
                close(&mut open, client, i, "released", Some(token))
            }
            &Event::Dropped { client, token } => {
                close(&mut open, client, i, "dropped", Some(token))
            }
            &Event::ContenderExited { client, .. } => {
                close(&mut open, client, i, "process exited", None)
            }
            &Event::FaultStarted {
                kind: FaultKind::KillClient,
                client: Some(client),
                ..
            } => close(&mut open, client, i, "process killed", None),
            &Event::FaultStarted {
                kind: FaultKind::StallHolder,
                client: Some(client),
                ..
            } => {
                if let Some(hold) = open.get_mut(&client) {
                    hold.blind_us.get_or_insert(r.t_us);
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
                let blind = hold.start_us.max(from);
                hold.blind_us = Some(hold.blind_us.map_or(blind, |b| b.min(blind)));
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
