//! A throwaway etcd server on loopback.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::server::{find_program, probe_tcp, ServerProcess, Spec, HOST};
use crate::HarnessError;

/// A throwaway etcd member: Debian's `etcd` (3.4), a one-member cluster whose data is in a
/// temporary directory, clients served on `127.0.0.1` on a free port (plain HTTP/2, no
/// authentication), its peer port on another.
///
/// A one-member cluster commits a write once it is in its own write-ahead log (fsynced):
/// what it acknowledged survives [`kill`](Self::kill).
///
/// Dropping it stops the server (SIGTERM; SIGKILL after 10 s) and removes the directory; if
/// the thread is panicking it first prints the end of the log. Should the owning process die
/// without running `Drop`, a watchdog process kills the server and removes the directory.
///
/// # Requirements
///
/// `apt-get install -y etcd-server` (`/usr/bin/etcd`; the package's system service is not
/// used).
///
/// # Example
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_testcontainers::Etcd;
///
/// let etcd = Etcd::launch().await?;
/// // e.g. http://127.0.0.1:23456
/// println!("connect your client to {}", etcd.endpoint());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Etcd {
    server: ServerProcess,
}

impl Etcd {
    /// Starts a member in a new temporary directory on free loopback ports, and returns once
    /// its `/health` says it is healthy (it has elected itself leader).
    ///
    /// # Notable errors
    ///
    /// - [`HarnessError::ServerNotFound`] (saying what to install) if `etcd` is missing.
    /// - [`HarnessError::Server`] with the log's tail if it does not serve within 60 s.
    ///
    /// # Cancel safety
    ///
    /// Cancelling stops and removes the half-started server (its `Drop` runs).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let etcd = zkfence_testcontainers::Etcd::launch().await?;
    /// # Ok(()) }
    /// ```
    pub async fn launch() -> Result<Etcd, HarnessError> {
        let program = find_program(
            "etcd",
            &["/usr/bin/etcd", "/usr/local/bin/etcd"],
            "etcd-server",
        )?;
        let server = ServerProcess::prepare(Spec {
            name: "etcd",
            prefix: "zketcd-",
            program,
            run_as: None,
            ports: 2,
            args,
            probe: |port| {
                Box::pin(probe_tcp(
                    port,
                    b"GET /health HTTP/1.0\r\n\r\n",
                    b"\"health\":\"true\"",
                ))
            },
            bind_failure: &["address already in use"],
            stop_signal: libc::SIGTERM,
        })?;
        server
            .first_start(Instant::now() + Duration::from_secs(60))
            .await?;
        tracing::debug!(port = server.port(), dir = %server.dir().display(), "etcd serving");
        Ok(Etcd { server })
    }

    /// The client endpoint, `http://127.0.0.1:PORT`, as etcd clients take it.
    ///
    /// ```no_run
    /// # fn example(e: &zkfence_testcontainers::Etcd) {
    /// assert!(e.endpoint().starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub fn endpoint(&self) -> String {
        format!("http://{HOST}:{}", self.port())
    }
}

super::shared_methods!(Etcd);

fn args(dir: &Path, ports: &[u16]) -> Vec<OsString> {
    let client = format!("http://{HOST}:{}", ports[0]);
    let peer = format!("http://{HOST}:{}", ports[1]);
    let mut a: Vec<OsString> = Vec::new();
    let mut set = |k: &str, v: &str| {
        a.push(format!("--{k}={v}").into());
    };
    set("name", "zkfence");
    set("data-dir", &dir.join("data").display().to_string());
    set("listen-client-urls", &client);
    set("advertise-client-urls", &client);
    set("listen-peer-urls", &peer);
    set("initial-advertise-peer-urls", &peer);
    set("initial-cluster", &format!("zkfence={peer}"));
    set("initial-cluster-state", "new");
    set("logger", "zap");
    set("log-outputs", "stderr");
    // No metrics or pprof endpoints beyond the client port's defaults.
    set("enable-pprof", "false");
    a
}
