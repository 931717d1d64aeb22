//! What every recipe needs to run anywhere: an ensemble (given, or a throwaway local one) and,
//! for the recipes that show a failure, a fault proxy in front of it.
#![allow(dead_code)] // each recipe uses part of this

use std::error::Error;
use std::time::Duration;

use zkfence_testcontainers::{Ensemble, FaultProxy};

/// The ensemble to use: `--connect HOSTS` or `ZKFENCE_CONNECT`, else a throwaway local one
/// (kept running by the returned handle).
pub async fn ensemble() -> Result<(String, Option<Ensemble>), Box<dyn Error>> {
    let given = std::env::args().skip_while(|a| a != "--connect").nth(1);
    match given.or_else(|| std::env::var("ZKFENCE_CONNECT").ok()) {
        Some(connect) => Ok((connect, None)),
        None => {
            eprintln!("no --connect or ZKFENCE_CONNECT: starting a local ZooKeeper ensemble");
            // tickTime 200 ms lets the servers grant 2 s sessions, for quick failovers.
            let zk = Ensemble::builder()
                .nodes(3)
                .tick_time(Duration::from_millis(200))
                .start()
                .await?;
            Ok((zk.connect_string(), Some(zk)))
        }
    }
}

/// A fault proxy in front of the servers of `connect`, and the connect string through it
/// (with the same chroot, if any).
pub async fn proxy_to(connect: &str) -> Result<(FaultProxy, String), Box<dyn Error>> {
    let (hosts, chroot) = connect.split_at(connect.find('/').unwrap_or(connect.len()));
    let mut servers = Vec::new();
    for host in hosts.split(',') {
        servers.extend(tokio::net::lookup_host(host.trim()).await?.next());
    }
    let proxy = FaultProxy::start(servers).await?;
    let through = format!("{}{chroot}", proxy.connect_string());
    Ok((proxy, through))
}
