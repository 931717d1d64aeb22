//! The multi-lock's rules: each path held by one at a time with its tokens growing (the
//! lock's two rules, [`exclusive`](super::lock::exclusive), per path), and a grant's paths
//! held together or not at all: one grant holds every path it asked for, from one instant.

use std::collections::BTreeSet;

use super::super::Recipe;
use super::holds::by_resource;
use super::lock::exclusive;
use super::{Findings, Hold, Rule};

/// [`Rule::MultiOverlap`], [`Rule::MultiTokenOrder`] and [`Rule::MultiPartial`].
pub(super) fn check(holds: &[Hold], found: &mut Findings<'_>) {
    for resource in by_resource(holds, Recipe::Multi).values() {
        exclusive(
            resource,
            Rule::MultiOverlap,
            Rule::MultiTokenOrder,
            "a multi-lock with ",
            found,
        );
    }
    // Together: the holds one grant made (one client, one instant) are exactly the paths it
    // asked for.
    let multi: Vec<&Hold> = holds.iter().filter(|h| h.recipe == Recipe::Multi).collect();
    let mut seen = BTreeSet::new();
    for hold in &multi {
        if !seen.insert((hold.client, hold.start_us)) {
            continue;
        }
        let granted: BTreeSet<&str> = multi
            .iter()
            .filter(|o| o.client == hold.client && o.start_us == hold.start_us)
            .map(|o| o.path.as_str())
            .collect();
        let asked: BTreeSet<&str> = hold.group.iter().map(String::as_str).collect();
        if granted != asked {
            found.add(
                Rule::MultiPartial,
                hold.start_index,
                format!(
                    "client {} asked a multi-lock for {asked:?} and was granted {granted:?} at \
                     {:.3}s",
                    hold.client,
                    hold.start_us as f64 / 1e6
                ),
                &[hold.start_index],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::Rule;
    use crate::chaos::Event;

    #[test]
    fn a_path_granted_to_two_multi_locks_at_once_is_found() {
        let mut h = mixed();
        // Client 0 lets go of b only after client 1 was granted b (and c).
        let i = at_ms(
            &h,
            2_200,
            |e| matches!(e, Event::Released { path, .. } if path == MULTI_B),
        );
        h[i] = release(2_300, 0, 50, MULTI_B);
        h.sort_by_key(|r| r.t_us);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::MultiOverlap);
        assert!(found[0].message.contains("token 51"), "{}", found[0]);
    }

    #[test]
    fn a_path_token_not_larger_than_the_last_is_found() {
        let mut h: Vec<_> = mixed()
            .into_iter()
            .filter(|r| r.t_us < 2_210_000 || matches!(r.event, Event::Finished { .. }))
            .collect();
        let end = h.len() - 1;
        let again = multi_grant(2_210, 1, 49, &[MULTI_B, MULTI_C], &[MULTI_B, MULTI_C]);
        let ends = [
            release(2_400, 1, 49, MULTI_B),
            release(2_400, 1, 49, MULTI_C),
        ];
        h.splice(end..end, again.into_iter().chain(ends));
        assert_eq!(rules(&h), vec![Rule::MultiTokenOrder]);
    }

    #[test]
    fn a_grant_without_every_path_asked_for_is_found() {
        let mut h = mixed();
        // Client 1 asked for b and c, and was granted b only.
        let i = at_ms(
            &h,
            2_210,
            |e| matches!(e, Event::Granted { path, .. } if path == MULTI_C),
        );
        h.remove(i);
        let j = at_ms(
            &h,
            2_400,
            |e| matches!(e, Event::Released { path, .. } if path == MULTI_C),
        );
        h.remove(j);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::MultiPartial);
        // The same grants, asked for in another order, are together.
        assert!(super::super::check(&mixed()).is_empty());
    }
}
