//! A deep queue's listing as the session keeps it between listings, for the waiters that
//! check the few nodes ahead of them instead of listing again ([`Listings::ahead_of`]).
//!
//! Kept compactly: the listing a waiter reads holds each name as a string of its own (about
//! 96 bytes a node with its entry), and a session keeps its latest deep listing for as long
//! as the queue is deep, so a process whose sessions wait in a 10,000-deep queue kept about
//! 1 KiB a waiter in them. Here a node is its sequence and the parts ours, Curator's and
//! Kazoo's names are made of (24 bytes); a name of any other shape is kept whole.
//!
//! [`Listings::ahead_of`]: super::listing::Listings::ahead_of

use crate::node::{NodeFormat, TAGS};

/// The nodes of a listing in queue order, each as [`Kept`].
pub(crate) struct KeptQueue {
    nodes: Vec<Kept>,
    /// The names of another shape, whole.
    others: Vec<Box<str>>,
}

/// One node: its sequence and how to write its name again.
#[derive(Clone, Copy)]
struct Kept {
    sequence: i32,
    name: Shape,
}

#[derive(Clone, Copy)]
enum Shape {
    /// `{marker}{tag}{sequence}`: the marker of `format` for `uuid`, then `TAGS[tag]`.
    Made {
        format: NodeFormat,
        uuid: [u8; 16],
        tag: u8,
    },
    /// `others[index]`.
    Other(u32),
}

impl KeptQueue {
    /// `queue` (names with their sequences, in queue order), kept.
    pub(crate) fn of(queue: &[(i32, String)]) -> KeptQueue {
        let mut others = Vec::new();
        // Each name is written back here once, to check it reads back exactly.
        let mut scratch = String::new();
        let nodes = queue
            .iter()
            .map(|(sequence, name)| {
                if let Some(shape) = made(name) {
                    let made = Kept {
                        sequence: *sequence,
                        name: shape,
                    };
                    scratch.clear();
                    made.write(&others, &mut scratch);
                    if scratch == *name {
                        return made;
                    }
                }
                // Only what reads back exactly (lower-case hex, the separator, a `%010d`
                // sequence) is kept in parts; anything else whole.
                others.push(Box::from(name.as_str()));
                Kept {
                    sequence: *sequence,
                    name: Shape::Other(others.len() as u32 - 1),
                }
            })
            .collect();
        KeptQueue { nodes, others }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub(crate) fn sequence(&self, index: usize) -> i32 {
        self.nodes[index].sequence
    }

    /// The first index whose node is not `before` (the nodes in queue order).
    pub(crate) fn partition_point(&self, before: impl Fn(i32) -> bool) -> usize {
        self.nodes.partition_point(|node| before(node.sequence))
    }

    /// The name of the node at `index`, as it was listed.
    pub(crate) fn name(&self, index: usize) -> String {
        let mut name = String::new();
        self.nodes[index].write(&self.others, &mut name);
        name
    }
}

impl Kept {
    fn write(&self, others: &[Box<str>], out: &mut String) {
        match self.name {
            Shape::Made { format, uuid, tag } => {
                format.push_tagged(out, &uuid::Uuid::from_bytes(uuid), TAGS[tag as usize]);
                crate::node::push_sequence(out, self.sequence);
            }
            Shape::Other(index) => out.push_str(&others[index as usize]),
        }
    }
}

/// `name`'s marker and tag, if it starts with one of ours', Curator's or Kazoo's.
fn made(name: &str) -> Option<Shape> {
    let (format, uuid, rest) = if let Some(rest) = name.strip_prefix("_c_") {
        let uuid = uuid::Uuid::try_parse(rest.get(..36)?).ok()?;
        (NodeFormat::Curator, uuid, rest.get(37..)?)
    } else {
        let uuid = uuid::Uuid::try_parse(name.get(..32)?).ok()?;
        (NodeFormat::Kazoo, uuid, name.get(32..)?)
    };
    let tag = TAGS.iter().position(|tag| rest.starts_with(tag))?;
    Some(Shape::Made {
        format,
        uuid: *uuid.as_bytes(),
        tag: tag as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_listed() {
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let simple = "0f8fad5bd9cb469fa16570867728950e";
        let names = [
            format!("_c_{uuid}-lock-0000000042"),
            format!("_c_{uuid}-__READ__0000000043"),
            format!("_c_{uuid}-__WRIT__0000000044"),
            format!("_c_{uuid}-lease-0000000045"),
            format!("{simple}__lock__0000000046"),
            format!("{simple}__rlock__0000000047"),
            format!("{simple}__lease__0000000048"),
            // Past the counter's wrap.
            format!("_c_{uuid}-lock--2147483648"),
            // Other shapes, kept whole.
            format!("_c_{}-lock-0000000049", uuid.to_uppercase()),
            "foreign-0000000050".to_string(),
            "x".repeat(40) + "0000000051",
            format!("_c_{uuid}-lock-52"),
        ];
        let queue: Vec<(i32, String)> = names
            .iter()
            .map(|n| (crate::node::sequence_of(n).unwrap_or(0), n.clone()))
            .collect();
        let kept = KeptQueue::of(&queue);
        for (i, (sequence, name)) in queue.iter().enumerate() {
            assert_eq!(kept.sequence(i), *sequence);
            assert_eq!(&kept.name(i), name);
        }
        assert_eq!(
            kept.others.len(),
            4,
            "the four of other shapes are kept whole"
        );
    }

    #[test]
    fn a_made_name_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<Kept>(), 24);
    }
}
