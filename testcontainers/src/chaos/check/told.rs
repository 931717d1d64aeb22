//! `delete-holder`: an operator deletes a holder's node. No lock can tell the holder first
//! (the next waiter hears of the same commit at the same moment), so the overlap rules count
//! the hold only until the delete was sent (see `holds.rs`); instead, the holder must be
//! told within [`holder_told_bound`] of the delete.

use std::collections::HashMap;
use std::time::Duration;

use super::super::{Event, Record};
use super::campaign::quiet_deadline;
use super::{Findings, Hold, Rule};

/// What [`holder_told_bound`] allows beyond one keepalive interval: the keepalive's own round
/// trip (a `check` of the held node, answered `NoNode`), and the holder's report of its
/// `Lost`, on a loaded 2-core machine (the campaign's servers, contenders and whatever else
/// runs there share it). With the lease watching its own node, the notification of the
/// delete itself arrives within milliseconds; the keepalive is the fallback for a holder
/// that missed it (its watch was not set yet, or its connection was being replaced).
pub const TOLD_ROUND_TRIP: Duration = Duration::from_millis(500);

/// How long after an operator's delete of a holder's node (the delete answered) the holder
/// may go on believing it holds: one keepalive interval (the session timeout / 6, zkfence's
/// default) plus [`TOLD_ROUND_TRIP`]. Only time during which no fault hurt the holder's path
/// to the ensemble counts (a server fault, or a fault on the holder's own process or
/// connection): a holder that cannot hear cannot be told.
///
/// ```
/// use std::time::Duration;
/// use zkfence_testcontainers::chaos::holder_told_bound;
/// assert_eq!(holder_told_bound(Duration::from_secs(6)), Duration::from_millis(1_500));
/// ```
pub fn holder_told_bound(session_timeout: Duration) -> Duration {
    session_timeout / 6 + TOLD_ROUND_TRIP
}

/// [`Rule::HolderNotTold`].
pub(super) fn check(h: &[Record], holds: &[Hold], found: &mut Findings<'_>) {
    let Some(t) = h.iter().find_map(|r| match r.event {
        Event::Campaign {
            session_timeout_ms, ..
        } => Some(Duration::from_millis(session_timeout_ms)),
        _ => None,
    }) else {
        return;
    };
    let bound = holder_told_bound(t).as_micros() as u64;
    let end = h.last().map_or(0, |r| r.t_us);
    // Each fault's span, with whom it hurts: (start, end, client it hurts, whether a server).
    let mut starts: HashMap<usize, (u64, Option<usize>, bool)> = HashMap::new();
    let mut spans: Vec<(u64, u64, Option<usize>, bool)> = Vec::new();
    for r in h {
        match r.event {
            Event::FaultStarted {
                fault,
                kind,
                client,
                ..
            } => {
                starts.insert(fault, (r.t_us, client, kind.hurts_a_server()));
            }
            Event::FaultHealed { fault, .. } => {
                if let Some((s, client, server)) = starts.remove(&fault) {
                    spans.push((s, r.t_us, client, server));
                }
            }
            _ => {}
        }
    }
    spans.extend(starts.values().map(|&(s, c, server)| (s, end, c, server)));
    for hold in holds {
        let Some(deleted) = hold.deleted_us else {
            continue;
        };
        let hurting: Vec<(u64, u64)> = spans
            .iter()
            .filter(|s| s.3 || s.2 == Some(hold.client))
            .map(|s| (s.0, s.1))
            .collect();
        // The deadline: `bound` of time in which nothing hurt the holder, after the delete.
        let deadline = quiet_deadline(deleted, bound, &hurting);
        if deadline >= end || hold.end_us <= deadline {
            continue;
        }
        let at = h
            .iter()
            .position(|r| {
                r.t_us == deleted
                    && matches!(&r.event, Event::HolderNodeDeleted { client, path, .. }
                        if *client == hold.client && *path == hold.path)
            })
            .unwrap_or(hold.start_index);
        found.add(
            Rule::HolderNotTold,
            at,
            format!(
                "an operator deleted client {}'s node {} of {} (token {}), answered at {:.3}s, \
                 and the holder went on believing it held until {:.3}s ({}): {:.3}s, more \
                 than the bound of {:.3}s (a keepalive interval and {:?})",
                hold.client,
                hold.node,
                hold.path,
                hold.token,
                deleted as f64 / 1e6,
                hold.end_us as f64 / 1e6,
                hold.ended_by,
                (hold.end_us - deleted) as f64 / 1e6,
                bound as f64 / 1e6,
                TOLD_ROUND_TRIP
            ),
            &[hold.start_index, at, hold.end_index],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, holds, Rule};
    use crate::chaos::history::at;
    use crate::chaos::{Event, FaultKind, Record, LOCK_PATH};

    /// Client 0 holds from 100 ms; an operator deletes its node (the delete sent at 200,
    /// answered at 210); client 1 is granted at once (215); client 0 hears `Lost` at `told`.
    /// The session timeout is 2 s: the bound is 333 ms + 500 ms.
    fn deleted(told: u64) -> Vec<Record> {
        vec![
            campaign(),
            granted(100, 0, 10),
            fault(200, 0, FaultKind::DeleteHolder, Some(0)),
            at(
                210,
                Event::HolderNodeDeleted {
                    fault: 0,
                    client: 0,
                    path: LOCK_PATH.into(),
                    node: format!("{LOCK_PATH}/_c_0-lock-0000000010"),
                },
            ),
            healed(210, 0, FaultKind::DeleteHolder),
            granted(215, 1, 11),
            lost(told, 0, 10, LOCK_PATH),
            released(2_000, 1, 11),
            finished(3_000),
        ]
    }

    #[test]
    fn the_overlap_no_lock_can_prevent_is_allowed_and_a_holder_told_in_time_passes() {
        let h = deleted(300);
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
        let held = &holds(&h)[0];
        assert_eq!(
            (held.blind_us, held.deleted_us),
            (Some(200_000), Some(210_000))
        );
        // Just inside the bound: 210 ms + 833 ms.
        assert!(check(&deleted(1_043)).is_empty());
    }

    #[test]
    fn a_holder_told_before_the_deletes_answer_came_is_told_at_once() {
        let h = deleted(205);
        assert!(check(&h).is_empty(), "{:#?}", check(&h));
        let held = &holds(&h)[0];
        assert_eq!((held.end_us, held.deleted_us), (205_000, Some(210_000)));
        let report = crate::chaos::Report {
            seed: 1,
            duration: std::time::Duration::ZERO,
            history: h,
            violations: Vec::new(),
            history_path: Default::default(),
            timeline_path: Default::default(),
        };
        assert_eq!(report.told_after_delete(), vec![std::time::Duration::ZERO]);
        assert!(report
            .summary()
            .contains("1 deleted holders told within 0 ms"));
    }

    #[test]
    fn a_holder_told_after_the_bound_is_found() {
        let found = check(&deleted(1_100));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::HolderNotTold);
        assert!(
            found[0]
                .message
                .contains("0.890s, more than the bound of 0.833s"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn time_when_a_fault_hurt_the_holder_does_not_count() {
        // A follower killed from 400 to 900 ms: the holder may hear 500 ms later.
        let mut h = deleted(1_500);
        h.insert(6, fault(400, 1, FaultKind::KillFollower, None));
        h.insert(7, healed(900, 1, FaultKind::KillFollower));
        h.sort_by_key(|r| r.t_us);
        assert!(check(&h).is_empty(), "{:#?}", check(&h));
        // A fault on another client counts for nothing.
        let mut h = deleted(1_500);
        h.insert(6, fault(400, 1, FaultKind::BlackholeClient, Some(1)));
        h.insert(7, healed(900, 1, FaultKind::BlackholeClient));
        h.sort_by_key(|r| r.t_us);
        assert_eq!(rules(&h), vec![Rule::HolderNotTold]);
    }
}
