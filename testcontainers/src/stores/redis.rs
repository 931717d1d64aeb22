//! A throwaway Redis server on loopback.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::server::{find_program, probe_tcp, ServerProcess, Spec, HOST};
use crate::HarnessError;

/// A throwaway Redis server: Debian's `redis-server`, its data (an append-only file) in a
/// temporary directory, listening on `127.0.0.1` on a free port, no password.
///
/// Configured as a fence needs it (see zkfence-fences' guide): `appendonly yes` with
/// `appendfsync always`, so a write Redis acknowledged survives [`kill`](Self::kill) and a
/// crash of the machine; no RDB snapshots; `maxmemory-policy noeviction`, so a fence key is
/// never evicted.
///
/// Dropping it stops the server (SIGTERM: Redis finishes writing its append-only file; SIGKILL
/// after 10 s) and removes the directory; if the thread is panicking it first prints the end of
/// the log. Should the owning process die without running `Drop`, a watchdog process kills
/// the server and removes the directory.
///
/// # Requirements
///
/// `apt-get install -y redis-server` (`/usr/bin/redis-server`; the package's system service is
/// not used).
///
/// # Example
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_testcontainers::Redis;
///
/// let redis = Redis::launch().await?;
/// // e.g. redis://127.0.0.1:23456/
/// println!("connect your client to {}", redis.url());
/// redis.kill();
/// redis.start().await?; // replays its append-only file
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Redis {
    server: ServerProcess,
}

impl Redis {
    /// Starts a server in a new temporary directory on a free loopback port, and returns once
    /// it answers `PING`.
    ///
    /// # Notable errors
    ///
    /// - [`HarnessError::ServerNotFound`] (saying what to install) if `redis-server` is
    ///   missing.
    /// - [`HarnessError::Server`] with the log's tail if it does not serve within 60 s.
    ///
    /// # Cancel safety
    ///
    /// Cancelling stops and removes the half-started server (its `Drop` runs).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let redis = zkfence_testcontainers::Redis::launch().await?;
    /// # Ok(()) }
    /// ```
    pub async fn launch() -> Result<Redis, HarnessError> {
        let program = find_program(
            "Redis",
            &["/usr/bin/redis-server", "/usr/local/bin/redis-server"],
            "redis-server",
        )?;
        let server = ServerProcess::prepare(Spec {
            name: "Redis",
            prefix: "zkredis-",
            program,
            run_as: None,
            ports: 1,
            args,
            probe: |port| Box::pin(probe_tcp(port, b"PING\r\n", b"+PONG")),
            bind_failure: &["Address already in use", "Could not create server TCP"],
            stop_signal: libc::SIGTERM,
        })?;
        server
            .first_start(Instant::now() + Duration::from_secs(60))
            .await?;
        tracing::debug!(port = server.port(), dir = %server.dir().display(), "Redis serving");
        Ok(Redis { server })
    }

    /// A connection URL, `redis://127.0.0.1:PORT/` (database 0, no password).
    ///
    /// ```no_run
    /// # fn example(r: &zkfence_testcontainers::Redis) {
    /// assert!(r.url().starts_with("redis://127.0.0.1:"));
    /// # }
    /// ```
    pub fn url(&self) -> String {
        format!("redis://{HOST}:{}/", self.port())
    }
}

super::shared_methods!(Redis);

/// The command line: every setting as an argument (no config file), the dir in `--dir`, so
/// the directory's name marks the process for the watchdog.
fn args(dir: &Path, ports: &[u16]) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut set = |k: &str, v: &str| {
        a.push(format!("--{k}").into());
        a.push(v.into());
    };
    set("port", &ports[0].to_string());
    set("bind", HOST);
    set("dir", &dir.display().to_string());
    set("logfile", "");
    set("daemonize", "no");
    set("save", "");
    set("appendonly", "yes");
    set("appendfsync", "always");
    set("maxmemory-policy", "noeviction");
    set("unixsocket", "");
    set("protected-mode", "yes");
    // Keep the command line as given (Redis rewrites its process title by default): the
    // watchdog finds the server by the directory's name in it.
    set("set-proc-title", "no");
    a
}
