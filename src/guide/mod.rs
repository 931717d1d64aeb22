//! The guide: long-form pages (`docs/guide/*.md`), each a module here so that docs.rs shows
//! them beside the API and `cargo test --doc` compiles every Rust snippet in them, as
//! clap's `_tutorial` does. The modules hold no code.
#![doc = include_str!("../../docs/guide/index.md")]

#[doc = include_str!("../../docs/guide/partitions.md")]
pub mod partitions {}
#[doc = include_str!("../../docs/guide/cli.md")]
pub mod cli {}
