//! A contender: one OS process with one zkfence [`Session`], reaching the ensemble through a
//! proxy of its own, looping: acquire with a timeout, fenced writes to the campaign's
//! register, hold for a random time, release or drop.
//!
//! It prints each of its events as a JSON line on stdout, stamped on the campaign's clock
//! when it happens. On stdin it takes commands: `expire` expires its own session (from
//! another connection, as ZooKeeper's tests do); end of input stops it (it releases what it
//! holds and closes its session).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use zkfence::zookeeper_client as zk;
use zkfence::{Error, Lease, Session, SessionOptions, SessionState};

mod stores;

use super::faults::Rng;
use super::history::monotonic_us;
use super::{Event, Record};
use stores::{Database, Register};

/// What the campaign tells a contender process (one JSON argument).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ContenderConfig {
    pub(crate) client: usize,
    /// The contender's proxy.
    pub(crate) connect: String,
    /// The ensemble itself, for expiring our own session.
    pub(crate) direct: String,
    pub(crate) lock_path: String,
    pub(crate) register: SocketAddr,
    pub(crate) session_timeout_ms: u64,
    pub(crate) seed: u64,
    /// The longest a hold lasts, if nothing goes wrong.
    pub(crate) max_hold_ms: u64,
    /// The campaign's start on `CLOCK_MONOTONIC`, microseconds.
    pub(crate) origin_us: u64,
    /// With `--postgres`: the database every write also goes to, after the register.
    #[serde(default)]
    pub(crate) postgres: Option<String>,
}

/// The body of a contender process: `config` is the JSON argument the campaign passed. Runs
/// until its standard input ends, and returns the process's exit code.
///
/// A program that runs campaigns calls this when it is started as a contender, e.g. the
/// `zkfence` CLI when its first argument is [`CONTENDER_MODE`](super::CONTENDER_MODE):
///
/// ```no_run
/// let args: Vec<String> = std::env::args().collect();
/// if args.get(1).map(String::as_str) == Some(zkfence_testcontainers::chaos::CONTENDER_MODE) {
///     std::process::exit(zkfence_testcontainers::chaos::contender_main(&args[2]));
/// }
/// ```
pub fn contender_main(config: &str) -> i32 {
    let config: ContenderConfig = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("zkfence chaos contender: bad configuration: {e}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zkfence chaos contender: cannot start a runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(Contender::new(config).run())
}

struct Contender {
    c: ContenderConfig,
    t: Duration,
    rng: Rng,
    seq: u64,
}

/// How a hold ended.
enum Outcome {
    /// The work is done.
    Done,
    /// The lease said it is lost (and the loss was recorded then).
    Lost,
    /// The register refused a write: a newer holder has written.
    Refused,
    /// Asked to stop.
    Stop,
}

impl Contender {
    fn new(c: ContenderConfig) -> Contender {
        let rng = Rng::new(c.seed ^ (c.client as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f));
        Contender {
            t: Duration::from_millis(c.session_timeout_ms),
            c,
            rng,
            seq: 0,
        }
    }

    fn emit(&self, event: Event) {
        emit(&self.c, event);
    }

    async fn run(mut self) -> i32 {
        let client = self.c.client;
        let (stop_tx, mut stop) = watch::channel(false);
        let options = SessionOptions::new().session_timeout(self.t);
        let session = loop {
            match Session::connect(&self.c.connect, options.clone()).await {
                Ok(s) => break s,
                Err(e) => {
                    self.emit(Event::AcquireFailed {
                        client,
                        error: format!("connect: {e}"),
                    });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        self.emit(Event::Connected {
            client,
            session: format!("{:x}", session.id()),
        });
        tokio::spawn(report_reconnections(session.clone(), self.c.clone()));
        tokio::spawn(commands(session.clone(), self.c.clone(), stop_tx));
        let mut register = match Register::connect(self.c.register).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("zkfence chaos contender {client}: cannot reach the register: {e}");
                return 1;
            }
        };
        let mut db = self.c.postgres.clone().map(Database::new);
        let lock = session
            .lock(&self.c.lock_path)
            .with_id(&format!("chaos-client-{client}"));
        while !*stop.borrow() {
            let acquired = tokio::select! {
                r = lock.acquire_timeout(self.t * 3) => r,
                _ = stop.changed() => break,
            };
            match acquired {
                Ok(lease) => {
                    let outcome = self.hold(lease, &mut register, db.as_mut(), &mut stop);
                    if let Outcome::Stop = outcome.await {
                        break;
                    }
                }
                Err(Error::Timeout { .. }) => self.emit(Event::AcquireTimeout { client }),
                Err(e) => {
                    self.emit(Event::AcquireFailed {
                        client,
                        error: e.to_string(),
                    });
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        drop(lock);
        // Closing ends the session at once, so no node of ours outlives the campaign.
        let _ = tokio::time::timeout(self.t, session.close()).await;
        0
    }

    /// One hold: a write at once, then steps of work (a random pause, then a write), then a
    /// release, most of the time, or a drop. The loss of the lease is recorded the moment
    /// the lease reports it; the step under way still ends with its write, as work that does
    /// not look at its lease between computing and writing would: a late write that only the
    /// fence can stop. A write goes to the register, then (with `--postgres`) to PostgreSQL,
    /// whatever the register said: each store is a fence of its own, and each must stop a
    /// late write by itself. A refusal by either ends the hold.
    async fn hold(
        &mut self,
        lease: Lease,
        register: &mut Register,
        mut db: Option<&mut Database>,
        stop: &mut watch::Receiver<bool>,
    ) -> Outcome {
        let client = self.c.client;
        let token = lease.token().get();
        self.emit(Event::Granted {
            client,
            token,
            sequence: lease.sequence(),
        });
        let writes = 1 + self.rng.below(3);
        let pause = Duration::from_millis(self.c.max_hold_ms / writes);
        let lost = std::cell::Cell::new(false);
        let outcome = {
            let (rng, seq, c) = (&mut self.rng, &mut self.seq, &self.c);
            let work = async {
                for k in 0..writes {
                    if lost.get() {
                        return Outcome::Lost;
                    }
                    if k > 0 {
                        tokio::time::sleep(rng.between(Duration::ZERO, pause)).await;
                    }
                    *seq += 1;
                    let admitted = match register.write(client, token, *seq).await {
                        Ok(admitted) => admitted,
                        Err(_) => return Outcome::Stop,
                    };
                    let admitted_too = match db.as_deref_mut() {
                        Some(db) => db.write(c, token, *seq).await,
                        None => true,
                    };
                    if !admitted || !admitted_too {
                        return Outcome::Refused;
                    }
                }
                if lost.get() {
                    Outcome::Lost
                } else {
                    Outcome::Done
                }
            };
            tokio::pin!(work);
            tokio::select! {
                outcome = &mut work => outcome,
                reason = lease.lost() => {
                    emit(&self.c, Event::Lost { client, token, reason: reason.to_string() });
                    lost.set(true);
                    // The step under way ends with its (late) write.
                    tokio::select! {
                        outcome = &mut work => outcome,
                        _ = stop.changed() => Outcome::Stop,
                    }
                }
                _ = stop.changed() => Outcome::Stop,
            }
        };
        match outcome {
            // Recorded when it happened.
            Outcome::Lost => {}
            // The fence said a newer holder wrote: we are no longer the holder.
            Outcome::Refused if !lost.get() => self.emit(Event::Dropped { client, token }),
            Outcome::Refused => {}
            Outcome::Done | Outcome::Stop if !lost.get() => {
                if matches!(outcome, Outcome::Stop) || self.rng.percent(75) {
                    self.emit(Event::Released { client, token });
                    let _ = tokio::time::timeout(self.t, lease.release()).await;
                } else {
                    self.emit(Event::Dropped { client, token });
                    drop(lease);
                }
            }
            Outcome::Done | Outcome::Stop => {}
        }
        outcome
    }
}

/// Prints `event` as a JSON line on stdout, stamped now on the campaign's clock.
fn emit(c: &ContenderConfig, event: Event) {
    let record = Record {
        t_us: monotonic_us().saturating_sub(c.origin_us),
        event,
    };
    let line = serde_json::to_string(&record).expect("records serialize");
    let mut out = std::io::stdout().lock();
    // The campaign gone (stdout closed) is seen on stdin too: ignore the error here.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Records each new ZooKeeper session (after an expiry, the `Session` opens another).
async fn report_reconnections(session: Session, c: ContenderConfig) {
    let mut last = session.id();
    while let Some(state) = session.state_changed().await {
        if state == SessionState::Connected && session.id() != last {
            last = session.id();
            emit(
                &c,
                Event::Connected {
                    client: c.client,
                    session: format!("{last:x}"),
                },
            );
        }
    }
}

/// Reads the campaign's commands from stdin until it ends, then asks the contender to stop.
async fn commands(session: Session, c: ContenderConfig, stop: watch::Sender<bool>) {
    let t = Duration::from_millis(c.session_timeout_ms);
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == "expire" {
            if let Err(error) = expire(&session, &c.direct, t).await {
                eprintln!("zkfence chaos contender: could not expire the session: {error}");
                emit(
                    &c,
                    Event::ExpiryFailed {
                        client: c.client,
                        error,
                    },
                );
            }
        }
    }
    let _ = stop.send(true);
}

/// Expires our own ZooKeeper session: another connection takes it over with its id and
/// password, then closes it, which the ensemble commits as the session's end.
async fn expire(session: &Session, direct: &str, t: Duration) -> Result<(), String> {
    let info = session.client().session().clone();
    let connect = zk::Client::connector()
        .with_session(info)
        .with_session_timeout(t)
        .connect(direct);
    match tokio::time::timeout(t, connect).await {
        Ok(Ok(other)) => {
            drop(other);
            Ok(())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no session within {t:?}")),
    }
}
