//! Writes fenced in ZooKeeper itself ([`Lease::fenced_write`](zkfence::Lease::fenced_write):
//! one transaction that first checks the writer's node exists), judged by what the writers
//! heard: a write the ensemble committed was committed between its send and its answer, and
//! at that moment the writer's node existed; so no holders granted after the writer may
//! have filled the resource all that time (one for a lock, a leadership, a multi-lock's path
//! or a write lock; `permits` for a semaphore): they were granted only once the writer's
//! node was gone. A write whose answer never came (its writer was killed, or the answer was
//! lost) is not judged.

use std::collections::BTreeMap;

use super::super::{Event, Recipe, Record};
use super::holds::newer_throughout;
use super::semaphore::permits;
use super::{Findings, Hold, Rule};

/// [`Rule::ZkLateWrite`] and [`Rule::ZkUngrantedToken`].
pub(super) fn check(h: &[Record], holds: &[Hold], found: &mut Findings<'_>) {
    let permits = permits(h);
    let mut by_resource: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds {
        by_resource
            .entry(hold.path.as_str())
            .or_default()
            .push(hold);
    }
    for (i, r) in h.iter().enumerate() {
        let Event::ZkWrite {
            client,
            token,
            seq,
            ref path,
            sent_us,
            committed: true,
            ..
        } = r.event
        else {
            continue;
        };
        let resource = by_resource
            .get(path.as_str())
            .map_or(&[][..], Vec::as_slice);
        let Some(writer) = resource
            .iter()
            .find(|o| o.client == client && o.token == token && o.start_us <= sent_us)
        else {
            found.add(
                Rule::ZkUngrantedToken,
                i,
                format!(
                    "ZooKeeper committed write {seq} of client {client} fenced by token {token} \
                     of {path}, never granted to it before the write was sent"
                ),
                &[i],
            );
            continue;
        };
        let capacity = if writer.recipe == Recipe::Semaphore {
            permits
        } else {
            1
        };
        let others = newer_throughout(resource, writer, sent_us, r.t_us);
        if others.len() >= capacity {
            let names: Vec<String> = others
                .iter()
                .map(|o| format!("client {} (token {})", o.client, o.token))
                .collect();
            let mut indices: Vec<usize> = others.iter().map(|o| o.start_index).collect();
            indices.extend([writer.end_index, i]);
            found.add(
                Rule::ZkLateWrite,
                i,
                format!(
                    "ZooKeeper committed write {seq} of client {client} fenced by token {token} \
                     of {path} (sent {:.3}s, answered {:.3}s; its hold until {:.3}s: {}) while \
                     {}, granted after it, held it all that time",
                    sent_us as f64 / 1e6,
                    r.t_us as f64 / 1e6,
                    writer.end_us as f64 / 1e6,
                    writer.ended_by,
                    names.join(", ")
                ),
                &indices,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, Rule};
    use crate::chaos::history::at;
    use crate::chaos::{Event, Record, LOCK_PATH};

    fn zk_write(ms: u64, client: usize, token: u64, path: &str, sent: u64) -> Record {
        at(
            ms,
            Event::ZkWrite {
                client,
                token,
                seq: 1,
                path: path.into(),
                sent_us: sent * 1_000,
                committed: true,
                refused: false,
                error: None,
            },
        )
    }

    #[test]
    fn a_fenced_write_committed_while_its_resource_was_full_is_found() {
        // Client 1's write, sent at 4.1 s after its loss at 4.002, committed by 4.12 s while
        // client 2 held (from 3 s to 4.5 s).
        let mut h = clean();
        h.insert(12, zk_write(4_120, 1, 11, LOCK_PATH, 4_100));
        h.sort_by_key(|r| r.t_us);
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::ZkLateWrite);
        assert!(
            found[0].message.contains("client 2 (token 12)"),
            "{}",
            found[0]
        );
        // Its own writes while it held, and a write whose holder's successor was granted
        // only after its answer, are fine.
        let mut h = clean();
        h.insert(5, zk_write(530, 1, 11, LOCK_PATH, 525));
        h.insert(8, zk_write(2_999, 1, 11, LOCK_PATH, 2_900));
        h.sort_by_key(|r| r.t_us);
        assert!(check(&h).is_empty(), "{:#?}", check(&h));
    }

    #[test]
    fn an_older_holders_belief_is_the_overlap_rules_not_the_newer_writers() {
        // Client 0 releases only after client 1's grant; client 1 writes in between.
        let mut h = clean();
        h[3] = released(515, 0, 10);
        h.insert(5, zk_write(514, 1, 11, LOCK_PATH, 512));
        h.sort_by_key(|r| r.t_us);
        assert_eq!(rules(&h), vec![Rule::Overlap]);
    }

    #[test]
    fn a_semaphore_write_is_late_only_once_every_permit_is_taken() {
        let mut h = mixed();
        // Client 0's permit ended at 1.4 s; its late write in 1.43..1.44 s met clients 1 and
        // 2 holding both permits.
        h.push(zk_write(1_440, 0, 40, SEMAPHORE, 1_430));
        h.push(zk_write(1_410, 0, 40, SEMAPHORE, 1_405));
        h.sort_by_key(|r| r.t_us);
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::ZkLateWrite);
        assert!(found[0].message.contains("sent 1.430s"), "{}", found[0]);
    }

    #[test]
    fn a_fenced_write_with_a_token_never_granted_is_found() {
        let mut h = clean();
        h.insert(3, zk_write(120, 1, 10, LOCK_PATH, 115));
        assert_eq!(rules(&h), vec![Rule::ZkUngrantedToken]);
    }
}
