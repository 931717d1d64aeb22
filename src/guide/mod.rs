//! The guide: long-form pages (`docs/guide/*.md`), each a module here so that docs.rs shows
//! them beside the API and `cargo test --doc` compiles every Rust snippet in them, as
//! clap's `_tutorial` does. The modules hold no code.
//!
//! A page links into the API with intra-doc links (`[Lease](crate::Lease)`, checked by
//! `cargo doc -D warnings`) and to another page as `crate::guide::<topic>`; to a page of
//! another crate by its address. Items a crate feature gates (TLS,
//! SASL) are named in backticks only, so the links resolve whatever the features; the names
//! are checked by `tests/docs_names.rs`. The index's map gives the reading order (rustdoc
//! lists the modules alphabetically).
#![doc = include_str!("../../docs/guide/index.md")]

// The names the index links to in short form (`[`Lease::state`]`).
#[cfg(doc)]
use crate::Lease;

#[doc = include_str!("../../docs/guide/getting_started.md")]
pub mod getting_started {}

#[doc = include_str!("../../docs/guide/concepts.md")]
pub mod concepts {}

#[doc = include_str!("../../docs/guide/lock.md")]
pub mod lock {}

#[doc = include_str!("../../docs/guide/read_write_lock.md")]
pub mod read_write_lock {}

#[doc = include_str!("../../docs/guide/semaphore.md")]
pub mod semaphore {}

#[doc = include_str!("../../docs/guide/multi_lock.md")]
pub mod multi_lock {}

#[doc = include_str!("../../docs/guide/election.md")]
pub mod election {}

#[doc = include_str!("../../docs/guide/revocation.md")]
pub mod revocation {}

#[doc = include_str!("../../docs/guide/partitions.md")]
pub mod partitions {}

#[doc = include_str!("../../docs/guide/cli.md")]
pub mod cli {}

#[doc = include_str!("../../docs/guide/cli_reference.md")]
pub mod cli_reference {}

#[doc = include_str!("../../docs/guide/production.md")]
pub mod production {}

#[doc = include_str!("../../docs/guide/security.md")]
pub mod security {}

#[doc = include_str!("../../docs/guide/troubleshooting.md")]
pub mod troubleshooting {}

#[doc = include_str!("../../docs/guide/safety.md")]
pub mod safety {}

#[doc = include_str!("../../docs/guide/chaos.md")]
pub mod chaos {}

#[doc = include_str!("../../docs/guide/benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("../../docs/guide/architecture.md")]
pub mod architecture {}
