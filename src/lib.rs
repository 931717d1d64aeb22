//! zkfence
