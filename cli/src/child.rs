//! Running CMD while a lease (a lock or a leadership) lives, through the supervisor
//! (`supervisor.rs`), and telling the caller how it ended.

use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;
use zkfence::{Lease, LossReason};

use crate::exit::{self, Failure};
use crate::signals::{self, Signals};
use crate::supervisor;

/// The contender id when --id is not given, for `exec` and `elect` alike: this host's name
/// and CMD's program name (`web-3:backup.sh`), which tells an operator where the holder
/// runs. Never CMD's arguments: the id is stored in the node's data, which anyone who may
/// read the lock path reads (`zkfence status`, `zkCli get`), and arguments carry secrets
/// (`psql postgres://app:secret@db/...`). The host and zkfence's pid are in the owner data
/// already.
pub fn default_id(cmd: &[String]) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    let program = cmd
        .first()
        .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
        .unwrap_or_default();
    format!("{host}:{program}")
}

/// CMD, started under its supervisor.
pub struct Cmd {
    supervisor: Child,
    /// Cancel-safe line reads (`next_line`), as `select!` needs.
    reader: Lines<BufReader<OwnedReadHalf>>,
    writer: OwnedWriteHalf,
    /// CMD's pid, which is also its process group's id.
    pgid: i32,
    name: String,
    /// A revocation was requested of a revocable lease, and CMD's group told.
    revoked: bool,
    /// When CMD started.
    started: Instant,
}

/// How CMD ended.
pub enum Outcome {
    /// CMD's group is gone after CMD exited on its own, or after `signal`, which zkfence
    /// received and forwarded to the group.
    Exited { status: Ended, signal: Option<i32> },
    /// CMD's group was stopped because the lease ended (`Some`: zkfence saw the loss) or
    /// its deadline passed without an extension (the supervisor stopped it on its own).
    Lost(Option<LossReason>),
    /// Members of CMD's group that zkfence may not signal (they changed their user)
    /// outlived SIGKILL; the supervisor named them on stderr. They may still run.
    Escaped,
}

/// How CMD itself ended.
#[derive(Debug, Clone, Copy)]
pub enum Ended {
    Code(i32),
    Signal(i32),
}

impl Cmd {
    /// Starts the supervisor, which starts `argv` in a process group of its own, with `env`
    /// added to our environment. `lease` gives the first deadline; `label` names the lease
    /// in the supervisor's messages.
    pub async fn spawn(
        argv: &[String],
        env: &[(&str, String)],
        lease: &Lease,
        grace: Duration,
        label: &str,
    ) -> Result<Cmd, Failure> {
        let name = argv[0].clone();
        if crate::terminal::ours() {
            // CMD's group will have the terminal (the supervisor gives it): our own notes
            // on stderr must not stop us meanwhile.
            crate::terminal::write_from_background();
        }
        let Some(until) = lease.valid_until() else {
            return Err(Failure::new(
                exit::LOST,
                format!("lost {label} before {name} could start; nothing was run"),
            ));
        };
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| Failure::new(exit::ERROR, format!("cannot create a socket: {e}")))?;
        let fd = theirs.as_raw_fd();
        // The deadline as an absolute instant: a stall from here until the supervisor reads
        // it (a slow spawn, zkfence frozen) cannot move it later.
        let deadline_ns = crate::clock::BootInstant::of(until).as_ns();
        stop_here_for_tests(deadline_ns);
        // /proc/self/exe is this very binary, even if the file was replaced since we started.
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("zkfence")
            .arg(supervisor::MODE)
            .args(supervisor::args(fd, grace, deadline_ns, label, argv))
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        // SAFETY: only fcntl, which is async-signal-safe, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // The supervisor's end of the socket must survive exec.
                let flags = libc::fcntl(fd, libc::F_GETFD);
                libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
                Ok(())
            });
        }
        // The supervisor's PR_SET_PDEATHSIG fires when the *thread* that forked it ends.
        // Commands run on the thread of `block_on` in main, which lives as long as the
        // process, so the signal means "zkfence died".
        let spawned = command.spawn();
        drop(theirs); // so the supervisor reads end-of-file when we die
        let supervisor = spawned.map_err(|e| {
            Failure::new(
                exit::ERROR,
                format!("cannot start the supervisor for {name:?}: {e}"),
            )
        })?;
        ours.set_nonblocking(true)
            .map_err(|e| Failure::new(exit::ERROR, format!("socket: {e}")))?;
        let stream = UnixStream::from_std(ours)
            .map_err(|e| Failure::new(exit::ERROR, format!("socket: {e}")))?;
        let (read, writer) = stream.into_split();
        let mut cmd = Cmd {
            supervisor,
            reader: BufReader::new(read).lines(),
            writer,
            pgid: 0,
            name,
            revoked: false,
            started: Instant::now(),
        };
        match cmd.report().await {
            Some(line) if line.starts_with("started ") => {
                cmd.pgid = line["started ".len()..].trim().parse().unwrap_or(0);
                cmd.started = Instant::now();
                Ok(cmd)
            }
            Some(line) if line.starts_with("failed ") => {
                let mut parts = line["failed ".len()..].splitn(2, ' ');
                let code = parts
                    .next()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(exit::ERROR);
                let message = parts.next().unwrap_or("cannot run CMD").to_string();
                let _ = cmd.supervisor.wait().await;
                Err(Failure::new(code, message))
            }
            _ => {
                let _ = cmd.supervisor.wait().await;
                Err(Failure::new(
                    exit::ERROR,
                    format!("the supervisor of {:?} failed to start", cmd.name),
                ))
            }
        }
    }

    /// True once a revocation request was passed on to CMD's group as SIGTERM.
    pub fn revoked(&self) -> bool {
        self.revoked
    }

    /// How long CMD has run (until now, or until it ended if asked then).
    pub fn ran_for(&self) -> Duration {
        self.started.elapsed()
    }

    /// The display name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn report(&mut self) -> Option<String> {
        self.reader.next_line().await.ok().flatten()
    }

    async fn send(&mut self, line: String) {
        // A supervisor that is gone shows as end-of-file on the read side.
        let _ = self.writer.write_all(format!("{line}\n").as_bytes()).await;
    }

    /// Waits until CMD's process group is gone while the lease lives. Each move of the
    /// lease clock extends the supervisor's deadline; a signal to zkfence is forwarded to the
    /// group (SIGKILL follows after --grace); when the lease is lost the supervisor stops
    /// the group (SIGTERM, SIGKILL after --grace or at the deadline, whichever is first).
    pub async fn supervise(&mut self, lease: &Lease, signals: &mut Signals) -> Outcome {
        let session = lease.session().clone();
        let lost = lease.lost();
        tokio::pin!(lost);
        let mut loss = None;
        let mut received = None;
        let mut clock_runs = true;
        loop {
            tokio::select! {
                report = self.report() => {
                    if report.is_some() {
                        let _ = self.supervisor.wait().await;
                    }
                    return match report.as_deref().and_then(parse_done) {
                        Some((status, why)) => match why {
                            "exited" => Outcome::Exited { status, signal: received },
                            "lost" | "deadline" => Outcome::Lost(loss),
                            "foreign" => Outcome::Escaped,
                            // "parent" cannot reach us: we are the parent.
                            _ => Outcome::Lost(loss),
                        },
                        None => self.supervisor_gone(loss).await,
                    };
                }
                reason = &mut lost, if loss.is_none() => {
                    loss = Some(reason);
                    self.send("lost".into()).await;
                }
                _ = session.valid_until_changed(), if clock_runs => {
                    match lease.valid_until() {
                        Some(until) => {
                            let until = crate::clock::BootInstant::of(until).as_ns();
                            self.send(format!("until {until}")).await;
                        }
                        // The loss branch tells the supervisor.
                        None => clock_runs = false,
                    }
                }
                // Only a revocable lease ever resolves this: the request goes to CMD's group
                // like a SIGTERM to zkfence (SIGKILL follows after --grace).
                _ = lease.revoke_requested(), if !self.revoked => {
                    self.revoked = true;
                    self.send(format!("signal {}", libc::SIGTERM)).await;
                    tracing::info!(cmd = %self.name, "revocation requested: SIGTERM to CMD's process group");
                }
                sig = signals.recv() => {
                    self.send(format!("signal {sig}")).await;
                    received = Some(sig);
                    tracing::info!(signal = signals::name(sig), cmd = %self.name, "forwarded a signal to CMD's process group");
                }
            }
        }
    }

    /// The supervisor ended without a report (someone killed it): CMD's group may run on
    /// unsupervised, so kill it from here and wait (bounded) until it is gone.
    async fn supervisor_gone(&mut self, loss: Option<LossReason>) -> Outcome {
        eprintln!(
            "zkfence: the supervisor of {} died: SIGKILL to its process group {}",
            self.name, self.pgid
        );
        if self.pgid > 0 {
            // SAFETY: kill(2); the group id stays reserved while any member lives.
            unsafe {
                libc::kill(-self.pgid, libc::SIGKILL);
            }
            let until = Instant::now() + Duration::from_secs(2);
            // SAFETY: signal 0 only checks for existence.
            while unsafe { libc::kill(-self.pgid, 0) } == 0 && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let _ = self.supervisor.wait().await;
        Outcome::Lost(loss)
    }
}

fn parse_done(line: &str) -> Option<(Ended, &str)> {
    let mut w = line.split_whitespace();
    if w.next()? != "done" {
        return None;
    }
    let kind = w.next()?;
    let n: i32 = w.next()?.parse().ok()?;
    let why = w.next()?;
    let status = match kind {
        "code" => Ended::Code(n),
        "signal" => Ended::Signal(n),
        _ => return None,
    };
    Some((status, why))
}

/// The exit code that passes CMD's ending on: its code, or 128 + the signal that killed it.
pub fn code_of(status: Ended) -> u8 {
    match status {
        Ended::Code(code) => code.clamp(0, 255) as u8,
        Ended::Signal(sig) => exit::by_signal(sig),
    }
}

/// Test hook (`ZKFENCE_TEST_STOP_BEFORE_DEADLINE`): says the deadline just computed, then
/// stops zkfence (SIGSTOP) before it is handed to the supervisor, so a test can show that a
/// stall there does not move it.
fn stop_here_for_tests(deadline_ns: u128) {
    if std::env::var_os("ZKFENCE_TEST_STOP_BEFORE_DEADLINE").is_some() {
        eprintln!("zkfence-test: deadline {deadline_ns} ns on CLOCK_BOOTTIME; stopping");
        // SAFETY: raise(3) with a valid signal: stops every thread of the process.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}
