//! Running CMD while a lease (a lock or a leadership) lives, and stopping it when it ends.

use std::future::Future;
use std::io::ErrorKind;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;
use zkfence::LossReason;

use crate::exit::{self, Failure};
use crate::signals::{self, Signals};

/// CMD, started.
pub struct Cmd {
    child: Child,
    pid: i32,
    name: String,
}

/// How the supervision of CMD ended.
pub enum Outcome {
    /// CMD exited: on its own, or after `signal`, which zkfence received and forwarded.
    Exited {
        status: ExitStatus,
        signal: Option<i32>,
    },
    /// The lease ended first; CMD was terminated.
    Lost(LossReason),
}

impl Cmd {
    /// Starts `argv` with `env` added to our environment. CMD shares our terminal and process
    /// group, so it can be interactive.
    pub fn spawn(argv: &[String], env: &[(&str, String)]) -> Result<Cmd, Failure> {
        let name = argv[0].clone();
        let mut command = Command::new(&name);
        command
            .args(&argv[1..])
            .envs(env.iter().map(|(k, v)| (*k, v)));
        let child = command.spawn().map_err(|e| match e.kind() {
            ErrorKind::NotFound => Failure::new(
                exit::NOT_FOUND,
                format!("cannot run {name:?}: command not found"),
            ),
            ErrorKind::PermissionDenied => Failure::new(
                exit::CANNOT_EXECUTE,
                format!("cannot run {name:?}: permission denied"),
            ),
            _ => Failure::new(exit::CANNOT_EXECUTE, format!("cannot run {name:?}: {e}")),
        })?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        Ok(Cmd { child, pid, name })
    }

    /// The display name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn signal(&self, sig: i32) {
        if self.pid > 0 {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped
            // child, so it cannot have been recycled for another process.
            unsafe {
                libc::kill(self.pid, sig);
            }
        }
    }

    async fn wait(&mut self) -> ExitStatus {
        loop {
            match self.child.wait().await {
                Ok(status) => return status,
                // Only EINTR-like conditions reach here; try again shortly.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// SIGTERM, then SIGKILL if CMD has not exited after `grace`. Reports what it did on
    /// stderr (the caller has said why).
    pub async fn terminate(&mut self, grace: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(status) => status,
            Err(_) => {
                eprintln!("zkfence: {} (pid {}) did not exit within {grace:?} of SIGTERM: sending SIGKILL", self.name, self.pid);
                self.signal(libc::SIGKILL);
                self.wait().await
            }
        }
    }

    /// Waits for CMD while the lease lives. A signal to zkfence is forwarded to CMD (and
    /// SIGKILL follows after `grace`); when `lost` resolves first, CMD is terminated.
    pub async fn supervise(
        &mut self,
        lost: impl Future<Output = LossReason>,
        signals: &mut Signals,
        grace: Duration,
    ) -> Outcome {
        tokio::pin!(lost);
        let mut kill_at: Option<Instant> = None;
        let mut received = None;
        loop {
            tokio::select! {
                status = self.wait() => return Outcome::Exited { status, signal: received },
                reason = &mut lost => return Outcome::Lost(reason),
                sig = signals.recv() => {
                    if !(sig == libc::SIGINT && terminal_sent_it_to_cmd_too()) {
                        self.signal(sig);
                    }
                    kill_at.get_or_insert(Instant::now() + grace);
                    received = Some(sig);
                    tracing::info!(signal = signals::name(sig), cmd = %self.name, "forwarded a signal to CMD");
                }
                _ = sleep_until(kill_at) => {
                    eprintln!("zkfence: {} (pid {}) did not exit within {grace:?} of the signal: sending SIGKILL", self.name, self.pid);
                    self.signal(libc::SIGKILL);
                    kill_at = None;
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// True when we run in the foreground of a terminal: a Ctrl-C there reaches every process of
/// the foreground group, CMD included, so forwarding it would make CMD see it twice.
fn terminal_sent_it_to_cmd_too() -> bool {
    // SAFETY: getpgrp and tcgetpgrp only read process state; tcgetpgrp fails harmlessly with
    // ENOTTY on a descriptor that is not a terminal.
    let group = unsafe { libc::getpgrp() };
    (0..=2).any(|fd| unsafe { libc::tcgetpgrp(fd) } == group)
}

/// The exit code that passes CMD's ending on: its code, or 128 + the signal that killed it.
pub fn code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(sig)) => exit::by_signal(sig),
        (None, None) => exit::ERROR,
    }
}
