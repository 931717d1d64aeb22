//! A long queue behind one holder, shared by the herd and scale scenarios.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use zkfence::{Session, SessionMetrics};

use super::join_all_ok;
use crate::server::{
    heap_in_use, ids_of_sessions, rss_bytes, rss_trimmed, settled_heap, total_metrics, touch, Bench,
};
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
    /// The live heap ([`heap_in_use`]) before the first acquire and once every waiter waits.
    pub heap_before: u64,
    pub heap_waiting: u64,
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

/// `waiters` waiters of this process over `sessions` sessions behind one holder.
pub async fn queue_run(
    bench: &Bench,
    name: &str,
    waiters: usize,
    sessions: usize,
) -> Result<QueueRun> {
    let holder = bench.session().await?;
    let sessions = bench.sessions(sessions).await?;
    let ids = ids_of_sessions(&sessions);
    let dir = bench.path(name);
    let lease = holder.lock(&dir).acquire().await?;
    let order = Arc::new(Mutex::new(Vec::<u64>::with_capacity(waiters)));
    let enqueue_before = total_metrics(&sessions);
    let watches_before = enqueue_before.watches;
    // Both figures grow from a trimmed baseline: garbage of the earlier scenarios is not ours.
    settled_heap().await;
    let rss_before = rss_trimmed();
    let heap_before = heap_in_use();

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
    let heap_waiting = heap_in_use();
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
        heap_before,
        heap_waiting,
        fifo,
    })
}

/// What the protocol by hand keeps resident for a queue of waiters: [`by_hand_waiting`].
pub struct ByHandRss {
    pub rss_before: u64,
    pub rss_waiting: u64,
    pub rss_waiting_trimmed: u64,
    pub heap_before: u64,
    pub heap_waiting: u64,
}

/// [`ByHandRss`]'s growth divided among its waiters, in bytes.
pub struct ByHandPerWaiter {
    pub rss: f64,
    pub rss_trimmed: f64,
    pub heap: f64,
}

impl ByHandRss {
    pub fn per_waiter(&self, waiters: usize) -> ByHandPerWaiter {
        let per = |before: u64, after: u64| after.saturating_sub(before) as f64 / waiters as f64;
        ByHandPerWaiter {
            rss: per(self.rss_before, self.rss_waiting),
            rss_trimmed: per(self.rss_before, self.rss_waiting_trimmed),
            heap: per(self.heap_before, self.heap_waiting),
        }
    }
}

/// The floor of a long queue's memory with this client library: `waiters` waiters of this
/// process behind one holder, over as many plain `zookeeper-client` sessions as ours, each
/// a task that created its node (Curator-style names, as ours), found its predecessor in a
/// listing its session sent once after every create (shared by the session's waiters, then
/// dropped: the least a waiter can list) and waits on an `exists` watch on it. RSS is read
/// as in [`queue_run`], once every watch is set and the listings are gone; then the
/// sessions are closed, which ends the waiters' nodes. Nothing is drained: without a listing
/// kept, each deep waiter woken by its predecessor's deletion would list the queue again.
pub async fn by_hand_waiting(
    bench: &Bench,
    name: &str,
    waiters: usize,
    sessions: usize,
) -> Result<ByHandRss> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::watch;
    use zookeeper_client as zkc;

    type Listing = Option<Arc<Vec<(i32, String)>>>;
    let dir = bench.path(name);
    let holder = bench.raw().await?;
    crate::arms::mkdir(&holder, &dir).await?;
    let eph = crate::arms::ephemeral_sequential();
    holder
        .create(
            &format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4()),
            b"",
            &eph,
        )
        .await?;
    let clients: Vec<zkc::Client> =
        futures::future::try_join_all((0..sessions).map(|_| bench.raw())).await?;
    let listings: Vec<watch::Sender<Listing>> =
        clients.iter().map(|_| watch::channel(None).0).collect();
    let (created, watching) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    settled_heap().await;
    let rss_before = rss_trimmed();
    let heap_before = heap_in_use();

    let mut tasks: JoinSet<Result<()>> = JoinSet::new();
    for i in 0..waiters {
        let client = clients[i % clients.len()].clone();
        let mut listing = listings[i % clients.len()].subscribe();
        let (created, watching, dir) = (created.clone(), watching.clone(), dir.clone());
        tasks.spawn(async move {
            let eph = crate::arms::ephemeral_sequential();
            let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
            let (_, sequence) = client.create(&prefix, b"", &eph).await?;
            drop(prefix);
            let me = sequence.into_i64() as i32;
            created.fetch_add(1, Ordering::SeqCst);
            let predecessor = {
                let queue = listing
                    .wait_for(Option::is_some)
                    .await?
                    .clone()
                    .expect("listed");
                let at = queue.partition_point(|(s, _)| *s < me);
                format!(
                    "{dir}/{}",
                    queue[at.checked_sub(1).ok_or("nobody ahead")?].1
                )
            };
            drop(listing);
            let (stat, watcher) = client.check_and_watch_stat(&predecessor).await?;
            drop(predecessor);
            watching.fetch_add(1, Ordering::SeqCst);
            if stat.is_some() {
                watcher.changed().await;
            }
            Ok(())
        });
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    let wait_for = |count: &AtomicUsize| count.load(Ordering::SeqCst) < waiters;
    while wait_for(&created) {
        if Instant::now() > deadline {
            return Err(format!("{name}: by hand, the creates did not all finish in 600 s").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One listing per session, sent after all its waiters' creates were answered.
    for (client, listing) in clients.iter().zip(&listings) {
        let mut queue: Vec<(i32, String)> = client
            .list_children(&dir)
            .await?
            .into_iter()
            .filter_map(|n| Some((n.get(n.len().checked_sub(10)?..)?.parse().ok()?, n)))
            .collect();
        queue.sort_unstable();
        listing.send_replace(Some(Arc::new(queue)));
    }
    while wait_for(&watching) {
        if Instant::now() > deadline {
            return Err(format!("{name}: by hand, the watches were not all set in 600 s").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for listing in &listings {
        listing.send_replace(None);
    }
    // Every watch is set at the server once this read is answered on each session.
    touch(&clients).await?;
    let heap_waiting = heap_in_use();
    let rss_waiting = rss_bytes();
    let rss_waiting_trimmed = rss_trimmed();
    tasks.shutdown().await;
    for client in clients {
        drop(client);
    }
    drop(holder);
    Ok(ByHandRss {
        rss_before,
        rss_waiting,
        rss_waiting_trimmed,
        heap_before,
        heap_waiting,
    })
}
