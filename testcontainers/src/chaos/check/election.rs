//! The election's rules: one leader at a time (the old leader's `Lost` or resignation comes
//! before the next leader's election), and each leadership's token larger than the one
//! before: the lock's two rules ([`exclusive`](super::lock::exclusive)) over the election's
//! path.

use super::super::Recipe;
use super::holds::by_resource;
use super::lock::exclusive;
use super::{Findings, Hold, Rule};

/// [`Rule::TwoLeaders`] and [`Rule::LeaderTokenOrder`].
pub(super) fn check(holds: &[Hold], found: &mut Findings<'_>) {
    for resource in by_resource(holds, Recipe::Election).values() {
        exclusive(
            resource,
            Rule::TwoLeaders,
            Rule::LeaderTokenOrder,
            "leadership with ",
            found,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::Rule;
    use crate::chaos::{Event, Recipe};

    #[test]
    fn a_second_leader_before_the_first_resigned_is_found() {
        let mut h = mixed();
        // Client 0 resigns only after client 1 was elected.
        let i = at_ms(&h, 300, |e| matches!(e, Event::Released { .. }));
        h[i] = release(320, 0, 20, ELECTION);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::TwoLeaders);
        assert!(
            found[0].message.contains("leadership with token 21"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn a_leadership_token_not_larger_than_the_last_is_found() {
        let mut h = mixed();
        let i = at_ms(&h, 310, |e| matches!(e, Event::Granted { .. }));
        h[i] = grant(310, 1, 19, Recipe::Election, ELECTION, false);
        let j = at_ms(&h, 500, |e| matches!(e, Event::Released { .. }));
        h[j] = release(500, 1, 19, ELECTION);
        assert_eq!(rules(&h), vec![Rule::LeaderTokenOrder]);
    }
}
