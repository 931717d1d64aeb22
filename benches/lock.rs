//! `cargo bench --bench lock [-- --quick] [--only SCENARIO,..] [--rounds N]`: what
//! zkfence's lock costs, against the floor the ZooKeeper protocol sets and against what users
//! would pick instead.
//!
//! The bench starts its own 3-node ensemble (tickTime 200 ms), connects every measured session
//! to one follower, and measures, in one run:
//!
//! 1. **uncontended** acquire+release on one lock, against raw `zookeeper-client` calls doing
//!    the protocol floor (create ephemeral-sequential, getChildren, delete) and against
//!    `zookeeper-client`'s own `Client::lock`;
//! 2. **handoff**: 8 sessions passing one lock around, against `Client::lock` and against the
//!    same protocol written with raw calls, all driven the same way; the release-to-grant
//!    latency against the raw floor (a delete on one session until the `NodeDeleted` watch
//!    fires on another), that floor plus the getChildren a deep waiter needs, and two sessions
//!    whose waiter is always second in line;
//! 3. **parallel**: 64 tasks on one session, each on its own lock, against `Client::lock`, raw
//!    pipelined create+delete (the ensemble's write limit) and raw create+getChildren+delete;
//! 4. **herd**: watch notifications and listings per release with 1,000 waiters;
//! 5. **scale**: 10,000 waiters in one process (enqueue time, RSS per waiter, FIFO);
//! 6. **keepalive**: requests per second of an idle session holding 1 and 100 leases;
//! 7. Python Kazoo's `Lock` on 1 and 2, where Debian's `python3-kazoo` is installed
//!    (driven by `benches/kazoo_driver.py`).
//!
//! Noise on these machines is large (fsync latency moves whole rounds; see
//! `BENCHMARKING.md`), so timed comparisons run in interleaved rounds (9, 3 with `--quick`)
//! after one unmeasured warm-up round, rotating which arm goes first, and report the median of
//! the per-round ratios with their min and max. Request counts do not need that: they are read
//! at the server from the `cons` four-letter word (`recved` per connection) before and after
//! each arm. Client CPU time per operation is read from the process clock.
//!
//! Output: one markdown table on stdout (the README's), progress on stderr, and every figure,
//! per round too, in `target/bench/lock.json` (under `CARGO_TARGET_DIR` when set). `--only`
//! and `--rounds` are for working on one scenario; the JSON then holds only what ran.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;
use zkfence::{Lease, Session, SessionMetrics, SessionOptions};
use zkfence_testcontainers::Ensemble;
use zookeeper_client as zkc;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// Long enough that neither the client's pings (after 3/20 of it idle) nor the lease clock's
/// keepalive (after a third of it) fall inside a busy measured window.
const SESSION_TIMEOUT: Duration = Duration::from_secs(20);
const TICK: Duration = Duration::from_millis(200);

/// How much work each scenario does: the full run, or the `--quick` one CI runs.
#[derive(Debug, Clone)]
struct Plan {
    quick: bool,
    /// Interleaved rounds of every timed comparison.
    rounds: usize,
    /// Acquire+release cycles per arm and round, uncontended.
    uncontended_cycles: usize,
    /// Sessions handing one lock around.
    contenders: usize,
    /// Grants per arm and round in the handoff.
    handoffs: usize,
    /// Delete-to-notification samples per round for the handoff's latency floor.
    floor_samples: usize,
    /// Tasks on one session, each on its own lock.
    parallel_tasks: usize,
    /// Cycles per task and round in the parallel scenario.
    parallel_cycles: usize,
    herd_waiters: usize,
    scale_waiters: usize,
    /// Sessions the herd's and scale's waiters are spread over.
    waiter_sessions: usize,
    /// Shortest window for the idle-session heartbeat count.
    keepalive_window: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                rounds: 3,
                uncontended_cycles: 50,
                contenders: 8,
                handoffs: 80,
                floor_samples: 30,
                parallel_tasks: 64,
                parallel_cycles: 15,
                herd_waiters: 1000,
                scale_waiters: 2000,
                waiter_sessions: 10,
                keepalive_window: Duration::from_secs(10),
            }
        } else {
            Plan {
                quick,
                rounds: 9,
                uncontended_cycles: 200,
                contenders: 8,
                handoffs: 320,
                floor_samples: 100,
                parallel_tasks: 64,
                parallel_cycles: 60,
                herd_waiters: 1000,
                scale_waiters: 10_000,
                waiter_sessions: 10,
                keepalive_window: Duration::from_secs(30),
            }
        }
    }
}

const SCENARIOS: [&str; 6] = [
    "uncontended",
    "handoff",
    "keepalive",
    "parallel",
    "herd",
    "scale",
];

/// Command line: `[--quick] [--only a,b] [--rounds N]`. `cargo bench` adds `--bench`, which is
/// ignored like anything else unknown.
fn parse_args() -> Result<(Plan, Vec<String>)> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut plan = Plan::new(args.iter().any(|a| a == "--quick"));
    let mut only: Vec<String> = SCENARIOS.iter().map(|s| s.to_string()).collect();
    let value = |i: usize, name: &str| -> Result<String> {
        let arg = &args[i];
        match arg.split_once('=') {
            Some((_, v)) => Ok(v.to_string()),
            None => args
                .get(i + 1)
                .cloned()
                .ok_or_else(|| format!("{name} needs a value").into()),
        }
    };
    for (i, arg) in args.iter().enumerate() {
        if arg == "--only" || arg.starts_with("--only=") {
            only = value(i, "--only")?.split(',').map(str::to_string).collect();
            if let Some(bad) = only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                return Err(
                    format!("unknown scenario {bad:?}; known: {}", SCENARIOS.join(", ")).into(),
                );
            }
        } else if arg == "--rounds" || arg.starts_with("--rounds=") {
            plan.rounds = value(i, "--rounds")?.parse()?;
        }
    }
    Ok((plan, only))
}

fn main() -> Result<()> {
    let (plan, only) = parse_args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(plan, only))
}

async fn run(plan: Plan, only: Vec<String>) -> Result<()> {
    let runs = |name: &str| only.iter().any(|s| s == name);
    let wall = Instant::now();
    progress(format!(
        "starting a 3-node ZooKeeper ensemble ({} run)",
        if plan.quick { "quick" } else { "full" }
    ));
    let zk = Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(SESSION_TIMEOUT * 2)
        .start()
        .await?;
    let leader = zk.wait_for_leader(Duration::from_secs(30)).await?;
    // Clients usually talk to a follower: its writes are forwarded to the leader.
    let node = (leader + 1) % zk.len();
    let bench = Bench {
        connect: zk.node_connect_string(node),
        base: format!("/bench-{}", uuid::Uuid::new_v4().simple()),
        zk,
        node,
        plan,
    };
    let machine = machine(&bench).await;

    let mut kazoo = if runs("uncontended") || runs("handoff") {
        Kazoo::start(&bench).await?
    } else {
        None
    };
    // The idle sessions sit out scenarios 1 and 2, so their window costs no extra time.
    let idle = if runs("keepalive") {
        Some(Idle::start(&bench).await?)
    } else {
        None
    };
    let mut report = Report::default();
    if runs("uncontended") {
        uncontended(&bench, kazoo.as_mut(), &mut report).await?;
    }
    if runs("handoff") {
        handoff(&bench, kazoo.as_mut(), &mut report).await?;
    }
    if let Some(kazoo) = kazoo.take() {
        kazoo.quit().await;
    }
    if let Some(idle) = idle {
        idle.finish(&bench, &mut report).await?;
    }
    if runs("parallel") {
        parallel(&bench, &mut report).await?;
    }
    if runs("herd") {
        herd(&bench, &mut report).await?;
    }
    if runs("scale") {
        scale(&bench, &mut report).await?;
    }

    report.set("machine", machine.clone());
    report.set(
        "run",
        json!({
            "quick": bench.plan.quick,
            "rounds": bench.plan.rounds,
            "scenarios": only,
            "seconds": round3(wall.elapsed().as_secs_f64()),
            "server": bench.node,
            "session_timeout_s": SESSION_TIMEOUT.as_secs(),
            "tick_ms": TICK.as_millis() as u64,
        }),
    );
    report.print(&machine, &bench.plan, wall.elapsed());
    let path = report.write()?;
    progress(format!(
        "wrote {} ({:.0} s in all)",
        path.display(),
        wall.elapsed().as_secs_f64()
    ));
    Ok(())
}

fn progress(message: impl AsRef<str>) {
    eprintln!("[bench lock] {}", message.as_ref());
}

// ---------------------------------------------------------------------------------------------
// The ensemble, sessions, and counting at the server
// ---------------------------------------------------------------------------------------------

struct Bench {
    zk: Ensemble,
    /// The one server every measured session talks to, so `cons` there sees all requests.
    node: usize,
    connect: String,
    /// A directory of this run's own.
    base: String,
    plan: Plan,
}

impl Bench {
    fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    async fn session(&self) -> Result<Session> {
        Ok(Session::connect(
            &self.connect,
            SessionOptions::new().session_timeout(SESSION_TIMEOUT),
        )
        .await?)
    }

    async fn sessions(&self, n: usize) -> Result<Vec<Session>> {
        futures::future::try_join_all((0..n).map(|_| self.session())).await
    }

    async fn raw(&self) -> Result<zkc::Client> {
        Ok(zkc::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(&self.connect)
            .await?)
    }

    async fn raws(&self, n: usize) -> Result<Vec<zkc::Client>> {
        futures::future::try_join_all((0..n).map(|_| self.raw())).await
    }

    /// Requests the server received so far from each of `sessions` (`recved` in `cons`).
    async fn received_each(&self, sessions: &[i64]) -> Result<Vec<u64>> {
        let connections = self.zk.connections(self.node).await?;
        let by_session: HashMap<i64, u64> = connections
            .iter()
            .filter_map(|c| Some((c.session_id?, c.received)))
            .collect();
        sessions
            .iter()
            .map(|id| {
                by_session
                    .get(id)
                    .copied()
                    .ok_or_else(|| format!("session {id:#x} is not in `cons`").into())
            })
            .collect()
    }

    async fn received(&self, sessions: &[i64]) -> Result<u64> {
        Ok(self.received_each(sessions).await?.iter().sum())
    }

    /// Runs one arm's `work`, adding the requests the server received from `sessions` and
    /// the CPU time `cpu` spent meanwhile.
    async fn measure(
        &self,
        sessions: &[i64],
        cpu: Cpu,
        work: impl Future<Output = Result<Samples>>,
    ) -> Result<Samples> {
        let before = self.received(sessions).await?;
        let cpu_before = cpu.time();
        let mut samples = work.await?;
        samples.cpu = cpu.time().saturating_sub(cpu_before);
        samples.requests = self.received(sessions).await? - before;
        Ok(samples)
    }

    /// [`measure`](Self::measure) for an arm on zkfence sessions; also counts their lease-clock
    /// syncs.
    async fn measure_ours(
        &self,
        sessions: &[Session],
        work: impl Future<Output = Result<Samples>>,
    ) -> Result<Samples> {
        touch(sessions.iter().map(Session::client)).await?;
        let before = total_metrics(sessions).keepalives;
        let mut samples = self
            .measure(&ids_of_sessions(sessions), Cpu::Bench, work)
            .await?;
        samples.keepalives = total_metrics(sessions).keepalives - before;
        Ok(samples)
    }

    /// [`measure`](Self::measure) for an arm on plain `zookeeper-client` clients.
    async fn measure_raw(
        &self,
        clients: &[zkc::Client],
        work: impl Future<Output = Result<Samples>>,
    ) -> Result<Samples> {
        touch(clients).await?;
        self.measure(&ids_of_clients(clients), Cpu::Bench, work)
            .await
    }
}

/// Whose CPU time an arm spends.
#[derive(Debug, Clone, Copy)]
enum Cpu {
    /// This process (zkfence and zookeeper-client run here).
    Bench,
    /// The Kazoo driver.
    Child(u32),
}

impl Cpu {
    fn time(self) -> Duration {
        match self {
            Cpu::Bench => {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
                let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
                if rc != 0 {
                    return Duration::ZERO;
                }
                Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
            }
            Cpu::Child(pid) => {
                // utime + stime (fields 14 and 15 of /proc/PID/stat), in clock ticks; they
                // include the driver's threads that have ended.
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let fields: Vec<&str> = stat
                    .rsplit_once(") ")
                    .map(|(_, r)| r.split_whitespace().collect())
                    .unwrap_or_default();
                let ticks: u64 = fields
                    .get(11..13)
                    .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
                // SAFETY: sysconf has no preconditions.
                let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
                Duration::from_nanos(ticks * 1_000_000_000 / per_s)
            }
        }
    }
}

/// One read on each client right before a `cons` snapshot: a session idle for a while (its
/// arm waited for the others) would otherwise send its heartbeat ping at the start of the
/// measured window.
async fn touch(clients: impl IntoIterator<Item = &zkc::Client>) -> Result<()> {
    futures::future::try_join_all(clients.into_iter().map(|c| c.check_stat("/"))).await?;
    Ok(())
}

fn ids_of_sessions(sessions: &[Session]) -> Vec<i64> {
    sessions.iter().map(Session::id).collect()
}

fn ids_of_clients(clients: &[zkc::Client]) -> Vec<i64> {
    clients.iter().map(|c| c.session_id().0).collect()
}

fn total_metrics(sessions: &[Session]) -> SessionMetrics {
    let mut sum = SessionMetrics::default();
    for m in sessions.iter().map(Session::metrics) {
        sum.creates += m.creates;
        sum.deletes += m.deletes;
        sum.listings += m.listings;
        sum.watches += m.watches;
        sum.wakeups += m.wakeups;
        sum.keepalives += m.keepalives;
    }
    sum
}

fn any_acls() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())
}

fn ephemeral_sequential() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all())
}

/// Creates `dir` and its parents if missing (setup, never measured).
async fn mkdir(client: &zkc::Client, dir: &str) -> Result<()> {
    match client.mkdir(dir, &any_acls()).await {
        Ok(()) | Err(zkc::Error::NodeExists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Samples and statistics
// ---------------------------------------------------------------------------------------------

/// What one arm did in one round.
#[derive(Debug, Clone, Default)]
struct Samples {
    latencies: Vec<Duration>,
    ops: usize,
    elapsed: Duration,
    /// Requests the server received from the arm's sessions, if counted.
    requests: u64,
    /// CPU time the client process spent meanwhile (this process, or the Kazoo driver).
    cpu: Duration,
    /// Lease-clock syncs zkfence's sessions sent meanwhile (counted in `requests`).
    keepalives: u64,
}

impl Samples {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn p50(&self) -> Duration {
        percentile(&self.latencies, 0.50)
    }
}

/// Every round of one arm.
#[derive(Debug, Clone, Default)]
struct Arm {
    rounds: Vec<Samples>,
}

impl Arm {
    fn push(&mut self, samples: Samples) {
        self.rounds.push(samples);
    }

    fn latencies(&self) -> Vec<Duration> {
        self.rounds
            .iter()
            .flat_map(|r| r.latencies.iter().copied())
            .collect()
    }

    /// Percentile of the latencies of all rounds pooled, in ms.
    fn pct_ms(&self, q: f64) -> f64 {
        ms(percentile(&self.latencies(), q))
    }

    /// Median over rounds of ops per second.
    fn rate(&self) -> f64 {
        spread(&self.rounds.iter().map(Samples::rate).collect::<Vec<_>>()).median
    }

    /// Requests counted at the server per op, over all rounds.
    fn requests_per_op(&self) -> f64 {
        let requests: u64 = self.rounds.iter().map(|r| r.requests).sum();
        requests as f64 / self.ops() as f64
    }

    /// Lease-clock syncs sent during the measured rounds.
    fn keepalives(&self) -> u64 {
        self.rounds.iter().map(|r| r.keepalives).sum()
    }

    /// Requests per op less the lease-clock syncs, which are per session and period, not per op.
    fn requests_per_op_without_keepalives(&self) -> f64 {
        let requests: u64 = self.rounds.iter().map(|r| r.requests).sum();
        requests.saturating_sub(self.keepalives()) as f64 / self.ops() as f64
    }

    fn ops(&self) -> usize {
        self.rounds.iter().map(|r| r.ops).sum()
    }

    /// Client CPU time per op, in microseconds, over all rounds.
    fn cpu_us_per_op(&self) -> f64 {
        let cpu: Duration = self.rounds.iter().map(|r| r.cpu).sum();
        cpu.as_secs_f64() * 1e6 / self.ops() as f64
    }

    fn ran(&self) -> bool {
        !self.rounds.is_empty()
    }

    /// Table cells; empty for an arm that did not run (Kazoo without Kazoo).
    fn cell(&self, text: impl FnOnce(&Arm) -> String) -> String {
        if self.ran() {
            text(self)
        } else {
            String::new()
        }
    }

    fn latency_cell(&self) -> String {
        self.cell(|a| format!("{:.2} / {:.2}", a.pct_ms(0.5), a.pct_ms(0.99)))
    }

    fn rate_cell(&self) -> String {
        self.cell(|a| format!("{:.0}", a.rate()))
    }

    fn requests_cell(&self) -> String {
        self.cell(|a| format!("{:.2}", a.requests_per_op()))
    }

    fn cpu_cell(&self) -> String {
        self.cell(|a| format!("{:.0}", a.cpu_us_per_op()))
    }

    /// Everything about this arm, for the JSON file (null if it did not run).
    fn json(&self) -> Value {
        if !self.ran() {
            return Value::Null;
        }
        json!({
            "ops": self.ops(),
            "p50_ms": round3(self.pct_ms(0.5)),
            "p99_ms": round3(self.pct_ms(0.99)),
            "per_s": round3(self.rate()),
            "requests_per_op": round3(self.requests_per_op()),
            "cpu_us_per_op": round3(self.cpu_us_per_op()),
            "keepalives": self.keepalives(),
            "rounds": self.rounds_json(),
        })
    }

    /// Each round's figures.
    fn rounds_json(&self) -> Value {
        Value::Array(
            self.rounds
                .iter()
                .map(|r| {
                    json!({
                        "p50_ms": round3(ms(r.p50())),
                        "per_s": round3(r.rate()),
                        "ops": r.ops,
                        "requests": r.requests,
                        "cpu_ms": round3(ms(r.cpu)),
                    })
                })
                .collect(),
        )
    }
}

/// Median, min and max of per-round ratios `f(a) / f(b)`.
fn paired(a: &Arm, b: &Arm, f: impl Fn(&Samples) -> f64) -> Spread {
    let ratios: Vec<f64> = a
        .rounds
        .iter()
        .zip(&b.rounds)
        .map(|(x, y)| f(x) / f(y))
        .collect();
    spread(&ratios)
}

fn percentile(samples: &[Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    // Nearest rank.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn cell(&self) -> String {
        format!("{:.2} ({:.2}–{:.2})", self.median, self.min, self.max)
    }

    fn json(&self) -> Value {
        json!({ "median": round3(self.median), "min": round3(self.min), "max": round3(self.max) })
    }
}

fn spread(values: &[f64]) -> Spread {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Spread {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Spread {
        median,
        min: v[0],
        max: v[n - 1],
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Rotates the arms so that each goes first equally often: the first arm of a round meets a
/// different disk state than the last.
fn order<T: Copy>(arms: &[T], round: usize) -> Vec<T> {
    let mut v = arms.to_vec();
    let n = v.len();
    v.rotate_left(round % n);
    v
}

// ---------------------------------------------------------------------------------------------
// The peer: zookeeper-client's Client::lock
// ---------------------------------------------------------------------------------------------

fn peer_options() -> Result<zkc::LockOptions<'static>> {
    Ok(zkc::LockOptions::new(zkc::Acls::anyone_all())
        .with_ancestor_options(zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all()))?)
}

/// One acquire+release with `Client::lock` and the curator prefix.
async fn peer_acquire<'c>(client: &'c zkc::Client, dir: &str) -> Result<zkc::LockClient<'c>> {
    Ok(client
        .lock(
            zkc::LockPrefix::new_curator(dir, "lock-")?,
            b"",
            peer_options()?,
        )
        .await?)
}

/// Releases like `Lease::release`: deletes the node and waits for the answer. (Dropping a
/// `LockClient` only spawns the delete, so a release could not be awaited; the guard is
/// forgotten, which leaks only its path string.)
async fn peer_release(client: &zkc::Client, lock: zkc::LockClient<'_>) -> Result<()> {
    let path = lock.lock_path().to_owned();
    std::mem::forget(lock);
    client.delete(&path, None).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 1. Uncontended
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Uncontended {
    Ours,
    Floor,
    Peer,
    Kazoo,
}

async fn uncontended(
    bench: &Bench,
    mut kazoo: Option<&mut Kazoo>,
    report: &mut Report,
) -> Result<()> {
    let plan = &bench.plan;
    progress(format!(
        "1/6 uncontended: {} rounds of {} acquire+release cycles per arm",
        plan.rounds, plan.uncontended_cycles
    ));
    let session = bench.session().await?;
    let floor_client = bench.raw().await?;
    let peer_client = bench.raw().await?;
    let (ours_dir, floor_dir, peer_dir, kazoo_dir) = (
        bench.path("uncontended/ours"),
        bench.path("uncontended/floor"),
        bench.path("uncontended/peer"),
        bench.path("uncontended/kazoo"),
    );
    let lock = session.lock(&ours_dir);
    mkdir(&floor_client, &floor_dir).await?;

    // Warm-up, one round's worth per arm (the servers' JIT and the directories), not measured:
    // without it the first round is several times slower than the rest.
    let n = plan.uncontended_cycles;
    cycles_ours(&lock, n).await?;
    cycles_floor(&floor_client, &floor_dir, n).await?;
    cycles_peer(&peer_client, &peer_dir, n).await?;
    if let Some(k) = kazoo.as_deref_mut() {
        k.uncontended(&kazoo_dir, n).await?;
    }

    let mut arms: Vec<Uncontended> = vec![Uncontended::Ours, Uncontended::Floor, Uncontended::Peer];
    if kazoo.is_some() {
        arms.push(Uncontended::Kazoo);
    }
    let (mut ours, mut floor, mut peer, mut kz) = (
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
    );
    for round in 0..plan.rounds {
        for arm in order(&arms, round) {
            match arm {
                Uncontended::Ours => {
                    let work = cycles_ours(&lock, n);
                    ours.push(
                        bench
                            .measure_ours(std::slice::from_ref(&session), work)
                            .await?,
                    );
                }
                Uncontended::Floor => {
                    let work = cycles_floor(&floor_client, &floor_dir, n);
                    floor.push(
                        bench
                            .measure_raw(std::slice::from_ref(&floor_client), work)
                            .await?,
                    );
                }
                Uncontended::Peer => {
                    let work = cycles_peer(&peer_client, &peer_dir, n);
                    peer.push(
                        bench
                            .measure_raw(std::slice::from_ref(&peer_client), work)
                            .await?,
                    );
                }
                Uncontended::Kazoo => {
                    let k = kazoo.as_deref_mut().expect("kazoo arm only with kazoo");
                    k.touch().await?;
                    let (ids, cpu) = ([k.single], Cpu::Child(k.pid));
                    kz.push(
                        bench
                            .measure(&ids, cpu, k.uncontended(&kazoo_dir, n))
                            .await?,
                    );
                }
            }
        }
    }

    let ratio = paired(&ours, &floor, |s| ms(s.p50()));
    let rpc = ours.requests_per_op();
    report.goal(
        "uncontended.ratio_p50_vs_floor",
        ratio.median,
        "<= 1.05",
        ratio.median <= 1.05,
    );
    report.goal(
        "uncontended.requests_per_cycle",
        rpc,
        "= 3",
        (rpc - 3.0).abs() < 0.005,
    );
    let peer_vs_floor = paired(&peer, &floor, |s| ms(s.p50()));
    let kazoo_vs_floor = paired(&kz, &floor, |s| ms(s.p50()));
    report.set(
        "uncontended",
        json!({
            "cycles": ours.ops(),
            "p50_ms": round3(ours.pct_ms(0.5)),
            "p99_ms": round3(ours.pct_ms(0.99)),
            "cycles_per_s": round3(ours.rate()),
            "requests_per_cycle": round3(rpc),
            "keepalives_during": ours.keepalives(),
            "requests_per_cycle_without_keepalives": round3(ours.requests_per_op_without_keepalives()),
            "ratio_p50_vs_floor": round3(ratio.median),
            "ratio_p50_vs_floor_range": [round3(ratio.min), round3(ratio.max)],
            "floor_p50_ms": round3(floor.pct_ms(0.5)),
            "floor_p99_ms": round3(floor.pct_ms(0.99)),
            "floor_cycles_per_s": round3(floor.rate()),
            "floor_requests_per_cycle": round3(floor.requests_per_op()),
            "peer_p50_ms": round3(peer.pct_ms(0.5)),
            "peer_p99_ms": round3(peer.pct_ms(0.99)),
            "peer_cycles_per_s": round3(peer.rate()),
            "peer_requests_per_cycle": round3(peer.requests_per_op()),
            "peer_ratio_p50_vs_floor": peer_vs_floor.json(),
            "arms": { "ours": ours.json(), "floor": floor.json(), "peer": peer.json(), "kazoo": kz.json() },
        }),
    );
    if kz.ran() {
        report.set_in(
            "kazoo",
            "uncontended",
            json!({
                "p50_ms": round3(kz.pct_ms(0.5)),
                "p99_ms": round3(kz.pct_ms(0.99)),
                "cycles_per_s": round3(kz.rate()),
                "requests_per_cycle": round3(kz.requests_per_op()),
                "ratio_p50_vs_floor": kazoo_vs_floor.json(),
            }),
        );
    }

    let scenario = "1 uncontended";
    report.row(
        Row::new(scenario, "acquire+release p50 / p99 (ms)")
            .ours(ours.latency_cell())
            .peer(peer.latency_cell())
            .kazoo(kz.latency_cell())
            .floor(floor.latency_cell())
            .ratio(format!("ours/floor p50 {}", ratio.cell()))
            .goal(mark("≤ 1.05", ratio.median <= 1.05)),
    );
    report.row(
        Row::new(scenario, "cycles/s (median of rounds)")
            .ours(ours.rate_cell())
            .peer(peer.rate_cell())
            .kazoo(kz.rate_cell())
            .floor(floor.rate_cell())
            .ratio(format!("peer/floor p50 {}", peer_vs_floor.cell())),
    );
    report.row(
        Row::new(scenario, "requests per cycle (at the server)")
            .ours(ours.requests_cell())
            .peer(peer.requests_cell())
            .kazoo(kz.requests_cell())
            .floor(floor.requests_cell())
            .ratio(kz.cell(|_| format!("kazoo/floor p50 {}", kazoo_vs_floor.cell())))
            .goal(mark("= 3", (rpc - 3.0).abs() < 0.005)),
    );
    report.row(
        Row::new(scenario, "client CPU per cycle (µs)")
            .ours(ours.cpu_cell())
            .peer(peer.cpu_cell())
            .kazoo(kz.cpu_cell())
            .floor(floor.cpu_cell()),
    );
    Ok(())
}

async fn cycles_ours(lock: &zkfence::Lock, n: usize) -> Result<Samples> {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        lock.acquire().await?.release().await?;
        latencies.push(t.elapsed());
    }
    Ok(Samples {
        latencies,
        ops: n,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

/// The protocol floor: create ephemeral-sequential (a Curator-style name, as ours), list the
/// directory to see who is first, delete.
async fn cycles_floor(client: &zkc::Client, dir: &str, n: usize) -> Result<Samples> {
    let options = ephemeral_sequential();
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
        let (_, sequence) = client.create(&prefix, b"", &options).await?;
        client.list_children(dir).await?;
        client.delete(&format!("{prefix}{sequence}"), None).await?;
        latencies.push(t.elapsed());
    }
    Ok(Samples {
        latencies,
        ops: n,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

async fn cycles_peer(client: &zkc::Client, dir: &str, n: usize) -> Result<Samples> {
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let lock = peer_acquire(client, dir).await?;
        peer_release(client, lock).await?;
        latencies.push(t.elapsed());
    }
    Ok(Samples {
        latencies,
        ops: n,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------------------------
// 2. Contended handoff
// ---------------------------------------------------------------------------------------------

/// Shared by the contenders of one handoff round: counts grants and measures the time from a
/// holder calling release until the next grant returns (one process, one clock).
struct Relay {
    target: usize,
    grants: AtomicUsize,
    released_at: Mutex<Option<Instant>>,
    latencies: Mutex<Vec<Duration>>,
}

impl Relay {
    fn new(target: usize) -> Arc<Relay> {
        Arc::new(Relay {
            target,
            grants: AtomicUsize::new(0),
            released_at: Mutex::new(None),
            latencies: Mutex::new(Vec::with_capacity(target + 16)),
        })
    }

    /// Whether to queue again. Contenders already queued when the target is reached still
    /// get their grant (and release it), so nobody is left waiting.
    fn more(&self) -> bool {
        self.grants.load(Ordering::SeqCst) < self.target
    }

    /// Right after a grant returned.
    fn granted(&self) {
        let now = Instant::now();
        if let Some(released) = self.released_at.lock().unwrap().take() {
            self.latencies.lock().unwrap().push(now - released);
        }
        self.grants.fetch_add(1, Ordering::SeqCst);
    }

    /// Right before the holder releases.
    fn releasing(&self) {
        *self.released_at.lock().unwrap() = Some(Instant::now());
    }

    fn samples(&self, elapsed: Duration) -> Samples {
        Samples {
            latencies: self.latencies.lock().unwrap().clone(),
            ops: self.grants.load(Ordering::SeqCst),
            elapsed,
            ..Default::default()
        }
    }
}

async fn join_all_ok(mut tasks: JoinSet<Result<()>>) -> Result<()> {
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    Ok(())
}

/// `hold`: how long each holder keeps the lock before releasing it.
async fn handoff_ours(
    sessions: &[Session],
    dir: &str,
    target: usize,
    hold: Duration,
) -> Result<Samples> {
    let relay = Relay::new(target);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for session in sessions {
        let lock = session.lock(dir);
        let relay = relay.clone();
        tasks.spawn(async move {
            while relay.more() {
                let lease = lock.acquire().await?;
                relay.granted();
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                relay.releasing();
                lease.release().await?;
            }
            Ok(())
        });
    }
    join_all_ok(tasks).await?;
    Ok(relay.samples(start.elapsed()))
}

async fn handoff_peer(clients: &[zkc::Client], dir: &str, target: usize) -> Result<Samples> {
    let relay = Relay::new(target);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for client in clients {
        let client = client.clone();
        let relay = relay.clone();
        let dir = dir.to_string();
        tasks.spawn(async move {
            while relay.more() {
                let lock = peer_acquire(&client, &dir).await?;
                relay.granted();
                relay.releasing();
                peer_release(&client, lock).await?;
            }
            Ok(())
        });
    }
    join_all_ok(tasks).await?;
    Ok(relay.samples(start.elapsed()))
}

/// The protocol done with raw `zookeeper-client` calls and nothing else: create, list, watch
/// the predecessor, hold without listing again when the predecessor was the head of our
/// listing. Run in the same closed loop as ours, it is the floor under the same load: what is
/// left between it and ours is the library's own cost.
async fn recipe_acquire(client: &zkc::Client, dir: &str) -> Result<String> {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, sequence) = client.create(&prefix, b"", &ephemeral_sequential()).await?;
    let (me, node) = (sequence.into_i64(), format!("{prefix}{sequence}"));
    loop {
        let mut queue: Vec<(i64, String)> = client
            .list_children(dir)
            .await?
            .into_iter()
            .filter_map(|name| Some((name.get(name.len().checked_sub(10)?..)?.parse().ok()?, name)))
            .collect();
        queue.sort_unstable();
        let index = queue
            .iter()
            .position(|(s, _)| *s == me)
            .ok_or("our node vanished")?;
        if index == 0 {
            return Ok(node);
        }
        let (stat, watcher) = client
            .check_and_watch_stat(&format!("{dir}/{}", queue[index - 1].1))
            .await?;
        if stat.is_some()
            && watcher.changed().await.event_type == zkc::EventType::NodeDeleted
            && index == 1
        {
            return Ok(node);
        }
    }
}

async fn handoff_recipe(clients: &[zkc::Client], dir: &str, target: usize) -> Result<Samples> {
    let relay = Relay::new(target);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for client in clients {
        let client = client.clone();
        let relay = relay.clone();
        let dir = dir.to_string();
        tasks.spawn(async move {
            while relay.more() {
                let node = recipe_acquire(&client, &dir).await?;
                relay.granted();
                relay.releasing();
                client.delete(&node, None).await?;
            }
            Ok(())
        });
    }
    join_all_ok(tasks).await?;
    Ok(relay.samples(start.elapsed()))
}

/// The handoff's latency floor: session A deletes a node that session B watches; the time
/// from the delete call until B's `NodeDeleted` fires (one quorum write plus one
/// notification). The second samples add the getChildren a waiter deeper than second in line
/// must send before it knows it holds the lock. With `reenqueue`, A also creates a new
/// queue node right behind its delete, as a releaser in the closed loop does when it queues
/// again: the third samples show what that write does to the getChildren.
async fn notify_floor(
    a: &zkc::Client,
    b: &zkc::Client,
    dir: &str,
    n: usize,
    reenqueue: bool,
) -> Result<(Samples, Samples)> {
    let persistent = any_acls();
    let (mut notified, mut listed) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let start = Instant::now();
    for _ in 0..n {
        let path = format!("{dir}/{}", uuid::Uuid::new_v4().simple());
        a.create(&path, b"", &persistent).await?;
        let (stat, watcher) = b.check_and_watch_stat(&path).await?;
        if stat.is_none() {
            return Err(format!("{path} vanished before the delete").into());
        }
        let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
        let options = ephemeral_sequential();
        let t0 = Instant::now();
        // Requests are sent when `delete`/`create` are called, not when polled.
        let delete = a.delete(&path, None);
        let again = reenqueue.then(|| a.create(&prefix, b"", &options));
        let event = watcher.changed().await;
        let t1 = Instant::now();
        b.list_children(dir).await?;
        let t2 = Instant::now();
        delete.await?;
        if let Some(create) = again {
            let (_, sequence) = create.await?;
            a.delete(&format!("{prefix}{sequence}"), None).await?;
        }
        if event.event_type != zkc::EventType::NodeDeleted {
            return Err(format!("expected NodeDeleted on {path}, got {event:?}").into());
        }
        notified.push(t1 - t0);
        listed.push(t2 - t0);
    }
    let elapsed = start.elapsed();
    Ok((
        Samples {
            latencies: notified,
            ops: n,
            elapsed,
            ..Default::default()
        },
        Samples {
            latencies: listed,
            ops: n,
            elapsed,
            ..Default::default()
        },
    ))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Handoff {
    Ours,
    /// Ours with two sessions: every waiter lists while second in line.
    Pair,
    Peer,
    Recipe,
    Floor,
    Kazoo,
}

async fn handoff(bench: &Bench, mut kazoo: Option<&mut Kazoo>, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    progress(format!(
        "2/6 handoff: {} rounds of {} sessions passing one lock around {} times per arm",
        plan.rounds, plan.contenders, plan.handoffs
    ));
    let sessions = bench.sessions(plan.contenders).await?;
    let peers = bench.raws(plan.contenders).await?;
    let recipes = bench.raws(plan.contenders).await?;
    let floor_pair = bench.raws(2).await?;
    let dir = |arm: &str| bench.path(&format!("handoff/{arm}"));
    let (ours_dir, pair_dir, peer_dir, recipe_dir, floor_dir, kazoo_dir) = (
        dir("ours"),
        dir("pair"),
        dir("peer"),
        dir("recipe"),
        dir("floor"),
        dir("kazoo"),
    );
    mkdir(&floor_pair[0], &floor_dir).await?;
    mkdir(&floor_pair[0], &recipe_dir).await?;
    // The pair's holder holds a little, so that the other session is already queued (second in
    // line, watching the holder's node) when the release comes: the case where the protocol
    // grants on the notification alone.
    const PAIR_HOLD: Duration = Duration::from_millis(5);
    let pair_handoffs = plan.handoffs / 4;

    // Warm-up, one round's worth per arm, not measured.
    handoff_ours(&sessions, &ours_dir, plan.handoffs, Duration::ZERO).await?;
    handoff_ours(&sessions[..2], &pair_dir, pair_handoffs, PAIR_HOLD).await?;
    handoff_peer(&peers, &peer_dir, plan.handoffs).await?;
    handoff_recipe(&recipes, &recipe_dir, plan.handoffs).await?;
    let floor = |reenqueue| {
        let (a, b) = (&floor_pair[0], &floor_pair[1]);
        notify_floor(a, b, &floor_dir, plan.floor_samples, reenqueue)
    };
    floor(true).await?;
    if let Some(k) = kazoo.as_deref_mut() {
        k.contended(&kazoo_dir, plan.handoffs).await?;
    }

    let mut arms = vec![
        Handoff::Ours,
        Handoff::Pair,
        Handoff::Peer,
        Handoff::Recipe,
        Handoff::Floor,
    ];
    if kazoo.is_some() {
        arms.push(Handoff::Kazoo);
    }
    let (mut ours, mut pair, mut peer, mut recipe, mut kz) = (
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
    );
    let (mut notified, mut listed, mut busy) = (Arm::default(), Arm::default(), Arm::default());
    for round in 0..plan.rounds {
        for arm in order(&arms, round) {
            match arm {
                Handoff::Ours => {
                    let work = handoff_ours(&sessions, &ours_dir, plan.handoffs, Duration::ZERO);
                    ours.push(bench.measure_ours(&sessions, work).await?);
                }
                Handoff::Pair => {
                    let work = handoff_ours(&sessions[..2], &pair_dir, pair_handoffs, PAIR_HOLD);
                    pair.push(bench.measure_ours(&sessions[..2], work).await?);
                }
                Handoff::Peer => {
                    let work = handoff_peer(&peers, &peer_dir, plan.handoffs);
                    peer.push(bench.measure_raw(&peers, work).await?);
                }
                Handoff::Recipe => {
                    let work = handoff_recipe(&recipes, &recipe_dir, plan.handoffs);
                    recipe.push(bench.measure_raw(&recipes, work).await?);
                }
                Handoff::Floor => {
                    let (n, l) = floor(false).await?;
                    notified.push(n);
                    listed.push(l);
                    busy.push(floor(true).await?.1);
                }
                Handoff::Kazoo => {
                    let k = kazoo.as_deref_mut().expect("kazoo arm only with kazoo");
                    k.touch().await?;
                    let (ids, cpu) = (k.contended.clone(), Cpu::Child(k.pid));
                    kz.push(
                        bench
                            .measure(&ids, cpu, k.contended(&kazoo_dir, plan.handoffs))
                            .await?,
                    );
                }
            }
        }
    }

    let vs_peer = paired(&ours, &peer, Samples::rate);
    let vs_floor = paired(&ours, &notified, |s| ms(s.p50()));
    let vs_relist = paired(&ours, &listed, |s| ms(s.p50()));
    let vs_busy = paired(&ours, &busy, |s| ms(s.p50()));
    let pair_vs_floor = paired(&pair, &notified, |s| ms(s.p50()));
    let peer_vs_floor = paired(&peer, &notified, |s| ms(s.p50()));
    let vs_recipe = paired(&ours, &recipe, Samples::rate);
    let latency_vs_recipe = paired(&ours, &recipe, |s| ms(s.p50()));
    let (rpc, peer_rpc) = (ours.requests_per_op(), peer.requests_per_op());
    report.goal(
        "handoff.ratio_vs_peer",
        vs_peer.median,
        ">= 1.0",
        vs_peer.median >= 1.0,
    );
    report.goal(
        "handoff.requests_per_cycle",
        rpc,
        "<= peer",
        rpc <= peer_rpc,
    );
    report.goal(
        "handoff.latency_ratio_vs_floor",
        vs_floor.median,
        "<= 1.1",
        vs_floor.median <= 1.1,
    );
    report.set(
        "handoff",
        json!({
            "contenders": plan.contenders,
            "handoffs": ours.ops(),
            "handoffs_per_s": round3(ours.rate()),
            "peer_handoffs_per_s": round3(peer.rate()),
            "ratio_vs_peer": round3(vs_peer.median),
            "ratio_vs_peer_range": [round3(vs_peer.min), round3(vs_peer.max)],
            "p50_ms": round3(ours.pct_ms(0.5)),
            "p99_ms": round3(ours.pct_ms(0.99)),
            "peer_p50_ms": round3(peer.pct_ms(0.5)),
            "peer_p99_ms": round3(peer.pct_ms(0.99)),
            "floor_p50_ms": round3(notified.pct_ms(0.5)),
            "floor_p99_ms": round3(notified.pct_ms(0.99)),
            "floor_relist_p50_ms": round3(listed.pct_ms(0.5)),
            "floor_relist_p99_ms": round3(listed.pct_ms(0.99)),
            "latency_ratio_vs_floor": round3(vs_floor.median),
            "latency_ratio_vs_floor_range": [round3(vs_floor.min), round3(vs_floor.max)],
            "latency_ratio_vs_floor_relist": vs_relist.json(),
            "floor_relist_reenqueue_p50_ms": round3(busy.pct_ms(0.5)),
            "floor_relist_reenqueue_p99_ms": round3(busy.pct_ms(0.99)),
            "latency_ratio_vs_floor_relist_reenqueue": vs_busy.json(),
            "peer_latency_ratio_vs_floor": peer_vs_floor.json(),
            "requests_per_cycle": round3(rpc),
            "peer_requests_per_cycle": round3(peer_rpc),
            "keepalives_during": ours.keepalives(),
            "requests_per_cycle_without_keepalives": round3(ours.requests_per_op_without_keepalives()),
            "pair_p50_ms": round3(pair.pct_ms(0.5)),
            "pair_p99_ms": round3(pair.pct_ms(0.99)),
            "pair_latency_ratio_vs_floor": pair_vs_floor.json(),
            "pair_requests_per_cycle": round3(pair.requests_per_op()),
            "pair_requests_per_cycle_without_keepalives": round3(pair.requests_per_op_without_keepalives()),
            "recipe_handoffs_per_s": round3(recipe.rate()),
            "recipe_p50_ms": round3(recipe.pct_ms(0.5)),
            "recipe_p99_ms": round3(recipe.pct_ms(0.99)),
            "recipe_requests_per_cycle": round3(recipe.requests_per_op()),
            "ratio_vs_recipe": vs_recipe.json(),
            "latency_ratio_vs_recipe": latency_vs_recipe.json(),
        }),
    );
    // Merged into the same object (one `json!` this long exceeds the macro recursion limit).
    report.set(
        "handoff",
        json!({
            "arms": {
                "ours": ours.json(),
                "pair": pair.json(),
                "peer": peer.json(),
                "recipe": recipe.json(),
                "floor_notified": notified.json(),
                "floor_relisted": listed.json(),
                "floor_relisted_reenqueue": busy.json(),
                "kazoo": kz.json(),
            },
        }),
    );
    let ours_vs_kazoo = paired(&ours, &kz, Samples::rate);
    if kz.ran() {
        report.set_in(
            "kazoo",
            "handoff",
            json!({
                "handoffs_per_s": round3(kz.rate()),
                "p50_ms": round3(kz.pct_ms(0.5)),
                "p99_ms": round3(kz.pct_ms(0.99)),
                "requests_per_cycle": round3(kz.requests_per_op()),
                "ours_ratio_vs_kazoo": ours_vs_kazoo.json(),
            }),
        );
    }

    let scenario = "2 handoff (8 sessions)";
    report.row(
        Row::new(scenario, "handoffs/s (median of rounds)")
            .ours(ours.rate_cell())
            .peer(peer.rate_cell())
            .kazoo(kz.rate_cell())
            .floor(format!("{} (raw-call recipe)", recipe.rate_cell()))
            .ratio(format!("ours/peer {}", vs_peer.cell()))
            .goal(mark("≥ 1.0", vs_peer.median >= 1.0)),
    );
    report.row(
        Row::new(scenario, "release→grant p50 / p99 (ms)")
            .ours(ours.latency_cell())
            .peer(peer.latency_cell())
            .kazoo(kz.latency_cell())
            .floor(format!("{} (delete→watch)", notified.latency_cell()))
            .ratio(format!("ours/floor p50 {}", vs_floor.cell()))
            .goal(mark("≤ 1.1", vs_floor.median <= 1.1)),
    );
    report.row(
        Row::new(scenario, "… 2 sessions, 5 ms holds (waiter 2nd in line)")
            .ours(pair.latency_cell())
            .floor(format!("{} requests/cycle", pair.requests_cell()))
            .ratio(format!("ours/floor p50 {}", pair_vs_floor.cell())),
    );
    report.row(
        Row::new(scenario, "… floor + getChildren (deep waiter)")
            .floor(listed.latency_cell())
            .ratio(format!("ours/that p50 {}", vs_relist.cell())),
    );
    report.row(
        Row::new(scenario, "… floor + getChildren, releaser queues again")
            .floor(busy.latency_cell())
            .ratio(format!("ours/that p50 {}", vs_busy.cell())),
    );
    report.row(
        Row::new(scenario, "… raw-call recipe, same closed loop")
            .floor(recipe.latency_cell())
            .ratio(format!(
                "ours/recipe p50 {}; handoffs/s {}",
                latency_vs_recipe.cell(),
                vs_recipe.cell()
            )),
    );
    report.row(
        Row::new(scenario, "requests per acquire+release (at the server)")
            .ours(ours.requests_cell())
            .peer(peer.requests_cell())
            .kazoo(kz.requests_cell())
            .floor(format!(
                "{} (recipe; 4 if 2nd in line, 5 deeper)",
                recipe.requests_cell()
            ))
            .ratio(kz.cell(|_| format!("ours/kazoo handoffs/s {}", ours_vs_kazoo.cell())))
            .goal(mark("≤ peer", rpc <= peer_rpc)),
    );
    report.row(
        Row::new(scenario, "client CPU per acquire+release (µs)")
            .ours(ours.cpu_cell())
            .peer(peer.cpu_cell())
            .kazoo(kz.cpu_cell())
            .floor(format!("{} (recipe)", recipe.cpu_cell())),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3. Many locks on one session
// ---------------------------------------------------------------------------------------------

async fn parallel_ours(session: &Session, dirs: &[String], cycles: usize) -> Result<Samples> {
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for dir in dirs {
        let lock = session.lock(dir);
        tasks.spawn(async move {
            for _ in 0..cycles {
                lock.acquire().await?.release().await?;
            }
            Ok(())
        });
    }
    join_all_ok(tasks).await?;
    Ok(Samples {
        latencies: vec![],
        ops: dirs.len() * cycles,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

async fn parallel_peer(client: &zkc::Client, dirs: &[String], cycles: usize) -> Result<Samples> {
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for dir in dirs {
        let (client, dir) = (client.clone(), dir.clone());
        tasks.spawn(async move {
            for _ in 0..cycles {
                let lock = peer_acquire(&client, &dir).await?;
                peer_release(&client, lock).await?;
            }
            Ok(())
        });
    }
    join_all_ok(tasks).await?;
    Ok(Samples {
        latencies: vec![],
        ops: dirs.len() * cycles,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

/// The write limit: create ephemeral-sequential + delete, pipelined by all tasks on one
/// connection. With `list`, also the getChildren the lock protocol needs (its floor).
async fn parallel_raw(
    client: &zkc::Client,
    dirs: &[String],
    cycles: usize,
    list: bool,
) -> Result<Samples> {
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for dir in dirs {
        let (client, dir) = (client.clone(), dir.clone());
        tasks.spawn(async move {
            let options = ephemeral_sequential();
            let prefix = format!("{dir}/n-");
            for _ in 0..cycles {
                let (_, sequence) = client.create(&prefix, b"", &options).await?;
                if list {
                    client.list_children(&dir).await?;
                }
                client.delete(&format!("{prefix}{sequence}"), None).await?;
            }
            Ok(())
        });
    }
    join_all_ok(tasks).await?;
    Ok(Samples {
        latencies: vec![],
        ops: dirs.len() * cycles,
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Parallel {
    Ours,
    Peer,
    Raw,
    Floor,
}

async fn parallel(bench: &Bench, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    progress(format!(
        "3/6 parallel: {} rounds of {} tasks on one session, {} cycles each, per arm",
        plan.rounds, plan.parallel_tasks, plan.parallel_cycles
    ));
    let session = bench.session().await?;
    let peer_client = bench.raw().await?;
    let raw_client = bench.raw().await?;
    let floor_client = bench.raw().await?;
    let dirs = |arm: &str| {
        (0..plan.parallel_tasks)
            .map(|i| bench.path(&format!("parallel/{arm}/{i}")))
            .collect::<Vec<_>>()
    };
    let (ours_dirs, peer_dirs, raw_dirs, floor_dirs) =
        (dirs("ours"), dirs("peer"), dirs("raw"), dirs("floor"));
    for dir in raw_dirs.iter().chain(&floor_dirs) {
        mkdir(&raw_client, dir).await?;
    }
    // Warm-up (creates the directories), one round's worth per arm, not measured.
    let k = plan.parallel_cycles;
    parallel_ours(&session, &ours_dirs, k).await?;
    parallel_peer(&peer_client, &peer_dirs, k).await?;
    parallel_raw(&raw_client, &raw_dirs, k, false).await?;
    parallel_raw(&floor_client, &floor_dirs, k, true).await?;

    let (mut ours, mut peer, mut raw, mut floor) = (
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
    );
    let arms = [
        Parallel::Ours,
        Parallel::Peer,
        Parallel::Raw,
        Parallel::Floor,
    ];
    for round in 0..plan.rounds {
        for arm in order(&arms, round) {
            match arm {
                Parallel::Ours => {
                    let work = parallel_ours(&session, &ours_dirs, k);
                    ours.push(
                        bench
                            .measure_ours(std::slice::from_ref(&session), work)
                            .await?,
                    );
                }
                Parallel::Peer => {
                    let work = parallel_peer(&peer_client, &peer_dirs, k);
                    peer.push(
                        bench
                            .measure_raw(std::slice::from_ref(&peer_client), work)
                            .await?,
                    );
                }
                Parallel::Raw => {
                    let work = parallel_raw(&raw_client, &raw_dirs, k, false);
                    raw.push(
                        bench
                            .measure_raw(std::slice::from_ref(&raw_client), work)
                            .await?,
                    );
                }
                Parallel::Floor => {
                    let work = parallel_raw(&floor_client, &floor_dirs, k, true);
                    floor.push(
                        bench
                            .measure_raw(std::slice::from_ref(&floor_client), work)
                            .await?,
                    );
                }
            }
        }
    }
    let vs_raw = paired(&ours, &raw, Samples::rate);
    let vs_peer = paired(&ours, &peer, Samples::rate);
    let vs_floor = paired(&ours, &floor, Samples::rate);
    let floor_vs_raw = paired(&floor, &raw, Samples::rate);
    report.goal(
        "parallel.ratio_vs_raw",
        vs_raw.median,
        ">= 0.8",
        vs_raw.median >= 0.8,
    );
    report.set(
        "parallel",
        json!({
            "tasks": plan.parallel_tasks,
            "cycles": ours.ops(),
            "cycles_per_s": round3(ours.rate()),
            "peer_cycles_per_s": round3(peer.rate()),
            "raw_cycles_per_s": round3(raw.rate()),
            "ratio_vs_raw": round3(vs_raw.median),
            "ratio_vs_raw_range": [round3(vs_raw.min), round3(vs_raw.max)],
            "ratio_vs_peer": vs_peer.json(),
            "requests_per_cycle": round3(ours.requests_per_op()),
            "keepalives_during": ours.keepalives(),
            "peer_requests_per_cycle": round3(peer.requests_per_op()),
            "raw_requests_per_cycle": round3(raw.requests_per_op()),
            "floor_cycles_per_s": round3(floor.rate()),
            "ratio_vs_floor": vs_floor.json(),
            "floor_ratio_vs_raw": floor_vs_raw.json(),
            "arms": { "ours": ours.json(), "peer": peer.json(), "raw": raw.json(), "floor": floor.json() },
        }),
    );
    let scenario = "3 parallel (64 locks, 1 session)";
    report.row(
        Row::new(scenario, "cycles/s (median of rounds)")
            .ours(ours.rate_cell())
            .peer(peer.rate_cell())
            .floor(format!("{} (raw create+delete)", raw.rate_cell()))
            .ratio(format!(
                "ours/raw {}; ours/peer {}",
                vs_raw.cell(),
                vs_peer.cell()
            ))
            .goal(mark("≥ 0.8", vs_raw.median >= 0.8)),
    );
    report.row(
        Row::new(scenario, "… raw create+getChildren+delete (the protocol)")
            .floor(floor.rate_cell())
            .ratio(format!(
                "ours/that {}; that/raw {}",
                vs_floor.cell(),
                floor_vs_raw.cell()
            )),
    );
    report.row(
        Row::new(scenario, "requests per cycle (at the server)")
            .ours(ours.requests_cell())
            .peer(peer.requests_cell())
            .floor(format!(
                "{} / {}",
                raw.requests_cell(),
                floor.requests_cell()
            )),
    );
    report.row(
        Row::new(scenario, "client CPU per cycle (µs)")
            .ours(ours.cpu_cell())
            .peer(peer.cpu_cell())
            .floor(format!("{} / {}", raw.cpu_cell(), floor.cpu_cell())),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 4 and 5. A long queue: herd and scale
// ---------------------------------------------------------------------------------------------

/// What a queue of `waiters` behind one holder did.
struct QueueRun {
    waiters: usize,
    /// From the first acquire call until every waiter watches its predecessor.
    enqueue: Duration,
    /// From the holder's release until the last waiter released.
    drain: Duration,
    /// Metric deltas of the waiters' sessions over the drain.
    drained: SessionMetrics,
    rss_before: u64,
    rss_waiting: u64,
    /// After `malloc_trim`: without the free heap the allocator kept (listings' garbage).
    rss_waiting_trimmed: u64,
    /// Every waiter was granted, in the order of its token.
    fifo: bool,
}

async fn queue_run(bench: &Bench, name: &str, waiters: usize) -> Result<QueueRun> {
    let holder = bench.session().await?;
    let sessions = bench.sessions(bench.plan.waiter_sessions).await?;
    let dir = bench.path(name);
    let lease = holder.lock(&dir).acquire().await?;
    let order = Arc::new(Mutex::new(Vec::<u64>::with_capacity(waiters)));
    let watches_before = total_metrics(&sessions).watches;
    // Both figures grow from a trimmed baseline: garbage of the earlier scenarios is not ours.
    let rss_before = rss_trimmed();

    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..waiters {
        let lock = sessions[i % sessions.len()].lock(&dir);
        let order = order.clone();
        tasks.spawn(async move {
            let lease = lock.acquire().await?;
            // One holder at a time, so push order is grant order.
            order.lock().unwrap().push(lease.token().get());
            lease.release().await?;
            Ok(())
        });
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while total_metrics(&sessions).watches - watches_before < waiters as u64 {
        if Instant::now() > deadline {
            return Err(format!("{name}: waiters did not all enqueue within 600 s").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The counter moves when a watch is sent; one more read per session is answered after
    // all of them (answers on one connection come in order).
    touch(sessions.iter().map(Session::client)).await?;
    let enqueue = start.elapsed();
    let rss_waiting = rss_bytes();
    let rss_waiting_trimmed = rss_trimmed();

    let before = total_metrics(&sessions);
    let drain_start = Instant::now();
    lease.release().await?;
    join_all_ok(tasks).await?;
    let drain = drain_start.elapsed();
    let after = total_metrics(&sessions);
    let order = order.lock().unwrap().clone();
    let fifo = order.len() == waiters && order.windows(2).all(|w| w[0] < w[1]);
    Ok(QueueRun {
        waiters,
        enqueue,
        drain,
        drained: SessionMetrics {
            creates: after.creates - before.creates,
            deletes: after.deletes - before.deletes,
            listings: after.listings - before.listings,
            watches: after.watches - before.watches,
            wakeups: after.wakeups - before.wakeups,
            keepalives: after.keepalives - before.keepalives,
            grant_confirms: after.grant_confirms - before.grant_confirms,
        },
        rss_before,
        rss_waiting,
        rss_waiting_trimmed,
        fifo,
    })
}

/// RSS after returning the allocator's free memory to the system.
fn rss_trimmed() -> u64 {
    // SAFETY: malloc_trim has no preconditions; it only releases free heap pages.
    unsafe { libc::malloc_trim(0) };
    rss_bytes()
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

async fn herd(bench: &Bench, report: &mut Report) -> Result<()> {
    let n = bench.plan.herd_waiters;
    progress(format!(
        "4/6 herd: {n} waiters on one lock over {} sessions",
        bench.plan.waiter_sessions
    ));
    let run = queue_run(bench, "herd", n).await?;
    // Each waiter's grant follows one release (the holder's, then each earlier waiter's):
    // `waiters` releases had someone to wake.
    let releases = run.waiters as f64;
    let wakeups = run.drained.wakeups as f64 / releases;
    let listings = run.drained.listings as f64 / releases;
    let watches = run.drained.watches as f64 / releases;
    report.goal(
        "herd.wakeups_per_release",
        wakeups,
        "= 1",
        run.drained.wakeups == run.waiters as u64,
    );
    report.set(
        "herd",
        json!({
            "waiters": run.waiters,
            "wakeups_per_release": round3(wakeups),
            "listings_per_release": round3(listings),
            "watches_per_release": round3(watches),
            "enqueue_s": round3(run.enqueue.as_secs_f64()),
            "drain_s": round3(run.drain.as_secs_f64()),
            "handoffs_per_s": round3(releases / run.drain.as_secs_f64()),
            "fifo": run.fifo,
        }),
    );
    report.row(
        Row::new(
            "4 herd (1,000 waiters)",
            "watch wakeups / getChildren per release",
        )
        .ours(format!("{wakeups:.3} / {listings:.3}"))
        .floor("1 / 1")
        .ratio(format!(
            "{:.0} handoffs/s at depth",
            releases / run.drain.as_secs_f64()
        ))
        .goal(mark(
            "wakeups = 1",
            run.drained.wakeups == run.waiters as u64,
        )),
    );
    Ok(())
}

async fn scale(bench: &Bench, report: &mut Report) -> Result<()> {
    let n = bench.plan.scale_waiters;
    progress(format!(
        "5/6 scale: {n} waiters in this process over {} sessions",
        bench.plan.waiter_sessions
    ));
    let run = queue_run(bench, "scale", n).await?;
    let per_waiter = run.rss_waiting.saturating_sub(run.rss_before) as f64 / n as f64;
    let future_bytes = {
        // Not polled, so nothing is sent: only its size is of interest.
        let session = bench.session().await?;
        let lock = session.lock(&bench.path("scale-size"));
        let acquire = lock.acquire();
        std::mem::size_of_val(&acquire)
    };
    let per_waiter_trimmed =
        run.rss_waiting_trimmed.saturating_sub(run.rss_before) as f64 / n as f64;
    report.goal(
        "scale.fifo",
        if run.fifo { 1.0 } else { 0.0 },
        "true",
        run.fifo,
    );
    report.set(
        "scale",
        json!({
            "waiters": n,
            "enqueue_s": round3(run.enqueue.as_secs_f64()),
            "enqueue_per_s": round3(n as f64 / run.enqueue.as_secs_f64()),
            "rss_before_bytes": run.rss_before,
            "rss_waiting_bytes": run.rss_waiting,
            "rss_bytes_per_waiter": per_waiter.round(),
            "rss_bytes_per_waiter_trimmed": per_waiter_trimmed.round(),
            "acquire_future_bytes": future_bytes,
            "drain_s": round3(run.drain.as_secs_f64()),
            "handoffs_per_s": round3(n as f64 / run.drain.as_secs_f64()),
            "wakeups_per_release": round3(run.drained.wakeups as f64 / n as f64),
            "fifo": run.fifo,
        }),
    );
    report.row(
        Row::new(
            "5 scale",
            format!("{n} waiters: enqueue time / RSS per waiter (after malloc_trim)"),
        )
        .ours(format!(
            "{:.1} s / {:.1} KiB ({:.1} KiB)",
            run.enqueue.as_secs_f64(),
            per_waiter / 1024.0,
            per_waiter_trimmed / 1024.0
        ))
        .ratio(format!("drained in {:.1} s", run.drain.as_secs_f64())),
    );
    report.row(
        Row::new("5 scale", "all granted, in FIFO order")
            .ours(run.fifo.to_string())
            .goal(mark("true", run.fifo)),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 6. Heartbeat cost of idle sessions
// ---------------------------------------------------------------------------------------------

/// Two idle sessions, one holding 1 lease and one holding 100, counted over the same window
/// (they sit idle while scenarios 1 and 2 run).
struct Idle {
    one: Session,
    many: Session,
    _leases: Vec<Lease>,
    start: Instant,
    before: Vec<u64>,
    keepalives_before: (u64, u64),
}

impl Idle {
    async fn start(bench: &Bench) -> Result<Idle> {
        let (one, many) = (bench.session().await?, bench.session().await?);
        let mut leases = vec![one.lock(&bench.path("keepalive/one")).acquire().await?];
        let locks: Vec<_> = (0..100)
            .map(|i| many.lock(&bench.path(&format!("keepalive/many/{i}"))))
            .collect();
        leases.extend(futures::future::try_join_all(locks.iter().map(|l| l.acquire())).await?);
        touch([one.client(), many.client()]).await?;
        let before = bench.received_each(&[one.id(), many.id()]).await?;
        Ok(Idle {
            keepalives_before: (one.metrics().keepalives, many.metrics().keepalives),
            one,
            many,
            _leases: leases,
            start: Instant::now(),
            before,
        })
    }

    async fn finish(self, bench: &Bench, report: &mut Report) -> Result<()> {
        let window = bench.plan.keepalive_window;
        if self.start.elapsed() < window {
            progress("6/6 keepalive: waiting for the idle window to end");
            tokio::time::sleep(window - self.start.elapsed()).await;
        } else {
            progress("6/6 keepalive: counted while 1 and 2 ran");
        }
        let after = bench
            .received_each(&[self.one.id(), self.many.id()])
            .await?;
        let seconds = self.start.elapsed().as_secs_f64();
        let (one, many) = (
            (after[0] - self.before[0]) as f64 / seconds,
            (after[1] - self.before[1]) as f64 / seconds,
        );
        let ka = (
            (self.one.metrics().keepalives - self.keepalives_before.0) as f64 / seconds,
            (self.many.metrics().keepalives - self.keepalives_before.1) as f64 / seconds,
        );
        // Equal within one heartbeat over the window: the rate must not grow with leases.
        let flat = (many - one).abs() * seconds <= 1.0;
        report.goal(
            "keepalive.requests_per_s_100",
            many,
            "= requests_per_s_1",
            flat,
        );
        report.set(
            "keepalive",
            json!({
                "window_s": round3(seconds),
                "session_timeout_s": SESSION_TIMEOUT.as_secs(),
                "requests_per_s_1": round3(one),
                "requests_per_s_100": round3(many),
                "keepalives_per_s_1": round3(ka.0),
                "keepalives_per_s_100": round3(ka.1),
            }),
        );
        report.row(
            Row::new(
                &format!(
                    "6 keepalive (idle, {} s session)",
                    SESSION_TIMEOUT.as_secs()
                ),
                "requests/s holding 1 / 100 leases",
            )
            .ours(format!("{one:.3} / {many:.3}"))
            .ratio(format!(
                "of which lease-clock syncs {:.3} / {:.3}",
                ka.0, ka.1
            ))
            .goal(mark("flat", flat)),
        );
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Python Kazoo, through benches/kazoo_driver.py
// ---------------------------------------------------------------------------------------------

struct Kazoo {
    child: tokio::process::Child,
    pid: u32,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    single: i64,
    contended: Vec<i64>,
}

impl Kazoo {
    /// Starts the driver with the first Python that imports `kazoo`; `None` if there is none.
    async fn start(bench: &Bench) -> Result<Option<Kazoo>> {
        let python = ["python3", "/usr/bin/python3"].into_iter().find(|py| {
            std::process::Command::new(py)
                .args(["-c", "import kazoo"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        let Some(python) = python else {
            progress("python3 cannot import kazoo (Debian: apt-get install python3-kazoo): skipping Kazoo");
            return Ok(None);
        };
        let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/kazoo_driver.py");
        let mut child = tokio::process::Command::new(python)
            .arg(driver)
            .arg(&bench.connect)
            .arg(bench.plan.contenders.to_string())
            .arg(SESSION_TIMEOUT.as_secs().to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("driver stdin")?;
        let lines = BufReader::new(child.stdout.take().ok_or("driver stdout")?).lines();
        let pid = child.id().ok_or("the Kazoo driver exited")?;
        let mut kazoo = Kazoo {
            child,
            pid,
            stdin,
            lines,
            single: 0,
            contended: vec![],
        };
        let hello = kazoo.read().await?;
        kazoo.single = hello["single"].as_i64().ok_or("driver: no session id")?;
        kazoo.contended = hello["contended"]
            .as_array()
            .ok_or("driver: no session ids")?
            .iter()
            .filter_map(Value::as_i64)
            .collect();
        progress(format!(
            "Kazoo {} on Python {} found",
            hello["kazoo"], hello["python"]
        ));
        Ok(Some(kazoo))
    }

    async fn read(&mut self) -> Result<Value> {
        let line = self
            .lines
            .next_line()
            .await?
            .ok_or("the Kazoo driver exited")?;
        let value: Value = serde_json::from_str(&line)?;
        if let Some(error) = value.get("error") {
            return Err(format!("Kazoo driver: {error}").into());
        }
        Ok(value)
    }

    async fn call(&mut self, command: Value) -> Result<Value> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        self.read().await
    }

    async fn touch(&mut self) -> Result<()> {
        self.call(json!({"cmd": "touch"})).await.map(drop)
    }

    async fn uncontended(&mut self, path: &str, cycles: usize) -> Result<Samples> {
        let answer = self
            .call(json!({"cmd": "uncontended", "path": path, "cycles": cycles}))
            .await?;
        samples_from(&answer)
    }

    async fn contended(&mut self, path: &str, handoffs: usize) -> Result<Samples> {
        let answer = self
            .call(json!({"cmd": "contended", "path": path, "handoffs": handoffs}))
            .await?;
        samples_from(&answer)
    }

    async fn quit(mut self) {
        let _ = self.stdin.write_all(b"{\"cmd\": \"quit\"}\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn samples_from(answer: &Value) -> Result<Samples> {
    let latencies = answer["latencies_s"]
        .as_array()
        .ok_or("driver: no latencies")?
        .iter()
        .filter_map(Value::as_f64)
        .map(Duration::from_secs_f64)
        .collect();
    Ok(Samples {
        latencies,
        ops: answer["ops"].as_u64().ok_or("driver: no ops")? as usize,
        elapsed: Duration::from_secs_f64(answer["elapsed_s"].as_f64().ok_or("driver: no elapsed")?),
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------------------------
// The report: one table, one JSON file
// ---------------------------------------------------------------------------------------------

/// One line of the table: scenario, measure, zkfence, zookeeper-client, Kazoo, floor or raw,
/// ratio, goal. Cells not set stay empty.
struct Row {
    cells: [String; 8],
}

impl Row {
    fn new(scenario: &str, measure: impl Into<String>) -> Row {
        let mut cells: [String; 8] = Default::default();
        cells[0] = scenario.to_string();
        cells[1] = measure.into();
        Row { cells }
    }

    fn set(mut self, i: usize, value: impl Into<String>) -> Row {
        self.cells[i] = value.into();
        self
    }

    fn ours(self, v: impl Into<String>) -> Row {
        self.set(2, v)
    }

    fn peer(self, v: impl Into<String>) -> Row {
        self.set(3, v)
    }

    fn kazoo(self, v: impl Into<String>) -> Row {
        self.set(4, v)
    }

    fn floor(self, v: impl Into<String>) -> Row {
        self.set(5, v)
    }

    fn ratio(self, v: impl Into<String>) -> Row {
        self.set(6, v)
    }

    fn goal(self, v: impl Into<String>) -> Row {
        self.set(7, v)
    }
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    json: Map<String, Value>,
    goals: Map<String, Value>,
}

fn mark(goal: &str, met: bool) -> String {
    format!("{goal} {}", if met { "✓" } else { "✗" })
}

impl Report {
    fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    fn set(&mut self, key: &str, value: Value) {
        match (self.json.get_mut(key), value) {
            (Some(Value::Object(existing)), Value::Object(more)) => existing.extend(more),
            (_, value) => {
                self.json.insert(key.to_string(), value);
            }
        }
    }

    fn set_in(&mut self, outer: &str, inner: &str, value: Value) {
        let mut m = Map::new();
        m.insert(inner.to_string(), value);
        self.set(outer, Value::Object(m));
    }

    fn goal(&mut self, key: &str, value: f64, goal: &str, met: bool) {
        self.goals.insert(
            key.to_string(),
            json!({ "value": round3(value), "goal": goal, "met": met }),
        );
    }

    fn print(&self, machine: &Value, plan: &Plan, elapsed: Duration) {
        let header = [
            "Scenario",
            "Measure",
            "zkfence",
            "zookeeper-client",
            "Kazoo",
            "Floor / raw",
            "Ratio: median (min–max)",
            "Goal",
        ];
        let cells: Vec<[&str; 8]> = self
            .rows
            .iter()
            .map(|r| r.cells.each_ref().map(String::as_str))
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: [&str; 8]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                .collect();
            format!("| {} |", padded.join(" | "))
        };
        println!();
        println!(
            "zkfence lock bench ({} run, {} interleaved rounds, {:.0} s) on {}",
            if plan.quick { "quick" } else { "full" },
            plan.rounds,
            elapsed.as_secs_f64(),
            machine["summary"].as_str().unwrap_or("?"),
        );
        println!();
        println!("{}", line(header));
        println!(
            "{}",
            line(widths.map(|_| ""))
                .replace(' ', "-")
                .replace("|-", "| ")
                .replace("-|", " |")
        );
        for row in cells {
            println!("{}", line(row));
        }
        println!();
        println!(
            "Latencies pool every round; rates are medians of rounds; ratios are medians of \
             per-round ratios of interleaved arms. Requests are counted at the server (`cons`)."
        );
        let failed: Vec<&String> = self
            .goals
            .iter()
            .filter(|(_, g)| g["met"] != Value::Bool(true))
            .map(|(k, _)| k)
            .collect();
        if failed.is_empty() {
            println!("All goals met.");
        } else {
            println!(
                "Goals not met: {}",
                failed
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    fn write(&self) -> Result<PathBuf> {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "target".into());
        let target = if target.is_absolute() {
            target
        } else {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(target)
        };
        let dir = target.join("bench");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("lock.json");
        let mut all = self.json.clone();
        all.insert("goals".into(), Value::Object(self.goals.clone()));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&Value::Object(all))? + "\n",
        )?;
        Ok(path)
    }
}

/// What the figures were measured on.
async fn machine(bench: &Bench) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let zookeeper = bench
        .zk
        .four_letter(bench.node, "srvr")
        .await
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Zookeeper version:"))
                .map(|v| v.trim().to_string())
        })
        .map(|v| v.split(['-', ',']).next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let summary = format!(
        "{cores} cores ({cpu}), {memory_gib:.0} GiB, Linux {kernel}, ZooKeeper {zookeeper} ×3 on loopback \
         (tickTime {} ms), clients on one follower",
        TICK.as_millis()
    );
    json!({
        "cpu": cpu,
        "cores": cores,
        "memory_gib": round3(memory_gib),
        "kernel": kernel,
        "zookeeper": zookeeper,
        "summary": summary,
    })
}
