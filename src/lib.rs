//! Distributed locks and leader election on Apache ZooKeeper: queue-fair, fenced,
//! session-tied.
//!
//! Processes on different machines use zkfence for mutual exclusion over a shared resource
//! (a payment write, a seat hold, a cron job) and to elect one leader (a job scheduler).
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
//! storage_write(lease.token().get(), b"...").await;
//! lease.release().await?;
//!
//! let leadership = session.election("/election/scheduler").campaign("node-a").await?;
//! tokio::select! {
//!     reason = leadership.lost() => eprintln!("no longer leader: {reason}"),
//!     _ = run_scheduler(leadership.token()) => {}
//! }
//! # Ok(()) }
//! # async fn storage_write(_: u64, _: &[u8]) {}
//! # async fn run_scheduler(_: zkfence::FencingToken) {}
//! ```
//!
//! zkfence runs on tokio. A program with `#[tokio::main]` needs tokio's `macros` and
//! `rt-multi-thread` features (`tokio = { version = "1", features = ["macros",
//! "rt-multi-thread"] }`), or `macros` and `rt` for `#[tokio::main(flavor =
//! "current_thread")]`; zkfence turns on `time` and `sync` itself.
//!
//! # How it works
//!
//! Each contender creates an ephemeral sequential node under the lock's directory and watches
//! only the node just ahead of it: a release wakes exactly one waiter, and the queue is
//! first-come, first-served. The node lives as long as the contender's ZooKeeper session, so a
//! crashed holder's lock frees itself after the session timeout, and the ensemble (a quorum of
//! servers) survives losing a minority of its members. The node's creation zxid is the
//! [`FencingToken`]; its sequence number orders the queue (serial-number order, right across
//! the counter's wrap). Lock directories are container nodes, which ZooKeeper removes once
//! empty ([`SessionOptions::persistent_directories`] keeps them).
//!
//! # The safety model
//!
//! - **What the lock service guarantees.** A [`Lease`] is reported
//!   [`Lost`](LeaseState::Lost) *before* the ensemble can give the lock to anyone else. Only
//!   a ZooKeeper leader expires sessions, from the touches its followers report, and a new
//!   leader gives every session `T` from its own start; so the [`Session`]'s lease clock is
//!   renewed only by answers a leader with its quorum must have ordered: **committed writes**
//!   (a keepalive that is a transaction changing nothing, while a lease is held or an acquire
//!   waits). Each vouches for what that leader must have heard: touches whose answer arrived
//!   at least `T/4 + slack` before it was sent. `valid_until` = that touch's send time + `T` −
//!   slack. Reads — which a follower cut off from its leader goes on answering — and `sync`s —
//!   which a leader cut off from its peers goes on answering for up to about a tick after a
//!   new leader started — never renew it, unless the servers' tickTime is declared
//!   ([`SessionOptions::server_tick_time`]), which bounds what a `sync` vouches for. In
//!   practice a holder is told `Lost` about `0.6 T` after its last answered keepalive, while
//!   no leader can expire it before about `0.8 T` after it. It assumes ZooKeeper's bound
//!   `T ≥ 2 × tickTime` and clocks that advance at the same rate on both sides while both
//!   run. `T` is the timeout the servers granted, followed at every reconnect (a server
//!   may grant a shorter one: [`Session::session_timeout`]), and a suspend of this machine
//!   is counted (on Linux the clock runs on `CLOCK_BOOTTIME`).
//! - **Every way a lease ends reaches the holder.** The clock lapsing, the session expired
//!   or closed, a release, and its node deleted by someone else (an operator's `delete`):
//!   nobody can be told of that before the next waiter, but the holder is told within one
//!   notification once its node is watched, and at worst a keepalive interval (`T/6`) and a
//!   round trip after its grant ([`LossReason::NodeDeleted`]).
//! - **A blip is not a loss.** A disconnection that ends while the clock still vouches costs
//!   nothing (the lease may show [`Suspended`](LeaseState::Suspended) meanwhile).
//! - **A grant is never stale.** A waiter second in line watches its own node in the same
//!   round trip as its predecessor and is never granted after its node was deleted; a waiter
//!   whose clock went quiet confirms with the leader before it is granted.
//! - **What it cannot guarantee.** A process that stalls (a GC pause, a frozen VM) between
//!   checking its lease and writing can write after the lease ended. No lock service can
//!   prevent that.
//! - **What the resource must do.** Check the token: remember the newest token seen and
//!   refuse older ones ([`Fence`] does exactly that; the README shows the same in SQL).
//!   Tokens of one lock strictly grow with each grant, also across a re-created directory.
//!   For data kept in ZooKeeper itself, [`Lease::fenced_write`] makes the ensemble refuse
//!   the write unless our node still exists.
//!
//! # Logging
//!
//! Operators see `tracing` events at `info` for *enqueued*, *queued* (position), *waiting on
//! predecessor*, *granted*, *released*, *created lock directory*, *confirming at grant*,
//! session state changes, and at `warn` for *lease lost* and a lapsed lease clock, inside a
//! `zkfence.acquire` span naming the lock directory.
//!
//! # Metrics
//!
//! With the crate feature **`metrics`** (off by default) zkfence emits operator metrics
//! through the [`metrics`](https://docs.rs/metrics) facade: the library emits, the
//! application installs the recorder (the exporter) it likes — e.g.
//! `metrics-exporter-prometheus`, which the `zkfence` CLI serves with `--metrics-addr`.
//! Without the feature none of this is compiled in: no dependency, no cost. With it, the hot
//! path does not allocate (labels come from static tables).
//!
//! | Name | Type | Labels | Meaning |
//! |---|---|---|---|
//! | `zkfence_acquires_total` | counter | `kind` | Acquires started: `acquire`, `acquire_timeout`, `try_acquire`, and campaigns |
//! | `zkfence_grants_total` | counter | `kind` | Acquires granted |
//! | `zkfence_releases_total` | counter | `kind` | Leases ended by their holder: released, dropped, resigned, handed on |
//! | `zkfence_losses_total` | counter | `kind`, `reason` | Leases lost; `reason` is `session_expired`, `clock_lapsed`, `node_deleted`, `session_closed` (or `other`, for a reason added later) |
//! | `zkfence_timeouts_total` | counter | `kind` | Acquires that gave up: the `acquire_timeout` deadline passed, or a `try_acquire` found the lock taken |
//! | `zkfence_session_expiries_total` | counter | none | ZooKeeper sessions of this process that the ensemble expired |
//! | `zkfence_reconnects_total` | counter | none | Reconnections to a server after a disconnection |
//! | `zkfence_session_timeout_changes_total` | counter | none | Reconnections at which the servers granted a shorter session timeout, which the lease clock counts with from then on |
//! | `zkfence_session_reopens_total` | counter | none | New ZooKeeper sessions a `Session` opened in place of expired ones (`SessionOptions::reopen_after_expiry`) |
//! | `zkfence_wait_seconds` | histogram | `kind` | From the start of an acquire to its grant |
//! | `zkfence_held_seconds` | histogram | `kind` | From a grant to the lease's release or loss |
//! | `zkfence_release_to_grant_seconds` | histogram | `kind` | From the notification that the contender ahead left to our grant (waiters only) |
//! | `zkfence_leases_held` | gauge | `kind` | Leases this process holds now |
//! | `zkfence_waiters` | gauge | `kind` | Contenders of this process waiting behind another now |
//! | `zkfence_leader` | gauge | `path` | 1 while a candidate of this process leads the election at `path`, 0 while it only campaigns |
//!
//! - **`kind`** is one of `lock`, `read`, `write` (the read/write lock's sides),
//!   `semaphore`, `election`, `multi`, `partition` (an item of a
//!   [partition set](Partitions)) and `partition_member` (a member's node in its party). A
//!   multi-lock counts its acquire once (its acquires, grants, timeouts and wait time) and its
//!   lease once per path (held, waiters, releases, losses, held and release-to-grant time).
//! - **`path`** (the lock directory) is added to every metric with a `kind` only when the
//!   session opts in with [`SessionOptions::metrics_path_labels`]: lock paths can be
//!   unbounded (a lock per seat, per order), and each label value is a time series the
//!   monitoring system keeps forever. A multi-lock's acquire is labelled with its paths
//!   joined by commas.
//! - **Elections are always labelled by `path`**, on `zkfence_leader` and on their
//!   `kind="election"` series: an application has a handful of elections, and a leader
//!   gauge that does not say which election it is about tells an operator nothing.
//! - Call [`describe_metrics`] once after installing the recorder to give every metric its
//!   help text and unit.

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

/// Registers the help text and unit of every zkfence metric (the crate docs' *Metrics*
/// table) with the `metrics` recorder installed now. Call it once after installing the
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
