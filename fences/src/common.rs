//! What every store's fence shares: the answer, the errors, and the input rules.

// Used by every store's module; with no store's feature, only the public items are.
#![cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "etcd",
        feature = "http"
    )),
    allow(dead_code)
)]

use zkfence::{FencingToken, StaleToken};

/// The longest resource key, in bytes, that every store holds (a MySQL primary key of
/// `VARBINARY(512)`, well within InnoDB's 3072-byte index limit).
pub const MAX_RESOURCE_LEN: usize = 512;

/// A type-erased error of a store's client.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a fence said about a write.
///
/// ```
/// use zkfence_fences::{FencingToken, Outcome, StaleToken};
/// let refused: Outcome<()> = Outcome::Refused(StaleToken {
///     token: FencingToken::new(7),
///     newest: FencingToken::new(9),
/// });
/// assert!(!refused.is_written());
/// assert_eq!(refused.into_result().unwrap_err().newest, FencingToken::new(9));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a refused write was not written: the writer has lost its lock and must stop"]
pub enum Outcome<T = ()> {
    /// The token was at least as new as every token the fence had accepted: the write is
    /// committed (with the fence raised to the token), carrying what the store answered.
    Written(T),
    /// A newer token had been accepted: nothing was written. The holder of `token` has lost
    /// its lock (a newer holder exists) and must stop acting as the owner.
    Refused(StaleToken),
}

impl<T> Outcome<T> {
    /// Whether the write was committed.
    ///
    /// ```
    /// assert!(zkfence_fences::Outcome::Written(()).is_written());
    /// ```
    pub fn is_written(&self) -> bool {
        matches!(self, Outcome::Written(_))
    }

    /// `Ok` with what the store answered, or `Err` with the refusal, for `?`.
    ///
    /// ```
    /// let out = zkfence_fences::Outcome::Written(3u64);
    /// assert_eq!(out.into_result(), Ok(3));
    /// ```
    pub fn into_result(self) -> Result<T, StaleToken> {
        match self {
            Outcome::Written(t) => Ok(t),
            Outcome::Refused(stale) => Err(stale),
        }
    }

    /// The same outcome with the written value mapped.
    ///
    /// ```
    /// let out = zkfence_fences::Outcome::Written(3u64).map(|n| n * 2);
    /// assert_eq!(out, zkfence_fences::Outcome::Written(6));
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Written(t) => Outcome::Written(f(t)),
            Outcome::Refused(stale) => Outcome::Refused(stale),
        }
    }
}

/// Why a fenced write could not be decided. A refusal is not an error: it is
/// [`Outcome::Refused`].
///
/// ```
/// use zkfence_fences::{check_token, Error, FencingToken};
/// let err = check_token(FencingToken::new(0)).unwrap_err();
/// assert!(matches!(err, Error::InvalidToken { .. }));
/// assert!(err.to_string().contains("token 0"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The token is 0. zkfence never issues it (a token is a node's creation zxid, never 0):
    /// it usually means an unset variable, e.g. a `ZKFENCE_TOKEN` read outside `zkfence
    /// exec`. Nothing was sent to the store.
    #[error(
        "invalid fencing token {token}: zkfence never issues token 0 (a lease's token is its \
         node's creation zxid); pass Lease::token() of the lease you hold"
    )]
    InvalidToken {
        /// The token given.
        token: u64,
    },

    /// The resource key breaks the rule every store shares (see the crate docs): nothing was
    /// sent to the store.
    #[error("invalid resource key {resource:?}: {why}")]
    InvalidResource {
        /// The key given (cut to 80 characters in the message).
        resource: String,
        /// What is wrong with it.
        why: String,
    },

    /// No fence exists for the resource: its owner has not created it (`create`), or it was
    /// deleted. Nothing was written: a write through a missing fence is refused rather than
    /// taken as the first, since a mistyped key would otherwise let any token through.
    #[error(
        "no fence for resource {resource:?} in {store}: nothing was written; the resource's \
         owner creates its fence once (`create`) before writers use it"
    )]
    NoFence {
        /// The store.
        store: &'static str,
        /// The resource key.
        resource: String,
    },

    /// The fence holds something that is not a token (written by something else than this
    /// crate). Nothing was written.
    #[error(
        "the fence of resource {resource:?} in {store} holds {found:?}, not a fencing token: \
         nothing was written; was it written by something else?"
    )]
    CorruptFence {
        /// The store.
        store: &'static str,
        /// The resource key.
        resource: String,
        /// What the fence held.
        found: String,
    },

    /// The store failed. If it failed while the write was in flight, the outcome is unknown:
    /// the write was committed whole or not at all (every fence is one atomic step), so
    /// read the store to tell, or write again with the same token (an equal token is
    /// accepted).
    #[error("{store}: {source}")]
    Store {
        /// The store.
        store: &'static str,
        /// The client's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    pub(crate) fn store(store: &'static str, source: impl Into<BoxError>) -> Error {
        Error::Store {
            store,
            source: source.into(),
        }
    }
}

/// Checks a token before anything is sent: 0 is never issued.
///
/// ```
/// use zkfence_fences::{check_token, FencingToken};
/// assert!(check_token(FencingToken::new(0x1_0000_0003)).is_ok());
/// assert!(check_token(FencingToken::new(0)).is_err());
/// ```
///
/// # Errors
///
/// [`Error::InvalidToken`] for 0.
pub fn check_token(token: FencingToken) -> Result<FencingToken, Error> {
    if token.get() == 0 {
        return Err(Error::InvalidToken { token: 0 });
    }
    Ok(token)
}

/// Checks a resource key against the rule every store shares: 1 to [`MAX_RESOURCE_LEN`]
/// bytes of UTF-8 without control characters.
///
/// ```
/// use zkfence_fences::check_resource;
/// assert!(check_resource("/locks/orders-42").is_ok());
/// assert!(check_resource("naïve key; with 'quotes' and {braces}").is_ok());
/// assert!(check_resource("").is_err());
/// assert!(check_resource("two\nlines").is_err());
/// ```
///
/// # Errors
///
/// [`Error::InvalidResource`] saying which part of the rule the key breaks.
pub fn check_resource(resource: &str) -> Result<&str, Error> {
    let why = if resource.is_empty() {
        Some("it is empty".to_string())
    } else if resource.len() > MAX_RESOURCE_LEN {
        Some(format!(
            "it is {} bytes long, more than the {MAX_RESOURCE_LEN} every store holds",
            resource.len()
        ))
    } else {
        resource
            .char_indices()
            .find(|(_, c)| c.is_ascii_control())
            .map(|(i, c)| {
                format!(
                    "it holds the control character U+{:04X} at byte {i} (keys are 1 to \
                 {MAX_RESOURCE_LEN} bytes of UTF-8 without control characters)",
                    c as u32
                )
            })
    };
    match why {
        None => Ok(resource),
        Some(why) => Err(Error::InvalidResource {
            resource: resource.chars().take(80).collect(),
            why,
        }),
    }
}

/// Both checks, as every fence runs them first.
pub(crate) fn check_input(resource: &str, token: FencingToken) -> Result<(), Error> {
    check_token(token)?;
    check_resource(resource)?;
    Ok(())
}

/// A token as a signed 64-bit integer (SQL `bigint`): zxids stay below 2⁶³.
#[cfg(feature = "postgres")]
pub(crate) fn token_i64(token: FencingToken) -> Result<i64, Error> {
    i64::try_from(token.get()).map_err(|_| Error::InvalidToken { token: token.get() })
}

/// The refusal of `token` by a fence holding `newest`.
pub(crate) fn refused<T>(token: FencingToken, newest: u64) -> Outcome<T> {
    Outcome::Refused(StaleToken {
        token,
        newest: FencingToken::new(newest),
    })
}

/// A token written as 20 zero-padded decimal digits, so that comparing two as strings
/// (etcd compares values byte by byte) is comparing them as numbers.
#[cfg(any(feature = "etcd", test))]
pub(crate) fn padded(token: u64) -> String {
    format!("{token:020}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_tokens_sort_as_numbers() {
        let tokens = [0u64, 1, 9, 10, 0x1_0000_0000, u64::MAX / 2, u64::MAX];
        for a in tokens {
            for b in tokens {
                assert_eq!(padded(a).cmp(&padded(b)), a.cmp(&b), "{a} {b}");
            }
        }
    }

    #[test]
    fn the_resource_rule() {
        assert!(check_resource(&"x".repeat(MAX_RESOURCE_LEN)).is_ok());
        let long = check_resource(&"x".repeat(MAX_RESOURCE_LEN + 1)).unwrap_err();
        assert!(long.to_string().contains("513 bytes"), "{long}");
        let nul = check_resource("a\0b").unwrap_err();
        assert!(nul.to_string().contains("U+0000 at byte 1"), "{nul}");
        assert!(check_resource("del\u{7f}").is_err());
        assert!(check_resource("é ✓ 'x' \"y\" {z} %41 ; -- ").is_ok());
    }
}
