//! The error type of the harness.

use std::time::Duration;

/// Everything that can go wrong while setting up or driving an [`Ensemble`](crate::Ensemble)
/// or a store server ([`Postgres`](crate::Postgres), [`Redis`](crate::Redis),
/// [`Etcd`](crate::Etcd), [`MariaDb`](crate::MariaDb)).
///
/// Errors about a node that failed to come up carry the tail of that node's log, so a
/// failing test shows why the server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// No Java runtime was found.
    #[error(
        "no Java runtime found (looked at: {searched}); install one with \
         `apt-get install -y zookeeper` (which pulls in a JRE) or \
         `apt-get install -y default-jre-headless`, or set JAVA_HOME to a JRE/JDK directory \
         containing bin/java"
    )]
    JavaNotFound {
        /// The places that were looked at, for the message.
        searched: String,
    },

    /// No ZooKeeper server distribution was found.
    #[error(
        "no ZooKeeper server found (looked at: {searched}); install it with \
         `apt-get install -y zookeeper`, or set ZOOKEEPER_HOME to an unpacked Apache ZooKeeper \
         binary release (the directory that contains lib/*.jar)"
    )]
    ZooKeeperNotFound {
        /// The places that were looked at, for the message.
        searched: String,
    },

    /// No PostgreSQL server binaries (`initdb`, `postgres`) were found.
    #[error(
        "no PostgreSQL server found (looked at: {searched}); install it with \
         `apt-get install -y postgresql`, or set PG_BINDIR to the directory that holds its \
         `initdb` and `postgres` binaries"
    )]
    PostgresNotFound {
        /// The places that were looked at, for the message.
        searched: String,
    },

    /// A PostgreSQL step (initdb, start, creating the database) failed.
    #[error("PostgreSQL: {what}; last log lines:\n{log_tail}")]
    Postgres {
        /// What failed, and why if known.
        what: String,
        /// The last lines of the server's (or initdb's) log.
        log_tail: String,
    },

    /// A store server's binary (Redis, etcd, MariaDB) or the user it runs as was not found.
    #[error(
        "no {server} server found (looked at: {searched}); install it with \
         `apt-get install -y {package}`"
    )]
    ServerNotFound {
        /// The server: "Redis", "etcd", "MariaDB".
        server: &'static str,
        /// The Debian package that brings it.
        package: &'static str,
        /// The places that were looked at, for the message.
        searched: String,
    },

    /// A step of a store server (preparing its data, starting, serving) failed.
    #[error("{server}: {what}; last log lines:\n{log_tail}")]
    Server {
        /// The server: "Redis", "etcd", "MariaDB".
        server: &'static str,
        /// What failed, and why if known.
        what: String,
        /// The last lines of the server's log.
        log_tail: String,
    },

    /// An I/O error while preparing directories, spawning processes or talking to a server.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// The builder was given settings ZooKeeper cannot run with.
    #[error("invalid ensemble configuration: {0}")]
    InvalidConfig(String),

    /// A node did not start serving (answer `srvr` with a `Mode:` line) in time.
    #[error("ZooKeeper node {node} did not start serving in time; last log lines:\n{log_tail}")]
    StartTimeout {
        /// Index of the node that did not come up.
        node: usize,
        /// The last lines of that node's log (of every node's, for a whole ensemble).
        log_tail: String,
    },

    /// A node's process exited (or was not running) while it was waited for.
    #[error("ZooKeeper node {node} is not running ({status}); last log lines:\n{log_tail}")]
    ProcessExited {
        /// Index of the node.
        node: usize,
        /// Exit status, or why the node is not running.
        status: String,
        /// The last lines of that node's log.
        log_tail: String,
    },

    /// No node reported `Mode: leader` (or `standalone`) in time.
    #[error("no leader within {timeout:?}; last log lines:\n{log_tail}")]
    NoLeader {
        /// How long it was waited for.
        timeout: Duration,
        /// The last lines of every node's log.
        log_tail: String,
    },
}
