//! The semaphore's rules: at most `permits` holders at a time (a grant meets fewer than
//! `permits` holds: when the semaphore is full, an old holder's end comes before the next
//! grant), and each permit's token larger than the one before (only the acquirer holding the
//! semaphore's inner lock creates a permit node, so permits are created in grant order).

use super::super::{Event, Recipe, Record};
use super::holds::{by_resource, met_at_grant};
use super::{Findings, Hold, Rule};

/// The campaign's permits, as its first record says.
pub(super) fn permits(h: &[Record]) -> usize {
    h.iter()
        .find_map(|r| match r.event {
            Event::Campaign { permits, .. } => Some(permits.max(1)),
            _ => None,
        })
        .unwrap_or(1)
}

/// [`Rule::TooManyHolders`] and [`Rule::PermitTokenOrder`].
pub(super) fn check(h: &[Record], holds: &[Hold], found: &mut Findings<'_>) {
    let permits = permits(h);
    for resource in by_resource(holds, Recipe::Semaphore).values() {
        for (hold, met) in met_at_grant(resource) {
            if met.len() >= permits {
                let others: Vec<String> = met
                    .iter()
                    .map(|o| {
                        format!(
                            "client {} (token {}, until {:.3}s: {})",
                            o.client,
                            o.token,
                            o.believed_end_us() as f64 / 1e6,
                            o.ended_by
                        )
                    })
                    .collect();
                let mut indices: Vec<usize> = met.iter().map(|o| o.start_index).collect();
                indices.push(hold.start_index);
                found.add(
                    Rule::TooManyHolders,
                    hold.start_index,
                    format!(
                        "client {} was granted a permit of {} (token {}) at {:.3}s while {} of \
                         {permits} permits were held: {}",
                        hold.client,
                        hold.path,
                        hold.token,
                        hold.start_us as f64 / 1e6,
                        met.len(),
                        others.join(", ")
                    ),
                    &indices,
                );
            }
        }
        for pair in resource.windows(2) {
            let (before, hold) = (pair[0], pair[1]);
            if hold.token <= before.token {
                found.add(
                    Rule::PermitTokenOrder,
                    hold.start_index,
                    format!(
                        "client {} was granted a permit of {} with token {}, not larger than \
                         the previous permit's {}",
                        hold.client, hold.path, hold.token, before.token
                    ),
                    &[before.start_index, hold.start_index],
                );
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
    fn a_permit_granted_while_all_were_held_is_found() {
        let mut h = mixed();
        // Client 0 holds its permit past the third grant: three holders of two permits.
        let i = at_ms(&h, 1_400, |e| matches!(e, Event::Released { .. }));
        h[i] = release(1_430, 0, 40, SEMAPHORE);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::TooManyHolders);
        assert!(found[0].message.contains("2 of 2 permits"), "{}", found[0]);
        // With three permits, the same history is clean.
        if let Event::Campaign { permits, .. } = &mut h[0].event {
            *permits = 3;
        }
        let found = super::super::check(&h);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn a_permit_token_not_larger_than_the_last_is_found() {
        let mut h = mixed();
        let i = at_ms(&h, 1_420, |e| matches!(e, Event::Granted { .. }));
        h[i] = grant(1_420, 2, 39, Recipe::Semaphore, SEMAPHORE, false);
        let j = at_ms(&h, 1_500, |e| matches!(e, Event::Released { .. }));
        h[j] = release(1_500, 2, 39, SEMAPHORE);
        assert_eq!(rules(&h), vec![Rule::PermitTokenOrder]);
    }
}
