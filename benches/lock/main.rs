//! `cargo bench --bench lock [-- --quick] [--check] [--only SCENARIO,..] [--rounds N]`: what
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
//!    whose waiter is always second in line (the holder releases only once the server shows
//!    the waiter's watch on its node);
//! 3. **parallel**: 64 tasks on one session, each on its own lock, against `Client::lock`, raw
//!    pipelined create+delete (the ensemble's write limit) and raw create+getChildren+delete;
//! 4. **herd**: watch notifications and requests per release with 1,000 waiters, at the
//!    server;
//! 5. **scale**: a curve of waiters in one process, 1,000 / 10,000 / 50,000 (1,000 / 2,000
//!    with `--quick`, see [`QUICK_SCALE_POINTS`]): enqueue time, RSS and getChildren per
//!    waiter, drain rate against the herd's, FIFO; and **sessions**: 1,000 sessions (200
//!    with `--quick`) of this process each holding one lock, what they cost the ensemble per
//!    second (requests at the server, `cons`; transactions, the zxid's movement in `srvr`)
//!    and the client's RSS per session;
//! 6. **keepalive**: requests per second of an idle session holding 1 and 100 leases;
//! 7. **directories**, on an ensemble of its own whose leader removes empty containers every
//!    200 ms: the seat-hold case (one session acquiring and releasing 100,000 distinct locks
//!    under one parent, 64 at a time, 5,000 with `--quick`) against 64 hot locks, and the
//!    znodes left under the parent once the container check has run; and the requests of a
//!    lock whose directory was removed while it was idle;
//! 8. **multi**: uncontended acquire+release of a 3-path multi-lock against 3 plain locks
//!    taken one after another on the same paths, in requests (at the server) and latency;
//! 9. Python Kazoo's `Lock` on 1 and 2, where Debian's `python3-kazoo` is installed
//!    (driven by `benches/kazoo_driver.py`);
//!
//! Round trips before the grant (scenarios 1 and 7) are counted on a session of their own
//! that reaches the follower through a `FaultProxy` adding 40 ms each way: an acquire that
//! needs `k` round trips takes about `k × 80 ms` there, however many requests each carries.
//! The latencies of the timed arms are drawn, one CDF per arm and a panel per scenario, into
//! `target/bench/latency.svg` (with `plotters`).
//!
//! 11. **partitions**: 1,000 items over 10 members, zkfence's partitions against Python Kazoo's
//!     `SetPartitioner` (driven by `benches/kazoo_partitioner.py`) on the same ensemble, one
//!     arm after the other: the time a join and a leave take to settle, the items they move
//!     and re-grant, and what the still members cost the ensemble per second (requests at the
//!     server, transactions from the zxid).
//!
//! 10. **tls** (built with `--features tls`; skipped otherwise), on an ensemble of its own
//!     serving TLS with the Netty connection factory: scenario 1's uncontended cycle over TLS
//!     against the same over the plaintext port of the same servers, and its requests per
//!     cycle (3, as without TLS).
//!
//! Noise on these machines is large: fsync latency moves whole rounds, and one round of two
//! implementations doing the same requests gave ratios from 0.6 to 1.8 (the README's
//! "Benchmarks" section shows a run). So timed comparisons run in interleaved rounds (9, 3
//! with `--quick`) after one unmeasured warm-up round, rotating which arm goes first, and
//! report the median of the per-round ratios with their min and max. Request counts do not
//! need that: they are read at the server from the `cons` four-letter word (`recved` and
//! `sent` per connection) before and after each arm. Client CPU time per operation is read
//! from the process clock, the ZooKeeper servers' from their `/proc/PID/stat`.
//!
//! Output: one markdown table on stdout (the README's), progress on stderr, and every figure,
//! per round too, in `target/bench/lock.json` (under `CARGO_TARGET_DIR` when set). `--only`
//! and `--rounds` are for working on one scenario; the JSON then holds only what ran.
//! `--scale 1000,10000` sets the scale curve's points.
//! `--only-ours` runs only zkfence's arm in scenarios 1 and 3, for a profiler (the README's
//! "what the time went to" was measured so).
//! `--check` makes the run fail (exit status 1) when a goal that noise cannot move is missed:
//! requests per cycle, notifications per release, FIFO order, a keepalive rate flat in the
//! number of leases, no znode left behind by the seat-hold, round trips before the grant,
//! getChildren per enqueue. Timed ratios are reported, never checked.
//!
//! Layout: `server.rs` (the ensemble, sessions, counting at the server, CPU clocks),
//! `arms.rs` (the raw floor, `Client::lock`, the Kazoo driver), `scenario/` (one file per
//! scenario), `stats.rs` (medians, paired ratios), `report.rs` (goals, the table, the JSON).

mod arms;
mod plot;
mod report;
mod scenario;
mod server;
mod stats;

use std::time::{Duration, Instant};

use serde_json::json;
use zkfence_testcontainers::Ensemble;

use crate::report::Report;
use crate::server::Bench;
use crate::stats::round3;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// Long enough that neither the client's pings (after 3/20 of it idle) nor the lease clock's
/// keepalive fall inside a busy measured window often; the keepalives that do are counted
/// and reported apart.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(20);
pub const TICK: Duration = Duration::from_millis(200);

/// The scale curve of `--quick` (CI). The figure is 10,000 waiters; today's library
/// needs about a minute to enqueue that many (each enqueue lists the whole queue), so CI
/// stops at 2,000. Raise the last point to 10,000 once an enqueue no longer lists the queue.
pub const QUICK_SCALE_POINTS: &[usize] = &[1_000, 2_000];

/// How much work each scenario does: the full run, or the `--quick` one CI runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// `--only-ours`: scenarios 1 and 3 run zkfence's arm alone (for a profiler: the
    /// process then spends its CPU on nothing else); their ratios are then empty.
    pub only_ours: bool,
    /// Interleaved rounds of every timed comparison.
    pub rounds: usize,
    /// Acquire+release cycles per arm and round, uncontended.
    pub uncontended_cycles: usize,
    /// Sessions handing one lock around.
    pub contenders: usize,
    /// Grants per arm and round in the handoff.
    pub handoffs: usize,
    /// Delete-to-notification samples per round for the handoff's latency floor.
    pub floor_samples: usize,
    /// Tasks on one session, each on its own lock.
    pub parallel_tasks: usize,
    /// Cycles per task and round in the parallel scenario.
    pub parallel_cycles: usize,
    pub herd_waiters: usize,
    /// The scale curve's queue lengths, one queue after the other.
    pub scale_points: Vec<usize>,
    /// Sessions of the many-sessions figure, each holding one lock.
    pub many_sessions: usize,
    /// How long the many-sessions figure counts at the server.
    pub many_sessions_window: Duration,
    /// Sessions the herd's and scale's waiters are spread over.
    pub waiter_sessions: usize,
    /// Shortest window for the idle-session heartbeat count.
    pub keepalive_window: Duration,
    /// Distinct locks the seat-hold acquires and releases once each.
    pub seat_locks: usize,
    /// Acquire+release cycles of a lock whose directory the container check removed.
    pub idle_cycles: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                only_ours: false,
                rounds: 3,
                uncontended_cycles: 50,
                contenders: 8,
                handoffs: 80,
                floor_samples: 30,
                parallel_tasks: 64,
                parallel_cycles: 15,
                herd_waiters: 1000,
                scale_points: QUICK_SCALE_POINTS.to_vec(),
                many_sessions: 200,
                many_sessions_window: Duration::from_secs(5),
                waiter_sessions: 10,
                keepalive_window: Duration::from_secs(10),
                seat_locks: 5_000,
                idle_cycles: 5,
            }
        } else {
            Plan {
                quick,
                only_ours: false,
                rounds: 9,
                uncontended_cycles: 200,
                contenders: 8,
                handoffs: 320,
                floor_samples: 100,
                parallel_tasks: 64,
                parallel_cycles: 60,
                herd_waiters: 1000,
                scale_points: vec![1_000, 10_000, 50_000],
                many_sessions: 1_000,
                many_sessions_window: Duration::from_secs(20),
                waiter_sessions: 10,
                keepalive_window: Duration::from_secs(30),
                seat_locks: 100_000,
                idle_cycles: 15,
            }
        }
    }
}

const SCENARIOS: [&str; 11] = [
    "uncontended",
    "handoff",
    "keepalive",
    "parallel",
    "herd",
    "scale",
    "sessions",
    "multi",
    "directories",
    "tls",
    "partitions",
];

struct Args {
    plan: Plan,
    only: Vec<String>,
    /// Fail the run on a missed goal that noise cannot move.
    check: bool,
}

/// Command line: `[--quick] [--check] [--only a,b] [--rounds N] [--scale N,M] [--only-ours]`. `cargo bench` adds
/// `--bench`, which is ignored like anything else unknown.
fn parse_args() -> Result<Args> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut plan = Plan::new(args.iter().any(|a| a == "--quick"));
    let check = args.iter().any(|a| a == "--check");
    plan.only_ours = args.iter().any(|a| a == "--only-ours");
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
        } else if arg == "--scale" || arg.starts_with("--scale=") {
            plan.scale_points = value(i, "--scale")?
                .split(',')
                .map(|n| n.trim().replace('_', "").parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--scale takes waiter counts like 1000,10000: {e}"))?;
        }
    }
    Ok(Args { plan, only, check })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let check = args.check;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(args.plan, args.only))?;
    if check {
        let missed = report.missed_checks();
        if !missed.is_empty() {
            for goal in &missed {
                eprintln!("[bench lock] --check: {}", goal.why());
            }
            eprintln!(
                "[bench lock] --check failed: {} goal(s) that noise cannot move were missed",
                missed.len()
            );
            std::process::exit(1);
        }
        progress(format!(
            "--check passed: {} goal(s) that noise cannot move were met",
            report.checked_count()
        ));
    }
    Ok(())
}

async fn run(plan: Plan, only: Vec<String>) -> Result<Report> {
    let runs = |name: &str| only.iter().any(|s| s == name);
    let wall = Instant::now();
    let mut report = Report::default();
    let mut machine = None;
    let mut servers = Vec::new();
    // Every scenario but the directories and tls ones runs on this ensemble.
    if SCENARIOS
        .iter()
        .any(|s| !matches!(*s, "directories" | "tls") && runs(s))
    {
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
        let bench = bench_on(zk, &plan).await?;
        machine = Some(report::machine(&bench).await);
        servers.push(bench.node);
        main_scenarios(&bench, &runs, &mut report).await?;
        // The bench (and its ensemble) is dropped here, before scenario 7 starts its own: the
        // machine is shared.
    }
    if runs("directories") {
        progress(format!(
            "starting a 3-node ZooKeeper ensemble for scenario 7 (container check every {} ms)",
            scenario::directories::CONTAINER_CHECK.as_millis()
        ));
        let zk = Ensemble::builder()
            .nodes(3)
            .tick_time(TICK)
            .max_session_timeout(SESSION_TIMEOUT * 2)
            .container_check_interval(scenario::directories::CONTAINER_CHECK)
            .system_property(
                "znode.container.maxPerMinute",
                scenario::directories::CONTAINER_MAX_PER_MINUTE.to_string(),
            )
            .start()
            .await?;
        let bench = bench_on(zk, &plan).await?;
        if machine.is_none() {
            machine = Some(report::machine(&bench).await);
        }
        servers.push(bench.node);
        scenario::directories::run(&bench, &mut report).await?;
    }
    if runs("tls") {
        tls_scenario(&plan, &mut machine, &mut servers, &mut report).await?;
    }
    let machine = machine.unwrap_or_default();

    report.set("machine", machine.clone());
    report.set(
        "run",
        json!({
            "quick": plan.quick,
            "rounds": plan.rounds,
            "scenarios": only,
            "seconds": round3(wall.elapsed().as_secs_f64()),
            "server": servers.first(),
            "servers": servers,
            "session_timeout_s": SESSION_TIMEOUT.as_secs(),
            "client_rusage": server::rusage(),
            "tick_ms": TICK.as_millis() as u64,
        }),
    );
    report.print(&machine, &plan, wall.elapsed());
    let path = report.write()?;
    progress(format!(
        "wrote {} ({:.0} s in all)",
        path.display(),
        wall.elapsed().as_secs_f64()
    ));
    Ok(report)
}

/// Scenario 10 on a TLS ensemble of its own (the Netty connection factory on every port).
#[cfg(feature = "tls")]
async fn tls_scenario(
    plan: &Plan,
    machine: &mut Option<serde_json::Value>,
    servers: &mut Vec<usize>,
    report: &mut Report,
) -> Result<()> {
    progress("starting a 3-node ZooKeeper ensemble serving TLS for scenario 10");
    let zk = Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(SESSION_TIMEOUT * 2)
        .tls(zkfence_testcontainers::ClientAuth::None)
        .start()
        .await?;
    let bench = bench_on(zk, plan).await?;
    if machine.is_none() {
        *machine = Some(report::machine(&bench).await);
    }
    servers.push(bench.node);
    scenario::tls::run(&bench, report).await
}

#[cfg(not(feature = "tls"))]
async fn tls_scenario(
    _plan: &Plan,
    _machine: &mut Option<serde_json::Value>,
    _servers: &mut Vec<usize>,
    _report: &mut Report,
) -> Result<()> {
    progress("10 tls: skipped (run the bench with --features tls)");
    Ok(())
}

/// The bench on a started ensemble: its sessions go to one follower.
async fn bench_on(zk: Ensemble, plan: &Plan) -> Result<Bench> {
    let leader = zk.wait_for_leader(Duration::from_secs(30)).await?;
    // Clients usually talk to a follower: its writes are forwarded to the leader.
    let node = (leader + 1) % zk.len();
    Ok(Bench::new(zk, node, plan.clone()))
}

/// Scenarios 1–6, 8 and 11, on the main ensemble (ZooKeeper's default container check, 60 s).
async fn main_scenarios(
    bench: &Bench,
    runs: &impl Fn(&str) -> bool,
    report: &mut Report,
) -> Result<()> {
    let mut kazoo = if runs("uncontended") || runs("handoff") {
        arms::Kazoo::start(bench).await?
    } else {
        None
    };
    // The idle sessions sit out scenarios 1 and 2, so their window costs no extra time.
    let idle = if runs("keepalive") {
        Some(scenario::keepalive::Idle::start(bench).await?)
    } else {
        None
    };
    if runs("uncontended") {
        scenario::uncontended::run(bench, kazoo.as_mut(), report).await?;
    }
    if runs("handoff") {
        scenario::handoff::run(bench, kazoo.as_mut(), report).await?;
    }
    if let Some(kazoo) = kazoo.take() {
        kazoo.quit().await;
    }
    if let Some(idle) = idle {
        idle.finish(bench, report).await?;
    }
    if runs("parallel") {
        scenario::parallel::run(bench, report).await?;
    }
    if runs("herd") {
        scenario::herd::run(bench, report).await?;
    }
    // Before the scale curve: its 50,000 waiters leave a heap that the sessions' own
    // `malloc_trim` would hand back, and their RSS delta would read 0.
    if runs("sessions") {
        scenario::sessions::run(bench, report).await?;
    }
    if runs("scale") {
        scenario::scale::run(bench, report).await?;
    }
    if runs("multi") {
        scenario::multi::run(bench, report).await?;
    }
    if runs("partitions") {
        scenario::partitions::run(bench, report).await?;
    }
    Ok(())
}

pub fn progress(message: impl AsRef<str>) {
    eprintln!("[bench lock] {}", message.as_ref());
}
