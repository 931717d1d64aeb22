//! The holder knows first, also when the partition is between servers: a holder connected
//! to a follower that is cut off from its peers (its client link stays up, and it goes on
//! answering reads) is told `Lost` before the ensemble deletes its node, and so before the
//! waiter on the other side is granted — with and without reads on the holder's session, and
//! in the narrow case of a cut right after a keepalive was answered, with a small margin.
//! All instants are taken on this process's clock.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::*;
use tokio::sync::Mutex;
use tokio::time::Instant;
use zkfence::{LossReason, Session, SessionOptions};
use zkfence_testcontainers::Ensemble;

const T: Duration = Duration::from_secs(2);
/// A follower cut off from its leader answers reads for syncLimit × tickTime: 3 s here, longer
/// than the session timeout, as in the report that found the bug.
const SYNC_LIMIT: u32 = 15;

/// One ensemble with a proxy on every server-to-server link, for the whole test binary. Its
/// proxies run on a runtime of their own, which outlives each test's.
fn ensemble() -> &'static Ensemble {
    static ZK: OnceLock<Ensemble> = OnceLock::new();
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    ZK.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = RT.get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap()
            });
            rt.block_on(
                Ensemble::builder()
                    .nodes(3)
                    .tick_time(TICK)
                    .sync_limit(SYNC_LIMIT)
                    .peer_links(true)
                    .start(),
            )
            .expect("start an ensemble with peer links")
        })
        .join()
        .expect("ensemble start thread")
    })
}

/// The trials cut servers off: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

#[derive(Clone, Copy)]
enum Traffic {
    /// The holder's session lists the queue every 300 ms (a status loop).
    ReadLoop,
    /// Nothing but the lease clock's own keepalives.
    Quiet,
    /// Quiet, the cut made right after a keepalive was answered, with a small margin.
    CutAfterKeepalive,
}

struct Trial {
    lost_after_cut: Duration,
    deleted_after_cut: Duration,
    granted_after_cut: Duration,
}

async fn trial(zk: &Ensemble, traffic: Traffic, n: usize) -> Trial {
    let leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let follower = (0..zk.len()).find(|&i| i != leader).unwrap();
    let dir = unique_path(&format!("follower-cut-{n}"));
    let mut options = SessionOptions::new().session_timeout(T);
    if let Traffic::CutAfterKeepalive = traffic {
        options = options.lease_margin(T / 50);
    }
    let before_connect = Instant::now();
    let holder = Session::connect(&zk.node_connect_string(follower), options)
        .await
        .unwrap();
    let waiter = connect(&zk.node_connect_string(leader), T).await;
    let admin = connect(&zk.node_connect_string(leader), T).await;

    let lease = Arc::new(holder.lock(&dir).acquire().await.unwrap());
    let lock = waiter.lock(&dir);
    let granted = tokio::spawn(async move {
        let lease = lock.acquire().await;
        (Instant::now(), lease)
    });
    eventually(Duration::from_secs(5), "the waiter is queued", || async {
        children(&admin, &dir).await.len() == 2
    })
    .await;
    // The ensemble's side: when the holder's node is deleted (expiry, or the holder's own
    // delete once its clock lapsed), seen by a watch on the leader.
    let (_, node_watch) = admin
        .client()
        .check_and_watch_stat(lease.path())
        .await
        .unwrap();
    let deleted = tokio::spawn(async move {
        node_watch.changed().await;
        Instant::now()
    });
    let reads = match traffic {
        Traffic::ReadLoop => {
            let lock = holder.lock(&dir);
            Some(tokio::spawn(async move {
                loop {
                    let _ = lock.contenders().await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }))
        }
        Traffic::Quiet | Traffic::CutAfterKeepalive => None,
    };
    // The connect request alone vouches for the session's first T - slack (the leader
    // created it after we sent it). Test the steady state: a clock that keepalives renewed.
    eventually(
        Duration::from_secs(10),
        "the lease clock is renewed past what the connect vouched for",
        || async { holder.valid_until().is_some_and(|v| v > before_connect + T) },
    )
    .await;
    if let Traffic::CutAfterKeepalive = traffic {
        let before = holder.metrics().keepalives;
        eventually(
            Duration::from_secs(5),
            "a keepalive is answered",
            || async { holder.metrics().keepalives > before },
        )
        .await;
    }

    zk.isolate(follower);
    let cut = Instant::now();
    let watched = lease.clone();
    let lost = tokio::spawn(async move {
        let reason = watched.lost().await;
        (Instant::now(), reason)
    });
    let (lost_at, reason) = tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("the holder is told it lost")
        .unwrap();
    let (granted_at, new_lease) = tokio::time::timeout(Duration::from_secs(20), granted)
        .await
        .expect("the waiter is granted")
        .unwrap();
    let deleted_at = tokio::time::timeout(Duration::from_secs(5), deleted)
        .await
        .expect("the holder's node is deleted")
        .unwrap();
    if let Some(reads) = reads {
        reads.abort();
    }
    let new_lease = new_lease.expect("the waiter holds the lock");
    assert!(new_lease.token() > lease.token());
    assert_eq!(reason, LossReason::ClockLapsed, "trial {n}: {reason}");
    new_lease.release().await.unwrap();

    heal_and_rejoin(zk, follower).await;

    Trial {
        lost_after_cut: lost_at - cut,
        deleted_after_cut: deleted_at - cut,
        granted_after_cut: granted_at - cut,
    }
}

/// Heals every server link and waits until `follower` is back in the quorum (it syncs with
/// the leader again), so the next trial starts from a whole ensemble.
async fn heal_and_rejoin(zk: &Ensemble, follower: usize) {
    zk.heal_all_peers();
    zk.wait_serving(follower, Duration::from_secs(30))
        .await
        .expect("the follower rejoins");
    let rejoined = connect(&zk.node_connect_string(follower), T).await;
    eventually(
        Duration::from_secs(30),
        "the follower syncs again",
        || async {
            tokio::time::timeout(Duration::from_secs(2), rejoined.client().sync("/"))
                .await
                .is_ok_and(|r| r.is_ok())
        },
    )
    .await;
}

async fn trials(traffic: Traffic, count: usize, name: &str) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let zk = ensemble();
    let mut worst_gap = Duration::MAX;
    for n in 0..count {
        let t = trial(zk, traffic, n).await;
        eprintln!(
            "{name} trial {n}: lost {:?}, node deleted {:?}, waiter granted {:?} after the cut",
            t.lost_after_cut, t.deleted_after_cut, t.granted_after_cut
        );
        assert!(
            t.lost_after_cut < t.deleted_after_cut,
            "{name} trial {n}: the holder heard Lost {:?} after the cut, but its node was deleted at {:?}",
            t.lost_after_cut,
            t.deleted_after_cut
        );
        assert!(
            t.lost_after_cut < t.granted_after_cut,
            "{name} trial {n}: the waiter was granted {:?} after the cut, before the holder heard Lost",
            t.granted_after_cut
        );
        worst_gap = worst_gap.min(t.deleted_after_cut - t.lost_after_cut);
    }
    eprintln!("{name}: smallest gap between Lost and the deletion: {worst_gap:?}");
    // The rule leaves at least about 0.15 T between the two (a cut right after a keepalive is
    // the narrowest case); a clock that renews on reads, or has no margin, leaves none.
    assert!(
        worst_gap >= T / 10,
        "{name}: the holder knew only {worst_gap:?} before the ensemble acted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_cut_off_follower_with_a_read_loop_knows_first() {
    trials(Traffic::ReadLoop, 10, "read loop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_holder_on_a_cut_off_follower_knows_first() {
    trials(Traffic::Quiet, 10, "quiet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_right_after_a_keepalive_with_a_small_margin_still_lets_the_holder_know_first() {
    trials(Traffic::CutAfterKeepalive, 10, "cut after keepalive").await;
}

/// A session on a follower that has seen `held` taken, then cut off from its leader, and the
/// release of `held` on the leader: what a `try_acquire` on that follower must not get wrong.
struct ReleasedBehindCut {
    trier: Session,
    follower: usize,
    released: Instant,
}

async fn release_behind_a_cut(zk: &Ensemble, held: &str) -> ReleasedBehindCut {
    let leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let follower = (0..zk.len()).find(|&i| i != leader).unwrap();
    let holder = connect(&zk.node_connect_string(leader), T).await;
    let trier = connect(&zk.node_connect_string(follower), T).await;
    let lease = holder.lock(held).acquire().await.unwrap();
    // The follower has seen the holder's node.
    eventually(
        Duration::from_secs(5),
        "the follower lists the holder",
        || async { children(&trier, held).await.len() == 1 },
    )
    .await;
    zk.isolate(follower);
    lease.release().await.unwrap();
    ReleasedBehindCut {
        trier,
        follower,
        released: Instant::now(),
    }
}

/// Prints what `try_acquire` answered, heals the cut and fails if it said "taken"; returns
/// the lease if it was granted.
async fn never_reported_taken<L>(
    zk: &Ensemble,
    cut: &ReleasedBehindCut,
    what: &str,
    tried: zkfence::Result<Option<L>>,
) -> Option<L> {
    let outcome = match &tried {
        Ok(Some(_)) => "granted".to_string(),
        Ok(None) => "reported taken".to_string(),
        Err(e) => format!("failed: {e}"),
    };
    eprintln!(
        "{what} try_acquire {:?} after the release: {outcome}",
        cut.released.elapsed()
    );
    heal_and_rejoin(zk, cut.follower).await;
    assert!(
        !matches!(tried, Ok(None)),
        "{what}: a lock released before try_acquire was reported taken by a follower cut off from its leader"
    );
    tried.ok().flatten()
}

/// `try_acquire` reads the queue before it writes anything; a follower cut off from its
/// leader still answers that read (for `syncLimit × tickTime`) with what it last heard, which
/// can show a lock released before the call as still held. The answer "taken" must not come
/// from such a server: a lock free before the call is granted, or the call fails, but it is
/// never reported taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_on_a_cut_off_follower_never_reports_a_released_lock_taken() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let zk = ensemble();
    let dir = unique_path("try-stale-follower");
    let cut = release_behind_a_cut(zk, &dir).await;
    let tried = tokio::time::timeout(Duration::from_secs(30), cut.trier.lock(&dir).try_acquire())
        .await
        .expect("try_acquire answers");
    if let Some(lease) = never_reported_taken(zk, &cut, "a lock's", tried).await {
        lease.release().await.unwrap();
    }
}

/// The same for a multi-lock: its `try_acquire` also reads every queue before it writes
/// anything, and one path released before the call must not be reported taken by a follower
/// cut off from its leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_try_acquire_on_a_cut_off_follower_never_reports_a_released_lock_taken() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let zk = ensemble();
    let dirs = [
        unique_path("multi-try-stale-follower"),
        unique_path("multi-try-stale-follower"),
    ];
    let cut = release_behind_a_cut(zk, &dirs[1]).await;
    let paths = [dirs[0].as_str(), dirs[1].as_str()];
    let tried = tokio::time::timeout(
        Duration::from_secs(30),
        cut.trier.multi_lock(&paths).try_acquire(),
    )
    .await
    .expect("try_acquire answers");
    if let Some(lease) = never_reported_taken(zk, &cut, "a multi-lock's", tried).await {
        lease.release().await.unwrap();
    }
}

/// Something taken on the ZooKeeper leader's side (`take` from a session there, answering
/// with what it took and that taking's token) while `observer`'s server, a follower, is cut
/// off from it, and `ask` run from `observer` right after, answering with the token of who
/// it found holding; fails if it answered that nobody holds. The follower still answers
/// reads (for `syncLimit × tickTime`) with what it last heard, in which nobody holds; an
/// answer that waits for the leader comes after the heal. The observer's session may
/// expire while its server is cut off: an error is not a wrong answer.
async fn never_reported_empty<T, TFut, Taken, A, AFut>(what: &str, take: T, ask: A)
where
    T: FnOnce(Session) -> TFut,
    TFut: std::future::Future<Output = (Taken, u64)>,
    A: FnOnce(Session) -> AFut,
    AFut: std::future::Future<Output = zkfence::Result<Option<u64>>> + Send + 'static,
{
    let zk = ensemble();
    let leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let follower = (0..zk.len()).find(|&i| i != leader).unwrap();
    let candidate = connect(&zk.node_connect_string(leader), T).await;
    let observer = connect(&zk.node_connect_string(follower), T).await;
    zk.isolate(follower);
    let (taken, token) = take(candidate.clone()).await;
    let asked = Instant::now();
    let call = tokio::spawn(ask(observer));
    // Heal once the call has answered or the follower has stopped serving (no stale read can
    // come from it after that).
    eventually(
        Duration::from_secs(30),
        "the call answers or the follower stops serving",
        || async { call.is_finished() || !zk.serving(follower).await },
    )
    .await;
    heal_and_rejoin(zk, follower).await;
    let answer = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call answers once the cut has healed")
        .expect("the call's task");
    eprintln!("{what} answered {:?} after the call", asked.elapsed());
    drop(taken);
    candidate.close().await;
    match answer {
        Ok(Some(found)) => assert_eq!(found, token, "{what} found another holder"),
        Ok(None) => panic!("{what}: a follower cut off from its leader reported nobody holding"),
        Err(e) => eprintln!("{what} failed: {e}"),
    }
}

/// [`never_reported_empty`] for an election won before the call.
async fn never_reported_unled<A, AFut>(path: &str, what: &str, ask: A)
where
    A: FnOnce(Session) -> AFut + Send + 'static,
    AFut:
        std::future::Future<Output = zkfence::Result<Option<zkfence::LeaderInfo>>> + Send + 'static,
{
    let p = path.to_string();
    never_reported_empty(
        what,
        |candidate| async move {
            let leadership = candidate.election(&p).campaign("a").await.unwrap();
            let token = leadership.token().get();
            (leadership, token)
        },
        |observer| async move {
            let info = ask(observer).await?;
            if let Some(info) = &info {
                assert_eq!(info.id.as_deref(), Some("a"), "the leader's id");
            }
            Ok(info.map(|info| info.token.get()))
        },
    )
    .await;
}

/// `Election::leader` is the leader now: a follower cut off from the ZooKeeper leader must
/// not answer "nobody leads" for an election won before the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_on_a_cut_off_follower_never_misses_an_election_won_before_the_call() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let path = unique_path("leader-stale-follower");
    let p = path.clone();
    never_reported_unled(&path, "leader()", |observer| async move {
        observer.election(&p).leader().await
    })
    .await;
}

/// The first item of `Election::observe` is the leader now, as `leader` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_on_a_cut_off_follower_starts_with_an_election_won_before_the_call() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let path = unique_path("observe-stale-follower");
    let p = path.clone();
    never_reported_unled(&path, "observe()'s first item", |observer| async move {
        let mut changes = observer.election(&p).observe();
        changes.next().await.expect("the observer's first item")
    })
    .await;
}

/// `Lock::contenders` is the queue now: a follower cut off from the ZooKeeper leader must not
/// answer an empty queue for a lock taken before the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_on_a_cut_off_follower_never_miss_a_holder_from_before_the_call() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = unique_path("contenders-stale-follower");
    let (d, p) = (dir.clone(), dir.clone());
    never_reported_empty(
        "contenders()",
        |candidate| async move {
            let lease = candidate.lock(&d).acquire().await.unwrap();
            let token = lease.token().get();
            (lease, token)
        },
        |observer| async move {
            let queue = observer.lock(&p).contenders().await?;
            Ok(queue.first().map(|holder| holder.token.get()))
        },
    )
    .await;
}

/// The same for `Semaphore::holders`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_holders_on_a_cut_off_follower_never_miss_a_holder_from_before_the_call() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = unique_path("holders-stale-follower");
    let (d, p) = (dir.clone(), dir.clone());
    never_reported_empty(
        "holders()",
        |candidate| async move {
            let lease = candidate.semaphore(&d, 2).acquire().await.unwrap();
            let token = lease.token().get();
            (lease, token)
        },
        |observer| async move {
            let holders = observer.semaphore(&p, 2).holders().await?;
            Ok(holders.first().map(|holder| holder.token.get()))
        },
    )
    .await;
}
