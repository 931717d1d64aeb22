//! The checker: pure functions over a history, so that every rule can be tested on a
//! history written by hand. One history (the records on one clock) and one file per concern
//! over it: `holds.rs` makes the holds (the intervals every recipe's rules are about),
//! `lock.rs` judges them, `register.rs` and `postgres.rs` judge the stores' records of the
//! writes, `campaign.rs` the campaign's own rules (progress, a clean end).
//!
//! What a hold is: from a contender's `granted` until its own `lost`, `released` or
//! `dropped` for that token, or until its process was killed (the `kill-client` fault is
//! recorded before the SIGKILL) or exited. Two faults blind a holder: SIGSTOP
//! (`stall-holder`), after which it sees nothing until it wakes, and an expiry forced from
//! outside (`expire-session`), which the ensemble commits at once and the holder can only
//! hear of afterwards. Such a hold counts for the overlap rule only until the fault began
//! (for an expiry: or the grant, if the client was granted after the fault began and before
//! it heard of the expiry): what the holder does after it are writes, and the fence, not the
//! lock, must turn those away. The rules:
//!
//! 1. **No overlap**: no two holds intersect.
//! 2. **Tokens grow**: each grant's token is larger than the one of the grant before.
//! 3. **The fence holds**: every write the register accepted carried a token at least as new
//!    as every token it had seen; none it refused did; every accepted token had been granted
//!    to the writer.
//! 4. **Progress**: after each fault is healed, someone is granted within the campaign's
//!    bound of fault-free time (time during which another fault is active does not count).
//! 5. **Clean end**: the campaign finished, no node was left under the lock's path, no server
//!    and no contender process was left running.
//! 6. **PostgreSQL's fence holds** (`--postgres`), judged by PostgreSQL's own log of the
//!    writes it committed, in its commit order (the writers' reports come in no reliable
//!    order, and a writer may die between its commit and its report): no committed write
//!    carried a token older than one committed before it; the fence row's final token is the
//!    highest committed one; every committed token had been granted to its writer; every
//!    committed write had gone to the register first (each step writes there first); every
//!    write a writer heard committed is in the log; every refusal named a newer token that
//!    PostgreSQL had committed; and the final state was read.
//!
//! Whether the register and PostgreSQL agree on which writes are late is *not* a rule: they
//! may legitimately disagree. A writer killed or stalled between its register write and its
//! PostgreSQL write leaves the register knowing a token PostgreSQL does not, so an older
//! holder's late write is refused by the one and accepted by the other; and two writers'
//! steps can reach the two stores in different orders. Each store keeps its own rule; the
//! summary counts the writes they judged differently.

use std::fmt;

use super::Record;

mod campaign;
#[cfg(test)]
pub(crate) mod fixtures;
mod holds;
mod lock;
mod postgres;
mod register;

pub use holds::{holds, Hold};
pub(crate) use postgres::judged_differently;

/// The rule a [`Violation`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// Two holds overlapped.
    Overlap,
    /// A grant's token was not larger than the previous grant's.
    TokenOrder,
    /// The register accepted a write older than a token it had seen.
    StaleWriteAccepted,
    /// The register refused a write carrying the newest token.
    CurrentWriteRefused,
    /// The register accepted a token never granted to the writer.
    UngrantedToken,
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
    /// PostgreSQL committed a write with a token older than one it had committed before.
    PgStaleWriteAccepted,
    /// The fence row's final token is not the highest token PostgreSQL accepted.
    PgFinalToken,
    /// PostgreSQL refused a write without having accepted a newer token.
    PgCurrentWriteRefused,
    /// PostgreSQL committed a token never granted to the writer.
    PgUngrantedToken,
    /// A write its writer heard PostgreSQL commit is not in PostgreSQL's log.
    PgLostWrite,
    /// PostgreSQL committed a write the register never saw.
    PgWithoutRegister,
    /// A `--postgres` campaign's history lacks PostgreSQL's final state.
    PgUnchecked,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Overlap => "overlapping holds",
            Rule::TokenOrder => "tokens out of order",
            Rule::StaleWriteAccepted => "stale write accepted",
            Rule::CurrentWriteRefused => "current write refused",
            Rule::UngrantedToken => "write with a token never granted to the writer",
            Rule::NoProgress => "no grant after a healed fault",
            Rule::LeftoverNodes => "nodes left under the lock's path",
            Rule::LeftoverProcesses => "processes left running",
            Rule::NodesUnchecked => "could not check for nodes left",
            Rule::Unfinished => "the campaign did not finish",
            Rule::PgStaleWriteAccepted => "stale write accepted by PostgreSQL",
            Rule::PgFinalToken => "PostgreSQL's final token is not the highest it accepted",
            Rule::PgCurrentWriteRefused => "current write refused by PostgreSQL",
            Rule::PgUngrantedToken => "PostgreSQL accepted a token never granted to the writer",
            Rule::PgLostWrite => "a write PostgreSQL committed is not in its log",
            Rule::PgWithoutRegister => "PostgreSQL committed a write the register never saw",
            Rule::PgUnchecked => "PostgreSQL's final state is missing",
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
    lock::check(&h, &holds, &mut found);
    register::check(&h, &mut found);
    campaign::check_progress(&h, &mut found);
    postgres::check(&h, &mut found);
    campaign::check_end(&h, &mut found);
    found.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

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
