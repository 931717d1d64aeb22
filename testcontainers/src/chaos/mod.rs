//! `zkfence chaos`: a randomized fault campaign against a throwaway ensemble, a checker over
//! its whole history, and a picture of it (feature `chaos`).
//!
//! [`run`] starts an ensemble, a register with a [`Fence`](zkfence::Fence) per resource, and
//! `clients` contender processes, each with its own zkfence session through its own
//! [`FaultProxy`](crate::FaultProxy), driving the [`ChaosConfig::recipes`] (see [`Recipe`]).
//! Each loops: acquire a recipe chosen at random with a timeout, write (token, client,
//! sequence) for each resource it holds to the register (and with [`ChaosConfig::sinks`]
//! to each store through its fence from `zkfence-fences`, and in half of the holds into
//! ZooKeeper through `Lease::fenced_write`), hold for a random time with more writes, release
//! or drop. Meanwhile faults from a seeded schedule (see [`FaultKind`]) start and heal, one
//! or more at a time. Every grant, loss, release, write decision and fault is recorded on
//! one clock; at the end [`check`] looks for violations (its docs list the rules, per
//! recipe), and the history is written as JSON lines and drawn as an SVG timeline.
//!
//! The contenders are real processes (a stalled or killed holder is a real one), started
//! from [`ChaosConfig::contender`]: a program that calls [`contender_main`] when started
//! with [`CONTENDER_MODE`], such as the `zkfence` CLI.
//!
//! ```no_run
//! # async fn f() -> Result<(), zkfence_testcontainers::HarnessError> {
//! use std::time::Duration;
//! use zkfence_testcontainers::chaos::{self, ChaosConfig};
//!
//! let mut config = ChaosConfig::new("/usr/local/bin/zkfence", vec![chaos::CONTENDER_MODE.into()]);
//! config.duration = Duration::from_secs(60);
//! config.seed = 42;
//! config.recipes = chaos::Recipe::ALL.to_vec();
//! let report = chaos::run(config).await?;
//! println!("{}", report.summary());
//! for v in &report.violations {
//!     eprintln!("{v}");
//! }
//! # Ok(()) }
//! ```

mod campaign;
mod check;
mod config;
mod contender;
mod faults;
mod history;
mod recipe;
mod register;
mod report;
mod store;
mod timeline;

pub use campaign::run;
pub use check::{check, holder_told_bound, holds, Hold, Rule, Violation, TOLD_ROUND_TRIP};
pub use config::ChaosConfig;
pub use contender::contender_main;
pub use faults::FaultKind;
pub use history::{read_jsonl, write_jsonl, CommittedWrite, Event, Record, WriteOutcome};
pub use recipe::Recipe;
pub use report::{recheck, Report};
pub use store::Store;
pub use timeline::{draw, draw_window};

/// The first argument that makes a program run [`contender_main`] (the `zkfence` CLI's
/// hidden contender mode).
pub const CONTENDER_MODE: &str = "__zkfence-chaos-contender";
use recipe::LOCK_PATH;
