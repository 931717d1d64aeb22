//! PostgreSQL's fence (rule 6, `--postgres`), judged by PostgreSQL's own log of the writes
//! it committed, in its commit order; and how often it judged a write otherwise than the
//! register (not a rule).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::super::{Event, PgLogged, Record, LOCK_PATH};
use super::{Findings, Rule};

/// Rule 6, for a campaign that wrote to PostgreSQL too.
pub(super) fn check(h: &[Record], found: &mut Findings<'_>) {
    let postgres = h
        .iter()
        .any(|r| matches!(r.event, Event::Campaign { postgres: true, .. }));
    if postgres {
        check_committed(h, found);
    }
}

/// commit after a later writer reported its own, or die before it reports at all).
fn check_committed(h: &[Record], found: &mut Findings<'_>) {
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
    let Some(at) = h
        .iter()
        .rposition(|r| matches!(r.event, Event::PostgresFinal { .. }))
    else {
        found.add(
            Rule::PgUnchecked,
            h.len().saturating_sub(1),
            "the history has no `postgres-final` record".into(),
            &[h.len().saturating_sub(1)],
        );
        return;
    };
    let Event::PostgresFinal {
        token,
        tokens,
        writes,
        error,
    } = &h[at].event
    else {
        unreachable!("found above")
    };
    if let Some(e) = error {
        found.add(
            Rule::PgUnchecked,
            at,
            format!("PostgreSQL's final state could not be read: {e}"),
            &[at],
        );
        return;
    }
    // Histories from before there were several resources name the lock's fence row only.
    let mut final_tokens = tokens.clone();
    if let Some(t) = token {
        final_tokens.entry(LOCK_PATH.to_string()).or_insert(*t);
    }
    // Where each step's reports and the register's decision are in the history.
    let mut reported: HashMap<Write<'_>, usize> = HashMap::new();
    let mut register: HashSet<Write<'_>> = HashSet::new();
    for (i, r) in h.iter().enumerate() {
        match &r.event {
            Event::PgWriteAccepted {
                client,
                token,
                seq,
                path,
            } => {
                reported.insert((*client, *token, *seq, path), i);
            }
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
    let mut newest: BTreeMap<&str, &PgLogged> = BTreeMap::new();
    for (n, w) in writes.iter().enumerate() {
        let PgLogged {
            client,
            token,
            seq,
            ref path,
        } = *w;
        let i = reported.get(&as_write(w)).copied().unwrap_or(at);
        if let Some(newer) = newest.get(path.as_str()).filter(|n| token < n.token) {
            found.add(
                Rule::PgStaleWriteAccepted,
                i,
                format!(
                    "PostgreSQL committed write {seq} of client {client} to {path} with token \
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
                Rule::PgUngrantedToken,
                i,
                format!(
                    "PostgreSQL committed write {seq} of client {client} to {path} with token \
                     {token}, never granted to it"
                ),
                &[i],
            );
        }
        if !register.contains(&as_write(w)) {
            found.add(
                Rule::PgWithoutRegister,
                i,
                format!(
                    "PostgreSQL committed write {seq} of client {client} to {path} with token \
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
    if final_tokens != highest {
        found.add(
            Rule::PgFinalToken,
            at,
            format!(
                "the fence rows' final tokens are {final_tokens:?}, the highest tokens \
                 PostgreSQL committed {highest:?}"
            ),
            &[at],
        );
    }
    for (i, r) in h.iter().enumerate() {
        match r.event {
            Event::PgWriteAccepted {
                client,
                token,
                seq,
                ref path,
            } if !committed.contains(&(client, token, seq, path)) => {
                found.add(
                    Rule::PgLostWrite,
                    i,
                    format!(
                        "client {client} heard PostgreSQL commit its write {seq} to {path} with \
                         token {token}, which is not in PostgreSQL's log"
                    ),
                    &[i, at],
                );
            }
            Event::PgWriteRefused {
                client,
                token,
                seq,
                newest,
                ref path,
            } if newest <= token || !committed_tokens.contains(&(path.as_str(), newest)) => {
                let why = if newest <= token {
                    "not newer".to_string()
                } else {
                    "a token it never committed".to_string()
                };
                found.add(
                    Rule::PgCurrentWriteRefused,
                    i,
                    format!(
                        "PostgreSQL refused write {seq} of client {client} to {path} with token \
                         {token} for token {newest}: {why}"
                    ),
                    &[i],
                );
            }
            _ => {}
        }
    }
}

/// One write, as (client, token, seq, resource).
type Write<'a> = (usize, u64, u64, &'a String);

fn as_write(w: &PgLogged) -> Write<'_> {
    (w.client, w.token, w.seq, &w.path)
}

/// How many writes the register and PostgreSQL judged differently (one accepted, the other
/// refused), among those both judged.
pub(crate) fn judged_differently(history: &[Record]) -> usize {
    let mut register: HashMap<Write<'_>, bool> = HashMap::new();
    let mut postgres: HashMap<Write<'_>, bool> = HashMap::new();
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
            Event::PgWriteRefused {
                client,
                token,
                seq,
                path,
                ..
            } => {
                postgres.insert((*client, *token, *seq, path), false);
            }
            Event::PostgresFinal { writes, .. } => {
                // The log is PostgreSQL's word on what it accepted (a writer may have died
                // before it could say).
                for w in writes {
                    postgres.insert(as_write(w), true);
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, Rule};
    use super::judged_differently;
    use crate::chaos::history::at;
    use crate::chaos::Event;

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
                tokens: Default::default(),
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
}
