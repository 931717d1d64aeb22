//! The plain lock's rules, over each of its resources' holds: at most one holder at a time
//! (the old holder's end, its `Lost` or release, comes before the next grant: the holder
//! knows first), and each grant's token larger than the one before. The election and each
//! path of a multi-lock keep the same two rules ([`exclusive`]), under names of their own.

use super::super::Recipe;
use super::holds::{by_resource, met_at_grant, met_message};
use super::{Findings, Hold, Rule};

/// Rules 1 and 2 (see the module docs of `check`) for [`Recipe::Lock`].
pub(super) fn check(holds: &[Hold], found: &mut Findings<'_>) {
    for resource in by_resource(holds, Recipe::Lock).values() {
        exclusive(resource, Rule::Overlap, Rule::TokenOrder, "", found);
    }
}

/// One holder at a time (`overlap`) and tokens growing in grant order (`order`), over one
/// resource's holds in grant order; `what` names the grant in messages ("leadership ").
pub(super) fn exclusive(
    holds: &[&Hold],
    overlap: Rule,
    order: Rule,
    what: &str,
    found: &mut Findings<'_>,
) {
    for (hold, met) in met_at_grant(holds) {
        if let Some(prev) = met.last() {
            found.add(
                overlap,
                hold.start_index,
                met_message(what, hold, prev),
                &[prev.start_index, hold.start_index, prev.end_index],
            );
        }
    }
    for pair in holds.windows(2) {
        let (before, hold) = (pair[0], pair[1]);
        if hold.token <= before.token {
            found.add(
                order,
                hold.start_index,
                format!(
                    "client {} was granted {what}token {} of {}, not larger than the \
                     previous grant's {}",
                    hold.client, hold.token, hold.path, before.token
                ),
                &[before.start_index, hold.start_index],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, holds, Rule};
    use crate::chaos::history::at;
    use crate::chaos::{Event, FaultKind, LOCK_PATH};

    #[test]
    fn overlapping_holds_are_found_with_the_events_around_them() {
        let mut h = clean();
        // Client 0 releases its first hold later, after client 1's grant.
        h[3] = released(515, 0, 10);
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        let v = &found[0];
        assert_eq!(v.rule, Rule::Overlap);
        assert!(v.message.contains("client 1 was granted token 11"), "{v}");
        assert!(v.around.contains(&granted(510, 1, 11)), "{v}");
        assert!(v.around.contains(&released(515, 0, 10)), "{v}");
        let text = v.to_string();
        assert!(
            text.contains("overlapping holds") && text.contains("\"granted\""),
            "{text}"
        );
    }

    #[test]
    fn a_stall_does_not_excuse_a_holder_that_was_not_stalled() {
        // The stall hits client 0, not the holder: client 1's hold runs to its Lost at 4.002s,
        // past client 2's grant.
        let mut h = clean();
        h[6] = fault(600, 0, FaultKind::StallHolder, Some(0));
        assert_eq!(rules(&h), vec![Rule::Overlap]);
    }

    #[test]
    fn a_session_expired_from_outside_blinds_its_holder_like_a_stall() {
        let mut h = clean();
        h[6] = fault(600, 0, FaultKind::ExpireSession, Some(1));
        h[9] = healed(600, 0, FaultKind::ExpireSession);
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(holds(&h)[1].blind_us, Some(600_000));
        // Also when the expiry, asked for while the client waited, lands after its grant.
        let mut h = clean();
        h[6] = fault(505, 0, FaultKind::ExpireSession, Some(1));
        h[9] = healed(505, 0, FaultKind::ExpireSession);
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
        assert_eq!(holds(&h)[1].blind_us, Some(510_000));
        // Nor after it said the expiry failed.
        let mut failed = h.clone();
        failed.insert(
            7,
            at(
                506,
                Event::ExpiryFailed {
                    client: 1,
                    error: "no session within 4s".into(),
                },
            ),
        );
        assert_eq!(rules(&failed), vec![Rule::Overlap]);
        // Nor a hold granted after the client heard of its expiry.
        h.insert(
            7,
            at(
                506,
                Event::AcquireFailed {
                    client: 1,
                    error: "the ZooKeeper session expired".into(),
                },
            ),
        );
        assert_eq!(rules(&h), vec![Rule::Overlap]);
        // Any other instantaneous fault excuses nothing.
        let mut h = clean();
        h[6] = fault(600, 0, FaultKind::CutClient, Some(1));
        h[9] = healed(600, 0, FaultKind::CutClient);
        assert_eq!(rules(&h), vec![Rule::Overlap]);
    }

    #[test]
    fn a_token_not_larger_than_the_one_before_is_found() {
        let mut h = clean();
        h[4] = granted(510, 1, 9);
        h[5] = accepted(520, 1, 9);
        // The register then also saw 9 after 10: that is the fence's rule, found too.
        assert_eq!(rules(&h), vec![Rule::TokenOrder, Rule::StaleWriteAccepted]);
    }

    #[test]
    fn a_poller_knew_first_if_the_grant_came_after_its_last_poll_that_saw_it_held() {
        // Client 0 polls: it saw its lease held at 505 ms, and lost at 515 ms (the next poll);
        // client 1 was granted at 510 ms, between the two.
        let mut h = clean();
        h[3] = at(
            515,
            Event::Lost {
                client: 0,
                token: 10,
                reason: "the lease clock lapsed".into(),
                path: LOCK_PATH.into(),
                seen_held_us: Some(505_000),
            },
        );
        assert!(check(&h).is_empty(), "{:#?}", check(&h));
        // Granted before the poll that still saw it held: the holder did not know first.
        if let Event::Lost { seen_held_us, .. } = &mut h[3].event {
            *seen_held_us = Some(512_000);
        }
        assert_eq!(rules(&h), vec![Rule::Overlap]);
    }
}
