//! The stores' fences (rule 6: `--sink`, and `--postgres` of older histories), each judged
//! by the store's own record of the writes it committed, in its commit order; and how often
//! a store judged a write otherwise than the register (not a rule).
//!
//! Histories from before `--sink` recorded PostgreSQL's answers as `pg-write-*` events and
//! its record as `postgres-final`: they are read here as the PostgreSQL store's.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::super::{CommittedWrite, Event, Record, Store, WriteOutcome, LOCK_PATH};
use super::{Findings, Rule};

/// One answer a writer heard from a store: (index in the history, client, token, seq,
/// resource, outcome, newest token named by a refusal).
struct Heard<'h> {
    at: usize,
    client: usize,
    token: u64,
    seq: u64,
    path: &'h String,
    outcome: WriteOutcome,
    newest: Option<u64>,
}

/// A store's record at the end: (index in the history, final tokens by resource, committed
/// writes in commit order, why it could not be read).
struct Final<'h> {
    at: usize,
    tokens: BTreeMap<String, u64>,
    writes: &'h [CommittedWrite],
    error: Option<&'h String>,
}

/// The stores the campaign wrote to, as its first record says.
pub(crate) fn stores_of(h: &[Record]) -> Vec<Store> {
    h.iter()
        .find_map(|r| match &r.event {
            Event::Campaign {
                postgres, sinks, ..
            } => {
                let mut stores = sinks.clone();
                if *postgres && !stores.contains(&Store::Postgres) {
                    stores.insert(0, Store::Postgres);
                }
                Some(stores)
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// What the writers heard from `store`, in the history's order.
fn heard(h: &[Record], store: Store) -> Vec<Heard<'_>> {
    let mut out = Vec::new();
    for (at, r) in h.iter().enumerate() {
        let one = |client, token, seq, path, outcome, newest| Heard {
            at,
            client,
            token,
            seq,
            path,
            outcome,
            newest,
        };
        match &r.event {
            Event::StoreWrite {
                store: s,
                client,
                token,
                seq,
                path,
                outcome,
                newest,
                ..
            } if *s == store => out.push(one(*client, *token, *seq, path, *outcome, *newest)),
            Event::PgWriteAccepted {
                client,
                token,
                seq,
                path,
            } if store == Store::Postgres => out.push(one(
                *client,
                *token,
                *seq,
                path,
                WriteOutcome::Written,
                None,
            )),
            Event::PgWriteRefused {
                client,
                token,
                seq,
                newest,
                path,
            } if store == Store::Postgres => out.push(one(
                *client,
                *token,
                *seq,
                path,
                WriteOutcome::Refused,
                Some(*newest),
            )),
            Event::PgWriteFailed {
                client,
                token,
                seq,
                path,
                ..
            } if store == Store::Postgres => {
                out.push(one(*client, *token, *seq, path, WriteOutcome::Failed, None))
            }
            _ => {}
        }
    }
    out
}

/// `store`'s record at the end, if the history has it.
fn final_of(h: &[Record], store: Store) -> Option<Final<'_>> {
    h.iter()
        .enumerate()
        .rev()
        .find_map(|(at, r)| match &r.event {
            Event::StoreFinal {
                store: s,
                tokens,
                writes,
                error,
            } if *s == store => Some(Final {
                at,
                tokens: tokens.clone(),
                writes,
                error: error.as_ref(),
            }),
            Event::PostgresFinal {
                token,
                tokens,
                writes,
                error,
            } if store == Store::Postgres => {
                // Histories from before there were several resources name the lock's fence row.
                let mut tokens = tokens.clone();
                if let Some(t) = token {
                    tokens.entry(LOCK_PATH.to_string()).or_insert(*t);
                }
                Some(Final {
                    at,
                    tokens,
                    writes,
                    error: error.as_ref(),
                })
            }
            _ => None,
        })
}

/// Rule 6, for every store the campaign wrote to.
pub(super) fn check(h: &[Record], found: &mut Findings<'_>) {
    for store in stores_of(h) {
        check_store(h, store, found);
    }
}

/// Rule 6 for one store, judged by its own record of the writes it committed (the history's
/// order of the writers' reports is not the store's: a writer may report its commit after a
/// later writer reported its own, or die before it reports at all).
fn check_store(h: &[Record], store: Store, found: &mut Findings<'_>) {
    let name = store.title();
    let granted: HashSet<(usize, &str, u64)> = h
        .iter()
        .filter_map(|r| match &r.event {
            Event::Granted {
                client,
                token,
                path,
                ..
            } => Some((*client, path.as_str(), *token)),
            _ => None,
        })
        .collect();
    let Some(Final {
        at,
        tokens: final_tokens,
        writes,
        error,
    }) = final_of(h, store)
    else {
        found.add(
            Rule::StoreUnchecked,
            h.len().saturating_sub(1),
            format!("the history has no final record of {name}"),
            &[h.len().saturating_sub(1)],
        );
        return;
    };
    if let Some(e) = error {
        found.add(
            Rule::StoreUnchecked,
            at,
            format!("{name}'s record could not be read: {e}"),
            &[at],
        );
        return;
    }
    let heard = heard(h, store);
    // Where each step's report and the register's decision are in the history.
    let mut reported: HashMap<Write<'_>, usize> = HashMap::new();
    for w in heard.iter().filter(|w| w.outcome == WriteOutcome::Written) {
        reported.insert((w.client, w.token, w.seq, w.path), w.at);
    }
    let mut register: HashSet<Write<'_>> = HashSet::new();
    for r in h {
        match &r.event {
            Event::WriteAccepted {
                client,
                token,
                seq,
                path,
            }
            | Event::WriteRefused {
                client,
                token,
                seq,
                path,
                ..
            } => {
                register.insert((*client, *token, *seq, path));
            }
            _ => {}
        }
    }
    let committed: HashSet<Write<'_>> = writes.iter().map(as_write).collect();
    let committed_tokens: HashSet<(&str, u64)> =
        writes.iter().map(|w| (w.path.as_str(), w.token)).collect();
    let mut newest: BTreeMap<&str, &CommittedWrite> = BTreeMap::new();
    for (n, w) in writes.iter().enumerate() {
        let CommittedWrite {
            client,
            token,
            seq,
            ref path,
        } = *w;
        let i = reported.get(&as_write(w)).copied().unwrap_or(at);
        if let Some(newer) = newest.get(path.as_str()).filter(|n| token < n.token) {
            found.add(
                Rule::StoreStaleWriteAccepted,
                i,
                format!(
                    "{name} committed write {seq} of client {client} to {path} with token \
                     {token} (its write {} in commit order) after write {} of client {} with \
                     token {}",
                    n + 1,
                    newer.seq,
                    newer.client,
                    newer.token
                ),
                &[i],
            );
        }
        if newest.get(path.as_str()).map_or(true, |n| token >= n.token) {
            newest.insert(path, w);
        }
        if !granted.contains(&(client, path.as_str(), token)) {
            found.add(
                Rule::StoreUngrantedToken,
                i,
                format!(
                    "{name} committed write {seq} of client {client} to {path} with token \
                     {token}, never granted to it"
                ),
                &[i],
            );
        }
        if !register.contains(&as_write(w)) {
            found.add(
                Rule::StoreWithoutRegister,
                i,
                format!(
                    "{name} committed write {seq} of client {client} to {path} with token \
                     {token}, which the register never saw (each step writes the register \
                     first)"
                ),
                &[i],
            );
        }
    }
    let highest: BTreeMap<String, u64> = newest
        .iter()
        .map(|(p, w)| (p.to_string(), w.token))
        .collect();
    // A fence below a committed token would admit older ones; one above the highest
    // committed saw a newer token whose write did not commit, which only a store whose check
    // and write are not one atomic step may show (the HTTP service: its layer admits, then
    // its handler writes; a request dropped in between leaves the fence raised, refusing
    // more, never less).
    let below = highest
        .iter()
        .any(|(p, t)| final_tokens.get(p).map_or(true, |f| f < t));
    let above = final_tokens
        .iter()
        .any(|(p, f)| highest.get(p).map_or(true, |t| f > t));
    if below || (above && store.checks_and_writes_atomically()) {
        found.add(
            Rule::StoreFinalToken,
            at,
            format!(
                "{name}'s fences' final tokens are {final_tokens:?}, the highest tokens it \
                 committed {highest:?}"
            ),
            &[at],
        );
    }
    for w in &heard {
        match w.outcome {
            WriteOutcome::Written if !committed.contains(&(w.client, w.token, w.seq, w.path)) => {
                found.add(
                    Rule::StoreLostWrite,
                    w.at,
                    format!(
                        "client {} heard {name} commit its write {} to {} with token {}, which \
                         is not in {name}'s record",
                        w.client, w.seq, w.path, w.token
                    ),
                    &[w.at, at],
                );
            }
            WriteOutcome::Refused if committed.contains(&(w.client, w.token, w.seq, w.path)) => {
                found.add(
                    Rule::StoreRefusedWriteCommitted,
                    w.at,
                    format!(
                        "{name} refused write {} of client {} to {} with token {}, and its \
                         record has it committed",
                        w.seq, w.client, w.path, w.token
                    ),
                    &[w.at, at],
                );
            }
            WriteOutcome::Refused => {
                let newest = w.newest.unwrap_or(0);
                let why = if newest <= w.token {
                    "not newer"
                } else if !committed_tokens.contains(&(w.path.as_str(), newest)) {
                    "a token it never committed"
                } else {
                    continue;
                };
                found.add(
                    Rule::StoreCurrentWriteRefused,
                    w.at,
                    format!(
                        "{name} refused write {} of client {} to {} with token {} for token \
                         {newest}: {why}",
                        w.seq, w.client, w.path, w.token
                    ),
                    &[w.at],
                );
            }
            _ => {}
        }
    }
}

/// One write, as (client, token, seq, resource).
type Write<'a> = (usize, u64, u64, &'a String);

fn as_write(w: &CommittedWrite) -> Write<'_> {
    (w.client, w.token, w.seq, &w.path)
}

/// How many writes the register and `store` judged differently (one accepted, the other
/// refused), among those both judged.
pub(crate) fn judged_differently(history: &[Record], store: Store) -> usize {
    let mut register: HashMap<Write<'_>, bool> = HashMap::new();
    for r in history {
        match &r.event {
            Event::WriteAccepted {
                client,
                token,
                seq,
                path,
            } => {
                register.insert((*client, *token, *seq, path), true);
            }
            Event::WriteRefused {
                client,
                token,
                seq,
                path,
                ..
            } => {
                register.insert((*client, *token, *seq, path), false);
            }
            _ => {}
        }
    }
    let mut judged: HashMap<Write<'_>, bool> = HashMap::new();
    for w in heard(history, store) {
        if w.outcome == WriteOutcome::Refused {
            judged.insert((w.client, w.token, w.seq, w.path), false);
        }
    }
    // The record is the store's word on what it accepted (a writer may have died before it
    // could say).
    if let Some(f) = final_of(history, store) {
        for w in f.writes {
            judged.insert(as_write(w), true);
        }
    }
    judged
        .iter()
        .filter(|(w, s)| register.get(w).is_some_and(|reg| reg != *s))
        .count()
}

/// The writes `store` committed, by its record (or, if it could not be read, what the
/// writers heard), and the late writes it refused.
pub(crate) fn counts(history: &[Record], store: Store) -> (usize, usize) {
    let heard = heard(history, store);
    let refused = heard
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Refused)
        .count();
    let committed = match final_of(history, store) {
        Some(f) if f.error.is_none() => f.writes.len(),
        _ => heard
            .iter()
            .filter(|w| w.outcome == WriteOutcome::Written)
            .count(),
    };
    (committed, refused)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, Rule};
    use super::judged_differently;
    use crate::chaos::history::at;
    use crate::chaos::{CommittedWrite, Event, Record, Store, WriteOutcome, LOCK_PATH};

    #[test]
    fn a_clean_postgres_history_passes() {
        let found = check(&clean_pg());
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(judged_differently(&clean_pg(), Store::Postgres), 0);
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
            vec![Rule::StoreStaleWriteAccepted],
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
            vec![Rule::StoreStaleWriteAccepted, Rule::StoreFinalToken]
        );
    }

    #[test]
    fn a_final_token_other_than_the_highest_accepted_is_found() {
        let mut h = clean_pg();
        set_final(&mut h, Some(11), &[(0, 10, 0), (1, 11, 0), (2, 12, 0)]);
        assert_eq!(rules(&h), vec![Rule::StoreFinalToken]);
        set_final(&mut h, None, &[(0, 10, 0), (1, 11, 0), (2, 12, 0)]);
        assert_eq!(rules(&h), vec![Rule::StoreFinalToken]);
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
        assert_eq!(rules(&h), vec![Rule::StoreCurrentWriteRefused]);
        // Or refused for a token PostgreSQL never committed.
        let mut h = clean_pg();
        let i = index_of(&h, |e| matches!(e, Event::PgWriteRefused { .. }));
        h[i] = pg_refused(4_003, 1, 11, 1, 99);
        assert_eq!(rules(&h), vec![Rule::StoreCurrentWriteRefused]);
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
            vec![Rule::UngrantedToken, Rule::StoreUngrantedToken]
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
            vec![Rule::StoreLostWrite, Rule::StoreCurrentWriteRefused],
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
        assert_eq!(rules(&h), vec![Rule::StoreWithoutRegister]);
    }

    #[test]
    fn a_postgres_campaign_without_its_final_state_is_found() {
        let mut h = clean_pg();
        let i = index_of(&h, |e| matches!(e, Event::PostgresFinal { .. }));
        h[i] = at(
            6_999,
            Event::PostgresFinal {
                token: None,
                tokens: Default::default(),
                writes: vec![],
                error: Some("connection refused".into()),
            },
        );
        assert_eq!(rules(&h), vec![Rule::StoreUnchecked]);
        h.remove(i);
        assert_eq!(rules(&h), vec![Rule::StoreUnchecked]);
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
        assert_eq!(judged_differently(&h, Store::Postgres), 1);
    }

    fn store_write(ms: u64, store: Store, client: usize, token: u64, seq: u64) -> Record {
        at(
            ms,
            Event::StoreWrite {
                store,
                client,
                token,
                seq,
                path: LOCK_PATH.into(),
                outcome: WriteOutcome::Written,
                newest: None,
                error: None,
            },
        )
    }

    fn store_final(store: Store, newest: u64, writes: &[(usize, u64, u64)]) -> Record {
        at(
            6_999,
            Event::StoreFinal {
                store,
                tokens: [(LOCK_PATH.to_string(), newest)].into(),
                writes: writes
                    .iter()
                    .map(|&(client, token, seq)| CommittedWrite {
                        client,
                        token,
                        seq,
                        path: LOCK_PATH.into(),
                    })
                    .collect(),
                error: None,
            },
        )
    }

    /// [`clean`] with `--sink redis,http`: each register write also goes to both, which
    /// refuse client 1's late write too.
    fn clean_sinks() -> Vec<Record> {
        let mut h = clean();
        if let Event::Campaign { sinks, .. } = &mut h[0].event {
            *sinks = vec![Store::Redis, Store::Http];
        }
        for store in [Store::Redis, Store::Http] {
            h.push(store_write(112, store, 0, 10, 0));
            h.push(store_write(522, store, 1, 11, 0));
            h.push(store_write(3_012, store, 2, 12, 0));
            let mut refused = store_write(4_003, store, 1, 11, 1);
            if let Event::StoreWrite {
                outcome, newest, ..
            } = &mut refused.event
            {
                *outcome = WriteOutcome::Refused;
                *newest = Some(12);
            }
            h.push(refused);
            h.push(store_final(
                store,
                12,
                &[(0, 10, 0), (1, 11, 0), (2, 12, 0)],
            ));
        }
        h.sort_by_key(|r| r.t_us);
        h
    }

    fn set_store_final(h: &mut [Record], store: Store, newest: u64, writes: &[(usize, u64, u64)]) {
        let i = index_of(
            h,
            |e| matches!(e, Event::StoreFinal { store: s, .. } if *s == store),
        );
        h[i] = store_final(store, newest, writes);
    }

    #[test]
    fn every_sink_is_judged_by_its_own_record() {
        let found = check(&clean_sinks());
        assert!(found.is_empty(), "{found:#?}");
        // Redis commits client 1's late write after client 2's newer one; the HTTP service
        // does not.
        let mut h = clean_sinks();
        set_store_final(
            &mut h,
            Store::Redis,
            12,
            &[(0, 10, 0), (1, 11, 0), (2, 12, 0), (1, 11, 1)],
        );
        let found = check(&h);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(found[0].rule, Rule::StoreRefusedWriteCommitted);
        assert!(
            found[0].message.starts_with("Redis refused write 1"),
            "{}",
            found[0]
        );
        let found = &found[1..];
        assert_eq!(found[0].rule, Rule::StoreStaleWriteAccepted);
        assert!(
            found[0]
                .message
                .starts_with("Redis committed write 1 of client 1"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn a_fence_above_its_highest_commit_is_allowed_only_where_check_and_write_are_apart() {
        // A request dropped between the HTTP layer's admission and its handler's write.
        let mut h = clean_sinks();
        set_store_final(
            &mut h,
            Store::Http,
            13,
            &[(0, 10, 0), (1, 11, 0), (2, 12, 0)],
        );
        assert!(check(&h).is_empty(), "{:#?}", check(&h));
        let mut h = clean_sinks();
        set_store_final(
            &mut h,
            Store::Redis,
            13,
            &[(0, 10, 0), (1, 11, 0), (2, 12, 0)],
        );
        assert_eq!(rules(&h), vec![Rule::StoreFinalToken]);
        // Below the highest commit is wrong everywhere: it would admit older tokens.
        let mut h = clean_sinks();
        set_store_final(
            &mut h,
            Store::Http,
            11,
            &[(0, 10, 0), (1, 11, 0), (2, 12, 0)],
        );
        assert_eq!(rules(&h), vec![Rule::StoreFinalToken]);
    }

    #[test]
    fn a_sink_without_its_record_is_found() {
        let mut h = clean_sinks();
        let i = index_of(&h, |e| {
            matches!(
                e,
                Event::StoreFinal {
                    store: Store::Http,
                    ..
                }
            )
        });
        h.remove(i);
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::StoreUnchecked);
        assert!(found[0].message.contains("HTTP service"), "{}", found[0]);
    }
}
