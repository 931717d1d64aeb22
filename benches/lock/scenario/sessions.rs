//! 5b. Many sessions: `many_sessions` sessions of this process, each holding one lock of its
//!     own, idle: what they cost the ensemble per second (requests at the server, from
//!     `cons`; transactions, the zxid's movement in `srvr`), and the client's RSS per session.

use std::time::Instant;

use serde_json::json;

use crate::report::{Report, Row};
use crate::server::{ids_of_sessions, rss_trimmed, total_metrics, touch, Bench, Cpu};
use crate::stats::round3;
use crate::{progress, Result};

/// Sessions connected (and locks acquired) at once while setting up.
const CONNECT_BATCH: usize = 50;

/// The last transaction id the connected server applied (`Zxid:` in `srvr`).
pub async fn zxid(bench: &Bench) -> Result<u64> {
    let text = bench.zk.four_letter(bench.node, "srvr").await?;
    let hex = text
        .lines()
        .find_map(|l| l.strip_prefix("Zxid:"))
        .map(str::trim)
        .and_then(|v| v.strip_prefix("0x"))
        .ok_or("srvr: no Zxid line")?;
    Ok(u64::from_str_radix(hex, 16)?)
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let (n, window) = (bench.plan.many_sessions, bench.plan.many_sessions_window);
    progress(format!(
        "5/8 sessions: {n} sessions in this process each holding one lock, counted over {} s",
        window.as_secs()
    ));
    crate::server::settled_heap().await;
    let rss_before = rss_trimmed();
    let setup = Instant::now();
    let mut sessions = Vec::with_capacity(n);
    let mut leases = Vec::with_capacity(n);
    for batch in (0..n).collect::<Vec<_>>().chunks(CONNECT_BATCH) {
        let connected = bench.sessions(batch.len()).await?;
        let acquired = futures::future::try_join_all(batch.iter().zip(&connected).map(
            |(i, session)| async move {
                let lock = session.lock(&bench.path(&format!("sessions/{i}")));
                lock.acquire().await
            },
        ))
        .await?;
        sessions.extend(connected);
        leases.extend(acquired);
    }
    let setup = setup.elapsed();
    let rss_holding = rss_trimmed();
    let ids = ids_of_sessions(&sessions);

    touch(sessions.iter().map(|s| s.client())).await?;
    let servers = bench.servers();
    let before = bench.counted(&ids).await?;
    let keepalives_before = total_metrics(&sessions).keepalives;
    let zxid_before = zxid(bench).await?;
    let (cpu_before, servers_before) = (Cpu::Bench.time(), servers.time());
    let start = Instant::now();
    // A measured window, not a synchronisation: what idle holders cost per second.
    tokio::time::sleep(window).await;
    let zxid_after = zxid(bench).await?;
    let counted = bench.counted(&ids).await?.since(before);
    let elapsed = start.elapsed();
    let client_cpu = Cpu::Bench.time().saturating_sub(cpu_before);
    let server_cpu = servers.time().saturating_sub(servers_before);
    let keepalives = total_metrics(&sessions).keepalives - keepalives_before;
    for lease in leases {
        lease.release().await?;
    }
    for session in sessions {
        session.close().await;
    }

    let secs = elapsed.as_secs_f64();
    // A new epoch (a leader election) would reset the counter: then the figure is unknown.
    let transactions =
        (zxid_after >> 32 == zxid_before >> 32).then(|| (zxid_after - zxid_before) as f64 / secs);
    let requests = counted.received as f64 / secs;
    let per_session_kib = rss_holding.saturating_sub(rss_before) as f64 / n as f64 / 1024.0;
    report.set(
        "sessions",
        json!({
            "sessions": n,
            "window_s": round3(secs),
            "setup_s": round3(setup.as_secs_f64()),
            "requests_per_s": round3(requests),
            "requests_per_s_per_session": round3(requests / n as f64),
            "transactions_per_s": transactions.map(round3),
            "keepalives_per_s": round3(keepalives as f64 / secs),
            "notifications_per_s": round3(counted.notifications() as f64 / secs),
            "rss_kib_per_session": round3(per_session_kib),
            "client_cpu_share": round3(client_cpu.as_secs_f64() / secs / crate::server::cores() as f64),
            "server_cpu_share": round3(server_cpu.as_secs_f64() / secs / crate::server::cores() as f64),
        }),
    );
    let scenario = format!("5 sessions ({n} sessions, one lock held each, idle)");
    report.row(
        Row::new(
            &scenario,
            "at the server per second: requests / transactions (zxid)",
        )
        .ours(format!(
            "{requests:.1} / {}",
            transactions.map_or("? (new epoch)".into(), |t| format!("{t:.1}"))
        ))
        .ratio(format!(
            "{:.3} requests/s per session; {:.1} lease-clock syncs/s (client)",
            requests / n as f64,
            keepalives as f64 / secs
        )),
    );
    report.row(
        Row::new(&scenario, "client RSS per session (after malloc_trim)")
            .ours(format!("{per_session_kib:.1} KiB"))
            .ratio(format!(
                "set up in {:.1} s; CPU share client / ZooKeeper JVMs {:.1} % / {:.1} %",
                setup.as_secs_f64(),
                100.0 * client_cpu.as_secs_f64() / secs / crate::server::cores() as f64,
                100.0 * server_cpu.as_secs_f64() / secs / crate::server::cores() as f64,
            )),
    );
    Ok(())
}
