//! Exit codes, and the one-line failure every command ends with when it cannot do its job.

use zkfence::Error;

/// Success (or CMD's own code, for `exec` and `elect`).
pub const OK: u8 = 0;
/// Any other error.
pub const ERROR: u8 = 1;
/// Bad usage: arguments, paths, connect string (clap uses 2 as well).
pub const USAGE: u8 = 2;
/// No session: the ensemble is unreachable, or stopped answering for a session timeout.
pub const UNAVAILABLE: u8 = 3;
/// The ensemble refused our credentials or an ACL denied us.
pub const DENIED: u8 = 4;
/// `status`/`leader`: nothing exists at the path (sysexits' EX_NOINPUT).
pub const NO_SUCH_PATH: u8 = 66;
/// `revoke`: the holder does not take revocation requests (not `exec --revocable`), so
/// nothing was written; `--force` writes anyway (sysexits' EX_UNAVAILABLE).
pub const NOT_REVOCABLE: u8 = 69;
/// The lock was not acquired within `--timeout` (sysexits' EX_TEMPFAIL: try again later).
pub const TIMEOUT: u8 = 75;
/// The lock or leadership was lost while CMD ran; CMD was terminated.
pub const LOST: u8 = 76;
/// CMD's process group could not be stopped: some of its processes belong to another user
/// (a setuid program, `sudo`), which zkfence may not signal, and may still run (sysexits'
/// EX_NOPERM).
pub const ESCAPED: u8 = 77;
/// `exec --revocable`: a revocation was requested (`zkfence revoke`); CMD's group was
/// stopped and the lock released.
pub const REVOKED: u8 = 79;
/// CMD exists but could not be executed (shell convention).
pub const CANNOT_EXECUTE: u8 = 126;
/// CMD was not found (shell convention).
pub const NOT_FOUND: u8 = 127;

/// The exit code for "ended by signal `sig`" (shell convention: 128 + the signal number).
pub fn by_signal(sig: i32) -> u8 {
    (128 + sig).clamp(0, 255) as u8
}

/// The exit-code table shown by `--help`.
pub const HELP: &str = "\
Exit codes:
  0        success; for exec and elect: CMD's own exit code
  1        error (for demo: a promise did not hold; for chaos: the checker found a
           violation)
  2        usage error: bad arguments, path or connect string, a TLS file that cannot be
           used, a plaintext connection to a TLS port, a --limit other than the holders',
           or a semaphore (--limit) and a lock on one path (nothing was run); checked
           before connecting where no server is needed
  3        ZooKeeper unreachable (every server refused, did not resolve, or did not answer
           within --connect-timeout), or the session was closed; an expired session is
           survived: exec queues again, elect campaigns again
  4        authentication failed (SASL, digest, a TLS certificate not trusted either way)
           or an ACL denied access
  66       status, leader: nothing exists at the path
  69       revoke: the holder does not take revocation requests (it was not started with
           exec --revocable, or is another client's); nothing was written (--force writes
           the request anyway, e.g. for a Curator holder made revocable)
  75       exec --timeout passed, or --no-wait found the lock taken: nothing ran
           (EX_TEMPFAIL); the message names the holders
  76       the lock (exec) or leadership (elect --once) was lost, or about to run out
           unrenewed, while CMD ran (or before it could start: nothing ran); CMD's whole
           process group was stopped before the lock could pass on
  77       CMD's group could not be stopped: processes of another user in it (setuid, sudo)
           escaped the kill and may still run; run zkfence as that user instead
  79       exec --revocable: revocation was requested (zkfence revoke, Curator's Revoker);
           CMD's whole process group was stopped (SIGTERM, SIGKILL after --grace), then
           the lock released
  126/127  CMD could not be executed / was not found
  128+N    zkfence or CMD ended by signal N (e.g. 143 after SIGTERM), the lock released first";

/// Why a command stopped: its exit code and one line saying what happened and what to do.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

/// The exit code that fits a library error.
pub fn code_of(err: &Error) -> u8 {
    match err {
        // A TLS file that cannot be used, or a plaintext client pointed at a TLS port: the
        // command line is wrong, not the ensemble.
        Error::InvalidPath { .. }
        | Error::InvalidConnectString { .. }
        | Error::PermitsMismatch { .. }
        | Error::KindConflict { .. }
        | Error::UnsoundSettings { .. }
        | Error::TlsConfig { .. }
        | Error::TlsRequired { .. }
        | Error::NotALockNode { .. } => USAGE,
        Error::ConnectFailed { .. }
        | Error::SessionExpired
        | Error::SessionClosed
        | Error::NoAnswer { .. }
        | Error::ChrootMissing { .. } => UNAVAILABLE,
        // The server's certificate was not trusted, or ours was refused: identities failed.
        Error::AuthFailed | Error::NoAuth { .. } | Error::TlsHandshake { .. } => DENIED,
        Error::Timeout { .. } => TIMEOUT,
        Error::LockLost { .. } => LOST,
        _ => ERROR,
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Failure {
        // The library's messages already say what to do next.
        Failure {
            code: code_of(&err),
            message: err.to_string(),
        }
    }
}

#[cfg(feature = "harness")]
impl From<zkfence_testcontainers::HarnessError> for Failure {
    fn from(err: zkfence_testcontainers::HarnessError) -> Failure {
        Failure::new(
            ERROR,
            format!("could not run a local ZooKeeper ensemble: {err}"),
        )
    }
}
