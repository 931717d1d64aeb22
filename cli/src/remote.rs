//! What every subcommand that talks to ZooKeeper shares: the connection and security
//! options resolved and checked ([`Global`]), connecting, and closing a session.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zkfence::{Session, SessionOptions};

use crate::args::{Remote, SecurityArgs};
use crate::exit::{self, Failure};

/// A secret from the first line of `file` if given, else from the environment variable `var`.
fn read_secret(file: Option<&Path>, var: &str, what: &str) -> Result<String, Failure> {
    match file {
        Some(path) => std::fs::read_to_string(path)
            .map(|text| text.lines().next().unwrap_or_default().to_string())
            .map_err(|e| {
                Failure::new(
                    exit::USAGE,
                    format!("cannot read the {what} from {}: {e}", path.display()),
                )
            }),
        None => std::env::var(var).map_err(|_| {
            Failure::new(
                exit::USAGE,
                format!("the {what} is missing: set {var}, or pass its file"),
            )
        }),
    }
}

/// How the CLI authenticates and encrypts: the flags, with the secrets already read.
#[derive(Clone, Default)]
pub(crate) struct Security {
    tls_ca: Option<PathBuf>,
    tls_identity: Option<(PathBuf, PathBuf)>,
    sasl: Option<(String, String)>,
    digest: Option<(String, String)>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("Security")
            .field("tls_ca", &self.tls_ca)
            .field("tls_identity", &self.tls_identity)
            .field("sasl_user", &self.sasl.as_ref().map(|(u, _)| u))
            .field("digest_user", &self.digest.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl Security {
    pub(crate) fn from_args(args: &SecurityArgs) -> Result<Security, Failure> {
        let needs = |given: bool, what: &str, other: bool, hint: &str| {
            if given && !other {
                Err(Failure::new(exit::USAGE, format!("{what} needs {hint}")))
            } else {
                Ok(())
            }
        };
        needs(
            args.tls_cert.is_some(),
            "--tls-cert",
            args.tls_ca.is_some(),
            "--tls-ca: the CA that signed the servers' certificates",
        )?;
        needs(
            args.tls_cert.is_some(),
            "--tls-cert",
            args.tls_key.is_some(),
            "--tls-key: its private key",
        )?;
        needs(
            args.tls_key.is_some(),
            "--tls-key",
            args.tls_cert.is_some(),
            "--tls-cert: the certificate it belongs to",
        )?;
        needs(
            args.sasl_password_file.is_some(),
            "--sasl-password-file",
            args.sasl_user.is_some(),
            "--sasl-user",
        )?;
        needs(
            args.auth_password_file.is_some(),
            "--auth-password-file",
            args.auth.is_some(),
            "--auth digest:USER",
        )?;
        let sasl = match &args.sasl_user {
            None => None,
            Some(user) => Some((
                user.clone(),
                read_secret(
                    args.sasl_password_file.as_deref(),
                    "ZKFENCE_SASL_PASSWORD",
                    "SASL password",
                )?,
            )),
        };
        let digest = match &args.auth {
            None => None,
            Some(user) => Some((
                user.clone(),
                read_secret(
                    args.auth_password_file.as_deref(),
                    "ZKFENCE_AUTH_PASSWORD",
                    "--auth password",
                )?,
            )),
        };
        Ok(Security {
            tls_ca: args.tls_ca.clone(),
            tls_identity: args.tls_cert.clone().zip(args.tls_key.clone()),
            sasl,
            digest,
        })
    }

    fn apply(&self, mut options: SessionOptions) -> SessionOptions {
        if let Some(ca) = &self.tls_ca {
            options = options.tls_ca_file(ca);
        }
        if let Some((cert, key)) = &self.tls_identity {
            options = options.tls_identity(cert, key);
        }
        if let Some((user, password)) = &self.sasl {
            options = options.sasl_digest(user, password);
        }
        if let Some((user, password)) = &self.digest {
            options = options.auth("digest", format!("{user}:{password}").as_bytes());
        }
        options
    }
}

/// The session timeout asked for when --session-timeout is not given.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Below this the client's reads may time out before a server can answer (it gives each a
/// fraction of the session timeout: 10ms failed on loopback, 100ms on a loaded machine), and
/// no usual ensemble grants less anyway (2 tickTimes of 200ms): refused (exit 2).
const MIN_SESSION_TIMEOUT: Duration = Duration::from_millis(400);

/// Below this no connect can complete: --connect-timeout is refused (exit 2).
const MIN_CONNECT_TIMEOUT: Duration = Duration::from_millis(10);

/// The connect timeout when --connect-timeout is not given is the session timeout asked
/// for, but at least this.
const MIN_DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What every command that talks to ZooKeeper needs.
#[derive(Debug, Clone)]
pub(crate) struct Global {
    pub(crate) connect: String,
    /// The session timeout to ask for; the servers may grant another.
    pub(crate) session_timeout: Duration,
    /// Given with --session-timeout (not the default): a different grant is told.
    pub(crate) session_timeout_asked: bool,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) server_tick_time: Option<Duration>,
    pub(crate) security: Security,
}

impl Global {
    /// The options of a subcommand (`remote`, then those before it, then the defaults),
    /// checked as far as they can be without a server: the connect string, the secrets.
    pub(crate) fn from_args(remote: Remote, outer: &Remote) -> Result<Global, Failure> {
        let connection = remote.connection.or(&outer.connection);
        let security = Security::from_args(&remote.security.or(&outer.security))?;
        let connect = connection
            .connect
            .unwrap_or_else(|| "127.0.0.1:2181".to_string());
        zkfence::validate_connect_string(&connect)?;
        if let Some(t) = connection
            .session_timeout
            .filter(|t| *t < MIN_SESSION_TIMEOUT)
        {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "--session-timeout {} cannot work: the client gives each answer a fraction \
                     of it, and no handshake completes that fast (servers grant at least 2 \
                     tickTimes anyway); ask for at least {}, e.g. 10s, and the servers clamp \
                     it to their bounds",
                    crate::duration::format(t),
                    crate::duration::format(MIN_SESSION_TIMEOUT)
                ),
            ));
        }
        if let Some(t) = connection
            .connect_timeout
            .filter(|t| *t < MIN_CONNECT_TIMEOUT)
        {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "--connect-timeout {} cannot work: no connection and session handshake \
                     completes that fast; give at least {}, e.g. 5s",
                    crate::duration::format(t),
                    crate::duration::format(MIN_CONNECT_TIMEOUT)
                ),
            ));
        }
        Ok(Global {
            connect,
            session_timeout: connection
                .session_timeout
                .unwrap_or(DEFAULT_SESSION_TIMEOUT),
            session_timeout_asked: connection.session_timeout.is_some(),
            connect_timeout: connection.connect_timeout,
            server_tick_time: connection.server_tick_time,
            security,
        })
    }

    /// Connects a session, or fails with exit code 3 (2 for a bad connect string).
    pub(crate) async fn connect(&self) -> Result<Session, Failure> {
        let mut options = SessionOptions::new().session_timeout(self.session_timeout);
        // The connect timeout defaults to the session timeout, but a tiny session timeout
        // asked for is raised by the servers once connected: it must not cut the connect.
        let connect_timeout = self
            .connect_timeout
            .unwrap_or(self.session_timeout.max(MIN_DEFAULT_CONNECT_TIMEOUT));
        options = options.connect_timeout(connect_timeout);
        if let Some(tick) = self.server_tick_time {
            options = options.server_tick_time(tick);
        }
        let session = Session::connect(&self.connect, self.security.apply(options))
            .await
            .map_err(Failure::from)?;
        self.tell_granted(session.session_timeout());
        Ok(session)
    }

    /// Says on stderr, once per process, that the servers granted another session timeout
    /// than the one asked for with --session-timeout: a crashed holder's lock frees after
    /// the granted one, and only `-v` showed it.
    fn tell_granted(&self, granted: Duration) {
        static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !self.session_timeout_asked || granted == self.session_timeout {
            return;
        }
        if TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        eprintln!(
            "zkfence: the ensemble granted a session timeout of {}, not the {} asked for: its \
             servers clamp it to their minSessionTimeout..maxSessionTimeout (2 to 20 \
             tickTimes unless configured)",
            crate::duration::format(granted),
            crate::duration::format(self.session_timeout)
        );
    }
}

/// A lock or election path, checked before anything is sent (exit 2).
pub(crate) fn check_path(path: &str) -> Result<(), Failure> {
    zkfence::validate_path(path).map_err(Failure::from)
}

/// Closes `session` and waits, at most `within`, until the ensemble has closed it, which
/// removes every node the session still has. Returns false if that was not confirmed (the
/// nodes then disappear when the session expires).
///
/// Every other handle on the session (locks, leases) must be dropped first.
pub(crate) async fn close(session: Session, within: Duration) -> bool {
    let mut states = session.client().state_watcher();
    drop(session);
    let closed = async {
        // Background deletes still hold the client; the session closes after they finish.
        while !states.peek_state().is_terminated() {
            states.changed().await;
        }
    };
    tokio::time::timeout(within, closed).await.is_ok()
}

/// Releases a lease and closes its session, waiting at most about one session timeout.
/// Says so on stderr if the ensemble did not confirm.
pub(crate) async fn release_and_close(lease: zkfence::Lease, session: Session) {
    let path = lease.lock_path().to_string();
    let within = session.session_timeout().max(Duration::from_secs(1));
    let released = tokio::time::timeout(within, lease.release()).await;
    let confirmed = matches!(released, Ok(Ok(())));
    if !confirmed {
        let why = match released {
            Ok(Err(e)) => e.to_string(),
            _ => format!("no answer within {within:?}"),
        };
        eprintln!("zkfence: could not confirm the release of {path} ({why}); the lock frees itself when the session expires");
    }
    close(session, within).await;
}
