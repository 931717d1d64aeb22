//! `zkfence chaos`: a randomized fault campaign against a throwaway local ensemble, checked
//! event by event (the campaign itself lives in `zkfence_testcontainers::chaos`).

use std::path::PathBuf;
use std::time::Duration;

use zkfence_testcontainers::chaos::{self, ChaosConfig, FaultKind};
use zkfence_testcontainers::HarnessError;

use crate::duration;
use crate::exit::{self, Failure};

/// The flags of `zkfence chaos`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long to inject faults, e.g. "60s", "30m"; then everything is healed, the
    /// campaign waits for a grant and stops.
    #[arg(long, default_value = "60s", value_parser = duration::parse, value_name = "DUR")]
    duration: Duration,
    /// The seed of the fault schedule and of the contenders' holds: the same seed repeats
    /// the schedule. [default: from the clock, printed in the summary]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The fault kinds, comma-separated: kill-leader, kill-follower, pause-server,
    /// isolate-server, blackhole-client, cut-client, stall-holder, kill-client,
    /// expire-session, delete-waiter. [default: all]
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    faults: Vec<FaultKind>,
    /// Servers in the ensemble: 3 or 5.
    #[arg(long, default_value_t = 3, value_parser = parse_nodes, value_name = "N")]
    nodes: usize,
    /// Contender processes, each with its own session and connection.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=20), value_name = "N")]
    clients: u32,
    /// The contenders' session timeout: within 2 and 20 tickTimes.
    #[arg(long, default_value = "4s", value_parser = duration::parse, value_name = "DUR")]
    session_timeout: Duration,
    /// The servers' tickTime.
    #[arg(long, default_value = "200ms", value_parser = duration::parse, value_name = "DUR")]
    tick_time: Duration,
    /// Also write every fenced write to a PostgreSQL row, by the fenced_postgres recipe's SQL
    /// (a conditional update on the stored token), in a throwaway PostgreSQL on loopback
    /// (needs its server binaries: apt-get install -y postgresql, or PG_BINDIR).
    #[arg(long)]
    postgres: bool,
    /// Where to write history.jsonl, timeline.svg and the contenders' logs (created if
    /// missing). [default: zkfence-chaos; with --check: beside the history]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run no campaign: check the history FILE (a history.jsonl of an earlier run) again and
    /// draw its timeline again.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["duration", "seed", "faults", "nodes", "clients", "session_timeout", "tick_time", "postgres"])]
    check: Option<PathBuf>,
    /// With --check: draw only the seconds FROM..TO of the campaign, e.g. "300s..600s" (a
    /// long run's whole picture is wide), to DIR/timeline-FROM-TO.svg (timeline-5m-10m.svg)
    /// beside the whole timeline.svg.
    #[arg(long, requires = "check", value_parser = parse_window, value_name = "FROM..TO")]
    window: Option<(Duration, Duration)>,
}

fn parse_window(s: &str) -> Result<(Duration, Duration), String> {
    let (from, to) = s
        .split_once("..")
        .ok_or("expected FROM..TO, e.g. \"300s..600s\"")?;
    let (from, to) = (duration::parse(from)?, duration::parse(to)?);
    if from >= to {
        return Err(format!("the window {s:?} is empty"));
    }
    Ok((from, to))
}

/// What `zkfence chaos` was asked to do.
#[derive(Debug)]
pub enum Task {
    /// Run a campaign.
    Campaign(ChaosConfig),
    /// Check a history again, drawing the timeline (of a window of it) at the second path.
    Recheck(PathBuf, PathBuf, Option<(Duration, Duration)>),
}

fn parse_nodes(s: &str) -> Result<usize, String> {
    match s {
        "3" => Ok(3),
        "5" => Ok(5),
        _ => Err("the ensemble has 3 or 5 servers".into()),
    }
}

/// The task from the flags, checked (exit 2 for settings that cannot work).
pub fn task(args: Args) -> Result<Task, Failure> {
    if let Some(history) = args.check {
        let dir = match args.out {
            Some(dir) => dir,
            None => history
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".")),
        };
        // A window's picture has a name of its own: the whole timeline.svg stays.
        let timeline = match args.window {
            Some((from, to)) => format!(
                "timeline-{}-{}.svg",
                duration::format(from),
                duration::format(to)
            ),
            None => "timeline.svg".to_string(),
        };
        return Ok(Task::Recheck(history, dir.join(timeline), args.window));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot find our own binary: {e}")))?;
    let mut config = ChaosConfig::new(exe, vec![chaos::CONTENDER_MODE.to_string()]);
    config.duration = args.duration;
    config.seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    if !args.faults.is_empty() {
        let mut kinds = args.faults;
        kinds.sort();
        kinds.dedup();
        config.faults = kinds;
    }
    config.nodes = args.nodes;
    config.clients = args.clients as usize;
    config.session_timeout = args.session_timeout;
    config.tick_time = args.tick_time;
    config.postgres = args.postgres;
    config.out_dir = args.out.unwrap_or_else(|| PathBuf::from("zkfence-chaos"));
    config
        .validate()
        .map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
    Ok(Task::Campaign(config))
}

/// Runs the task: the summary (and where the history and timeline went) on stdout, each
/// violation with the events around it on stderr; exit 1 if there was any.
pub async fn run(task: Task) -> Result<u8, Failure> {
    let report = match task {
        Task::Campaign(config) => campaign(config).await?,
        Task::Recheck(history, timeline, window) => chaos::recheck(&history, &timeline, window)
            .map_err(|e| {
                Failure::new(
                    exit::USAGE,
                    format!("cannot check {}: {e}", history.display()),
                )
            })?,
    };
    for v in &report.violations {
        eprint!("{v}");
    }
    println!("{}", report.summary());
    println!("history: {}", report.history_path.display());
    println!("timeline: {}", report.timeline_path.display());
    if report.violations.is_empty() {
        Ok(exit::OK)
    } else {
        Err(Failure::new(
            exit::ERROR,
            format!(
                "the checker found {} violations (above); rerun with --seed {}",
                report.violations.len(),
                report.seed
            ),
        ))
    }
}

async fn campaign(config: ChaosConfig) -> Result<chaos::Report, Failure> {
    let kinds: Vec<&str> = config.faults.iter().map(|k| k.name()).collect();
    eprintln!(
        "zkfence chaos: seed {}, {}s of faults ({}) on {} servers, {} clients, session timeout \
         {:?}, tickTime {:?}{}; writing to {}",
        config.seed,
        config.duration.as_secs(),
        kinds.join(", "),
        config.nodes,
        config.clients,
        config.session_timeout,
        config.tick_time,
        if config.postgres {
            ", writes to PostgreSQL too"
        } else {
            ""
        },
        config.out_dir.display()
    );
    chaos::run(config).await.map_err(|e| match e {
        // Said by `task`'s check already, unless the binaries went away since.
        HarnessError::PostgresNotFound { .. } => Failure::new(exit::USAGE, e.to_string()),
        HarnessError::Postgres { .. } => Failure::new(
            exit::ERROR,
            format!("could not run a local PostgreSQL: {e}"),
        ),
        e => e.into(),
    })
}
