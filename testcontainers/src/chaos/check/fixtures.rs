//! Hand-written histories and records for the checker's tests.

use super::super::history::at;
use super::super::{Event, FaultKind, Record};
use super::{check, Rule};

pub(crate) fn granted(ms: u64, client: usize, token: u64) -> Record {
    at(
        ms,
        Event::Granted {
            client,
            token,
            sequence: token as i32,
        },
    )
}
pub(crate) fn released(ms: u64, client: usize, token: u64) -> Record {
    at(ms, Event::Released { client, token })
}
pub(crate) fn accepted(ms: u64, client: usize, token: u64) -> Record {
    at(
        ms,
        Event::WriteAccepted {
            client,
            token,
            seq: 0,
        },
    )
}
pub(crate) fn refused(ms: u64, client: usize, token: u64, newest: u64) -> Record {
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

pub(crate) fn rules(history: &[Record]) -> Vec<Rule> {
    check(history).into_iter().map(|v| v.rule).collect()
}

pub(crate) fn pg_accepted(ms: u64, client: usize, token: u64, seq: u64) -> Record {
    at(ms, Event::PgWriteAccepted { client, token, seq })
}
pub(crate) fn pg_refused(ms: u64, client: usize, token: u64, seq: u64, newest: u64) -> Record {
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
pub(crate) fn pg_final(token: Option<u64>, writes: &[(usize, u64, u64)]) -> Record {
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
