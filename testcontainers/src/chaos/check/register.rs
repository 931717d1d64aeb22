//! The register's fence (rule 3), judged by the register's own record: the history lists its
//! decisions in the order it made them (each is recorded under the fence's lock).

use std::collections::HashSet;

use super::super::{Event, Record};
use super::{Findings, Rule};

/// Every write the register accepted carried a token at least as new as every token it had
/// seen, and granted to its writer before; none it refused did.
pub(super) fn check(h: &[Record], found: &mut Findings<'_>) {
    let mut granted: HashSet<(usize, u64)> = HashSet::new();
    let mut newest = 0u64;
    for (i, r) in h.iter().enumerate() {
        match r.event {
            Event::Granted { client, token, .. } => {
                granted.insert((client, token));
            }
            Event::WriteAccepted { client, token, seq } => {
                if token < newest {
                    found.add(
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
                    found.add(
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
            Event::WriteRefused {
                client, token, seq, ..
            } if token >= newest => {
                found.add(
                    Rule::CurrentWriteRefused,
                    i,
                    format!(
                        "the register refused write {seq} of client {client} with token \
                         {token}, the newest it had seen ({newest})"
                    ),
                    &[i],
                );
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::Rule;

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
