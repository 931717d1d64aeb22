//! The read/write lock's rules: readers together, a writer alone (a writer's grant meets no
//! other hold, and a reader's grant meets no writer's: the old holder's end comes first);
//! and tokens in grant order as the queue orders them: a writer's token is larger than every
//! earlier grant's, a reader's larger than every earlier writer's (readers granted together
//! may be told in any order).

use super::super::Recipe;
use super::holds::{by_resource, met_at_grant, met_message};
use super::{Findings, Hold, Rule};

/// [`Rule::WriterNotAlone`] and [`Rule::RwTokenOrder`].
pub(super) fn check(holds: &[Hold], found: &mut Findings<'_>) {
    for resource in by_resource(holds, Recipe::Rwlock).values() {
        for (hold, met) in met_at_grant(resource) {
            // A writer meets nobody; a reader meets no writer.
            let conflict = met.iter().rev().find(|prev| !hold.read || !prev.read);
            if let Some(prev) = conflict {
                let what = if hold.read {
                    "the read lock with "
                } else {
                    "the write lock with "
                };
                let held = if prev.read { "reading" } else { "writing" };
                found.add(
                    Rule::WriterNotAlone,
                    hold.start_index,
                    format!("{} ({held})", met_message(what, hold, prev)),
                    &[prev.start_index, hold.start_index, prev.end_index],
                );
            }
        }
        let mut newest: Option<&Hold> = None;
        let mut newest_writer: Option<&Hold> = None;
        for &hold in resource {
            let bar = if hold.read { newest_writer } else { newest };
            if let Some(before) = bar.filter(|b| hold.token <= b.token) {
                found.add(
                    Rule::RwTokenOrder,
                    hold.start_index,
                    format!(
                        "client {} was granted the {} lock of {} with token {}, not larger than \
                         token {} of an earlier {} grant",
                        hold.client,
                        if hold.read { "read" } else { "write" },
                        hold.path,
                        hold.token,
                        before.token,
                        if before.read { "read" } else { "write" },
                    ),
                    &[before.start_index, hold.start_index],
                );
            }
            if newest.map_or(true, |n| hold.token > n.token) {
                newest = Some(hold);
            }
            if !hold.read && newest_writer.map_or(true, |n| hold.token > n.token) {
                newest_writer = Some(hold);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::Rule;
    use crate::chaos::{Event, Recipe};

    #[test]
    fn a_writer_granted_while_a_reader_held_is_found() {
        let mut h = mixed();
        // Client 1 reads on past the writer's grant.
        let i = at_ms(&h, 710, |e| matches!(e, Event::Released { .. }));
        h[i] = release(730, 1, 31, RWLOCK);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::WriterNotAlone);
        assert!(found[0].message.contains("(reading)"), "{}", found[0]);
    }

    #[test]
    fn a_reader_granted_while_a_writer_held_is_found() {
        let mut h = mixed();
        // The writer writes on past the next reader's grant.
        let i = at_ms(&h, 800, |e| matches!(e, Event::Released { .. }));
        h[i] = release(820, 2, 32, RWLOCK);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::WriterNotAlone);
        assert!(found[0].message.contains("(writing)"), "{}", found[0]);
    }

    #[test]
    fn two_writers_at_once_are_found_and_readers_together_are_not() {
        let mut h = mixed();
        // Both readers were writers.
        for (ms, client, token) in [(600, 1, 31), (601, 0, 30)] {
            let i = at_ms(&h, ms, |e| matches!(e, Event::Granted { .. }));
            h[i] = grant(ms, client, token, Recipe::Rwlock, RWLOCK, false);
        }
        assert_eq!(rules(&h), vec![Rule::WriterNotAlone, Rule::RwTokenOrder]);
    }

    #[test]
    fn tokens_out_of_the_queues_order_are_found() {
        // The writer's token below a reader's granted before it.
        let mut h = mixed();
        let i = at_ms(&h, 720, |e| matches!(e, Event::Granted { .. }));
        h[i] = grant(720, 2, 30, Recipe::Rwlock, RWLOCK, false);
        let j = at_ms(&h, 800, |e| matches!(e, Event::Released { .. }));
        h[j] = release(800, 2, 30, RWLOCK);
        assert_eq!(rules(&h), vec![Rule::RwTokenOrder]);
        // A reader's token below the writer's granted before it.
        let mut h = mixed();
        let i = at_ms(&h, 810, |e| matches!(e, Event::Granted { .. }));
        h[i] = grant(810, 0, 29, Recipe::Rwlock, RWLOCK, true);
        let j = at_ms(&h, 900, |e| matches!(e, Event::Released { .. }));
        h[j] = release(900, 0, 29, RWLOCK);
        assert_eq!(rules(&h), vec![Rule::RwTokenOrder]);
    }
}
