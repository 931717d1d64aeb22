//! The one error type of zkfence.
//!
//! Every variant says what happened and what the caller should do next: retry, rebuild the
//! [`Session`](crate::Session), fix the input, or stop acting as the lock holder.

use std::fmt;
use std::time::Duration;

/// Shorthand for `Result<T, zkfence::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors returned by zkfence.
///
/// The enum is `#[non_exhaustive]`: match the variants you act on and treat the rest as fatal
/// for the operation at hand. Two helpers say what to do: [`Error::is_retryable`] (the same
/// call again may succeed: the session expired and the `Session` opened a new one, a node
/// was deleted, the ensemble was silent) and [`Error::is_session_terminal`] (the ZooKeeper
/// session ended, with every lease of it: stop acting on them).
///
/// ```
/// # fn handle(err: zkfence::Error) {
/// match err {
///     zkfence::Error::Timeout { .. } => { /* not now: try again later */ }
///     zkfence::Error::LockLost { .. } => { /* stop acting as the holder; acquire anew */ }
///     e if e.is_retryable() => { /* acquire or campaign again, on the same Session */ }
///     e => eprintln!("{e}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lock or election path is not a valid absolute ZooKeeper path.
    #[error("invalid path {path:?}: {reason}; use an absolute path such as \"/locks/seat-42\"")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// The connect string could not be parsed.
    #[error("invalid connect string {connect:?}: {reason}; expected \"host:port[,host:port...][/chroot]\"")]
    InvalidConnectString {
        /// The connect string as given.
        connect: String,
        /// Why it was rejected.
        reason: String,
    },

    /// [`Session::connect`](crate::Session::connect) reached no server of the ensemble: each
    /// server refused, did not resolve, or did not answer within the connect timeout.
    #[error(
        "could not reach any ZooKeeper server of {connect:?} within {:?} ({}); check that the \
         ensemble runs and that this host can reach it",
        timeout,
        servers.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    ConnectFailed {
        /// The connect string.
        connect: String,
        /// The connect timeout (the failure may have come sooner: a server that refuses or a
        /// host that does not resolve fails at once).
        timeout: Duration,
        /// What happened with each server of the connect string, in its order.
        servers: Vec<ServerFailure>,
    },

    /// The session's settings cannot be made sound: the lease clock could not vouch for the
    /// session long enough to hold a lock safely (see
    /// [`SessionOptions::server_tick_time`](crate::SessionOptions::server_tick_time)). Nothing
    /// was left open. Change the settings; retrying does not help.
    #[error("unsound session settings: {reason}")]
    UnsoundSettings {
        /// What does not fit, and what would.
        reason: String,
    },

    /// The chroot of the connect string does not exist on the ensemble.
    #[error(
        "the chroot {chroot:?} does not exist on the ensemble; create it first \
         (e.g. `zkCli.sh create {chroot}`) or drop it from the connect string"
    )]
    ChrootMissing {
        /// The chroot path.
        chroot: String,
    },

    /// Authentication was rejected by the ensemble: with SASL, a wrong user or password;
    /// otherwise an `auth` scheme the servers do not accept.
    #[error(
        "ZooKeeper rejected the session's credentials: with SASL (SessionOptions::sasl_digest, \
         CLI --sasl-user), a wrong user or password, or a user the servers' JAAS config lacks; \
         with SessionOptions::auth, a scheme the servers do not accept"
    )]
    AuthFailed,

    /// A TLS file named in the [`SessionOptions`](crate::SessionOptions) is missing,
    /// unreadable or holds no usable PEM (no CA certificate, no client certificate, no key, or
    /// a key that does not fit the certificate). Nothing was sent.
    #[error("cannot use the TLS file {path:?}: {reason}; nothing was sent to the ensemble")]
    TlsConfig {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The TLS handshake with a server failed for a reason that retrying will not fix: an
    /// untrusted or misnamed server certificate, a client certificate the server rejects (or
    /// lacks), or a port that does not speak TLS. The reason says which.
    #[error("TLS with the ZooKeeper server {server} failed: {reason}")]
    TlsHandshake {
        /// The server, as in the connect string.
        server: String,
        /// What went wrong, and what to do.
        reason: String,
    },

    /// A plaintext session reached a port that speaks TLS (a `secureClientPort`).
    #[error(
        "the ZooKeeper server {server} speaks TLS on this port, so a plaintext client cannot \
         use it; connect with TLS (SessionOptions::tls_ca_file, CLI --tls-ca) or to its \
         plaintext clientPort"
    )]
    TlsRequired {
        /// The server, as in the connect string.
        server: String,
    },

    /// An ACL denies this session an operation: the node belongs to another identity (it was
    /// created with creator-only ACLs by another user or certificate), or its ACL does not
    /// grant this session's identity the permission.
    #[error(
        "access denied: the ACL of {path:?} does not allow this session's identity to {operation} \
         (the node belongs to another identity, or its ACL does not grant ours); connect as an \
         identity the ACL grants (SessionOptions::auth, sasl_digest or a TLS client certificate), \
         or have the node's owner widen its ACL"
    )]
    NoAuth {
        /// The node whose ACL denied the operation.
        path: String,
        /// What was attempted (`create`, `delete`, `read`).
        operation: &'static str,
    },

    /// The ZooKeeper session expired: every lock and leadership it held is released. Unless
    /// reopening is off, the [`Session`](crate::Session) opens a new ZooKeeper session:
    /// acquire or campaign again (see [`Session::reopens`](crate::Session::reopens)).
    #[error(
        "the ZooKeeper session expired, which released every lock it held; acquire again (the Session opens a new one unless reopening is off)"
    )]
    SessionExpired,

    /// The session was closed (its last handle was dropped, or it was closed explicitly).
    #[error("the ZooKeeper session is closed; connect a new Session")]
    SessionClosed,

    /// `acquire_timeout` gave up. The waiter's node has been removed; nothing is held.
    #[error(
        "timed out after {:.1}s waiting for {path}: {} ahead of us{}; nothing was acquired, try again later",
        waited.as_secs_f64(),
        ahead,
        holder.as_ref().map(|h| format!(", held by {h}")).unwrap_or_default()
    )]
    Timeout {
        /// The lock directory.
        path: String,
        /// How long the acquire waited.
        waited: Duration,
        /// How many contenders were ahead of us when the acquire gave up (the holder
        /// included), or at its last look if the queue could not be read then.
        ahead: usize,
        /// Who held when the acquire gave up (node, token, session, owner id, host and pid),
        /// read then, if it could be read within a short grace.
        holder: Option<Box<crate::Contender>>,
    },

    /// A semaphore was asked for with a number of permits other than the one its holders
    /// recorded: every participant must use the same limit. Nothing was created.
    #[error(
        "the semaphore {path} is used with limit {theirs} (recorded by its holder {holder}), \
         not {ours}; every participant must use the same limit: use {theirs}, or wait until \
         every holder of limit {theirs} has left"
    )]
    PermitsMismatch {
        /// The semaphore directory.
        path: String,
        /// The number of permits asked for.
        ours: usize,
        /// The number the current holders recorded.
        theirs: usize,
        /// A holder that recorded `theirs`.
        holder: Box<crate::Contender>,
    },

    /// A partition set's items or member id cannot be used; nothing was created.
    #[error("invalid partitions at {path}: {reason}")]
    InvalidPartitions {
        /// The partition path.
        path: String,
        /// What is wrong, and how to fix it.
        reason: String,
    },

    /// Another kind of lock uses this path: a lock, a read/write lock or an election where a
    /// semaphore's holders are, or a semaphore where the others' are. Their nodes live in
    /// different places (a semaphore's under `locks/` and `leases/`), so they would not
    /// exclude each other (Curator and Kazoo leave such a mix undefined): zkfence refuses it
    /// instead of granting. Nothing is held; our node, if any, was removed.
    ///
    /// What to do: use the kind the path's other users use (a semaphore with the same
    /// limit), or another path. (A plain lock and a read/write lock do mix: a plain lock is
    /// a writer to zkfence's readers.)
    #[error(
        "{path} is in use as {theirs} ({node}), and we asked for {ours}: the two kinds do not \
         exclude each other, so zkfence refuses to mix them on one path; nothing is held. Use \
         the same kind as the path's other users, or another path"
    )]
    KindConflict {
        /// The path asked for.
        path: String,
        /// What we asked for.
        ours: LockKind,
        /// What the other contenders use the path as.
        theirs: LockKind,
        /// A node of the other kind that shows it.
        node: String,
    },

    /// This `Lock` handle already holds the lock or is acquiring it.
    #[error(
        "this Lock handle for {path} already holds or is acquiring the lock; release the Lease first, \
         or make a second handle with Session::lock to queue behind it"
    )]
    AlreadyHeld {
        /// The lock directory.
        path: String,
    },

    /// The lease was lost: stop acting as the holder.
    #[error("the lease on {path} is lost ({reason}); stop acting as the holder and acquire again")]
    LockLost {
        /// The lock directory.
        path: String,
        /// Why the lease ended.
        reason: LossReason,
    },

    /// Our queue node disappeared while we waited: someone else deleted it.
    #[error("our queue node {node} was deleted by someone else while waiting; nothing is held, acquire again")]
    NodeDeleted {
        /// Full path of the node that vanished.
        node: String,
    },

    /// The lock directory was deleted while we waited (our node with it), or kept
    /// disappearing while we tried to enqueue.
    ///
    /// Fencing tokens do not depend on the directory (they are creation zxids), so nothing
    /// needs resetting: acquire again.
    #[error(
        "the lock directory {path} was deleted while we waited or enqueued (our node with it, if any); \
         nothing is held: acquire again"
    )]
    LockDirectoryDeleted {
        /// The lock directory.
        path: String,
    },

    /// An operation of a connected session got no answer from the ensemble within the session
    /// timeout (the servers are down or cut off, or the session is expiring).
    #[error(
        "no ZooKeeper server answered for {waited:?} (the session timeout) during {operation} on {path}; \
         the session may be expiring: check connectivity and retry"
    )]
    NoAnswer {
        /// What was attempted.
        operation: &'static str,
        /// The node involved.
        path: String,
        /// How long we waited.
        waited: Duration,
    },

    /// [`Session::revoke`](crate::Session::revoke) was given a path that is not a
    /// contender's node now; nothing was written.
    #[error(
        "{path} is not a lock holder's node: {reason}; give the full path of a contender's node, \
         as Lock::contenders (zkfence status) lists it, or revoke the lock's holder (zkfence revoke LOCKPATH)"
    )]
    NotALockNode {
        /// The path given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A fenced write's operation failed after the ownership check passed (nothing of the
    /// transaction was applied). `source` is the client's error, matched through the
    /// re-exported [`zookeeper_client`]: a `FencedOp::SetData` or
    /// `FencedOp::Delete` of a node that does not exist fails with `NoNode`, a `Create` of
    /// one that does with `NodeExists`, a version check with `BadVersion`.
    ///
    /// ```
    /// use zkfence::{zookeeper_client as zk, Error};
    /// # fn handle(err: Error) {
    /// match err {
    ///     Error::FencedWriteFailed { source: zk::Error::NoNode, index, .. } => {
    ///         eprintln!("operation {index} names a node that does not exist: create it first");
    ///     }
    ///     e => eprintln!("{e}"),
    /// }
    /// # }
    /// ```
    #[error("fenced write on {path} failed at operation {index}: {source}")]
    FencedWriteFailed {
        /// The lock directory.
        path: String,
        /// Index of the failing operation among those given.
        index: usize,
        /// The ZooKeeper error.
        source: zookeeper_client::Error,
    },

    /// Any other ZooKeeper error, with the operation and node it concerned.
    #[error("ZooKeeper {operation} on {path} failed: {source}")]
    ZooKeeper {
        /// What was attempted.
        operation: &'static str,
        /// The node involved.
        path: String,
        /// The client library's error.
        source: zookeeper_client::Error,
    },
}

impl Error {
    /// True when the ZooKeeper session the operation ran on has ended, with every lease of
    /// it: stop acting on those leases.
    ///
    /// It does not say the [`Session`](crate::Session) is useless: after `SessionExpired` a
    /// reopening `Session` (the default, [`Session::reopens`](crate::Session::reopens)) goes
    /// on with a new ZooKeeper session, and acquiring or campaigning again on it works
    /// ([`is_retryable`](Self::is_retryable) says so); after `SessionClosed` and
    /// `AuthFailed`, connect a new `Session`.
    pub fn is_session_terminal(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired | Error::SessionClosed | Error::AuthFailed
        ) || matches!(self, Error::LockLost { reason, .. } if reason.is_session_terminal())
    }

    /// True when making the same call again, on the same [`Session`](crate::Session), can
    /// succeed without changing anything: what a hand-written acquire or campaign loop
    /// retries on.
    ///
    /// - [`SessionExpired`](Self::SessionExpired): the `Session` opens a new ZooKeeper
    ///   session, unless reopening is off ([`Session::reopens`](crate::Session::reopens)).
    /// - [`NodeDeleted`](Self::NodeDeleted), [`LockDirectoryDeleted`](Self::LockDirectoryDeleted):
    ///   someone removed our node or directory; nothing is held.
    /// - [`NoAnswer`](Self::NoAnswer), [`ConnectFailed`](Self::ConnectFailed): the ensemble
    ///   did not answer; it may be back (retry with a pause).
    /// - [`Timeout`](Self::Timeout): the lock was taken throughout; it may be free later.
    ///
    /// False for bad input and settings, authentication and ACL failures, a closed
    /// `Session`, two kinds of lock on one path, and [`LockLost`](Self::LockLost) (the lease
    /// is gone: stop acting as the holder, then acquire anew).
    ///
    /// ```
    /// assert!(zkfence::Error::SessionExpired.is_retryable());
    /// assert!(!zkfence::Error::SessionClosed.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired
                | Error::NodeDeleted { .. }
                | Error::LockDirectoryDeleted { .. }
                | Error::NoAnswer { .. }
                | Error::ConnectFailed { .. }
                | Error::Timeout { .. }
        )
    }

    /// Maps a client error for `operation` on `path`, turning the errors callers act on into
    /// their own variants.
    pub(crate) fn zk(
        operation: &'static str,
        path: &str,
        source: zookeeper_client::Error,
    ) -> Error {
        use zookeeper_client::Error as Zk;
        match source {
            Zk::SessionExpired => Error::SessionExpired,
            Zk::ClientClosed => Error::SessionClosed,
            Zk::AuthFailed => Error::AuthFailed,
            Zk::NoAuth => Error::NoAuth {
                // ZooKeeper checks a create or a delete against the parent's ACL: name the
                // node whose ACL denied it, not the one we meant to make or remove.
                path: if operation.starts_with("create") || operation == "delete" {
                    match path.rfind('/') {
                        Some(0) => "/".to_string(),
                        Some(i) => path[..i].to_string(),
                        None => path.to_string(),
                    }
                } else {
                    path.to_string()
                },
                operation,
            },
            source => Error::ZooKeeper {
                operation,
                path: path.to_string(),
                source,
            },
        }
    }
}

/// The kinds of lock that can use one path, named by [`Error::KindConflict`].
///
/// Their node layouts differ (a semaphore keeps its nodes under `locks/` and `leases/`, the
/// others' are the path's own children), so each sees the other in the listings it reads
/// anyway.
///
/// ```
/// use zkfence::LockKind;
/// assert_eq!(LockKind::Semaphore.to_string(), "a semaphore");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// [`Session::lock`](crate::Session::lock) (and an election, whose candidates queue as
    /// a plain lock's do).
    Lock,
    /// [`Session::read_lock`](crate::Session::read_lock) or
    /// [`Session::write_lock`](crate::Session::write_lock).
    ReadWrite,
    /// [`Session::semaphore`](crate::Session::semaphore).
    Semaphore,
    /// [`Session::election`](crate::Session::election).
    Election,
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockKind::Lock => "a plain lock",
            LockKind::ReadWrite => "a read/write lock",
            LockKind::Semaphore => "a semaphore",
            LockKind::Election => "an election",
        })
    }
}

/// One server of a failed [`Error::ConnectFailed`], and why it was not reached.
///
/// ```
/// use zkfence::{ConnectFailure, ServerFailure};
/// let failed = ServerFailure { server: "127.0.0.1:1".into(), reason: ConnectFailure::Refused };
/// assert_eq!(failed.to_string(), "127.0.0.1:1: connection refused");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFailure {
    /// The server, as in the connect string (`host:port`).
    pub server: String,
    /// Why it was not reached.
    pub reason: ConnectFailure,
}

impl fmt::Display for ServerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.server, self.reason)
    }
}

/// Why one server of the connect string was not reached.
///
/// ```
/// # fn handle(err: zkfence::Error) {
/// use zkfence::{ConnectFailure, Error};
/// if let Error::ConnectFailed { servers, .. } = &err {
///     if servers.iter().all(|s| s.reason == ConnectFailure::UnknownHost) {
///         eprintln!("check the host names: {err}");
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// The host answered, but nothing listens on the port (TCP connection refused).
    Refused,
    /// The host name does not resolve.
    UnknownHost,
    /// Nothing answered within the connect timeout: no TCP connection, or no ZooKeeper
    /// handshake over one (a silent or overloaded server, a firewall dropping packets).
    TimedOut,
    /// The TLS handshake with the server failed.
    Tls {
        /// What went wrong.
        reason: String,
    },
    /// Anything else, in the client library's words.
    Other {
        /// The reason.
        reason: String,
    },
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectFailure::Refused => f.write_str("connection refused"),
            ConnectFailure::UnknownHost => f.write_str("unknown host (the name does not resolve)"),
            ConnectFailure::TimedOut => f.write_str("timed out (no ZooKeeper answer in time)"),
            ConnectFailure::Tls { reason } => write!(f, "TLS failed: {reason}"),
            ConnectFailure::Other { reason } => f.write_str(reason),
        }
    }
}

/// Why a lease ended.
///
/// ```
/// use zkfence::LossReason;
/// let reason = LossReason::ClockLapsed;
/// // Only a session that ended is useless; after the others, the same session may acquire again.
/// assert!(!reason.is_session_terminal());
/// println!("lost the lock: {reason}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The server expired the session: its nodes are gone.
    SessionExpired,
    /// The session's lease clock lapsed: the leader has not vouched for the session in time,
    /// so it may expire it any moment. Reported *before* it can; our node is deleted once the
    /// ensemble answers again, if the session survived.
    ClockLapsed,
    /// Our node was deleted by someone else.
    NodeDeleted,
    /// The session was closed.
    SessionClosed,
    /// The lease was released by its holder.
    Released,
}

impl LossReason {
    /// True when the session itself ended.
    pub fn is_session_terminal(self) -> bool {
        matches!(self, LossReason::SessionExpired | LossReason::SessionClosed)
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::SessionExpired => "the ZooKeeper session expired",
            LossReason::ClockLapsed => {
                "the lease clock lapsed: the ensemble did not vouch for the session in time"
            }
            LossReason::NodeDeleted => "the lock node was deleted by someone else",
            LossReason::SessionClosed => "the ZooKeeper session was closed",
            LossReason::Released => "released",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        fn is_send_sync<T: Send + Sync + 'static>() {}
        is_send_sync::<Error>();
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = Error::InvalidPath {
            path: "locks".into(),
            reason: "it must start with '/'",
        };
        assert!(e.to_string().contains("use an absolute path"));
        let e = Error::Timeout {
            path: "/l".into(),
            waited: Duration::from_secs(1),
            ahead: 2,
            holder: Some(Box::new(crate::Contender {
                node: "/l/_c_x-lock-0000000001".into(),
                token: crate::FencingToken::new(42),
                sequence: 1,
                session_id: 0xab,
                owner: crate::OwnerInfo::decode(b"id=n1\nhost=h\npid=7\n"),
                created_ms: 0,
            })),
        };
        let s = e.to_string();
        assert!(
            s.contains("after 1.0s")
                && s.contains("2 ahead")
                && s.contains("held by n1 (h, pid 7) with token 42, session 0xab;")
                && s.contains("try again"),
            "{s}"
        );
        assert!(Error::SessionExpired.is_session_terminal());
        assert!(!e.is_session_terminal());
    }
}
