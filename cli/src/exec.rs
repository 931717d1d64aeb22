//! `zkfence exec LOCKPATH -- CMD`: run CMD while holding a lock.

use std::time::Duration;

use zkfence::{Contender, Error, Lease, Lock, NodeFormat, Semaphore, Session};

use crate::child::{self, Cmd, Outcome};
use crate::exit::{self, Failure};
use crate::progress;
use crate::remote::{close, release_and_close, Global};
use crate::signals::{self, Signals};

/// The arguments of `exec`.
pub struct Options {
    pub lockpath: String,
    pub timeout: Option<Duration>,
    /// The flag that made `timeout` zero, as the message names it: `--no-wait` (else
    /// `--timeout 0`).
    pub no_wait: bool,
    pub format: NodeFormat,
    pub id: Option<String>,
    pub grace: Duration,
    /// A read lock: shared with other `--shared` runs, excluded by plain ones.
    pub shared: bool,
    /// A semaphore with this many permits instead of a lock.
    pub limit: Option<usize>,
    /// Revocation requests stop CMD as SIGTERM would (Curator's protocol).
    pub revocable: bool,
    pub cmd: Vec<String>,
}

/// What `exec` queues on: a lock (plain or read side) or a semaphore.
enum Gate {
    Lock(Lock),
    Semaphore(Semaphore),
}

impl Gate {
    async fn try_acquire(&self) -> zkfence::Result<Option<Lease>> {
        match self {
            Gate::Lock(l) => l.try_acquire().await,
            Gate::Semaphore(s) => s.try_acquire().await,
        }
    }

    async fn acquire_timeout(&self, t: Duration) -> zkfence::Result<Lease> {
        match self {
            Gate::Lock(l) => l.acquire_timeout(t).await,
            Gate::Semaphore(s) => s.acquire_timeout(t).await,
        }
    }

    async fn acquire(&self) -> zkfence::Result<Lease> {
        match self {
            Gate::Lock(l) => l.acquire().await,
            Gate::Semaphore(s) => s.acquire().await,
        }
    }

    /// The holders, oldest first (for a lock: the head of the queue, or every reader ahead
    /// of the first writer).
    async fn holders(&self) -> zkfence::Result<Vec<Contender>> {
        match self {
            Gate::Lock(l) => {
                // The head holds; readers ahead of the first writer hold together.
                let mut contenders = l.contenders().await?;
                contenders.truncate(held_by(&contenders));
                Ok(contenders)
            }
            Gate::Semaphore(s) => s.holders().await,
        }
    }
}

pub async fn run(global: &Global, o: Options) -> Result<u8, Failure> {
    // Caught before anything is created, so no signal can leave a node behind.
    let mut signals = Signals::catch()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot catch signals: {e}")))?;
    let session = tokio::select! {
        session = global.connect() => session?,
        sig = signals.recv() => return Ok(exit::by_signal(sig)),
    };
    let id = o.id.clone().unwrap_or_else(|| child::default_id(&o.cmd));
    let lock = match (o.limit, o.shared) {
        (Some(n), _) => Gate::Semaphore(session.semaphore(&o.lockpath, n).with_id(&id)),
        (None, shared) => {
            let lock = match shared {
                true => session.read_lock(&o.lockpath),
                false => session.lock(&o.lockpath),
            };
            let lock = lock.with_format(o.format).with_id(&id);
            Gate::Lock(if o.revocable { lock.revocable() } else { lock })
        }
    };

    let deadline = o.timeout.map(|t| tokio::time::Instant::now() + t);
    let acquire = async {
        loop {
            let attempt = match (o.timeout, deadline) {
                (Some(t), _) if t.is_zero() => lock.try_acquire().await,
                (_, Some(deadline)) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    lock.acquire_timeout(left).await.map(Some)
                }
                _ => lock.acquire().await.map(Some),
            };
            match attempt {
                // The session expired while we waited: our node went with it, and the
                // Session opens a new one. Queue again there, at the back, until --timeout.
                Err(Error::SessionExpired) if session.reopens() => {
                    eprintln!(
                        "zkfence: the session expired while waiting for {}: lost our place in the queue; queueing again on a new session",
                        o.lockpath
                    );
                }
                other => return other,
            }
        }
    };
    let acquired = tokio::select! {
        acquired = progress::show_while(&session, &o.lockpath, "waiting for", acquire) => acquired,
        sig = signals.recv() => {
            // The acquire future is gone, which gives up our place; closing the session
            // waits until the ensemble has removed our node.
            drop(lock);
            close(session, global.session_timeout).await;
            eprintln!("zkfence: {} while waiting for {}: left the queue, nothing was run", signals::name(sig), o.lockpath);
            return Ok(exit::by_signal(sig));
        }
    };
    let lease = match acquired {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            let holder = holder_of(&lock, o.shared).await;
            drop(lock);
            close(session, global.session_timeout).await;
            let flag = if o.no_wait {
                "--no-wait"
            } else {
                "--timeout 0"
            };
            return Err(Failure::new(
                exit::TIMEOUT,
                format!(
                    "{} is taken{holder}; did not wait ({flag}): try again later",
                    o.lockpath
                ),
            ));
        }
        Err(Error::Timeout {
            path,
            waited,
            ahead,
            ..
        }) => {
            // The library names the holder's node; the owner's id says more to an operator.
            let holder = holder_of(&lock, o.shared).await;
            drop(lock);
            close(session, global.session_timeout).await;
            return Err(Failure::new(
                exit::TIMEOUT,
                format!(
                    "timed out after {:.1}s waiting for {path}: {ahead} ahead of us{holder}; nothing was acquired, try again later",
                    waited.as_secs_f64()
                ),
            ));
        }
        Err(Error::PermitsMismatch {
            ours,
            theirs,
            holder,
            ..
        }) => {
            drop(lock);
            close(session, global.session_timeout).await;
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "{} is held with limit {theirs} (by {holder}), but this run asked for \
                     --limit {ours}: every run on a path must use the same --limit; nothing was run",
                    o.lockpath
                ),
            ));
        }
        Err(err) => return Err(err.into()),
    };
    drop(lock);
    hold(lease, session, &o, &mut signals).await
}

/// Runs CMD under the lease, then releases it.
async fn hold(
    lease: Lease,
    session: Session,
    o: &Options,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    tracing::info!(path = %o.lockpath, token = %lease.token(), "lock acquired: running CMD");
    let env = [
        ("ZKFENCE_TOKEN", lease.token().to_string()),
        ("ZKFENCE_LOCK_PATH", o.lockpath.clone()),
        ("ZKFENCE_NODE", lease.path().to_string()),
    ];
    let label = format!("the lock on {}", o.lockpath);
    // On a lapse of the lease clock our node stays until the supervisor reports CMD's whole
    // group gone (then the lease is dropped below): the next holder's CMD cannot start
    // while ours still runs. The session's expiry still bounds it if zkfence dies.
    // (Cmd::spawn refuses a lease that is already lost.)
    lease.keep_node_until_released();
    let mut cmd = match Cmd::spawn(&o.cmd, &env, &lease, o.grace, &label).await {
        Ok(cmd) => cmd,
        Err(failure) => {
            release_and_close(lease, session).await;
            return Err(failure);
        }
    };
    match cmd.supervise(&lease, signals).await {
        Outcome::Exited { status, .. } if cmd.revoked() => {
            eprintln!(
                "zkfence: revocation of {} requested: {} was stopped (SIGTERM to its process group, SIGKILL after --grace) and {}; releasing",
                o.lockpath,
                cmd.name(),
                match status {
                    child::Ended::Code(code) => format!("exited with code {code}"),
                    child::Ended::Signal(sig) => format!("was killed by {}", signals::name(sig)),
                }
            );
            release_and_close(lease, session).await;
            Ok(exit::REVOKED)
        }
        Outcome::Exited { status, signal } => {
            if let Some(sig) = signal {
                eprintln!(
                    "zkfence: {} stopped after zkfence forwarded {} to its process group; releasing {}",
                    cmd.name(),
                    signals::name(sig),
                    o.lockpath
                );
            }
            release_and_close(lease, session).await;
            Ok(child::code_of(status))
        }
        Outcome::Lost(reason) => {
            let reason = reason.or_else(|| match lease.state() {
                zkfence::LeaseState::Lost(r) => Some(r),
                _ => None,
            });
            let why = match reason {
                Some(r) => format!("lost the lock on {} ({r})", o.lockpath),
                None => format!(
                    "lost the lock on {} (its lease was about to run out unrenewed)",
                    o.lockpath
                ),
            };
            eprintln!(
                "zkfence: {why} while {} ran: its process group was stopped (SIGTERM, SIGKILL by the lease's deadline); \
                 anything it wrote after that carries the stale token {}",
                cmd.name(),
                lease.token()
            );
            // Only now, with CMD's group gone, may the lock pass on.
            drop(lease);
            close(session, Duration::from_secs(1)).await;
            Ok(exit::LOST)
        }
        Outcome::Escaped => {
            // The supervisor named the processes on stderr; nothing zkfence can do stops
            // them, and holding the lock would not either.
            eprintln!(
                "zkfence: releasing {} although part of {}'s process group could not be stopped",
                o.lockpath,
                cmd.name()
            );
            release_and_close(lease, session).await;
            Ok(exit::ESCAPED)
        }
    }
}

/// "; holder: ID (host, pid N) with token T, session 0x…, queued 1.2s ago" for the current
/// holder, or "; holders: …, …" for each of a semaphore's, if any. For a reader (`shared`),
/// also the writer that waits ahead of us when there is one: readers queue behind a waiting
/// writer (so writers do not starve), and that writer is what we wait for.
async fn holder_of(lock: &Gate, shared: bool) -> String {
    let look = async {
        match lock {
            Gate::Lock(l) if shared => {
                let contenders = l.contenders().await?;
                let (holders, rest) = contenders.split_at(held_by(&contenders));
                let writer = rest.iter().find(|c| !c.is_shared()).cloned();
                Ok((holders.to_vec(), writer))
            }
            _ => lock.holders().await.map(|h| (h, None)),
        }
    };
    let Ok(Ok((holders, writer))) = tokio::time::timeout(Duration::from_secs(2), look).await else {
        return String::new();
    };
    let described = |h: &Contender| {
        format!(
            "{h}, queued {:.1}s ago",
            crate::status::age_ms(h.created_ms) as f64 / 1000.0
        )
    };
    let mut out = String::new();
    if !holders.is_empty() {
        let named: Vec<String> = holders.iter().map(described).collect();
        let word = if named.len() == 1 {
            "holder"
        } else {
            "holders"
        };
        out = format!("; {word}: {}", named.join("; "));
    }
    // A writer ahead of a reader only blocks it when readers hold: a writer at the head is
    // the holder already named.
    if let Some(writer) = writer.filter(|_| holders.first().is_some_and(Contender::is_shared)) {
        out.push_str(&format!(
            "; a writer waits ahead of us, and readers queue behind a waiting writer: {}",
            described(&writer)
        ));
    }
    out
}

/// How many of `contenders` (in queue order) hold: the head, or every reader ahead of the
/// first writer.
fn held_by(contenders: &[Contender]) -> usize {
    match contenders.iter().position(|c| !c.is_shared()) {
        Some(0) => 1,
        Some(i) => i,
        None => contenders.len(),
    }
}
