//! `zkfence chaos`: a randomized fault campaign against a throwaway ensemble, a checker over
//! its whole history, and a picture of it (feature `chaos`).
//!
//! [`run`] starts an ensemble, a register guarded by a [`Fence`](zkfence::Fence), and
//! `clients` contender processes, each with its own zkfence session through its own
//! [`FaultProxy`], all contending for one lock. Each loops: acquire with a
//! timeout, write (token, client, sequence) to the register (and with
//! [`ChaosConfig::postgres`], then to a PostgreSQL row by the `fenced_postgres` recipe's SQL),
//! hold for a random time with more writes, release or drop. Meanwhile faults from a seeded schedule (see [`FaultKind`])
//! start and heal, one or more at a time. Every grant, loss, release, write decision and
//! fault is recorded on one clock; at the end [`check`] looks for violations (its docs list
//! the rules), and the history is written as JSON lines and drawn as an SVG timeline.
//!
//! The contenders are real processes (a stalled or killed holder is a real one), started
//! from [`ChaosConfig::contender`]: a program that calls [`contender_main`] when started
//! with [`CONTENDER_MODE`], such as the `zkfence` CLI.
//!
//! ```no_run
//! # async fn f() -> Result<(), zkfence_testcontainers::HarnessError> {
//! use std::time::Duration;
//! use zkfence_testcontainers::chaos::{self, ChaosConfig};
//!
//! let mut config = ChaosConfig::new("/usr/local/bin/zkfence", vec![chaos::CONTENDER_MODE.into()]);
//! config.duration = Duration::from_secs(60);
//! config.seed = 42;
//! let report = chaos::run(config).await?;
//! println!("{}", report.summary());
//! for v in &report.violations {
//!     eprintln!("{v}");
//! }
//! # Ok(()) }
//! ```

mod check;
mod contender;
mod faults;
mod history;
mod register;
mod sql;
mod timeline;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;
use tokio::time::Instant;
use zkfence::{Session, SessionOptions};

use crate::{Ensemble, FaultProxy, HarnessError, Postgres};
pub use check::{check, holds, Hold, Rule, Violation};
pub use contender::contender_main;
use contender::ContenderConfig;
pub use faults::FaultKind;
use faults::{Planned, Reservation, Rng, ServerBudget};
pub use history::{read_jsonl, write_jsonl, Event, Record};
use register::RegisterServer;
pub use timeline::{draw, draw_window};

/// The first argument that makes a program run [`contender_main`] (the `zkfence` CLI's
/// hidden contender mode).
pub const CONTENDER_MODE: &str = "__zkfence-chaos-contender";

/// The lock every contender takes.
const LOCK_PATH: &str = "/zkfence-chaos/lock";

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
    /// Whether every fenced write also goes to a PostgreSQL row, by the `fenced_postgres`
    /// recipe's SQL, in a throwaway [`Postgres`] the campaign starts.
    /// Default false.
    pub postgres: bool,
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
            postgres: false,
        }
    }

    /// The longest a hold lasts when nothing goes wrong: half a session timeout.
    fn max_hold(&self) -> Duration {
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
    /// 2 clients, a session timeout within 2 and 20 tickTimes (ZooKeeper's clamp), and with
    /// [`postgres`](Self::postgres), PostgreSQL's server binaries installed.
    ///
    /// # Notable errors
    /// [`HarnessError::InvalidConfig`] saying which setting is wrong;
    /// [`HarnessError::PostgresNotFound`] with `postgres` set, if no server can be started.
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
        if self.nodes == 1 && self.faults.iter().any(|k| k.hurts_a_server()) {
            return bad("server faults need at least 3 nodes".into());
        }
        if self.postgres {
            // Before anything starts: a missing server is a setting that cannot work.
            crate::postgres::check_available()?;
        }
        Ok(())
    }
}

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

    /// Writes the register accepted.
    pub fn accepted_writes(&self) -> usize {
        self.count(|e| matches!(e, Event::WriteAccepted { .. }))
    }

    /// Late writes the register's fence refused.
    pub fn refused_writes(&self) -> usize {
        self.count(|e| matches!(e, Event::WriteRefused { .. }))
    }

    /// Whether the campaign also wrote to PostgreSQL (`--postgres`).
    pub fn with_postgres(&self) -> bool {
        self.count(|e| matches!(e, Event::Campaign { postgres: true, .. })) > 0
    }

    /// Writes PostgreSQL committed: its own log's count (a writer may have died before it
    /// reported its commit), or the writers' reports if the log could not be read.
    pub fn pg_accepted_writes(&self) -> usize {
        self.history
            .iter()
            .find_map(|r| match &r.event {
                Event::PostgresFinal {
                    writes,
                    error: None,
                    ..
                } => Some(writes.len()),
                _ => None,
            })
            .unwrap_or_else(|| self.count(|e| matches!(e, Event::PgWriteAccepted { .. })))
    }

    /// Late writes PostgreSQL's fence refused.
    pub fn pg_refused_writes(&self) -> usize {
        self.count(|e| matches!(e, Event::PgWriteRefused { .. }))
    }

    /// Writes the register and PostgreSQL judged differently (one accepted, the other
    /// refused): no violation, see [`check`].
    pub fn judged_differently(&self) -> usize {
        check::judged_differently(&self.history)
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
        let postgres = if self.with_postgres() {
            format!(
                ", PostgreSQL {} writes accepted, {} late writes refused ({} judged otherwise \
                 by the register)",
                self.pg_accepted_writes(),
                self.pg_refused_writes(),
                self.judged_differently()
            )
        } else {
            String::new()
        };
        // Only when it happened: most runs have none, and their line stays as it was.
        let restarts = match self.restart_failures() {
            0 => String::new(),
            n => format!(
                ", {n} failed server restarts ({} servers wiped to resync)",
                self.wiped_servers()
            ),
        };
        format!(
            "zkfence chaos: seed {}, {}s: {} grants, {} writes accepted, {} late writes \
             refused{postgres}, {} faults ({}), {} skipped{restarts}, {} violations",
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

/// Appends events to the campaign's history, stamped on the campaign's clock.
#[derive(Clone)]
pub(crate) struct Recorder {
    origin_us: u64,
    history: Arc<Mutex<Vec<Record>>>,
}

impl Recorder {
    fn new() -> Recorder {
        Recorder {
            origin_us: history::monotonic_us(),
            history: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub(crate) fn record(&self, event: Event) {
        let t_us = history::monotonic_us().saturating_sub(self.origin_us);
        self.history.lock().unwrap().push(Record { t_us, event });
    }

    fn push(&self, record: Record) {
        self.history.lock().unwrap().push(record);
    }

    fn now(&self) -> Duration {
        Duration::from_micros(history::monotonic_us().saturating_sub(self.origin_us))
    }

    /// The history so far, in time order.
    fn snapshot(&self) -> Vec<Record> {
        let mut h = self.history.lock().unwrap().clone();
        h.sort_by_key(|r| r.t_us);
        h
    }
}

/// One contender's process, as the campaign drives it.
struct Slot {
    pid: u32,
    stdin: Option<ChildStdin>,
    exited: watch::Receiver<bool>,
}

/// What the campaign shares with its fault tasks.
struct Campaign {
    config: ChaosConfig,
    zk: Arc<Ensemble>,
    proxies: Vec<FaultProxy>,
    admin: Session,
    register: RegisterServer,
    /// With `--postgres`: the server, and the campaign's own connection (for the schema and
    /// the final state).
    postgres: Option<(Postgres, tokio_postgres::Client)>,
    recorder: Recorder,
    slots: Mutex<Vec<Option<Slot>>>,
    /// The token each contender holds now, as its events say.
    holding: Arc<Mutex<Vec<Option<u64>>>>,
    busy_clients: Mutex<HashSet<usize>>,
    /// The servers hurt now: a minority at most, so that a quorum remains.
    servers: ServerBudget,
}

/// Runs a campaign (see the module docs) and returns its report; the violations are in
/// [`Report::violations`], not an error.
///
/// # Cancel safety
/// Not cancel safe: dropped midway, it leaves contender processes behind until their
/// standard input closes (they then stop), and no history is written. The ensemble is
/// removed as always.
///
/// # Notable errors
/// - [`HarnessError::InvalidConfig`] for settings that cannot work (see [`ChaosConfig`]).
/// - The ensemble's errors if it cannot start, and [`HarnessError::Io`] if a contender
///   cannot be started or the output cannot be written.
pub async fn run(config: ChaosConfig) -> Result<Report, HarnessError> {
    config.validate()?;
    std::fs::create_dir_all(&config.out_dir)?;
    let t = config.session_timeout;
    // PostgreSQL first: if it cannot start, no ensemble has been started for nothing.
    let postgres = match config.postgres {
        true => Some(start_postgres().await?),
        false => None,
    };
    let zk = Ensemble::builder()
        .nodes(config.nodes)
        .tick_time(config.tick_time)
        .max_session_timeout(t.max(config.tick_time * 20))
        .peer_links(config.faults.contains(&FaultKind::IsolateServer))
        .start()
        .await?;
    let recorder = Recorder::new();
    recorder.record(Event::Campaign {
        seed: config.seed,
        duration_ms: config.duration.as_millis() as u64,
        nodes: config.nodes,
        clients: config.clients,
        session_timeout_ms: t.as_millis() as u64,
        tick_time_ms: config.tick_time.as_millis() as u64,
        faults: config.faults.clone(),
        grant_bound_ms: config.grant_bound().as_millis() as u64,
        postgres: config.postgres,
    });
    let mut proxies = Vec::with_capacity(config.clients);
    for _ in 0..config.clients {
        proxies.push(zk.proxy().await?);
    }
    let admin = Session::connect(
        &zk.connect_string(),
        SessionOptions::new().session_timeout(config.tick_time * 20),
    )
    .await
    .map_err(|e| HarnessError::InvalidConfig(format!("cannot connect to the ensemble: {e}")))?;
    let register = RegisterServer::start(recorder.clone()).await?;
    let campaign = Arc::new(Campaign {
        postgres,
        zk: Arc::new(zk),
        proxies,
        admin,
        register,
        recorder: recorder.clone(),
        slots: Mutex::new((0..config.clients).map(|_| None).collect()),
        holding: Arc::new(Mutex::new(vec![None; config.clients])),
        busy_clients: Mutex::new(HashSet::new()),
        servers: ServerBudget::new((config.nodes - 1) / 2),
        config,
    });
    for client in 0..campaign.config.clients {
        campaign.spawn_contender(client)?;
    }
    tracing::info!(seed = campaign.config.seed, "chaos campaign started");

    let plan = faults::schedule(
        campaign.config.seed,
        &campaign.config.faults,
        campaign.config.duration,
        t,
    );
    let mut tasks = tokio::task::JoinSet::new();
    for (id, planned) in plan.into_iter().enumerate() {
        let wait = planned.at.saturating_sub(recorder.now());
        tokio::time::sleep(wait).await;
        let c = campaign.clone();
        tasks.spawn(async move { c.inject(id, planned).await });
    }
    while tasks.join_next().await.is_some() {}
    let wait = campaign.config.duration.saturating_sub(recorder.now());
    tokio::time::sleep(wait).await;
    campaign.until_a_grant_after_the_last_heal().await;

    let campaign = Arc::into_inner(campaign).expect("every fault task has ended");
    let report = campaign.finish().await?;
    Ok(report)
}

impl Campaign {
    /// Starts contender `client` (again), with a task that forwards its events and one that
    /// records its end.
    fn spawn_contender(&self, client: usize) -> Result<(), HarnessError> {
        let c = &self.config;
        let contender = ContenderConfig {
            client,
            connect: self.proxies[client].connect_string(),
            direct: self.zk.connect_string(),
            lock_path: LOCK_PATH.into(),
            register: self.register.addr(),
            session_timeout_ms: c.session_timeout.as_millis() as u64,
            seed: c.seed,
            max_hold_ms: c.max_hold().as_millis() as u64,
            origin_us: self.recorder.origin_us,
            postgres: self.postgres.as_ref().map(|(pg, _)| pg.url()),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(c.out_dir.join(format!("contender-{client}.log")))?;
        let mut child: Child = Command::new(&c.contender.0)
            .args(&c.contender.1)
            .arg(serde_json::to_string(&contender).expect("configs serialize"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        self.recorder
            .record(Event::ContenderStarted { client, pid });
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        let (exited_tx, exited) = watch::channel(false);
        let (recorder, holding) = (self.recorder.clone(), self.holding.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Record>(&line) {
                    Ok(record) => {
                        note_holding(&holding, &record.event);
                        recorder.push(record);
                    }
                    Err(e) => tracing::warn!(client, %line, %e, "chaos: not an event"),
                }
            }
            // Stdout closed: the process is ending.
            let status = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => format!("unknown: {e}"),
            };
            holding.lock().unwrap()[client] = None;
            recorder.record(Event::ContenderExited { client, status });
            let _ = exited_tx.send(true);
        });
        self.slots.lock().unwrap()[client] = Some(Slot { pid, stdin, exited });
        Ok(())
    }

    /// Starts one planned fault, waits its time, heals it.
    async fn inject(&self, id: usize, p: Planned) {
        let mut rng = Rng::new(p.pick);
        // A server fault takes its slot in the budget before anything else (see
        // `ServerBudget`): two faults starting together cannot both pass a full budget.
        let mut slot = None;
        if p.kind.hurts_a_server() {
            let deadline = Instant::now() + self.config.session_timeout * 4;
            slot = loop {
                if let Some(r) = self.servers.try_reserve() {
                    break Some(r);
                }
                if Instant::now() > deadline {
                    return self.skip(id, p.kind, "other servers were hurt meanwhile");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
        }
        let started = |client: Option<usize>, server: Option<usize>| {
            tracing::info!(fault = id, kind = %p.kind, ?client, ?server, lasts = ?p.lasts, "chaos: fault");
            self.recorder.record(Event::FaultStarted {
                fault: id,
                kind: p.kind,
                client,
                server,
            })
        };
        let healed = || {
            self.recorder.record(Event::FaultHealed {
                fault: id,
                kind: p.kind,
            })
        };
        match p.kind {
            FaultKind::KillLeader
            | FaultKind::KillFollower
            | FaultKind::PauseServer
            | FaultKind::IsolateServer => {
                let mut slot = slot.expect("server faults reserve a slot");
                let Some(server) = self.pick_server(p.kind, &mut rng, &mut slot).await else {
                    return self.skip(id, p.kind, "no server fits (no leader?)");
                };
                started(None, Some(server));
                let zk = self.zk.clone();
                let kind = p.kind;
                let _ = tokio::task::spawn_blocking(move || match kind {
                    FaultKind::PauseServer => zk.pause(server),
                    FaultKind::IsolateServer => zk.isolate(server),
                    _ => zk.kill(server),
                })
                .await;
                tokio::time::sleep(p.lasts).await;
                match p.kind {
                    FaultKind::PauseServer => self.zk.resume(server),
                    FaultKind::IsolateServer => self.zk.heal_peers(server),
                    _ => {
                        if !restart_or_recover(&self.zk, server, id, &self.recorder).await {
                            // Never healed: its slot stays taken, so that no other server
                            // fault can take the quorum away too.
                            std::mem::forget(slot);
                            return;
                        }
                    }
                }
                healed();
                drop(slot);
            }
            FaultKind::DeleteWaiter => {
                // Recorded first, like every fault: the deletion may be seen at once.
                started(None, None);
                match self.delete_a_waiter(&mut rng).await {
                    Some(node) => tracing::info!(%node, "chaos: deleted a waiter's node"),
                    None => tracing::info!("chaos: no waiter's node to delete"),
                }
                healed();
            }
            _ => {
                let Some(client) = self.pick_client(p.kind, &mut rng).await else {
                    return self.skip(id, p.kind, "no contender fits (no holder)");
                };
                started(Some(client), None);
                let proxy = &self.proxies[client];
                match p.kind {
                    FaultKind::BlackholeClient => {
                        proxy.blackhole();
                        tokio::time::sleep(p.lasts).await;
                        proxy.heal();
                    }
                    FaultKind::CutClient => proxy.cut(),
                    FaultKind::StallHolder => {
                        self.signal(client, libc::SIGSTOP);
                        tokio::time::sleep(p.lasts).await;
                        self.signal(client, libc::SIGCONT);
                    }
                    FaultKind::KillClient => {
                        self.signal(client, libc::SIGKILL);
                        self.wait_exited(client).await;
                        tokio::time::sleep(p.lasts).await;
                        if let Err(e) = self.spawn_contender(client) {
                            tracing::error!(client, %e, "chaos: cannot start a contender again");
                        }
                    }
                    FaultKind::ExpireSession => self.command(client, "expire").await,
                    _ => unreachable!("server kinds are handled above"),
                }
                healed();
                self.busy_clients.lock().unwrap().remove(&client);
            }
        }
    }

    fn skip(&self, id: usize, kind: FaultKind, why: &str) {
        tracing::info!(fault = id, %kind, why, "chaos: fault skipped");
        self.recorder.record(Event::FaultSkipped {
            fault: id,
            kind,
            why: why.into(),
        });
    }

    /// A server for `kind`, claimed in `slot`: the leader, a follower, or any (half of the
    /// time the leader, for an isolation).
    async fn pick_server(
        &self,
        kind: FaultKind,
        rng: &mut Rng,
        slot: &mut Reservation<'_>,
    ) -> Option<usize> {
        let leader = self.zk.leader().await;
        slot.claim(|busy| self.choose_server(kind, leader, busy, rng))
    }

    fn choose_server(
        &self,
        kind: FaultKind,
        leader: Option<usize>,
        busy: &HashSet<usize>,
        rng: &mut Rng,
    ) -> Option<usize> {
        let free: Vec<usize> = (0..self.config.nodes)
            .filter(|i| !busy.contains(i) && self.zk.is_running(*i))
            .collect();
        let followers: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&i| Some(i) != leader)
            .collect();
        let chosen = match kind {
            FaultKind::KillLeader => leader.filter(|l| free.contains(l)),
            FaultKind::KillFollower => pick(&followers, rng),
            FaultKind::IsolateServer if rng.percent(50) => leader.filter(|l| free.contains(l)),
            _ => pick(&free, rng),
        }?;
        Some(chosen)
    }

    /// A contender for `kind`, marked busy: the holder (always for a stall, half of the time
    /// otherwise) or any other. Waits up to a session timeout for a holder to stall.
    async fn pick_client(&self, kind: FaultKind, rng: &mut Rng) -> Option<usize> {
        let deadline = Instant::now() + self.config.session_timeout;
        let want_holder = kind == FaultKind::StallHolder || rng.percent(50);
        loop {
            if let Some(c) = self.try_pick_client(want_holder, rng) {
                return Some(c);
            }
            if kind != FaultKind::StallHolder {
                // No free holder: anyone else will do.
                return self.try_pick_client(false, rng);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn try_pick_client(&self, want_holder: bool, rng: &mut Rng) -> Option<usize> {
        let holding: Vec<bool> = self
            .holding
            .lock()
            .unwrap()
            .iter()
            .map(Option::is_some)
            .collect();
        let alive: Vec<bool> = self
            .slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.as_ref().is_some_and(|s| !*s.exited.borrow()))
            .collect();
        let mut busy = self.busy_clients.lock().unwrap();
        let free: Vec<usize> = (0..self.config.clients)
            .filter(|&c| !busy.contains(&c) && alive[c] && (holding[c] || !want_holder))
            .collect();
        let chosen = pick(&free, rng)?;
        busy.insert(chosen);
        Some(chosen)
    }

    /// Deletes one waiter's node (never the holder's: the holder would learn of it only
    /// after the next waiter was granted, which no lock can prevent). Returns its path.
    async fn delete_a_waiter(&self, rng: &mut Rng) -> Option<String> {
        let client = self.admin.client();
        let step = self.config.session_timeout;
        let mut children = tokio::time::timeout(step, client.list_children(LOCK_PATH))
            .await
            .ok()?
            .ok()?;
        children.sort_by_key(|name| sequence_of(name));
        if children.len() < 2 {
            return None;
        }
        let victim = &children[1 + rng.below(children.len() as u64 - 1) as usize];
        let path = format!("{LOCK_PATH}/{victim}");
        // Only while the holder's node still exists: else the victim may hold the lock by now.
        let mut multi = client.new_multi_writer();
        multi
            .add_check_version(&format!("{LOCK_PATH}/{}", children[0]), -1)
            .ok()?;
        multi.add_delete(&path, None).ok()?;
        tokio::time::timeout(step, multi.commit())
            .await
            .ok()?
            .ok()?;
        Some(path)
    }

    fn signal(&self, client: usize, sig: i32) {
        if let Some(slot) = &self.slots.lock().unwrap()[client] {
            if !*slot.exited.borrow() {
                // SAFETY: kill(2) on our own child, which is not reaped while `exited` is
                // false (the pid cannot have been reused).
                unsafe { libc::kill(slot.pid as i32, sig) };
            }
        }
    }

    async fn wait_exited(&self, client: usize) {
        let exited = self.slots.lock().unwrap()[client]
            .as_ref()
            .map(|s| s.exited.clone());
        if let Some(mut exited) = exited {
            let _ = exited.wait_for(|&e| e).await;
        }
    }

    async fn command(&self, client: usize, line: &str) {
        let stdin = self.slots.lock().unwrap()[client]
            .as_mut()
            .and_then(|s| s.stdin.take());
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(format!("{line}\n").as_bytes()).await;
            if let Some(slot) = self.slots.lock().unwrap()[client].as_mut() {
                slot.stdin = Some(stdin);
            }
        }
    }

    /// After the last fault: waits (up to the progress bound) for a grant after the last
    /// heal, so that the progress rule can be decided for it.
    async fn until_a_grant_after_the_last_heal(&self) {
        let last_heal = self
            .recorder
            .snapshot()
            .iter()
            .filter(|r| matches!(r.event, Event::FaultHealed { .. }))
            .map(|r| r.t_us)
            .max()
            .unwrap_or(0);
        let deadline = Instant::now() + self.config.grant_bound() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let granted = self
                .recorder
                .snapshot()
                .iter()
                .any(|r| r.t_us >= last_heal && matches!(r.event, Event::Granted { .. }));
            if granted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The nodes left under the lock's path, polled until there are none or a deadline
    /// (two session timeouts and 5 s: a killed contender's session has to expire first);
    /// or, if no listing could be made by then, why not (never counted as nodes left).
    ///
    /// The admin session may have expired during the campaign: its client is asked for on
    /// each pass (after an expiry the old handle belongs to the expired session), and if
    /// the session cannot serve (closed, or still expired after a few tries), a fresh one
    /// is opened.
    async fn nodes_left(&self) -> (Vec<String>, Option<String>) {
        let t = self.config.session_timeout;
        let deadline = Instant::now() + t * 2 + Duration::from_secs(5);
        let mut fresh: Option<Session> = None;
        let mut failures = 0;
        let result = loop {
            let session = fresh.as_ref().unwrap_or(&self.admin);
            let why = match tokio::time::timeout(t, session.client().list_children(LOCK_PATH)).await
            {
                Ok(Ok(left)) if left.is_empty() || Instant::now() > deadline => {
                    let left = left.into_iter().map(|c| format!("{LOCK_PATH}/{c}"));
                    break (left.collect(), None);
                }
                Ok(Ok(_)) => None,
                Ok(Err(zkfence::zookeeper_client::Error::NoNode)) => break (Vec::new(), None),
                Ok(Err(e)) => Some(format!("cannot list {LOCK_PATH}: {e}")),
                Err(_) => Some(format!("listing {LOCK_PATH} took over {t:?}")),
            };
            if let Some(why) = why {
                failures += 1;
                tracing::warn!(%why, failures, "chaos: cannot check for nodes left yet");
                if Instant::now() > deadline {
                    break (
                        Vec::new(),
                        Some(format!("{why} (still after {failures} tries)")),
                    );
                }
                let state = session.state();
                let stuck = state.is_terminal()
                    && (state != zkfence::SessionState::Expired || failures >= 3);
                if stuck {
                    let options = SessionOptions::new().session_timeout(self.config.tick_time * 20);
                    let connect_string = self.zk.connect_string();
                    let connect = Session::connect(&connect_string, options);
                    if let Ok(Ok(s)) = tokio::time::timeout(t, connect).await {
                        if let Some(old) = fresh.replace(s) {
                            old.close().await;
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if let Some(s) = fresh {
            s.close().await;
        }
        result
    }

    /// Stops the contenders, looks for leftovers, stops the ensemble, checks, writes.
    async fn finish(self) -> Result<Report, HarnessError> {
        let t = self.config.session_timeout;
        // End of input: each contender releases what it holds and closes its session.
        let waits: Vec<_> = {
            let mut slots = self.slots.lock().unwrap();
            slots
                .iter_mut()
                .flatten()
                .map(|s| {
                    s.stdin = None;
                    (s.pid, s.exited.clone())
                })
                .collect()
        };
        let mut contenders_running = Vec::new();
        for (pid, mut exited) in waits {
            let ended =
                tokio::time::timeout(t * 2 + Duration::from_secs(5), exited.wait_for(|&e| e));
            if ended.await.is_err() {
                tracing::warn!(pid, "chaos: a contender did not stop; killing it");
                // SAFETY: kill(2) on our own unreaped child.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                let _ = tokio::time::timeout(Duration::from_secs(5), exited.wait_for(|&e| e)).await;
                contenders_running.push(pid);
            }
        }
        // A killed contender's session lingers until it expires: give it that long.
        let (leftover_nodes, nodes_unchecked) = self.nodes_left().await;
        self.admin.close().await;
        let mut server_pids: Vec<u32> = (0..self.config.nodes)
            .filter_map(|i| self.zk.pid(i))
            .collect();
        if let Some((pg, db)) = self.postgres {
            let (token, writes, error) = match sql::final_state(&db, LOCK_PATH).await {
                Ok((token, writes)) => (token, writes, None),
                Err(e) => (None, Vec::new(), Some(e)),
            };
            self.recorder.record(Event::PostgresFinal {
                token,
                writes,
                error,
            });
            drop(db);
            // Every process of the server, its backends too.
            server_pids.extend(pg.pids());
            drop(pg);
        }
        drop(self.proxies);
        drop(self.register);
        let zk = Arc::into_inner(self.zk).expect("no fault task holds the ensemble");
        drop(zk);
        let servers_running: Vec<u32> = server_pids.into_iter().filter(|&p| alive(p)).collect();
        self.recorder.record(Event::Finished {
            leftover_nodes,
            servers_running,
            contenders_running,
            nodes_unchecked,
        });

        let history = self.recorder.snapshot();
        let violations = check(&history);
        let history_path = self.config.out_dir.join("history.jsonl");
        let timeline_path = self.config.out_dir.join("timeline.svg");
        write_jsonl(&history_path, &history)?;
        draw(&history, &violations, &timeline_path)?;
        Ok(Report {
            seed: self.config.seed,
            duration: self.config.duration,
            history,
            violations,
            history_path,
            timeline_path,
        })
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

/// Starts the campaign's PostgreSQL and creates the recipe's tables in it.
async fn start_postgres() -> Result<(Postgres, tokio_postgres::Client), HarnessError> {
    let pg = Postgres::launch().await?;
    let failed = |what: String| HarnessError::Postgres {
        what,
        log_tail: pg.log_tail(20),
    };
    let db = sql::connect(&pg.url(), Duration::from_secs(30))
        .await
        .map_err(|e| failed(format!("cannot connect: {e}")))?;
    db.batch_execute(sql::SCHEMA).await.map_err(|e| {
        failed(format!(
            "cannot create the tables: {}",
            sql::with_causes(&e)
        ))
    })?;
    tracing::info!(url = %pg.url(), "chaos: PostgreSQL serving");
    Ok((pg, db))
}

/// Starts killed server `server` again (for fault `fault`). If it does not start (in
/// ZooKeeper 3.8.0 a server killed while writing the leader's snapshot may refuse its own
/// data: "The current epoch, a, is older than the last zxid", ZOOKEEPER-2354), records
/// [`Event::RestartFailed`], wipes its data as an operator would (its `myid` kept;
/// [`Event::ServerWiped`]) and starts it again, to resync from the leader. Returns whether
/// it serves again (then the caller records the heal); if not, both failures are recorded.
async fn restart_or_recover(
    zk: &Ensemble,
    server: usize,
    fault: usize,
    recorder: &Recorder,
) -> bool {
    let Err(e) = zk.start(server).await else {
        return true;
    };
    tracing::error!(server, %e, "chaos: a killed server did not start again; wiping its data");
    recorder.record(Event::RestartFailed {
        fault,
        server,
        error: e.to_string(),
    });
    zk.kill(server);
    if let Err(e) = zk.wipe_data(server) {
        tracing::error!(server, %e, "chaos: cannot wipe a server's data");
        recorder.record(Event::RestartFailed {
            fault,
            server,
            error: format!("cannot wipe its data: {e}"),
        });
        return false;
    }
    recorder.record(Event::ServerWiped { fault, server });
    match zk.start(server).await {
        Ok(()) => {
            tracing::info!(server, "chaos: a wiped server serves again");
            true
        }
        Err(e) => {
            tracing::error!(server, %e, "chaos: a wiped server did not start either");
            recorder.record(Event::RestartFailed {
                fault,
                server,
                error: format!("after wiping its data: {e}"),
            });
            false
        }
    }
}

/// Keeps `holding` in step with a contender's events.
fn note_holding(holding: &Mutex<Vec<Option<u64>>>, event: &Event) {
    let mut holding = holding.lock().unwrap();
    match *event {
        Event::Granted { client, token, .. } => holding[client] = Some(token),
        Event::Lost { client, .. }
        | Event::Released { client, .. }
        | Event::Dropped { client, .. } => holding[client] = None,
        _ => {}
    }
}

fn pick(from: &[usize], rng: &mut Rng) -> Option<usize> {
    (!from.is_empty()).then(|| from[rng.below(from.len() as u64) as usize])
}

/// The queue sequence at the end of a node's name (`..-lock-0000000042`); unknown names
/// sort last.
fn sequence_of(name: &str) -> i64 {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().unwrap_or(i64::MAX)
}

/// Whether process `pid` exists (and is not a zombie we could reap: the ensemble reaps its
/// servers).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zkfence::zookeeper_client::{Acls, CreateMode};

    /// ZOOKEEPER-2354 as the 30-minute campaign met it, reproduced in seconds: a follower
    /// whose `currentEpoch` is older than its last zxid refuses to start; the campaign
    /// records that, wipes the follower's data (keeping its `myid`) and it resyncs.
    #[tokio::test]
    async fn a_follower_refusing_its_epoch_is_recorded_wiped_and_healed() {
        let zk = Ensemble::builder().nodes(3).start().await.unwrap();
        let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
        let follower = (leader + 1) % 3;
        let step = Duration::from_secs(10);
        let session = Session::connect(&zk.connect_string(), SessionOptions::new())
            .await
            .unwrap();
        let acl = CreateMode::Persistent.with_acls(Acls::anyone_all());
        tokio::time::timeout(step, session.client().create("/kept", b"v1", &acl))
            .await
            .unwrap()
            .unwrap();
        session.close().await;
        // Once the follower serves /kept, its own log holds that epoch-1 zxid.
        let direct = zk.node_connect_string(follower);
        let s = Session::connect(&direct, SessionOptions::new())
            .await
            .unwrap();
        s.client().sync("/kept").await.unwrap();
        let (data, _) = s.client().get_data("/kept").await.unwrap();
        assert_eq!(data, b"v1");
        s.close().await;

        zk.kill(follower);
        let epoch = zk.data_dir(follower).join("version-2/currentEpoch");
        std::fs::write(&epoch, "0").unwrap();

        let recorder = Recorder::new();
        let serves = restart_or_recover(&zk, follower, 7, &recorder).await;
        let events: Vec<Event> = recorder.snapshot().into_iter().map(|r| r.event).collect();
        assert!(serves, "not recovered: {events:#?}");
        assert_eq!(events.len(), 2, "{events:#?}");
        match &events[0] {
            Event::RestartFailed {
                fault: 7,
                server,
                error,
            } => {
                assert_eq!(*server, follower);
                assert!(error.contains("older than the last zxid"), "{error}");
            }
            other => panic!("not a restart failure: {other:?}"),
        }
        assert_eq!(
            events[1],
            Event::ServerWiped {
                fault: 7,
                server: follower
            }
        );
        let myid = std::fs::read_to_string(zk.data_dir(follower).join("myid")).unwrap();
        assert_eq!(myid.trim(), (follower + 1).to_string());
        // Resynced from the leader: it serves the data it had wiped.
        let s = Session::connect(&direct, SessionOptions::new())
            .await
            .unwrap();
        let (data, _) = tokio::time::timeout(step, s.client().get_data("/kept"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(data, b"v1");
        s.close().await;
    }
}
