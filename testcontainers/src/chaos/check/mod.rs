//! The checker: pure functions over a history, so that every rule can be tested on a
//! history written by hand. One history (the records on one clock) and one file per concern
//! over it: `holds.rs` makes the holds, the intervals every recipe's rules are about, and
//! says what "at the same time" means; each recipe's file judges its holds (`lock.rs`,
//! `election.rs`, `rwlock.rs`, `semaphore.rs`, `multi.rs`, `partitions.rs`); `told.rs` judges what a holder
//! whose node an operator deleted was told; `register.rs`, `zk.rs` and `stores.rs` judge
//! each store's record of the writes; `campaign.rs` the campaign's own rules (progress, a
//! clean end).
//!
//! What a hold is: from a contender's `granted` of one resource (a lock directory) until its
//! own `lost`, `released` or `dropped` for that resource and token, or until its process was
//! killed (the `kill-client` fault is recorded before the SIGKILL) or exited. Three faults
//! blind a holder: SIGSTOP (`stall-holder`), after which it sees nothing until it wakes; an
//! expiry forced from outside (`expire-session`), which the ensemble commits at once and the
//! holder can only hear of afterwards; and an operator's delete of its node
//! (`delete-holder`), which the next waiter hears of at the same moment. Such a hold counts
//! for the overlap rules only until the fault began (for an expiry: or the grant, if the
//! client was granted after the fault began and before it heard of the expiry): what the
//! holder does after it are writes, and the fences, not the lock, must turn those away. The
//! rules:
//!
//! 1. **One holder at a time, as the recipe says**, at each grant (the old holder's end, its
//!    `Lost` or release, comes first: the holder knows first): a lock's or a multi-lock's
//!    path has one holder ([`Rule::Overlap`], [`Rule::MultiOverlap`]); an election one leader
//!    ([`Rule::TwoLeaders`]); a read/write lock's readers share it and a writer holds it
//!    alone ([`Rule::WriterNotAlone`]); a semaphore has at most `permits` holders
//!    ([`Rule::TooManyHolders`]); and a multi-lock's grant holds every path it asked for
//!    ([`Rule::MultiPartial`]); a partition set's item has one owner (`an item owned
//!    twice`, [`Rule::ItemOverlap`]).
//! 2. **Tokens grow** in grant order, per resource ([`Rule::TokenOrder`],
//!    [`Rule::LeaderTokenOrder`], [`Rule::MultiTokenOrder`], [`Rule::ItemTokenOrder`]); a
//!    read/write lock's writer's
//!    token is larger than every earlier grant's, a reader's than every earlier writer's
//!    ([`Rule::RwTokenOrder`]). A semaphore's permits are granted in no token order (see
//!    `semaphore.rs`).
//! 3. **The fences hold**: every write the register accepted carried a token at least as new
//!    as every token it had seen for that resource (reads included), every read it served
//!    one at least as new as every write's; none it refused did; every accepted token had
//!    been granted to its writer. And every write ZooKeeper committed through
//!    `Lease::fenced_write` was committed while its resource had room for its writer
//!    ([`Rule::ZkLateWrite`]).
//! 4. **Progress**: after each fault is healed, someone is granted within the campaign's
//!    bound of fault-free time (time during which another fault is active does not count).
//! 5. **A clean run**: every restarted server is the campaign's own (another process on the
//!    machine did not take its port while it was down); the campaign finished, no node was
//!    left under the recipes' paths, no server and no contender process was left running.
//! 6. **Each store's fence holds** (`--sink`: PostgreSQL, MariaDB, Redis, etcd, the HTTP
//!    service), judged by the store's own record of the writes it committed, in its commit
//!    order (the writers' reports come in no reliable order, and a writer may die between
//!    its commit and its report): no committed write carried a token older than one
//!    committed before it for that resource; the fences' final tokens are the highest
//!    committed ones (for the HTTP service, not below them: its layer admits before its
//!    handler writes); every committed token had been granted to its writer; every
//!    committed write had gone to the register first (each step writes there first); every
//!    write a writer heard committed is in the record, none it heard refused is; every
//!    refusal named a newer token the store had committed; and the record was read.
//! 7. **A holder whose node an operator deleted is told** within [`holder_told_bound`] of
//!    fault-free time ([`Rule::HolderNotTold`]).
//!
//! Whether the register and a store agree on which writes are late is *not* a rule: they
//! may legitimately disagree. A writer killed or stalled between its register write and its
//! store's write leaves the register knowing a token the store does not, so an older
//! holder's late write is refused by the one and accepted by the other; and two writers'
//! steps can reach the two stores in different orders. Each store keeps its own rule; the
//! summary counts the writes they judged differently.

use std::fmt;

use super::Record;

mod campaign;
mod election;
#[cfg(test)]
pub(crate) mod fixtures;
mod holds;
mod lock;
mod multi;
mod partitions;
mod register;
mod rwlock;
mod semaphore;
mod stores;
mod told;
mod zk;

pub use holds::{holds, Hold};
pub(crate) use stores::{counts as store_counts, judged_differently, stores_of};
pub use told::{holder_told_bound, TOLD_ROUND_TRIP};

/// The rule a [`Violation`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// A lock was granted while another contender held it.
    Overlap,
    /// A lock grant's token was not larger than the previous grant's.
    TokenOrder,
    /// A candidate was elected while another still led.
    TwoLeaders,
    /// A leadership's token was not larger than the previous leader's.
    LeaderTokenOrder,
    /// A read/write lock's writer was granted while another held it, or a reader while a
    /// writer did.
    WriterNotAlone,
    /// A writer's token was not larger than every earlier grant's, or a reader's than every
    /// earlier writer's.
    RwTokenOrder,
    /// A semaphore's permit was granted while all its permits were held.
    TooManyHolders,
    /// A multi-lock was granted a path another contender held.
    MultiOverlap,
    /// A multi-lock's token for a path was not larger than that path's previous grant's.
    MultiTokenOrder,
    /// A multi-lock's grant did not hold every path it asked for.
    MultiPartial,
    /// A partition set's item was granted to a member while another owned it.
    ItemOverlap,
    /// An item's token was not larger than its previous grant's.
    ItemTokenOrder,
    /// A holder whose node an operator deleted was not told within the bound.
    HolderNotTold,
    /// The register accepted a write older than a token it had seen.
    StaleWriteAccepted,
    /// The register refused a write carrying the newest token.
    CurrentWriteRefused,
    /// The register accepted a token never granted to the writer (or reader).
    UngrantedToken,
    /// The register served a read older than a writer's token it had seen.
    StaleReadAccepted,
    /// The register refused a read no writer's token was newer than.
    CurrentReadRefused,
    /// ZooKeeper committed a fenced write while other holders filled its resource.
    ZkLateWrite,
    /// ZooKeeper committed a fenced write with a token never granted to its writer.
    ZkUngrantedToken,
    /// No grant within the bound after a fault was healed.
    NoProgress,
    /// Nodes were left under the lock's path.
    LeftoverNodes,
    /// Server or contender processes were left running.
    LeftoverProcesses,
    /// The lock's children could not be listed at the end, so leftovers are unknown.
    NodesUnchecked,
    /// The history has no `finished` record.
    Unfinished,
    /// A restarted server's port answered as another process's ZooKeeper server.
    ServerReplaced,
    /// A store committed a write with a token older than one it had committed before.
    StoreStaleWriteAccepted,
    /// A store's fence's final token is not the highest token it committed.
    StoreFinalToken,
    /// A store refused a write without having committed a newer token.
    StoreCurrentWriteRefused,
    /// A store committed a token never granted to the writer.
    StoreUngrantedToken,
    /// A write its writer heard a store commit is not in the store's record.
    StoreLostWrite,
    /// A write its writer heard a store refuse is in the store's record.
    StoreRefusedWriteCommitted,
    /// A store committed a write the register never saw.
    StoreWithoutRegister,
    /// A store's record is missing from the history, or could not be read.
    StoreUnchecked,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Overlap => "overlapping holds",
            Rule::TokenOrder => "tokens out of order",
            Rule::TwoLeaders => "two leaders at once",
            Rule::LeaderTokenOrder => "leadership tokens out of order",
            Rule::WriterNotAlone => "a writer not alone",
            Rule::RwTokenOrder => "read/write tokens out of order",
            Rule::TooManyHolders => "more semaphore holders than permits",
            Rule::MultiOverlap => "a multi-lock's path held twice",
            Rule::MultiTokenOrder => "multi-lock tokens out of order",
            Rule::MultiPartial => "a multi-lock's paths not held together",
            Rule::ItemOverlap => "an item owned twice",
            Rule::ItemTokenOrder => "item tokens out of order",
            Rule::HolderNotTold => "a holder whose node was deleted was not told",
            Rule::StaleWriteAccepted => "stale write accepted",
            Rule::CurrentWriteRefused => "current write refused",
            Rule::UngrantedToken => "write with a token never granted to the writer",
            Rule::StaleReadAccepted => "stale read served",
            Rule::CurrentReadRefused => "current read refused",
            Rule::ZkLateWrite => "late fenced write committed by ZooKeeper",
            Rule::ZkUngrantedToken => "ZooKeeper committed a token never granted to the writer",
            Rule::NoProgress => "no grant after a healed fault",
            Rule::LeftoverNodes => "nodes left under the lock's path",
            Rule::LeftoverProcesses => "processes left running",
            Rule::NodesUnchecked => "could not check for nodes left",
            Rule::Unfinished => "the campaign did not finish",
            Rule::ServerReplaced => "a server's port was taken by another process",
            Rule::StoreStaleWriteAccepted => "stale write accepted by a store",
            Rule::StoreFinalToken => "a store's final token is not the highest it committed",
            Rule::StoreCurrentWriteRefused => "current write refused by a store",
            Rule::StoreUngrantedToken => "a store accepted a token never granted to the writer",
            Rule::StoreLostWrite => "a write a store committed is not in its record",
            Rule::StoreRefusedWriteCommitted => "a write a store refused is in its record",
            Rule::StoreWithoutRegister => "a store committed a write the register never saw",
            Rule::StoreUnchecked => "a store's record is missing",
        })
    }
}

/// One broken rule, with the events around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// When (microseconds since the campaign started).
    pub t_us: u64,
    /// What exactly.
    pub message: String,
    /// The events around it, in time order.
    pub around: Vec<Record>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "violation at {:.3}s: {}: {}",
            self.t_us as f64 / 1e6,
            self.rule,
            self.message
        )?;
        for r in &self.around {
            let json = serde_json::to_string(r).unwrap_or_default();
            writeln!(f, "    {:>10.3}s  {json}", r.t_us as f64 / 1e6)?;
        }
        Ok(())
    }
}

/// How many records before and after an event a violation shows.
const CONTEXT: usize = 4;

/// The history in time order (stable: records of one instant keep their order).
fn ordered(history: &[Record]) -> Vec<Record> {
    let mut h = history.to_vec();
    h.sort_by_key(|r| r.t_us);
    h
}

/// The violations found in one time-ordered history, each with the records around it.
pub(crate) struct Findings<'h> {
    h: &'h [Record],
    found: Vec<Violation>,
}

impl<'h> Findings<'h> {
    fn new(h: &'h [Record]) -> Findings<'h> {
        Findings {
            h,
            found: Vec::new(),
        }
    }

    /// Records that `rule` was broken at record `at`, showing the records around each of
    /// `indices`.
    fn add(&mut self, rule: Rule, at: usize, message: String, indices: &[usize]) {
        let h = self.h;
        let mut keep: Vec<usize> = indices
            .iter()
            .flat_map(|&i| i.saturating_sub(CONTEXT)..(i + CONTEXT + 1).min(h.len()))
            .collect();
        keep.sort_unstable();
        keep.dedup();
        self.found.push(Violation {
            rule,
            t_us: h[at].t_us,
            message,
            around: keep.into_iter().map(|i| h[i].clone()).collect(),
        });
    }

    /// What was found, in time order (stable: the rules' order within one instant).
    fn into_sorted(mut self) -> Vec<Violation> {
        self.found.sort_by_key(|v| v.t_us);
        self.found
    }
}

/// Checks every rule (see the module docs) over `history` and returns what it broke, in
/// time order. An empty list: the history is clean.
pub fn check(history: &[Record]) -> Vec<Violation> {
    let h = ordered(history);
    let mut found = Findings::new(&h);
    let holds = holds::holds_of(&h);
    lock::check(&holds, &mut found);
    election::check(&holds, &mut found);
    rwlock::check(&holds, &mut found);
    semaphore::check(&h, &holds, &mut found);
    multi::check(&holds, &mut found);
    partitions::check(&holds, &mut found);
    told::check(&h, &holds, &mut found);
    register::check(&h, &mut found);
    zk::check(&h, &holds, &mut found);
    campaign::check_progress(&h, &mut found);
    stores::check(&h, &mut found);
    campaign::check_end(&h, &mut found);
    found.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn a_clean_history_of_every_recipe_passes() {
        let found = check(&mixed());
        assert!(found.is_empty(), "{found:#?}");
        let holds = holds(&mixed());
        assert_eq!(holds.len(), 13);
        assert!(holds.iter().all(|h| h.ended_by == "released"), "{holds:#?}");
    }

    #[test]
    fn a_clean_history_passes() {
        let found = check(&clean());
        assert!(found.is_empty(), "{found:#?}");
        let holds = holds(&clean());
        assert_eq!(holds.len(), 4);
        assert_eq!(holds[1].blind_us, Some(600_000));
        assert_eq!(
            holds[1].end_us, 4_002_000,
            "the stalled hold ends at its Lost"
        );
        assert_eq!(holds[2].ended_by, "process killed");
    }
}
