//! Queue node names: the formats we write, how any contender's name is ordered, and the
//! owner metadata stored as node data.

use std::fmt;

use crate::error::{Error, Result};

/// The layout of the queue nodes zkfence creates.
///
/// Ordering never depends on the format: every child whose name ends in a sequence number is a
/// contender, ordered by that number. So a queue may mix formats, and other clients that order
/// by sequence see the same order we do.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// use zkfence::NodeFormat;
/// // Share /locks/report with Python services that use kazoo's Lock.
/// let lock = session.lock("/locks/report").with_format(NodeFormat::Kazoo);
/// assert_eq!("kazoo".parse::<NodeFormat>(), Ok(NodeFormat::Kazoo));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeFormat {
    /// `_c_{uuid}-lock-{seq}`: Apache Curator's `InterProcessMutex` layout, also
    /// `zookeeper-client`'s curator prefix. The default.
    #[default]
    Curator,
    /// `{32 hex digits}__lock__{seq}`: what Python Kazoo's `Lock` writes and recognises.
    Kazoo,
}

/// Room for the longest node name before its sequence: `_c_`, a hyphenated uuid, `-`, a tag.
const PREFIX_CAPACITY: usize = 3 + 36 + 1 + 9;

impl NodeFormat {
    /// The node name prefix (before the server-appended sequence) for a contender `uuid`.
    ///
    /// Read/write locks use the names of each peer's own read/write lock (Curator's
    /// `InterProcessReadWriteLock`: `__READ__`/`__WRIT__`; Kazoo's `ReadLock`/`WriteLock`:
    /// `__rlock__`/`__lock__`), so they coordinate with those too.
    #[cfg(test)]
    pub(crate) fn prefix(self, uuid: &uuid::Uuid, kind: Kind) -> String {
        let mut name = String::new();
        self.push_prefix(&mut name, uuid, kind);
        name
    }

    /// The full path before the sequence of a contender `uuid`'s node in `dir`: the path a
    /// sequential create is given. Built in one buffer, as it is on every acquire.
    pub(crate) fn prefix_in(self, dir: &str, uuid: &uuid::Uuid, kind: Kind) -> String {
        let mut path = String::with_capacity(dir.len() + 1 + PREFIX_CAPACITY);
        path.push_str(dir);
        path.push('/');
        self.push_prefix(&mut path, uuid, kind);
        path
    }

    fn push_prefix(self, out: &mut String, uuid: &uuid::Uuid, kind: Kind) {
        self.push_tagged(out, uuid, self.tag(kind));
    }

    /// Writes the marker for `uuid`, then `tag` (one of [`TAGS`]): a node's name up to its
    /// sequence.
    pub(crate) fn push_tagged(self, out: &mut String, uuid: &uuid::Uuid, tag: &str) {
        self.push_marker(out, uuid);
        // The marker ends with the tag's first characters in Kazoo's names (`{uuid}__`).
        out.push_str(match self {
            NodeFormat::Curator => tag,
            NodeFormat::Kazoo => &tag[2..],
        });
    }

    fn push_marker(self, out: &mut String, uuid: &uuid::Uuid) {
        let mut buffer = uuid::Uuid::encode_buffer();
        match self {
            NodeFormat::Curator => {
                out.push_str("_c_");
                out.push_str(uuid.hyphenated().encode_lower(&mut buffer));
                out.push('-');
            }
            NodeFormat::Kazoo => {
                out.push_str(uuid.simple().encode_lower(&mut buffer));
                out.push_str("__");
            }
        }
    }

    /// The part of a node name just before the sequence, naming what the node wants.
    fn tag(self, kind: Kind) -> &'static str {
        match (self, kind) {
            (NodeFormat::Curator, Kind::Lock) => "lock-",
            (NodeFormat::Curator, Kind::Read) => "__READ__",
            (NodeFormat::Curator, Kind::Write) => "__WRIT__",
            (NodeFormat::Kazoo, Kind::Lock | Kind::Write) => "__lock__",
            (NodeFormat::Kazoo, Kind::Read) => "__rlock__",
            // Curator's InterProcessSemaphoreV2 lease name; Kazoo's semaphore has no queue.
            (NodeFormat::Curator, Kind::Lease { .. }) => "lease-",
            (NodeFormat::Kazoo, Kind::Lease { .. }) => "__lease__",
        }
    }

    /// The part of the prefix that identifies one contender, used to find our node again
    /// after a create whose outcome is unknown.
    pub(crate) fn marker(self, uuid: &uuid::Uuid) -> String {
        let mut marker = String::with_capacity(PREFIX_CAPACITY);
        self.push_marker(&mut marker, uuid);
        marker
    }
}

impl std::str::FromStr for NodeFormat {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "curator" => Ok(NodeFormat::Curator),
            "kazoo" => Ok(NodeFormat::Kazoo),
            other => Err(format!(
                "unknown node format {other:?}: expected \"curator\" or \"kazoo\""
            )),
        }
    }
}

/// What we enqueue as: it names our nodes, and the queue derives from it who may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A plain lock (also an election candidate): exclusive.
    Lock,
    /// A shared (read) hold: held with other readers, never with an exclusive contender.
    Read,
    /// An exclusive (write) hold.
    Write,
    /// A semaphore lease: the first `permits` contenders hold.
    Lease {
        /// How many may hold at once.
        permits: usize,
    },
}

/// Every tag a zkfence, Curator or Kazoo contender's name carries before its sequence.
pub(crate) const TAGS: [&str; 7] = [
    "lock-",
    "__READ__",
    "__WRIT__",
    "lease-",
    "__lock__",
    "__rlock__",
    "__lease__",
];

/// True for a reader's node (ours, Curator's or Kazoo's); every other contender is exclusive.
pub(crate) fn is_shared(name: &str) -> bool {
    name.contains("__READ__") || name.contains("__rlock__")
}

/// The sequence number at the end of a contender's name, if it has one.
///
/// ZooKeeper appends the parent's signed 32-bit child counter as `%010d`: ten digits, then,
/// once the counter has wrapped past 2³¹ − 1, a sign and nine or ten digits
/// (`-2147483648` is eleven characters). After a known tag (`lock-`, `__lock__`, …) the whole
/// rest is the suffix, whatever its length. Without one, the last ten characters are read,
/// so a foreign name past the wrap with ten digits after its sign is misread: a limit of
/// names that do not say where their sequence starts.
pub(crate) fn sequence_of(name: &str) -> Option<i32> {
    // The common case first, without searching: a known tag, then ten digits (a counter that
    // has not wrapped). Tags hold no digits, so no tag can end inside those ten.
    if let Some(start) = name.len().checked_sub(10) {
        let (head, digits) = name.as_bytes().split_at(start);
        if digits.iter().all(u8::is_ascii_digit)
            && TAGS.iter().any(|tag| head.ends_with(tag.as_bytes()))
        {
            return std::str::from_utf8(digits).ok()?.parse().ok();
        }
    }
    let known = TAGS
        .iter()
        .filter_map(|tag| name.rfind(tag).map(|at| at + tag.len()))
        .max();
    let suffix = match known {
        Some(start) => &name[start..],
        None => name.get(name.len().checked_sub(10)?..)?,
    };
    let digits = suffix.strip_prefix('-').unwrap_or(suffix);
    let width_ok = match suffix.starts_with('-') {
        false => digits.len() == 10,
        true => digits.len() == 9 || digits.len() == 10,
    };
    if !width_ok || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix.parse::<i32>().ok()
}

/// `prefix` followed by `sequence` as ZooKeeper names a sequential node (`%010d`): the path
/// of the node a create made, without the formatting machinery (on every acquire).
pub(crate) fn with_sequence(prefix: &str, sequence: i32) -> String {
    let mut path = String::with_capacity(prefix.len() + 11);
    path.push_str(prefix);
    push_sequence(&mut path, sequence);
    path
}

/// Writes `sequence` as ZooKeeper names a sequential node (`%010d`).
pub(crate) fn push_sequence(out: &mut String, sequence: i32) {
    if sequence < 0 {
        // Past the counter's wrap: rare enough for the general formatter.
        use std::fmt::Write;
        let _ = write!(out, "{sequence:010}");
        return;
    }
    let mut digits = [b'0'; 10];
    let mut rest = sequence as u32;
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend(digits.iter().map(|&d| d as char));
}

/// Keeps the children that are contenders and sorts them into queue order, noting whether
/// a semaphore's directories are among the children ([`Ordered::semaphore_below`]).
///
/// Sequences are compared with serial-number arithmetic (RFC 1982): `b` is after `a` when
/// `b - a`, wrapped to 32 bits, is positive. A live queue spans far fewer than 2³¹ creates,
/// so this orders it right across the counter's wrap, where `2147483647` is followed by
/// `-2147483648`.
pub(crate) fn queue_order(children: Vec<String>) -> Ordered {
    let mut semaphore = false;
    let mut queue: Vec<(i32, String)> = children
        .into_iter()
        .filter_map(|name| match sequence_of(&name) {
            Some(seq) => Some((seq, name)),
            None => {
                semaphore |= is_semaphore_directory(&name);
                None
            }
        })
        .collect();
    if let Some(reference) = queue.first().map(|(seq, _)| *seq) {
        // Distance from one member, as a signed 32-bit offset: a total order on any set that
        // spans less than 2³¹.
        queue.sort_by_key(|(seq, _)| seq.wrapping_sub(reference));
    }
    Ordered {
        queue,
        semaphore_below: semaphore,
    }
}

/// A lock directory's contenders in queue order, and whether its listing shows a
/// semaphore's directories.
#[derive(Debug, Default)]
pub(crate) struct Ordered {
    pub(crate) queue: Vec<(i32, String)>,
    /// A semaphore's `locks` and `leases` are among the children: its holders and waiters
    /// may be below. The layouts are disjoint (a semaphore's nodes one level down, a lock's
    /// beside those directories), so kinds mixed on one path would not exclude each other;
    /// a lock looks for the semaphore here, in the listing it reads anyway, and the
    /// semaphore for a lock's nodes in its own read of the path.
    ///
    /// (A plain lock and a read/write lock need no such check among zkfence clients: a
    /// reader treats every node that is not a reader's as a writer, and a plain lock
    /// waits for every node ahead of it. Curator's read lock ignores plain `lock-` nodes,
    /// but its readers' names are ours, so that mix cannot be told from the names.)
    pub(crate) semaphore_below: bool,
}

impl std::ops::Deref for Ordered {
    type Target = Vec<(i32, String)>;
    fn deref(&self) -> &Self::Target {
        &self.queue
    }
}

impl std::ops::DerefMut for Ordered {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.queue
    }
}

impl IntoIterator for Ordered {
    type Item = (i32, String);
    type IntoIter = std::vec::IntoIter<(i32, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.queue.into_iter()
    }
}

/// The kind of lock a contender's node `name` belongs to, as another kind names it in an
/// error.
pub(crate) fn kind_of(name: &str) -> crate::LockKind {
    if is_read_write(name) {
        crate::LockKind::ReadWrite
    } else {
        crate::LockKind::Lock
    }
}

/// A semaphore's directory among a lock directory's children (Curator's
/// `InterProcessSemaphoreV2` layout, which ours follows).
fn is_semaphore_directory(name: &str) -> bool {
    name == "locks" || name == "leases"
}

/// A read/write lock's node, ours, Curator's or Kazoo's reader.
fn is_read_write(name: &str) -> bool {
    name.contains("__READ__") || name.contains("__WRIT__") || name.contains("__rlock__")
}

/// The index of our node (`sequence`, `name`) in `queue` (in [`queue_order`]), found by its
/// sequence in O(log n): a waiter in a deep queue looks itself up in a shared listing.
pub(crate) fn index_in_queue(queue: &[(i32, String)], sequence: i32, name: &str) -> Option<usize> {
    let reference = queue.first()?.0;
    // The order queue_order sorted by, from any member: distances within a span below 2³¹.
    let found = queue
        .binary_search_by_key(&sequence.wrapping_sub(reference), |(seq, _)| {
            seq.wrapping_sub(reference)
        })
        .ok()
        .filter(|&i| queue[i].1 == name);
    // Sequences are unique in a directory, so a miss means the node is not listed; a queue
    // that spans the whole counter (never seen) is searched the slow way.
    found.or_else(|| queue.iter().position(|(_, n)| n == name))
}

/// Splits a connect string into its hosts and its chroot (`None` for none, or for `/`
/// alone, which the Java client also takes as no chroot), refusing what no server could
/// take: no host, an empty host between commas, a host without a port, a bad chroot.
pub(crate) fn split_connect_string(connect: &str) -> Result<(&str, Option<&str>)> {
    let bad = |reason: String| Error::InvalidConnectString {
        connect: connect.to_string(),
        reason,
    };
    let (hosts, chroot) = match connect.find('/') {
        Some(i) => (&connect[..i], Some(&connect[i..])),
        None => (connect, None),
    };
    if hosts.is_empty() || hosts.split(',').any(|h| h.trim().is_empty()) {
        return Err(bad(
            "no host before the chroot, or an empty host between commas".into(),
        ));
    }
    for host in hosts.split(',').map(str::trim) {
        let bare = host
            .strip_prefix("tcp+tls://")
            .or_else(|| host.strip_prefix("tcp://"))
            .unwrap_or(host);
        // "[::1]:2181": the port follows the bracket; "zk1:2181": the last colon.
        let port = match bare.strip_prefix('[') {
            Some(rest) => rest.split_once("]:").map(|(_, p)| p),
            None => bare.rsplit_once(':').map(|(_, p)| p),
        };
        match port {
            None => {
                return Err(bad(format!(
                    "the host {bare:?} has no port; write it with its port, e.g. \"{bare}:2181\" \
                     (ZooKeeper's usual clientPort)"
                )))
            }
            Some(p) => match p.parse::<u64>() {
                Err(_) => return Err(bad(format!("the port of {bare:?} is not a number"))),
                Ok(n) if n == 0 || n > u64::from(u16::MAX) => {
                    return Err(bad(format!(
                        "the port of {bare:?} is out of range: a port is 1 to 65535"
                    )))
                }
                Ok(_) => {}
            },
        }
    }
    let chroot = chroot.filter(|c| *c != "/");
    if let Some(chroot) = chroot {
        validate_path(chroot).map_err(|e| bad(format!("bad chroot: {e}")))?;
    }
    Ok((hosts, chroot))
}

/// Checks that `path` is an absolute ZooKeeper node path that can hold a queue.
pub(crate) fn validate_path(path: &str) -> Result<()> {
    let reason = if path.is_empty() {
        Some("it is empty")
    } else if !path.starts_with('/') {
        Some("it must start with '/'")
    } else if path == "/" {
        Some("the root cannot be a lock directory")
    } else if path.ends_with('/') {
        Some("it must not end with '/'")
    } else if path.contains("//") {
        Some("it contains an empty segment (\"//\")")
    } else if path.contains('\0') {
        Some("it contains a NUL character")
    } else if path.split('/').any(|s| s == "." || s == "..") {
        Some("'.' and '..' segments are not allowed")
    } else if path.len() > 1024 {
        Some("it is longer than 1024 bytes")
    } else if path
        .chars()
        .any(|c| ('\u{1}'..='\u{1f}').contains(&c) || ('\u{7f}'..='\u{9f}').contains(&c))
    {
        Some("it contains a control character")
    } else if path.split('/').any(|s| s == "zookeeper") && path.starts_with("/zookeeper") {
        Some("/zookeeper is reserved by ZooKeeper")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidPath {
            path: path.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Who created a queue node: stored as the node's data so `status` can show it.
///
/// Stored as `key=value` lines (`id`, `host`, `pid`, `at` in Unix milliseconds). Data written
/// by other clients (Kazoo stores its identifier, Curator the client's IP address) is kept in
/// [`OwnerInfo::raw`] and shown as the id when it is printable. A leader's
/// [proclaimed](crate::Leadership::proclaim) value follows the lines after an empty line, as
/// a body follows the headers of a mail.
///
/// ```
/// use zkfence::OwnerInfo;
/// let owner = OwnerInfo::decode(b"id=booking-7\nhost=web-3\npid=4242\n");
/// assert_eq!(owner.id.as_deref(), Some("booking-7"));
/// assert_eq!(owner.to_string(), "booking-7 (web-3, pid 4242)");
/// let leader = OwnerInfo::decode(b"id=node-a\n\nhttp://10.0.0.7:8080");
/// assert_eq!(leader.proclaimed.as_deref(), Some(&b"http://10.0.0.7:8080"[..]));
/// // Another client's data: Kazoo stores its identifier.
/// assert_eq!(OwnerInfo::decode(b"worker-1").id.as_deref(), Some("worker-1"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerInfo {
    /// The contender's id (`--id` in the CLI, the candidate id in an election).
    pub id: Option<String>,
    /// Host name of the owning process.
    pub host: Option<String>,
    /// Process id of the owning process.
    pub pid: Option<u32>,
    /// When the node was created, in Unix milliseconds, by the owner's clock.
    pub enqueued_at_ms: Option<u64>,
    /// The number of permits a semaphore holder was created with ([`Semaphore`]'s limit),
    /// so that every participant sees it and a different limit is refused. `None` for locks
    /// and for other clients' nodes (Curator records none).
    ///
    /// [`Semaphore`]: crate::Semaphore
    pub permits: Option<usize>,
    /// The value a leader advertises, set by [`Leadership::proclaim`]; `None` until the
    /// first proclaim (and for other clients' nodes). Bytes, as proclaimed;
    /// [`proclaimed_text`](Self::proclaimed_text) reads them as text.
    ///
    /// [`Leadership::proclaim`]: crate::Leadership::proclaim
    pub proclaimed: Option<Vec<u8>>,
    /// The holder takes revocation requests ([`Lock::revocable`]; the CLI's `exec
    /// --revocable`): `zkfence revoke` asks only such holders unless forced. False for
    /// other clients' nodes, whose data does not say (a Curator holder may be revocable).
    ///
    /// [`Lock::revocable`]: crate::Lock::revocable
    pub revocable: bool,
    /// The node's raw data.
    pub raw: Vec<u8>,
}

/// The data that asks a lock holder to let go (Curator's `LockInternals.REVOKE_MESSAGE`);
/// it overwrites the holder's owner data. A zkfence holder's owner data is kept after it, on
/// the lines after [`REVOKE_REQUEST_THEN_OWNER`]: a zkfence holder takes either form, a
/// Curator holder only the bare one.
pub(crate) const REVOKE_REQUEST: &[u8] = b"__REVOKE__";

/// A revocation request followed by the holder's owner data, kept readable.
pub(crate) const REVOKE_REQUEST_THEN_OWNER: &[u8] = b"__REVOKE__\n";

/// True if `data` asks its holder to let go, in either form.
pub(crate) fn is_revoke_request(data: &[u8]) -> bool {
    data == REVOKE_REQUEST || data.starts_with(REVOKE_REQUEST_THEN_OWNER)
}

impl OwnerInfo {
    /// The [`proclaimed`](Self::proclaimed) value as text, as the CLI's `zkfence leader`
    /// prints it: invalid UTF-8 replaced by `U+FFFD`.
    ///
    /// ```
    /// use zkfence::OwnerInfo;
    /// let leader = OwnerInfo::decode(b"id=node-a\n\nhttp://10.0.0.7:8080");
    /// assert_eq!(leader.proclaimed_text().as_deref(), Some("http://10.0.0.7:8080"));
    /// ```
    pub fn proclaimed_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.proclaimed.as_deref().map(String::from_utf8_lossy)
    }

    /// Whether someone asked this holder to let go ([`Session::revoke`]). A zkfence
    /// holder's owner stays readable after the request; Curator's `Revoker` overwrites it,
    /// and then `id`, `host` and `pid` are unknown.
    ///
    /// [`Session::revoke`]: crate::Session::revoke
    ///
    /// ```
    /// use zkfence::OwnerInfo;
    /// let asked = OwnerInfo::decode(b"__REVOKE__\nid=backup\nhost=web-3\npid=7\nrevocable=1\n");
    /// assert!(asked.revocation_requested());
    /// assert_eq!(asked.id.as_deref(), Some("backup"));
    /// assert_eq!(asked.to_string(), "backup (web-3, pid 7; revocation requested)");
    /// // As Curator's Revoker writes it: the owner is gone.
    /// let overwritten = OwnerInfo::decode(b"__REVOKE__");
    /// assert!(overwritten.revocation_requested());
    /// assert_eq!(overwritten.to_string(), "? (revocation requested)");
    /// ```
    pub fn revocation_requested(&self) -> bool {
        is_revoke_request(&self.raw)
    }

    /// Owner data for this process with the given id.
    #[cfg(test)]
    pub(crate) fn for_this_process(id: Option<&str>) -> OwnerInfo {
        OwnerInfo {
            id: id.map(str::to_string),
            host: this_host().map(str::to_string),
            pid: Some(std::process::id()),
            enqueued_at_ms: now_ms(),
            permits: None,
            proclaimed: None,
            revocable: false,
            raw: vec![],
        }
    }

    /// The node data of this process's contender with the given id (and a semaphore's
    /// limit), stamped now: the owner of this process (its host, pid and the time) encoded
    /// straight into one buffer, as it is on every enqueue (the tests' `for_this_process`
    /// builds the same owner as a value).
    pub(crate) fn encode_for_this_process(
        id: Option<&str>,
        permits: Option<usize>,
        revocable: bool,
    ) -> Vec<u8> {
        // Every enqueue stamps its node: the lines that never change in a process are
        // written once, only the id, the time and the limit on each call.
        static HOST_AND_PID: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let host_and_pid = HOST_AND_PID
            .get_or_init(|| encode_lines(None, this_host(), Some(std::process::id()), None, None));
        let mut out = Vec::with_capacity(host_and_pid.len() + id.map_or(0, str::len) + 48);
        if let Some(id) = id {
            push_line(&mut out, "id=", id);
        }
        out.extend_from_slice(host_and_pid);
        if let Some(at) = now_ms() {
            push_number_line(&mut out, "at=", at);
        }
        if let Some(permits) = permits {
            push_number_line(&mut out, "permits=", permits as u64);
        }
        if revocable {
            out.extend_from_slice(b"revocable=1\n");
        }
        out
    }

    /// `data` (a node's owner lines) with `value` as its proclaimed value instead of the
    /// one it had.
    pub(crate) fn with_proclaimed(data: &[u8], value: &[u8]) -> Vec<u8> {
        let (lines, _) = split_proclaimed(data);
        let mut out = lines.to_vec();
        if !out.is_empty() && !out.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(value);
        out
    }

    /// Serialises to the node data format.
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        encode_lines(
            self.id.as_deref(),
            self.host.as_deref(),
            self.pid,
            self.enqueued_at_ms,
            self.permits,
        )
    }

    /// Parses node data written by us or by another client.
    pub fn decode(data: &[u8]) -> OwnerInfo {
        let mut info = OwnerInfo {
            raw: data.to_vec(),
            ..OwnerInfo::default()
        };
        if data == REVOKE_REQUEST {
            return info; // no owner left to read: see `revocation_requested`
        }
        // A request in front of a zkfence holder's owner: the owner is read after it.
        let data = data.strip_prefix(REVOKE_REQUEST_THEN_OWNER).unwrap_or(data);
        let (lines, proclaimed) = split_proclaimed(data);
        info.proclaimed = proclaimed.map(<[u8]>::to_vec);
        let Ok(text) = std::str::from_utf8(lines) else {
            return info;
        };
        let mut ours = false;
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                ours = true;
                match k {
                    "id" => info.id = Some(v.to_string()),
                    "host" => info.host = Some(v.to_string()),
                    "pid" => info.pid = v.parse().ok(),
                    "at" => info.enqueued_at_ms = v.parse().ok(),
                    "permits" => info.permits = v.parse().ok(),
                    "revocable" => info.revocable = v == "1",
                    _ => {}
                }
            }
        }
        // Another client's identifier, proclaimed over: the empty line's first newline is ours.
        let text = match info.proclaimed {
            Some(_) => text.strip_suffix('\n').unwrap_or(text),
            None => text,
        };
        if !ours && !text.is_empty() && !text.chars().any(char::is_control) {
            info.id = Some(text.to_string());
        }
        info
    }
}

/// This machine's host name, read once per process.
fn this_host() -> Option<&'static str> {
    static HOST: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|h| !h.is_empty())
    })
    .as_deref()
}

fn now_ms() -> Option<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .ok()
}

/// The owner lines, one `key=value` per field, in one buffer.
fn encode_lines(
    id: Option<&str>,
    host: Option<&str>,
    pid: Option<u32>,
    at: Option<u64>,
    permits: Option<usize>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + id.map_or(0, str::len) + host.map_or(0, str::len));
    if let Some(id) = id {
        push_line(&mut out, "id=", id);
    }
    if let Some(host) = host {
        push_line(&mut out, "host=", host);
    }
    if let Some(pid) = pid {
        push_number_line(&mut out, "pid=", u64::from(pid));
    }
    if let Some(at) = at {
        push_number_line(&mut out, "at=", at);
    }
    if let Some(permits) = permits {
        push_number_line(&mut out, "permits=", permits as u64);
    }
    out
}

/// One `key=value` line; a line break inside the value would start another, so it becomes a
/// space.
fn push_line(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    out.extend(
        value
            .bytes()
            .map(|b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
    );
    out.push(b'\n');
}

/// One `key=number` line, in decimal, without the formatting machinery (it runs on every
/// enqueue).
fn push_number_line(out: &mut Vec<u8>, key: &str, mut number: u64) {
    out.extend_from_slice(key.as_bytes());
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (number % 10) as u8;
        number /= 10;
        if number == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.push(b'\n');
}

/// Splits node data into the owner lines and the proclaimed value after the first empty line.
fn split_proclaimed(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    if data.starts_with(b"\n") {
        return (&[], Some(&data[1..]));
    }
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..=at], Some(&data[at + 2..])),
        None => (data, None),
    }
}

impl fmt::Display for OwnerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.id.as_deref().unwrap_or("?");
        write!(f, "{id}")?;
        let place = match (&self.host, self.pid) {
            (Some(h), Some(p)) => Some(format!("{h}, pid {p}")),
            (Some(h), None) => Some(h.clone()),
            (None, Some(p)) => Some(format!("pid {p}")),
            (None, None) => None,
        };
        match (place, self.revocation_requested()) {
            (Some(place), true) => write!(f, " ({place}; revocation requested)"),
            (None, true) => write!(f, " (revocation requested)"),
            (Some(place), false) => write!(f, " ({place})"),
            (None, false) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences() {
        assert_eq!(sequence_of("_c_abc-lock-0000000042"), Some(42));
        assert_eq!(
            sequence_of("0123456789abcdef0123456789abcdef__lock__0000000007"),
            Some(7)
        );
        assert_eq!(sequence_of("x-lock--000000005"), Some(-5));
        assert_eq!(sequence_of("lock-2147483647"), Some(i32::MAX));
        // Past the wrap: eleven characters after a known tag.
        assert_eq!(sequence_of("_c_u-lock--2147483648"), Some(i32::MIN));
        assert_eq!(sequence_of("_c_u-lock--2147483647"), Some(i32::MIN + 1));
        assert_eq!(sequence_of("abc__lock__-2147483648"), Some(i32::MIN));
        assert_eq!(
            sequence_of("_c_u-__READ__-1000000000"),
            Some(-1_000_000_000)
        );
        // A positive ten-digit sequence after Curator's "-lock-" is not a negative one.
        assert_eq!(sequence_of("_c_u-lock-1000000000"), Some(1_000_000_000));
        // Not what %010d writes.
        assert_eq!(sequence_of("_c_u-lock-000000001"), None);
        assert_eq!(sequence_of("_c_u-lock--21474836480"), None);
        assert_eq!(sequence_of("notes"), None);
        assert_eq!(sequence_of("000000001"), None);
        assert_eq!(sequence_of("abc-lock-00000000x1"), None);
    }

    #[test]
    fn paths_of_created_nodes_are_named_as_zookeeper_names_them() {
        for sequence in [
            0,
            7,
            42,
            1_000_000_000,
            i32::MAX,
            -1,
            -5,
            -1_000_000_000,
            i32::MIN,
        ] {
            let path = with_sequence("/a/_c_u-lock-", sequence);
            // What ZooKeeper's `String.format("%010d", counter)` writes, and what the
            // client library's `CreateSequence` displays.
            assert_eq!(path, format!("/a/_c_u-lock-{sequence:010}"));
            assert_eq!(sequence_of(&path), Some(sequence), "{path}");
        }
    }

    #[test]
    fn mixed_formats_order_by_sequence() {
        let q = queue_order(vec![
            "abc__lock__0000000003".into(),
            "_c_u-lock-0000000001".into(),
            "junk".into(),
            "foreign-0000000002".into(),
        ]);
        assert_eq!(
            names(&q),
            [
                "_c_u-lock-0000000001",
                "foreign-0000000002",
                "abc__lock__0000000003"
            ]
        );
    }

    fn names(queue: &[(i32, String)]) -> Vec<&str> {
        queue.iter().map(|(_, n)| n.as_str()).collect()
    }

    #[test]
    fn queue_order_survives_the_wrap() {
        // Contenders named as ZooKeeper names them just before and after the counter wraps,
        // listed in no particular order.
        let q = queue_order(vec![
            "_c_d-lock--2147483647".into(),
            "_c_b-lock-2147483647".into(),
            "_c_c-lock--2147483648".into(),
            "_c_a-lock-2147483646".into(),
            "ef__lock__-2147483646".into(),
        ]);
        assert_eq!(
            names(&q),
            [
                "_c_a-lock-2147483646",
                "_c_b-lock-2147483647",
                "_c_c-lock--2147483648",
                "_c_d-lock--2147483647",
                "ef__lock__-2147483646"
            ]
        );
        // Far from the wrap, plain numeric order.
        let q = queue_order(vec![
            "_c_b-lock-0000000010".into(),
            "_c_a-lock-0000000009".into(),
        ]);
        assert_eq!(names(&q), ["_c_a-lock-0000000009", "_c_b-lock-0000000010"]);
    }

    #[test]
    fn formats_match_peers() {
        let u = uuid::Uuid::nil();
        assert_eq!(
            NodeFormat::Curator.prefix(&u, Kind::Lock),
            "_c_00000000-0000-0000-0000-000000000000-lock-"
        );
        assert_eq!(
            NodeFormat::Kazoo.prefix(&u, Kind::Lock),
            "00000000000000000000000000000000__lock__"
        );
        for kind in [
            Kind::Lock,
            Kind::Read,
            Kind::Write,
            Kind::Lease { permits: 2 },
        ] {
            for f in [NodeFormat::Curator, NodeFormat::Kazoo] {
                let prefix = f.prefix(&u, kind);
                assert!(prefix.starts_with(&f.marker(&u)));
                assert_eq!(is_shared(&prefix), kind == Kind::Read);
                // Every name we write says where its sequence starts.
                assert_eq!(sequence_of(&format!("{prefix}-2147483648")), Some(i32::MIN));
            }
        }
    }

    #[test]
    fn paths() {
        for bad in [
            "",
            "locks",
            "/",
            "/a/",
            "//a",
            "/a//b",
            "/a\0b",
            "/a/../b",
            "/zookeeper/x",
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(validate_path(&format!("/{}", "a".repeat(1100))).is_err());
        for good in ["/a", "/locks/seat-42", "/zookeeperish"] {
            validate_path(good).unwrap();
        }
    }

    #[test]
    fn connect_strings() {
        assert_eq!(
            split_connect_string("a:1,b:2/app").unwrap(),
            ("a:1,b:2", Some("/app"))
        );
        assert_eq!(split_connect_string("a:1/").unwrap(), ("a:1", None));
        assert_eq!(
            split_connect_string("[::1]:2181").unwrap(),
            ("[::1]:2181", None)
        );
        for bad in ["a", "a:1,b", "a:x", ",a:1", "a:1//x", "/app"] {
            assert!(split_connect_string(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn owner_round_trip() {
        let o = OwnerInfo {
            id: Some("node-a".into()),
            host: Some("h".into()),
            pid: Some(7),
            enqueued_at_ms: Some(5),
            permits: Some(3),
            proclaimed: None,
            revocable: false,
            raw: vec![],
        };
        let d = OwnerInfo::decode(&o.encode());
        assert_eq!(
            (d.id, d.host, d.pid, d.enqueued_at_ms, d.permits),
            (o.id, o.host, o.pid, o.enqueued_at_ms, o.permits)
        );
        assert_eq!(
            OwnerInfo::decode(b"kazoo-ident").id.as_deref(),
            Some("kazoo-ident")
        );
    }

    #[test]
    fn the_stamp_of_an_enqueue_reads_back_as_this_process() {
        let before = now_ms().unwrap();
        let d = OwnerInfo::decode(&OwnerInfo::encode_for_this_process(
            Some("id\nwith a break"),
            Some(1_234_567_890),
            true,
        ));
        assert_eq!(d.id.as_deref(), Some("id with a break"));
        assert_eq!(d.host.as_deref(), this_host());
        assert_eq!(d.pid, Some(std::process::id()));
        assert_eq!(d.permits, Some(1_234_567_890));
        assert!(d.revocable);
        let at = d.enqueued_at_ms.expect("stamped");
        assert!((before..=now_ms().unwrap()).contains(&at), "{at}");
        let bare = OwnerInfo::decode(&OwnerInfo::encode_for_this_process(None, Some(0), false));
        assert_eq!(
            (bare.id, bare.permits, bare.revocable),
            (None, Some(0), false)
        );
    }

    #[test]
    fn proclaimed_values_replace_each_other_and_keep_the_owner_lines() {
        let lines = OwnerInfo::for_this_process(Some("node-a")).encode();
        let once = OwnerInfo::with_proclaimed(&lines, b"v1");
        // Binary, with empty lines of its own: everything after the first empty line.
        let twice = OwnerInfo::with_proclaimed(&once, b"\n\xff\n\nv2");
        let d = OwnerInfo::decode(&twice);
        assert_eq!(d.id.as_deref(), Some("node-a"));
        assert_eq!(d.pid, Some(std::process::id()));
        assert_eq!(d.proclaimed.as_deref(), Some(&b"\n\xff\n\nv2"[..]));
        assert_eq!(OwnerInfo::decode(&lines).proclaimed, None);
        // Another client's data without a newline, and no data at all.
        let kazoo = OwnerInfo::decode(&OwnerInfo::with_proclaimed(b"ident", b"v"));
        assert_eq!(
            (kazoo.id.as_deref(), kazoo.proclaimed.as_deref()),
            (Some("ident"), Some(&b"v"[..]))
        );
        let empty = OwnerInfo::decode(&OwnerInfo::with_proclaimed(b"", b"v"));
        assert_eq!(
            (empty.id, empty.proclaimed.as_deref()),
            (None, Some(&b"v"[..]))
        );
    }
}
