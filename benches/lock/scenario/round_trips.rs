//! Round trips before the grant, counted through a long link: a session that reaches the
//! bench's follower through a [`FaultProxy`] adding [`ONE_WAY`] in each direction waits
//! `k × 2 × ONE_WAY` longer for a grant that needs `k` round trips, whatever the number of
//! requests pipelined in each. Each delayed acquire is paired with the same acquire through
//! the same proxy without the delay, right after it, and the difference is divided by what
//! the delay added to one `exists` on the same connection (one round trip, measured in the
//! same pair): the servers' own time (a quorum write, an fsync: 10–20 ms here) and the
//! proxy's own are then not mistaken for round trips.

use std::future::Future;
use std::time::{Duration, Instant};

use zkfence::{Lock, Session, SessionOptions};
use zkfence_testcontainers::FaultProxy;
use zookeeper_client as zkc;

use crate::server::Bench;
use crate::stats::spread;
use crate::{Result, SESSION_TIMEOUT};

/// Added in each direction: a round trip grows by twice this.
pub const ONE_WAY: Duration = Duration::from_millis(40);

/// Timed acquires per delayed arm: the count is the median of their round trips.
pub const SAMPLES: usize = 5;

/// A zkfence session behind a delaying proxy (keep the proxy as long as the session).
pub struct Delayed {
    pub session: Session,
    proxy: FaultProxy,
}

/// A raw `zookeeper-client` client behind a delaying proxy: the peer's `Client::lock`
/// through the same long link as ours.
pub struct DelayedRaw {
    pub client: zkc::Client,
    proxy: FaultProxy,
}

impl Delayed {
    /// Connects (without the delay: the handshake is not measured).
    pub async fn connect(bench: &Bench) -> Result<Delayed> {
        let proxy = bench.zk.proxy_to(&[bench.node]).await?;
        let session = Session::connect(
            &proxy.connect_string(),
            SessionOptions::new().session_timeout(SESSION_TIMEOUT),
        )
        .await?;
        Ok(Delayed { session, proxy })
    }

    /// [`SAMPLES`] pairs of `acquire` (which times one acquire until its grant, and must
    /// leave nothing in flight when it returns): with the delay, then without it.
    pub async fn round_trips<F, Fut>(&self, acquire: F) -> Result<RoundTrips>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Duration>>,
    {
        paired_round_trips(&self.proxy, &self.session.client(), acquire).await
    }
}

impl DelayedRaw {
    /// Connects (without the delay: the handshake is not measured).
    pub async fn connect(bench: &Bench) -> Result<DelayedRaw> {
        let proxy = bench.zk.proxy_to(&[bench.node]).await?;
        let client = zkc::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(&proxy.connect_string())
            .await?;
        Ok(DelayedRaw { client, proxy })
    }

    /// As [`Delayed::round_trips`].
    pub async fn round_trips<F, Fut>(&self, acquire: F) -> Result<RoundTrips>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Duration>>,
    {
        paired_round_trips(&self.proxy, &self.client, acquire).await
    }
}

/// [`SAMPLES`] pairs of `acquire` through `proxy`, with the delay then without it, each pair
/// with what the delay added to one read on `client`'s connection.
async fn paired_round_trips<F, Fut>(
    proxy: &FaultProxy,
    client: &zkc::Client,
    mut acquire: F,
) -> Result<RoundTrips>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Duration>>,
{
    let (mut delayed, mut direct, mut probe) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        proxy.delay(ONE_WAY);
        delayed.push(acquire().await?);
        let one = one_round_trip(client).await?;
        proxy.delay(Duration::ZERO);
        direct.push(acquire().await?);
        probe.push(one.saturating_sub(one_round_trip(client).await?));
    }
    Ok(RoundTrips::new(&delayed, &direct, &probe))
}

/// One read on the connection (an `exists` of `/`), timed: one round trip.
async fn one_round_trip(client: &zkc::Client) -> Result<Duration> {
    let t = Instant::now();
    client.check_stat("/").await?;
    Ok(t.elapsed())
}

/// One acquire of `lock`, timed until the grant; the release after it is not timed.
pub async fn timed_acquire(lock: &Lock) -> Result<Duration> {
    let t = Instant::now();
    let lease = lock.acquire().await?;
    let elapsed = t.elapsed();
    lease.release().await?;
    Ok(elapsed)
}

/// One acquire with `zookeeper-client`'s `Client::lock`, timed until the grant; the release
/// after it is not timed.
pub async fn timed_peer_acquire(client: &zkc::Client, dir: &str) -> Result<Duration> {
    let t = Instant::now();
    let lock = crate::arms::peer_acquire(client, dir).await?;
    let elapsed = t.elapsed();
    crate::arms::peer_release(client, lock).await?;
    Ok(elapsed)
}

/// What a delayed arm measured: each acquire's added latency in added round trips.
pub struct RoundTrips {
    /// (Delayed − direct latency) over what the delay added to one `exists`, per pair
    /// (unrounded).
    pub ratios: Vec<f64>,
    pub delayed: Vec<Duration>,
    pub direct: Vec<Duration>,
    /// What the delay added to one `exists` (one round trip), per pair: the divisor, about
    /// `2 × ONE_WAY`.
    pub probe: Vec<Duration>,
}

impl RoundTrips {
    fn new(delayed: &[Duration], direct: &[Duration], probe: &[Duration]) -> RoundTrips {
        let ratios = delayed
            .iter()
            .zip(direct)
            .zip(probe)
            .map(|((d, b), p)| (d.as_secs_f64() - b.as_secs_f64()) / p.as_secs_f64())
            .collect();
        RoundTrips {
            ratios,
            delayed: delayed.to_vec(),
            direct: direct.to_vec(),
            probe: probe.to_vec(),
        }
    }

    /// Round trips before the grant: the median acquire's, rounded to whole round trips.
    ///
    /// Rounded down from a quarter above, not to the nearest: a request pipelined behind
    /// another can wait for the proxy's delayed acknowledgement of the first (Nagle's
    /// algorithm, which `zookeeper-client` leaves on: it never sets `TCP_NODELAY`), up to
    /// 40 ms, half of one added round trip; seen here as medians of 1.45–1.55 for the
    /// one-round-trip acquire, against 2.0 for the two of the sequential one.
    pub fn count(&self) -> f64 {
        (spread(&self.ratios).median + 0.25).floor()
    }

    /// The table cell: the count, and the unrounded median with the range.
    pub fn cell(&self) -> String {
        let s = spread(&self.ratios);
        format!(
            "{:.0} ({:.2}, {:.2}–{:.2} × one added round trip, {} pairs)",
            self.count(),
            s.median,
            s.min,
            s.max,
            self.ratios.len()
        )
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "round_trips": self.count(),
            "added_rtt_ms": (ONE_WAY * 2).as_millis() as u64,
            "added_latency_over_rtt": self.ratios.iter().map(|r| crate::stats::round3(*r)).collect::<Vec<_>>(),
            "delayed_ms": self.delayed.iter().map(|d| crate::stats::round3(crate::stats::ms(*d))).collect::<Vec<_>>(),
            "added_to_one_exists_ms": self.probe.iter().map(|d| crate::stats::round3(crate::stats::ms(*d))).collect::<Vec<_>>(),
            "direct_ms": self.direct.iter().map(|d| crate::stats::round3(crate::stats::ms(*d))).collect::<Vec<_>>(),
        })
    }
}
