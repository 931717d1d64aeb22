//! Partitioned ownership.

mod assignment;
mod items;

pub use assignment::Assignment;
pub use items::{Item, Items, MAX_PARTITION_ITEMS};
