//! Instants on `CLOCK_BOOTTIME`, the clock that goes on while the machine is suspended and
//! that every process on the machine shares: what zkfence hands the supervisor, so that no
//! delay in handing it over (a stall of zkfence, a slow spawn) and no suspend of the machine
//! (a closed laptop lid: `CLOCK_MONOTONIC`, and so tokio's and std's `Instant`, stop then,
//! while ZooKeeper's servers go on counting) can move a deadline later. The library's lease
//! clock counts the same way (its `valid_until` already includes any suspend).

use std::ops::{Add, Sub};
use std::time::Duration;

/// The clock every deadline of the supervisor is on.
pub const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;

/// An instant on [`CLOCK`], in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(u128);

impl BootInstant {
    /// Now.
    pub fn now() -> BootInstant {
        BootInstant(read(CLOCK))
    }

    /// The instant `ns` nanoseconds after the clock's zero (as the socket protocol carries it).
    pub fn from_ns(ns: u128) -> BootInstant {
        BootInstant(ns)
    }

    /// Nanoseconds after the clock's zero.
    pub fn as_ns(self) -> u128 {
        self.0
    }

    /// `instant` (a tokio instant, as zkfence's `valid_until` gives it) on this clock: both
    /// clocks are read back to back, so the result is the instant itself, however late it
    /// is used, and however long the machine sleeps meanwhile.
    pub fn of(instant: tokio::time::Instant) -> BootInstant {
        let (now, boot) = (tokio::time::Instant::now(), BootInstant::now());
        if instant >= now {
            boot + (instant - now)
        } else {
            BootInstant(boot.0.saturating_sub((now - instant).as_nanos()))
        }
    }

    /// How long after `earlier` this is, or zero.
    pub fn saturating_duration_since(self, earlier: BootInstant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0).min(u64::MAX as u128) as u64)
    }

    /// This instant `d` earlier, if the clock had started by then.
    pub fn checked_sub(self, d: Duration) -> Option<BootInstant> {
        self.0.checked_sub(d.as_nanos()).map(BootInstant)
    }

    /// As a `timespec`, for `timerfd_settime`.
    pub fn timespec(self) -> libc::timespec {
        libc::timespec {
            tv_sec: (self.0 / 1_000_000_000) as libc::time_t,
            tv_nsec: (self.0 % 1_000_000_000) as libc::c_long,
        }
    }
}

impl Add<Duration> for BootInstant {
    type Output = BootInstant;
    fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0 + d.as_nanos())
    }
}

impl Sub for BootInstant {
    type Output = Duration;
    /// `self.saturating_duration_since(earlier)`.
    fn sub(self, earlier: BootInstant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// `clock` now, in nanoseconds.
pub fn read(clock: libc::clockid_t) -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid out pointer; the clocks used here exist on Linux.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, item 3: the supervisor's deadlines are on the clock that counts a suspend.
    /// (On a machine that never slept the two clocks agree: `cli/tests/supervise.rs` shows the
    /// difference in a time namespace whose boot clock is ahead.)
    #[test]
    fn deadlines_are_on_the_boot_clock() {
        assert_eq!(CLOCK, libc::CLOCK_BOOTTIME);
        let (a, boot, b) = (
            BootInstant::now(),
            read(libc::CLOCK_BOOTTIME),
            BootInstant::now(),
        );
        assert!(a.as_ns() <= boot && boot <= b.as_ns());
    }

    #[test]
    fn a_tokio_instant_converts_to_itself() {
        let later = tokio::time::Instant::now() + Duration::from_secs(5);
        let at = BootInstant::of(later);
        let left = at - BootInstant::now();
        assert!(left > Duration::from_millis(4900) && left <= Duration::from_secs(5));
    }
}
