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
        // Each thread publishes every token the fence admitted to it; before each admit it
        // reads the newest published one. A token older than that one must be refused (it
        // was admitted before this admit began), and the refusal must name a token at least
        // as new. A fence that always admits, or that forgets a newer token, fails here.
        use std::sync::atomic::AtomicU64;
        const THREADS: u64 = 8;
        const ROUNDS: u64 = 10_000;
        let fence = Arc::new(Fence::new());
        let published = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (fence, published) = (fence.clone(), published.clone());
                std::thread::spawn(move || {
                    let (mut admitted, mut stale_checks) = (vec![], 0u64);
                    for i in 0..ROUNDS {
                        let seen = published.load(Ordering::Acquire);
                        let token = FencingToken::new(i * THREADS + t + 1);
                        match fence.admit(token) {
                            Ok(()) => {
                                assert!(
                                    token.get() >= seen,
                                    "admitted {token} after {seen} had been admitted"
                                );
                                published.fetch_max(token.get(), Ordering::AcqRel);
                                admitted.push(token);
                            }
                            Err(e) => {
                                assert_eq!(e.token, token);
                                assert!(e.token < e.newest, "{e:?}");
                            }
                        }
                        // A holder that slept through newer holders' writes: strictly older
                        // than a token already admitted, so it must be refused.
                        if seen > 1 {
                            stale_checks += 1;
                            let err = fence
                                .admit(FencingToken::new(seen - 1))
                                .expect_err("a token older than an admitted one was admitted");
                            assert!(err.newest.get() >= seen, "{err:?}");
                        }
                    }
                    (admitted, stale_checks)
                })
            })
            .collect();
        let mut all_admitted = vec![];
        for t in threads {
            let (admitted, stale_checks) = t.join().unwrap();
            assert!(stale_checks > 0, "the stale case was never exercised");
            // Each thread's own admitted tokens are increasing, and none is above the newest.
            assert!(admitted.windows(2).all(|w| w[0] < w[1]));
            assert!(admitted.iter().all(|t| *t <= fence.newest()));
            all_admitted.extend(admitted);
        }
        assert_eq!(fence.newest(), FencingToken::new(ROUNDS * THREADS));
        assert!(all_admitted.contains(&fence.newest()));
    }

    #[test]
    fn older_tokens_are_refused_in_sequence() {
        let fence = Fence::new();
        for newest in [3u64, 7, 7, 100] {
            fence.admit(FencingToken::new(newest)).unwrap();
            for older in [1, newest / 2, newest - 1] {
                let err = fence.admit(FencingToken::new(older)).unwrap_err();
                assert_eq!(
                    (err.token.get(), err.newest.get()),
                    (older, newest),
                    "{err}"
                );
            }
            assert_eq!(fence.newest(), FencingToken::new(newest));
        }
    }

    #[test]
    fn equal_token_is_admitted() {
        let fence = Fence::starting_at(FencingToken::new(5));
        assert!(fence.admit(FencingToken::new(5)).is_ok());
        assert!(fence.admit(FencingToken::new(4)).is_err());
    }
}
