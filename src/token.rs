//! The fencing token: what a grant hands the protected resource.

use std::fmt;

/// A number that grows with every grant of one lock: give it to the protected resource with
/// every write, and let the resource refuse anything older than the newest it has seen (see
/// [`Fence`](crate::Fence)).
///
/// It is the **creation zxid** (czxid) of the holder's queue node. ZooKeeper numbers every
/// committed transaction with a 64-bit zxid that strictly increases across the whole ensemble,
/// and the create that enqueues a contender comes back with it, so the token costs no extra
/// request. A later grant of the same lock is a node created later, so its token is larger:
/// tokens grow with every grant, never wrap in practice, and keep growing when the lock's
/// directory is removed and made again (the node's *sequence* number, which orders the queue,
/// restarts then, and wraps after 2³¹ creates).
///
/// A resource stores the newest token it has accepted as a 64-bit unsigned integer (a
/// PostgreSQL `bigint` holds it too: zxids stay below 2⁶³). Tokens are ordered within one
/// ensemble's history: a restore from backup or a migration to a new ensemble can set them
/// back, so reset the resources' fences when you do that.
///
/// ```
/// use zkfence::FencingToken;
/// // A resource receiving tokens over the wire compares them as numbers.
/// let (old, new) = (FencingToken::new(0x1_0000_0021), FencingToken::new(0x1_0000_0022));
/// assert!(old < new);
/// assert_eq!(new.get(), 0x1_0000_0022);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token, e.g. one received by a resource over the wire.
    pub const fn new(raw: u64) -> Self {
        FencingToken(raw)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }

    pub(crate) fn from_zxid(czxid: i64) -> Self {
        // zxids are never negative: (epoch << 32) | counter, with a positive epoch.
        FencingToken(czxid.max(0) as u64)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
