//! A throwaway MariaDB server on loopback.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::server::{find_program, ServerProcess, Spec, HOST};
use crate::HarnessError;

/// The user and database every instance has.
const USER: &str = "zkfence";
const DATABASE: &str = "zkfence";

/// A throwaway MariaDB server: Debian's `mariadb-server` (`mariadbd`), a data directory made
/// by `mariadb-install-db` in a temporary directory, listening on `127.0.0.1` on a free port,
/// with a user `zkfence` (no password, every privilege) and a database `zkfence`.
///
/// When the test runs as root (as CI does), the data belongs to and the server runs as the
/// unprivileged `mysql` user the package created (`mariadbd` refuses root). Tuned for tests:
/// `innodb_flush_log_at_trx_commit=2`, so a commit is written to the operating system at
/// once (it survives [`kill`](Self::kill)) but fsynced once a second (a crash of the
/// *machine* may lose the last second); no binary log. InnoDB is the default engine; the
/// isolation level is MariaDB's default, REPEATABLE READ.
///
/// Dropping it stops the server (SIGTERM: a clean shutdown; SIGKILL after 10 s) and removes
/// the directory; if the thread is panicking it first prints the end of the error log.
/// Should the owning process die without running `Drop`, a watchdog process kills the server
/// and removes the directory.
///
/// # Requirements
///
/// `apt-get install -y mariadb-server` (`/usr/sbin/mariadbd` and `mariadb-install-db`; the
/// package's system service is not used).
///
/// # Example
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_testcontainers::MariaDb;
///
/// let db = MariaDb::launch().await?;
/// // e.g. mysql://zkfence@127.0.0.1:23456/zkfence
/// println!("connect your client to {}", db.url());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MariaDb {
    server: ServerProcess,
}

impl MariaDb {
    /// Makes a data directory (`mariadb-install-db`) in a new temporary directory, starts
    /// the server on a free loopback port and returns once it accepts the `zkfence` user.
    ///
    /// # Notable errors
    ///
    /// - [`HarnessError::ServerNotFound`] (saying what to install) if `mariadbd` or
    ///   `mariadb-install-db` is missing, or, as root, the `mysql` user.
    /// - [`HarnessError::Server`] with the log's tail if a step fails or the server does not
    ///   serve within 60 s.
    ///
    /// # Cancel safety
    ///
    /// Cancelling stops and removes the half-started server (its `Drop` runs).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// let db = zkfence_testcontainers::MariaDb::launch().await?;
    /// # Ok(()) }
    /// ```
    pub async fn launch() -> Result<MariaDb, HarnessError> {
        let program = find_program(
            "MariaDB",
            &[
                "/usr/sbin/mariadbd",
                "/usr/sbin/mysqld",
                "/usr/local/bin/mariadbd",
            ],
            "mariadb-server",
        )?;
        let install = find_program(
            "MariaDB",
            &["/usr/bin/mariadb-install-db", "/usr/bin/mysql_install_db"],
            "mariadb-server",
        )?;
        let server = ServerProcess::prepare(Spec {
            name: "MariaDB",
            prefix: "zkmaria-",
            program,
            run_as: Some("mysql"),
            ports: 1,
            args,
            probe: |port| Box::pin(probe_login(port)),
            bind_failure: &["Address already in use", "Do you already have another"],
            stop_signal: libc::SIGTERM,
        })?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let dir = server.dir().to_path_buf();
        // Run at every start: creates the user and the database if missing.
        let init = dir.join("init.sql");
        std::fs::write(
            &init,
            format!(
                "CREATE DATABASE IF NOT EXISTS {DATABASE};\n\
                 CREATE USER IF NOT EXISTS '{USER}'@'{HOST}';\n\
                 GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'{HOST}';\n"
            ),
        )?;
        server.give(&init)?;
        // Temporary tables of its own: instances made at once collided in the shared /tmp
        // ("Unknown table 'mysql.tmp_user_sys'" from mariadb-install-db, 1 run in 4 of
        // two_of_each_in_parallel_do_not_collide on a loaded machine).
        let tmp = dir.join("tmp");
        std::fs::create_dir(&tmp)?;
        server.give(&tmp)?;
        let mut cmd = server.command(&install)?;
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(["--user=mysql", "--auth-root-authentication-method=normal"])
            .args(["--skip-test-db", "--basedir=/usr"]);
        server.run_step(cmd, "mariadb-install-db", deadline).await?;
        server.first_start(deadline).await?;
        tracing::debug!(port = server.port(), dir = %dir.display(), "MariaDB serving");
        Ok(MariaDb { server })
    }

    /// A connection URL, `mysql://zkfence@127.0.0.1:PORT/zkfence` (no password).
    ///
    /// ```no_run
    /// # fn example(db: &zkfence_testcontainers::MariaDb) {
    /// assert!(db.url().starts_with("mysql://zkfence@127.0.0.1:"));
    /// # }
    /// ```
    pub fn url(&self) -> String {
        format!("mysql://{USER}@{HOST}:{}/{DATABASE}", self.port())
    }

    /// The user to log in as, `zkfence` (no password).
    ///
    /// ```no_run
    /// # fn example(db: &zkfence_testcontainers::MariaDb) {
    /// assert_eq!(db.user(), "zkfence");
    /// # }
    /// ```
    pub fn user(&self) -> &str {
        USER
    }

    /// The database made for the test, `zkfence`.
    ///
    /// ```no_run
    /// # fn example(db: &zkfence_testcontainers::MariaDb) {
    /// assert_eq!(db.database(), "zkfence");
    /// # }
    /// ```
    pub fn database(&self) -> &str {
        DATABASE
    }
}

super::shared_methods!(MariaDb);

fn args(dir: &Path, ports: &[u16]) -> Vec<OsString> {
    let d = |name: &str| dir.join(name).display().to_string();
    [
        // First: no /etc/mysql configuration is read.
        "--no-defaults".to_string(),
        "--user=mysql".into(),
        format!("--datadir={}", d("data")),
        format!("--port={}", ports[0]),
        format!("--bind-address={HOST}"),
        format!("--socket={}", d("mysqld.sock")),
        format!("--pid-file={}", d("mysqld.pid")),
        // The engine's log, which the errors and the panic report show.
        format!("--log-error={}", d("zkmaria.log")),
        format!("--init-file={}", d("init.sql")),
        format!("--tmpdir={}", d("tmp")),
        "--skip-log-bin".into(),
        "--skip-name-resolve".into(),
        "--innodb-buffer-pool-size=16M".into(),
        "--innodb-log-file-size=16M".into(),
        "--innodb-flush-log-at-trx-commit=2".into(),
        "--max-connections=200".into(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// True once the server greets a client with MySQL protocol 10 (the first packet's payload
/// starts with 10) and has run its init file (the greeting comes only after that).
async fn probe_login(port: u16) -> bool {
    use tokio::io::AsyncReadExt;
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect((HOST, port)).await.ok()?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).await.ok()?;
        Some(head[4] == 10)
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Some(true))
    )
}
