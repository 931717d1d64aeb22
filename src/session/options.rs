//! [`SessionOptions`]: how a [`Session`] connects, authenticates, and keeps
//! its lease clock.

use std::time::Duration;

use zookeeper_client as zk;

use super::security;
#[cfg(doc)]
use {super::Session, super::SessionState, crate::Error};

/// Options for [`Session::connect`].
///
/// ```
/// use std::time::Duration;
/// let options = zkfence::SessionOptions::new()
///     .session_timeout(Duration::from_secs(10))
///     .connect_timeout(Duration::from_secs(3))
///     .auth("digest", b"app:secret");
/// // Secrets never show in logs.
/// assert!(!format!("{options:?}").contains("secret"));
/// ```
#[derive(Clone)]
pub struct SessionOptions {
    pub(super) session_timeout: Duration,
    pub(super) connect_timeout: Option<Duration>,
    pub(super) auth: Vec<(String, Vec<u8>)>,
    pub(super) acls: Option<Vec<zk::Acl>>,
    pub(super) lease_margin: Option<Duration>,
    pub(super) keepalive_interval: Option<Duration>,
    pub(super) server_tick_time: Option<Duration>,
    pub(super) via_observer_master: bool,
    pub(super) persistent_directories: bool,
    pub(super) reopen_after_expiry: bool,
    pub(super) reopen_backoff: (Duration, Duration),
    pub(super) metrics_path_labels: bool,
    pub(super) security: security::Security,
}

/// Everything but secrets: the credentials of `auth` show as their scheme only, so options
/// can be logged.
impl std::fmt::Debug for SessionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth: Vec<String> = self
            .auth
            .iter()
            .map(|(scheme, _)| format!("{scheme}:<redacted>"))
            .collect();
        f.debug_struct("SessionOptions")
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("auth", &auth)
            .field("acls", &self.acls)
            .field("lease_margin", &self.lease_margin)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("server_tick_time", &self.server_tick_time)
            .field("via_observer_master", &self.via_observer_master)
            .field("persistent_directories", &self.persistent_directories)
            .field("reopen_after_expiry", &self.reopen_after_expiry)
            .field("reopen_backoff", &self.reopen_backoff)
            .field("metrics_path_labels", &self.metrics_path_labels)
            .field("security", &self.security)
            .finish()
    }
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions::new()
    }
}

impl SessionOptions {
    /// Defaults: a 10 s session timeout, connect timeout equal to it, no auth, nodes open to
    /// everyone (`world:anyone` all permissions).
    pub fn new() -> Self {
        SessionOptions {
            session_timeout: Duration::from_secs(10),
            connect_timeout: None,
            auth: vec![],
            acls: None,
            lease_margin: None,
            keepalive_interval: None,
            server_tick_time: None,
            via_observer_master: false,
            persistent_directories: false,
            reopen_after_expiry: true,
            reopen_backoff: (Duration::from_millis(200), Duration::from_secs(30)),
            metrics_path_labels: false,
            security: security::Security::default(),
        }
    }

    /// The session timeout to negotiate: the lease's time to live. A crashed holder's lock is
    /// freed about this long after its last heartbeat. The server clamps it to
    /// `[2, 20] × tickTime`; [`Session::session_timeout`] tells the negotiated value.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`Session::connect`] may take before it fails with [`Error::ConnectFailed`].
    /// Defaults to the session timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Adds authentication, e.g. `auth("digest", b"user:password")`. Nodes created by the
    /// session then default to `auth` ACLs (creator has all permissions) unless
    /// [`acls`](Self::acls) says otherwise.
    pub fn auth(mut self, scheme: &str, credentials: &[u8]) -> Self {
        self.auth.push((scheme.to_string(), credentials.to_vec()));
        self
    }

    /// ACLs for every node the session creates (queue nodes and missing lock directories).
    pub fn acls(mut self, acls: Vec<zk::Acl>) -> Self {
        self.acls = Some(acls);
        self
    }

    /// The lease clock's slack: how much earlier than the leader's earliest possible expiry
    /// a lease is declared lost, on top of the rule's own allowance for the followers'
    /// report lag (see [`Session`]'s safety notes). Defaults to a twentieth of the session
    /// timeout; kept between 50 ms (or an eighth of the timeout, if that is less) and an
    /// eighth of it. Larger is safer against a stalled local timer, smaller keeps a lease
    /// longer when the ensemble goes quiet. The floor stays because at `T = 2 × tickTime`
    /// the margin is the rule's only allowance for the leader's ping loop running late.
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.lease_margin = Some(margin);
        self
    }

    /// Makes the directories zkfence creates (a lock's directory and its missing parents, a
    /// semaphore's, an election's) plain persistent nodes instead of container nodes.
    ///
    /// By default they are **containers**: the ZooKeeper leader removes one once it is empty
    /// (checking every `znode.container.checkIntervalMs`, a minute by default), so a lock per
    /// seat, order or job leaves nothing behind. Fencing tokens do not depend on the
    /// directory (they are creation zxids), so a re-created directory changes nothing for
    /// them. A lock idle through a container check costs two requests more on its next
    /// acquire (the create that finds no directory, and the directory's create).
    pub fn persistent_directories(mut self, persistent: bool) -> Self {
        self.persistent_directories = persistent;
        self
    }

    /// Labels the session's lock metrics (crate feature `metrics`) with the lock's path too,
    /// not only with its kind. Off by default: lock paths can be unbounded (a lock per seat,
    /// per order), and every label value is a time series the monitoring system keeps.
    /// Elections are always labelled by path (see the guide's [metrics table](crate::guide::production#metrics-and-alerts)). Without
    /// the `metrics` feature it does nothing.
    ///
    /// ```
    /// let options = zkfence::SessionOptions::new().metrics_path_labels(true);
    /// ```
    pub fn metrics_path_labels(mut self, on: bool) -> Self {
        self.metrics_path_labels = on;
        self
    }

    /// How often the lease clock's keepalive is sent when no write went to the ensemble
    /// meanwhile (reads never stand in for it). Defaults to a sixth of the session timeout,
    /// and is kept between a twentieth and a third of it.
    pub fn keepalive_interval(mut self, interval: Duration) -> Self {
        self.keepalive_interval = Some(interval);
        self
    }

    /// Declares the servers' `tickTime`, so that the lease clock may trust an answered `sync`
    /// (and keepalives need no transaction).
    ///
    /// By default the clock is renewed only by writes the leader **committed**, and a session
    /// that holds a lease or waits for one sends a keepalive that is a transaction changing
    /// nothing, every `T/6` without other writes (an idle session sends a `sync`). That holds
    /// whatever the servers' settings. A `sync` alone cannot prove as much: a leader cut off
    /// from its peers goes on answering syncs until it notices, up to about one `tickTime`
    /// after the others elected a new leader, which gave our session only `T` from its start.
    /// With the `tickTime` declared, a `sync` sent at `s` vouches for at most
    /// `s + T − 2 × tickTime − margin`, and the keepalive is a `sync` (no transaction).
    ///
    /// The declaration must not be lower than the servers' real `tickTime`: the clock is then
    /// only as safe as it. [`Session::connect`] refuses it with [`Error::UnsoundSettings`]
    /// when `2 × tickTime` leaves the clock less than two keepalive intervals (the
    /// negotiated timeout must be at least about `3.3 × tickTime` at the default margin and
    /// keepalive interval).
    ///
    /// ```
    /// use std::time::Duration;
    /// // Servers at tickTime=2000 (ZooKeeper's default); a 20 s session.
    /// let options = zkfence::SessionOptions::new()
    ///     .session_timeout(Duration::from_secs(20))
    ///     .server_tick_time(Duration::from_millis(2000));
    /// ```
    pub fn server_tick_time(mut self, tick_time: Duration) -> Self {
        self.server_tick_time = Some(tick_time);
        self
    }

    /// Declares that the session's servers may be **observers served through an
    /// `observerMasterPort`** (ZooKeeper 3.6+): such an observer follows a follower, not the
    /// leader, so the touches of its clients reach the leader through two ping hops (up to
    /// about one `tickTime`), not one (`tickTime/2`, which the lease clock's report lag of
    /// `T/4` covers since `T ≥ 2 × tickTime`). With it, the report lag is `T/2`: the clock
    /// vouches for less (a holder is told `Lost` about `0.3 T`, not `0.6 T`, after its last
    /// keepalive) and stays sound. Observers that follow the leader directly (no
    /// `observerMasterPort`) need nothing. Off by default.
    ///
    /// ```
    /// let options = zkfence::SessionOptions::new().via_observer_master(true);
    /// ```
    pub fn via_observer_master(mut self, on: bool) -> Self {
        self.via_observer_master = on;
        self
    }

    /// Whether the [`Session`] opens a new ZooKeeper session after the ensemble expired its
    /// old one (default: yes). Every lease and leadership of the old session is reported
    /// [`Lost`](crate::LeaseState::Lost)`(SessionExpired)` before the new one exists; new
    /// acquires and campaigns then use the new one. With `false` the `Session` stays
    /// [`Expired`](SessionState::Expired), as a plain ZooKeeper handle does.
    pub fn reopen_after_expiry(mut self, reopen: bool) -> Self {
        self.reopen_after_expiry = reopen;
        self
    }

    /// The pause between attempts to open a new session after an expiry, while the ensemble
    /// is unreachable: `initial`, doubling up to `max`, each with up to half of it added at
    /// random so that many clients do not come back in step. Defaults: 200 ms and 30 s.
    pub fn reopen_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.reopen_backoff = (initial, max.max(initial));
        self
    }
}
