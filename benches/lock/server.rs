//! The ensemble, the measured sessions, and what is counted at the server: requests and
//! notifications per session (`cons`), watches per session (`wchc`), and the CPU time of the
//! client and of the ZooKeeper JVMs.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use zkfence::{Session, SessionMetrics, SessionOptions};
use zkfence_testcontainers::Ensemble;
use zookeeper_client as zkc;

use crate::stats::Samples;
use crate::{Plan, Result, SESSION_TIMEOUT};

pub struct Bench {
    pub zk: Ensemble,
    /// The one server every measured session talks to, so `cons` there sees all requests.
    pub node: usize,
    pub connect: String,
    /// A directory of this run's own.
    pub base: String,
    pub plan: Plan,
}

/// What the server counted for a set of sessions (`cons`), summed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counted {
    /// Requests received (`recved`).
    pub received: u64,
    /// Packets sent (`sent`): one answer per request, plus every watch notification.
    pub sent: u64,
}

impl Counted {
    pub fn since(self, before: Counted) -> Counted {
        Counted {
            received: self.received - before.received,
            sent: self.sent - before.sent,
        }
    }

    /// Watch notifications sent: every request is answered with exactly one packet, so what
    /// was sent beyond the answers were notifications.
    pub fn notifications(self) -> u64 {
        self.sent.saturating_sub(self.received)
    }
}

impl Bench {
    pub fn new(zk: Ensemble, node: usize, plan: Plan) -> Bench {
        Bench {
            connect: zk.node_connect_string(node),
            base: format!("/bench-{}", uuid::Uuid::new_v4().simple()),
            zk,
            node,
            plan,
        }
    }

    pub fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    pub async fn session(&self) -> Result<Session> {
        Ok(Session::connect(
            &self.connect,
            SessionOptions::new().session_timeout(SESSION_TIMEOUT),
        )
        .await?)
    }

    pub async fn sessions(&self, n: usize) -> Result<Vec<Session>> {
        futures::future::try_join_all((0..n).map(|_| self.session())).await
    }

    pub async fn raw(&self) -> Result<zkc::Client> {
        Ok(zkc::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(&self.connect)
            .await?)
    }

    pub async fn raws(&self, n: usize) -> Result<Vec<zkc::Client>> {
        futures::future::try_join_all((0..n).map(|_| self.raw())).await
    }

    /// What the server counted so far for each of `sessions` (`recved`, `sent` in `cons`).
    pub async fn counted_each(&self, sessions: &[i64]) -> Result<Vec<Counted>> {
        let mut connections = self.zk.connections(self.node).await?;
        // A server lists only the connections of the port asked: ask the TLS port too.
        if self.zk.tls().is_some() {
            connections.extend(self.zk.secure_connections(self.node).await?);
        }
        let by_session: HashMap<i64, Counted> = connections
            .iter()
            .filter_map(|c| {
                Some((
                    c.session_id?,
                    Counted {
                        received: c.received,
                        sent: c.sent,
                    },
                ))
            })
            .collect();
        sessions
            .iter()
            .map(|id| {
                by_session
                    .get(id)
                    .copied()
                    .ok_or_else(|| format!("session {id:#x} is not in `cons`").into())
            })
            .collect()
    }

    pub async fn counted(&self, sessions: &[i64]) -> Result<Counted> {
        let each = self.counted_each(sessions).await?;
        Ok(Counted {
            received: each.iter().map(|c| c.received).sum(),
            sent: each.iter().map(|c| c.sent).sum(),
        })
    }

    /// Whether the server holds a watch of `session` on `path` (`wchc`: watches by session).
    pub async fn watches(&self, session: i64, path: &str) -> Result<bool> {
        let text = self.zk.four_letter(self.node, "wchc").await?;
        // `0x<session>` lines, each followed by its watched paths, indented.
        let mut current = None;
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(hex) = trimmed.strip_prefix("0x") {
                current = u64::from_str_radix(hex, 16).ok().map(|id| id as i64);
            } else if current == Some(session) && trimmed == path {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The ZooKeeper JVMs' CPU clock.
    pub fn servers(&self) -> ServerCpu {
        ServerCpu {
            pids: (0..self.zk.len()).filter_map(|i| self.zk.pid(i)).collect(),
        }
    }

    /// Runs one arm's `work`, adding what the server counted for `sessions`, the CPU time
    /// `cpu` spent meanwhile, and the ZooKeeper JVMs' CPU time and the wall time of the arm.
    pub async fn measure(
        &self,
        sessions: &[i64],
        cpu: Cpu,
        work: impl Future<Output = Result<Samples>>,
    ) -> Result<Samples> {
        let servers = self.servers();
        let before = self.counted(sessions).await?;
        let cpu_before = cpu.time();
        let servers_before = servers.time();
        let wall = Instant::now();
        let mut samples = work.await?;
        samples.wall = wall.elapsed();
        samples.server_cpu = servers.time().saturating_sub(servers_before);
        samples.cpu = cpu.time().saturating_sub(cpu_before);
        let counted = self.counted(sessions).await?.since(before);
        samples.requests = counted.received;
        samples.notifications = counted.notifications();
        Ok(samples)
    }

    /// [`measure`](Self::measure) for an arm on zkfence sessions; also counts their lease-clock
    /// syncs.
    pub async fn measure_ours(
        &self,
        sessions: &[Session],
        work: impl Future<Output = Result<Samples>>,
    ) -> Result<Samples> {
        touch(sessions.iter().map(Session::client)).await?;
        let before = total_metrics(sessions).keepalives;
        let mut samples = self
            .measure(&ids_of_sessions(sessions), Cpu::Bench, work)
            .await?;
        samples.keepalives = total_metrics(sessions).keepalives - before;
        Ok(samples)
    }

    /// [`measure`](Self::measure) for an arm on plain `zookeeper-client` clients.
    pub async fn measure_raw(
        &self,
        clients: &[zkc::Client],
        work: impl Future<Output = Result<Samples>>,
    ) -> Result<Samples> {
        touch(clients).await?;
        self.measure(&ids_of_clients(clients), Cpu::Bench, work)
            .await
    }
}

/// Whose CPU time an arm spends.
#[derive(Debug, Clone, Copy)]
pub enum Cpu {
    /// This process (zkfence and zookeeper-client run here).
    Bench,
    /// The Kazoo driver.
    Child(u32),
}

impl Cpu {
    pub fn time(self) -> Duration {
        match self {
            Cpu::Bench => {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
                let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
                if rc != 0 {
                    return Duration::ZERO;
                }
                Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
            }
            Cpu::Child(pid) => process_cpu(pid),
        }
    }
}

/// The CPU clock of the ZooKeeper server processes.
#[derive(Debug, Clone)]
pub struct ServerCpu {
    pids: Vec<u32>,
}

impl ServerCpu {
    /// Their CPU time so far, summed.
    pub fn time(&self) -> Duration {
        self.pids.iter().map(|&pid| process_cpu(pid)).sum()
    }
}

/// utime + stime of process `pid` (fields 14 and 15 of /proc/PID/stat), which include its
/// threads, those that have ended too. Zero if it cannot be read.
fn process_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
    // SAFETY: sysconf has no preconditions.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / per_s)
}

/// CPU cores this process may use: the denominator of a CPU share.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One read on each client right before a `cons` snapshot: a session idle for a while (its
/// arm waited for the others) would otherwise send its heartbeat ping at the start of the
/// measured window.
pub async fn touch(
    clients: impl IntoIterator<Item = impl std::borrow::Borrow<zkc::Client>>,
) -> Result<()> {
    let clients: Vec<_> = clients.into_iter().collect();
    futures::future::try_join_all(clients.iter().map(|c| c.borrow().check_stat("/"))).await?;
    Ok(())
}

pub fn ids_of_sessions(sessions: &[Session]) -> Vec<i64> {
    sessions.iter().map(Session::id).collect()
}

pub fn ids_of_clients(clients: &[zkc::Client]) -> Vec<i64> {
    clients.iter().map(|c| c.session_id().0).collect()
}

pub fn total_metrics(sessions: &[Session]) -> SessionMetrics {
    let mut sum = SessionMetrics::default();
    for m in sessions.iter().map(Session::metrics) {
        sum.creates += m.creates;
        sum.deletes += m.deletes;
        sum.listings += m.listings;
        sum.watches += m.watches;
        sum.wakeups += m.wakeups;
        sum.keepalives += m.keepalives;
    }
    sum
}

/// This process's user and system CPU time and context switches so far (`getrusage`): how
/// the client's CPU splits between its own code and the kernel's (syscalls, wake-ups).
pub fn rusage() -> serde_json::Value {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable; RUSAGE_SELF is a constant.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return serde_json::Value::Null;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    serde_json::json!({
        "user_s": crate::stats::round3(secs(usage.ru_utime)),
        "system_s": crate::stats::round3(secs(usage.ru_stime)),
        "voluntary_context_switches": usage.ru_nvcsw,
        "involuntary_context_switches": usage.ru_nivcsw,
    })
}

/// RSS after returning the allocator's free memory to the system.
pub fn rss_trimmed() -> u64 {
    // SAFETY: malloc_trim has no preconditions; it only releases free heap pages.
    unsafe { libc::malloc_trim(0) };
    rss_bytes()
}

/// Bytes the allocator has handed out and not had back: the live heap, which the
/// allocator's free but resident pages do not move. `mallinfo2`'s `uordblks` (chunks in its
/// arenas) and `hblkhd` (chunks it mapped on their own: large buffers, e.g. a listing's).
pub fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 has no preconditions; it only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

/// Waits until the live heap stops moving (the same to 64 KiB over three readings 100 ms
/// apart, for at most 10 s): an earlier arm's sessions end in the background once dropped,
/// and what they free (a session's read buffer is 1 MiB after a deep listing) would
/// otherwise count against the next arm's waiters.
pub async fn settled_heap() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut last = heap_in_use();
    let mut steady = 0;
    while steady < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = heap_in_use();
        steady = if now.abs_diff(last) < 64 * 1024 {
            steady + 1
        } else {
            0
        };
        last = now;
    }
}

pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
