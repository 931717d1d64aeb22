//! The checker: pure functions over a history, so that every rule can be tested on a
//! history written by hand.
//!
//! What a hold is: from a contender's `granted` until its own `lost`, `released` or
//! `dropped` for that token, or until its process was killed (the `kill-client` fault is
//! recorded before the SIGKILL) or exited. Two faults blind a holder: SIGSTOP
//! (`stall-holder`), after which it sees nothing until it wakes, and an expiry forced from
//! outside (`expire-session`), which the ensemble commits at once and the holder can only
//! hear of afterwards. Such a hold counts for the overlap rule only until the fault began
//! (for an expiry: or the grant, if the client was granted after the fault began and before
//! it heard of the expiry): what the holder does after it are writes, and the fence, not the
//! lock, must turn those away. The rules:
//!
//! 1. **No overlap**: no two holds intersect.
//! 2. **Tokens grow**: each grant's token is larger than the one of the grant before.
//! 3. **The fence holds**: every write the register accepted carried a token at least as new
//!    as every token it had seen; none it refused did; every accepted token had been granted
//!    to the writer.
//! 4. **Progress**: after each fault is healed, someone is granted within the campaign's
//!    bound of fault-free time (time during which another fault is active does not count).
//! 5. **Clean end**: the campaign finished, no node was left under the lock's path, no server
//!    and no contender process was left running.
//! 6. **PostgreSQL's fence holds** (`--postgres`), judged by PostgreSQL's own log of the
//!    writes it committed, in its commit order (the writers' reports come in no reliable
//!    order, and a writer may die between its commit and its report): no committed write
//!    carried a token older than one committed before it; the fence row's final token is the
//!    highest committed one; every committed token had been granted to its writer; every
//!    committed write had gone to the register first (each step writes there first); every
//!    write a writer heard committed is in the log; every refusal named a newer token that
//!    PostgreSQL had committed; and the final state was read.
//!
//! Whether the register and PostgreSQL agree on which writes are late is *not* a rule: they
//! may legitimately disagree. A writer killed or stalled between its register write and its
//! PostgreSQL write leaves the register knowing a token PostgreSQL does not, so an older
//! holder's late write is refused by the one and accepted by the other; and two writers'
//! steps can reach the two stores in different orders. Each store keeps its own rule; the
//! summary counts the writes they judged differently.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::{Event, FaultKind, Record};

/// The rule a [`Violation`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// Two holds overlapped.
    Overlap,
    /// A grant's token was not larger than the previous grant's.
    TokenOrder,
    /// The register accepted a write older than a token it had seen.
    StaleWriteAccepted,
    /// The register refused a write carrying the newest token.
    CurrentWriteRefused,
    /// The register accepted a token never granted to the writer.
    UngrantedToken,
    /// No grant within the bound after a fault was healed.
    NoProgress,
    /// Nodes were left under the lock's path.
    LeftoverNodes,
    /// Server or contender processes were left running.
    LeftoverProcesses,
    /// The lock's children could not be listed at the end, so leftovers are unknown.
    NodesUnchecked,
    /// The history has no `finished` record.
    Unfinished,
    /// PostgreSQL committed a write with a token older than one it had committed before.
    PgStaleWriteAccepted,
    /// The fence row's final token is not the highest token PostgreSQL accepted.
    PgFinalToken,
    /// PostgreSQL refused a write without having accepted a newer token.
    PgCurrentWriteRefused,
    /// PostgreSQL committed a token never granted to the writer.
    PgUngrantedToken,
    /// A write its writer heard PostgreSQL commit is not in PostgreSQL's log.
    PgLostWrite,
    /// PostgreSQL committed a write the register never saw.
    PgWithoutRegister,
    /// A `--postgres` campaign's history lacks PostgreSQL's final state.
    PgUnchecked,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Overlap => "overlapping holds",
            Rule::TokenOrder => "tokens out of order",
            Rule::StaleWriteAccepted => "stale write accepted",
            Rule::CurrentWriteRefused => "current write refused",
            Rule::UngrantedToken => "write with a token never granted to the writer",
            Rule::NoProgress => "no grant after a healed fault",
            Rule::LeftoverNodes => "nodes left under the lock's path",
            Rule::LeftoverProcesses => "processes left running",
            Rule::NodesUnchecked => "could not check for nodes left",
            Rule::Unfinished => "the campaign did not finish",
            Rule::PgStaleWriteAccepted => "stale write accepted by PostgreSQL",
            Rule::PgFinalToken => "PostgreSQL's final token is not the highest it accepted",
            Rule::PgCurrentWriteRefused => "current write refused by PostgreSQL",
            Rule::PgUngrantedToken => "PostgreSQL accepted a token never granted to the writer",
            Rule::PgLostWrite => "a write PostgreSQL committed is not in its log",
            Rule::PgWithoutRegister => "PostgreSQL committed a write the register never saw",
            Rule::PgUnchecked => "PostgreSQL's final state is missing",
        })
    }
}

/// One broken rule, with the events around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// When (microseconds since the campaign started).
    pub t_us: u64,
    /// What exactly.
    pub message: String,
    /// The events around it, in time order.
    pub around: Vec<Record>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "violation at {:.3}s: {}: {}",
            self.t_us as f64 / 1e6,
            self.rule,
            self.message
        )?;
        for r in &self.around {
            let json = serde_json::to_string(r).unwrap_or_default();
            writeln!(f, "    {:>10.3}s  {json}", r.t_us as f64 / 1e6)?;
        }
        Ok(())
    }
}

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
    start_index: usize,
    end_index: usize,
}

impl Hold {
    /// The end that counts for the overlap rule: a blinded holder's hold ends when the fault
    /// that blinded it began.
    pub fn believed_end_us(&self) -> u64 {
        self.blind_us.map_or(self.end_us, |s| s.min(self.end_us))
    }
}

/// How many records before and after an event a violation shows.
const CONTEXT: usize = 4;

/// The history in time order (stable: records of one instant keep their order).
fn ordered(history: &[Record]) -> Vec<Record> {
    let mut h = history.to_vec();
    h.sort_by_key(|r| r.t_us);
    h
}

/// Every hold of the history, in grant order.
pub fn holds(history: &[Record]) -> Vec<Hold> {
    holds_of(&ordered(history))
}

fn holds_of(h: &[Record]) -> Vec<Hold> {
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

/// Checks every rule (see the module docs) over `history` and returns what it broke, in
/// time order. An empty list: the history is clean.
pub fn check(history: &[Record]) -> Vec<Violation> {
    let h = ordered(history);
    let mut found = Vec::new();
    let around = |indices: &[usize]| -> Vec<Record> {
        let mut keep: Vec<usize> = indices
            .iter()
            .flat_map(|&i| i.saturating_sub(CONTEXT)..(i + CONTEXT + 1).min(h.len()))
            .collect();
        keep.sort_unstable();
        keep.dedup();
        keep.into_iter().map(|i| h[i].clone()).collect()
    };
    let mut violation = |rule, at: usize, message: String, indices: &[usize]| {
        found.push(Violation {
            rule,
            t_us: h[at].t_us,
            message,
            around: around(indices),
        })
    };

    // 1. No overlap: sweep the holds in grant order against the one that reaches furthest.
    let holds = holds_of(&h);
    let mut furthest: Option<&Hold> = None;
    for hold in &holds {
        if let Some(prev) = furthest {
            if hold.start_us < prev.believed_end_us() && hold.client != prev.client {
                violation(
                    Rule::Overlap,
                    hold.start_index,
                    format!(
                        "client {} was granted token {} at {:.3}s while client {} still held \
                         token {} (granted {:.3}s, until {:.3}s: {})",
                        hold.client,
                        hold.token,
                        hold.start_us as f64 / 1e6,
                        prev.client,
                        prev.token,
                        prev.start_us as f64 / 1e6,
                        prev.believed_end_us() as f64 / 1e6,
                        prev.ended_by
                    ),
                    &[prev.start_index, hold.start_index, prev.end_index],
                );
            }
        }
        if furthest.map_or(true, |f| hold.believed_end_us() > f.believed_end_us()) {
            furthest = Some(hold);
        }
    }

    // 2. Tokens grow in grant order; 3. the fence.
    let mut last_grant: Option<(usize, u64)> = None;
    let mut granted: HashSet<(usize, u64)> = HashSet::new();
    let mut newest = 0u64;
    let mut progress_bound = None;
    let mut fault_spans: Vec<(u64, u64)> = Vec::new();
    let mut open_faults: HashMap<usize, u64> = HashMap::new();
    let mut heals: Vec<(usize, usize, FaultKind)> = Vec::new();
    let mut grant_times: Vec<u64> = Vec::new();
    let mut finished = false;
    for (i, r) in h.iter().enumerate() {
        match &r.event {
            Event::Campaign { grant_bound_ms, .. } => {
                progress_bound = Some(grant_bound_ms * 1_000);
            }
            &Event::Granted { client, token, .. } => {
                if let Some((j, before)) = last_grant {
                    if token <= before {
                        violation(
                            Rule::TokenOrder,
                            i,
                            format!(
                                "client {client} was granted token {token}, not larger than \
                                 the previous grant's {before}"
                            ),
                            &[j, i],
                        );
                    }
                }
                last_grant = Some((i, token));
                granted.insert((client, token));
                grant_times.push(r.t_us);
            }
            &Event::WriteAccepted { client, token, seq } => {
                if token < newest {
                    violation(
                        Rule::StaleWriteAccepted,
                        i,
                        format!(
                            "the register accepted write {seq} of client {client} with token \
                             {token} after it had seen token {newest}"
                        ),
                        &[i],
                    );
                }
                if !granted.contains(&(client, token)) {
                    violation(
                        Rule::UngrantedToken,
                        i,
                        format!(
                            "the register accepted write {seq} of client {client} with token \
                             {token}, never granted to it"
                        ),
                        &[i],
                    );
                }
                newest = newest.max(token);
            }
            &Event::WriteRefused {
                client, token, seq, ..
            } if token >= newest => {
                violation(
                    Rule::CurrentWriteRefused,
                    i,
                    format!(
                        "the register refused write {seq} of client {client} with token \
                         {token}, the newest it had seen ({newest})"
                    ),
                    &[i],
                );
            }
            &Event::FaultStarted { fault, .. } => {
                open_faults.insert(fault, r.t_us);
            }
            &Event::FaultHealed { fault, kind } => {
                if let Some(start) = open_faults.remove(&fault) {
                    fault_spans.push((start, r.t_us));
                }
                heals.push((i, fault, kind));
            }
            Event::Finished {
                leftover_nodes,
                servers_running,
                contenders_running,
                nodes_unchecked,
            } => {
                finished = true;
                if let Some(why) = nodes_unchecked {
                    violation(Rule::NodesUnchecked, i, why.clone(), &[i]);
                }
                if !leftover_nodes.is_empty() {
                    violation(
                        Rule::LeftoverNodes,
                        i,
                        format!("left under the lock's path: {}", leftover_nodes.join(", ")),
                        &[i],
                    );
                }
                if !servers_running.is_empty() || !contenders_running.is_empty() {
                    violation(
                        Rule::LeftoverProcesses,
                        i,
                        format!(
                            "still running: servers {servers_running:?}, contenders \
                             {contenders_running:?}"
                        ),
                        &[i],
                    );
                }
            }
            _ => {}
        }
    }
    let end = h.last().map_or(0, |r| r.t_us);
    fault_spans.extend(open_faults.values().map(|&start| (start, end)));

    // 4. Progress after each heal, counting only fault-free time.
    if let Some(bound) = progress_bound {
        for &(i, fault, kind) in &heals {
            let healed = h[i].t_us;
            let next_grant = grant_times
                .iter()
                .copied()
                .find(|&t| t >= healed)
                .unwrap_or(end);
            let quiet = quiet_time(healed, next_grant, &fault_spans);
            if quiet > bound {
                let what = if next_grant == end && !grant_times.iter().any(|&t| t >= healed) {
                    "no grant followed".to_string()
                } else {
                    format!(
                        "the next grant came {:.3}s later",
                        (next_grant - healed) as f64 / 1e6
                    )
                };
                violation(
                    Rule::NoProgress,
                    i,
                    format!(
                        "fault {fault} ({kind}) was healed at {:.3}s and {what}: {:.3}s of it \
                         without any fault, more than the bound of {:.3}s",
                        healed as f64 / 1e6,
                        quiet as f64 / 1e6,
                        bound as f64 / 1e6
                    ),
                    &[i],
                );
            }
        }
    }

    // 6. PostgreSQL's fence (`--postgres`).
    let postgres = h
        .iter()
        .any(|r| matches!(r.event, Event::Campaign { postgres: true, .. }));
    if postgres {
        check_postgres(&h, &granted, &mut violation);
    }

    // 5. A clean end.
    if !finished && !h.is_empty() {
        violation(
            Rule::Unfinished,
            h.len() - 1,
            "the history has no `finished` record".into(),
            &[h.len() - 1],
        );
    }
    found.sort_by_key(|v| v.t_us);
    found
}

/// Rule 6, PostgreSQL's fence, judged by PostgreSQL's own log of the writes it committed
/// (the history's order of the writers' reports is not PostgreSQL's: a writer may report its
/// commit after a later writer reported its own, or die before it reports at all).
fn check_postgres(
    h: &[Record],
    granted: &HashSet<(usize, u64)>,
    violation: &mut impl FnMut(Rule, usize, String, &[usize]),
) {
    let Some(at) = h
        .iter()
        .rposition(|r| matches!(r.event, Event::PostgresFinal { .. }))
    else {
        violation(
            Rule::PgUnchecked,
            h.len().saturating_sub(1),
            "the history has no `postgres-final` record".into(),
            &[h.len().saturating_sub(1)],
        );
        return;
    };
    let Event::PostgresFinal {
        token: final_token,
        writes,
        error,
    } = &h[at].event
    else {
        unreachable!("found above")
    };
    if let Some(e) = error {
        violation(
            Rule::PgUnchecked,
            at,
            format!("PostgreSQL's final state could not be read: {e}"),
            &[at],
        );
        return;
    }
    // Where each step's reports and the register's decision are in the history.
    let mut reported: HashMap<(usize, u64, u64), usize> = HashMap::new();
    let mut register: HashSet<(usize, u64, u64)> = HashSet::new();
    for (i, r) in h.iter().enumerate() {
        match r.event {
            Event::PgWriteAccepted { client, token, seq } => {
                reported.insert((client, token, seq), i);
            }
            Event::WriteAccepted { client, token, seq }
            | Event::WriteRefused {
                client, token, seq, ..
            } => {
                register.insert((client, token, seq));
            }
            _ => {}
        }
    }
    let committed: HashSet<(usize, u64, u64)> = writes.iter().copied().collect();
    let committed_tokens: HashSet<u64> = writes.iter().map(|w| w.1).collect();
    let mut newest: Option<(usize, u64, u64)> = None;
    for (n, &(client, token, seq)) in writes.iter().enumerate() {
        let i = reported.get(&(client, token, seq)).copied().unwrap_or(at);
        if let Some((by, newer, its_seq)) = newest.filter(|w| token < w.1) {
            violation(
                Rule::PgStaleWriteAccepted,
                i,
                format!(
                    "PostgreSQL committed write {seq} of client {client} with token {token} \
                     (its write {} in commit order) after write {its_seq} of client {by} with \
                     token {newer}",
                    n + 1
                ),
                &[i],
            );
        }
        if newest.map_or(true, |w| token >= w.1) {
            newest = Some((client, token, seq));
        }
        if !granted.contains(&(client, token)) {
            violation(
                Rule::PgUngrantedToken,
                i,
                format!(
                    "PostgreSQL committed write {seq} of client {client} with token {token}, \
                     never granted to it"
                ),
                &[i],
            );
        }
        if !register.contains(&(client, token, seq)) {
            violation(
                Rule::PgWithoutRegister,
                i,
                format!(
                    "PostgreSQL committed write {seq} of client {client} with token {token}, \
                     which the register never saw (each step writes the register first)"
                ),
                &[i],
            );
        }
    }
    let highest = newest.map(|w| w.1);
    if *final_token != highest {
        violation(
            Rule::PgFinalToken,
            at,
            format!(
                "the fence row's final token is {final_token:?}, the highest token PostgreSQL \
                 committed {highest:?}"
            ),
            &[at],
        );
    }
    for (i, r) in h.iter().enumerate() {
        match r.event {
            Event::PgWriteAccepted { client, token, seq }
                if !committed.contains(&(client, token, seq)) =>
            {
                violation(
                    Rule::PgLostWrite,
                    i,
                    format!(
                        "client {client} heard PostgreSQL commit its write {seq} with token \
                         {token}, which is not in PostgreSQL's log"
                    ),
                    &[i, at],
                );
            }
            Event::PgWriteRefused {
                client,
                token,
                seq,
                newest,
            } if newest <= token || !committed_tokens.contains(&newest) => {
                let why = if newest <= token {
                    "not newer".to_string()
                } else {
                    "a token it never committed".to_string()
                };
                violation(
                    Rule::PgCurrentWriteRefused,
                    i,
                    format!(
                        "PostgreSQL refused write {seq} of client {client} with token {token} \
                         for token {newest}: {why}"
                    ),
                    &[i],
                );
            }
            _ => {}
        }
    }
}

/// How many writes the register and PostgreSQL judged differently (one accepted, the other
/// refused), among those both judged.
pub(crate) fn judged_differently(history: &[Record]) -> usize {
    let mut register: HashMap<(usize, u64, u64), bool> = HashMap::new();
    let mut postgres: HashMap<(usize, u64, u64), bool> = HashMap::new();
    for r in history {
        match r.event {
            Event::WriteAccepted { client, token, seq } => {
                register.insert((client, token, seq), true);
            }
            Event::WriteRefused {
                client, token, seq, ..
            } => {
                register.insert((client, token, seq), false);
            }
            Event::PgWriteRefused {
                client, token, seq, ..
            } => {
                postgres.insert((client, token, seq), false);
            }
            Event::PostgresFinal { ref writes, .. } => {
                // The log is PostgreSQL's word on what it accepted (a writer may have died
                // before it could say).
                for &w in writes {
                    postgres.insert(w, true);
                }
            }
            _ => {}
        }
    }
    postgres
        .iter()
        .filter(|(w, pg)| register.get(w).is_some_and(|reg| reg != *pg))
        .count()
}

/// The time within `from..to` covered by none of `spans`.
fn quiet_time(from: u64, to: u64, spans: &[(u64, u64)]) -> u64 {
    let mut clipped: Vec<(u64, u64)> = spans
        .iter()
        .map(|&(s, e)| (s.max(from), e.min(to)))
        .filter(|(s, e)| s < e)
        .collect();
    clipped.sort_unstable();
    let mut busy = 0;
    let mut reach = from;
    for (s, e) in clipped {
        let s = s.max(reach);
        if e > s {
            busy += e - s;
            reach = e;
        }
    }
    (to.saturating_sub(from)).saturating_sub(busy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::at;

    fn granted(ms: u64, client: usize, token: u64) -> Record {
        at(
            ms,
            Event::Granted {
                client,
                token,
                sequence: token as i32,
            },
        )
    }
    fn released(ms: u64, client: usize, token: u64) -> Record {
        at(ms, Event::Released { client, token })
    }
    fn accepted(ms: u64, client: usize, token: u64) -> Record {
        at(
            ms,
            Event::WriteAccepted {
                client,
                token,
                seq: 0,
            },
        )
    }
    fn refused(ms: u64, client: usize, token: u64, newest: u64) -> Record {
        at(
            ms,
            Event::WriteRefused {
                client,
                token,
                seq: 1,
                newest,
            },
        )
    }
    fn fault(ms: u64, fault: usize, kind: FaultKind, client: Option<usize>) -> Record {
        at(
            ms,
            Event::FaultStarted {
                fault,
                kind,
                client,
                server: None,
            },
        )
    }
    fn healed(ms: u64, fault: usize, kind: FaultKind) -> Record {
        at(ms, Event::FaultHealed { fault, kind })
    }
    fn campaign() -> Record {
        at(
            0,
            Event::Campaign {
                seed: 1,
                duration_ms: 7_000,
                nodes: 3,
                clients: 3,
                session_timeout_ms: 2_000,
                tick_time_ms: 200,
                faults: FaultKind::ALL.to_vec(),
                grant_bound_ms: 5_000,
                postgres: false,
            },
        )
    }
    fn finished(ms: u64) -> Record {
        at(
            ms,
            Event::Finished {
                leftover_nodes: vec![],
                servers_running: vec![],
                contenders_running: vec![],
                nodes_unchecked: None,
            },
        )
    }

    /// A campaign without trouble: two holds one after the other, a holder stalled past its
    /// session whose late write is refused, a killed holder, a fault healed and followed by
    /// a grant.
    fn clean() -> Vec<Record> {
        vec![
            campaign(),
            granted(100, 0, 10),
            accepted(110, 0, 10),
            released(500, 0, 10),
            granted(510, 1, 11),
            accepted(520, 1, 11),
            // Client 1 is stalled while holding; its lease expires and client 2 is granted
            // while it sleeps. Its hold ends, for the overlap rule, when the stall began.
            fault(600, 0, FaultKind::StallHolder, Some(1)),
            granted(3_000, 2, 12),
            accepted(3_010, 2, 12),
            healed(4_000, 0, FaultKind::StallHolder),
            refused(4_001, 1, 11, 12),
            at(
                4_002,
                Event::Lost {
                    client: 1,
                    token: 11,
                    reason: "the ZooKeeper session expired".into(),
                },
            ),
            // Client 2 is killed while holding; client 0 is granted after its session expired.
            fault(4_500, 1, FaultKind::KillClient, Some(2)),
            at(
                4_501,
                Event::ContenderExited {
                    client: 2,
                    status: "signal 9".into(),
                },
            ),
            healed(4_600, 1, FaultKind::KillClient),
            granted(6_600, 0, 13),
            at(
                6_700,
                Event::Dropped {
                    client: 0,
                    token: 13,
                },
            ),
            finished(7_000),
        ]
    }

    fn rules(history: &[Record]) -> Vec<Rule> {
        check(history).into_iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let found = check(&clean());
        assert!(found.is_empty(), "{found:#?}");
        let holds = holds(&clean());
        assert_eq!(holds.len(), 4);
        assert_eq!(holds[1].blind_us, Some(600_000));
        assert_eq!(
            holds[1].end_us, 4_002_000,
            "the stalled hold ends at its Lost"
        );
        assert_eq!(holds[2].ended_by, "process killed");
    }

    #[test]
    fn overlapping_holds_are_found_with_the_events_around_them() {
        let mut h = clean();
        // Client 0 releases its first hold later, after client 1's grant.
        h[3] = released(515, 0, 10);
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        let v = &found[0];
        assert_eq!(v.rule, Rule::Overlap);
        assert!(v.message.contains("client 1 was granted token 11"), "{v}");
        assert!(v.around.contains(&granted(510, 1, 11)), "{v}");
        assert!(v.around.contains(&released(515, 0, 10)), "{v}");
        let text = v.to_string();
        assert!(
            text.contains("overlapping holds") && text.contains("\"granted\""),
            "{text}"
        );
    }

    #[test]
    fn a_stall_does_not_excuse_a_holder_that_was_not_stalled() {
        // The stall hits client 0, not the holder: client 1's hold runs to its Lost at 4.002s,
        // past client 2's grant.
        let mut h = clean();
        h[6] = fault(600, 0, FaultKind::StallHolder, Some(0));
        assert_eq!(rules(&h), vec![Rule::Overlap]);
    }

    #[test]
    fn a_session_expired_from_outside_blinds_its_holder_like_a_stall() {
        let mut h = clean();
        h[6] = fault(600, 0, FaultKind::ExpireSession, Some(1));
        h[9] = healed(600, 0, FaultKind::ExpireSession);
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(holds(&h)[1].blind_us, Some(600_000));
        // Also when the expiry, asked for while the client waited, lands after its grant.
        let mut h = clean();
        h[6] = fault(505, 0, FaultKind::ExpireSession, Some(1));
        h[9] = healed(505, 0, FaultKind::ExpireSession);
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(holds(&h)[1].blind_us, Some(510_000));
        // Nor after it said the expiry failed.
        let mut failed = h.clone();
        failed.insert(
            7,
            at(
                506,
                Event::ExpiryFailed {
                    client: 1,
                    error: "no session within 4s".into(),
                },
            ),
        );
        assert_eq!(rules(&failed), vec![Rule::Overlap]);
        // Nor a hold granted after the client heard of its expiry.
        h.insert(
            7,
            at(
                506,
                Event::AcquireFailed {
                    client: 1,
                    error: "the ZooKeeper session expired".into(),
                },
            ),
        );
        assert_eq!(rules(&h), vec![Rule::Overlap]);
        // Any other instantaneous fault excuses nothing.
        let mut h = clean();
        h[6] = fault(600, 0, FaultKind::CutClient, Some(1));
        h[9] = healed(600, 0, FaultKind::CutClient);
        assert_eq!(rules(&h), vec![Rule::Overlap]);
    }

    #[test]
    fn a_token_not_larger_than_the_one_before_is_found() {
        let mut h = clean();
        h[4] = granted(510, 1, 9);
        h[5] = accepted(520, 1, 9);
        // The register then also saw 9 after 10: that is the fence's rule, found too.
        assert_eq!(rules(&h), vec![Rule::TokenOrder, Rule::StaleWriteAccepted]);
    }

    #[test]
    fn an_accepted_stale_write_is_found() {
        let mut h = clean();
        h[10] = accepted(4_001, 1, 11);
        assert_eq!(rules(&h), vec![Rule::StaleWriteAccepted]);
    }

    #[test]
    fn a_refused_current_write_is_found() {
        let mut h = clean();
        h[2] = refused(110, 0, 10, 0);
        assert_eq!(rules(&h), vec![Rule::CurrentWriteRefused]);
    }

    #[test]
    fn a_write_with_a_token_never_granted_to_the_writer_is_found() {
        let mut h = clean();
        h[2] = accepted(110, 1, 10);
        assert_eq!(rules(&h), vec![Rule::UngrantedToken]);
    }

    #[test]
    fn no_grant_within_the_bound_of_fault_free_time_after_a_heal_is_found() {
        let mut h = clean();
        // The grant after the kill comes 10 s after the heal: 5 s is the bound.
        h[15] = granted(14_600, 0, 13);
        h[16] = released(14_700, 0, 13);
        h[17] = finished(15_000);
        // Both heals before it (the stall at 4 s, the kill at 4.6 s) wait too long.
        let found = check(&h);
        assert_eq!(rules(&h), vec![Rule::NoProgress; 2], "{found:#?}");
        assert!(found[1].message.contains("kill-client"), "{}", found[1]);

        // The same wait is no violation when another fault covered most of it.
        h.insert(16, fault(5_000, 2, FaultKind::KillLeader, None));
        h.insert(17, healed(12_000, 2, FaultKind::KillLeader));
        // ...but that fault's own heal is followed by a grant 2.6 s later: fine too.
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn leftovers_and_a_missing_end_are_found() {
        let mut h = clean();
        let last = h.len() - 1;
        h[last] = at(
            7_000,
            Event::Finished {
                leftover_nodes: vec!["/chaos/_c_x-lock-0000000007".into()],
                servers_running: vec![4242],
                contenders_running: vec![],
                nodes_unchecked: None,
            },
        );
        assert_eq!(
            rules(&h),
            vec![Rule::LeftoverNodes, Rule::LeftoverProcesses]
        );
        h.pop();
        assert_eq!(rules(&h), vec![Rule::Unfinished]);
    }

    #[test]
    fn a_listing_that_could_not_be_made_is_its_own_kind_not_a_leftover() {
        // As a campaign writes it when it could not list the lock's children until its
        // deadline: no nodes are known to be left, and the run must still fail, saying why.
        let mut h = clean();
        let last = h.len() - 1;
        let line = format!(
            r#"{{"t_us":{},"event":"finished","leftover_nodes":[],"servers_running":[],"contenders_running":[],"nodes_unchecked":"cannot list /chaos: session expired"}}"#,
            h[last].t_us
        );
        h[last] = serde_json::from_str(&line).unwrap();
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        let shown = found[0].to_string();
        assert!(shown.contains("could not check for nodes left"), "{shown}");
        assert!(shown.contains("session expired"), "{shown}");
        assert!(!shown.contains("nodes left under"), "{shown}");
    }

    fn pg_accepted(ms: u64, client: usize, token: u64, seq: u64) -> Record {
        at(ms, Event::PgWriteAccepted { client, token, seq })
    }
    fn pg_refused(ms: u64, client: usize, token: u64, seq: u64, newest: u64) -> Record {
        at(
            ms,
            Event::PgWriteRefused {
                client,
                token,
                seq,
                newest,
            },
        )
    }
    fn pg_final(token: Option<u64>, writes: &[(usize, u64, u64)]) -> Record {
        at(
            6_999,
            Event::PostgresFinal {
                token,
                writes: writes.to_vec(),
                error: None,
            },
        )
    }

    /// [`clean`] with `--postgres`: each register write also goes to PostgreSQL, which
    /// refuses client 1's late write too. Client 2's report of its commit is missing (as
    /// when a writer dies between its commit and its report): its log has it, which is fine.
    fn clean_pg() -> Vec<Record> {
        let mut h = clean();
        if let Event::Campaign { postgres, .. } = &mut h[0].event {
            *postgres = true;
        }
        // After the register's decisions at 110, 520 and 4_001 (indices 2, 5, 10).
        h.insert(11, pg_refused(4_003, 1, 11, 1, 12));
        h.insert(6, pg_accepted(522, 1, 11, 0));
        h.insert(3, pg_accepted(112, 0, 10, 0));
        let last = h.len() - 1;
        h.insert(
            last,
            pg_final(Some(12), &[(0, 10, 0), (1, 11, 0), (2, 12, 0)]),
        );
        h
    }

    fn index_of(h: &[Record], pred: impl Fn(&Event) -> bool) -> usize {
        h.iter()
            .position(|r| pred(&r.event))
            .expect("in the history")
    }

    fn set_final(h: &mut [Record], token: Option<u64>, writes: &[(usize, u64, u64)]) {
        let i = index_of(h, |e| matches!(e, Event::PostgresFinal { .. }));
        h[i] = pg_final(token, writes);
    }

    #[test]
    fn a_clean_postgres_history_passes() {
        let found = check(&clean_pg());
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(judged_differently(&clean_pg()), 0);
    }

    #[test]
    fn postgres_accepting_a_token_older_than_one_it_committed_is_found() {
        // PostgreSQL commits client 1's late write after client 2's newer one.
        let mut h = clean_pg();
        let i = index_of(&h, |e| matches!(e, Event::PgWriteRefused { .. }));
        h[i] = pg_accepted(4_003, 1, 11, 1);
        set_final(
            &mut h,
            Some(12),
            &[(0, 10, 0), (1, 11, 0), (2, 12, 0), (1, 11, 1)],
        );
        let found = check(&h);
        assert_eq!(
            found.iter().map(|v| v.rule).collect::<Vec<_>>(),
            vec![Rule::PgStaleWriteAccepted],
            "{found:#?}"
        );
        assert!(
            found[0].message.contains("token 11") && found[0].message.contains("token 12"),
            "{}",
            found[0]
        );
        // Found in PostgreSQL's order, not the history's: here the late write's report comes
        // first (its writer was slow to say so), yet PostgreSQL committed it after token 12.
        let mut h = clean_pg();
        set_final(&mut h, Some(11), &[(0, 10, 0), (2, 12, 0), (1, 11, 0)]);
        assert_eq!(
            rules(&h),
            vec![Rule::PgStaleWriteAccepted, Rule::PgFinalToken]
        );
    }

    #[test]
    fn a_final_token_other_than_the_highest_accepted_is_found() {
        let mut h = clean_pg();
        set_final(&mut h, Some(11), &[(0, 10, 0), (1, 11, 0), (2, 12, 0)]);
        assert_eq!(rules(&h), vec![Rule::PgFinalToken]);
        set_final(&mut h, None, &[(0, 10, 0), (1, 11, 0), (2, 12, 0)]);
        assert_eq!(rules(&h), vec![Rule::PgFinalToken]);
    }

    #[test]
    fn postgres_refusing_a_current_write_is_found() {
        // Client 0's first write refused, as if older than the token it carries.
        let mut h = clean_pg();
        let i = index_of(&h, |e| {
            matches!(e, Event::PgWriteAccepted { client: 0, .. })
        });
        h[i] = pg_refused(112, 0, 10, 0, 10);
        set_final(&mut h, Some(12), &[(1, 11, 0), (2, 12, 0)]);
        assert_eq!(rules(&h), vec![Rule::PgCurrentWriteRefused]);
        // Or refused for a token PostgreSQL never committed.
        let mut h = clean_pg();
        let i = index_of(&h, |e| matches!(e, Event::PgWriteRefused { .. }));
        h[i] = pg_refused(4_003, 1, 11, 1, 99);
        assert_eq!(rules(&h), vec![Rule::PgCurrentWriteRefused]);
    }

    #[test]
    fn postgres_committing_a_token_never_granted_to_the_writer_is_found() {
        let mut h = clean_pg();
        // Client 1 writes with client 0's token, to both.
        h[2] = accepted(110, 1, 10);
        let i = index_of(&h, |e| {
            matches!(e, Event::PgWriteAccepted { client: 0, .. })
        });
        h[i] = pg_accepted(112, 1, 10, 0);
        set_final(&mut h, Some(12), &[(1, 10, 0), (1, 11, 0), (2, 12, 0)]);
        assert_eq!(
            rules(&h),
            vec![Rule::UngrantedToken, Rule::PgUngrantedToken]
        );
    }

    #[test]
    fn a_commit_missing_from_the_log_is_found() {
        let mut h = clean_pg();
        h.insert(9, pg_accepted(3_012, 2, 12, 0));
        set_final(&mut h, Some(11), &[(0, 10, 0), (1, 11, 0)]);
        let found = check(&h);
        assert_eq!(
            found.iter().map(|v| v.rule).collect::<Vec<_>>(),
            vec![Rule::PgLostWrite, Rule::PgCurrentWriteRefused],
            "the late write's refusal names token 12, which the log lacks too: {found:#?}"
        );
    }

    #[test]
    fn a_commit_the_register_never_saw_is_found() {
        let mut h = clean_pg();
        set_final(
            &mut h,
            Some(12),
            &[(0, 10, 0), (1, 11, 0), (1, 11, 5), (2, 12, 0)],
        );
        assert_eq!(rules(&h), vec![Rule::PgWithoutRegister]);
    }

    #[test]
    fn a_postgres_campaign_without_its_final_state_is_found() {
        let mut h = clean_pg();
        let i = index_of(&h, |e| matches!(e, Event::PostgresFinal { .. }));
        h[i] = at(
            6_999,
            Event::PostgresFinal {
                token: None,
                writes: vec![],
                error: Some("connection refused".into()),
            },
        );
        assert_eq!(rules(&h), vec![Rule::PgUnchecked]);
        h.remove(i);
        assert_eq!(rules(&h), vec![Rule::PgUnchecked]);
        // A campaign without --postgres needs none.
        assert!(check(&clean()).is_empty());
    }

    #[test]
    fn the_two_fences_may_judge_a_write_differently_without_a_violation() {
        // Client 2 is killed between its register write and its PostgreSQL write: the
        // register has seen token 12, PostgreSQL has not, so client 1's late write is
        // refused by the one and accepted by the other. Both fences kept their rule.
        let mut h = clean_pg();
        let i = index_of(&h, |e| matches!(e, Event::PgWriteRefused { .. }));
        h[i] = pg_accepted(4_003, 1, 11, 1);
        set_final(&mut h, Some(11), &[(0, 10, 0), (1, 11, 0), (1, 11, 1)]);
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(judged_differently(&h), 1);
    }

    #[test]
    fn quiet_time_subtracts_the_union_of_faults() {
        assert_eq!(quiet_time(0, 100, &[]), 100);
        assert_eq!(quiet_time(0, 100, &[(10, 30), (20, 40), (90, 200)]), 60);
        assert_eq!(quiet_time(50, 60, &[(0, 100)]), 0);
    }
}
