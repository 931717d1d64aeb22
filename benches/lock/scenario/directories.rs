//! 7. Lock directories as containers: the seat-hold case at scale (one session acquiring and
//!    releasing many distinct locks under one parent, 64 at a time, and what is left under the
//!    parent once the server's container check has run), and the cost of a lock whose
//!    directory the server removed while it was idle.
//!
//! This scenario has an ensemble of its own, whose leader checks containers every
//! [`CONTAINER_CHECK`] instead of every 60 s: on the bench's main ensemble that would remove
//! the hot locks' directories in the instants they are empty between two cycles (about half
//! the time in a closed loop), and scenarios 1–6's request counts would then include
//! directories made again. The hot 64-lock arm run here, interleaved with the seat-hold,
//! shows that effect in its requests per cycle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::task::JoinSet;
use zkfence::Session;
use zookeeper_client as zkc;

use super::parallel::parallel_ours;
use super::round_trips::{timed_acquire, Delayed, ONE_WAY};
use super::{cycles_on_each, join_all_ok, timed_cycles};
use crate::arms::{floor_cycle_regrowing, fresh_floor_cycle, mkdir};
use crate::report::{Goal, Report, Row};
use crate::server::Bench;
use crate::stats::{ms, order, paired, round3, Arm, Samples};
use crate::{progress, Result};

/// How often this scenario's leader removes empty containers (`znode.container.checkIntervalMs`).
pub const CONTAINER_CHECK: Duration = Duration::from_millis(200);

/// `znode.container.maxPerMinute`: ZooKeeper paces container deletions to 10,000 a minute by
/// default, which would take 10 minutes to clear 100,000 seat directories. Above 60,000 the
/// pacing is 0 ms per deletion.
pub const CONTAINER_MAX_PER_MINUTE: u64 = 1_000_000;

/// A lock whose directory is likely gone (never seen by the session, or idle longer than the
/// session has seen the server keep an empty one): the directory's create, the create that
/// enqueues and getChildren, sent together, then the delete.
const REGROW_REQUESTS: f64 = 4.0;

/// Hot lock cycles measured right after each idle-directory cycle, on the directory it made.
const HOT_AFTER_IDLE: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq)]
enum SeatArm {
    Seats,
    Hot,
    /// The seat-hold done by hand with raw `zookeeper-client` calls: the protocol's floor.
    FloorSeats,
    /// 64 hot locks by hand, beside it: the floor's own seat/hot ratio.
    FloorHot,
}

/// Runs `cycle` once on each seat `parent/seat-{range}`, `tasks` at a time.
async fn each_seat<F, Fut>(
    parent: &str,
    range: std::ops::Range<usize>,
    tasks: usize,
    cycle: F,
) -> Result<Samples>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(range.start));
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let (cycle, parent, next, end) =
            (cycle.clone(), parent.to_string(), next.clone(), range.end);
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return Ok(());
                }
                cycle(format!("{parent}/seat-{i}")).await?;
            }
        });
    }
    join_all_ok(set).await?;
    Ok(Samples {
        ops: range.len(),
        elapsed: start.elapsed(),
        ..Default::default()
    })
}

/// Acquires and releases the locks `parent/seat-{range}`, each once, `tasks` at a time.
async fn seat_hold(
    session: &Session,
    parent: &str,
    range: std::ops::Range<usize>,
    tasks: usize,
) -> Result<Samples> {
    let session = session.clone();
    each_seat(parent, range, tasks, move |seat| {
        let lock = session.lock(&seat);
        async move {
            lock.acquire().await?.release().await?;
            Ok(())
        }
    })
    .await
}

/// [`seat_hold`] by hand: each seat `parent/seat-{range}` once, `tasks` at a time, with the
/// protocol's requests for a lock whose directory is missing (the directory's create, the
/// node's and the listing pipelined: [`fresh_floor_cycle`]), then the delete.
async fn floor_seat_hold(
    client: &zkc::Client,
    parent: &str,
    range: std::ops::Range<usize>,
    tasks: usize,
) -> Result<Samples> {
    let client = client.clone();
    each_seat(parent, range, tasks, move |seat| {
        let client = client.clone();
        async move { fresh_floor_cycle(&client, &seat).await }
    })
    .await
}

/// The hot arm ([`parallel_ours`]) by hand: the protocol's three requests on each of
/// `dirs`, made again when the container check removed one between two cycles.
async fn floor_hot(client: &zkc::Client, dirs: &[String], cycles: usize) -> Result<Samples> {
    cycles_on_each(dirs, cycles, |dir| {
        let (client, dir) = (client.clone(), dir.to_string());
        async move {
            for _ in 0..cycles {
                floor_cycle_regrowing(&client, &dir).await?;
            }
            Ok(())
        }
    })
    .await
}

/// Children of `path` as the connected server has them after a `sync` (0 if it is gone).
async fn children(client: &zkc::Client, path: &str) -> Result<usize> {
    let _ = client.sync(path).await;
    match client.list_children(path).await {
        Ok(c) => Ok(c.len()),
        Err(zkc::Error::NoNode) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Polls until `path` has no children or `deadline` passes; returns what is left and when
/// it was seen.
async fn wait_empty(
    client: &zkc::Client,
    path: &str,
    deadline: Duration,
) -> Result<(usize, Duration)> {
    let start = Instant::now();
    loop {
        let left = children(client, path).await?;
        if left == 0 || start.elapsed() >= deadline {
            return Ok((left, start.elapsed()));
        }
        // A poll interval, not a synchronisation: the condition is read again after it.
        tokio::time::sleep(CONTAINER_CHECK / 4).await;
    }
}

/// Polls until `path` no longer exists; errors after `deadline`.
async fn wait_gone(client: &zkc::Client, path: &str, deadline: Duration) -> Result<Duration> {
    let start = Instant::now();
    loop {
        let _ = client.sync(path).await;
        if client.check_stat(path).await?.is_none() {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= deadline {
            return Err(format!(
                "{path} still exists {:.1} s after its last release: is the container check on?",
                deadline.as_secs_f64()
            )
            .into());
        }
        tokio::time::sleep(CONTAINER_CHECK / 4).await;
    }
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    seats(bench, report).await?;
    idle(bench, report).await
}

async fn seats(bench: &Bench, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    let (n, tasks, rounds) = (plan.seat_locks, plan.parallel_tasks, plan.rounds.max(1));
    progress(format!(
        "7/8 seat-hold: {n} distinct locks under one parent, {tasks} at a time, in {rounds} \
         rounds interleaved with {tasks} hot locks (container check every {} ms)",
        CONTAINER_CHECK.as_millis()
    ));
    let session = bench.session().await?;
    let watcher = bench.raw().await?;
    // The parent is the application's (`/app/seats`), persistent: what is counted is what
    // the locks leave under it.
    let parent = bench.path("seats");
    mkdir(&watcher, &parent).await?;
    // The floor's seats under a parent of their own, so that ours are counted alone.
    let floor_parent = bench.path("floor-seats");
    mkdir(&watcher, &floor_parent).await?;
    let floor_client = bench.raw().await?;
    let hot_dirs: Vec<String> = (0..tasks)
        .map(|i| bench.path(&format!("hot/{i}")))
        .collect();
    let floor_hot_dirs: Vec<String> = (0..tasks)
        .map(|i| bench.path(&format!("floor-hot/{i}")))
        .collect();
    for dir in &floor_hot_dirs {
        mkdir(&floor_client, dir).await?;
    }
    let k = plan.parallel_cycles;
    // Warm-up, not measured: the hot directories, and the first seats' code paths.
    parallel_ours(&session, &hot_dirs, k).await?;
    let warm = tasks * 4;
    seat_hold(&session, &bench.path("seats-warmup"), 0..warm, tasks).await?;
    floor_hot(&floor_client, &floor_hot_dirs, k).await?;
    let floor_warmup = bench.path("floor-seats-warmup");
    mkdir(&floor_client, &floor_warmup).await?;
    floor_seat_hold(&floor_client, &floor_warmup, 0..warm, tasks).await?;

    let (mut seat_arm, mut hot_arm) = (Arm::default(), Arm::default());
    let (mut floor_seat_arm, mut floor_hot_arm) = (Arm::default(), Arm::default());
    let per_round = n.div_ceil(rounds);
    let mut last_release = Instant::now();
    let arms = [
        SeatArm::Seats,
        SeatArm::Hot,
        SeatArm::FloorSeats,
        SeatArm::FloorHot,
    ];
    for round in 0..rounds {
        let range = (round * per_round).min(n)..((round + 1) * per_round).min(n);
        for arm in order(&arms, round) {
            let one = std::slice::from_ref(&session);
            let raw = std::slice::from_ref(&floor_client);
            match arm {
                SeatArm::Seats => {
                    let work = seat_hold(&session, &parent, range.clone(), tasks);
                    seat_arm.push(bench.measure_ours(one, work).await?);
                    last_release = Instant::now();
                }
                SeatArm::Hot => {
                    let work = parallel_ours(&session, &hot_dirs, k);
                    hot_arm.push(bench.measure_ours(one, work).await?);
                }
                SeatArm::FloorSeats => {
                    let work = floor_seat_hold(&floor_client, &floor_parent, range.clone(), tasks);
                    floor_seat_arm.push(bench.measure_raw(raw, work).await?);
                }
                SeatArm::FloorHot => {
                    let work = floor_hot(&floor_client, &floor_hot_dirs, k);
                    floor_hot_arm.push(bench.measure_raw(raw, work).await?);
                }
            }
        }
    }
    // The leader removes the last seats' directories at its next check; the deletions are
    // unpaced (CONTAINER_MAX_PER_MINUTE), so seconds are plenty even for 100,000.
    let deadline = Duration::from_secs(20) + CONTAINER_CHECK * 10;
    let (left, _) = wait_empty(&watcher, &parent, deadline).await?;
    // From the last seat's release until the parent was seen empty (or the deadline); when
    // another arm ran after it, this includes its round.
    let emptied_after = last_release.elapsed();

    let vs_hot = paired(&seat_arm, &hot_arm, Samples::rate);
    let floor_vs_hot = paired(&floor_seat_arm, &floor_hot_arm, Samples::rate);
    let vs_floor = paired(&seat_arm, &floor_seat_arm, Samples::rate);
    let scenario3 = report
        .get("parallel")
        .and_then(|p| p["cycles_per_s"].as_f64());
    let scenario3_hot_rpc = report
        .get("parallel")
        .and_then(|p| p["requests_per_cycle"].as_f64());
    report.set(
        "seathold",
        json!({
            "locks": n,
            "tasks": tasks,
            "container_check_ms": CONTAINER_CHECK.as_millis() as u64,
            "cycles": seat_arm.ops(),
            "cycles_per_s": round3(seat_arm.rate()),
            "hot_cycles_per_s": round3(hot_arm.rate()),
            "ratio_vs_hot": vs_hot.json(),
            "floor_cycles_per_s": round3(floor_seat_arm.rate()),
            "floor_hot_cycles_per_s": round3(floor_hot_arm.rate()),
            "floor_ratio_vs_floor_hot": floor_vs_hot.json(),
            "ratio_vs_floor": vs_floor.json(),
            "floor_requests_per_cycle": round3(floor_seat_arm.requests_per_op()),
            "parallel_cycles_per_s": scenario3.map(round3),
            "ratio_vs_parallel": scenario3.map(|p| round3(seat_arm.rate() / p)),
            "requests_per_cycle": round3(seat_arm.requests_per_op()),
            "requests_per_cycle_without_keepalives": round3(seat_arm.requests_per_op_without_keepalives()),
            "hot_requests_per_cycle": round3(hot_arm.requests_per_op()),
            "hot_requests_per_cycle_without_keepalives": round3(hot_arm.requests_per_op_without_keepalives()),
            "parallel_requests_per_cycle": scenario3_hot_rpc.map(round3),
            "znodes_left": left,
            "emptied_after_s": round3(emptied_after.as_secs_f64()),
            "arms": {
                "seats": seat_arm.json(),
                "hot": hot_arm.json(),
                "floor_seats": floor_seat_arm.json(),
                "floor_hot": floor_hot_arm.json(),
            },
        }),
    );
    let scenario = format!("7 seat-hold ({n} locks under one parent, {tasks} at a time)");
    let parallel_cell = match scenario3 {
        Some(p) => format!(
            "; ours/scenario 3 {:.2} (unpaired, other ensemble)",
            seat_arm.rate() / p
        ),
        None => String::new(),
    };
    report.row(
        Row::new(&scenario, "cycles/s (median of rounds)")
            .ours(seat_arm.rate_cell())
            .floor(format!(
                "{} (hot 64 locks, interleaved){}",
                hot_arm.rate_cell(),
                scenario3.map_or(String::new(), |p| format!("; {p:.0} (scenario 3)"))
            ))
            .ratio(format!("ours/hot {}{parallel_cell}", vs_hot.cell()))
            .goal(Goal::at_least("seathold.ratio_vs_hot", vs_hot.median, 0.85)),
    );
    report.row(
        Row::new(
            &scenario,
            "… the protocol by hand (raw calls), seats and 64 hot locks",
        )
        .floor(format!(
            "{} seats, {} hot (cycles/s)",
            floor_seat_arm.rate_cell(),
            floor_hot_arm.rate_cell()
        ))
        .ratio(format!(
            "protocol seats/hot {}; ours/protocol seats {}",
            floor_vs_hot.cell(),
            vs_floor.cell()
        )),
    );
    report.row(
        Row::new(&scenario, "requests per cycle (at the server)")
            .ours(seat_arm.requests_cell())
            .floor(format!(
                "{:.0} (protocol: fresh directory; {} by hand); hot {} here, {} in scenario 3",
                REGROW_REQUESTS,
                floor_seat_arm.requests_cell(),
                hot_arm.requests_cell(),
                scenario3_hot_rpc.map_or("-".into(), |r| format!("{r:.2}"))
            )),
    );
    report.row(
        Row::new(
            &scenario,
            "znodes left under the parent after the container check",
        )
        .ours(left.to_string())
        .ratio(if left == 0 {
            format!(
                "empty {:.1} s after the last release",
                emptied_after.as_secs_f64()
            )
        } else {
            format!("still {left} after {:.1} s", emptied_after.as_secs_f64())
        })
        .goal(
            Goal::new("seathold.znodes_left", left as f64, "= 0", left == 0)
                .checked()
                .detail(format!(
                    "children of {parent} {:.1} s after the last of {n} releases, container \
                         check every {} ms",
                    emptied_after.as_secs_f64(),
                    CONTAINER_CHECK.as_millis()
                )),
        ),
    );
    Ok(())
}

async fn idle(bench: &Bench, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    let cycles = plan.idle_cycles;
    progress(format!(
        "7/8 idle directory: {cycles} acquire+release cycles, each after the container check \
         removed the lock's directory, each followed by {HOT_AFTER_IDLE} hot cycles"
    ));
    let session = bench.session().await?;
    let watcher = bench.raw().await?;
    // A persistent parent, so that only the lock's own directory comes and goes.
    let parent = bench.path("idle");
    mkdir(&watcher, &parent).await?;
    let dir = format!("{parent}/lock");
    let lock = session.lock(&dir);
    // Warm-up, not measured: makes the directory once (and its code paths), and lets the
    // session see one removal, which teaches it how soon the server removes an idle one (the
    // first acquire after it finds the directory missing: two more requests, one more round
    // trip).
    let first = Instant::now();
    lock.acquire().await?.release().await?;
    wait_gone(
        &watcher,
        &dir,
        Duration::from_secs(10) + CONTAINER_CHECK * 20,
    )
    .await?;
    // The session takes half of this idle time as when a directory is likely gone: every
    // measured cycle idles at least this long, so each one sends the directory's create in
    // front (a count that noise cannot move), however soon the check removes it.
    let idle_at_least = first.elapsed();
    lock.acquire().await?.release().await?;
    let mut last = Instant::now();

    // The protocol by hand on a directory of its own, beside ours in each round: the same
    // fresh cycle (directory, node and listing together) and the same hot cycles after it,
    // so the fresh/hot ratio the protocol itself has is measured under the same load.
    let floor = bench.raw().await?;
    let floor_dir = format!("{parent}/floor-lock");
    fresh_floor_cycle(&floor, &floor_dir).await?;

    let (mut regrow, mut hot_arm) = (Arm::default(), Arm::default());
    let (mut floor_fresh, mut floor_hot) = (Arm::default(), Arm::default());
    let mut waits = Vec::with_capacity(cycles);
    let one = std::slice::from_ref(&session);
    let removal_deadline = Duration::from_secs(10) + CONTAINER_CHECK * 20;
    for round in 0..cycles {
        // Wait until the server has removed both directories: the cycles measured next must
        // find them gone (polled on another connection, so not counted).
        waits.push(wait_gone(&watcher, &dir, removal_deadline).await?);
        wait_gone(&watcher, &floor_dir, removal_deadline).await?;
        tokio::time::sleep_until((last + idle_at_least).into()).await;
        for ours in order(&[true, false], round) {
            if ours {
                let work = timed_cycles(1, || async { Ok(lock.acquire().await?.release().await?) });
                regrow.push(bench.measure_ours(one, work).await?);
                let work = timed_cycles(HOT_AFTER_IDLE, || async {
                    Ok(lock.acquire().await?.release().await?)
                });
                hot_arm.push(bench.measure_ours(one, work).await?);
            } else {
                let clients = std::slice::from_ref(&floor);
                let work = timed_cycles(1, || fresh_floor_cycle(&floor, &floor_dir));
                floor_fresh.push(bench.measure_raw(clients, work).await?);
                let work =
                    timed_cycles(HOT_AFTER_IDLE, || floor_cycle_regrowing(&floor, &floor_dir));
                floor_hot.push(bench.measure_raw(clients, work).await?);
            }
        }
        // The session's last create in the directory was in the last hot cycle.
        last = Instant::now();
    }
    // Round trips before the grant of a fresh lock, through a delaying proxy: one whose
    // directory the container check removed after this session used it, and one the
    // session never saw (a new name under the parent, as each seat of the seat-hold).
    let delayed = Delayed::connect(bench).await?;
    let removed_path = format!("{parent}/delayed");
    let removed_lock = delayed.session.lock(&removed_path);
    // As above: one removal seen first, and every measured acquire idle at least as long.
    let first = Instant::now();
    removed_lock.acquire().await?.release().await?;
    wait_gone(&watcher, &removed_path, removal_deadline).await?;
    let idle_at_least = first.elapsed();
    removed_lock.acquire().await?.release().await?;
    let last = std::cell::Cell::new(Instant::now());
    let removed = delayed
        .round_trips(|| async {
            wait_gone(&watcher, &removed_path, removal_deadline).await?;
            tokio::time::sleep_until((last.get() + idle_at_least).into()).await;
            let took = timed_acquire(&removed_lock).await;
            last.set(Instant::now());
            took
        })
        .await?;
    let mut next = 0;
    let unseen = delayed
        .round_trips(|| {
            next += 1;
            let lock = delayed.session.lock(&format!("{parent}/unseen-{next}"));
            async move { timed_acquire(&lock).await }
        })
        .await?;
    drop(removed_lock);
    delayed.session.close().await;

    let rpc = regrow.requests_per_op_without_keepalives();
    let ratio = paired(&regrow, &hot_arm, |s| ms(s.p50()));
    let floor_ratio = paired(&floor_fresh, &floor_hot, |s| ms(s.p50()));
    let vs_floor = paired(&regrow, &floor_fresh, |s| ms(s.p50()));
    let uncontended = report
        .get("uncontended")
        .and_then(|u| u["requests_per_cycle_without_keepalives"].as_f64());
    let waited: Vec<f64> = waits.iter().map(|w| round3(w.as_secs_f64())).collect();
    report.set(
        "idle_directory",
        json!({
            "cycles": regrow.ops(),
            "container_check_ms": CONTAINER_CHECK.as_millis() as u64,
            "requests_per_cycle": round3(regrow.requests_per_op()),
            "requests_per_cycle_without_keepalives": round3(rpc),
            "p50_ms": round3(regrow.pct_ms(0.5)),
            "hot_p50_ms": round3(hot_arm.pct_ms(0.5)),
            "hot_requests_per_cycle": round3(hot_arm.requests_per_op_without_keepalives()),
            "uncontended_requests_per_cycle": uncontended.map(round3),
            "ratio_p50_vs_hot": ratio.json(),
            "floor_p50_ms": round3(floor_fresh.pct_ms(0.5)),
            "floor_hot_p50_ms": round3(floor_hot.pct_ms(0.5)),
            "floor_ratio_p50_vs_hot": floor_ratio.json(),
            "ratio_p50_vs_floor": vs_floor.json(),
            "waited_for_removal_s": waited,
            "round_trips_before_grant_removed": removed.json(),
            "round_trips_before_grant_unseen": unseen.json(),
            "arms": {
                "regrow": regrow.json(),
                "hot": hot_arm.json(),
                "floor_fresh": floor_fresh.json(),
                "floor_hot": floor_hot.json(),
            },
        }),
    );
    let scenario = "7 idle directory (removed by the container check)";
    report.row(
        Row::new(scenario, "requests per cycle (at the server)")
            .ours(regrow.requests_cell())
            .floor(format!(
                "{REGROW_REQUESTS:.0} (protocol); hot lock {} (scenario 1), {} here right after",
                uncontended.map_or("-".into(), |r| format!("{r:.2}")),
                hot_arm.requests_cell()
            ))
            .goal(
                Goal::equals(
                    "idle_directory.requests_per_cycle",
                    rpc,
                    REGROW_REQUESTS,
                    // Each measured cycle is one window: a lease-clock keepalive is subtracted,
                    // anything else would be an extra request of the library's.
                    0.005,
                )
                .checked()
                .detail(format!(
                    "{} requests at the server less {} lease-clock syncs over {} cycles, each \
                     after its directory was seen removed",
                    regrow.requests(),
                    regrow.keepalives(),
                    regrow.ops()
                )),
            ),
    );
    report.row(
        Row::new(scenario, "acquire+release p50 (ms)")
            .ours(format!("{:.2}", regrow.pct_ms(0.5)))
            .floor(format!("{:.2} (hot, right after)", hot_arm.pct_ms(0.5)))
            .ratio(format!("idle/hot p50 {}", ratio.cell()))
            .goal(Goal::at_most(
                "idle_directory.ratio_p50_vs_hot",
                ratio.median,
                1.4,
            )),
    );
    // What the protocol itself stops the ratio at: the same two cycles done by hand.
    report.row(
        Row::new(scenario, "fresh lock p50 (ms) against the protocol by hand")
            .ours(format!("{:.2}", regrow.pct_ms(0.5)))
            .floor(format!(
                "{:.2} fresh (directory, node, getChildren pipelined), {:.2} hot",
                floor_fresh.pct_ms(0.5),
                floor_hot.pct_ms(0.5)
            ))
            .ratio(format!(
                "protocol idle/hot p50 {}; ours fresh / protocol fresh {}",
                floor_ratio.cell(),
                vs_floor.cell()
            )),
    );
    let rtt_ms = (ONE_WAY * 2).as_millis();
    for (what, key, trips) in [
        (
            "directory removed since this session used it",
            "idle_directory.round_trips_before_grant_removed",
            &removed,
        ),
        (
            "a lock this session never saw",
            "idle_directory.round_trips_before_grant_unseen",
            &unseen,
        ),
    ] {
        report.row(
            Row::new(
                scenario,
                format!("round trips before the grant, {what} (+{rtt_ms} ms per round trip)"),
            )
            .ours(trips.cell())
            .floor("1 (protocol: directory, node and getChildren pipelined)")
            .goal(
                Goal::at_most(key, trips.count(), 1.0)
                    .checked()
                    .detail(format!(
                        "median of (acquire latency with the delay − without) over what the delay \
                         added to one exists, rounded; a proxy adding {} ms each way (ratios {:?})",
                        ONE_WAY.as_millis(),
                        trips.ratios
                    )),
            ),
        );
    }
    report.latencies(scenario, "fresh lock (directory removed)", &regrow);
    report.latencies(scenario, "hot lock, right after", &hot_arm);
    report.latencies(scenario, "fresh lock, the protocol by hand", &floor_fresh);
    Ok(())
}
