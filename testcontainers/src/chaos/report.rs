//! What a campaign did and found, and checking a history again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{self, check, Violation};
use super::{draw_window, read_jsonl, Event, FaultKind, Recipe, Record, Store};

/// What a campaign did and found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Report {
    /// The settings' seed.
    pub seed: u64,
    /// How long faults were injected.
    pub duration: Duration,
    /// The whole history, in time order.
    pub history: Vec<Record>,
    /// What [`check`] found: empty for a clean run.
    pub violations: Vec<Violation>,
    /// Where the history was written.
    pub history_path: PathBuf,
    /// Where the timeline was drawn.
    pub timeline_path: PathBuf,
}

impl Report {
    /// Grants in the history.
    pub fn grants(&self) -> usize {
        self.count(|e| matches!(e, Event::Granted { .. }))
    }

    /// Grants by recipe (a multi-lock's grant counts once per path).
    pub fn grants_by_recipe(&self) -> BTreeMap<Recipe, usize> {
        let mut by = BTreeMap::new();
        for r in &self.history {
            if let Event::Granted { recipe, .. } = r.event {
                *by.entry(recipe).or_insert(0) += 1;
            }
        }
        by
    }

    /// The recipes the campaign drove, as its first record says.
    pub fn recipes(&self) -> Vec<Recipe> {
        self.history
            .iter()
            .find_map(|r| match &r.event {
                Event::Campaign { recipes, .. } => Some(recipes.clone()),
                _ => None,
            })
            .unwrap_or_else(|| vec![Recipe::Lock])
    }

    /// Reads the register served (read locks' readers).
    pub fn served_reads(&self) -> usize {
        self.count(|e| matches!(e, Event::ReadAccepted { .. }))
    }

    /// Late reads the register refused.
    pub fn refused_reads(&self) -> usize {
        self.count(|e| matches!(e, Event::ReadRefused { .. }))
    }

    /// Fenced writes into ZooKeeper that it committed, and those refused (the lease was
    /// lost, or the writer's node gone).
    pub fn zk_writes(&self) -> (usize, usize) {
        let committed = self.count(|e| {
            matches!(
                e,
                Event::ZkWrite {
                    committed: true,
                    ..
                }
            )
        });
        let refused = self.count(|e| matches!(e, Event::ZkWrite { refused: true, .. }));
        (committed, refused)
    }

    /// How long after an operator's delete of their node (`delete-holder`) the holders heard
    /// `Lost`, from the delete's answer (zero if they heard before it); holds that ended
    /// otherwise (released as planned, a process killed) are not counted.
    pub fn told_after_delete(&self) -> Vec<Duration> {
        let mut delays: Vec<Duration> = check::holds(&self.history)
            .iter()
            .filter(|h| h.ended_by.starts_with("lost"))
            .filter_map(|h| h.deleted_us.map(|d| h.end_us.saturating_sub(d)))
            .map(Duration::from_micros)
            .collect();
        delays.sort();
        delays
    }

    /// Writes the register accepted.
    pub fn accepted_writes(&self) -> usize {
        self.count(|e| matches!(e, Event::WriteAccepted { .. }))
    }

    /// Late writes the register's fence refused.
    pub fn refused_writes(&self) -> usize {
        self.count(|e| matches!(e, Event::WriteRefused { .. }))
    }

    /// The stores the campaign also wrote to (`--sink`; `--postgres` in older histories).
    pub fn stores(&self) -> Vec<Store> {
        check::stores_of(&self.history)
    }

    /// The writes `store` committed, by its own record (or, if that could not be read, as
    /// its writers heard), and the late writes it refused.
    pub fn store_writes(&self, store: Store) -> (usize, usize) {
        check::store_counts(&self.history, store)
    }

    /// Writes the register and `store` judged differently (one accepted, the other refused):
    /// no violation, see [`check`].
    pub fn judged_differently(&self, store: Store) -> usize {
        check::judged_differently(&self.history, store)
    }

    /// Faults started, by kind.
    pub fn faults(&self) -> BTreeMap<FaultKind, usize> {
        let mut by_kind = BTreeMap::new();
        for r in &self.history {
            if let Event::FaultStarted { kind, .. } = r.event {
                *by_kind.entry(kind).or_insert(0) += 1;
            }
        }
        by_kind
    }

    /// Planned faults that found no victim.
    pub fn skipped_faults(&self) -> usize {
        self.count(|e| matches!(e, Event::FaultSkipped { .. }))
    }

    /// Times a killed server did not start again (ZooKeeper refused its data).
    pub fn restart_failures(&self) -> usize {
        self.count(|e| matches!(e, Event::RestartFailed { .. }))
    }

    /// Servers whose data was wiped so that they resync (after a failed restart).
    pub fn wiped_servers(&self) -> usize {
        self.count(|e| matches!(e, Event::ServerWiped { .. }))
    }

    fn count(&self, f: impl Fn(&Event) -> bool) -> usize {
        self.history.iter().filter(|r| f(&r.event)).count()
    }

    /// The one-line summary, e.g. `zkfence chaos: seed 7, 60s: 41 grants, 97 writes
    /// accepted, 3 late writes refused, 14 faults (kill-leader 2, ...), 0 skipped, 0
    /// violations`; with PostgreSQL, `..., 3 late writes refused, PostgreSQL 96 writes
    /// accepted, 4 late writes refused (1 judged otherwise by the register), 14 faults ...`;
    /// after a server that would not restart, `..., 0 skipped, 1 failed server restarts (1
    /// servers wiped to resync), 0 violations`.
    pub fn summary(&self) -> String {
        let faults = self.faults();
        let total: usize = faults.values().sum();
        let kinds: Vec<String> = faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let stores: String = (self.stores().into_iter())
            .map(|store| {
                let (committed, refused) = self.store_writes(store);
                format!(
                    ", {} {committed} writes accepted, {refused} late writes refused ({} \
                     judged otherwise by the register)",
                    store.title(),
                    self.judged_differently(store)
                )
            })
            .collect();
        // Only when it happened: most runs have none, and their line stays as it was.
        let restarts = match self.restart_failures() {
            0 => String::new(),
            n => format!(
                ", {n} failed server restarts ({} servers wiped to resync)",
                self.wiped_servers()
            ),
        };
        // Only what the campaign did: a lock-only campaign's line stays as it was.
        let by_recipe = if self.recipes() == [Recipe::Lock] {
            String::new()
        } else {
            let by: Vec<String> = (self.grants_by_recipe().iter())
                .map(|(r, n)| format!("{r} {n}"))
                .collect();
            format!(" ({})", by.join(", "))
        };
        let reads = match (self.served_reads(), self.refused_reads()) {
            (0, 0) => String::new(),
            (served, refused) => format!(", {served} reads served, {refused} late reads refused"),
        };
        let told = self.told_after_delete();
        let told = match told.last() {
            None => String::new(),
            Some(max) => format!(
                ", {} deleted holders told within {} ms",
                told.len(),
                max.as_millis()
            ),
        };
        let zk = match self.zk_writes() {
            (0, 0) => String::new(),
            (committed, refused) => format!(
                ", ZooKeeper {committed} fenced writes committed, {refused} late writes refused"
            ),
        };
        format!(
            "zkfence chaos: seed {}, {}s: {} grants{by_recipe}, {} writes accepted, {} late \
             writes refused{reads}{zk}{stores}{told}, {} faults ({}), {} skipped{restarts}, {} \
             violations",
            self.seed,
            self.duration.as_secs(),
            self.grants(),
            self.accepted_writes(),
            self.refused_writes(),
            total,
            kinds.join(", "),
            self.skipped_faults(),
            self.violations.len()
        )
    }
}

/// Checks a history written by an earlier campaign again, and draws its timeline again at
/// `timeline_path`, of the seconds `window` only if given (see [`draw_window`]). A history
/// is the whole evidence: the rules and the picture can be applied to it later, e.g. after
/// the checker learned a new rule.
///
/// ```no_run
/// # fn f() -> std::io::Result<()> {
/// let history = "zkfence-chaos/history.jsonl".as_ref();
/// let report = zkfence_testcontainers::chaos::recheck(history, "again.svg".as_ref(), None)?;
/// println!("{}", report.summary());
/// # Ok(()) }
/// ```
///
/// # Notable errors
/// An [`io::Error`](std::io::Error) if the history cannot be read or parsed (the message
/// names the line), the window is empty, or the picture cannot be written.
pub fn recheck(
    history_path: &Path,
    timeline_path: &Path,
    window: Option<(Duration, Duration)>,
) -> std::io::Result<Report> {
    let mut history = read_jsonl(history_path)?;
    history.sort_by_key(|r| r.t_us);
    let (seed, duration_ms) = history
        .iter()
        .find_map(|r| match r.event {
            Event::Campaign {
                seed, duration_ms, ..
            } => Some((seed, duration_ms)),
            _ => None,
        })
        .unwrap_or_default();
    let violations = check(&history);
    if let Some(dir) = timeline_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    draw_window(&history, &violations, timeline_path, window)?;
    Ok(Report {
        seed,
        duration: Duration::from_millis(duration_ms),
        history,
        violations,
        history_path: history_path.to_path_buf(),
        timeline_path: timeline_path.to_path_buf(),
    })
}
