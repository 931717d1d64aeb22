//! A long queue behind one holder, shared by the herd and scale scenarios.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use zkfence::{Session, SessionMetrics};

use super::join_all_ok;
use crate::server::{ids_of_sessions, rss_bytes, rss_trimmed, total_metrics, touch, Bench};
use crate::Result;

/// What a queue of `waiters` behind one holder did.
pub struct QueueRun {
    pub waiters: usize,
    /// From the first acquire call until every waiter watches its predecessor.
    pub enqueue: Duration,
    /// getChildren the waiters' sessions sent while enqueueing (the library's counter).
    pub enqueue_listings: u64,
    /// From the holder's release until the last waiter released.
    pub drain: Duration,
    /// The library's own counters (client side): deltas over the drain, waiters' sessions.
    pub drained: Drained,
    /// Requests the server received from the waiters' sessions over the drain, less the
    /// bench's own reads and the lease-clock syncs.
    pub server_requests: u64,
    /// Watch notifications the server sent to the waiters' sessions over the drain.
    pub server_notifications: u64,
    /// The ZooKeeper JVMs' CPU time over the drain.
    pub server_cpu: Duration,
    pub rss_before: u64,
    pub rss_waiting: u64,
    /// After `malloc_trim`: without the free heap the allocator kept (listings' garbage).
    pub rss_waiting_trimmed: u64,
    /// Every waiter was granted, in the order of its token.
    pub fifo: bool,
}

/// Differences of [`SessionMetrics`] fields this bench reads.
pub struct Drained {
    pub listings: u64,
    pub watches: u64,
    pub wakeups: u64,
    pub keepalives: u64,
}

impl Drained {
    fn between(before: SessionMetrics, after: SessionMetrics) -> Drained {
        Drained {
            listings: after.listings - before.listings,
            watches: after.watches - before.watches,
            wakeups: after.wakeups - before.wakeups,
            keepalives: after.keepalives - before.keepalives,
        }
    }
}

pub async fn queue_run(bench: &Bench, name: &str, waiters: usize) -> Result<QueueRun> {
    let holder = bench.session().await?;
    let sessions = bench.sessions(bench.plan.waiter_sessions).await?;
    let ids = ids_of_sessions(&sessions);
    let dir = bench.path(name);
    let lease = holder.lock(&dir).acquire().await?;
    let order = Arc::new(Mutex::new(Vec::<u64>::with_capacity(waiters)));
    let enqueue_before = total_metrics(&sessions);
    let watches_before = enqueue_before.watches;
    // Both figures grow from a trimmed baseline: garbage of the earlier scenarios is not ours.
    let rss_before = rss_trimmed();

    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..waiters {
        let lock = sessions[i % sessions.len()].lock(&dir);
        let order = order.clone();
        tasks.spawn(async move {
            let lease = lock.acquire().await?;
            // One holder at a time, so push order is grant order.
            order.lock().unwrap().push(lease.token().get());
            lease.release().await?;
            Ok(())
        });
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while total_metrics(&sessions).watches - watches_before < waiters as u64 {
        if Instant::now() > deadline {
            return Err(format!("{name}: waiters did not all enqueue within 600 s").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The counter moves when a watch is sent; one more read per session is answered after
    // all of them (answers on one connection come in order).
    touch(sessions.iter().map(Session::client)).await?;
    let enqueue = start.elapsed();
    let enqueue_listings = total_metrics(&sessions).listings - enqueue_before.listings;
    let rss_waiting = rss_bytes();
    let rss_waiting_trimmed = rss_trimmed();

    let servers = bench.servers();
    let counted_before = bench.counted(&ids).await?;
    let before = total_metrics(&sessions);
    let server_cpu_before = servers.time();
    let drain_start = Instant::now();
    lease.release().await?;
    join_all_ok(tasks).await?;
    let drain = drain_start.elapsed();
    let server_cpu = servers.time().saturating_sub(server_cpu_before);
    let after = total_metrics(&sessions);
    // Every answer the server owes these sessions is out once this read is answered.
    touch(sessions.iter().map(Session::client)).await?;
    let counted = bench.counted(&ids).await?.since(counted_before);
    let drained = Drained::between(before, after);
    let order = order.lock().unwrap().clone();
    let fifo = order.len() == waiters && order.windows(2).all(|w| w[0] < w[1]);
    Ok(QueueRun {
        waiters,
        enqueue,
        enqueue_listings,
        drain,
        server_requests: counted
            .received
            .saturating_sub(sessions.len() as u64 + drained.keepalives),
        server_notifications: counted.notifications(),
        server_cpu,
        drained,
        rss_before,
        rss_waiting,
        rss_waiting_trimmed,
        fifo,
    })
}
