//! Distributed locks and leader election on Apache ZooKeeper: queue-fair, fenced,
//! session-tied.
//!
//! Processes on different machines use zkfence to take turns on a shared resource (a payment
//! write, a seat hold, a cron job) and to elect one leader (a job scheduler). What sets it
//! apart: **a holder is told it lost the lock before ZooKeeper can grant it to anyone else**
//! (a lease clock renewed only by writes a quorum committed), and **every grant carries a
//! fencing token** (the node's creation zxid, growing with every grant) that the resource
//! checks to refuse a holder that paused and woke up late.
//!
//! ```no_run
//! use std::time::Duration;
//! use zkfence::{Session, SessionOptions};
//!
//! # #[tokio::main] async fn main() -> zkfence::Result<()> {
//! // The connect string `zkfence ensemble up` prints, or your servers'. A chroot
//! // ("zk1:2181,zk2:2181/app") must exist first; a trailing "/" alone means none.
//! let session = Session::connect(
//!     "127.0.0.1:2181",
//!     SessionOptions::new().session_timeout(Duration::from_secs(10)),
//! ).await?;
//!
//! let lease = session.lock("/locks/seat-42").with_id("booking-7")
//!     .acquire_timeout(Duration::from_secs(5)).await?;
//! // Pass the token to the resource with every write; the resource refuses older tokens
//! // (a `zkfence::Fence` does that).
//! storage_write(lease.token(), b"...").await;
//! lease.release().await?;
//!
//! let leadership = session.election("/election/scheduler").campaign("node-a").await?;
//! tokio::select! {
//!     reason = leadership.lost() => eprintln!("no longer leader: {reason}"),
//!     _ = run_scheduler(leadership.token()) => {}
//! }
//! # Ok(()) }
//! # async fn storage_write(_: zkfence::FencingToken, _: &[u8]) {}
//! # async fn run_scheduler(_: zkfence::FencingToken) {}
//! ```
//!
//! zkfence runs on tokio. A program with `#[tokio::main]` needs tokio's `macros` and
//! `rt-multi-thread` features (`tokio = { version = "1", features = ["macros",
//! "rt-multi-thread"] }`), or `macros` and `rt` for `#[tokio::main(flavor =
//! "current_thread")]`; zkfence turns on `time` and `sync` itself.
//!
//! # What you get
//!
//! - [`Session`]: one ZooKeeper session and its lease clock, shared by every lock of a
//!   process; it outlives an expiry ([`SessionOptions`] for timeouts, TLS, SASL, ACLs).
//! - [`Lock`] ([`Session::lock`], [`Session::read_lock`], [`Session::write_lock`]),
//!   [`Semaphore`], [`MultiLock`] (several locks in one transaction, deadlock-free) and
//!   [`Election`] ([`Election::run`] leads for months): all views over one fair queue.
//! - [`Partitions`] ([`Session::partitions`]): many workers share many items, each owned by
//!   one worker at a time, as a fenced lock, rebalanced without stopping the world.
//! - [`Lease`]: the guard every recipe returns, with its [`FencingToken`], its
//!   [`LeaseState`] (`Held`, `Suspended`, `Lost`) and [`Lease::fenced_write`].
//! - [`Fence`]: what a resource embeds to refuse stale tokens.
//! - [`Error`]: one flat error type whose messages say what to do next.
//! - With the crate features `tls`, `sasl` and `metrics`: TLS and SASL to the ensemble,
//!   operator metrics through the `metrics` facade ([`describe_metrics`]).
//!
//! # How it works, in short
//!
//! Each contender creates an ephemeral sequential node under the lock's directory and watches
//! only the node just ahead of it: a release wakes exactly one waiter, and the queue is first
//! come, first served. The node lives as long as the contender's ZooKeeper session. The
//! session's lease clock is renewed only by answers a ZooKeeper leader with its quorum must
//! have ordered (committed writes; a keepalive transaction that changes nothing every `T/6`
//! while a lease is held), never by reads, which a server cut off from the others goes on
//! answering: a holder is told `Lost` about `0.6 T` after its last answered keepalive, while
//! no leader can expire its session before about `0.8 T` after it. The node's creation zxid
//! is the [`FencingToken`]. A process can still stall between checking its lease and
//! writing; no lock service can stop that, only the resource checking the token can.
//!
//! # The guide
//!
//! The long form lives in [`guide`], a module of pages:
//!
//! - [Getting started](guide::getting_started) and [concepts](guide::concepts) (the queue,
//!   the token, the lease clock, what `Suspended` and `Lost` mean for your code);
//! - a page per recipe: [locks](guide::lock), [read/write locks](guide::read_write_lock),
//!   [semaphores](guide::semaphore), [multi-locks](guide::multi_lock),
//!   [leader election](guide::election), [revocation](guide::revocation),
//!   [partitioned ownership](guide::partitions);
//! - running it: [production](guide::production) (session timeout, systemd and cron,
//!   metrics and alerts), [security](guide::security),
//!   [troubleshooting](guide::troubleshooting) (every error and exit code), and
//!   [the `zkfence` command](guide::cli) with [every `--help`](guide::cli_reference);
//! - why to believe it: [the safety model](guide::safety) in full, and the
//!   [benchmarks](guide::benchmarks);
//! - for contributors: [the architecture](guide::architecture).
//!
//! Fencing in PostgreSQL, MySQL/MariaDB, Redis, etcd and an HTTP service is the
//! `zkfence-fences` crate's (its guide page: `docs/guide/fencing.md`); the `zkfence` command
//! (`exec`, `elect`, `status`, ...) is the `zkfence-cli` crate's.

#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly) marks each item a crate feature gates with that feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom up; every `use` points down:
// error, token, node → session (clock, ops) → queue, revoke → lease → lock, election,
// semaphore; fence stands beside them (the resource's side).
mod error;
mod node;
mod token;

mod session;

mod queue;
mod revoke;

mod lease;

mod election;
mod lock;
mod multi_lock;
mod partition;
mod semaphore;

mod fence;

// Operator metrics, beside every layer (an empty shell without the `metrics` feature).
mod telemetry;

pub mod guide;

pub use election::{Election, LeaderChanges, LeaderInfo, LeaderTask, Leadership};
pub use error::{ConnectFailure, Error, LockKind, LossReason, Result, ServerFailure};
pub use fence::{Fence, StaleToken};
pub use lease::{Lease, LeaseState};
pub use lock::Lock;
pub use multi_lock::{MultiLease, MultiLock, MAX_MULTI_LOCK_PATHS};
pub use node::{NodeFormat, OwnerInfo};
pub use partition::{
    Assignment, Item, ItemStatus, Items, Member, OwnershipChange, PartitionStatus, Partitions,
    PartyMember, DEFAULT_RELEASE_WITHIN, DEFAULT_SETTLE, MAX_PARTITION_ITEMS,
};
pub use queue::Contender;
pub use semaphore::Semaphore;
pub use session::{FencedOp, Session, SessionMetrics, SessionOptions, SessionState};
pub use token::FencingToken;

/// Registers the help text and unit of every zkfence metric (the guide's
/// [metrics table](guide::production#metrics-and-alerts)) with the `metrics` recorder installed now. Call it once after installing the
/// recorder; without the crate feature `metrics` it does nothing.
///
/// ```no_run
/// // With the `metrics-exporter-prometheus` crate; its `with_http_listener` serves the text.
/// let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
///     .install_recorder()
///     .expect("no other recorder installed");
/// zkfence::describe_metrics();
/// // ... run; later, or on each scrape:
/// println!("{}", handle.render());
/// ```
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    telemetry::describe();
}

/// Checks that `path` can name a lock, election or semaphore directory, without a server:
/// what every operation on it would refuse with [`Error::InvalidPath`].
///
/// ```
/// assert!(zkfence::validate_path("/locks/backup").is_ok());
/// let err = zkfence::validate_path("locks/backup").unwrap_err();
/// assert!(err.to_string().contains("must start with '/'"));
/// ```
///
/// # Errors
/// [`Error::InvalidPath`], saying what is wrong.
pub fn validate_path(path: &str) -> Result<()> {
    node::validate_path(path)
}

/// Checks a connect string (`host:port[,host:port...][/chroot]`) without a server: what
/// [`Session::connect`] would refuse with [`Error::InvalidConnectString`] before sending
/// anything. Every host needs its port; a chroot of `/` alone means no chroot, as in the
/// Java client.
///
/// ```
/// assert!(zkfence::validate_connect_string("zk1:2181,zk2:2181/app").is_ok());
/// assert!(zkfence::validate_connect_string("zk1:2181/").is_ok());
/// let err = zkfence::validate_connect_string("zk1").unwrap_err();
/// assert!(err.to_string().contains("has no port"));
/// ```
///
/// # Errors
/// [`Error::InvalidConnectString`], saying what is wrong.
pub fn validate_connect_string(connect: &str) -> Result<()> {
    node::split_connect_string(connect).map(drop)
}

/// Re-export of the underlying client crate, for [`Session::client`] and ACL types, and to
/// match the client's error inside [`Error::FencedWriteFailed`] and [`Error::ZooKeeper`].
pub use zookeeper_client;

/// Re-export of the `async-trait` crate's attribute: implement [`LeaderTask`] under
/// `#[zkfence::async_trait]`, with no dependency of your own.
pub use async_trait::async_trait;

// The README's Rust blocks are doctests: every item they name must exist, and they must
// compile as shown. Its TLS, SASL and metrics examples need those features, which `cargo
// test --workspace --doc` (CI) has.
#[cfg(all(doctest, feature = "tls", feature = "sasl", feature = "metrics"))]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests {
    #[test]
    fn bounds() {
        fn send_sync<T: Send + Sync + 'static>() {}
        fn send<T: Send>(_: &T) {}
        send_sync::<crate::Session>();
        send_sync::<crate::Lease>();
        send_sync::<crate::Lock>();
        send_sync::<crate::Election>();
        send_sync::<crate::Leadership>();
        send_sync::<crate::Fence>();
        send_sync::<crate::Partitions>();
        send_sync::<crate::Member>();
        send_sync::<crate::OwnershipChange>();
        send_sync::<crate::PartitionStatus>();
        #[allow(unreachable_code, clippy::diverging_sub_expression)]
        fn futures_are_send(
            lock: &crate::Lock,
            lease: crate::Lease,
            election: &crate::Election,
            leadership: &crate::Leadership,
            partitions: &crate::Partitions,
            member: &mut crate::Member,
        ) {
            send(&partitions.join("x"));
            send(&partitions.status());
            send(&member.next());
            send(&lock.acquire());
            send(&lock.try_acquire());
            send(&lock.acquire_timeout(std::time::Duration::ZERO));
            send(&lease.lost());
            send(&lease.revoke_requested());
            send(&lock.revoke_holder());
            send(&lock.session().revoke("/x"));
            send(&lease.renew());
            send(&lease.release());
            send(&election.campaign("x"));
            send(&election.leader());
            send(&leadership.proclaim(b"v"));
        }
        let _ = futures_are_send;
    }
}
