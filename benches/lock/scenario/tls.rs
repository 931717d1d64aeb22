//! Scenario 10, TLS: the uncontended acquire+release of scenario 1 over TLS, against the same over the
//! plaintext port of the same servers (an ensemble of its own: TLS needs the Netty connection
//! factory, which would change every other scenario's numbers). The requests per cycle must
//! not change: TLS costs time, never a request.

use serde_json::json;
use zkfence::{Session, SessionOptions};

use super::timed_cycles;
use crate::report::{Goal, Report, Row};
use crate::server::Bench;
use crate::stats::{ms, order, paired, round3, Arm, Samples};
use crate::{progress, Result, SESSION_TIMEOUT};

/// What the protocol needs: create, getChildren, delete.
const PROTOCOL_REQUESTS: f64 = 3.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Port {
    Tls,
    Plain,
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let plan = &bench.plan;
    progress(format!(
        "10 tls: {} rounds of {} acquire+release cycles over TLS and over plaintext",
        plan.rounds, plan.uncontended_cycles
    ));
    let ca = bench
        .zk
        .tls()
        .ok_or("scenario tls needs a TLS ensemble")?
        .ca_cert()
        .to_path_buf();
    let secure = bench.zk.secure_client_addrs()[bench.node].to_string();
    let tls_session = Session::connect(
        &secure,
        SessionOptions::new()
            .session_timeout(SESSION_TIMEOUT)
            .tls_ca_file(&ca),
    )
    .await?;
    let plain_session = bench.session().await?;
    let (tls_lock, plain_lock) = (
        tls_session.lock(&bench.path("tls/tls")),
        plain_session.lock(&bench.path("tls/plain")),
    );
    let n = plan.uncontended_cycles;
    // Warm-up (the JIT, the directories, TLS session state), not measured.
    cycles(&tls_lock, n).await?;
    cycles(&plain_lock, n).await?;
    let (mut tls, mut plain) = (Arm::default(), Arm::default());
    let arms = [Port::Tls, Port::Plain];
    for round in 0..plan.rounds {
        for arm in order(&arms, round) {
            match arm {
                Port::Tls => tls.push(
                    bench
                        .measure_ours(std::slice::from_ref(&tls_session), cycles(&tls_lock, n))
                        .await?,
                ),
                Port::Plain => plain.push(
                    bench
                        .measure_ours(std::slice::from_ref(&plain_session), cycles(&plain_lock, n))
                        .await?,
                ),
            }
        }
    }
    let ratio = paired(&tls, &plain, |s| ms(s.p50()));
    let rpc = tls.requests_per_op_without_keepalives();
    report.set(
        "tls",
        json!({
            "cycles": tls.ops(),
            "p50_ms": round3(tls.pct_ms(0.5)),
            "p99_ms": round3(tls.pct_ms(0.99)),
            "cycles_per_s": round3(tls.rate()),
            "requests_per_cycle": round3(tls.requests_per_op()),
            "requests_per_cycle_without_keepalives": round3(rpc),
            "plain_p50_ms": round3(plain.pct_ms(0.5)),
            "plain_p99_ms": round3(plain.pct_ms(0.99)),
            "plain_requests_per_cycle_without_keepalives":
                round3(plain.requests_per_op_without_keepalives()),
            "ratio_p50_vs_plain": ratio.json(),
            "arms": { "tls": tls.json(), "plain": plain.json() },
        }),
    );
    let scenario = "10 tls";
    report.row(
        Row::new(
            scenario,
            "acquire+release p50 / p99 (ms), over TLS; floor column: plaintext, same servers",
        )
        .ours(tls.latency_cell())
        .floor(plain.latency_cell())
        .ratio(format!("tls/plain p50 {}", ratio.cell())),
    );
    let tolerance = plan.rounds as f64 / tls.ops().max(1) as f64;
    report.row(
        Row::new(scenario, "requests per cycle over TLS (at the server)")
            .ours(tls.requests_cell())
            .floor(plain.requests_cell())
            .goal(
                Goal::equals(
                    "tls.requests_per_cycle",
                    rpc,
                    PROTOCOL_REQUESTS,
                    tolerance.max(0.005),
                )
                .checked()
                .detail(format!(
                    "{} requests at the server less {} lease-clock syncs over {} cycles",
                    tls.requests(),
                    tls.keepalives(),
                    tls.ops()
                )),
            ),
    );
    report.row(
        Row::new(scenario, "client CPU per cycle (µs)")
            .ours(tls.cpu_cell())
            .floor(plain.cpu_cell()),
    );
    Ok(())
}

async fn cycles(lock: &zkfence::Lock, n: usize) -> Result<Samples> {
    timed_cycles(n, || async { Ok(lock.acquire().await?.release().await?) }).await
}
