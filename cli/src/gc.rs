//! `zkfence gc PATH [--apply]`: remove the empty lock directories under PATH that older
//! versions (persistent directories) or other clients left behind.
//!
//! A node counts as an empty directory if it is persistent, holds no data, and every child
//! is an empty directory too. A queue node (ephemeral) or any node with data anywhere below
//! keeps the whole branch above it. PATH itself is never removed. The library has no tree
//! walk, so this reads and deletes through the raw `zookeeper-client` handle.

use serde::Serialize;
use zkfence::zookeeper_client as zk;

use crate::exit::{self, Failure};
use crate::remote::{close, Global};

/// One node seen by the walk, in pre-order (parents before children).
struct Seen {
    path: String,
    parent: Option<usize>,
    /// The data version read, for the conditional delete.
    version: i32,
    /// Persistent, no data, and (so far) no child that is not an empty directory.
    empty: bool,
}

/// The `gc --json` document (README, "JSON output").
#[derive(Debug, Default, Serialize)]
struct Report {
    path: String,
    exists: bool,
    applied: bool,
    /// Every empty directory found, deepest first.
    empty: Vec<String>,
    removed: Vec<String>,
    kept: Vec<Kept>,
}

#[derive(Debug, Serialize)]
struct Kept {
    path: String,
    reason: &'static str,
}

/// PATH checked before anything is sent: absolute (the root is allowed here).
pub fn check_root(path: &str) -> Result<(), Failure> {
    if path == "/" {
        return Ok(());
    }
    zkfence::validate_path(path.trim_end_matches('/'))
        .map_err(|e| Failure::new(exit::USAGE, e.to_string()))
}

pub async fn run(global: &Global, path: &str, apply: bool, json: bool) -> Result<u8, Failure> {
    let root = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let session = global.connect().await?;
    let client = session.client().clone();
    let mut report = Report {
        path: root.to_string(),
        applied: apply,
        ..Report::default()
    };
    let outcome = walk_and_collect(&client, root, apply, &mut report, !json).await;
    drop(client);
    close(session, std::time::Duration::from_secs(1)).await;
    if json && outcome.is_ok() {
        let text = serde_json::to_string_pretty(&report).expect("a report always serialises");
        crate::stdout::report("report", &format!("{text}\n"))?;
    }
    outcome
}

async fn walk_and_collect(
    client: &zk::Client,
    root: &str,
    apply: bool,
    report: &mut Report,
    text: bool,
) -> Result<u8, Failure> {
    let say = |line: String| {
        if text {
            // The removals go on whoever reads the lines (a closed pipe is quiet); a line
            // that cannot be written otherwise loses nothing but itself.
            let _ = crate::stdout::write(format!("{line}\n").as_bytes());
        }
    };
    let seen = match walk(client, root).await {
        Ok(Some(seen)) => seen,
        Ok(None) => {
            say(format!("{root} does not exist: nothing to remove"));
            return Ok(exit::OK);
        }
        Err(e) => {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("could not read {root}: {e}"),
            ))
        }
    };
    // Children come after their parents: deepest first is the reverse, which is also the
    // order in which they can be deleted.
    let empty: Vec<&Seen> = seen
        .iter()
        .skip(1) // PATH itself stays
        .rev()
        .filter(|s| s.empty)
        .collect();
    report.exists = true;
    report.empty = empty.iter().map(|s| s.path.clone()).collect();
    if !apply {
        for s in &empty {
            say(format!("would remove {}", s.path));
        }
        say(format!(
            "{} empty director{} under {root}; dry run, nothing removed (--apply removes them)",
            empty.len(),
            if empty.len() == 1 { "y" } else { "ies" }
        ));
        return Ok(exit::OK);
    }
    let (mut removed, mut kept) = (0usize, 0usize);
    for s in &empty {
        match client.delete(&s.path, Some(s.version)).await {
            Ok(()) => {
                removed += 1;
                report.removed.push(s.path.clone());
                say(format!("removed {}", s.path));
            }
            Err(zk::Error::NotEmpty) => {
                kept += 1;
                let reason = "it gained a child since it was read";
                report.kept.push(Kept {
                    path: s.path.clone(),
                    reason,
                });
                say(format!("kept {}: {reason}", s.path));
            }
            Err(zk::Error::BadVersion) => {
                kept += 1;
                let reason = "its data changed since it was read";
                report.kept.push(Kept {
                    path: s.path.clone(),
                    reason,
                });
                say(format!("kept {}: {reason}", s.path));
            }
            Err(zk::Error::NoNode) => say(format!("skipped {}: already gone", s.path)),
            Err(e) => {
                return Err(Failure::new(
                    exit::UNAVAILABLE,
                    format!(
                        "could not delete {} ({e}); removed {removed} so far",
                        s.path
                    ),
                ))
            }
        }
    }
    say(format!(
        "removed {removed} empty director{} under {root}, kept {kept}",
        if removed == 1 { "y" } else { "ies" }
    ));
    Ok(exit::OK)
}

/// Reads the tree under `root` (one getChildren per node, which also gives its stat).
/// `None` if `root` does not exist. Nodes that vanish during the walk are left out.
async fn walk(client: &zk::Client, root: &str) -> Result<Option<Vec<Seen>>, zk::Error> {
    let mut seen: Vec<Seen> = Vec::new();
    let mut stack: Vec<(String, Option<usize>)> = vec![(root.to_string(), None)];
    while let Some((path, parent)) = stack.pop() {
        // ZooKeeper's own subtree is never a lock directory.
        if path == "/zookeeper" {
            if let Some(p) = parent {
                seen[p].empty = false;
            }
            continue;
        }
        let (children, stat) = match client.get_children(&path).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) if parent.is_some() => continue,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(e),
        };
        let index = seen.len();
        let empty = stat.ephemeral_owner == 0 && stat.data_length == 0;
        seen.push(Seen {
            path: path.clone(),
            parent,
            version: stat.version,
            empty,
        });
        for child in children {
            let child_path = if path == "/" {
                format!("/{child}")
            } else {
                format!("{path}/{child}")
            };
            stack.push((child_path, Some(index)));
        }
    }
    // A child's index is always larger than its parent's, whatever the stack order.
    for i in (0..seen.len()).rev() {
        if !seen[i].empty {
            if let Some(p) = seen[i].parent {
                seen[p].empty = false;
            }
        }
    }
    Ok(Some(seen))
}
