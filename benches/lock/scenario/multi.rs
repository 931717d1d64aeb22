//! 8 multi: uncontended acquire+release of a 3-path multi-lock against 3 plain locks taken one
//! after another on the same 3 paths.

use serde_json::json;

use super::timed_cycles;
use crate::report::{Goal, Report, Row};
use crate::server::Bench;
use crate::stats::{ms, order, paired, round3, Arm, Samples};
use crate::{progress, Result};

/// What `tests/multi_lock.rs` counts at the server for one cycle: one `multi` of creates, one
/// read of their zxids (ZooKeeper 3.8.0's `multi` answer lacks them: ZOOKEEPER-4026), a
/// getChildren, one `multi` of deletes; against create, getChildren and delete per plain lock.
/// Shown in the JSON beside the counts, not checked here: the test asserts them exactly.
const MULTI_EXPECTED: f64 = 4.0;
const PLAIN_EXPECTED: f64 = 9.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Multi {
    Multi,
    Plain,
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    let n = plan.uncontended_cycles;
    progress(format!(
        "8/8 multi: {} rounds of {n} acquire+release cycles of 3 paths per arm",
        plan.rounds
    ));
    // One session for both arms: they run one after the other, so `cons` still tells their
    // requests apart, and both meet the same connection and lease clock.
    let session = bench.session().await?;
    let paths = [
        bench.path("multi/a"),
        bench.path("multi/b"),
        bench.path("multi/c"),
    ];
    let names: Vec<&str> = paths.iter().map(String::as_str).collect();
    let multi = session.multi_lock(&names);
    let plain: Vec<zkfence::Lock> = paths.iter().map(|p| session.lock(p)).collect();

    // Warm-up, as in 1: it also makes the three directories, which neither arm should pay for.
    cycles_multi(&multi, n).await?;
    cycles_plain(&plain, n).await?;

    let arms = [Multi::Multi, Multi::Plain];
    let (mut multi_arm, mut plain_arm) = (Arm::default(), Arm::default());
    for round in 0..plan.rounds {
        for arm in order(&arms, round) {
            let sessions = std::slice::from_ref(&session);
            match arm {
                Multi::Multi => {
                    let work = cycles_multi(&multi, n);
                    multi_arm.push(bench.measure_ours(sessions, work).await?);
                }
                Multi::Plain => {
                    let work = cycles_plain(&plain, n);
                    plain_arm.push(bench.measure_ours(sessions, work).await?);
                }
            }
        }
    }

    let ratio = paired(&multi_arm, &plain_arm, |s| ms(s.p50()));
    // A lease-clock sync is per session and period, not per cycle: left out of both counts.
    let multi_rpc = multi_arm.requests_per_op_without_keepalives();
    let plain_rpc = plain_arm.requests_per_op_without_keepalives();
    report.set(
        "multi",
        json!({
            "paths": 3,
            "cycles": multi_arm.ops(),
            "p50_ms": round3(multi_arm.pct_ms(0.5)),
            "p99_ms": round3(multi_arm.pct_ms(0.99)),
            "cycles_per_s": round3(multi_arm.rate()),
            "requests_per_cycle": round3(multi_rpc),
            "requests_per_cycle_expected": MULTI_EXPECTED,
            "plain_p50_ms": round3(plain_arm.pct_ms(0.5)),
            "plain_p99_ms": round3(plain_arm.pct_ms(0.99)),
            "plain_cycles_per_s": round3(plain_arm.rate()),
            "plain_requests_per_cycle": round3(plain_rpc),
            "plain_requests_per_cycle_expected": PLAIN_EXPECTED,
            "keepalives_during": multi_arm.keepalives() + plain_arm.keepalives(),
            "ratio_p50_vs_plain": ratio.json(),
            "arms": { "multi": multi_arm.json(), "plain": plain_arm.json() },
        }),
    );

    let scenario = "8 multi (3 paths, uncontended)";
    report.row(
        Row::new(scenario, "multi-lock acquire+release p50 / p99 (ms)")
            .ours(multi_arm.latency_cell())
            .ratio(format!("multi/plain p50 {}", ratio.cell()))
            .goal(Goal::new(
                "multi.ratio_p50_vs_plain",
                ratio.median,
                "< 1",
                ratio.median < 1.0,
            )),
    );
    report.row(
        Row::new(scenario, "3 plain locks, one after another, p50 / p99 (ms)")
            .ours(plain_arm.latency_cell()),
    );
    report.row(
        Row::new(scenario, "multi-lock cycles/s (median of rounds)").ours(multi_arm.rate_cell()),
    );
    report.row(
        Row::new(scenario, "3 plain locks cycles/s (median of rounds)").ours(plain_arm.rate_cell()),
    );
    report.row(
        Row::new(scenario, "multi-lock requests per cycle (at the server)")
            .ours(multi_arm.requests_cell())
            .goal(
                // 4 against 9: a keepalive or ping on one side of a window's edge moves a
                // count by one request per round at most, far from closing that gap.
                Goal::new(
                    "multi.requests_per_cycle",
                    multi_rpc,
                    format!("< plain ({plain_rpc:.2})"),
                    multi_rpc < plain_rpc,
                )
                .shown_as(format!("< plain {plain_rpc:.2}"))
                .checked()
                .detail(format!(
                    "multi-lock: {} requests at the server less {} lease-clock syncs over {} \
                     cycles; 3 plain locks: {} less {} over {}",
                    multi_arm.requests(),
                    multi_arm.keepalives(),
                    multi_arm.ops(),
                    plain_arm.requests(),
                    plain_arm.keepalives(),
                    plain_arm.ops()
                )),
            ),
    );
    report.row(
        Row::new(scenario, "3 plain locks requests per cycle (at the server)")
            .ours(plain_arm.requests_cell()),
    );
    Ok(())
}

async fn cycles_multi(lock: &zkfence::MultiLock, n: usize) -> Result<Samples> {
    timed_cycles(n, || async { Ok(lock.acquire().await?.release().await?) }).await
}

/// Each lock acquired in turn, then all released, newest first: what a caller without a
/// multi-lock writes (with the paths always in one order, so it cannot deadlock either).
async fn cycles_plain(locks: &[zkfence::Lock], n: usize) -> Result<Samples> {
    timed_cycles(n, || async {
        let mut leases = Vec::with_capacity(locks.len());
        for lock in locks {
            leases.push(lock.acquire().await?);
        }
        while let Some(lease) = leases.pop() {
            lease.release().await?;
        }
        Ok(())
    })
    .await
}
