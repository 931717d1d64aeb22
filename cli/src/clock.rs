//! Instants on `CLOCK_MONOTONIC`, the one clock every process on the machine shares: what
//! zkfence hands the supervisor, so that no delay in handing it over (a stall of zkfence, a
//! slow spawn) can move a deadline later.

use std::time::Duration;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid out pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// `instant` (a tokio or std instant, which on Linux count on `CLOCK_MONOTONIC` too) as
/// nanoseconds on `CLOCK_MONOTONIC`: both clocks are read back to back, so the result is
/// the instant itself, whenever it is used later.
pub fn monotonic_ns_of(instant: tokio::time::Instant) -> u128 {
    let (now, mono) = (tokio::time::Instant::now(), monotonic_ns());
    if instant >= now {
        mono + (instant - now).as_nanos()
    } else {
        mono.saturating_sub((now - instant).as_nanos())
    }
}

/// The std instant of the `CLOCK_MONOTONIC` nanosecond count `ns` (in the past, clamped to
/// now, if it has passed).
pub fn instant_of_ns(ns: u128) -> std::time::Instant {
    let (now, mono) = (std::time::Instant::now(), monotonic_ns());
    now + Duration::from_nanos(ns.saturating_sub(mono).min(u64::MAX as u128) as u64)
}
