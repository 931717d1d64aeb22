//! The recipes a campaign drives, and where each lives in ZooKeeper.
//!
//! Each recipe has its own path, so that each has its own queue and its own rules; the
//! history names the *resource* of every grant and write: the lock directory (one per
//! recipe, three for the multi-lock). A rule is about one resource at a time, so a recipe
//! whose resources are items (partitions) fits the same history.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A recipe the contenders drive through zkfence's public API.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Recipe {
    /// [`Session::lock`](zkfence::Session::lock): at most one holder.
    #[default]
    Lock,
    /// [`Session::election`](zkfence::Session::election): one leader at a time, tokens
    /// growing; a leader resigns after its term.
    Election,
    /// [`Session::read_lock`](zkfence::Session::read_lock) and
    /// [`write_lock`](zkfence::Session::write_lock) on one path: readers together, a writer
    /// alone. A contender reads two times in three.
    Rwlock,
    /// [`Session::semaphore`](zkfence::Session::semaphore) with the campaign's permits: at
    /// most that many holders.
    Semaphore,
    /// [`Session::multi_lock`](zkfence::Session::multi_lock) of two of three paths, named in
    /// a random order: each path held by one at a time, all of a grant's paths together.
    Multi,
    /// [`Session::partitions`](zkfence::Session::partitions) of a few items: a contender is a
    /// member for a while (one to three session timeouts), owning the items the assignment
    /// gives it and releasing those it is asked to; each item is a resource with one owner at
    /// a time.
    Partitions,
}

impl Recipe {
    /// Every recipe, in a fixed order (what `mixed` means).
    pub const ALL: [Recipe; 6] = [
        Recipe::Lock,
        Recipe::Election,
        Recipe::Rwlock,
        Recipe::Semaphore,
        Recipe::Multi,
        Recipe::Partitions,
    ];

    /// The name used on the command line and in the history (`lock`, `rwlock`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Recipe::Lock => "lock",
            Recipe::Election => "election",
            Recipe::Rwlock => "rwlock",
            Recipe::Semaphore => "semaphore",
            Recipe::Multi => "multi",
            Recipe::Partitions => "partitions",
        }
    }

    /// The recipe's path: its lock directory, or for the multi-lock the directory of its
    /// three locks.
    pub fn path(self) -> &'static str {
        match self {
            Recipe::Lock => LOCK_PATH,
            Recipe::Election => "/zkfence-chaos/election",
            Recipe::Rwlock => "/zkfence-chaos/rwlock",
            Recipe::Semaphore => "/zkfence-chaos/semaphore",
            Recipe::Multi => "/zkfence-chaos/multi",
            Recipe::Partitions => "/zkfence-chaos/partitions",
        }
    }

    /// The resources the recipe's grants name in the history (each with rules of its own):
    /// the lock directory, the multi-lock's three, or each item's lock directory (the
    /// partitions' layout, `{path}/locks/{item}`).
    pub fn resources(self) -> Vec<String> {
        match self {
            Recipe::Multi => MULTI_LOCKS
                .iter()
                .map(|l| format!("{}/{l}", self.path()))
                .collect(),
            Recipe::Partitions => (0..PARTITION_ITEMS)
                .map(|item| format!("{}/locks/{item}", self.path()))
                .collect(),
            _ => vec![self.path().to_string()],
        }
    }

    /// The queue directories its nodes live in (where the campaign looks for nodes left at
    /// the end): the semaphore's inner lock and its permits, each path of the multi-lock.
    pub(crate) fn queues(self) -> Vec<String> {
        match self {
            Recipe::Semaphore => vec![
                format!("{}/locks", self.path()),
                format!("{}/leases", self.path()),
            ],
            Recipe::Partitions => std::iter::once(format!("{}/party", self.path()))
                .chain(self.resources())
                .collect(),
            _ => self.resources(),
        }
    }

    /// Whether its holders write through token fences (the register, PostgreSQL): a token
    /// fence admits one holder's writes at a time, so a semaphore's holders (several at once)
    /// write only through [`Lease::fenced_write`](zkfence::Lease::fenced_write).
    pub fn fences_by_token(self) -> bool {
        self != Recipe::Semaphore
    }

    /// Parses a comma-separated list of names, `mixed` meaning all of them; sorted, each once.
    ///
    /// ```
    /// use zkfence_testcontainers::chaos::Recipe;
    /// assert_eq!(Recipe::parse_list("multi,lock").unwrap(), vec![Recipe::Lock, Recipe::Multi]);
    /// assert_eq!(Recipe::parse_list("mixed").unwrap(), Recipe::ALL.to_vec());
    /// assert!(Recipe::parse_list("lock,mutex").is_err());
    /// ```
    ///
    /// # Notable errors
    /// An unknown name, saying which names there are.
    pub fn parse_list(s: &str) -> Result<Vec<Recipe>, String> {
        let mut recipes = Vec::new();
        for name in s.split(',').map(str::trim) {
            if name == "mixed" {
                recipes.extend(Recipe::ALL);
            } else {
                recipes.push(name.parse()?);
            }
        }
        recipes.sort();
        recipes.dedup();
        Ok(recipes)
    }
}

/// The node a resource's fenced writes into ZooKeeper go to: under a tree of its own, away
/// from the recipes' directories, whose children the recipes read (the campaign makes it
/// before the contenders start).
pub(crate) fn data_node(resource: &str) -> String {
    format!("/zkfence-chaos-data{resource}")
}

/// How many items the partitions divide (fewer than the usual five contenders, so that some
/// members own none and items move as members come and go).
pub(crate) const PARTITION_ITEMS: usize = 4;

/// The plain lock's path (and the resource of every grant in histories written before the
/// campaign drove other recipes).
pub(crate) const LOCK_PATH: &str = "/zkfence-chaos/lock";

/// The multi-lock's locks, under [`Recipe::Multi`]'s path; each grant takes two of them.
pub(crate) const MULTI_LOCKS: [&str; 3] = ["a", "b", "c"];

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Recipe {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Recipe::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Recipe::ALL.iter().map(|r| r.name()).collect();
                format!(
                    "unknown recipe {s:?}; expected one of: {}, or mixed (all of them)",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_resources_are_apart() {
        let mut resources = Vec::new();
        for r in Recipe::ALL {
            assert_eq!(r.name().parse::<Recipe>(), Ok(r));
            resources.extend(r.resources());
        }
        let n = resources.len();
        resources.sort();
        resources.dedup();
        assert_eq!(resources.len(), n, "two recipes share a resource");
        assert!(Recipe::parse_list("lock,,x")
            .unwrap_err()
            .contains("or mixed"));
    }
}
