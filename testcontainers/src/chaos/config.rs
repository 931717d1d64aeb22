//! The settings of a campaign.

use std::path::PathBuf;
use std::time::Duration;

use super::{FaultKind, Recipe, Store};
use crate::HarnessError;

/// The settings of a campaign. [`ChaosConfig::new`] gives the defaults; set the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChaosConfig {
    /// How long faults are injected (the campaign then heals everything, waits for a grant
    /// and stops). Default 60 s.
    pub duration: Duration,
    /// The seed of the fault schedule and of the contenders' random holds. Default 1.
    pub seed: u64,
    /// The fault kinds to inject. Default: all of them.
    pub faults: Vec<FaultKind>,
    /// Servers: 3 or 5 (default 3).
    pub nodes: usize,
    /// Contender processes (default 5).
    pub clients: usize,
    /// The contenders' session timeout (default 4 s).
    pub session_timeout: Duration,
    /// The servers' tickTime (default 200 ms).
    pub tick_time: Duration,
    /// Where the history (`history.jsonl`), the timeline (`timeline.svg`) and the
    /// contenders' logs go; created if missing. Default `zkfence-chaos`.
    pub out_dir: PathBuf,
    /// The program to run as a contender, and its arguments (the contender's configuration
    /// is appended as one more).
    pub contender: (PathBuf, Vec<String>),
    /// The stores every step also writes to, each through its fence (`zkfence-fences`' sinks),
    /// each in a throwaway server the campaign starts ([`Postgres`](crate::Postgres),
    /// [`MariaDb`](crate::MariaDb), [`Redis`](crate::Redis), [`Etcd`](crate::Etcd), and an
    /// HTTP service in the campaign process). Default: none.
    pub sinks: Vec<Store>,
    /// The recipes the contenders drive (each hold is of one of them, chosen at random).
    /// Default: the lock.
    pub recipes: Vec<Recipe>,
    /// The semaphore's permits (with [`Recipe::Semaphore`]): at least 1, fewer than the
    /// clients, so that they contend. Default 2.
    pub permits: usize,
}

impl ChaosConfig {
    /// The defaults, with contenders started as `program args... CONFIG`.
    pub fn new(program: impl Into<PathBuf>, args: Vec<String>) -> ChaosConfig {
        ChaosConfig {
            duration: Duration::from_secs(60),
            seed: 1,
            faults: FaultKind::ALL.to_vec(),
            nodes: 3,
            clients: 5,
            session_timeout: Duration::from_secs(4),
            tick_time: Duration::from_millis(200),
            out_dir: PathBuf::from("zkfence-chaos"),
            contender: (program.into(), args),
            sinks: Vec::new(),
            recipes: vec![Recipe::Lock],
            permits: 2,
        }
    }

    /// The resources whose writes go through token fences (the register's, the stores'):
    /// every recipe's but the semaphore's.
    pub(crate) fn fenced_resources(&self) -> Vec<String> {
        (self.recipes.iter())
            .filter(|r| r.fences_by_token())
            .flat_map(|r| r.resources())
            .collect()
    }

    /// The longest a hold lasts when nothing goes wrong: half a session timeout.
    pub(crate) fn max_hold(&self) -> Duration {
        self.session_timeout / 2
    }

    /// The bound of the progress rule: after a heal, someone is granted within this much
    /// fault-free time. The slowest recovery it covers: a holder's session has to expire
    /// (`T`, once the leader's expiry tick comes), the waiters' clients have to notice a
    /// dead server and reconnect (up to `T` more), a reopened session queues at the back,
    /// behind holds of up to `T/2` each; `4T + 10 s` leaves room for a loaded machine.
    pub fn grant_bound(&self) -> Duration {
        self.session_timeout * 4 + Duration::from_secs(10)
    }

    /// Checks that the settings can work: 1, 3 or 5 nodes (server faults need 3), at least
    /// 2 clients, a session timeout within 2 and 20 tickTimes (ZooKeeper's clamp), at least
    /// one recipe, a semaphore's permits fewer than the clients, and with PostgreSQL among
    /// the [`sinks`](Self::sinks), its server binaries installed (the other stores' are
    /// looked for when they start, before the ensemble).
    ///
    /// # Notable errors
    /// [`HarnessError::InvalidConfig`] saying which setting is wrong;
    /// [`HarnessError::PostgresNotFound`] with PostgreSQL among the sinks, if no server can be
    /// started.
    ///
    /// ```
    /// use zkfence_testcontainers::chaos::ChaosConfig;
    /// let mut config = ChaosConfig::new("zkfence", vec![]);
    /// assert!(config.validate().is_ok());
    /// config.nodes = 4;
    /// assert!(config.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), HarnessError> {
        let bad = |what: String| Err(HarnessError::InvalidConfig(what));
        if !matches!(self.nodes, 1 | 3 | 5) {
            return bad(format!("nodes must be 1, 3 or 5, not {}", self.nodes));
        }
        if self.clients < 2 {
            return bad(format!(
                "at least 2 clients are needed to contend, not {}",
                self.clients
            ));
        }
        if self.session_timeout < self.tick_time * 2 || self.session_timeout > self.tick_time * 20 {
            return bad(format!(
                "the session timeout ({:?}) must be within 2 and 20 tickTimes ({:?} to {:?}), \
                 as ZooKeeper clamps it",
                self.session_timeout,
                self.tick_time * 2,
                self.tick_time * 20
            ));
        }
        if self.recipes.is_empty() {
            return bad("at least one recipe is needed".into());
        }
        if self.recipes.contains(&Recipe::Semaphore)
            && (self.permits == 0 || self.permits >= self.clients)
        {
            return bad(format!(
                "the semaphore's permits must be at least 1 and fewer than the {} clients, \
                 so that they contend, not {}",
                self.clients, self.permits
            ));
        }
        if self.nodes == 1 && self.faults.iter().any(|k| k.hurts_a_server()) {
            return bad("server faults need at least 3 nodes".into());
        }
        if self.sinks.contains(&Store::Postgres) {
            // Before anything starts: a missing server is a setting that cannot work.
            crate::postgres::check_available()?;
        }
        Ok(())
    }
}
