//! `zkfence status LOCKPATH` and `zkfence leader ELECTIONPATH`: a queue, holder first.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use zkfence::zookeeper_client as zk;
use zkfence::{Contender, Items, Session};

use crate::exit::Failure;
use crate::remote::{close, Global};

/// Which words to use: a lock has a holder and waiters, an election a leader and candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lock,
    Election,
}

/// The `status --json` document. Its shape is stable and documented in the README ("JSON
/// output"): scripts parse it.
#[derive(Debug, Serialize)]
struct LockReport {
    path: String,
    /// False when no node is at `path` (a typo, or nobody ever queued there).
    exists: bool,
    /// "lock", "read-write", "semaphore", "directory" (it holds lock directories, not
    /// contenders), or null (missing, or nobody queued).
    kind: Option<&'static str>,
    /// A semaphore's number of permits, as its holders recorded it; null otherwise.
    limit: Option<usize>,
    holders: Vec<Entry>,
    waiters: Vec<Entry>,
    /// For a directory: the names of the nodes under it.
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<Vec<String>>,
    /// For a partition set: its assignment, members and items.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    partitions: Option<crate::partition_status::Report>,
    /// The session timeout the servers granted this command's session, in milliseconds:
    /// what --session-timeout becomes on this ensemble (a holder's lock frees about this
    /// long after it dies, if it asked for the same).
    session_timeout_ms: u64,
}

/// The `leader --json` document.
#[derive(Debug, Serialize)]
struct ElectionReport {
    path: String,
    exists: bool,
    leader: Option<Entry>,
    /// What the leader proclaimed (`Leadership::proclaim`), as text (invalid UTF-8
    /// replaced), or null.
    proclaimed: Option<String>,
    candidates: Vec<Entry>,
    /// As in the `status` document.
    session_timeout_ms: u64,
}

#[derive(Debug, Serialize)]
struct Entry {
    /// Full path of the contender's node.
    node: String,
    /// The fencing token: the node's creation zxid, a JSON number (below 2^63).
    token: u64,
    /// The node's sequence number, which orders the queue.
    sequence: i32,
    /// Hex (`0x…`), as ZooKeeper's own tools print it; a JSON number would lose precision.
    session_id: String,
    /// Who made the node, from its data; each field null when unknown (another client's,
    /// or a holder asked to let go, whose data the request overwrote).
    owner: Owner,
    /// Someone asked this holder to let go (`zkfence revoke`, Curator's revocation).
    revocation_requested: bool,
    /// "exclusive" (a lock, a writer, a candidate), "shared" (a reader) or "permit" (a
    /// semaphore's lease).
    mode: &'static str,
    /// Time since the node was created (since it joined the queue, not since it holds or
    /// leads, which ZooKeeper does not record), by the server's clock against ours.
    age_ms: u64,
}

#[derive(Debug, Serialize)]
struct Owner {
    id: Option<String>,
    host: Option<String>,
    pid: Option<u32>,
}

impl Entry {
    fn of(c: &Contender, mode: &'static str) -> Entry {
        Entry {
            node: c.node.clone(),
            token: c.token.get(),
            sequence: c.sequence,
            session_id: session_hex(c.session_id),
            owner: Owner {
                id: c.owner.id.clone(),
                host: c.owner.host.clone(),
                pid: c.owner.pid,
            },
            revocation_requested: c.owner.revocation_requested(),
            mode,
            age_ms: age_ms(c.created_ms),
        }
    }
}

fn mode_of(c: &Contender) -> &'static str {
    if c.is_shared() {
        "shared"
    } else {
        "exclusive"
    }
}

/// What is at a path, as `status` tells it.
#[derive(Debug)]
enum Found {
    Missing,
    /// Nothing queued, no children.
    Empty,
    /// Persistent children that are not contenders: lock directories.
    Directory(Vec<String>),
    /// A lock or read/write lock (or an election): holders, then waiters.
    Queue {
        read_write: bool,
        holders: Vec<Contender>,
        waiters: Vec<Contender>,
    },
    Semaphore {
        limit: Option<usize>,
        holders: Vec<Contender>,
        waiters: Vec<Contender>,
    },
    /// A partition set's party and item locks (`Session::partitions`, Kazoo's
    /// `SetPartitioner`).
    Partitions(Box<crate::partition_status::Seen>),
}

async fn look(session: &Session, path: &str, items: Option<&Items>) -> Result<Found, Failure> {
    // The library's read first: its errors say what an ACL or an outage means.
    let contenders = session.lock(path).contenders().await?;
    let names = match session.client().list_children(path).await {
        Ok(names) => names,
        Err(zk::Error::NoNode) => return Ok(Found::Missing),
        Err(e) => {
            return Err(Failure::new(
                crate::exit::UNAVAILABLE,
                format!("could not list {path}: {e}"),
            ))
        }
    };
    if contenders.is_empty() {
        // A partition set keeps its item locks in `locks` too, beside its `party`.
        if crate::partition_status::is_partition_set(&names) {
            let seen = crate::partition_status::look(session, path, items).await?;
            return Ok(Found::Partitions(Box::new(seen)));
        }
        // Curator's InterProcessSemaphoreV2 layout, which `exec --limit` uses.
        if names.iter().any(|n| n == "leases" || n == "locks") {
            let leases = session.semaphore(path, usize::MAX).holders().await?;
            let limit = leases.iter().find_map(|l| l.owner.permits);
            let split = limit.unwrap_or(leases.len()).min(leases.len());
            let mut holders = leases;
            let mut waiters = holders.split_off(split);
            // The acquirer with the turn waits in `locks` and may already have a lease
            // node: list it once.
            for c in session.lock(&format!("{path}/locks")).contenders().await? {
                if !waiters.iter().any(|w| w.session_id == c.session_id)
                    && !holders.iter().any(|h| h.session_id == c.session_id)
                {
                    waiters.push(c);
                }
            }
            return Ok(Found::Semaphore {
                limit,
                holders,
                waiters,
            });
        }
        if names.is_empty() {
            return Ok(Found::Empty);
        }
        let mut names = names;
        names.sort();
        return Ok(Found::Directory(names));
    }
    let read_write = contenders
        .iter()
        .any(|c| c.is_shared() || c.node.contains("__WRIT__"));
    // Readers ahead of the first exclusive contender hold together; else only the head.
    let held = match contenders.iter().position(|c| !c.is_shared()) {
        Some(0) => 1,
        Some(i) => i,
        None => contenders.len(),
    };
    let mut holders = contenders;
    let waiters = holders.split_off(held);
    Ok(Found::Queue {
        read_write,
        holders,
        waiters,
    })
}

pub async fn run(
    global: &Global,
    path: &str,
    json: bool,
    kind: Kind,
    items: Option<Items>,
) -> Result<u8, Failure> {
    let session = global.connect().await?;
    let granted = session.session_timeout().as_millis() as u64;
    let found = look(&session, path, items.as_ref()).await;
    close(session, std::time::Duration::from_secs(1)).await;
    let found = found?;
    if json {
        let text = match kind {
            Kind::Lock => serde_json::to_string_pretty(&LockReport {
                session_timeout_ms: granted,
                ..lock_report(path, &found)
            }),
            Kind::Election => serde_json::to_string_pretty(&ElectionReport {
                session_timeout_ms: granted,
                ..election_report(path, &found)
            }),
        };
        let text = text.expect("a report always serialises");
        crate::stdout::report("report", &format!("{text}\n"))?;
    } else {
        crate::stdout::report("report", &describe(path, &found, kind))?;
    }
    // Said by the exit code too: a script checking a typo'd path should not read "free".
    Ok(match found {
        Found::Missing => crate::exit::NO_SUCH_PATH,
        _ => crate::exit::OK,
    })
}

fn lock_report(path: &str, found: &Found) -> LockReport {
    let mut report = LockReport {
        path: path.to_string(),
        exists: !matches!(found, Found::Missing),
        kind: None,
        limit: None,
        holders: vec![],
        waiters: vec![],
        children: None,
        partitions: None,
        session_timeout_ms: 0,
    };
    match found {
        Found::Missing | Found::Empty => {}
        Found::Partitions(seen) => {
            report.kind = Some("partitions");
            report.partitions = Some(crate::partition_status::report(seen));
        }
        Found::Directory(names) => {
            report.kind = Some("directory");
            report.children = Some(names.clone());
        }
        Found::Queue {
            read_write,
            holders,
            waiters,
        } => {
            report.kind = Some(if *read_write { "read-write" } else { "lock" });
            report.holders = holders.iter().map(|c| Entry::of(c, mode_of(c))).collect();
            report.waiters = waiters.iter().map(|c| Entry::of(c, mode_of(c))).collect();
        }
        Found::Semaphore {
            limit,
            holders,
            waiters,
        } => {
            report.kind = Some("semaphore");
            report.limit = *limit;
            report.holders = holders.iter().map(|c| Entry::of(c, "permit")).collect();
            report.waiters = waiters.iter().map(|c| Entry::of(c, "permit")).collect();
        }
    }
    report
}

fn election_report(path: &str, found: &Found) -> ElectionReport {
    let mut report = ElectionReport {
        path: path.to_string(),
        exists: !matches!(found, Found::Missing),
        leader: None,
        proclaimed: None,
        candidates: vec![],
        session_timeout_ms: 0,
    };
    if let Found::Queue {
        holders, waiters, ..
    } = found
    {
        let mut all = holders
            .iter()
            .chain(waiters)
            .map(|c| Entry::of(c, "exclusive"));
        report.leader = all.next();
        report.candidates = all.collect();
        report.proclaimed = holders.iter().chain(waiters).next().and_then(proclaimed);
    }
    report
}

fn describe(path: &str, found: &Found, kind: Kind) -> String {
    let none = match kind {
        Kind::Lock => "nobody holds it",
        Kind::Election => "nobody leads it",
    };
    match found {
        Found::Missing => match kind {
            Kind::Lock => format!("{path}: no such lock directory (nobody has queued there)\n"),
            Kind::Election => {
                format!("{path}: no such election directory (nobody has campaigned there)\n")
            }
        },
        Found::Empty => format!("{path}: {none}\n"),
        Found::Partitions(seen) => crate::partition_status::describe(path, seen),
        Found::Directory(names) => format!(
            "{path}: no contenders; it holds the lock directories: {}\n",
            names.join(", ")
        ),
        Found::Queue {
            read_write: true,
            holders,
            waiters,
        } if kind == Kind::Lock => {
            let head = if holders.first().is_some_and(Contender::is_shared) {
                format!(
                    "{path}: read/write lock, held shared by {} ({}), {} waiting\n",
                    holders.len(),
                    names(holders),
                    waiters.len()
                )
            } else {
                format!(
                    "{path}: read/write lock, held exclusively by {}, {} waiting\n",
                    names(holders),
                    waiters.len()
                )
            };
            head + &table(holders, waiters, kind)
        }
        Found::Queue {
            holders, waiters, ..
        } => {
            let all: Vec<&Contender> = holders.iter().chain(waiters).collect();
            let first = all[0];
            let behind = all.len() - 1;
            let value = match (kind, proclaimed(first)) {
                (Kind::Election, Some(value)) => format!("proclaimed: {value}\n"),
                _ => String::new(),
            };
            // A lock's holder holds since its grant and an election's leader leads since
            // its predecessor left, which ZooKeeper does not record: what is known is when
            // it joined the queue, an upper bound, and it is said as that.
            let since = match kind {
                Kind::Lock => format!("queued {} ago", seconds(age_ms(first.created_ms))),
                Kind::Election => format!(
                    "a candidate for {}, leading for at most that long",
                    seconds(age_ms(first.created_ms))
                ),
            };
            format!(
                "{path}: {} {} ({since}), {behind} {}\n",
                match kind {
                    Kind::Lock => "held by",
                    Kind::Election => "led by",
                },
                first.owner,
                match (kind, behind) {
                    (Kind::Lock, _) => "waiting",
                    (Kind::Election, 1) => "candidate behind",
                    (Kind::Election, _) => "candidates behind",
                }
            ) + &value
                + &table(&all[..1], &all[1..], kind)
        }
        Found::Semaphore {
            limit,
            holders,
            waiters,
        } => {
            let limit_text = match limit {
                Some(n) => format!("limit {n}"),
                None => "limit not recorded: its holders are not zkfence's".to_string(),
            };
            let of = limit.map(|n| format!(" of {n}")).unwrap_or_default();
            if holders.is_empty() && waiters.is_empty() {
                // Nobody to show: no limit to tell (its holders record it), no table.
                return format!("{path}: semaphore, {none}, nobody waiting\n");
            }
            let head = if holders.is_empty() {
                format!(
                    "{path}: semaphore ({limit_text}), {none}, {} waiting\n",
                    waiters.len()
                )
            } else {
                format!(
                    "{path}: semaphore ({limit_text}), held by {}{of}: {}; {} waiting\n",
                    holders.len(),
                    names(holders),
                    waiters.len()
                )
            };
            head + &table(holders, waiters, kind)
        }
    }
}

/// The value a leader proclaimed, as text.
fn proclaimed(c: &Contender) -> Option<String> {
    c.owner.proclaimed_text().map(|text| text.into_owned())
}

fn names<C: std::borrow::Borrow<Contender>>(contenders: &[C]) -> String {
    contenders
        .iter()
        .map(|c| c.borrow().owner.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn table<C: std::borrow::Borrow<Contender>>(holders: &[C], waiters: &[C], kind: Kind) -> String {
    let (holder_word, waiter_word) = match kind {
        Kind::Lock => ("holder", "waiting"),
        Kind::Election => ("leader", "candidate"),
    };
    // SEQ orders the queue; TOKEN (the czxid) is what a fenced resource compares.
    let header = ["ROLE", "TOKEN", "SEQ", "OWNER", "SESSION", "AGE", "NODE"].map(String::from);
    let rows: Vec<[String; 7]> = holders
        .iter()
        .map(|c| (holder_word, c.borrow()))
        .chain(waiters.iter().map(|c| (waiter_word, c.borrow())))
        .map(|(role, c)| {
            [
                role.to_string(),
                c.token.to_string(),
                c.sequence.to_string(),
                c.owner.to_string(),
                session_hex(c.session_id),
                seconds(age_ms(c.created_ms)),
                c.node.rsplit('/').next().unwrap_or(&c.node).to_string(),
            ]
        })
        .collect();
    columns(&header, &rows)
}

/// `header` and `rows` as left-aligned columns two spaces apart, each as wide as its widest
/// cell, with no trailing spaces: the tables of `status`.
pub fn columns<const N: usize>(header: &[String; N], rows: &[[String; N]]) -> String {
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A session id as ZooKeeper prints it.
pub fn session_hex(id: i64) -> String {
    format!("0x{:x}", id as u64)
}

/// Milliseconds since `created_ms` (Unix ms, server clock); 0 if the clocks disagree.
pub fn age_ms(created_ms: i64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    now.saturating_sub(created_ms).max(0) as u64
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zkfence::{FencingToken, OwnerInfo};

    fn contender(seq: u64, id: &str) -> Contender {
        Contender {
            node: format!("/l/_c_x-lock-{seq:010}"),
            token: FencingToken::new(1000 + seq),
            session_id: 0x1000_0000_0000_00ab,
            owner: OwnerInfo {
                id: Some(id.into()),
                host: Some("h".into()),
                pid: Some(7),
                ..OwnerInfo::default()
            },
            created_ms: 0,
            sequence: seq as i32,
        }
    }

    #[test]
    fn table_names_holder_and_waiters() {
        let found = Found::Queue {
            read_write: false,
            holders: vec![contender(3, "alpha")],
            waiters: vec![contender(4, "beta")],
        };
        let t = describe("/l", &found, Kind::Lock);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("/l: held by alpha (h, pid 7)"), "{t}");
        let header: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(header[..3], ["ROLE", "TOKEN", "SEQ"], "{t}");
        let holder: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(holder[1..3], ["1003", "3"], "token, then sequence: {t}");
        assert!(
            lines[2].starts_with("holder") && lines[2].contains("0x10000000000000ab"),
            "{t}"
        );
        assert!(
            lines[3].starts_with("waiting") && lines[3].contains("beta"),
            "{t}"
        );
        assert_eq!(
            describe("/l", &Found::Empty, Kind::Election),
            "/l: nobody leads it\n"
        );
    }
}
