//! Operator metrics through the `metrics` facade: the library emits, the application installs
//! a recorder (an exporter) of its choice. The names and labels are documented in one table,
//! in the guide's production page (`docs/guide/production.md`, *Metrics and alerts*).
//!
//! Behind the default-off `metrics` feature. Without it every function here has an empty
//! body and every type is zero-sized, so library users who do not want metrics pay nothing:
//! not a dependency, not a branch.
//!
//! With it, the hot path does not allocate: a metric's key is built from static label tables
//! (`kind`, `reason`), and handed to the recorder by reference. Only when the user opts in to
//! path labels ([`SessionOptions::metrics_path_labels`](crate::SessionOptions::metrics_path_labels))
//! — and always for elections, whose paths are few — is a key built with an owned label.

use tokio::time::Instant;

#[cfg(feature = "metrics")]
use std::sync::{Arc, Mutex};

use crate::error::LossReason;
use crate::node::Kind;

/// Which recipe a metric is about: the `kind` label. Bounded by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recipe {
    Lock,
    Read,
    Write,
    Semaphore,
    Election,
    Multi,
    /// An item of a partition set.
    Partition,
    /// A member's node in a partition set's party.
    PartitionMember,
}

impl Recipe {
    /// The recipe a queue of `kind` is, unless the recipe says otherwise (an election and a
    /// multi-lock enqueue as plain locks).
    pub(crate) fn of(kind: Kind) -> Recipe {
        match kind {
            Kind::Lock => Recipe::Lock,
            Kind::Read => Recipe::Read,
            Kind::Write => Recipe::Write,
            Kind::Lease { .. } => Recipe::Semaphore,
        }
    }

    /// What this recipe's nodes make a directory, for [`Error::KindConflict`](crate::Error::KindConflict).
    pub(crate) fn lock_kind(self) -> crate::LockKind {
        match self {
            // A partition's items are plain locks; its party's nodes are a semaphore's kind
            // (every contender admitted), checked by nobody.
            Recipe::Lock | Recipe::Multi | Recipe::Partition => crate::LockKind::Lock,
            Recipe::PartitionMember => crate::LockKind::Semaphore,
            Recipe::Read | Recipe::Write => crate::LockKind::ReadWrite,
            Recipe::Semaphore => crate::LockKind::Semaphore,
            Recipe::Election => crate::LockKind::Election,
        }
    }
}

/// What a metric is labelled with: the recipe, and the lock path where that is wanted.
/// Zero-sized without the feature.
#[derive(Debug, Clone)]
pub(crate) struct Tag {
    #[cfg(feature = "metrics")]
    recipe: Recipe,
    /// Set when path labels are on (the session's option), and always for elections.
    #[cfg(feature = "metrics")]
    path: Option<Arc<str>>,
}

impl Tag {
    /// The tag of `recipe` on `path`; `path_labels` is the session's opt-in.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn new(recipe: Recipe, path: &str, path_labels: bool) -> Tag {
        #[cfg(feature = "metrics")]
        {
            // Elections are always labelled by path: an application has a handful, and a
            // leader gauge that does not say which election it is about says nothing.
            let labelled = path_labels || recipe == Recipe::Election;
            Tag {
                recipe,
                path: labelled.then(|| Arc::from(path)),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Tag {}
    }
}

/// An acquire (or campaign) began.
#[inline]
#[allow(unused_variables)]
pub(crate) fn acquire_started(tag: &Tag) {
    #[cfg(feature = "metrics")]
    imp::counter(imp::ACQUIRES, tag, None).increment(1);
}

/// An acquire that started at `started` was granted now.
#[inline]
#[allow(unused_variables)]
pub(crate) fn granted(tag: &Tag, started: Instant) {
    #[cfg(feature = "metrics")]
    {
        imp::counter(imp::GRANTS, tag, None).increment(1);
        imp::histogram(imp::WAIT_SECONDS, tag).record(started.elapsed().as_secs_f64());
    }
}

/// An acquire gave up: its deadline passed, or a try found the lock taken.
#[inline]
#[allow(unused_variables)]
pub(crate) fn timed_out(tag: &Tag) {
    #[cfg(feature = "metrics")]
    imp::counter(imp::TIMEOUTS, tag, None).increment(1);
}

/// How an acquire that may wait ended: granted, or given up at its deadline (`Timeout`);
/// other errors count as neither.
#[inline]
#[allow(unused_variables)]
pub(crate) fn waited<T>(tag: &Tag, started: Instant, result: &crate::error::Result<T>) {
    match result {
        // The clock is read only when there is a histogram to feed.
        Ok(_) => granted(tag, started),
        Err(crate::error::Error::Timeout { .. }) => timed_out(tag),
        Err(_) => {}
    }
}

/// How a try ended: granted (`Some`), or found the lock taken (`None`); errors count as
/// neither.
#[inline]
#[allow(unused_variables)]
pub(crate) fn tried<T>(tag: &Tag, started: Instant, result: &crate::error::Result<Option<T>>) {
    match result {
        Ok(Some(_)) => granted(tag, started),
        Ok(None) => timed_out(tag),
        Err(_) => {}
    }
}

/// When a waiter was told that someone ahead of it left (zero-sized without the feature).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Woke {
    #[cfg(feature = "metrics")]
    at: tokio::time::Instant,
}

impl Woke {
    #[inline]
    pub(crate) fn now() -> Woke {
        Woke {
            #[cfg(feature = "metrics")]
            at: tokio::time::Instant::now(),
        }
    }
}

/// A waiter was granted: if it had been woken by a predecessor's leaving, the time from that
/// notification to the grant.
#[inline]
#[allow(unused_variables)]
pub(crate) fn release_to_grant(tag: &Tag, woke: Option<Woke>) {
    #[cfg(feature = "metrics")]
    if let Some(woke) = woke {
        imp::histogram(imp::RELEASE_TO_GRANT_SECONDS, tag).record(woke.at.elapsed().as_secs_f64());
    }
}

/// The session's ZooKeeper session expired.
#[inline]
pub(crate) fn session_expired() {
    #[cfg(feature = "metrics")]
    imp::plain_counter(imp::SESSION_EXPIRIES).increment(1);
}

/// A `Session` opened a new ZooKeeper session in place of one that expired.
#[inline]
pub(crate) fn session_reopened() {
    #[cfg(feature = "metrics")]
    imp::plain_counter(imp::SESSION_REOPENS).increment(1);
}

/// The session reconnected to a server after a disconnection.
#[inline]
pub(crate) fn reconnected() {
    #[cfg(feature = "metrics")]
    imp::plain_counter(imp::RECONNECTS).increment(1);
}

/// The servers granted a session of this process a shorter timeout at a reconnect, which the
/// lease clock now counts with.
#[inline]
#[allow(unused_variables)]
pub(crate) fn session_timeout_changed(timeout: std::time::Duration) {
    #[cfg(feature = "metrics")]
    imp::plain_counter(imp::SESSION_TIMEOUT_CHANGES).increment(1);
}

/// A candidate of this process campaigns in the election `tag` is about: makes its leader
/// gauge exist (at 0 until it leads), so a scrape shows every election this process is in.
#[inline]
#[allow(unused_variables)]
pub(crate) fn candidate(tag: &Tag) {
    #[cfg(feature = "metrics")]
    imp::leader_gauge(tag).increment(0.0);
}

/// A contender of this process waits behind another while this lives: the waiters gauge.
#[must_use]
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    tag: Tag,
}

impl Waiting {
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn start(tag: &Tag) -> Waiting {
        #[cfg(feature = "metrics")]
        {
            imp::gauge(imp::WAITERS, tag).increment(1.0);
            Waiting { tag: tag.clone() }
        }
        #[cfg(not(feature = "metrics"))]
        Waiting {}
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiting {
    fn drop(&mut self) {
        imp::gauge(imp::WAITERS, &self.tag).decrement(1.0);
    }
}

/// The metrics side of a held lease, kept with the lease's registration: started at the
/// grant, ended once, by the first loss or release. Zero-sized without the feature.
#[derive(Default)]
pub(crate) struct HeldSlot {
    #[cfg(feature = "metrics")]
    held: Mutex<Option<(Tag, tokio::time::Instant)>>,
}

impl HeldSlot {
    /// The lease is held from now: the held gauge (and an election's leader gauge) go up.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn start(&self, tag: Tag) {
        #[cfg(feature = "metrics")]
        {
            imp::gauge(imp::HELD, &tag).increment(1.0);
            if tag.recipe == Recipe::Election {
                imp::leader_gauge(&tag).increment(1.0);
            }
            *self.held.lock().unwrap() = Some((tag, tokio::time::Instant::now()));
        }
    }

    /// The lease ended with `reason`: counts a release or a loss and the time held. Does
    /// nothing if it was never started or already ended.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn end(&self, reason: LossReason) {
        #[cfg(feature = "metrics")]
        {
            let Some((tag, since)) = self.held.lock().unwrap().take() else {
                return;
            };
            imp::gauge(imp::HELD, &tag).decrement(1.0);
            if tag.recipe == Recipe::Election {
                imp::leader_gauge(&tag).decrement(1.0);
            }
            imp::histogram(imp::HELD_SECONDS, &tag).record(since.elapsed().as_secs_f64());
            match reason {
                LossReason::Released => imp::counter(imp::RELEASES, &tag, None).increment(1),
                reason => imp::counter(imp::LOSSES, &tag, Some(reason)).increment(1),
            }
        }
    }
}

/// Registers the help text and unit of every zkfence metric with the installed recorder.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    imp::describe();
}

#[cfg(feature = "metrics")]
mod imp {
    use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Unit};

    use super::{Recipe, Tag};
    use crate::error::LossReason;

    pub(super) const ACQUIRES: &str = "zkfence_acquires_total";
    pub(super) const GRANTS: &str = "zkfence_grants_total";
    pub(super) const RELEASES: &str = "zkfence_releases_total";
    pub(super) const LOSSES: &str = "zkfence_losses_total";
    pub(super) const TIMEOUTS: &str = "zkfence_timeouts_total";
    pub(super) const SESSION_EXPIRIES: &str = "zkfence_session_expiries_total";
    pub(super) const RECONNECTS: &str = "zkfence_reconnects_total";
    pub(super) const SESSION_REOPENS: &str = "zkfence_session_reopens_total";
    pub(super) const SESSION_TIMEOUT_CHANGES: &str = "zkfence_session_timeout_changes_total";
    pub(super) const WAIT_SECONDS: &str = "zkfence_wait_seconds";
    pub(super) const HELD_SECONDS: &str = "zkfence_held_seconds";
    pub(super) const RELEASE_TO_GRANT_SECONDS: &str = "zkfence_release_to_grant_seconds";
    pub(super) const HELD: &str = "zkfence_leases_held";
    pub(super) const WAITERS: &str = "zkfence_waiters";
    pub(super) const LEADER: &str = "zkfence_leader";

    static METADATA: Metadata<'static> =
        Metadata::new("zkfence", Level::INFO, Some(module_path!()));

    /// Index of a recipe in the label tables.
    fn kind_index(recipe: Recipe) -> usize {
        match recipe {
            Recipe::Lock => 0,
            Recipe::Read => 1,
            Recipe::Write => 2,
            Recipe::Semaphore => 3,
            Recipe::Election => 4,
            Recipe::Multi => 5,
            Recipe::Partition => 6,
            Recipe::PartitionMember => 7,
        }
    }

    /// The `reason` label of a loss, and its index in the label table.
    fn reason(reason: LossReason) -> (usize, &'static str) {
        match reason {
            LossReason::SessionExpired => (0, "session_expired"),
            LossReason::ClockLapsed => (1, "clock_lapsed"),
            LossReason::NodeDeleted => (2, "node_deleted"),
            LossReason::SessionClosed => (3, "session_closed"),
            // `Released` never gets here (it is counted as a release); the enum is
            // non-exhaustive, so a reason added later counts as "other" until named here.
            _ => (4, "other"),
        }
    }

    /// The kind labels, from one list in `kind_index`'s order: each kind's name
    /// (`KINDS`), its `kind` label (`KIND_LABELS`) and its `kind` label with each loss
    /// `reason` in `reason`'s order (`REASON_LABELS`).
    macro_rules! label_tables {
        ($($kind:literal),*) => {
            const KINDS: [&str; 8] = [$($kind),*];
            static KIND_LABELS: [[Label; 1]; 8] = [$([Label::from_static_parts("kind", $kind)]),*];
            static REASON_LABELS: [[[Label; 2]; 5]; 8] = [$([
                [Label::from_static_parts("kind", $kind), Label::from_static_parts("reason", "session_expired")],
                [Label::from_static_parts("kind", $kind), Label::from_static_parts("reason", "clock_lapsed")],
                [Label::from_static_parts("kind", $kind), Label::from_static_parts("reason", "node_deleted")],
                [Label::from_static_parts("kind", $kind), Label::from_static_parts("reason", "session_closed")],
                [Label::from_static_parts("kind", $kind), Label::from_static_parts("reason", "other")],
            ]),*];
        };
    }

    label_tables!(
        "lock",
        "read",
        "write",
        "semaphore",
        "election",
        "multi",
        "partition",
        "partition_member"
    );

    /// The key of `name` for `tag` (and a loss `reason`): static labels, no allocation,
    /// unless the tag carries a path.
    fn key(name: &'static str, tag: &Tag, loss: Option<LossReason>) -> Key {
        let k = kind_index(tag.recipe);
        match (&tag.path, loss) {
            (None, None) => Key::from_static_parts(name, &KIND_LABELS[k]),
            (None, Some(loss)) => Key::from_static_parts(name, &REASON_LABELS[k][reason(loss).0]),
            (Some(path), loss) => {
                let mut labels = Vec::with_capacity(3);
                labels.push(Label::from_static_parts("kind", KINDS[k]));
                if let Some(loss) = loss {
                    labels.push(Label::from_static_parts("reason", reason(loss).1));
                }
                labels.push(Label::new("path", path.clone()));
                Key::from_parts(name, labels)
            }
        }
    }

    pub(super) fn counter(name: &'static str, tag: &Tag, loss: Option<LossReason>) -> Counter {
        let key = key(name, tag, loss);
        metrics::with_recorder(|r| r.register_counter(&key, &METADATA))
    }

    pub(super) fn plain_counter(name: &'static str) -> Counter {
        let key = Key::from_static_name(name);
        metrics::with_recorder(|r| r.register_counter(&key, &METADATA))
    }

    pub(super) fn gauge(name: &'static str, tag: &Tag) -> Gauge {
        let key = key(name, tag, None);
        metrics::with_recorder(|r| r.register_gauge(&key, &METADATA))
    }

    pub(super) fn histogram(name: &'static str, tag: &Tag) -> Histogram {
        let key = key(name, tag, None);
        metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
    }

    /// `zkfence_leader{path}`: labelled by the election's path only.
    pub(super) fn leader_gauge(tag: &Tag) -> Gauge {
        let path = tag.path.clone().unwrap_or_else(|| "".into());
        let key = Key::from_parts(LEADER, vec![Label::new("path", path)]);
        metrics::with_recorder(|r| r.register_gauge(&key, &METADATA))
    }

    pub(super) fn describe() {
        metrics::with_recorder(|r| {
            let counters = [
                (ACQUIRES, "Acquires (and campaigns) started"),
                (GRANTS, "Acquires granted"),
                (RELEASES, "Leases released by their holder"),
                (LOSSES, "Leases lost, by reason"),
                (
                    TIMEOUTS,
                    "Acquires that gave up: the deadline passed, or a try found the lock taken",
                ),
                (
                    SESSION_EXPIRIES,
                    "ZooKeeper sessions of this process that expired",
                ),
                (
                    RECONNECTS,
                    "Reconnections to a server after a disconnection",
                ),
                (
                    SESSION_REOPENS,
                    "New ZooKeeper sessions opened in place of expired ones",
                ),
                (
                    SESSION_TIMEOUT_CHANGES,
                    "Reconnections at which the servers granted a shorter session timeout, which \
                     the lease clock counts with from then on",
                ),
            ];
            for (name, help) in counters {
                r.describe_counter(name.into(), Some(Unit::Count), help.into());
            }
            let histograms = [
                (
                    WAIT_SECONDS,
                    "Time from the start of an acquire to its grant",
                ),
                (
                    HELD_SECONDS,
                    "Time from a grant to the lease's release or loss",
                ),
                (
                    RELEASE_TO_GRANT_SECONDS,
                    "Time from the notification that the predecessor left to the grant",
                ),
            ];
            for (name, help) in histograms {
                r.describe_histogram(name.into(), Some(Unit::Seconds), help.into());
            }
            let gauges = [
                (HELD, "Leases this process holds now"),
                (
                    WAITERS,
                    "Contenders of this process waiting behind another now",
                ),
                (
                    LEADER,
                    "1 while a candidate of this process leads the election, else 0",
                ),
            ];
            for (name, help) in gauges {
                r.describe_gauge(name.into(), None, help.into());
            }
        });
    }
}
