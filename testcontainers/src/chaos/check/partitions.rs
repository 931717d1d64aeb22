//! The partitions' rules: each item owned by one member at a time (the old owner's end, its
//! release or its lease's `Lost`, comes before the next grant of the item: the holder knows
//! first), and each item's tokens growing: the lock's two rules
//! ([`exclusive`](super::lock::exclusive)) over each item's lock directory.

use super::super::Recipe;
use super::holds::by_resource;
use super::lock::exclusive;
use super::{Findings, Hold, Rule};

/// [`Rule::ItemOverlap`] and [`Rule::ItemTokenOrder`].
pub(super) fn check(holds: &[Hold], found: &mut Findings<'_>) {
    for resource in by_resource(holds, Recipe::Partitions).values() {
        exclusive(
            resource,
            Rule::ItemOverlap,
            Rule::ItemTokenOrder,
            "the item with ",
            found,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::Rule;
    use crate::chaos::history::at;
    use crate::chaos::{Event, Recipe, Record};

    const ITEM: &str = "/zkfence-chaos/partitions/locks/2";

    /// Item 2 moves from client 0 (released when asked) to client 1, then client 1 loses it
    /// (its lease lapsed; it last saw it held at 1.9 s) and client 0 owns it again.
    fn moves() -> Vec<Record> {
        vec![
            campaign(),
            grant(100, 0, 10, Recipe::Partitions, ITEM, false),
            release(500, 0, 10, ITEM),
            grant(520, 1, 11, Recipe::Partitions, ITEM, false),
            at(
                1_905,
                Event::Lost {
                    client: 1,
                    token: 11,
                    reason: "the lease clock lapsed".into(),
                    path: ITEM.into(),
                    seen_held_us: Some(1_900_000),
                },
            ),
            grant(1_902, 0, 12, Recipe::Partitions, ITEM, false),
            release(2_500, 0, 12, ITEM),
            finished(3_000),
        ]
    }

    #[test]
    fn an_item_that_moves_as_told_passes() {
        let mut h = moves();
        h.sort_by_key(|r| r.t_us);
        let found = super::super::check(&h);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn an_item_granted_while_its_old_owner_held_it_is_found() {
        // Client 0 releases only after client 1 was granted the item.
        let mut h = moves();
        h[2] = release(530, 0, 10, ITEM);
        h.sort_by_key(|r| r.t_us);
        let found = super::super::check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::ItemOverlap);
        // Granted before the last look that saw the old owner's lease held: found too.
        let mut h = moves();
        if let Event::Lost { seen_held_us, .. } = &mut h[4].event {
            *seen_held_us = Some(1_903_000);
        }
        h.sort_by_key(|r| r.t_us);
        assert_eq!(rules(&h), vec![Rule::ItemOverlap]);
    }

    #[test]
    fn an_items_token_not_larger_than_the_last_is_found() {
        let mut h = moves();
        h[5] = grant(1_902, 0, 9, Recipe::Partitions, ITEM, false);
        h[6] = release(2_500, 0, 9, ITEM);
        h.sort_by_key(|r| r.t_us);
        assert_eq!(rules(&h), vec![Rule::ItemTokenOrder]);
    }
}
