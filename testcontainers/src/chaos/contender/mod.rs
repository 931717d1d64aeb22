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
use zkfence::{Error, FencedOp, Session, SessionOptions, SessionState};

mod held;
mod partitions;
mod stores;

use super::faults::Rng;
use super::history::monotonic_us;
use super::recipe::data_node;
use super::{holder_told_bound, Event, Recipe, Record, Store};
use held::{Held, NotGranted, Part};
use stores::{Register, StoreWriter};

/// What the campaign tells a contender process (one JSON argument).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ContenderConfig {
    pub(crate) client: usize,
    /// The contender's proxy.
    pub(crate) connect: String,
    /// The ensemble itself, for expiring our own session.
    pub(crate) direct: String,
    /// The recipes to drive: each hold is of one of them, chosen at random.
    pub(crate) recipes: Vec<Recipe>,
    /// The semaphore's permits.
    pub(crate) permits: usize,
    pub(crate) register: SocketAddr,
    pub(crate) session_timeout_ms: u64,
    pub(crate) seed: u64,
    /// The longest a hold lasts, if nothing goes wrong.
    pub(crate) max_hold_ms: u64,
    /// The campaign's start on `CLOCK_MONOTONIC`, microseconds.
    pub(crate) origin_us: u64,
    /// With `--sink`: each store every write also goes to, after the register, and what to
    /// reach it by (a URL, an endpoint, the HTTP service's address).
    #[serde(default)]
    pub(crate) sinks: Vec<(Store, String)>,
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
        let mut sinks: Vec<StoreWriter> = (self.c.sinks.iter())
            .map(|(store, address)| StoreWriter::new(*store, address.clone()))
            .collect();
        let id = format!("chaos-client-{client}");
        while !*stop.borrow() {
            let recipes = &self.c.recipes;
            let recipe = recipes[self.rng.below(recipes.len() as u64) as usize];
            if recipe == Recipe::Partitions {
                let membership =
                    self.membership(&session, &id, &mut register, &mut sinks, &mut stop);
                if membership.await {
                    break;
                }
                continue;
            }
            let acquiring = held::acquire(
                &session,
                recipe,
                self.c.permits,
                &id,
                self.t * 3,
                &mut self.rng,
            );
            let acquired = tokio::select! {
                r = acquiring => r,
                _ = stop.changed() => break,
            };
            match acquired {
                Ok(held) => {
                    let outcome = self.hold(held, &mut register, &mut sinks, &mut stop);
                    if let Outcome::Stop = outcome.await {
                        break;
                    }
                }
                Err(NotGranted::TimedOut) => self.emit(Event::AcquireTimeout { client }),
                Err(NotGranted::Failed(error)) => {
                    self.emit(Event::AcquireFailed { client, error });
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        // Closing ends the session at once, so no node of ours outlives the campaign.
        let _ = tokio::time::timeout(self.t, session.close()).await;
        0
    }

    /// One hold: a step of work at once, then more steps (a random pause, then the step's
    /// writes), then a release, most of the time, or a drop. Half of the holds learn of a
    /// loss by awaiting it, the others by polling the lease's state; half also write through
    /// [`fenced_write`](zkfence::Lease::fenced_write). The loss of the grant is
    /// recorded the moment the library reports it; the step under way still ends with its
    /// writes, as work that does not look at its lease between computing and writing would:
    /// late writes that only the fences can stop. A step writes each resource the grant
    /// holds to every store, whatever the others said: each store is a fence of its own, and
    /// each must stop a late write by itself. A refusal by any ends the hold.
    async fn hold(
        &mut self,
        held: Held,
        register: &mut Register,
        sinks: &mut [StoreWriter],
        stop: &mut watch::Receiver<bool>,
    ) -> Outcome {
        let client = self.c.client;
        let (recipe, read, group) = (held.recipe(), held.read(), held.group());
        let polls = self.rng.percent(50);
        // Half of the holds also write through `Lease::fenced_write`, which tells its lease
        // when the ensemble finds our node gone; the others learn only what the library
        // tells them unasked.
        let fenced_in_zk = self.rng.percent(50);
        let parts: Vec<(String, u64)> = held
            .parts()
            .iter()
            .map(|p| (p.path.clone(), p.lease.token().get()))
            .collect();
        emit_all(
            &self.c,
            held.parts()
                .iter()
                .map(|p| Event::Granted {
                    client,
                    token: p.lease.token().get(),
                    sequence: p.lease.sequence(),
                    recipe,
                    path: p.path.clone(),
                    read,
                    node: p.lease.path().to_string(),
                    group: group.clone(),
                    polls,
                })
                .collect(),
        );
        let ends = |make: &dyn Fn(String, u64) -> Event| -> Vec<Event> {
            parts.iter().map(|(p, t)| make(p.clone(), *t)).collect()
        };
        let steps = 1 + self.rng.below(3);
        let pause = Duration::from_millis(self.c.max_hold_ms / steps);
        let lost = std::cell::Cell::new(false);
        let outcome = {
            let (rng, seq, c) = (&mut self.rng, &mut self.seq, &self.c);
            let t = self.t;
            let held = &held;
            let work = async {
                for k in 0..steps {
                    if lost.get() {
                        return Outcome::Lost;
                    }
                    if k > 0 {
                        tokio::time::sleep(rng.between(Duration::ZERO, pause)).await;
                    }
                    let mut admitted = true;
                    for part in held.parts() {
                        *seq += 1;
                        let how = Writes {
                            recipe,
                            read,
                            fenced_in_zk,
                        };
                        match write_resource(c, register, sinks, how, &part, *seq, t).await {
                            Ok(ok) => admitted &= ok,
                            Err(()) => return Outcome::Stop,
                        }
                    }
                    if !admitted {
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
                (reason, seen_held_us) = held.loss(polls, || now_us(&self.c)) => {
                    emit_all(&self.c, ends(&|path, token| Event::Lost {
                        client,
                        token,
                        reason: reason.clone(),
                        path,
                        seen_held_us,
                    }));
                    lost.set(true);
                    // The step under way ends with its (late) writes.
                    tokio::select! {
                        outcome = &mut work => outcome,
                        _ = stop.changed() => Outcome::Stop,
                    }
                }
                _ = stop.changed() => Outcome::Stop,
            }
        };
        let dropped = |path, token| Event::Dropped {
            client,
            token,
            path,
            refused: false,
        };
        match outcome {
            // Recorded when it happened.
            Outcome::Lost => {}
            // A fence said a newer holder wrote, yet the lease has not said it is lost: ask
            // it (as it is asked during the hold) for as long as the library may take to tell
            // a holder whose node someone deleted, then stop acting as the holder either way.
            Outcome::Refused if !lost.get() => {
                let told = held.loss(polls, || now_us(&self.c));
                match tokio::time::timeout(holder_told_bound(self.t), told).await {
                    Ok((reason, seen_held_us)) => emit_all(
                        &self.c,
                        ends(&|path, token| Event::Lost {
                            client,
                            token,
                            reason: reason.clone(),
                            path,
                            seen_held_us,
                        }),
                    ),
                    Err(_) => emit_all(
                        &self.c,
                        ends(&|path, token| Event::Dropped {
                            client,
                            token,
                            path,
                            refused: true,
                        }),
                    ),
                }
            }
            Outcome::Refused => {}
            Outcome::Done | Outcome::Stop if !lost.get() => {
                if matches!(outcome, Outcome::Stop) || self.rng.percent(75) {
                    emit_all(
                        &self.c,
                        ends(&|path, token| Event::Released {
                            client,
                            token,
                            path,
                        }),
                    );
                    let _ = tokio::time::timeout(self.t, held.release()).await;
                } else {
                    emit_all(&self.c, ends(&dropped));
                    drop(held);
                }
            }
            Outcome::Done | Outcome::Stop => {}
        }
        outcome
    }
}

/// How a grant's steps write.
#[derive(Clone, Copy)]
struct Writes {
    recipe: Recipe,
    /// A read lock's reader: it reads the register, and writes nowhere.
    read: bool,
    /// Whether it also writes through `Lease::fenced_write`.
    fenced_in_zk: bool,
}

/// One step's writes to one resource the grant holds, to every store, whatever the others
/// said: the register (a reader reads it), each `--sink` store, and with `fenced_in_zk`
/// ZooKeeper. `Ok(false)` if any refused; `Err` if the register is gone (the campaign ended).
async fn write_resource(
    c: &ContenderConfig,
    register: &mut Register,
    sinks: &mut [StoreWriter],
    how: Writes,
    part: &Part<'_>,
    seq: u64,
    t: Duration,
) -> Result<bool, ()> {
    let token = part.lease.token().get();
    let mut admitted = true;
    if how.recipe.fences_by_token() {
        admitted &= (register
            .send(c.client, token, seq, &part.path, how.read)
            .await)
            .map_err(|_| ())?;
        if !how.read {
            for sink in sinks.iter_mut() {
                admitted &= sink.write(c, token, seq, &part.path).await;
            }
        }
    }
    if how.fenced_in_zk && !how.read {
        admitted &= zk_write(c, part, seq, t).await;
    }
    Ok(admitted)
}

/// Writes (client, token, seq) into ZooKeeper through `part`'s lease
/// ([`Lease::fenced_write`]: committed only while our node exists), to the resource's data
/// node, and records the answer; false if the write was refused (the lease is lost or our
/// node is gone). An answer that does not come within `t` (requests wait while the session
/// is disconnected) leaves the outcome unknown, recorded as such; the hold goes on.
async fn zk_write(c: &ContenderConfig, part: &Part<'_>, seq: u64, t: Duration) -> bool {
    let token = part.lease.token().get();
    let op = FencedOp::SetData {
        path: data_node(&part.path),
        data: format!("{} {token} {seq}", c.client).into_bytes(),
        version: None,
    };
    let sent_us = now_us(c);
    let answer = tokio::time::timeout(t, part.lease.fenced_write(&[op])).await;
    let (committed, refused, error) = match answer {
        Ok(Ok(())) => (true, false, None),
        Ok(Err(e @ Error::LockLost { .. })) => (false, true, Some(e.to_string())),
        Ok(Err(e)) => (false, false, Some(e.to_string())),
        Err(_) => (false, false, Some(format!("no answer within {t:?}"))),
    };
    emit(
        c,
        Event::ZkWrite {
            client: c.client,
            token,
            seq,
            path: part.path.clone(),
            sent_us,
            committed,
            refused,
            error,
        },
    );
    !refused
}

/// Now on the campaign's clock.
fn now_us(c: &ContenderConfig) -> u64 {
    monotonic_us().saturating_sub(c.origin_us)
}

/// Prints `events` as JSON lines on stdout, all stamped with one instant (the parts of a
/// multi-lock's grant or loss happen together).
fn emit_all(c: &ContenderConfig, events: Vec<Event>) {
    let t_us = now_us(c);
    let mut out = std::io::stdout().lock();
    for event in events {
        let line = serde_json::to_string(&Record { t_us, event }).expect("records serialize");
        // The campaign gone (stdout closed) is seen on stdin too: ignore the error here.
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// Prints `event` as a JSON line on stdout, stamped now on the campaign's clock.
fn emit(c: &ContenderConfig, event: Event) {
    emit_all(c, vec![event]);
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
