//! 1. Uncontended acquire+release on one lock: ours, the raw floor, `Client::lock`, Kazoo.

use serde_json::json;
use zookeeper_client as zkc;

use super::round_trips::{timed_acquire, timed_peer_acquire, Delayed, DelayedRaw};
use super::timed_cycles;
use crate::arms::{floor_cycle, mkdir, peer_acquire, peer_release, Kazoo};
use crate::report::{Goal, Report, Row};
use crate::server::{Bench, Cpu};
use crate::stats::{ms, order, paired, round3, spread, Arm, Samples};
use crate::{progress, Result};

/// What the protocol needs: create, getChildren, delete.
const PROTOCOL_REQUESTS: f64 = 3.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Uncontended {
    Ours,
    Floor,
    Peer,
    Kazoo,
}

pub async fn run(bench: &Bench, mut kazoo: Option<&mut Kazoo>, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    progress(format!(
        "1/8 uncontended: {} rounds of {} acquire+release cycles per arm",
        plan.rounds, plan.uncontended_cycles
    ));
    let session = bench.session().await?;
    let floor_client = bench.raw().await?;
    let peer_client = bench.raw().await?;
    let (ours_dir, floor_dir, peer_dir, kazoo_dir) = (
        bench.path("uncontended/ours"),
        bench.path("uncontended/floor"),
        bench.path("uncontended/peer"),
        bench.path("uncontended/kazoo"),
    );
    let lock = session.lock(&ours_dir);
    mkdir(&floor_client, &floor_dir).await?;

    // Warm-up, one round's worth per arm (the servers' JIT and the directories), not measured:
    // without it the first round is several times slower than the rest.
    let n = plan.uncontended_cycles;
    cycles_ours(&lock, n).await?;
    if !plan.only_ours {
        cycles_floor(&floor_client, &floor_dir, n).await?;
        cycles_peer(&peer_client, &peer_dir, n).await?;
        if let Some(k) = kazoo.as_deref_mut() {
            k.uncontended(&kazoo_dir, n).await?;
        }
    }

    let mut arms: Vec<Uncontended> = vec![Uncontended::Ours, Uncontended::Floor, Uncontended::Peer];
    if plan.only_ours {
        arms.truncate(1);
    } else if kazoo.is_some() {
        arms.push(Uncontended::Kazoo);
    }
    let (mut ours, mut floor, mut peer, mut kz) = (
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
    );
    for round in 0..plan.rounds {
        for arm in order(&arms, round) {
            match arm {
                Uncontended::Ours => {
                    let work = cycles_ours(&lock, n);
                    ours.push(
                        bench
                            .measure_ours(std::slice::from_ref(&session), work)
                            .await?,
                    );
                }
                Uncontended::Floor => {
                    let work = cycles_floor(&floor_client, &floor_dir, n);
                    floor.push(
                        bench
                            .measure_raw(std::slice::from_ref(&floor_client), work)
                            .await?,
                    );
                }
                Uncontended::Peer => {
                    let work = cycles_peer(&peer_client, &peer_dir, n);
                    peer.push(
                        bench
                            .measure_raw(std::slice::from_ref(&peer_client), work)
                            .await?,
                    );
                }
                Uncontended::Kazoo => {
                    let k = kazoo.as_deref_mut().expect("kazoo arm only with kazoo");
                    k.touch().await?;
                    let (ids, cpu) = ([k.single], Cpu::Child(k.pid));
                    kz.push(
                        bench
                            .measure(&ids, cpu, k.uncontended(&kazoo_dir, n))
                            .await?,
                    );
                }
            }
        }
    }

    // Round trips before the grant, on a session of its own behind a delaying proxy (after
    // the timed rounds: its session's requests are not in theirs).
    let delayed = Delayed::connect(bench).await?;
    let delayed_lock = delayed.session.lock(&bench.path("uncontended/delayed"));
    // Warm-up: makes the directory, so every timed acquire is a hot lock's.
    delayed_lock.acquire().await?.release().await?;
    let round_trips = delayed.round_trips(|| timed_acquire(&delayed_lock)).await?;
    drop(delayed_lock);
    delayed.session.close().await;
    // The peer through the same long link: on loopback a round trip is a tenth of a
    // millisecond beside a quorum write's milliseconds, so the one ours saves shows here.
    let peer_delayed = DelayedRaw::connect(bench).await?;
    let peer_dir = bench.path("uncontended/peer-delayed");
    timed_peer_acquire(&peer_delayed.client, &peer_dir).await?;
    let peer_round_trips = peer_delayed
        .round_trips(|| timed_peer_acquire(&peer_delayed.client, &peer_dir))
        .await?;
    let delayed_median = |r: &super::round_trips::RoundTrips| {
        spread(&r.delayed.iter().map(|d| ms(*d)).collect::<Vec<_>>()).median
    };
    let delayed_vs_peer = delayed_median(&round_trips) / delayed_median(&peer_round_trips);

    let ratio = paired(&ours, &floor, |s| ms(s.p50()));
    let vs_peer = paired(&ours, &peer, |s| ms(s.p50()));
    let per_cycle_cpu = |s: &Samples| s.cpu.as_secs_f64() / s.ops as f64;
    let cpu_vs_floor = paired(&ours, &floor, per_cycle_cpu);
    let rpc = ours.requests_per_op();
    let protocol_rpc = ours.requests_per_op_without_keepalives();
    let peer_vs_floor = paired(&peer, &floor, |s| ms(s.p50()));
    let kazoo_vs_floor = paired(&kz, &floor, |s| ms(s.p50()));
    report.set(
        "uncontended",
        json!({
            "cycles": ours.ops(),
            "p50_ms": round3(ours.pct_ms(0.5)),
            "p99_ms": round3(ours.pct_ms(0.99)),
            "cycles_per_s": round3(ours.rate()),
            "requests_per_cycle": round3(rpc),
            "keepalives_during": ours.keepalives(),
            "requests_per_cycle_without_keepalives": round3(protocol_rpc),
            "ratio_p50_vs_floor": round3(ratio.median),
            "ratio_p50_vs_floor_range": [round3(ratio.min), round3(ratio.max)],
            "floor_p50_ms": round3(floor.pct_ms(0.5)),
            "floor_p99_ms": round3(floor.pct_ms(0.99)),
            "floor_cycles_per_s": round3(floor.rate()),
            "floor_requests_per_cycle": round3(floor.requests_per_op()),
            "peer_p50_ms": round3(peer.pct_ms(0.5)),
            "peer_p99_ms": round3(peer.pct_ms(0.99)),
            "peer_cycles_per_s": round3(peer.rate()),
            "peer_requests_per_cycle": round3(peer.requests_per_op()),
            "peer_ratio_p50_vs_floor": peer_vs_floor.json(),
            "ratio_p50_vs_peer": vs_peer.json(),
            "cpu_us_per_cycle": round3(ours.cpu_us_per_op()),
            "floor_cpu_us_per_cycle": round3(floor.cpu_us_per_op()),
            "ratio_cpu_vs_floor": cpu_vs_floor.json(),
            "round_trips_before_grant": round_trips.json(),
            "peer_round_trips_before_grant": peer_round_trips.json(),
            "delayed_ratio_vs_peer": round3(delayed_vs_peer),
            "arms": { "ours": ours.json(), "floor": floor.json(), "peer": peer.json(), "kazoo": kz.json() },
        }),
    );
    if kz.ran() {
        report.set_in(
            "kazoo",
            "uncontended",
            json!({
                "p50_ms": round3(kz.pct_ms(0.5)),
                "p99_ms": round3(kz.pct_ms(0.99)),
                "cycles_per_s": round3(kz.rate()),
                "requests_per_cycle": round3(kz.requests_per_op()),
                "ratio_p50_vs_floor": kazoo_vs_floor.json(),
            }),
        );
    }

    let scenario = "1 uncontended";
    report.row(
        Row::new(scenario, "acquire+release p50 / p99 (ms)")
            .ours(ours.latency_cell())
            .peer(peer.latency_cell())
            .kazoo(kz.latency_cell())
            .floor(floor.latency_cell())
            .ratio(format!("ours/floor p50 {}", ratio.cell()))
            .goal(Goal::at_most(
                "uncontended.ratio_p50_vs_floor",
                ratio.median,
                0.98,
            )),
    );
    report.row(
        Row::new(scenario, "acquire+release p50 against Client::lock")
            .ratio(format!("ours/peer p50 {}", vs_peer.cell()))
            .goal(
                Goal::new(
                    "uncontended.ratio_p50_vs_peer",
                    vs_peer.median,
                    "< 1.0",
                    vs_peer.median < 1.0,
                )
                .shown_as("< 1 (ahead of it)"),
            ),
    );
    report.row(
        Row::new(scenario, "cycles/s (median of rounds)")
            .ours(ours.rate_cell())
            .peer(peer.rate_cell())
            .kazoo(kz.rate_cell())
            .floor(floor.rate_cell())
            .ratio(format!("peer/floor p50 {}", peer_vs_floor.cell())),
    );
    // A keepalive is per session and period, not per cycle: it is left out of the check. One
    // request per round is the slack for a keepalive counted on one side of a window's edge
    // and not the other; an extra request every tenth cycle would still show.
    let tolerance = plan.rounds as f64 / ours.ops().max(1) as f64;
    report.row(
        Row::new(scenario, "requests per cycle (at the server)")
            .ours(ours.requests_cell())
            .peer(peer.requests_cell())
            .kazoo(kz.requests_cell())
            .floor(floor.requests_cell())
            .ratio(kz.cell(|_| format!("kazoo/floor p50 {}", kazoo_vs_floor.cell())))
            .goal(
                Goal::equals(
                    "uncontended.requests_per_cycle",
                    protocol_rpc,
                    PROTOCOL_REQUESTS,
                    tolerance.max(0.005),
                )
                .checked()
                .detail(format!(
                    "{} requests at the server less {} lease-clock syncs over {} cycles; \
                     tolerance one request per round",
                    ours.requests(),
                    ours.keepalives(),
                    ours.ops()
                )),
            ),
    );
    report.row(
        Row::new(
            scenario,
            format!(
                "round trips before the grant (hot lock, +{} ms per round trip)",
                (super::round_trips::ONE_WAY * 2).as_millis()
            ),
        )
        .ours(round_trips.cell())
        .floor("1 (protocol: create and getChildren pipelined)")
        .goal(
            Goal::equals(
                "uncontended.round_trips_before_grant",
                round_trips.count(),
                1.0,
                0.0,
            )
            .checked()
            .detail(format!(
                "median of (acquire latency with the delay − without) over what the delay \
                 added to one exists, rounded; a proxy adding {} ms each way (ratios {:?})",
                super::round_trips::ONE_WAY.as_millis(),
                round_trips.ratios
            )),
        ),
    );
    report.row(
        Row::new(
            scenario,
            format!(
                "acquire median against Client::lock, +{} ms per round trip",
                (super::round_trips::ONE_WAY * 2).as_millis()
            ),
        )
        .ours(format!("{:.1} ms", delayed_median(&round_trips)))
        .peer(format!(
            "{:.1} ms; {}",
            delayed_median(&peer_round_trips),
            peer_round_trips.cell()
        ))
        .ratio(format!("ours/peer {delayed_vs_peer:.2}"))
        .goal(Goal::at_most(
            "uncontended.delayed_ratio_vs_peer",
            delayed_vs_peer,
            0.98,
        )),
    );
    report.row(
        Row::new(scenario, "client CPU per cycle (µs)")
            .ours(ours.cpu_cell())
            .peer(peer.cpu_cell())
            .kazoo(kz.cpu_cell())
            .floor(floor.cpu_cell())
            .ratio(format!("ours/floor {}", cpu_vs_floor.cell()))
            .goal(Goal::at_most(
                "uncontended.ratio_cpu_vs_floor",
                cpu_vs_floor.median,
                1.05,
            )),
    );
    report.row(
        Row::new(scenario, "CPU share: ZooKeeper JVMs / client")
            .ours(ours.cpu_share_cell())
            .peer(peer.cpu_share_cell())
            .kazoo(kz.cpu_share_cell())
            .floor(floor.cpu_share_cell()),
    );
    report.latencies(scenario, "zkfence", &ours);
    report.latencies(scenario, "raw floor", &floor);
    report.latencies(scenario, "Client::lock", &peer);
    report.latencies(scenario, "Kazoo", &kz);
    Ok(())
}

async fn cycles_ours(lock: &zkfence::Lock, n: usize) -> Result<Samples> {
    timed_cycles(n, || async { Ok(lock.acquire().await?.release().await?) }).await
}

async fn cycles_floor(client: &zkc::Client, dir: &str, n: usize) -> Result<Samples> {
    timed_cycles(n, || floor_cycle(client, dir)).await
}

async fn cycles_peer(client: &zkc::Client, dir: &str, n: usize) -> Result<Samples> {
    timed_cycles(n, || async {
        let lock = peer_acquire(client, dir).await?;
        peer_release(client, lock).await
    })
    .await
}
