//! Fencing where the data lives: the store refuses a write whose [`FencingToken`] is older
//! than one it has already accepted, atomically with the write.
//!
//! A lock service can only *issue* tokens; a holder that paused past its lease (a GC pause, a
//! stalled VM) wakes up still believing it holds the lock, and only the resource can tell. So
//! each store here keeps a **fence** per protected resource (the newest token it accepted)
//! and checks it *in the same atomic step as the write*:
//!
//! | store | feature | the atomic step | the write |
//! |---|---|---|---|
//! | PostgreSQL | `postgres` | a conditional `UPDATE` of the fence row in the writer's transaction | your statements, in that transaction |
//! | MySQL / MariaDB | `mysql` | `SELECT … FOR UPDATE` of the fence row in the writer's InnoDB transaction | your statements, in that transaction |
//! | Redis | `redis` | one Lua script: compare, raise, write | the commands of a [`redis::Write`] |
//! | etcd | `etcd` | one transaction: compare the fence key, then put it and write | your `TxnOp`s |
//! | your HTTP service | `http` | a `tower` layer: check a fence, then call your handler, one request per resource at a time | your handler |
//!
//! Every fence answers the same way: [`Outcome::Written`], or [`Outcome::Refused`] naming
//! the newest token the store holds (a [`StaleToken`]): the writer has lost its lock and
//! must stop. Errors ([`Error`]) are for bad input (a token of 0, a resource key the stores
//! cannot all hold, a fence that was never created) and for the store's own failures.
//!
//! Each feature brings only its store's client: `cargo add zkfence-fences --features redis`
//! adds the `redis` crate and nothing of the others.
//!
//! # Who does what
//!
//! - The resource's **owner** creates a fence per resource once ([`postgres::PgFence::install`]
//!   and `create`, and the same on every store). A write through a fence that does not exist
//!   is an error, not a first write: a mistyped resource key, or a fence row deleted by
//!   accident, would otherwise let any token through.
//! - The **writer** holds a zkfence [`Lease`](zkfence::Lease) and passes its
//!   [`token`](zkfence::Lease::token) with every write, naming the resource (by convention the
//!   lock's path, [`Lease::lock_path`](zkfence::Lease::lock_path)).
//!
//! # Resource keys
//!
//! One rule for every store, so a key that works on one works on all: 1 to 512 bytes of
//! UTF-8 with no control characters (U+0000–U+001F, U+007F). Keys are compared byte for byte
//! (so `Acct`, `acct` and `acct ` are three fences, also on MySQL, whose default collations
//! would fold them into one).
//!
//! # The guide
//!
//! [`guide`] (the page `docs/guide/fencing.md`) has a section per store with the
//! configuration it needs: isolation levels, persistence, and what replication can do to a
//! fence.
//!
//! # Example
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn example(lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
//! use zkfence_fences::{redis::{RedisFence, Write}, Outcome};
//!
//! let client = ::redis::Client::open("redis://127.0.0.1/")?;
//! let mut conn = client.get_multiplexed_async_connection().await?;
//! let fence = RedisFence::new();
//! fence.create(&mut conn, "/locks/orders-42").await?; // the owner, once
//!
//! let write = Write::new().set("orders:42", "shipped");
//! match fence.write(&mut conn, "/locks/orders-42", lease.token(), &write).await? {
//!     Outcome::Written(()) => println!("written"),
//!     Outcome::Refused(stale) => println!("lost the lock: {stale}"),
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod common;

#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub mod etcd;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "sink")]
#[cfg_attr(docsrs, doc(cfg(feature = "sink")))]
pub mod sink;

pub use common::{check_resource, check_token, Error, Outcome, MAX_RESOURCE_LEN};
pub use zkfence::{FencingToken, StaleToken};

/// The guide page "Fencing your store" (`docs/guide/fencing.md`): one section per store,
/// with the configuration each needs. Its examples are compiled with every store's feature.
#[cfg(all(
    feature = "postgres",
    feature = "mysql",
    feature = "redis",
    feature = "etcd",
    feature = "http"
))]
// A symlink to docs/guide/fencing.md, so that the packaged crate carries the page.
#[doc = include_str!("../docs/fencing.md")]
pub mod guide {}
