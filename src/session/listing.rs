//! Listings in queue order, shared by the waiters of one session, and which lock directories
//! this session has reason to think exist.
//!
//! ZooKeeper answers one session's requests in the order they were sent, and a read sent
//! behind a write of the same session sees that write. So a listing sent after a waiter's
//! create lists that waiter's node, whoever asked for it: the waiters of one session on one
//! directory can share one listing, as long as it was sent after each one's create. The
//! creates and listings are numbered as they are sent ([`Listings::send_in_order`]; the client
//! library sends a request when it is called, not when its future is polled), and a waiter
//! asks for a listing numbered after its create, or after the event it woke on.
//!
//! At most one listing of a directory is in flight per session. A waiter that needs a later
//! one than the listing in flight waits for that one to be answered and then shares the next:
//! ten thousand waiters enqueued at once list the directory a few times per round trip, not
//! ten thousand times. A lone acquire finds nothing in flight and sends its listing right
//! behind its create, before the create is answered: one round trip for both.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::node;

use super::kept::KeptQueue;

/// A directory's children in queue order (sequence order, right across the counter's wrap),
/// sorted once and shared by every waiter that reads it.
pub(crate) type QueueListing = Arc<node::Ordered>;

/// The answer to one listing: `None` when the directory does not exist.
pub(crate) type Listed = std::result::Result<Option<QueueListing>, zk::Error>;

/// Maps keyed by a lock directory's path, looked up several times on every acquire.
type ByDirectory<V> = HashMap<Arc<str>, V, FastHash>;

/// The hasher of the session's maps that are touched on every acquire.
pub(crate) type FastHash = BuildHasherDefault<KeyHasher>;

/// A multiply hash over eight bytes at a time (the scheme of rustc's `FxHasher`, with a final
/// mix): about 4 instructions a word where FNV-1a costs 4 a byte and the standard SipHash
/// hundreds a lookup, and a lock path is hashed several times on every acquire. The keys are
/// the application's own lock paths or our own ids, never chosen by a remote party, so
/// SipHash's resistance to crafted collisions buys nothing here.
#[derive(Clone, Copy, Default)]
pub(crate) struct KeyHasher(u64);

impl KeyHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for KeyHasher {
    fn write_u8(&mut self, byte: u8) {
        // `str`'s hash ends with one.
        self.add(u64::from(byte));
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // The length keeps "a" and "a\0" apart.
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }

    fn finish(&self) -> u64 {
        // A product's low bits depend only on the low bits of what was multiplied, and the
        // table picks buckets with the low bits: fold the high half in and mix once more.
        let h = self.0 ^ (self.0 >> 32);
        let h = h.wrapping_mul(Self::K);
        h ^ (h >> 29)
    }
}

/// The ordered sends and shared listings of one ZooKeeper session.
#[derive(Default)]
pub(crate) struct Listings {
    /// The number of the last ordered request sent. Held while the request is handed to the
    /// client, so that numbers and the order on the wire agree.
    sent: Mutex<u64>,
    in_flight: Mutex<ByDirectory<InFlight>>,
    known: Mutex<ByDirectory<Known>>,
}

/// How many nodes ahead of a deleted predecessor a waiter checks in one round trip instead
/// of listing the whole queue again.
pub(crate) const MAX_CHECKED_AHEAD: usize = 16;

/// Queues kept: a listing is kept only when it is deeper than this (below it, listing again
/// costs about what checking would), and for at most this many directories.
const DEEP: usize = 2 * MAX_CHECKED_AHEAD;
const MAX_KNOWN: usize = 256;

/// What the session knows of a deep queue beyond a waiter's own listing.
#[derive(Default)]
struct Known {
    /// The latest deep listing, with its number.
    latest: Option<(u64, KeptQueue)>,
    /// A sequence below which no node exists any more (they never come back): the head of a
    /// listing, or a node of ours granted an exclusive hold.
    floor: Option<i32>,
}

impl Known {
    fn raise_floor(&mut self, sequence: i32) {
        if !self.floor.is_some_and(|f| sequence.wrapping_sub(f) <= 0) {
            self.floor = Some(sequence);
        }
    }
}

struct InFlight {
    /// Its number: it lists every node whose create has a smaller one.
    number: u64,
    /// Made by the first waiter that shares it: a lone acquire, the common case, allocates
    /// and notifies nothing.
    answer: Option<watch::Sender<Option<(Listed, Instant)>>>,
}

/// What a caller of [`Listings::join_or_send`] does.
pub(crate) enum Turn<F> {
    /// Share the listing in flight: wait for its answer (`None` if its sender gave up).
    Share(watch::Receiver<Option<(Listed, Instant)>>),
    /// The listing in flight was sent too early for us: wait for it to be answered, then ask
    /// again, to share the next one with everyone else who waited.
    After(watch::Receiver<Option<(Listed, Instant)>>),
    /// We sent it: await `request`, then [`Sent::answer`] the others.
    Send(Sent, F),
}

/// The sender's side of a listing in flight. Dropped unanswered (the sender was cancelled),
/// it takes the listing off the table, and the waiters that shared it ask again.
pub(crate) struct Sent {
    listings: Arc<Listings>,
    dir: Arc<str>,
    number: u64,
    /// Taken off the table (answered, or dropped unanswered).
    done: bool,
    pub(crate) sent_at: Instant,
}

impl Sent {
    /// Sorts the children into queue order and hands the result to every waiter sharing it.
    pub(crate) fn answer(
        mut self,
        children: std::result::Result<Vec<String>, zk::Error>,
    ) -> (Listed, Instant) {
        let listed: Listed = match children {
            Ok(children) => Ok(Some(Arc::new(node::queue_order(children)))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        };
        if let Ok(Some(queue)) = &listed {
            self.listings.listed(&self.dir, self.number, queue);
        }
        let answer = (listed, self.sent_at);
        // Off the table first, then answered: whoever took a receiver under the table's
        // lock before gets the answer, whoever comes after sends the next listing.
        if let Some(sharers) = self.take_off() {
            sharers.send_replace(Some(answer.clone()));
        }
        answer
    }

    /// Takes our listing off the table; returns its sharers' channel, if anyone shares it.
    fn take_off(&mut self) -> Option<watch::Sender<Option<(Listed, Instant)>>> {
        if std::mem::replace(&mut self.done, true) {
            return None;
        }
        let mut in_flight = self.listings.in_flight.lock().unwrap();
        // One lookup in the common case: the listing in flight is ours.
        let ours = in_flight.remove(&*self.dir)?;
        if ours.number == self.number {
            ours.answer
        } else {
            in_flight.insert(self.dir.clone(), ours);
            None
        }
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        // Unanswered (the sender was cancelled): dropping the channel tells the sharers
        // their sender gave up, and they ask again.
        drop(self.take_off());
    }
}

impl Listings {
    /// Hands a request to the client with the next number: `send` must only call the client
    /// (which sends at the call) and return its future.
    pub(crate) fn send_in_order<T>(&self, send: impl FnOnce() -> T) -> (u64, T) {
        let mut sent = self.sent.lock().unwrap();
        *sent += 1;
        (*sent, send())
    }

    /// The number of the last ordered request sent: a listing numbered after it was sent
    /// after now.
    pub(crate) fn last_sent(&self) -> u64 {
        *self.sent.lock().unwrap()
    }

    /// Shares the listing of `dir` in flight if it was sent after request number `after`,
    /// or sends one with `list` if none is in flight.
    pub(crate) fn join_or_send<F>(
        self: &Arc<Self>,
        dir: &Arc<str>,
        after: u64,
        list: impl FnOnce() -> F,
    ) -> Turn<F> {
        let mut in_flight = self.in_flight.lock().unwrap();
        if let Some(f) = in_flight.get_mut(&**dir) {
            let answer = f
                .answer
                .get_or_insert_with(|| watch::channel(None).0)
                .subscribe();
            return if f.number > after {
                Turn::Share(answer)
            } else {
                Turn::After(answer)
            };
        }
        // Before the send: the lease clock takes an answer's send time as what it proves.
        let sent_at = super::boot_clock::now();
        let (number, request) = self.send_in_order(list);
        in_flight.insert(
            dir.clone(),
            InFlight {
                number,
                answer: None,
            },
        );
        Turn::Send(
            Sent {
                listings: self.clone(),
                dir: dir.clone(),
                number,
                done: false,
                sent_at,
            },
            request,
        )
    }
}

/// What the session knows of the nodes ahead of a waiter, for the waiter to check instead
/// of listing a deep queue again.
impl Listings {
    fn listed(&self, dir: &str, number: u64, queue: &QueueListing) {
        // Made before the lock: a 10,000-deep listing takes a millisecond to keep.
        let kept = (queue.len() > DEEP).then(|| KeptQueue::of(queue));
        let mut known = self.known.lock().unwrap();
        if kept.is_none() && !known.contains_key(dir) {
            return;
        }
        if known.len() >= MAX_KNOWN && !known.contains_key(dir) {
            known.clear();
        }
        let entry = known.entry(Arc::from(dir)).or_default();
        if let Some((head, _)) = queue.first() {
            entry.raise_floor(*head);
        }
        entry.latest = kept.map(|kept| (number, kept));
    }

    /// A node of ours at `sequence` holds exclusively: every node ahead of it is gone.
    pub(crate) fn granted_exclusive(&self, dir: &str, sequence: i32) {
        if let Some(entry) = self.known.lock().unwrap().get_mut(dir) {
            entry.raise_floor(sequence);
        }
    }

    /// The names of every node that may still exist ahead of `sequence`, for a waiter whose
    /// create was request `created` (only a listing sent after it shows every node that was
    /// ahead of the waiter): `None` if the session does not know them, or they are more than
    /// [`MAX_CHECKED_AHEAD`].
    pub(crate) fn ahead_of(&self, dir: &str, created: u64, sequence: i32) -> Option<Vec<String>> {
        let known = self.known.lock().unwrap();
        let entry = known.get(dir)?;
        let (number, queue) = entry.latest.as_ref()?;
        if *number <= created {
            return None;
        }
        if queue.is_empty() {
            return None;
        }
        let reference = queue.sequence(0);
        let distance = |seq: i32| seq.wrapping_sub(reference);
        let end = queue.partition_point(|seq| distance(seq) < distance(sequence));
        let start = entry.floor.map_or(0, |floor| {
            queue.partition_point(|seq| distance(seq) < distance(floor))
        });
        if start > end {
            return None;
        }
        (end - start <= MAX_CHECKED_AHEAD).then(|| (start..end).map(|i| queue.name(i)).collect())
    }
}

/// Waits for the answer of a listing someone else sent: `None` if its sender gave up.
pub(crate) async fn shared_answer(
    mut answer: watch::Receiver<Option<(Listed, Instant)>>,
) -> Option<(Listed, Instant)> {
    match answer.wait_for(|a| a.is_some()).await {
        Ok(a) => a.clone(),
        Err(_) => None,
    }
}

/// How long an empty container directory has been seen to survive at most, before the
/// server's container check removed it: ZooKeeper's default check interval until this
/// session has seen a removal itself.
const DEFAULT_REMOVAL_AFTER: Duration = Duration::from_secs(60);

/// Never assume a directory is gone sooner than this after our last create in it, whatever
/// was seen: a hot lock must never pay for a directory create.
const MIN_REMOVAL_AFTER: Duration = Duration::from_millis(50);

/// Directories remembered at most; past it the memory starts over (a forgotten directory
/// costs one pipelined create of it at its next acquire, nothing more).
const MAX_REMEMBERED: usize = 4096;

/// Which lock directories this session has reason to think exist, so an acquire can send the
/// directory's create in front of its node's (in the same round trip) exactly when it is
/// likely missing: never seen by this session, or idle longer than a container has been seen
/// to survive. A directory create that finds the directory is a write (an error transaction),
/// so a hot lock never sends one.
pub(crate) struct Directories {
    inner: Mutex<DirectoriesInner>,
    /// Persistent directories are never removed by the server.
    containers: bool,
}

struct DirectoriesInner {
    /// The last time a node of ours was created in each directory.
    last_create: ByDirectory<Instant>,
    removal_after: Duration,
}

impl Directories {
    pub(crate) fn new(containers: bool) -> Directories {
        Directories {
            inner: Mutex::new(DirectoriesInner {
                last_create: ByDirectory::default(),
                removal_after: DEFAULT_REMOVAL_AFTER,
            }),
            containers,
        }
    }

    /// True if an acquire in `dir` should create the directory first.
    pub(crate) fn likely_missing(&self, dir: &str) -> bool {
        let inner = self.inner.lock().unwrap();
        match inner.last_create.get(dir) {
            None => true,
            Some(at) => self.containers && at.elapsed() > inner.removal_after,
        }
    }

    /// A node of ours was created in `dir`: it exists now.
    pub(crate) fn created_in(&self, dir: &str) {
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap();
        // A hot lock is already known: no new key on every cycle.
        if let Some(at) = inner.last_create.get_mut(dir) {
            *at = now;
            return;
        }
        if inner.last_create.len() >= MAX_REMEMBERED {
            inner.last_create.clear();
        }
        inner.last_create.insert(Arc::from(dir), now);
    }

    /// A create found `dir` missing: learn how soon the server removes empty directories.
    /// It checks them periodically, so one left empty goes at some moment within a period:
    /// found gone after idling `x`, it was likely gone after half of that.
    pub(crate) fn found_missing(&self, dir: &str) {
        let mut inner = self.inner.lock().unwrap();
        if let Some(at) = inner.last_create.remove(dir) {
            let idle = (at.elapsed() / 2).max(MIN_REMOVAL_AFTER);
            if self.containers && idle < inner.removal_after {
                tracing::debug!(%dir, ?idle, "an empty lock directory was removed sooner than expected: creating idle ones in front from now on");
                inner.removal_after = idle;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_likely_missing_until_seen_and_again_once_idle_longer_than_a_removal() {
        let dirs = Directories::new(true);
        assert!(dirs.likely_missing("/a"), "never seen");
        dirs.created_in("/a");
        assert!(!dirs.likely_missing("/a"), "just created in");
        // A removal seen after ~0 s idle: clamped to the minimum, never zero.
        dirs.found_missing("/a");
        assert!(dirs.likely_missing("/a"), "found missing");
        dirs.created_in("/a");
        assert!(
            !dirs.likely_missing("/a"),
            "a hot lock never creates its directory"
        );
        std::thread::sleep(MIN_REMOVAL_AFTER + Duration::from_millis(20));
        assert!(
            dirs.likely_missing("/a"),
            "idle longer than the removal seen"
        );
    }

    #[test]
    fn persistent_directories_are_never_thought_removed_once_seen() {
        let dirs = Directories::new(false);
        dirs.created_in("/a");
        dirs.found_missing("/b");
        std::thread::sleep(MIN_REMOVAL_AFTER + Duration::from_millis(20));
        assert!(!dirs.likely_missing("/a"));
    }

    #[test]
    fn the_nodes_ahead_are_known_from_a_later_deep_listing_and_above_the_floor() {
        let listings = Listings::default();
        let names: Vec<String> = (0..40).map(|i| format!("_c_x-lock-{:010}", i)).collect();
        let queue: QueueListing = Arc::new(node::queue_order(names.clone()));
        listings.listed("/d", 5, &queue);
        assert_eq!(
            listings.ahead_of("/d", 5, 20),
            None,
            "listed before our create"
        );
        assert_eq!(
            listings.ahead_of("/d", 4, 20),
            None,
            "20 ahead: more than we check"
        );
        listings.granted_exclusive("/d", 15);
        assert_eq!(
            listings.ahead_of("/d", 4, 20),
            Some(names[15..20].to_vec()),
            "from the node of ours granted on"
        );
        listings.granted_exclusive("/d", 19);
        assert_eq!(listings.ahead_of("/d", 4, 19), Some(vec![]));
        // A shallow queue is not kept: listing it again costs about what checking would.
        let shallow: QueueListing = Arc::new(node::queue_order(names[..3].to_vec()));
        listings.listed("/d", 6, &shallow);
        assert_eq!(listings.ahead_of("/d", 4, 2), None);
    }

    #[test]
    fn lock_paths_spread_over_the_buckets() {
        use std::hash::BuildHasher;
        let hasher = BuildHasherDefault::<KeyHasher>::default();
        // Paths that differ in one character, at the end, in the middle, by length.
        let paths: Vec<String> = (0..4096)
            .map(|i| format!("/app/locks/seat-{i}"))
            .chain((0..4096).map(|i| format!("/app/{i:04}/locks/seat")))
            .chain((1..=64).map(|n| "a".repeat(n)))
            .chain(["a\0".to_string()])
            .collect();
        let hashes: std::collections::HashSet<u64> =
            paths.iter().map(|p| hasher.hash_one(p.as_str())).collect();
        assert_eq!(hashes.len(), paths.len(), "no two paths hash alike");
        // The table picks a bucket with the low bits: 1,024 buckets, about 8 paths each.
        let mut buckets = [0u32; 1024];
        for h in &hashes {
            buckets[(h & 1023) as usize] += 1;
        }
        let fullest = buckets.iter().max().unwrap();
        assert!(*fullest <= 32, "a bucket holds {fullest}");
    }

    #[test]
    fn numbers_follow_the_order_of_sends() {
        let listings = Arc::new(Listings::default());
        let (a, ()) = listings.send_in_order(|| ());
        let (b, ()) = listings.send_in_order(|| ());
        assert!(b > a);
        assert_eq!(listings.last_sent(), b);
        // A listing in flight is shared by what was sent before it, not by what came after.
        let Turn::Send(sent, ()) = listings.join_or_send(&Arc::from("/d"), b, || ()) else {
            panic!("nothing in flight: we send");
        };
        assert!(matches!(
            listings.join_or_send(&Arc::from("/d"), b, || ()),
            Turn::Share(_)
        ));
        let (c, ()) = listings.send_in_order(|| ());
        assert!(matches!(
            listings.join_or_send(&Arc::from("/d"), c, || ()),
            Turn::After(_)
        ));
        drop(sent);
        assert!(matches!(
            listings.join_or_send(&Arc::from("/d"), c, || ()),
            Turn::Send(..)
        ));
    }
}
