//! The lock's rules over its holds: no two holds overlap (the old holder's end, its `Lost`
//! or release, comes before the next grant), and each grant's token is larger than the one
//! before.

use super::super::{Event, Record};
use super::{Findings, Hold, Rule};

/// Rules 1 and 2 (see the module docs of `check`).
pub(super) fn check(h: &[Record], holds: &[Hold], found: &mut Findings<'_>) {
    no_overlap(holds, found);
    tokens_grow(h, found);
}

/// No two holds overlap: sweeps the holds in grant order against the one that reaches
/// furthest.
fn no_overlap(holds: &[Hold], found: &mut Findings<'_>) {
    let mut furthest: Option<&Hold> = None;
    for hold in holds {
        if let Some(prev) = furthest {
            if hold.start_us < prev.believed_end_us() && hold.client != prev.client {
                found.add(
                    Rule::Overlap,
                    hold.start_index,
                    format!(
                        "client {} was granted token {} at {:.3}s while client {} still held \
                         token {} (granted {:.3}s, until {:.3}s: {})",
                        hold.client,
                        hold.token,
                        hold.start_us as f64 / 1e6,
                        prev.client,
                        prev.token,
                        prev.start_us as f64 / 1e6,
                        prev.believed_end_us() as f64 / 1e6,
                        prev.ended_by
                    ),
                    &[prev.start_index, hold.start_index, prev.end_index],
                );
            }
        }
        if furthest.map_or(true, |f| hold.believed_end_us() > f.believed_end_us()) {
            furthest = Some(hold);
        }
    }
}

/// Each grant's token is larger than the previous grant's.
fn tokens_grow(h: &[Record], found: &mut Findings<'_>) {
    let mut last_grant: Option<(usize, u64)> = None;
    for (i, r) in h.iter().enumerate() {
        if let Event::Granted { client, token, .. } = r.event {
            if let Some((j, before)) = last_grant {
                if token <= before {
                    found.add(
                        Rule::TokenOrder,
                        i,
                        format!(
                            "client {client} was granted token {token}, not larger than the \
                             previous grant's {before}"
                        ),
                        &[j, i],
                    );
                }
            }
            last_grant = Some((i, token));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, holds, Rule};
    use crate::chaos::history::at;
    use crate::chaos::{Event, FaultKind};

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
}
