//! `zkfence elect ELECTIONPATH --id NAME -- CMD`: run CMD only while leading.

use std::time::Duration;

use zkfence::{Leadership, Session};

use crate::child::{self, Cmd, Outcome};
use crate::exit::{self, Failure};
use crate::progress;
use crate::remote::{close, Global};
use crate::signals::{self, Signals};

/// The arguments of `elect`.
pub struct Options {
    pub path: String,
    pub id: String,
    pub restart: Restart,
    pub grace: Duration,
    pub cmd: Vec<String>,
}

/// When CMD ended on its own, whether to campaign again to run it again (`--restart`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Whatever CMD's exit.
    Always,
    /// After a non-zero exit or a signal; a clean exit ends zkfence with 0.
    OnFailure,
    /// Never: exit with CMD's code (76 after leadership was lost), as --once.
    Never,
}

/// The first pause before a failed CMD runs again, so a CMD that crashes at start does not
/// spin; it doubles while CMD keeps failing, up to the most.
const RESTART_PAUSE_MIN: Duration = Duration::from_secs(1);
const RESTART_PAUSE_MAX: Duration = Duration::from_secs(60);

/// A run of CMD at least this long starts the failure pause over: it was not crashing.
const RESTART_PAUSE_RESET_AFTER: Duration = RESTART_PAUSE_MAX;

/// The first pause before a failed campaign is tried again, and the most it doubles to.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(5);

/// True if a failed campaign may succeed when tried again: the session expired (the
/// Session opens a new one), our waiting node or the directory was deleted, or the
/// ensemble went quiet at the grant. Authentication failures and bad input are final.
fn may_pass(e: &zkfence::Error) -> bool {
    matches!(
        e,
        zkfence::Error::SessionExpired
            | zkfence::Error::NodeDeleted { .. }
            | zkfence::Error::NoAnswer { .. }
            | zkfence::Error::LockDirectoryDeleted { .. }
    )
}

pub async fn run(global: &Global, o: Options) -> Result<u8, Failure> {
    let mut signals = Signals::catch()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot catch signals: {e}")))?;
    let session = match connect(global, &mut signals).await? {
        Ok(session) => session,
        Err(code) => return Ok(code),
    };
    let once = o.restart == Restart::Never;
    let mut pause = RETRY_PAUSE_MIN;
    // The pause before CMD runs again after a failure: doubles while it keeps failing.
    let mut restart_pause = RESTART_PAUSE_MIN;
    loop {
        let election = session.election(&o.path);
        let campaign = election.campaign(&o.id);
        let campaigned = tokio::select! {
            leadership = progress::show_while(&session, &o.path, "waiting to lead", campaign) => leadership,
            sig = signals.recv() => {
                drop(election);
                close(session, global.session_timeout).await;
                eprintln!("zkfence: {} while campaigning in {}: left the election", signals::name(sig), o.path);
                return Ok(exit::by_signal(sig));
            }
        };
        drop(election);
        let leadership = match campaigned {
            Ok(leadership) => {
                pause = RETRY_PAUSE_MIN;
                leadership
            }
            // A failure that can pass: the Session reopens after an expiry, and a deleted
            // node or a quiet ensemble may be back. Campaign again, after a pause that
            // doubles while it keeps failing.
            Err(e) if !once && may_pass(&e) => {
                eprintln!(
                    "zkfence: {e}: campaigning again in {} in {:.1}s",
                    o.path,
                    pause.as_secs_f64()
                );
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    sig = signals.recv() => {
                        close(session, global.session_timeout).await;
                        return Ok(exit::by_signal(sig));
                    }
                }
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        eprintln!(
            "zkfence: leading {} as {:?} with token {}: starting {}",
            o.path,
            o.id,
            leadership.token(),
            o.cmd[0]
        );
        match lead(leadership, &session, &o, &mut signals, &mut restart_pause).await {
            Led::Exit(code) => {
                close(session, Duration::from_secs(1)).await;
                return Ok(code);
            }
            Led::Again { after } => {
                if !after.is_zero() {
                    tokio::select! {
                        _ = tokio::time::sleep(after) => {}
                        sig = signals.recv() => {
                            close(session, global.session_timeout).await;
                            return Ok(exit::by_signal(sig));
                        }
                    }
                }
            }
        }
    }
}

/// What to do after one term as leader.
enum Led {
    Exit(u8),
    /// Campaign again, after a pause.
    Again {
        after: Duration,
    },
}

/// Runs CMD for one term of leadership.
async fn lead(
    leadership: Leadership,
    session: &Session,
    o: &Options,
    signals: &mut Signals,
    restart_pause: &mut Duration,
) -> Led {
    let once = o.restart == Restart::Never;
    let env = [
        ("ZKFENCE_TOKEN", leadership.token().to_string()),
        ("ZKFENCE_LOCK_PATH", o.path.clone()),
        ("ZKFENCE_NODE", leadership.lease().path().to_string()),
        ("ZKFENCE_LEADER_ID", o.id.clone()),
    ];
    let label = format!("leadership of {}", o.path);
    // As in exec: on a lapse our node stays until CMD's group is gone, so the next leader's
    // CMD cannot start while ours runs.
    leadership.lease().keep_node_until_released();
    let mut cmd = match Cmd::spawn(&o.cmd, &env, leadership.lease(), o.grace, &label).await {
        Ok(cmd) => cmd,
        Err(failure) => {
            resign(leadership, session).await;
            eprintln!("zkfence: {}", failure.message);
            return Led::Exit(failure.code);
        }
    };
    match cmd.supervise(leadership.lease(), signals).await {
        Outcome::Exited {
            status,
            signal: Some(sig),
        } => {
            eprintln!(
                "zkfence: {} stopped after zkfence forwarded {} to its process group; resigning leadership of {}",
                cmd.name(),
                signals::name(sig),
                o.path
            );
            resign(leadership, session).await;
            Led::Exit(child::code_of(status))
        }
        Outcome::Exited {
            status,
            signal: None,
        } => {
            resign(leadership, session).await;
            let code = child::code_of(status);
            let ended = match status {
                child::Ended::Code(code) => format!("exited with code {code}"),
                child::Ended::Signal(sig) => format!("was killed by {}", signals::name(sig)),
            };
            let failed = code != 0;
            let again = match o.restart {
                Restart::Always => true,
                Restart::OnFailure => failed,
                Restart::Never => false,
            };
            if !again {
                if matches!(status, child::Ended::Signal(_)) || o.restart == Restart::OnFailure {
                    eprintln!(
                        "zkfence: {} {ended}: resigned leadership of {}",
                        cmd.name(),
                        o.path
                    );
                }
                return Led::Exit(code);
            }
            if !failed || cmd.ran_for() >= RESTART_PAUSE_RESET_AFTER {
                *restart_pause = RESTART_PAUSE_MIN;
            }
            let after = if failed {
                let after = *restart_pause;
                *restart_pause = (after * 2).min(RESTART_PAUSE_MAX);
                after
            } else {
                Duration::ZERO
            };
            eprintln!(
                "zkfence: {} {ended}: resigned leadership of {}, campaigning again{} (--restart {})",
                cmd.name(),
                o.path,
                if after.is_zero() {
                    String::new()
                } else {
                    format!(" in {}", crate::duration::format(after))
                },
                match o.restart {
                    Restart::Always => "always",
                    Restart::OnFailure => "on-failure",
                    Restart::Never => "never",
                }
            );
            Led::Again { after }
        }
        Outcome::Escaped => {
            eprintln!(
                "zkfence: resigning leadership of {} although part of {}'s process group could not be stopped",
                o.path,
                cmd.name()
            );
            resign(leadership, session).await;
            Led::Exit(exit::ESCAPED)
        }
        Outcome::Lost(reason) => {
            let why = match reason.or_else(|| match leadership.state() {
                zkfence::LeaseState::Lost(r) => Some(r),
                _ => None,
            }) {
                Some(r) => format!("lost leadership of {} ({r})", o.path),
                None => format!(
                    "lost leadership of {} (its lease was about to run out unrenewed)",
                    o.path
                ),
            };
            eprintln!(
                "zkfence: {why} while {} ran: its process group was stopped (SIGTERM, SIGKILL by the lease's deadline)",
                cmd.name(),
            );
            // Only now, with CMD's group gone, may leadership pass on.
            drop(leadership);
            if once {
                Led::Exit(exit::LOST)
            } else {
                eprintln!("zkfence: campaigning again in {}", o.path);
                Led::Again {
                    after: Duration::ZERO,
                }
            }
        }
    }
}

/// Resigns and waits (bounded) for the ensemble to confirm, keeping the session open.
async fn resign(leadership: Leadership, session: &Session) {
    let within = session.session_timeout().max(Duration::from_secs(1));
    if !matches!(
        tokio::time::timeout(within, leadership.resign()).await,
        Ok(Ok(()))
    ) {
        eprintln!("zkfence: could not confirm the resignation; leadership passes on when the session expires");
    }
}

/// Connects, unless a signal comes first: then `Ok(Err(exit code))`.
async fn connect(global: &Global, signals: &mut Signals) -> Result<Result<Session, u8>, Failure> {
    tokio::select! {
        session = global.connect() => Ok(Ok(session?)),
        sig = signals.recv() => Ok(Err(exit::by_signal(sig))),
    }
}
