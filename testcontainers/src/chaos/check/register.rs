//! The register's fences (rule 3), judged by the register's own record: the history lists its
//! decisions in the order it made them (each is recorded under the fences' lock). Each
//! resource has a fence of its own; a read/write lock's readers present their token too
//! (a read is served if no newer writer has written; a write needs to be at least as new as
//! every write and read served before).

use std::collections::{HashMap, HashSet};

use super::super::{Event, Record};
use super::{Findings, Rule};

/// What the register had seen of one resource.
#[derive(Default)]
struct Seen {
    /// The newest token it accepted a write with.
    written: u64,
    /// The newest token it accepted a read with.
    read: u64,
}

/// Every write the register accepted carried a token at least as new as every token it had
/// seen for that resource, every read it served one at least as new as every write's, and
/// each had been granted to its writer (or reader) before; none it refused did.
pub(super) fn check(h: &[Record], found: &mut Findings<'_>) {
    let mut granted: HashSet<(usize, &str, u64)> = HashSet::new();
    let mut seen: HashMap<&str, Seen> = HashMap::new();
    for (i, r) in h.iter().enumerate() {
        match &r.event {
            Event::Granted {
                client,
                token,
                path,
                ..
            } => {
                granted.insert((*client, path, *token));
            }
            &Event::WriteAccepted {
                client,
                token,
                seq,
                ref path,
            } => {
                let s = seen.entry(path).or_default();
                let newest = s.written.max(s.read);
                if token < newest {
                    found.add(
                        Rule::StaleWriteAccepted,
                        i,
                        format!(
                            "the register accepted write {seq} of client {client} to {path} \
                             with token {token} after it had seen token {newest}"
                        ),
                        &[i],
                    );
                }
                if !granted.contains(&(client, path, token)) {
                    found.add(
                        Rule::UngrantedToken,
                        i,
                        format!(
                            "the register accepted write {seq} of client {client} to {path} \
                             with token {token}, never granted to it"
                        ),
                        &[i],
                    );
                }
                s.written = s.written.max(token);
            }
            &Event::WriteRefused {
                client,
                token,
                seq,
                ref path,
                ..
            } => {
                let s = seen.entry(path).or_default();
                let newest = s.written.max(s.read);
                if token >= newest {
                    found.add(
                        Rule::CurrentWriteRefused,
                        i,
                        format!(
                            "the register refused write {seq} of client {client} to {path} \
                             with token {token}, the newest it had seen ({newest})"
                        ),
                        &[i],
                    );
                }
            }
            &Event::ReadAccepted {
                client,
                token,
                seq,
                ref path,
            } => {
                let s = seen.entry(path).or_default();
                if token < s.written {
                    found.add(
                        Rule::StaleReadAccepted,
                        i,
                        format!(
                            "the register served read {seq} of client {client} of {path} with \
                             token {token} after a writer with token {} had written",
                            s.written
                        ),
                        &[i],
                    );
                }
                if !granted.contains(&(client, path, token)) {
                    found.add(
                        Rule::UngrantedToken,
                        i,
                        format!(
                            "the register served read {seq} of client {client} of {path} with \
                             token {token}, never granted to it"
                        ),
                        &[i],
                    );
                }
                s.read = s.read.max(token);
            }
            &Event::ReadRefused {
                client,
                token,
                seq,
                ref path,
                ..
            } => {
                let s = seen.entry(path).or_default();
                if token >= s.written {
                    found.add(
                        Rule::CurrentReadRefused,
                        i,
                        format!(
                            "the register refused read {seq} of client {client} of {path} with \
                             token {token}, not older than any write's ({})",
                            s.written
                        ),
                        &[i],
                    );
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, Rule};
    use crate::chaos::history::at;
    use crate::chaos::{Event, Record};

    fn read(ms: u64, client: usize, token: u64, refused_for: Option<u64>) -> Record {
        let path = RWLOCK.to_string();
        let (seq, newest) = (1, refused_for.unwrap_or(0));
        at(
            ms,
            match refused_for {
                None => Event::ReadAccepted {
                    client,
                    token,
                    seq,
                    path,
                },
                Some(_) => Event::ReadRefused {
                    client,
                    token,
                    seq,
                    newest,
                    path,
                },
            },
        )
    }

    /// [`mixed`] with the read/write lock's register: both readers read, the writer writes,
    /// then the last reader reads; the first reader reads late (after the writer wrote) and
    /// is refused.
    fn reads() -> Vec<Record> {
        let mut h = mixed();
        h.extend([
            read(605, 1, 31, None),
            read(606, 0, 30, None),
            accepted_to(725, 2, 32, RWLOCK),
            read(730, 0, 30, Some(32)),
            read(815, 0, 33, None),
        ]);
        h.sort_by_key(|r| r.t_us);
        h
    }

    #[test]
    fn readers_tokens_in_any_order_and_a_late_read_refused_pass() {
        let found = check(&reads());
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn a_read_served_after_a_newer_writer_wrote_is_found() {
        let mut h = reads();
        let i = at_ms(&h, 730, |e| matches!(e, Event::ReadRefused { .. }));
        h[i] = read(730, 0, 30, None);
        assert_eq!(rules(&h), vec![Rule::StaleReadAccepted]);
    }

    #[test]
    fn a_read_refused_with_no_newer_writer_is_found() {
        let mut h = reads();
        let i = at_ms(&h, 815, |e| matches!(e, Event::ReadAccepted { .. }));
        h[i] = read(815, 0, 33, Some(32));
        assert_eq!(rules(&h), vec![Rule::CurrentReadRefused]);
    }

    #[test]
    fn a_write_older_than_a_read_served_is_a_stale_write() {
        // The writer (token 32) writes late, after a reader with token 33 read.
        let mut h = reads();
        h.push(accepted_to(850, 2, 32, RWLOCK));
        h.sort_by_key(|r| r.t_us);
        assert_eq!(rules(&h), vec![Rule::StaleWriteAccepted]);
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
}
