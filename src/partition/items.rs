//! What is divided: [`Items`] (a count or a set of names) and one [`Item`].

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The most items one partition set may have: every member computes the assignment over
/// every (member, item) pair at each membership change.
pub const MAX_PARTITION_ITEMS: usize = 100_000;

/// The set a partition path divides: a count (`0..n`, named `"0"`, `"1"`, …) or a set of
/// names. Every member of one path must be given the same items.
///
/// Each item is a lock directory `{path}/locks/{name}`, so a name must be a valid node name:
/// not empty, no `/`, not `.` or `..`, no control characters. A set of names keeps the order
/// given, without duplicates.
///
/// ```
/// use zkfence::Items;
/// let shards = Items::count(64);
/// assert_eq!(shards.len(), 64);
/// let queues = Items::names(["emails", "invoices", "refunds"]);
/// assert_eq!(queues.iter().nth(1).unwrap().name(), "invoices");
/// // Both convert: session.partitions(path, 64) or session.partitions(path, ["a", "b"]).
/// let _: Items = 64.into();
/// let _: Items = vec!["a".to_string(), "b".to_string()].into();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Items {
    kind: ItemsKind,
    items: Arc<[Item]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemsKind {
    /// `0..n`: Kazoo sorts these as numbers.
    Count,
    /// Names: Kazoo sorts these as strings.
    Names,
}

/// One item of a partition set: its position among the [`Items`] and its name (for a count,
/// the number written in decimal). Ordered by position.
///
/// ```
/// let items = zkfence::Items::count(3);
/// let last = items.iter().last().unwrap();
/// assert_eq!((last.index(), last.name()), (2, "2"));
/// assert_eq!(last.to_string(), "2");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Item {
    index: usize,
    name: Arc<str>,
}

impl Item {
    /// Its position among the items given: for a count, the number itself.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its name: the last segment of its lock directory.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Items {
    /// The items `0..n`, named `"0"` to `"{n-1}"` (what Kazoo's `SetPartitioner` names a
    /// `set` of integers).
    pub fn count(n: usize) -> Items {
        Items {
            kind: ItemsKind::Count,
            items: (0..n)
                .map(|index| Item {
                    index,
                    name: Arc::from(index.to_string()),
                })
                .collect(),
        }
    }

    /// The named items, in the order given; a repeated name counts once.
    pub fn names<I, S>(names: I) -> Items
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut seen = std::collections::HashSet::new();
        let items: Vec<Item> = names
            .into_iter()
            .filter(|name| seen.insert(name.as_ref().to_string()))
            .enumerate()
            .map(|(index, name)| Item {
                index,
                name: Arc::from(name.as_ref()),
            })
            .collect();
        Items {
            kind: ItemsKind::Names,
            items: items.into(),
        }
    }

    /// How many items there are.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The items in order.
    pub fn iter(&self) -> impl Iterator<Item = &Item> {
        self.items.iter()
    }

    /// The item at `index`.
    pub fn get(&self, index: usize) -> Option<&Item> {
        self.items.get(index)
    }

    pub(crate) fn kind(&self) -> ItemsKind {
        self.kind
    }

    /// Checks every name, and the count, for the partition path `path`.
    pub(crate) fn validate(&self, path: &str) -> Result<()> {
        let invalid = |reason: String| Error::InvalidPartitions {
            path: path.to_string(),
            reason,
        };
        if self.items.len() > MAX_PARTITION_ITEMS {
            return Err(invalid(format!(
                "{} items; at most {MAX_PARTITION_ITEMS} (every member assigns every item at each change)",
                self.items.len()
            )));
        }
        if self.kind == ItemsKind::Count {
            return Ok(()); // decimal numbers are valid names
        }
        for item in self.items.iter() {
            if let Some(reason) = bad_name(&item.name) {
                return Err(invalid(format!(
                    "item {:?} {reason}: an item names a lock directory under {path}/locks",
                    item.name
                )));
            }
        }
        Ok(())
    }
}

/// Why `name` cannot name one node (a segment of a path), if it cannot.
pub(crate) fn bad_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('/') {
        Some("contains '/'")
    } else if name == "." || name == ".." {
        Some("is '.' or '..'")
    } else if name.len() > 255 {
        Some("is longer than 255 bytes")
    } else if name.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    }
}

impl From<usize> for Items {
    fn from(n: usize) -> Items {
        Items::count(n)
    }
}

impl From<Vec<String>> for Items {
    fn from(names: Vec<String>) -> Items {
        Items::names(names)
    }
}

impl From<&[&str]> for Items {
    fn from(names: &[&str]) -> Items {
        Items::names(names)
    }
}

impl<const N: usize> From<[&str; N]> for Items {
    fn from(names: [&str; N]) -> Items {
        Items::names(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_names_its_items_by_number() {
        let items = Items::count(12);
        assert_eq!(items.len(), 12);
        assert_eq!(items.get(10).unwrap().name(), "10");
        assert!(items.validate("/p").is_ok());
        assert!(Items::count(0).is_empty());
    }

    #[test]
    fn names_keep_their_order_without_repeats() {
        let items = Items::names(["b", "a", "b", "c"]);
        let names: Vec<&str> = items.iter().map(Item::name).collect();
        assert_eq!(names, ["b", "a", "c"]);
        assert_eq!(items.get(2).unwrap().index(), 2);
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for (name, reason) in [
            ("", "is empty"),
            ("a/b", "contains '/'"),
            ("..", "'.' or '..'"),
            ("tab\there", "control character"),
        ] {
            let err = Items::names([name]).validate("/p").unwrap_err();
            assert!(
                err.to_string().contains(reason),
                "{name:?}: {err} should say {reason:?}"
            );
        }
        let err = Items::count(MAX_PARTITION_ITEMS + 1)
            .validate("/p")
            .unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
    }
}
