//! The semaphore's rule: at most `permits` holders at a time (a grant meets fewer than
//! `permits` holds: when the semaphore is full, an old holder's end comes before the next
//! grant).
//!
//! Permits' tokens are not in grant order, and no rule says they are: a permit is granted
//! once its node is among the first `permits` of the queue, and two nodes there may be told
//! in either order. A 10-minute run (seed 2028) saw node 45 granted 85 ms before node 44,
//! within the limit, as the sessions' lease clocks lapsed around them: most likely node 44's
//! acquirer lost the semaphore's inner lock while it waited (its lease lapsed), the next
//! acquirer took that lock and created node 45, and both were among the first `permits`. Nor can a token fence serve several holders at
//! once: the semaphore's holders write only through `Lease::fenced_write` (see `zk.rs`).

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

/// [`Rule::TooManyHolders`].
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
    fn permits_granted_out_of_their_tokens_order_within_the_limit_pass() {
        // Client 2's permit (token 39) is granted after client 0's (40) was released:
        // both nodes among the first two, told in the other order.
        let mut h = mixed();
        let i = at_ms(&h, 1_420, |e| matches!(e, Event::Granted { .. }));
        h[i] = grant(1_420, 2, 39, Recipe::Semaphore, SEMAPHORE, false);
        let j = at_ms(&h, 1_500, |e| matches!(e, Event::Released { .. }));
        h[j] = release(1_500, 2, 39, SEMAPHORE);
        let found = super::super::check(&h);
        assert!(found.is_empty(), "{found:#?}");
    }
}
