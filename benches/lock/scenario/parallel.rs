//! 3. Many locks on one session: 64 tasks, each on its own lock (ours, `Client::lock`, raw
//!    pipelined create+delete, raw create+getChildren+delete with our nodes' names, one
//!    after the other and pipelined as ours sends them).

use serde_json::json;
use zkfence::Session;
use zookeeper_client as zkc;

use super::cycles_on_each;
use crate::arms::{
    floor_cycle, mkdir, peer_acquire, peer_release, pipelined_floor_cycle, raw_cycle,
};
use crate::report::{Goal, Report, Row};
use crate::server::Bench;
use crate::stats::{order, paired, round3, Arm, Samples};
use crate::{progress, Result};

/// Scenario 3's zkfence arm: one task per directory, each cycling its own lock (also the
/// seat-hold's hot arm).
pub(super) async fn parallel_ours(
    session: &Session,
    dirs: &[String],
    cycles: usize,
) -> Result<Samples> {
    cycles_on_each(dirs, cycles, |dir| {
        let lock = session.lock(dir);
        async move {
            for _ in 0..cycles {
                lock.acquire().await?.release().await?;
            }
            Ok(())
        }
    })
    .await
}

async fn parallel_peer(client: &zkc::Client, dirs: &[String], cycles: usize) -> Result<Samples> {
    cycles_on_each(dirs, cycles, |dir| {
        let (client, dir) = (client.clone(), dir.to_string());
        async move {
            for _ in 0..cycles {
                let lock = peer_acquire(&client, &dir).await?;
                peer_release(&client, lock).await?;
            }
            Ok(())
        }
    })
    .await
}

/// What a raw arm does each cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
enum RawCycle {
    /// Create+delete with short names: the ensemble's write limit.
    Write,
    /// The lock protocol's create, getChildren, delete, each after the previous answer, with
    /// the names ours and scenario 1's floor use (a Curator-style name carrying a fresh uuid,
    /// which finds the node again after a lost answer).
    Protocol,
    /// The same requests, the getChildren sent right behind the create, as ours sends them.
    Pipelined,
}

/// A raw arm's cycles, pipelined by all tasks on one connection.
async fn parallel_raw(
    client: &zkc::Client,
    dirs: &[String],
    cycles: usize,
    kind: RawCycle,
) -> Result<Samples> {
    cycles_on_each(dirs, cycles, |dir| {
        let (client, dir) = (client.clone(), dir.to_string());
        async move {
            for _ in 0..cycles {
                match kind {
                    RawCycle::Write => raw_cycle(&client, &dir).await?,
                    RawCycle::Protocol => floor_cycle(&client, &dir).await?,
                    RawCycle::Pipelined => pipelined_floor_cycle(&client, &dir).await?,
                }
            }
            Ok(())
        }
    })
    .await
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Parallel {
    Ours,
    Peer,
    Raw,
    Floor,
    Pipelined,
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    progress(format!(
        "3/8 parallel: {} rounds of {} tasks on one session, {} cycles each, per arm",
        plan.rounds, plan.parallel_tasks, plan.parallel_cycles
    ));
    let session = bench.session().await?;
    let peer_client = bench.raw().await?;
    let raw_client = bench.raw().await?;
    let floor_client = bench.raw().await?;
    let pipelined_client = bench.raw().await?;
    let dirs = |arm: &str| {
        (0..plan.parallel_tasks)
            .map(|i| bench.path(&format!("parallel/{arm}/{i}")))
            .collect::<Vec<_>>()
    };
    let (ours_dirs, peer_dirs, raw_dirs, floor_dirs, pipelined_dirs) = (
        dirs("ours"),
        dirs("peer"),
        dirs("raw"),
        dirs("floor"),
        dirs("pipelined"),
    );
    for dir in raw_dirs.iter().chain(&floor_dirs).chain(&pipelined_dirs) {
        mkdir(&raw_client, dir).await?;
    }
    // Warm-up (creates the directories), one round's worth per arm, not measured.
    let k = plan.parallel_cycles;
    parallel_ours(&session, &ours_dirs, k).await?;
    if !plan.only_ours {
        parallel_peer(&peer_client, &peer_dirs, k).await?;
        parallel_raw(&raw_client, &raw_dirs, k, RawCycle::Write).await?;
        parallel_raw(&floor_client, &floor_dirs, k, RawCycle::Protocol).await?;
        parallel_raw(&pipelined_client, &pipelined_dirs, k, RawCycle::Pipelined).await?;
    }

    let (mut ours, mut peer, mut raw, mut floor, mut pipelined) = (
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
        Arm::default(),
    );
    let arms = [
        Parallel::Ours,
        Parallel::Peer,
        Parallel::Raw,
        Parallel::Floor,
        Parallel::Pipelined,
    ];
    let arms = if plan.only_ours {
        &arms[..1]
    } else {
        &arms[..]
    };
    for round in 0..plan.rounds {
        for arm in order(arms, round) {
            match arm {
                Parallel::Ours => {
                    let work = parallel_ours(&session, &ours_dirs, k);
                    ours.push(
                        bench
                            .measure_ours(std::slice::from_ref(&session), work)
                            .await?,
                    );
                }
                Parallel::Peer => {
                    let work = parallel_peer(&peer_client, &peer_dirs, k);
                    peer.push(
                        bench
                            .measure_raw(std::slice::from_ref(&peer_client), work)
                            .await?,
                    );
                }
                Parallel::Raw => {
                    let work = parallel_raw(&raw_client, &raw_dirs, k, RawCycle::Write);
                    raw.push(
                        bench
                            .measure_raw(std::slice::from_ref(&raw_client), work)
                            .await?,
                    );
                }
                Parallel::Floor => {
                    let work = parallel_raw(&floor_client, &floor_dirs, k, RawCycle::Protocol);
                    floor.push(
                        bench
                            .measure_raw(std::slice::from_ref(&floor_client), work)
                            .await?,
                    );
                }
                Parallel::Pipelined => {
                    let work =
                        parallel_raw(&pipelined_client, &pipelined_dirs, k, RawCycle::Pipelined);
                    pipelined.push(
                        bench
                            .measure_raw(std::slice::from_ref(&pipelined_client), work)
                            .await?,
                    );
                }
            }
        }
    }
    let vs_raw = paired(&ours, &raw, Samples::rate);
    let vs_peer = paired(&ours, &peer, Samples::rate);
    let vs_floor = paired(&ours, &floor, Samples::rate);
    let floor_vs_raw = paired(&floor, &raw, Samples::rate);
    let per_cycle_cpu = |s: &Samples| s.cpu.as_secs_f64() / s.ops as f64;
    let cpu_vs_floor = paired(&ours, &floor, per_cycle_cpu);
    let cpu_vs_pipelined = paired(&ours, &pipelined, per_cycle_cpu);
    let pipelined_cpu_vs_floor = paired(&pipelined, &floor, per_cycle_cpu);
    report.set(
        "parallel",
        json!({
            "tasks": plan.parallel_tasks,
            "cycles": ours.ops(),
            "cycles_per_s": round3(ours.rate()),
            "peer_cycles_per_s": round3(peer.rate()),
            "raw_cycles_per_s": round3(raw.rate()),
            "ratio_vs_raw": round3(vs_raw.median),
            "ratio_vs_raw_range": [round3(vs_raw.min), round3(vs_raw.max)],
            "ratio_vs_peer": vs_peer.json(),
            "requests_per_cycle": round3(ours.requests_per_op()),
            "keepalives_during": ours.keepalives(),
            "peer_requests_per_cycle": round3(peer.requests_per_op()),
            "raw_requests_per_cycle": round3(raw.requests_per_op()),
            "floor_cycles_per_s": round3(floor.rate()),
            "ratio_vs_floor": vs_floor.json(),
            "floor_ratio_vs_raw": floor_vs_raw.json(),
            "cpu_us_per_cycle": round3(ours.cpu_us_per_op()),
            "floor_cpu_us_per_cycle": round3(floor.cpu_us_per_op()),
            "ratio_cpu_vs_floor": cpu_vs_floor.json(),
            "pipelined_cpu_us_per_cycle": round3(pipelined.cpu_us_per_op()),
            "ratio_cpu_vs_pipelined": cpu_vs_pipelined.json(),
            "pipelined_ratio_cpu_vs_floor": pipelined_cpu_vs_floor.json(),
            "arms": { "ours": ours.json(), "peer": peer.json(), "raw": raw.json(), "floor": floor.json(), "pipelined": pipelined.json() },
        }),
    );
    let scenario = "3 parallel (64 locks, 1 session)";
    report.row(
        Row::new(scenario, "cycles/s (median of rounds)")
            .ours(ours.rate_cell())
            .peer(peer.rate_cell())
            .floor(format!("{} (raw create+delete)", raw.rate_cell()))
            .ratio(format!(
                "ours/raw {}; ours/peer {}",
                vs_raw.cell(),
                vs_peer.cell()
            ))
            .goal(Goal::at_least("parallel.ratio_vs_raw", vs_raw.median, 0.8)),
    );
    report.row(
        Row::new(
            scenario,
            "… raw create+getChildren+delete, names as ours (the protocol)",
        )
        .floor(floor.rate_cell())
        .ratio(format!(
            "ours/that {}; that/raw {}",
            vs_floor.cell(),
            floor_vs_raw.cell()
        )),
    );
    report.row(
        Row::new(scenario, "requests per cycle (at the server)")
            .ours(ours.requests_cell())
            .peer(peer.requests_cell())
            .floor(format!(
                "{} / {} / {} (raw / protocol / pipelined)",
                raw.requests_cell(),
                floor.requests_cell(),
                pipelined.requests_cell()
            )),
    );
    report.row(
        Row::new(scenario, "client CPU per cycle (µs)")
            .ours(ours.cpu_cell())
            .peer(peer.cpu_cell())
            .floor(format!(
                "{} / {} (raw / protocol)",
                raw.cpu_cell(),
                floor.cpu_cell()
            ))
            .ratio(format!("ours/protocol {}", cpu_vs_floor.cell()))
            .goal(Goal::at_most(
                "parallel.ratio_cpu_vs_floor",
                cpu_vs_floor.median,
                1.1,
            )),
    );
    report.row(
        Row::new(
            scenario,
            "… client CPU, the protocol pipelined by hand (the listing behind the create, as ours)",
        )
        .floor(format!("{} (pipelined protocol)", pipelined.cpu_cell()))
        .ratio(format!(
            "ours/that {}; that/protocol {}",
            cpu_vs_pipelined.cell(),
            pipelined_cpu_vs_floor.cell()
        )),
    );
    report.row(
        Row::new(scenario, "CPU share: ZooKeeper JVMs / client")
            .ours(ours.cpu_share_cell())
            .peer(peer.cpu_share_cell())
            .floor(format!(
                "{} (raw); {} (protocol)",
                raw.cpu_share_cell(),
                floor.cpu_share_cell()
            )),
    );
    Ok(())
}
