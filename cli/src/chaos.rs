//! `zkfence chaos`: a randomized fault campaign against a throwaway local ensemble, checked
//! event by event (the campaign itself lives in `zkfence_testcontainers::chaos`).

use std::path::PathBuf;
use std::time::Duration;

use zkfence_testcontainers::chaos::{self, ChaosConfig, FaultKind, Recipe, Store};
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
    /// expire-session, delete-waiter, delete-holder, shrink-timeout. [default: all]
    #[arg(long, value_delimiter = ',', value_name = "KIND,...")]
    faults: Vec<FaultKind>,
    /// The recipes the contenders drive, comma-separated: lock, election, rwlock, semaphore,
    /// multi, partitions, or mixed (all of them); each hold (for partitions, a membership) is
    /// of one of them, chosen at random, and the checker applies each recipe's rules to its
    /// grants.
    #[arg(long, default_value = "lock", value_parser = parse_recipes, value_name = "RECIPE,...")]
    recipe: Recipes,
    /// The semaphore's permits (with --recipe semaphore or mixed): fewer than --clients.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    permits: u32,
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
    /// Also write every step to these stores, comma-separated: postgres, mariadb, redis,
    /// etcd, http, or all; each through its fence (zkfence-fences), in a throwaway server on
    /// loopback (http: a service behind the fencing layer in this process), each judged by
    /// its own record of committed writes. The servers' binaries must be installed
    /// (apt-get install -y postgresql mariadb-server redis-server etcd-server; PG_BINDIR for
    /// PostgreSQL elsewhere).
    #[arg(long, value_parser = parse_stores, value_name = "STORE,...")]
    sink: Option<Stores>,
    /// The same as --sink postgres (with --sink: adds postgres).
    #[arg(long)]
    postgres: bool,
    /// Where to write history.jsonl, timeline.svg and the contenders' logs (created if
    /// missing). [default: zkfence-chaos; with --check: beside the history]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Run no campaign: check the history FILE (a history.jsonl of an earlier run) again and
    /// draw its timeline again.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["duration", "seed", "faults", "recipe", "permits", "nodes", "clients", "session_timeout", "tick_time", "sink", "postgres"])]
    check: Option<PathBuf>,
    /// With --check: draw only the seconds FROM..TO of the campaign, e.g. "300s..600s" (a
    /// long run's whole picture is wide), to DIR/timeline-FROM-TO.svg (timeline-5m-10m.svg)
    /// beside the whole timeline.svg.
    #[arg(long, requires = "check", value_parser = parse_window, value_name = "FROM..TO")]
    window: Option<(Duration, Duration)>,
}

/// The stores of `--sink` (one value: a comma-separated list, or `all`).
#[derive(Debug, Clone)]
struct Stores(Vec<Store>);

fn parse_stores(s: &str) -> Result<Stores, String> {
    Store::parse_list(s).map(Stores)
}

/// The recipes of `--recipe` (one value: a comma-separated list, or `mixed`).
#[derive(Debug, Clone)]
struct Recipes(Vec<Recipe>);

fn parse_recipes(s: &str) -> Result<Recipes, String> {
    Recipe::parse_list(s).map(Recipes)
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
    config.recipes = args.recipe.0;
    config.permits = args.permits as usize;
    config.nodes = args.nodes;
    config.clients = args.clients as usize;
    config.session_timeout = args.session_timeout;
    config.tick_time = args.tick_time;
    let mut sinks = args.sink.map(|s| s.0).unwrap_or_default();
    if args.postgres && !sinks.contains(&Store::Postgres) {
        sinks.insert(0, Store::Postgres);
    }
    config.sinks = sinks;
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
    let recipes: Vec<&str> = config.recipes.iter().map(|r| r.name()).collect();
    let stores: Vec<&str> = config.sinks.iter().map(|s| s.title()).collect();
    eprintln!(
        "zkfence chaos: seed {}, {}s of faults ({}) on {} servers, {} clients driving {}, \
         session timeout {:?}, tickTime {:?}{}; writing to {}",
        config.seed,
        config.duration.as_secs(),
        kinds.join(", "),
        config.nodes,
        config.clients,
        recipes.join(", "),
        config.session_timeout,
        config.tick_time,
        match stores.len() {
            0 => String::new(),
            _ => format!(", writes to {} too", stores.join(", ")),
        },
        config.out_dir.display()
    );
    chaos::run(config).await.map_err(|e| match e {
        // Said by `task`'s check already, unless the binaries went away since.
        HarnessError::PostgresNotFound { .. } | HarnessError::ServerNotFound { .. } => {
            Failure::new(exit::USAGE, e.to_string())
        }
        HarnessError::Postgres { .. } => Failure::new(
            exit::ERROR,
            format!("could not run a local PostgreSQL: {e}"),
        ),
        e => e.into(),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `zkfence chaos`'s flags alone, as the CLI parses them.
    #[derive(Parser)]
    struct Chaos {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn every_command_in_the_guide_parses_and_its_settings_can_work() {
        let guide = include_str!("../../docs/guide/chaos.md");
        let mut seen = 0;
        for line in guide.lines() {
            // Commands, not the summaries quoted from runs ("zkfence chaos: seed ...").
            let Some(rest) = line.trim().strip_prefix("zkfence chaos --") else {
                continue;
            };
            let rest = format!("--{rest}");
            let words = rest
                .split(" #")
                .next()
                .unwrap_or_default()
                .split_whitespace();
            let parsed = Chaos::try_parse_from(std::iter::once("chaos").chain(words))
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            if let Err(e) = task(parsed.args) {
                panic!("{line}: {}", e.message);
            }
            seen += 1;
        }
        assert!(seen >= 7, "only {seen} commands in the guide");
    }
}
