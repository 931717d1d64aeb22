//! Hand-written histories and records for the checker's tests.

use super::super::history::at;
use super::super::{CommittedWrite, Event, FaultKind, Recipe, Record, LOCK_PATH};
use super::{check, Rule};

/// A grant of `path` by `recipe` (`read`: a read lock's).
pub(crate) fn grant(
    ms: u64,
    client: usize,
    token: u64,
    recipe: Recipe,
    path: &str,
    read: bool,
) -> Record {
    at(
        ms,
        Event::Granted {
            client,
            token,
            sequence: token as i32,
            recipe,
            path: path.into(),
            read,
            node: format!("{path}/_c_{client}-lock-{token:010}"),
            group: Vec::new(),
            polls: false,
        },
    )
}
/// A plain lock's grant.
pub(crate) fn granted(ms: u64, client: usize, token: u64) -> Record {
    grant(ms, client, token, Recipe::Lock, LOCK_PATH, false)
}
/// The release of a grant of `path`.
pub(crate) fn release(ms: u64, client: usize, token: u64, path: &str) -> Record {
    at(
        ms,
        Event::Released {
            client,
            token,
            path: path.into(),
        },
    )
}
/// The release of a plain lock's grant.
pub(crate) fn released(ms: u64, client: usize, token: u64) -> Record {
    release(ms, client, token, LOCK_PATH)
}
/// The loss of a grant of `path`.
pub(crate) fn lost(ms: u64, client: usize, token: u64, path: &str) -> Record {
    at(
        ms,
        Event::Lost {
            client,
            token,
            reason: "the ZooKeeper session expired".into(),
            path: path.into(),
            seen_held_us: None,
        },
    )
}
/// A write the register accepted, to `path`.
pub(crate) fn accepted_to(ms: u64, client: usize, token: u64, path: &str) -> Record {
    at(
        ms,
        Event::WriteAccepted {
            client,
            token,
            seq: 0,
            path: path.into(),
        },
    )
}
pub(crate) fn accepted(ms: u64, client: usize, token: u64) -> Record {
    accepted_to(ms, client, token, LOCK_PATH)
}
pub(crate) fn refused(ms: u64, client: usize, token: u64, newest: u64) -> Record {
    at(
        ms,
        Event::WriteRefused {
            client,
            token,
            seq: 1,
            newest,
            path: LOCK_PATH.into(),
        },
    )
}
pub(crate) fn fault(ms: u64, fault: usize, kind: FaultKind, client: Option<usize>) -> Record {
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
pub(crate) fn healed(ms: u64, fault: usize, kind: FaultKind) -> Record {
    at(ms, Event::FaultHealed { fault, kind })
}
pub(crate) fn campaign() -> Record {
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
            sinks: vec![],
            recipes: Recipe::ALL.to_vec(),
            permits: 2,
        },
    )
}
pub(crate) fn finished(ms: u64) -> Record {
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
pub(crate) fn clean() -> Vec<Record> {
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
        lost(4_002, 1, 11, LOCK_PATH),
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
                path: LOCK_PATH.into(),
                refused: false,
            },
        ),
        finished(7_000),
    ]
}

pub(crate) fn rules(history: &[Record]) -> Vec<Rule> {
    check(history).into_iter().map(|v| v.rule).collect()
}

pub(crate) fn pg_accepted(ms: u64, client: usize, token: u64, seq: u64) -> Record {
    at(
        ms,
        Event::PgWriteAccepted {
            client,
            token,
            seq,
            path: LOCK_PATH.into(),
        },
    )
}
pub(crate) fn pg_refused(ms: u64, client: usize, token: u64, seq: u64, newest: u64) -> Record {
    at(
        ms,
        Event::PgWriteRefused {
            client,
            token,
            seq,
            newest,
            path: LOCK_PATH.into(),
        },
    )
}
pub(crate) fn pg_final(token: Option<u64>, writes: &[(usize, u64, u64)]) -> Record {
    at(
        6_999,
        Event::PostgresFinal {
            token,
            tokens: Default::default(),
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

/// [`clean`] with `--postgres`: each register write also goes to PostgreSQL, which
/// refuses client 1's late write too. Client 2's report of its commit is missing (as
/// when a writer dies between its commit and its report): its log has it, which is fine.
pub(crate) fn clean_pg() -> Vec<Record> {
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

pub(crate) fn index_of(h: &[Record], pred: impl Fn(&Event) -> bool) -> usize {
    h.iter()
        .position(|r| pred(&r.event))
        .expect("in the history")
}

pub(crate) fn set_final(h: &mut [Record], token: Option<u64>, writes: &[(usize, u64, u64)]) {
    let i = index_of(h, |e| matches!(e, Event::PostgresFinal { .. }));
    h[i] = pg_final(token, writes);
}

pub(crate) const ELECTION: &str = "/zkfence-chaos/election";
pub(crate) const RWLOCK: &str = "/zkfence-chaos/rwlock";
pub(crate) const SEMAPHORE: &str = "/zkfence-chaos/semaphore";
pub(crate) const MULTI_A: &str = "/zkfence-chaos/multi/a";
pub(crate) const MULTI_B: &str = "/zkfence-chaos/multi/b";
pub(crate) const MULTI_C: &str = "/zkfence-chaos/multi/c";

/// A multi-lock's grant of `paths` (asked for `asked`), one record per path, one instant.
pub(crate) fn multi_grant(
    ms: u64,
    client: usize,
    token: u64,
    paths: &[&str],
    asked: &[&str],
) -> Vec<Record> {
    paths
        .iter()
        .map(|p| {
            let mut r = grant(ms, client, token, Recipe::Multi, p, false);
            if let Event::Granted { group, .. } = &mut r.event {
                *group = asked.iter().map(|a| a.to_string()).collect();
            }
            r
        })
        .collect()
}

/// A campaign of every recipe without trouble (the semaphore's permits are 2): leaders one
/// after the other; readers together (told in the other order than their tokens), then a
/// writer alone, then a reader; two permits held at once and a third once one ended; two
/// multi-locks sharing a path one after the other.
pub(crate) fn mixed() -> Vec<Record> {
    let mut h = vec![
        campaign(),
        grant(100, 0, 20, Recipe::Election, ELECTION, false),
        release(300, 0, 20, ELECTION),
        grant(310, 1, 21, Recipe::Election, ELECTION, false),
        release(500, 1, 21, ELECTION),
        grant(600, 1, 31, Recipe::Rwlock, RWLOCK, true),
        grant(601, 0, 30, Recipe::Rwlock, RWLOCK, true),
        release(700, 0, 30, RWLOCK),
        release(710, 1, 31, RWLOCK),
        grant(720, 2, 32, Recipe::Rwlock, RWLOCK, false),
        release(800, 2, 32, RWLOCK),
        grant(810, 0, 33, Recipe::Rwlock, RWLOCK, true),
        release(900, 0, 33, RWLOCK),
        grant(1_000, 0, 40, Recipe::Semaphore, SEMAPHORE, false),
        grant(1_050, 1, 41, Recipe::Semaphore, SEMAPHORE, false),
        release(1_400, 0, 40, SEMAPHORE),
        grant(1_420, 2, 42, Recipe::Semaphore, SEMAPHORE, false),
        release(1_450, 1, 41, SEMAPHORE),
        release(1_500, 2, 42, SEMAPHORE),
    ];
    h.extend(multi_grant(
        2_000,
        0,
        50,
        &[MULTI_A, MULTI_B],
        &[MULTI_B, MULTI_A],
    ));
    h.push(release(2_200, 0, 50, MULTI_A));
    h.push(release(2_200, 0, 50, MULTI_B));
    h.extend(multi_grant(
        2_210,
        1,
        51,
        &[MULTI_B, MULTI_C],
        &[MULTI_B, MULTI_C],
    ));
    h.push(release(2_400, 1, 51, MULTI_B));
    h.push(release(2_400, 1, 51, MULTI_C));
    h.push(finished(3_000));
    h
}

/// The index of the first record at `ms` whose event `pred` accepts.
pub(crate) fn at_ms(h: &[Record], ms: u64, pred: impl Fn(&Event) -> bool) -> usize {
    h.iter()
        .position(|r| r.t_us == ms * 1_000 && pred(&r.event))
        .expect("in the history")
}
