//! What a campaign records: every event, stamped on one clock, written as JSON lines.
//!
//! The clock is `CLOCK_MONOTONIC`, which every process of the machine reads alike: each
//! contender process stamps its own events when they happen (not when the campaign reads
//! them from its pipe), so the campaign and the contenders share one time line.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::recipe::LOCK_PATH;
use super::{FaultKind, Recipe, Store};

/// Microseconds on `CLOCK_MONOTONIC`, the one clock of a campaign and its contenders.
pub(crate) fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes only the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// Appends events to the campaign's history, stamped on the campaign's clock.
#[derive(Clone)]
pub(crate) struct Recorder {
    pub(crate) origin_us: u64,
    history: Arc<Mutex<Vec<Record>>>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            origin_us: monotonic_us(),
            history: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub(crate) fn record(&self, event: Event) {
        let t_us = monotonic_us().saturating_sub(self.origin_us);
        self.history.lock().unwrap().push(Record { t_us, event });
    }

    pub(crate) fn push(&self, record: Record) {
        self.history.lock().unwrap().push(record);
    }

    pub(crate) fn now(&self) -> Duration {
        Duration::from_micros(monotonic_us().saturating_sub(self.origin_us))
    }

    /// The history so far, in time order.
    pub(crate) fn snapshot(&self) -> Vec<Record> {
        let mut h = self.history.lock().unwrap().clone();
        h.sort_by_key(|r| r.t_us);
        h
    }
}

/// One recorded event, with its time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Microseconds since the campaign started.
    pub t_us: u64,
    /// What happened.
    #[serde(flatten)]
    pub event: Event,
}

/// Everything a campaign records. Clients are numbered `0..clients`; a contender process that
/// was killed and started again keeps its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The first record: the settings the rest of the history was made with.
    Campaign {
        /// The seed of the fault schedule.
        seed: u64,
        /// How long faults were injected.
        #[serde(default)]
        duration_ms: u64,
        /// Servers in the ensemble.
        nodes: usize,
        /// Contender processes.
        clients: usize,
        /// The contenders' session timeout.
        session_timeout_ms: u64,
        /// The servers' tickTime.
        tick_time_ms: u64,
        /// The fault kinds chosen.
        faults: Vec<FaultKind>,
        /// The bound of the liveness check: a grant within this much fault-free time after
        /// each heal.
        grant_bound_ms: u64,
        /// Whether every write also went to a PostgreSQL row (`--postgres` in histories from
        /// before `--sink`; see `sinks`).
        #[serde(default)]
        postgres: bool,
        /// The stores every write also went to, each through its fence (`--sink`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sinks: Vec<Store>,
        /// The recipes the contenders drove (histories before there was a choice: the lock).
        #[serde(default = "lock_only")]
        recipes: Vec<Recipe>,
        /// The semaphore's permits (with [`Recipe::Semaphore`]).
        #[serde(default, skip_serializing_if = "is_zero")]
        permits: usize,
    },
    /// A contender process started (again).
    ContenderStarted {
        /// Its number.
        client: usize,
        /// Its process id.
        pid: u32,
    },
    /// A contender's session is established (the first time, and after each reopening).
    Connected {
        /// The contender.
        client: usize,
        /// The ZooKeeper session id, in hex.
        session: String,
    },
    /// A contender was granted a resource: a lock, a leadership, a read or write side, a
    /// permit, or one path of a multi-lock (a multi-lock's grant is one record per path, all
    /// stamped with one time).
    Granted {
        /// The contender.
        client: usize,
        /// The fencing token of the grant.
        token: u64,
        /// The sequence number of its queue node.
        sequence: i32,
        /// The recipe it was granted by.
        #[serde(default)]
        recipe: Recipe,
        /// The resource: the lock directory.
        #[serde(default = "lock_path")]
        path: String,
        /// A read lock's grant (shared with other readers).
        #[serde(default, skip_serializing_if = "is_false")]
        read: bool,
        /// The holder's queue node (what `delete-holder` deletes).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        node: String,
        /// A multi-lock's grant: every path the contender asked for, this one included.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        group: Vec<String>,
        /// Whether the holder learns of a loss by looking at its lease's state every 10 ms
        /// (as a holder that checks before each write), not by awaiting `lost()`.
        #[serde(default, skip_serializing_if = "is_false")]
        polls: bool,
    },
    /// A contender's acquire timed out (it queues again).
    AcquireTimeout {
        /// The contender.
        client: usize,
    },
    /// A contender's acquire failed (it queues again).
    AcquireFailed {
        /// The contender.
        client: usize,
        /// The library's error.
        error: String,
    },
    /// A contender could not expire its session when asked (`expire-session`): the fault
    /// did nothing.
    ExpiryFailed {
        /// The contender.
        client: usize,
        /// Why.
        error: String,
    },
    /// The lease told its holder it is lost (a multi-lock's holder: one record per path).
    Lost {
        /// The holder.
        client: usize,
        /// The token of the lost grant.
        token: u64,
        /// The [`LossReason`](zkfence::LossReason), as printed.
        reason: String,
        /// The resource.
        #[serde(default = "lock_path")]
        path: String,
        /// For a holder that polls its lease's state (every 10 ms): when it last saw the
        /// grant held. The library said lost at some moment after that, up to this record;
        /// the holder knew first if no one else was granted before that moment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seen_held_us: Option<u64>,
    },
    /// The holder stops acting as holder and releases (recorded before the release is sent).
    Released {
        /// The holder.
        client: usize,
        /// The token of the grant.
        token: u64,
        /// The resource.
        #[serde(default = "lock_path")]
        path: String,
    },
    /// The holder stops acting as holder and drops the lease (recorded before the drop).
    Dropped {
        /// The holder.
        client: usize,
        /// The token of the grant.
        token: u64,
        /// The resource.
        #[serde(default = "lock_path")]
        path: String,
        /// Whether it drops because a fence refused its write and the lease, asked for as
        /// long as [`holder_told_bound`](super::holder_told_bound) allows, still did not say
        /// it was lost (else: as planned, at the end of its work).
        #[serde(default, skip_serializing_if = "is_false")]
        refused: bool,
    },
    /// The register admitted a write (recorded by the register, in the order it decided).
    WriteAccepted {
        /// The writer.
        client: usize,
        /// The token the write carried.
        token: u64,
        /// The writer's sequence number of the write.
        seq: u64,
        /// The resource written (each has a fence of its own).
        #[serde(default = "lock_path")]
        path: String,
    },
    /// The register's fence refused a write with an older token than one it had seen.
    WriteRefused {
        /// The writer.
        client: usize,
        /// The token the write carried.
        token: u64,
        /// The writer's sequence number of the write.
        seq: u64,
        /// The newest token the register had seen.
        newest: u64,
        /// The resource written.
        #[serde(default = "lock_path")]
        path: String,
    },
    /// The register served a reader's read ([`Recipe::Rwlock`]): its token was at least as
    /// new as every writer's the register had seen.
    ReadAccepted {
        /// The reader.
        client: usize,
        /// The read lock's token.
        token: u64,
        /// The reader's sequence number of the read.
        seq: u64,
        /// The resource read.
        path: String,
    },
    /// The register refused a read: a writer with a newer token had written.
    ReadRefused {
        /// The reader.
        client: usize,
        /// The read lock's token.
        token: u64,
        /// The reader's sequence number of the read.
        seq: u64,
        /// The newest writer's token the register had seen.
        newest: u64,
        /// The resource read.
        path: String,
    },
    /// A fenced write into ZooKeeper ([`Lease::fenced_write`](zkfence::Lease::fenced_write):
    /// one transaction that checks the writer's node exists) came back; recorded at the
    /// answer, with the time it was sent.
    ZkWrite {
        /// The writer.
        client: usize,
        /// The token of the writer's grant.
        token: u64,
        /// The writer's sequence number of the write.
        seq: u64,
        /// The resource whose lease fenced it.
        path: String,
        /// When the write was sent (microseconds since the campaign started): the ensemble
        /// committed it, if it did, between then and this record.
        sent_us: u64,
        /// Whether the ensemble committed it.
        committed: bool,
        /// Whether it was refused as late: the lease was lost, or the ensemble's check found
        /// the writer's node gone (nothing was written).
        #[serde(default, skip_serializing_if = "is_false")]
        refused: bool,
        /// The error, if it was not committed: the refusal, or another error (then whether
        /// it committed is unknown).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A store's fence answered a write (`--sink`), as its writer heard it (recorded when
    /// the answer came: the history's order of these is not the store's, see
    /// [`Event::StoreFinal`]).
    StoreWrite {
        /// The store.
        store: Store,
        /// The writer.
        client: usize,
        /// The token the write carried.
        token: u64,
        /// The writer's sequence number of the write (the register's write of the same step
        /// has the same).
        seq: u64,
        /// The resource written.
        path: String,
        /// What the writer heard.
        outcome: WriteOutcome,
        /// With [`WriteOutcome::Refused`]: the newest token the fence had accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        newest: Option<u64>,
        /// With [`WriteOutcome::Failed`]: the error (whether it committed, the store's record
        /// says).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A store's own record once every contender had stopped (recorded just before
    /// [`Event::Finished`]).
    StoreFinal {
        /// The store.
        store: Store,
        /// Each resource's newest token its fence accepted.
        tokens: BTreeMap<String, u64>,
        /// Every write the store committed, in its own commit order per resource.
        writes: Vec<CommittedWrite>,
        /// Why the record could not be read, if it could not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// PostgreSQL's fence admitted a write and the transaction committed (recorded by the
    /// writer once the commit returned: the history's order of these is not PostgreSQL's,
    /// see [`Event::PostgresFinal`]).
    PgWriteAccepted {
        /// The writer.
        client: usize,
        /// The token the write carried.
        token: u64,
        /// The writer's sequence number of the write (the register's write of the same step
        /// has the same).
        seq: u64,
        /// The resource written.
        #[serde(default = "lock_path")]
        path: String,
    },
    /// PostgreSQL's fence refused a write: the row had stored a newer token.
    PgWriteRefused {
        /// The writer.
        client: usize,
        /// The token the write carried.
        token: u64,
        /// The writer's sequence number of the write.
        seq: u64,
        /// The token the fence row held when it refused.
        newest: u64,
        /// The resource written.
        #[serde(default = "lock_path")]
        path: String,
    },
    /// A write to PostgreSQL failed with an error, so the writer does not know whether it
    /// committed (PostgreSQL's log at the end does).
    PgWriteFailed {
        /// The writer.
        client: usize,
        /// The token the write carried.
        token: u64,
        /// The writer's sequence number of the write.
        seq: u64,
        /// The error.
        error: String,
        /// The resource written.
        #[serde(default = "lock_path")]
        path: String,
    },
    /// What PostgreSQL held once every contender had stopped (recorded just before
    /// [`Event::Finished`]).
    PostgresFinal {
        /// The lock's fence row's token, if any write got that far (histories from before
        /// there were several resources; see `tokens`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
        /// Each resource's fence row's token.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        tokens: BTreeMap<String, u64>,
        /// Every write PostgreSQL committed, as (client, token, seq, resource), in
        /// PostgreSQL's own order (its log's serial key: each accepted write is logged while
        /// it holds the fence row's lock).
        writes: Vec<CommittedWrite>,
        /// Why the state could not be read, if it could not.
        error: Option<String>,
    },
    /// A fault began (recorded before it is done).
    FaultStarted {
        /// Its number in the schedule.
        fault: usize,
        /// Its kind.
        kind: FaultKind,
        /// The contender it hurts, if any.
        client: Option<usize>,
        /// The server it hurts (index from 0), if any.
        server: Option<usize>,
    },
    /// A fault was healed (recorded once it is: the server serves again, the proxy relays).
    FaultHealed {
        /// Its number in the schedule.
        fault: usize,
        /// Its kind.
        kind: FaultKind,
    },
    /// A killed server did not start again (ZooKeeper refused its data, say): recorded
    /// instead of the heal, which comes only once the server runs again.
    RestartFailed {
        /// The fault that killed it.
        fault: usize,
        /// The server (index from 0).
        server: usize,
        /// Why, with the server's last log lines.
        error: String,
    },
    /// A restarted server's client port answered as a ZooKeeper server that is not the
    /// campaign's (another process on the machine took the port while the server was down):
    /// clients that reach that port are in another ensemble from then on.
    ServerReplaced {
        /// The fault that stopped it.
        fault: usize,
        /// The server (index from 0).
        server: usize,
        /// What answered on its port.
        error: String,
    },
    /// A server that did not start again had its data wiped (its `myid` kept), as an
    /// operator would, so that it resyncs from the leader when started again.
    ServerWiped {
        /// The fault that killed it.
        fault: usize,
        /// The server (index from 0).
        server: usize,
    },
    /// `delete-holder` deleted a holder's queue node (recorded once the ensemble answered
    /// the delete; the fault's start was recorded before it was sent).
    HolderNodeDeleted {
        /// The fault.
        fault: usize,
        /// The holder.
        client: usize,
        /// The resource it held.
        path: String,
        /// The node deleted.
        node: String,
    },
    /// The session timeouts the servers had negotiated with their connected sessions (each
    /// server's `cons`), read after each rolling restart of `shrink-timeout`.
    SessionTimeouts {
        /// The fault.
        fault: usize,
        /// Each connected session's timeout, in milliseconds, sorted.
        timeouts_ms: Vec<u64>,
    },
    /// A planned fault found no victim (no holder, no waiter, no leader at that moment).
    FaultSkipped {
        /// Its number in the schedule.
        fault: usize,
        /// Its kind.
        kind: FaultKind,
        /// Why.
        why: String,
    },
    /// A contender process ended.
    ContenderExited {
        /// Its number.
        client: usize,
        /// How it ended.
        status: String,
    },
    /// The last record: what was left once the campaign had stopped everything.
    Finished {
        /// Nodes still under the lock's path once every contender had stopped (and their
        /// sessions had time to expire).
        leftover_nodes: Vec<String>,
        /// Server processes still alive after the ensemble was dropped.
        servers_running: Vec<u32>,
        /// Contender processes still alive at the end.
        contenders_running: Vec<u32>,
        /// Why the lock's children could not be listed until the deadline, if they could
        /// not: then `leftover_nodes` is empty because nothing is known, not because nothing
        /// was left.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nodes_unchecked: Option<String>,
    },
}

impl Event {
    /// The contender the event is about, if one.
    pub fn client(&self) -> Option<usize> {
        match *self {
            Event::ContenderStarted { client, .. }
            | Event::Connected { client, .. }
            | Event::Granted { client, .. }
            | Event::AcquireTimeout { client }
            | Event::AcquireFailed { client, .. }
            | Event::ExpiryFailed { client, .. }
            | Event::Lost { client, .. }
            | Event::Released { client, .. }
            | Event::Dropped { client, .. }
            | Event::WriteAccepted { client, .. }
            | Event::WriteRefused { client, .. }
            | Event::PgWriteAccepted { client, .. }
            | Event::PgWriteRefused { client, .. }
            | Event::PgWriteFailed { client, .. }
            | Event::ReadAccepted { client, .. }
            | Event::ReadRefused { client, .. }
            | Event::ZkWrite { client, .. }
            | Event::StoreWrite { client, .. }
            | Event::HolderNodeDeleted { client, .. }
            | Event::ContenderExited { client, .. } => Some(client),
            Event::FaultStarted { client, .. } => client,
            _ => None,
        }
    }
}

/// One write in a store's record of committed writes: (client, token, seq, resource);
/// written as a JSON array of four, read also as the three of PostgreSQL's log in histories
/// from before there were several resources (then the resource is the lock's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "CommittedJson", into = "CommittedJson")]
pub struct CommittedWrite {
    /// The writer.
    pub client: usize,
    /// The token the write carried.
    pub token: u64,
    /// The writer's sequence number of the write.
    pub seq: u64,
    /// The resource written.
    pub path: String,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum CommittedJson {
    Resource(usize, u64, u64, String),
    Lock(usize, u64, u64),
}

impl From<CommittedJson> for CommittedWrite {
    fn from(j: CommittedJson) -> CommittedWrite {
        let (client, token, seq, path) = match j {
            CommittedJson::Resource(c, t, s, p) => (c, t, s, p),
            CommittedJson::Lock(c, t, s) => (c, t, s, lock_path()),
        };
        CommittedWrite {
            client,
            token,
            seq,
            path,
        }
    }
}

impl From<CommittedWrite> for CommittedJson {
    fn from(w: CommittedWrite) -> CommittedJson {
        CommittedJson::Resource(w.client, w.token, w.seq, w.path)
    }
}

/// What a writer heard from a store's fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteOutcome {
    /// Committed.
    Written,
    /// Refused: a newer token had been accepted; nothing was written.
    Refused,
    /// An error: committed or not, the writer does not know.
    Failed,
}

/// The resource of records from before there were several.
fn lock_path() -> String {
    LOCK_PATH.to_string()
}

fn lock_only() -> Vec<Recipe> {
    vec![Recipe::Lock]
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A record `ms` milliseconds after the start, for histories written by hand in tests.
#[cfg(test)]
pub(crate) fn at(ms: u64, event: Event) -> Record {
    Record {
        t_us: ms * 1_000,
        event,
    }
}

/// Writes `history` to `path`, one JSON object per line.
pub fn write_jsonl(path: &Path, history: &[Record]) -> io::Result<()> {
    let mut out = io::BufWriter::new(std::fs::File::create(path)?);
    for r in history {
        serde_json::to_writer(&mut out, r)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a history written by [`write_jsonl`] (e.g. to check it again, or draw it again).
///
/// ```no_run
/// # fn f() -> std::io::Result<()> {
/// let history = zkfence_testcontainers::chaos::read_jsonl("chaos/history.jsonl".as_ref())?;
/// let violations = zkfence_testcontainers::chaos::check(&history);
/// println!("{} violations", violations.len());
/// # Ok(()) }
/// ```
pub fn read_jsonl(path: &Path) -> io::Result<Vec<Record>> {
    let file = io::BufReader::new(std::fs::File::open(path)?);
    let mut history = Vec::new();
    for (n, line) in file.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        history.push(serde_json::from_str(&line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{}: {e}", path.display(), n + 1),
            )
        })?);
    }
    Ok(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_as_one_flat_json_object() {
        let r = Record {
            t_us: 1_500_000,
            event: Event::Granted {
                client: 2,
                token: 0x1_0000_0004,
                sequence: 7,
                recipe: Recipe::Rwlock,
                path: "/zkfence-chaos/rwlock".into(),
                read: true,
                node: "/zkfence-chaos/rwlock/_c_u-__READ__0000000007".into(),
                group: vec![],
                polls: false,
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line,
            r#"{"t_us":1500000,"event":"granted","client":2,"token":4294967300,"sequence":7,"recipe":"rwlock","path":"/zkfence-chaos/rwlock","read":true,"node":"/zkfence-chaos/rwlock/_c_u-__READ__0000000007"}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
        // A grant of a history from before there were several recipes: the lock's.
        let old = r#"{"t_us":3,"event":"granted","client":2,"token":9,"sequence":7}"#;
        match serde_json::from_str::<Record>(old).unwrap().event {
            Event::Granted { recipe, path, .. } => {
                assert_eq!((recipe, path.as_str()), (Recipe::Lock, LOCK_PATH));
            }
            other => panic!("not a grant: {other:?}"),
        }
        // PostgreSQL's log, written with the resource, read also without.
        let old =
            r#"{"t_us":3,"event":"postgres-final","token":12,"writes":[[0,10,0]],"error":null}"#;
        match serde_json::from_str::<Record>(old).unwrap().event {
            Event::PostgresFinal { writes, .. } => assert_eq!(writes[0].path, LOCK_PATH),
            other => panic!("not the final state: {other:?}"),
        }
        let fault = Record {
            t_us: 3,
            event: Event::FaultStarted {
                fault: 0,
                kind: FaultKind::StallHolder,
                client: Some(1),
                server: None,
            },
        };
        let line = serde_json::to_string(&fault).unwrap();
        assert!(line.contains(r#""kind":"stall-holder""#), "{line}");
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), fault);
    }

    #[test]
    fn the_clock_is_monotonic() {
        let a = monotonic_us();
        let b = monotonic_us();
        assert!(a > 0 && b >= a);
    }
}
