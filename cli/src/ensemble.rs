//! `zkfence ensemble up`: a throwaway local ZooKeeper ensemble for trying zkfence out, and
//! for failover drills: it shows each server's port, pid and role, and says when one exits.

use std::io::Write;
use std::time::Duration;

use zkfence_testcontainers::Ensemble;

use crate::exit::{self, Failure};
use crate::signals::{self, Signals};

/// The arguments of `ensemble up`.
pub struct Options {
    pub nodes: usize,
    /// Server N serves clients on this port plus N - 1.
    pub base_port: Option<u16>,
    pub tick_time: Duration,
    pub max_session_timeout: Duration,
}

/// How often the servers are looked at, to tell one that exited.
const WATCH: Duration = Duration::from_millis(500);

pub async fn up(o: Options) -> Result<u8, Failure> {
    if o.nodes == 0 {
        return Err(Failure::new(exit::USAGE, "--nodes must be at least 1"));
    }
    if let Some(base) = o.base_port {
        if usize::from(base) + o.nodes - 1 > usize::from(u16::MAX) {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "--base-port {base} with {} servers runs past port 65535",
                    o.nodes
                ),
            ));
        }
    }
    let mut signals = Signals::catch()
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot catch signals: {e}")))?;
    eprintln!(
        "zkfence: starting {} ZooKeeper server(s) (tickTime {})...",
        o.nodes,
        crate::duration::format(o.tick_time)
    );
    let mut builder = Ensemble::builder()
        .nodes(o.nodes)
        .tick_time(o.tick_time)
        .max_session_timeout(o.max_session_timeout);
    if let Some(base) = o.base_port {
        builder = builder.client_port_base(base);
    }
    let zk = tokio::select! {
        zk = builder.start() => zk?,
        // The harness cleans up what it started when its future is dropped.
        sig = signals.recv() => return Ok(exit::by_signal(sig)),
    };
    // The first line of stdout is exactly the connect string, for scripts.
    println!("{}", zk.connect_string());
    let _ = std::io::stdout().flush();
    // The leader is elected once a quorum serves; ask until one says so (bounded).
    let _ = zk.wait_for_leader(Duration::from_secs(10)).await;
    eprint!("{}", table(&zk).await);
    eprintln!(
        "zkfence: ensemble up; sessions may last {} to {}. Try:\n  \
         export ZKFENCE_CONNECT={}\n  zkfence exec /locks/demo -- sh -c 'echo token $ZKFENCE_TOKEN; sleep 5'\n\
         Ctrl-C stops it and deletes its data.",
        crate::duration::format(o.tick_time * 2),
        crate::duration::format(o.max_session_timeout),
        zk.connect_string()
    );
    let pids: Vec<Option<u32>> = (0..zk.len()).map(|i| zk.pid(i)).collect();
    let mut told = vec![false; zk.len()];
    let sig = loop {
        tokio::select! {
            sig = signals.recv() => break sig,
            _ = tokio::time::sleep(WATCH) => {}
        }
        for i in 0..zk.len() {
            // is_running reaps an exited server: no defunct java stays behind.
            if !told[i] && !zk.is_running(i) {
                told[i] = true;
                eprintln!(
                    "zkfence: server {} ({}, pid {}) exited; its log: {}",
                    i + 1,
                    zk.client_addr(i),
                    pids[i].map_or("?".to_string(), |p| p.to_string()),
                    zk.log_path(i).display()
                );
                eprint!("{}", table(&zk).await);
            }
        }
    };
    eprintln!("zkfence: {}: stopping the ensemble", signals::name(sig));
    // A graceful stop per server (SIGTERM, then SIGKILL after a grace); it blocks, so off the
    // async threads. Dropping the ensemble then removes its directory.
    tokio::task::spawn_blocking(move || {
        for i in 0..zk.len() {
            zk.stop(i);
        }
        drop(zk);
    })
    .await
    .map_err(|e| Failure::new(exit::ERROR, format!("stopping the ensemble failed: {e}")))?;
    Ok(exit::OK)
}

/// The servers as a table: number, client port, pid, and role as each says now ("exited"
/// for one that is gone, "not serving" for one that does not say, as while it elects).
async fn table(zk: &Ensemble) -> String {
    let mut rows = vec![[
        "SERVER".to_string(),
        "CLIENT PORT".to_string(),
        "PID".to_string(),
        "ROLE".to_string(),
    ]];
    for i in 0..zk.len() {
        let (pid, role) = match zk.pid(i) {
            Some(pid) => (
                pid.to_string(),
                zk.role(i)
                    .await
                    .unwrap_or_else(|| "not serving (electing, or no quorum)".into()),
            ),
            None => ("-".to_string(), "exited".to_string()),
        };
        rows.push([
            (i + 1).to_string(),
            zk.client_addr(i).port().to_string(),
            pid,
            role,
        ]);
    }
    let mut out = String::new();
    for row in rows {
        out.push_str(&format!(
            "  {:<8}{:<13}{:<9}{}\n",
            row[0], row[1], row[2], row[3]
        ));
    }
    out
}
