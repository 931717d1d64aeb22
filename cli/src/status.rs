//! `zkfence status LOCKPATH` and `zkfence leader ELECTIONPATH`: a queue, holder first.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use zkfence::Contender;

use crate::exit::Failure;
use crate::{close, Global};

/// Which words to use: a lock has a holder and waiters, an election a leader and candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Lock,
    Election,
}

/// The `--json` document. Its shape is stable: scripts parse it.
#[derive(Debug, Serialize)]
struct Report {
    path: String,
    holder: Option<Entry>,
    waiters: Vec<Entry>,
}

#[derive(Debug, Serialize)]
struct Entry {
    /// Full path of the contender's node.
    node: String,
    /// The fencing token: the node's creation zxid.
    token: u64,
    /// The node's sequence number, which orders the queue.
    sequence: i32,
    /// Hex (`0x…`), as ZooKeeper's own tools print it; a JSON number would lose precision.
    session_id: String,
    /// The owner id (`--id`, the candidate id, or a foreign client's data), or null.
    owner: Option<String>,
    /// Time since the node was created, by the server's clock against ours.
    age_ms: u64,
}

impl Entry {
    fn of(c: &Contender) -> Entry {
        Entry {
            node: c.node.clone(),
            token: c.token.get(),
            sequence: c.sequence,
            session_id: session_hex(c.session_id),
            owner: c.owner.id.clone(),
            age_ms: age_ms(c.created_ms),
        }
    }
}

pub async fn run(global: &Global, path: &str, json: bool, kind: Kind) -> Result<u8, Failure> {
    let session = global.connect().await?;
    // Both are the same queue; the election handle is only for the wording.
    let contenders = session.lock(path).contenders().await?;
    close(session, std::time::Duration::from_secs(1)).await;
    if json {
        let mut entries = contenders.iter().map(Entry::of);
        let report = Report {
            path: path.to_string(),
            holder: entries.next(),
            waiters: entries.collect(),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("a report always serialises")
        );
    } else {
        print!("{}", table(path, &contenders, kind));
    }
    Ok(crate::exit::OK)
}

fn table(path: &str, contenders: &[Contender], kind: Kind) -> String {
    let (holder_word, waiter_word, verb, none) = match kind {
        Kind::Lock => ("holder", "waiting", "held by", "nobody holds it"),
        Kind::Election => ("leader", "candidate", "led by", "nobody leads it"),
    };
    let Some(first) = contenders.first() else {
        return format!("{path}: {none}\n");
    };
    let waiting = contenders.len() - 1;
    let mut out = format!(
        "{path}: {verb} {} for {}, {waiting} {}\n",
        first.owner,
        seconds(age_ms(first.created_ms)),
        match (kind, waiting) {
            (Kind::Lock, _) => "waiting",
            (Kind::Election, 1) => "candidate behind",
            (Kind::Election, _) => "candidates behind",
        }
    );
    // SEQ orders the queue; TOKEN (the czxid) is what a fenced resource compares.
    let header = ["ROLE", "TOKEN", "SEQ", "OWNER", "SESSION", "AGE", "NODE"].map(String::from);
    let rows: Vec<[String; 7]> = contenders
        .iter()
        .enumerate()
        .map(|(i, c)| {
            [
                if i == 0 { holder_word } else { waiter_word }.to_string(),
                c.token.to_string(),
                c.sequence.to_string(),
                c.owner.to_string(),
                session_hex(c.session_id),
                seconds(age_ms(c.created_ms)),
                c.node.rsplit('/').next().unwrap_or(&c.node).to_string(),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
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
        let t = table(
            "/l",
            &[contender(3, "alpha"), contender(4, "beta")],
            Kind::Lock,
        );
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
        assert_eq!(table("/l", &[], Kind::Election), "/l: nobody leads it\n");
    }
}
