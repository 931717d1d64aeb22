//! What a contender holds, whichever recipe granted it, through zkfence's public API only:
//! a [`Lease`] (a lock, a read or write lock, a permit), a [`Leadership`], or a
//! [`MultiLease`]. Each is one or more *parts*, one per resource it holds.

use std::time::Duration;

use zkfence::{Error, Leadership, Lease, LeaseState, MultiLease, Session};

use super::super::faults::Rng;
use super::super::recipe::MULTI_LOCKS;
use super::super::Recipe;

/// One resource a grant holds.
pub(super) struct Part<'a> {
    /// The resource (see [`Recipe::resources`]).
    pub(super) path: String,
    /// The lease that holds it (its token, its node, its fenced writes).
    pub(super) lease: &'a Lease,
}

/// A grant of one of the recipes.
pub(super) enum Held {
    /// A lock, a read or write lock, or a semaphore's permit.
    Lease {
        recipe: Recipe,
        lease: Lease,
        read: bool,
    },
    /// A leadership.
    Leader(Leadership),
    /// A multi-lock's paths, in the order asked for (its leases are in that order too).
    Multi(MultiLease, Vec<String>),
}

/// Why an acquire gave no grant.
pub(super) enum NotGranted {
    /// The acquire's timeout passed.
    TimedOut,
    /// The library's error, as printed.
    Failed(String),
}

impl From<Error> for NotGranted {
    fn from(e: Error) -> NotGranted {
        match e {
            Error::Timeout { .. } => NotGranted::TimedOut,
            e => NotGranted::Failed(e.to_string()),
        }
    }
}

/// Acquires `recipe` on `session` within `timeout` (a multi-lock of two of its three paths,
/// a read lock two times in three), as contender `id`.
pub(super) async fn acquire(
    session: &Session,
    recipe: Recipe,
    permits: usize,
    id: &str,
    timeout: Duration,
    rng: &mut Rng,
) -> Result<Held, NotGranted> {
    let path = recipe.path();
    let lease = |lease, read| Held::Lease {
        recipe,
        lease,
        read,
    };
    match recipe {
        Recipe::Lock => Ok(lease(
            session
                .lock(path)
                .with_id(id)
                .acquire_timeout(timeout)
                .await?,
            false,
        )),
        Recipe::Rwlock => {
            let read = rng.below(3) < 2;
            let side = if read {
                session.read_lock(path)
            } else {
                session.write_lock(path)
            };
            Ok(lease(
                side.with_id(id).acquire_timeout(timeout).await?,
                read,
            ))
        }
        Recipe::Semaphore => Ok(lease(
            session
                .semaphore(path, permits)
                .with_id(id)
                .acquire_timeout(timeout)
                .await?,
            false,
        )),
        Recipe::Election => {
            // `campaign` is cancel safe: a campaign dropped by the timeout leaves no node.
            match tokio::time::timeout(timeout, session.election(path).campaign(id)).await {
                Ok(leadership) => Ok(Held::Leader(leadership?)),
                Err(_) => Err(NotGranted::TimedOut),
            }
        }
        // A membership, not one grant: see `partitions.rs`.
        Recipe::Partitions => Err(NotGranted::Failed(
            "partitions are joined, not acquired".into(),
        )),
        Recipe::Multi => {
            // Two of the three, named in a random order: the order must not matter.
            let skip = rng.below(MULTI_LOCKS.len() as u64) as usize;
            let mut paths: Vec<String> = recipe.resources();
            paths.remove(skip);
            if rng.percent(50) {
                paths.reverse();
            }
            let named: Vec<&str> = paths.iter().map(String::as_str).collect();
            let held = session
                .multi_lock(&named)
                .with_id(id)
                .acquire_timeout(timeout)
                .await?;
            Ok(Held::Multi(held, paths))
        }
    }
}

impl Held {
    pub(super) fn recipe(&self) -> Recipe {
        match self {
            Held::Lease { recipe, .. } => *recipe,
            Held::Leader(_) => Recipe::Election,
            Held::Multi(..) => Recipe::Multi,
        }
    }

    /// A read lock's grant.
    pub(super) fn read(&self) -> bool {
        matches!(self, Held::Lease { read: true, .. })
    }

    /// The resources held, each with its lease (a multi-lock: the paths whose lease it
    /// returned, in the order asked for).
    pub(super) fn parts(&self) -> Vec<Part<'_>> {
        match self {
            Held::Lease { recipe, lease, .. } => vec![Part {
                path: recipe.path().to_string(),
                lease,
            }],
            Held::Leader(leadership) => vec![Part {
                path: Recipe::Election.path().to_string(),
                lease: leadership.lease(),
            }],
            Held::Multi(held, paths) => paths
                .iter()
                .filter_map(|p| {
                    held.lease(p).map(|lease| Part {
                        path: p.clone(),
                        lease,
                    })
                })
                .collect(),
        }
    }

    /// A multi-lock's paths as asked for (empty for the other recipes).
    pub(super) fn group(&self) -> Vec<String> {
        match self {
            Held::Multi(_, paths) => paths.clone(),
            _ => Vec::new(),
        }
    }

    /// Resolves when the grant is lost, with the reason as printed (a multi-lock's names the
    /// path it lost).
    pub(super) async fn lost(&self) -> String {
        match self {
            Held::Lease { lease, .. } => lease.lost().await.to_string(),
            Held::Leader(leadership) => leadership.lost().await.to_string(),
            Held::Multi(held, _) => {
                let (path, reason) = held.lost().await;
                format!("{reason} ({path})")
            }
        }
    }

    /// Where the grant stands, with no request sent (a multi-lock: its worst path).
    pub(super) fn state(&self) -> LeaseState {
        match self {
            Held::Lease { lease, .. } => lease.state(),
            Held::Leader(leadership) => leadership.state(),
            Held::Multi(held, _) => held.state(),
        }
    }

    /// Resolves when the grant is lost, as a holder learns it: awaiting
    /// [`lost`](Self::lost) (`polls` false), or looking at [`state`](Self::state) every
    /// 10 ms, as a holder does that checks its lease before each write (`polls` true). Both
    /// are how the library's users learn of a loss, and the library must tell both. Returns
    /// the reason as printed and, for a poller, when (on `now`'s clock) it last saw the
    /// grant held: the loss came after that, at most one poll before it was seen.
    pub(super) async fn loss(&self, polls: bool, now: impl Fn() -> u64) -> (String, Option<u64>) {
        if !polls {
            return (self.lost().await, None);
        }
        let mut seen_held = now();
        loop {
            if let LeaseState::Lost(reason) = self.state() {
                return (reason.to_string(), Some(seen_held));
            }
            seen_held = now();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Releases (resigns) and waits for the ensemble's answer.
    pub(super) async fn release(self) -> Result<(), Error> {
        match self {
            Held::Lease { lease, .. } => lease.release().await,
            Held::Leader(leadership) => leadership.resign().await,
            Held::Multi(held, _) => held.release().await,
        }
    }
}
