//! A throwaway PostgreSQL server on loopback.

use std::collections::HashSet;
use std::env;
use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ensemble::ports::reserve_ports;
use crate::ensemble::read_tail;
use crate::hygiene::{kill_and_reap, pids_matching, regex_escape, Watchdog};
use crate::HarnessError;

/// Debian's (and Ubuntu's) home of the PostgreSQL server binaries, one dir per major version.
const DEBIAN_PG_DIR: &str = "/usr/lib/postgresql";
/// How long [`Postgres::stop`] waits for a fast shutdown before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long [`Postgres::kill`] waits for the server's children to go.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How many times the start is tried again with a new port after a bind failure.
const START_ATTEMPTS: usize = 4;
/// Lines of the log printed when a test panics with a live server, or in errors.
const LOG_LINES: usize = 40;
/// The postmaster's lock file in the data dir; its 7th line holds the key and id of the
/// server's System V shared memory segment.
const PID_FILE: &str = "postmaster.pid";
/// The loopback address the server listens on.
const HOST: &str = "127.0.0.1";

/// Configures and starts a [`Postgres`]; see [`Postgres::builder`].
#[derive(Debug, Clone)]
pub struct PostgresBuilder {
    user: String,
    database: String,
    start_timeout: Duration,
}

impl Default for PostgresBuilder {
    fn default() -> Self {
        PostgresBuilder {
            user: "zkfence".into(),
            database: "zkfence".into(),
            start_timeout: Duration::from_secs(60),
        }
    }
}

impl PostgresBuilder {
    /// The name of the superuser the server is initialised with (default `zkfence`); it logs
    /// in without a password (trust) from loopback.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let pg = zkfence_testcontainers::Postgres::builder().user("app").start().await?;
    /// assert_eq!(pg.user(), "app");
    /// # Ok(()) }
    /// ```
    pub fn user(mut self, name: impl Into<String>) -> Self {
        self.user = name.into();
        self
    }

    /// The database created for the test (default `zkfence`), named in [`Postgres::url`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let pg = zkfence_testcontainers::Postgres::builder().database("bank").start().await?;
    /// assert!(pg.url().ends_with("/bank"));
    /// # Ok(()) }
    /// ```
    pub fn database(mut self, name: impl Into<String>) -> Self {
        self.database = name.into();
        self
    }

    /// How long [`start`](Self::start) (initdb, server start, creating the database) may
    /// take, default 60 s.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// let pg = zkfence_testcontainers::Postgres::builder()
    ///     .start_timeout(Duration::from_secs(120))
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn start_timeout(mut self, t: Duration) -> Self {
        self.start_timeout = t;
        self
    }

    /// Initialises a cluster in a new temporary directory, starts the server on a free
    /// loopback port, creates the database and returns once it accepts connections.
    ///
    /// Fails with [`HarnessError::PostgresNotFound`] (saying what to install) if the server
    /// binaries are missing, and [`HarnessError::Postgres`] (with the log) if a step fails.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let pg = zkfence_testcontainers::Postgres::builder().start().await?;
    /// println!("{}", pg.url());
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> Result<Postgres, HarnessError> {
        for (what, name) in [("user", &self.user), ("database", &self.database)] {
            let ok = !name.is_empty()
                && name.len() < 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(HarnessError::InvalidConfig(format!(
                    "PostgreSQL {what} name {name:?}: use 1 to 63 ASCII letters, digits or _"
                )));
            }
        }
        let bin = find_bin_dir()?;
        let owner = unprivileged_owner()?;
        // Fixed-length random names: no instance's name is a prefix of another's, so the
        // name alone marks this instance's processes (see `marker`).
        let dir = tempfile::Builder::new()
            .prefix("zkpg-")
            .rand_bytes(12)
            .tempdir_in(env::temp_dir())?;
        let dir_path = dir.path().to_path_buf();
        let marker = dir_path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("tempfile names are UTF-8")
            .to_owned();
        // Before anything is spawned: from here on a crash of ours leaves nothing behind.
        let watchdog = Watchdog::spawn(
            &dir_path,
            &regex_escape(&marker),
            Some(&dir_path.join("data").join(PID_FILE)),
        )?;
        if let Some(owner) = owner {
            chown(&dir_path, owner)?;
        }
        let pg = Postgres {
            bin,
            data: dir_path.join("data"),
            log: dir_path.join("postgres.log"),
            dir_path,
            dir: Some(dir),
            marker,
            owner,
            user: self.user,
            database: self.database,
            port: Mutex::new(0),
            process: Mutex::new(None),
            watchdog: Mutex::new(Some(watchdog)),
        };
        let deadline = Instant::now() + self.start_timeout;
        pg.initdb(deadline).await?;
        let mut attempt = 1;
        loop {
            let port = reserve_ports(Ipv4Addr::LOCALHOST, 1, &mut HashSet::new())?[0].0;
            *pg.port.lock().unwrap() = port;
            pg.spawn()?;
            match pg.wait_ready(deadline).await {
                Ok(()) => break,
                Err(e) if attempt < START_ATTEMPTS && pg.log_shows_bind_failure() => {
                    tracing::warn!(attempt, error = %e, "PostgreSQL could not bind its port; retrying with another");
                    pg.kill();
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
        pg.create_database(deadline).await?;
        tracing::debug!(url = %pg.url(), dir = %pg.dir_path.display(), "PostgreSQL serving");
        Ok(pg)
    }
}

/// A throwaway PostgreSQL server: Debian's `postgresql` binaries, a cluster `initdb`-ed into
/// a temporary directory, listening on `127.0.0.1` on a free port, with trust
/// authentication on loopback and one database created for the test.
///
/// When the test runs as root (as CI does), the cluster belongs to and the server runs as
/// the unprivileged `postgres` user the package created (PostgreSQL refuses to run as
/// root). Tuned for tests: `fsync` and `full_page_writes` are off, so a crash of the
/// *machine* may lose data, but a committed transaction survives [`kill`](Self::kill)
/// (`synchronous_commit` stays on: the commit record is written before the client hears
/// of it).
///
/// Dropping it stops the server (fast shutdown: open transactions are rolled back, clients
/// disconnected; SIGKILL after 10 s), and removes the directory; if the thread is panicking
/// it first prints the end of the server log. Should the owning process die without running
/// `Drop` (e.g. SIGKILL), a watchdog process kills the server and all its backends and
/// removes the directory.
///
/// # Requirements
///
/// `apt-get install -y postgresql` (any major version; the newest under
/// `/usr/lib/postgresql/*/bin` is used), or `PG_BINDIR` set to a directory holding `initdb`,
/// `postgres` and `pg_isready`.
///
/// # Example
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_testcontainers::Postgres;
///
/// let pg = Postgres::launch().await?;
/// // e.g. postgres://zkfence@127.0.0.1:23456/zkfence
/// println!("connect your client to {}", pg.url());
/// let ok = std::process::Command::new("psql")
///     .args(["-h", pg.host(), "-p", &pg.port().to_string(), "-U", pg.user(), "-d", pg.database()])
///     .args(["-c", "SELECT 1"])
///     .status()?;
/// assert!(ok.success());
///
/// // Crash the server and bring it back (crash recovery runs).
/// pg.kill();
/// pg.start().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Postgres {
    bin: PathBuf,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    data: PathBuf,
    log: PathBuf,
    /// The dir's name; in every process's command line (as `cluster_name` in the backends'
    /// process titles, in the postmaster's `-D`), so the watchdog and `kill` find them all.
    marker: String,
    /// The unprivileged (uid, gid) the server runs as when we are root.
    owner: Option<(u32, u32)>,
    user: String,
    database: String,
    port: Mutex<u16>,
    process: Mutex<Option<Child>>,
    watchdog: Mutex<Option<Watchdog>>,
}

impl Postgres {
    /// A builder with the defaults: user `zkfence`, database `zkfence`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let pg = zkfence_testcontainers::Postgres::builder().database("seats").start().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> PostgresBuilder {
        PostgresBuilder::default()
    }

    /// Starts a server with the builder's defaults; `Postgres::builder().start()`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let pg = zkfence_testcontainers::Postgres::launch().await?;
    /// # Ok(()) }
    /// ```
    pub async fn launch() -> Result<Postgres, HarnessError> {
        PostgresBuilder::default().start().await
    }

    /// A connection URL, `postgres://USER@127.0.0.1:PORT/DATABASE` (no password needed).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// assert!(pg.url().starts_with("postgres://zkfence@127.0.0.1:"));
    /// # }
    /// ```
    pub fn url(&self) -> String {
        format!(
            "postgres://{}@{HOST}:{}/{}",
            self.user,
            self.port(),
            self.database
        )
    }

    /// The TCP port the server listens on (the same across [`stop`](Self::stop) and
    /// [`start`](Self::start)).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// println!("psql -h {} -p {}", pg.host(), pg.port());
    /// # }
    /// ```
    pub fn port(&self) -> u16 {
        *self.port.lock().unwrap()
    }

    /// The address the server listens on: `"127.0.0.1"`.
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// assert_eq!(pg.host(), "127.0.0.1");
    /// # }
    /// ```
    pub fn host(&self) -> &str {
        HOST
    }

    /// The superuser to log in as (no password).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// println!("user {}", pg.user());
    /// # }
    /// ```
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The database created for the test.
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// println!("database {}", pg.database());
    /// # }
    /// ```
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The temporary directory holding the cluster (`data/`) and the log.
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// assert!(pg.dir().join("data").is_dir());
    /// # }
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir_path
    }

    /// The directory of the server binaries in use (`initdb`, `postgres`, `psql`, ...).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// let psql = pg.bin_dir().join("psql");
    /// # }
    /// ```
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The server's log file (initdb's output and the server's, across restarts).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// println!("{}", std::fs::read_to_string(pg.log_path()).unwrap());
    /// # }
    /// ```
    pub fn log_path(&self) -> PathBuf {
        self.log.clone()
    }

    /// The last `lines` lines of the server's log.
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// eprintln!("{}", pg.log_tail(20));
    /// # }
    /// ```
    pub fn log_tail(&self, lines: usize) -> String {
        let text = read_tail(&self.log, 64 * 1024 + lines * 512);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The process id of the server (the postmaster), if it is running.
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// println!("postmaster pid {:?}", pg.pid());
    /// # }
    /// ```
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.process.lock().unwrap();
        let child = guard.as_mut()?;
        matches!(child.try_wait(), Ok(None)).then(|| child.id())
    }

    /// Whether the server process is running (it may still be starting up).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// if !pg.is_running() { println!("down"); }
    /// # }
    /// ```
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// The pids of every process of this server: the postmaster and its children
    /// (checkpointer, walwriter, backends, ...).
    ///
    /// ```no_run
    /// # fn example(pg: &zkfence_testcontainers::Postgres) {
    /// println!("{} processes", pg.pids().len());
    /// # }
    /// ```
    pub fn pids(&self) -> Vec<u32> {
        pids_matching(&self.marker)
    }

    /// Stops the server with a fast shutdown (SIGINT: open transactions are rolled back and
    /// clients disconnected, then a checkpoint), or SIGKILL if it has not exited after 10 s.
    /// Blocks the calling thread meanwhile. Does nothing if it is not running.
    ///
    /// ```no_run
    /// # async fn example(pg: &zkfence_testcontainers::Postgres) -> Result<(), zkfence_testcontainers::HarnessError> {
    /// pg.stop();
    /// // ... the database is down: clients get "connection refused" ...
    /// pg.start().await?;
    /// # Ok(()) }
    /// ```
    pub fn stop(&self) {
        let child = self.process.lock().unwrap().take();
        let Some(mut child) = child else {
            return;
        };
        // Only to the postmaster: it tells its children (which are in groups of their own).
        // SAFETY: kill(2) has no memory-safety preconditions; the child is not reaped yet,
        // so its pid cannot have been reused.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGINT);
        }
        let deadline = Instant::now() + STOP_GRACE;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_and_reap(child);
        self.kill_leftovers();
    }

    /// Crashes the server: SIGKILL to the postmaster and then to every process of this
    /// server, and waits (up to 10 s) until they are gone. The next
    /// [`start`](Self::start) runs crash recovery. Does nothing if it is not running.
    ///
    /// ```no_run
    /// # async fn example(pg: &zkfence_testcontainers::Postgres) -> Result<(), zkfence_testcontainers::HarnessError> {
    /// pg.kill();
    /// pg.start().await?;
    /// # Ok(()) }
    /// ```
    pub fn kill(&self) {
        let child = self.process.lock().unwrap().take();
        if let Some(child) = child {
            kill_and_reap(child);
        }
        self.kill_leftovers();
    }

    /// Starts the server again after [`stop`](Self::stop) or [`kill`](Self::kill), on the
    /// same port with the same data, and waits (up to 60 s) until it accepts connections.
    /// Does nothing but wait if it is running.
    ///
    /// ```no_run
    /// # async fn example(pg: &zkfence_testcontainers::Postgres) -> Result<(), zkfence_testcontainers::HarnessError> {
    /// pg.stop();
    /// pg.start().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(&self) -> Result<(), HarnessError> {
        if !self.is_running() {
            self.spawn()?;
        }
        self.wait_ready(Instant::now() + Duration::from_secs(60))
            .await
    }

    // ---- internals ----

    /// SIGKILLs every process still marked as ours (children outlive a killed postmaster
    /// for a moment) and waits until none is left, so that a new postmaster does not find
    /// the old shared memory still attached.
    fn kill_leftovers(&self) {
        let deadline = Instant::now() + KILL_WAIT;
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                self.remove_stale_shm();
                return;
            }
            if Instant::now() >= deadline {
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

    /// Removes the System V shared memory segment of a server that did not shut down
    /// cleanly (a clean shutdown removes it and the pid file itself). The segment would
    /// otherwise stay until the next start in the same dir, which, for a dir about to be
    /// removed, is never. Only called once none of our processes is left.
    fn remove_stale_shm(&self) {
        let Ok(text) = fs::read_to_string(self.data.join(PID_FILE)) else {
            return;
        };
        let shmid = text
            .lines()
            .nth(6)
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|id| id.parse::<libc::c_int>().ok());
        if let Some(shmid) = shmid {
            // SAFETY: IPC_RMID takes no buffer. The id is the one our server wrote, and it
            // stays allocated (so cannot be reused) until removed, here or by a new server
            // in this dir, which would have rewritten the pid file.
            unsafe {
                libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut());
            }
            // A removed segment goes once its last process detaches, and a process being
            // killed shows no command line (it matches no marker) a moment before it has
            // detached: wait for the segment itself, so nothing of the server stays once
            // `kill` returns. (Seen: the segment still listed just after `kill`, 4 runs in
            // 20 of `stop_start_and_kill_keep_the_port_and_committed_data`.)
            let deadline = Instant::now() + KILL_WAIT;
            loop {
                // SAFETY: shmid_ds is plain data, for which all zeroes is a valid value.
                let mut stat: libc::shmid_ds = unsafe { std::mem::zeroed() };
                // SAFETY: `stat` is a valid, writable shmid_ds for IPC_STAT to fill.
                let listed = unsafe { libc::shmctl(shmid, libc::IPC_STAT, &mut stat) } == 0;
                if !listed || Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Done with this segment: a second call must not remove a reused id.
        let _ = fs::remove_file(self.data.join(PID_FILE));
    }

    /// A command for one of the server binaries, run as the unprivileged owner when we are
    /// root, in a process group of its own, output appended to the log.
    fn command(&self, program: &str) -> Result<Command, HarnessError> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        writeln!(log, "==== zkfence-testcontainers: {program} ====")?;
        let mut cmd = Command::new(self.bin.join(program));
        cmd.current_dir(&self.dir_path)
            // Messages in English, which `log_shows_bind_failure` reads; no locale files
            // needed.
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if let Some((uid, gid)) = self.owner {
            // std drops the supplementary groups too when a root process sets a uid.
            cmd.uid(uid).gid(gid);
        }
        Ok(cmd)
    }

    async fn initdb(&self, deadline: Instant) -> Result<(), HarnessError> {
        let mut cmd = self.command("initdb")?;
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-U", &self.user, "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync", "--no-instructions"]);
        let mut child = cmd.spawn()?;
        loop {
            if let Some(status) = child.try_wait()? {
                if status.success() {
                    return Ok(());
                }
                return Err(self.failed(format!("initdb failed ({status})")));
            }
            if Instant::now() >= deadline {
                kill_and_reap(child);
                return Err(self.failed("initdb did not finish in time".into()));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Launches the postmaster on the current port.
    fn spawn(&self) -> Result<(), HarnessError> {
        let mut cmd = self.command("postgres")?;
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port().to_string()]);
        for setting in [
            format!("listen_addresses={HOST}"),
            // TCP only: no socket file to place, and none left in /var/run.
            "unix_socket_directories=".into(),
            format!("cluster_name={}", self.marker),
            // Dynamic shared memory as files in the data dir, which goes with the dir
            // (POSIX segments of a killed server would stay in /dev/shm).
            "dynamic_shared_memory_type=mmap".into(),
            "shared_buffers=16MB".into(),
            "max_connections=100".into(),
            "fsync=off".into(),
            "full_page_writes=off".into(),
        ] {
            cmd.arg("-c").arg(setting);
        }
        let child = cmd.spawn()?;
        tracing::debug!(pid = child.id(), port = self.port(), "spawned PostgreSQL");
        let old = self.process.lock().unwrap().replace(child);
        if let Some(old) = old {
            kill_and_reap(old);
        }
        Ok(())
    }

    /// Polls `pg_isready` until the server accepts connections; fails early if it exited.
    async fn wait_ready(&self, deadline: Instant) -> Result<(), HarnessError> {
        loop {
            let ready = tokio::process::Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", HOST, "-p", &self.port().to_string(), "-t", "2"])
                .args(["-U", &self.user, "-d", "postgres"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .status()
                .await?;
            if ready.success() {
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
                return Err(self.failed("the server did not accept connections in time".into()));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    async fn create_database(&self, deadline: Instant) -> Result<(), HarnessError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let create = tokio::process::Command::new(self.bin.join("createdb"))
            .args(["-h", HOST, "-p", &self.port().to_string(), "-U", &self.user])
            .arg(&self.database)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = match tokio::time::timeout(left.max(Duration::from_secs(1)), create).await {
            Ok(out) => out?,
            Err(_) => return Err(self.failed("createdb did not finish in time".into())),
        };
        if !out.status.success() {
            return Err(self.failed(format!(
                "createdb {} failed ({}): {}",
                self.database,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    fn log_shows_bind_failure(&self) -> bool {
        let text = read_tail(&self.log, 16 * 1024);
        let last_start = text
            .rfind("==== zkfence-testcontainers: postgres")
            .unwrap_or(0);
        let text = &text[last_start..];
        text.contains("could not bind") || text.contains("Address already in use")
    }

    fn failed(&self, what: String) -> HarnessError {
        HarnessError::Postgres {
            what,
            log_tail: self.log_tail(LOG_LINES),
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "zkfence-testcontainers: PostgreSQL log of {}:\n{}",
                self.dir_path.display(),
                self.log_tail(LOG_LINES)
            );
        }
        self.stop();
        self.kill_leftovers();
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                tracing::warn!(%e, "could not remove the PostgreSQL dir");
            }
        }
        if let Some(w) = self.watchdog.lock().unwrap().take() {
            w.dismiss();
        }
    }
}

fn is_executable(p: &Path) -> bool {
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "postgres", "pg_isready", "createdb"]
        .iter()
        .all(|b| is_executable(&dir.join(b)))
}

/// Whether a server can be started here (binaries, and the `postgres` user when we are
/// root), without starting anything: the errors [`PostgresBuilder::start`] would give first.
#[cfg(feature = "chaos")]
pub(crate) fn check_available() -> Result<(), HarnessError> {
    find_bin_dir()?;
    unprivileged_owner()?;
    Ok(())
}

/// `$PG_BINDIR` if set, else the newest `/usr/lib/postgresql/<major>/bin` that has the
/// server binaries.
fn find_bin_dir() -> Result<PathBuf, HarnessError> {
    if let Some(dir) = env::var_os("PG_BINDIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if has_server_binaries(&dir) {
            return Ok(dir);
        }
        return Err(HarnessError::PostgresNotFound {
            searched: format!(
                "$PG_BINDIR = {} (needs initdb, postgres, pg_isready, createdb)",
                dir.display()
            ),
        });
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(DEBIAN_PG_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            // "15", "9.6": compare numerically, so that 10 is newer than 9.6.
            let version = name
                .split('.')
                .map(|p| p.parse::<u32>().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, bin)| has_server_binaries(bin))
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Ok(bin),
        None => Err(HarnessError::PostgresNotFound {
            searched: format!("$PG_BINDIR (unset), {DEBIAN_PG_DIR}/*/bin"),
        }),
    }
}

/// The (uid, gid) of the `postgres` user when we run as root (PostgreSQL refuses to run as
/// root), `None` otherwise.
fn unprivileged_owner() -> Result<Option<(u32, u32)>, HarnessError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new("postgres").unwrap();
    // SAFETY: `name` is a valid C string; the returned record is read at once, before any
    // other call that could overwrite it (getpwnam's static buffer; this harness makes no
    // other passwd lookups).
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(HarnessError::PostgresNotFound {
            searched: "the `postgres` user (PostgreSQL does not run as root; the package \
                       creates that user)"
                .into(),
        });
    }
    // SAFETY: non-null, points at getpwnam's record.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok(Some((uid, gid)))
}

fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), HarnessError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    Ok(())
}
