//! Time that goes on while the machine sleeps: the lease clock's time.
//!
//! tokio's (and std's) `Instant` reads `CLOCK_MONOTONIC`, which does not advance while the
//! machine is suspended (a closed laptop lid, `systemctl suspend`, a VM whose host suspends
//! it through the guest's own power management). ZooKeeper's servers go on counting: a
//! holder that wakes after a suspend longer than what its clock had left must not read
//! `Held`. So the lease clock counts in *boot time*: tokio's instant plus the time the
//! machine has spent suspended since this process first looked. On Linux that is
//! `CLOCK_BOOTTIME − CLOCK_MONOTONIC`, which changes only while the machine is suspended
//! (both are slewed alike by NTP). Elsewhere no suspend is counted (the guide's safety model says so).
//!
//! Deadlines in boot time are slept on through [`BootClock::to_tokio`]: a suspend during
//! the sleep makes it wake late in boot time, so whoever must act on a deadline (the keeper)
//! never sleeps longer than a keepalive interval at a time, and readers of the clock compare
//! with [`BootClock::now`], which is right at once.

use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(test)]
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// The lease clock's source of time.
#[derive(Clone, Debug, Default)]
pub(crate) enum BootClock {
    /// This machine's clocks.
    #[default]
    Real,
    /// A suspended time a test sets (nanoseconds), for the clock's unit tests.
    #[cfg(test)]
    Injected(Arc<AtomicU64>),
}

impl BootClock {
    /// Now, in boot time: tokio's now plus the time suspended since the process started.
    pub(crate) fn now(&self) -> Instant {
        Instant::now() + self.suspended()
    }

    /// How long the machine has been suspended since this process first looked. Never
    /// decreases.
    pub(crate) fn suspended(&self) -> Duration {
        match self {
            BootClock::Real => suspended(),
            #[cfg(test)]
            BootClock::Injected(nanos) => Duration::from_nanos(nanos.load(Ordering::SeqCst)),
        }
    }

    /// The tokio instant of the boot-time instant `at`, as far as is known now: a later
    /// suspend moves it earlier. For sleeping until `at`, and for instants handed to callers
    /// who compare them with tokio's `Instant::now()`.
    pub(crate) fn to_tokio(&self, at: Instant) -> Instant {
        let suspended = self.suspended();
        at.checked_sub(suspended).unwrap_or_else(|| {
            // Only for an `at` from before this process existed, which nothing produces.
            Instant::now().checked_sub(suspended).unwrap_or(at)
        })
    }
}

/// Now, in boot time, on this machine's clocks: what `BootClock::Real` says, for code
/// that sends requests without the lease clock at hand (the shared listings).
pub(crate) fn now() -> Instant {
    BootClock::Real.now()
}

/// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` when this process first asked, in nanoseconds.
static BASE: AtomicU64 = AtomicU64::new(u64::MAX);
/// The largest suspended time reported so far: the two clocks are read one after the other,
/// so their difference jitters by the nanoseconds between the reads; the time reported never
/// goes back.
static REPORTED: AtomicU64 = AtomicU64::new(0);

/// How long this machine has been suspended since the process first asked.
pub(crate) fn suspended() -> Duration {
    let Some(offset) = boot_minus_monotonic() else {
        return Duration::ZERO;
    };
    let base = match BASE.compare_exchange(u64::MAX, offset, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => offset,
        Err(base) => base,
    };
    let now = offset.saturating_sub(base);
    let reported = REPORTED.fetch_max(now, Ordering::SeqCst).max(now);
    if reported > now + 1_000_000 {
        // More than a millisecond below what was reported: not jitter. Nothing counts time
        // backwards here; say so rather than hide it.
        tracing::debug!(reported, now, "boot clock offset went backwards");
    }
    Duration::from_nanos(reported)
}

/// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` in nanoseconds: the time suspended since boot.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_minus_monotonic() -> Option<u64> {
    let read = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime with a valid out pointer.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    };
    let mono = read(libc::CLOCK_MONOTONIC)?;
    let boot = read(libc::CLOCK_BOOTTIME)?;
    Some(boot.saturating_sub(mono))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boot_minus_monotonic() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_that_did_not_sleep_has_no_suspended_time_and_boot_time_runs_with_tokio() {
        let clock = BootClock::Real;
        // A test machine may have slept before this process started, never during a test
        // this short: the base is taken at the first reading.
        let before = clock.suspended();
        let t = clock.now();
        assert!(clock.suspended() - before < Duration::from_millis(5));
        let round_trip = clock.to_tokio(t);
        let drift = round_trip
            .checked_duration_since(Instant::now())
            .unwrap_or_else(|| Instant::now() - round_trip);
        assert!(drift < Duration::from_millis(50), "{drift:?}");
    }

    #[test]
    fn an_injected_suspend_moves_boot_time_ahead_of_tokio_time() {
        let nanos = Arc::new(AtomicU64::new(0));
        let clock = BootClock::Injected(nanos.clone());
        let before = clock.now();
        nanos.store(Duration::from_secs(30).as_nanos() as u64, Ordering::SeqCst);
        let after = clock.now();
        assert!(after - before >= Duration::from_secs(30));
        // A deadline 10 s ahead in boot time before the suspend is 20 s past now.
        let deadline = before + Duration::from_secs(10);
        assert!(clock.to_tokio(deadline) + Duration::from_secs(19) < Instant::now());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_real_offset_is_read_on_linux() {
        assert!(boot_minus_monotonic().is_some());
    }
}
