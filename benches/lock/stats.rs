//! Samples of one arm, percentiles, medians over rounds and paired per-round ratios.

use std::time::Duration;

/// What one arm did in one round.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub latencies: Vec<Duration>,
    pub ops: usize,
    /// As the arm's own loop timed it (the Kazoo driver times itself).
    pub elapsed: Duration,
    /// Requests the server received from the arm's sessions, if counted.
    pub requests: u64,
    /// Watch notifications the server sent to the arm's sessions, if counted.
    pub notifications: u64,
    /// CPU time the client process spent meanwhile (this process, or the Kazoo driver).
    pub cpu: Duration,
    /// Lease-clock syncs zkfence's sessions sent meanwhile (counted in `requests`).
    pub keepalives: u64,
    /// CPU time the ZooKeeper JVMs spent meanwhile, all three summed.
    pub server_cpu: Duration,
    /// Wall time over which `cpu` and `server_cpu` were read.
    pub wall: Duration,
}

impl Samples {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    pub fn p50(&self) -> Duration {
        percentile(&self.latencies, 0.50)
    }
}

/// Every round of one arm.
#[derive(Debug, Clone, Default)]
pub struct Arm {
    pub rounds: Vec<Samples>,
}

impl Arm {
    pub fn push(&mut self, samples: Samples) {
        self.rounds.push(samples);
    }

    pub fn latencies(&self) -> Vec<Duration> {
        self.rounds
            .iter()
            .flat_map(|r| r.latencies.iter().copied())
            .collect()
    }

    /// Percentile of the latencies of all rounds pooled, in ms.
    pub fn pct_ms(&self, q: f64) -> f64 {
        ms(percentile(&self.latencies(), q))
    }

    /// Median over rounds of ops per second.
    pub fn rate(&self) -> f64 {
        spread(&self.rounds.iter().map(Samples::rate).collect::<Vec<_>>()).median
    }

    pub fn requests(&self) -> u64 {
        self.rounds.iter().map(|r| r.requests).sum()
    }

    /// Requests counted at the server per op, over all rounds.
    pub fn requests_per_op(&self) -> f64 {
        self.requests() as f64 / self.ops() as f64
    }

    /// Lease-clock syncs sent during the measured rounds.
    pub fn keepalives(&self) -> u64 {
        self.rounds.iter().map(|r| r.keepalives).sum()
    }

    /// Requests per op less the lease-clock syncs, which are per session and period, not per op.
    pub fn requests_per_op_without_keepalives(&self) -> f64 {
        self.requests().saturating_sub(self.keepalives()) as f64 / self.ops() as f64
    }

    /// Watch notifications the server sent per op, over all rounds.
    pub fn notifications_per_op(&self) -> f64 {
        let n: u64 = self.rounds.iter().map(|r| r.notifications).sum();
        n as f64 / self.ops() as f64
    }

    pub fn ops(&self) -> usize {
        self.rounds.iter().map(|r| r.ops).sum()
    }

    /// Client CPU time per op, in microseconds, over all rounds.
    pub fn cpu_us_per_op(&self) -> f64 {
        let cpu: Duration = self.rounds.iter().map(|r| r.cpu).sum();
        cpu.as_secs_f64() * 1e6 / self.ops() as f64
    }

    /// The ZooKeeper JVMs' CPU time over the arm's wall time, as a share of the machine's
    /// `cores` (1.0 = every core busy), over all rounds.
    pub fn server_cpu_share(&self, cores: usize) -> f64 {
        let cpu: Duration = self.rounds.iter().map(|r| r.server_cpu).sum();
        let wall: Duration = self.rounds.iter().map(|r| r.wall).sum();
        cpu.as_secs_f64() / wall.as_secs_f64() / cores.max(1) as f64
    }

    /// The client's CPU time over the arm's wall time, as a share of the machine's `cores`.
    pub fn client_cpu_share(&self, cores: usize) -> f64 {
        let cpu: Duration = self.rounds.iter().map(|r| r.cpu).sum();
        let wall: Duration = self.rounds.iter().map(|r| r.wall).sum();
        cpu.as_secs_f64() / wall.as_secs_f64() / cores.max(1) as f64
    }

    pub fn ran(&self) -> bool {
        !self.rounds.is_empty()
    }
}

/// Median, min and max of per-round ratios `f(a) / f(b)`.
pub fn paired(a: &Arm, b: &Arm, f: impl Fn(&Samples) -> f64) -> Spread {
    let ratios: Vec<f64> = a
        .rounds
        .iter()
        .zip(&b.rounds)
        .map(|(x, y)| f(x) / f(y))
        .collect();
    spread(&ratios)
}

pub fn percentile(samples: &[Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    // Nearest rank.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn spread(values: &[f64]) -> Spread {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return Spread {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        };
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Spread {
        median,
        min: v[0],
        max: v[n - 1],
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Rotates the arms so that each goes first equally often: the first arm of a round meets a
/// different disk state than the last.
pub fn order<T: Copy>(arms: &[T], round: usize) -> Vec<T> {
    let mut v = arms.to_vec();
    let n = v.len();
    v.rotate_left(round % n);
    v
}
