//! The one mechanism behind the single-process store servers ([`Redis`](crate::Redis),
//! [`Etcd`](crate::Etcd), [`MariaDb`](crate::MariaDb)): a temporary directory, a free
//! loopback port, the server spawned in a process group of its own (as an unprivileged user
//! when it refuses root), readiness polled by a probe, stop/kill/start, and a watchdog that
//! cleans up after a crashed test process.
//!
//! Each store's module only says how to prepare its directory, which command line to run and
//! how to tell that it serves.

use std::collections::HashSet;
use std::env;
use std::ffi::{CString, OsString};
use std::fs::OpenOptions;
use std::future::Future;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ensemble::ports::reserve_ports;
use crate::ensemble::read_tail;
use crate::hygiene::{kill_and_reap, pids_matching, regex_escape, Watchdog};
use crate::HarnessError;

/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long [`ServerProcess::stop`] waits for a clean exit before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long [`ServerProcess::kill`] waits for every marked process to go.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How many times a start is tried with a new port after a bind failure (the port is free
/// when picked, and another process may take it before the server binds it).
const START_ATTEMPTS: usize = 4;
/// Lines of the log in errors and in the panic report.
pub(crate) const LOG_LINES: usize = 40;
/// The loopback address every store server listens on.
pub(crate) const HOST: &str = "127.0.0.1";

/// A probe: true once the server on the given port serves.
pub(crate) type Probe = fn(u16) -> Pin<Box<dyn Future<Output = bool> + Send>>;

/// What a store's module tells the engine.
pub(crate) struct Spec {
    /// The store's name in messages: "Redis", "etcd", "MariaDB".
    pub(crate) name: &'static str,
    /// The temporary directory's name prefix.
    pub(crate) prefix: &'static str,
    /// The server binary.
    pub(crate) program: PathBuf,
    /// The unprivileged user to run as when we are root, if the server refuses root.
    pub(crate) run_as: Option<&'static str>,
    /// How many loopback ports the server needs (the first is the client port).
    pub(crate) ports: usize,
    /// The arguments, given the directory and the ports.
    pub(crate) args: fn(&Path, &[u16]) -> Vec<OsString>,
    /// Whether the server is serving.
    pub(crate) probe: Probe,
    /// Log lines that mean "a port was taken": the start is tried again on other ports.
    pub(crate) bind_failure: &'static [&'static str],
    /// The signal of a clean shutdown.
    pub(crate) stop_signal: libc::c_int,
}

/// A server process of one [`Spec`], in a directory of its own.
pub(crate) struct ServerProcess {
    spec: Spec,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    log: PathBuf,
    /// The dir's name: in the server's command line, so the watchdog and `kill` find it.
    marker: String,
    owner: Option<(u32, u32)>,
    ports: Mutex<Vec<u16>>,
    process: Mutex<Option<Child>>,
    watchdog: Mutex<Option<Watchdog>>,
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.spec.name)
            .field("dir", &self.dir_path)
            .field("ports", &*self.ports.lock().unwrap())
            .finish()
    }
}

impl ServerProcess {
    /// Makes the directory (owned by the unprivileged user when we are root) and the
    /// watchdog; starts nothing.
    pub(crate) fn prepare(spec: Spec) -> Result<ServerProcess, HarnessError> {
        let owner = match spec.run_as {
            Some(user) => unprivileged_owner(spec.name, user)?,
            None => None,
        };
        // Fixed-length random names: no instance's name is a prefix of another's.
        let dir = tempfile::Builder::new()
            .prefix(spec.prefix)
            .rand_bytes(12)
            .tempdir_in(env::temp_dir())?;
        let dir_path = dir.path().to_path_buf();
        let marker = dir_path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("tempfile names are UTF-8")
            .to_owned();
        // Before anything is spawned: from here on a crash of ours leaves nothing behind.
        let watchdog = Watchdog::spawn(&dir_path, &regex_escape(&marker), None)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir_path, Some(uid), Some(gid))?;
        }
        Ok(ServerProcess {
            log: dir_path.join(format!("{}.log", spec.prefix.trim_end_matches('-'))),
            spec,
            dir: Some(dir),
            dir_path,
            marker,
            owner,
            ports: Mutex::new(Vec::new()),
            process: Mutex::new(None),
            watchdog: Mutex::new(Some(watchdog)),
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir_path
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// The ports in use; the first is the client port.
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.ports.lock().unwrap().clone()
    }

    pub(crate) fn port(&self) -> u16 {
        self.ports()[0]
    }

    /// Gives `path` to the unprivileged user the server runs as, if any.
    pub(crate) fn give(&self, path: &Path) -> Result<(), HarnessError> {
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// A command run like the server (as its user, output appended to the log), for a
    /// preparation step such as `mariadb-install-db`.
    pub(crate) fn command(&self, program: &Path) -> Result<Command, HarnessError> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        writeln!(
            log,
            "==== zkfence-testcontainers: {} ====",
            program.display()
        )?;
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.dir_path)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        Ok(cmd)
    }

    /// Runs a preparation step to its end; fails with the log if it fails or overruns.
    pub(crate) async fn run_step(
        &self,
        mut cmd: Command,
        what: &str,
        deadline: Instant,
    ) -> Result<(), HarnessError> {
        let mut child = cmd.spawn()?;
        loop {
            if let Some(status) = child.try_wait()? {
                if status.success() {
                    return Ok(());
                }
                return Err(self.failed(format!("{what} failed ({status})")));
            }
            if Instant::now() >= deadline {
                kill_and_reap(child);
                return Err(self.failed(format!("{what} did not finish in time")));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Picks free ports, spawns the server and waits until the probe says it serves; picks
    /// other ports if the log shows that one was taken meanwhile.
    pub(crate) async fn first_start(&self, deadline: Instant) -> Result<(), HarnessError> {
        let mut attempt = 1;
        loop {
            let reserved =
                reserve_ports(Ipv4Addr::LOCALHOST, self.spec.ports, &mut HashSet::new())?;
            *self.ports.lock().unwrap() = reserved.into_iter().map(|(p, _)| p).collect();
            self.spawn()?;
            match self.wait_ready(deadline).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < START_ATTEMPTS && self.log_shows_bind_failure() => {
                    tracing::warn!(attempt, error = %e, server = self.spec.name, "could not bind a port; retrying with others");
                    self.kill();
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts the server again on the same ports (after `stop` or `kill`) and waits until it
    /// serves; only waits if it is running.
    pub(crate) async fn restart(&self, timeout: Duration) -> Result<(), HarnessError> {
        if !self.is_running() {
            self.spawn()?;
        }
        self.wait_ready(Instant::now() + timeout).await
    }

    fn spawn(&self) -> Result<(), HarnessError> {
        let args = (self.spec.args)(&self.dir_path, &self.ports());
        let mut cmd = self.command(&self.spec.program)?;
        cmd.args(args);
        let child = cmd.spawn()?;
        tracing::debug!(pid = child.id(), ports = ?self.ports(), server = self.spec.name, "spawned");
        let old = self.process.lock().unwrap().replace(child);
        if let Some(old) = old {
            kill_and_reap(old);
        }
        Ok(())
    }

    async fn wait_ready(&self, deadline: Instant) -> Result<(), HarnessError> {
        loop {
            if (self.spec.probe)(self.port()).await {
                return Ok(());
            }
            let exited = {
                let mut guard = self.process.lock().unwrap();
                match guard.as_mut() {
                    None => Some("not started, or killed".to_owned()),
                    Some(child) => child.try_wait()?.map(|st| st.to_string()),
                }
            };
            if let Some(status) = exited {
                return Err(self.failed(format!("the server is not running ({status})")));
            }
            if Instant::now() >= deadline {
                return Err(self.failed("the server did not serve in time".into()));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        let mut guard = self.process.lock().unwrap();
        let child = guard.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    pub(crate) fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// A clean shutdown (the spec's signal), SIGKILL after 10 s; blocks the thread.
    pub(crate) fn stop(&self) {
        let child = self.process.lock().unwrap().take();
        let Some(mut child) = child else {
            return;
        };
        // SAFETY: kill(2) has no memory-safety preconditions; the child is not reaped yet,
        // so its pid cannot have been reused.
        unsafe {
            libc::kill(child.id() as libc::pid_t, self.spec.stop_signal);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_and_reap(child);
        self.kill_leftovers();
    }

    /// SIGKILL, and waits until no process of this server is left.
    pub(crate) fn kill(&self) {
        let child = self.process.lock().unwrap().take();
        if let Some(child) = child {
            kill_and_reap(child);
        }
        self.kill_leftovers();
    }

    fn kill_leftovers(&self) {
        let deadline = Instant::now() + KILL_WAIT;
        loop {
            let pids = pids_matching(&self.marker);
            if pids.is_empty() || Instant::now() >= deadline {
                return;
            }
            for pid in pids {
                // SAFETY: kill(2) has no memory-safety preconditions. The pid carries our
                // unique marker in its command line.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = read_tail(&self.log, 64 * 1024 + lines * 512);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn log_shows_bind_failure(&self) -> bool {
        let text = read_tail(&self.log, 16 * 1024);
        let program = self.spec.program.display().to_string();
        let last = text
            .rfind(&format!("==== zkfence-testcontainers: {program}"))
            .unwrap_or(0);
        let text = &text[last..];
        self.spec.bind_failure.iter().any(|s| text.contains(s))
    }

    pub(crate) fn failed(&self, what: String) -> HarnessError {
        HarnessError::Server {
            server: self.spec.name,
            what,
            log_tail: self.log_tail(LOG_LINES),
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "zkfence-testcontainers: {} log of {}:\n{}",
                self.spec.name,
                self.dir_path.display(),
                self.log_tail(LOG_LINES)
            );
        }
        self.stop();
        self.kill_leftovers();
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                tracing::warn!(%e, server = self.spec.name, "could not remove the server's dir");
            }
        }
        if let Some(w) = self.watchdog.lock().unwrap().take() {
            w.dismiss();
        }
    }
}

/// `program` if it is an executable file, else [`HarnessError::ServerNotFound`].
pub(crate) fn find_program(
    server: &'static str,
    candidates: &[&str],
    package: &'static str,
) -> Result<PathBuf, HarnessError> {
    for c in candidates {
        let p = Path::new(c);
        if p.metadata().map(|m| m.is_file()).unwrap_or(false) {
            return Ok(p.to_path_buf());
        }
    }
    Err(HarnessError::ServerNotFound {
        server,
        package,
        searched: candidates.join(", "),
    })
}

/// The (uid, gid) of `user` when we run as root, `None` otherwise.
fn unprivileged_owner(
    server: &'static str,
    user: &'static str,
) -> Result<Option<(u32, u32)>, HarnessError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new(user).expect("no NUL in a user name");
    // SAFETY: `name` is a valid C string; the record is read at once, before any other call
    // that could overwrite getpwnam's static buffer.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(HarnessError::ServerNotFound {
            server,
            package: "its Debian package, which creates the user",
            searched: format!("the `{user}` user ({server} does not run as root)"),
        });
    }
    // SAFETY: non-null, points at getpwnam's record.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok(Some((uid, gid)))
}

/// Connects to `127.0.0.1:port`, writes `request` (if any) and reads until `expect` shows
/// in the answer (true) or the answer ends, fails or takes more than 2 s (false).
pub(crate) async fn probe_tcp(port: u16, request: &'static [u8], expect: &'static [u8]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect((HOST, port)).await.ok()?;
        if !request.is_empty() {
            s.write_all(request).await.ok()?;
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return Some(false);
            }
            got.extend_from_slice(&buf[..n]);
            if got.windows(expect.len()).any(|w| w == expect) {
                return Some(true);
            }
        }
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Some(true))
    )
}
