//! The resource side of fencing.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::token::FencingToken;

/// What a protected resource embeds to refuse writes from stale lock holders.
///
/// The lock service can only hand out tokens; the resource must check them. A `Fence`
/// remembers the newest token it has admitted and refuses any older one, so a holder that
/// paused past its lease and wakes up after a newer holder wrote is turned away. A token equal
/// to the newest is admitted (the current holder writing again).
///
/// Lock-free and safe to share between threads: admitting is one atomic `fetch_max`.
///
/// ```
/// use zkfence::{Fence, FencingToken};
/// let fence = Fence::new();
/// assert!(fence.admit(FencingToken::new(33)).is_ok());
/// assert!(fence.admit(FencingToken::new(34)).is_ok());
/// let stale = fence.admit(FencingToken::new(33)).unwrap_err();
/// assert_eq!(stale.newest, FencingToken::new(34));
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    newest: AtomicU64,
}

/// A token older than one the [`Fence`] already admitted.
///
/// ```
/// use zkfence::{Fence, FencingToken};
/// let fence = Fence::starting_at(FencingToken::new(10));
/// let err = fence.admit(FencingToken::new(9)).unwrap_err();
/// assert_eq!((err.token.get(), err.newest.get()), (9, 10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {token}: a newer holder (token {newest}) has already written; this holder lost the lock")]
pub struct StaleToken {
    /// The refused token.
    pub token: FencingToken,
    /// The newest token admitted so far.
    pub newest: FencingToken,
}

impl Fence {
    /// A fence that has admitted nothing yet.
    pub const fn new() -> Self {
        Fence {
            newest: AtomicU64::new(0),
        }
    }

    /// A fence resuming from the newest token a previous incarnation admitted (persist it
    /// with the resource's data).
    pub const fn starting_at(newest: FencingToken) -> Self {
        Fence {
            newest: AtomicU64::new(newest.get()),
        }
    }

    /// Admits `token` if it is at least as new as every token admitted before.
    pub fn admit(&self, token: FencingToken) -> Result<(), StaleToken> {
        let previous = self.newest.fetch_max(token.get(), Ordering::AcqRel);
        if token.get() < previous {
            Err(StaleToken {
                token,
                newest: FencingToken::new(previous),
            })
        } else {
            Ok(())
        }
    }

    /// The newest token admitted so far.
    pub fn newest(&self) -> FencingToken {
        FencingToken::new(self.newest.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn concurrent_admits_keep_the_invariant() {
        let fence = Arc::new(Fence::new());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let fence = fence.clone();
                std::thread::spawn(move || {
                    let mut admitted = vec![];
                    for i in 0..10_000u64 {
                        let token = FencingToken::new(i * 8 + t);
                        match fence.admit(token) {
                            Ok(()) => admitted.push(token),
                            Err(e) => assert!(e.token < e.newest),
                        }
                    }
                    admitted
                })
            })
            .collect();
        for t in threads {
            let admitted = t.join().unwrap();
            // Each thread's own admitted tokens are increasing, and none is above the newest.
            assert!(admitted.windows(2).all(|w| w[0] < w[1]));
            assert!(admitted.iter().all(|t| *t <= fence.newest()));
        }
        assert_eq!(fence.newest(), FencingToken::new(9_999 * 8 + 7));
    }

    #[test]
    fn equal_token_is_admitted() {
        let fence = Fence::starting_at(FencingToken::new(5));
        assert!(fence.admit(FencingToken::new(5)).is_ok());
        assert!(fence.admit(FencingToken::new(4)).is_err());
    }
}
