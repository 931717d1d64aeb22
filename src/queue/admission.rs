//! Who may hold: the one rule in which the recipes differ, free of I/O.

use crate::node::{self, Kind};

/// Who may hold, derived from the [`Kind`] we enqueue as.
///
/// (`Permits(n)` cannot watch one node: a waiter must wake when *any* of the `n` holders
/// leaves. It watches the directory's children instead, which would wake every waiter on
/// every change, so it is only used with waiters serialised by a mutex: see
/// [`Semaphore`](crate::Semaphore).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Only the head holds: a lock, a write lock, an election. Wait on the immediate
    /// predecessor.
    Exclusive,
    /// Hold while no exclusive contender is ahead: a read lock. Wait on the last exclusive
    /// contender ahead.
    Shared,
    /// The first `n` hold: a semaphore's leases. Wait for any change of the directory.
    Permits(usize),
}

/// Where a contender stands in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// It may hold now.
    Holds,
    /// It waits for any change of the directory (a semaphore's permit waiter).
    WaitsForAnyChange,
    /// It waits for the contender at index `watched` to leave.
    Waits {
        watched: usize,
        /// Holding follows from that contender's deletion alone: it is the last obstacle,
        /// and nothing can appear ahead of us (sequence numbers only grow).
        holds_when_gone: bool,
    },
}

impl Admission {
    pub(crate) fn of(kind: Kind) -> Admission {
        match kind {
            Kind::Lock | Kind::Write => Admission::Exclusive,
            Kind::Read => Admission::Shared,
            Kind::Lease { permits } => Admission::Permits(permits.max(1)),
        }
    }

    /// Where the contender at `index` of `queue` (in queue order) stands.
    pub(crate) fn place(self, queue: &[(i32, String)], index: usize) -> Place {
        match self {
            Admission::Exclusive if index == 0 => Place::Holds,
            Admission::Exclusive => Place::Waits {
                watched: index - 1,
                holds_when_gone: index == 1,
            },
            Admission::Permits(n) if index < n => Place::Holds,
            Admission::Permits(_) => Place::WaitsForAnyChange,
            Admission::Shared => {
                match queue[..index]
                    .iter()
                    .rposition(|(_, n)| !node::is_shared(n))
                {
                    None => Place::Holds,
                    Some(watched) => Place::Waits {
                        watched,
                        // Only readers ahead of the writer we watch: when it goes, we hold.
                        holds_when_gone: queue[..watched].iter().all(|(_, n)| node::is_shared(n)),
                    },
                }
            }
        }
    }

    /// True if the contenders listed (before we enqueue) would make a newcomer wait.
    pub(crate) fn blocked_by(self, names: &[String]) -> bool {
        let mut contenders = names.iter().filter(|c| node::sequence_of(c).is_some());
        match self {
            Admission::Exclusive => contenders.next().is_some(),
            Admission::Shared => contenders.any(|c| !node::is_shared(c)),
            Admission::Permits(n) => contenders.count() >= n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue from a shape: `w` an exclusive contender, `r` a reader.
    fn queue(shape: &str) -> Vec<(i32, String)> {
        shape
            .chars()
            .enumerate()
            .map(|(i, c)| {
                let tag = if c == 'r' { "__READ__" } else { "lock-" };
                (i as i32, format!("_c_{i}-{tag}{i:010}"))
            })
            .collect()
    }

    fn waits(watched: usize, holds_when_gone: bool) -> Place {
        Place::Waits {
            watched,
            holds_when_gone,
        }
    }

    #[test]
    fn exclusive_holds_at_the_head_and_watches_the_one_ahead() {
        let q = queue("wwww");
        let a = Admission::Exclusive;
        assert_eq!(a.place(&q, 0), Place::Holds);
        assert_eq!(a.place(&q, 1), waits(0, true));
        assert_eq!(a.place(&q, 2), waits(1, false));
        assert_eq!(a.place(&q, 3), waits(2, false));
        // A reader ahead counts as a holder for an exclusive contender too.
        assert_eq!(a.place(&queue("rw"), 1), waits(0, true));
    }

    #[test]
    fn shared_holds_with_readers_and_waits_on_the_last_writer_ahead() {
        let a = Admission::Shared;
        let q = queue("rrr");
        for i in 0..3 {
            assert_eq!(a.place(&q, i), Place::Holds, "reader {i}");
        }
        // r r w r: the last reader waits on the writer, and holds when it goes.
        assert_eq!(a.place(&queue("rrwr"), 3), waits(2, true));
        // w r w r: the last reader waits on the second writer, which is not the last
        // obstacle (a writer is ahead of it).
        assert_eq!(a.place(&queue("wrwr"), 3), waits(2, false));
        // w r: waits on the head writer and holds when it goes.
        assert_eq!(a.place(&queue("wr"), 1), waits(0, true));
        // r w r r: both readers behind the writer wait on it.
        let q = queue("rwrr");
        assert_eq!(a.place(&q, 2), waits(1, true));
        assert_eq!(a.place(&q, 3), waits(1, true));
    }

    #[test]
    fn permits_hold_for_the_first_n() {
        let a = Admission::Permits(2);
        let q = queue("wwww");
        assert_eq!(a.place(&q, 0), Place::Holds);
        assert_eq!(a.place(&q, 1), Place::Holds);
        assert_eq!(a.place(&q, 2), Place::WaitsForAnyChange);
        assert_eq!(
            Admission::of(Kind::Lease { permits: 0 }),
            Admission::Permits(1)
        );
    }

    #[test]
    fn a_newcomer_is_blocked_as_it_would_be_placed() {
        let names = |shape: &str| -> Vec<String> {
            let mut v: Vec<String> = queue(shape).into_iter().map(|(_, n)| n).collect();
            v.push("not-a-contender".into());
            v
        };
        assert!(!Admission::Exclusive.blocked_by(&names("")));
        assert!(Admission::Exclusive.blocked_by(&names("r")));
        assert!(!Admission::Shared.blocked_by(&names("rr")));
        assert!(Admission::Shared.blocked_by(&names("rw")));
        assert!(!Admission::Permits(2).blocked_by(&names("w")));
        assert!(Admission::Permits(2).blocked_by(&names("ww")));
    }

    #[test]
    fn kinds_map_to_rules() {
        assert_eq!(Admission::of(Kind::Lock), Admission::Exclusive);
        assert_eq!(Admission::of(Kind::Write), Admission::Exclusive);
        assert_eq!(Admission::of(Kind::Read), Admission::Shared);
        assert_eq!(
            Admission::of(Kind::Lease { permits: 3 }),
            Admission::Permits(3)
        );
    }
}
