//! Job-scheduler leader: several scheduler instances run, exactly one of them runs the jobs.
//!
//! Three instances of a job scheduler run side by side — here in one program, each with its
//! own ZooKeeper session, exactly as three processes on three machines would. Each calls
//! [`Election::run`](zkfence::Election::run) on the same election path: the elected one runs
//! the due jobs, the others wait in line. Every job writes its result to the job store with
//! the leadership's fencing token, and the store refuses a token older than one it has
//! already seen, so a former leader that wakes up late cannot overwrite a newer leader's work.
//!
//! Midway, the leader's network is cut: a fault proxy between it and the ensemble blackholes
//! its connection, as if its machine had died. The leader first sees its leadership
//! *suspended* (disconnected) and starts no new job; its lease clock then runs out and `run`
//! cancels its leader task — *before* the ensemble expires its session. Only then is the next
//! instance in line elected, with a larger token, and it carries on from the next job.
//!
//! # Election or lock?
//!
//! Both are the same fair queue of ephemeral nodes, and a leadership is fenced exactly like a
//! lock's lease. The difference is in use:
//! - a **lock** is taken for one piece of work and released after it (a payment, a seat hold);
//!   waiting for it is the exception;
//! - an **election** is joined for the life of the process: the head of the queue *is* the
//!   leader until it dies or resigns, the others stand by for failover, anyone may ask who
//!   leads ([`Election::leader`](zkfence::Election::leader)) or follow the changes
//!   ([`Election::observe`](zkfence::Election::observe)), and `run` keeps the candidate in the
//!   race (campaign, lead, requeue) until it shuts down.
//!
//! Run `cargo run --example scheduler_leader` (starts a throwaway 3-node ensemble; needs Java
//! and ZooKeeper) or set `ZKFENCE_CONNECT` / pass `--connect HOSTS` to use yours. Exits 0 only
//! if every job ran exactly once and the failover happened, with a larger token.

mod common;

use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use zkfence::{
    Fence, FencingToken, LeaderTask, Leadership, LeaseState, Session, SessionOptions, StaleToken,
};

const INSTANCES: [&str; 3] = ["scheduler-a", "scheduler-b", "scheduler-c"];
/// Jobs due, numbered from 1.
const JOBS: u64 = 12;
/// The leader's network is cut once this many jobs are done.
const CUT_AFTER: u64 = 4;
/// How long one job works.
const JOB_TIME: Duration = Duration::from_millis(200);
/// The leases' time to live: a dead leader is replaced about this long after it went silent.
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);

/// One job run, as the job store recorded it.
#[derive(Debug, Clone, Copy)]
struct JobRun {
    job: u64,
    instance: &'static str,
    token: FencingToken,
}

/// The resource the jobs write to. It checks the token of every write: that check, not the
/// election, is what stops a leader that has lost its leadership without knowing it.
struct JobStore {
    fence: Fence,
    runs: Mutex<Vec<JobRun>>,
    /// The last job done, for whoever follows progress.
    done: watch::Sender<u64>,
}

impl JobStore {
    fn new() -> Self {
        JobStore {
            fence: Fence::new(),
            runs: Mutex::new(Vec::new()),
            done: watch::Sender::new(0),
        }
    }

    /// The next job due, if any: the one after the last done.
    fn next_job(&self) -> Option<u64> {
        let next = *self.done.borrow() + 1;
        (next <= JOBS).then_some(next)
    }

    /// Records a job's result, unless a newer leader has written already.
    fn record(
        &self,
        job: u64,
        instance: &'static str,
        token: FencingToken,
    ) -> Result<(), StaleToken> {
        // Check and write under one lock, as a real store would in one transaction.
        let mut runs = self.runs.lock().unwrap();
        self.fence.admit(token)?;
        runs.push(JobRun {
            job,
            instance,
            token,
        });
        self.done.send_replace(job);
        Ok(())
    }

    fn runs(&self) -> Vec<JobRun> {
        self.runs.lock().unwrap().clone()
    }
}

/// One scheduler instance's work while it leads.
struct Scheduler {
    instance: &'static str,
    store: Arc<JobStore>,
}

#[async_trait::async_trait]
impl LeaderTask for Scheduler {
    /// Runs due jobs one after the other. `run` drops this future the moment leadership is
    /// lost, so no job is started, or finished, by a leader that knows it is no longer one.
    async fn lead(&mut self, leadership: Leadership) -> zkfence::Result<()> {
        let token = leadership.token();
        println!("{}: elected leader, token {token}", self.instance);
        loop {
            match leadership.state() {
                LeaseState::Held => {}
                // Disconnected: still the leader, but maybe not for long enough to finish a
                // job. Start nothing until the connection is back (or `run` cancels us).
                LeaseState::Suspended => {
                    println!(
                        "{}: disconnected from ZooKeeper, starting no new job",
                        self.instance
                    );
                    leadership.lease().session().state_changed().await;
                    continue;
                }
                LeaseState::Lost(_) => return Ok(()),
            }
            let Some(job) = self.store.next_job() else {
                // Nothing more is due: stay leader, idle, until shut down.
                return std::future::pending().await;
            };
            tokio::time::sleep(JOB_TIME).await; // the job's work
            match self.store.record(job, self.instance, token) {
                Ok(()) => println!("{}: ran job {job} with token {token}", self.instance),
                Err(stale) => {
                    println!("{}: job {job} refused by the store: {stale}", self.instance);
                    return Ok(());
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("zkfence=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let (connect, _local) = common::ensemble().await?;
    // A fresh election per run, so that runs against a shared ensemble do not meet.
    let path = format!("/scheduler-{}/leader", std::process::id());
    // scheduler-a reaches ZooKeeper through a fault proxy, so that its network can be cut.
    let (proxy, via_proxy) = common::proxy_to(&connect).await?;

    let store = Arc::new(JobStore::new());
    let mut progress = store.done.subscribe();
    let (shutdown, shutdown_requested) = watch::channel(false);
    let mut instances = Vec::new();
    for (i, instance) in INSTANCES.into_iter().enumerate() {
        let address = if i == 0 { &via_proxy } else { &connect };
        let session = Session::connect(
            address,
            SessionOptions::new().session_timeout(SESSION_TIMEOUT),
        )
        .await?;
        let election = session.election(&path);
        let mut scheduler = Scheduler {
            instance,
            store: store.clone(),
        };
        let mut shutdown_requested = shutdown_requested.clone();
        instances.push(tokio::spawn(async move {
            let stop = async move {
                let _ = shutdown_requested.wait_for(|stop| *stop).await;
            };
            (instance, election.run(instance, &mut scheduler, stop).await)
        }));
        if i == 0 {
            // Let scheduler-a lead first, so that it is the leader whose network is cut.
            progress.wait_for(|done| *done >= 1).await?;
        }
    }

    progress.wait_for(|done| *done >= CUT_AFTER).await?;
    let before = *store.runs().last().expect("jobs ran");
    println!(
        "--- failover: cutting the network of {}, the leader ---",
        before.instance
    );
    proxy.blackhole();
    tokio::time::timeout(
        Duration::from_secs(60),
        progress.wait_for(|done| *done >= JOBS),
    )
    .await??;

    // Had the old leader been frozen mid-job (a long GC pause) rather than cancelled, its
    // write would arrive now, with its old token. The store refuses it:
    let late = store.record(JOBS + 1, before.instance, before.token);
    match &late {
        Err(stale) => println!("{}'s late write is refused: {stale}", before.instance),
        Ok(()) => println!("{}'s late write was accepted!", before.instance),
    }

    shutdown.send_replace(true);
    for instance in instances {
        let (name, result) = instance.await?;
        match result {
            Ok(()) => println!("{name}: shut down"),
            // The cut instance may learn that its session expired; that is its failure mode.
            Err(err) if name == before.instance && err.is_session_terminal() => {
                println!("{name}: {err}")
            }
            Err(err) => return Err(format!("{name} failed: {err}").into()),
        }
    }
    check(&store.runs(), before, late.is_err())
}

/// Every job ran exactly once; the leader changed once, after the cut, to a larger token.
fn check(runs: &[JobRun], before: JobRun, late_refused: bool) -> Result<(), Box<dyn Error>> {
    for job in 1..=JOBS {
        let by: Vec<&str> = runs
            .iter()
            .filter(|r| r.job == job)
            .map(|r| r.instance)
            .collect();
        if by.len() != 1 {
            return Err(format!("job {job} ran {} times: {by:?}", by.len()).into());
        }
    }
    let handovers: Vec<(&JobRun, &JobRun)> = runs
        .iter()
        .zip(runs.iter().skip(1))
        .filter(|(a, b)| a.instance != b.instance)
        .collect();
    let [(old, new)] = handovers[..] else {
        return Err(format!("expected one failover, saw {}: {runs:?}", handovers.len()).into());
    };
    if old.instance != before.instance || old.job < before.job || new.token <= old.token {
        return Err(format!("bad failover from {old:?} to {new:?}").into());
    }
    if !late_refused {
        return Err("the store accepted a stale leader's write".into());
    }
    println!(
        "every job ran exactly once; failover from {} (token {}) to {} (token {}) after job {}",
        old.instance, old.token, new.instance, new.token, old.job
    );
    Ok(())
}
