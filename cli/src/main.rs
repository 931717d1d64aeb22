//! `zkfence`: distributed locks and leader election on Apache ZooKeeper, from the shell.
//!
//! The operator's face of the library: `exec` runs a command under a lock (like `flock`,
//! `etcdctl lock`, `consul lock`), `elect` runs one only while leading, `status` and `leader`
//! show a queue, `ensemble up` starts a throwaway local ensemble, and `demo` plays every
//! promise of the library against a real ensemble.

mod child;
mod clock;
mod demo;
mod duration;
mod elect;
mod ensemble;
mod exec;
mod exit;
mod gc;
mod metrics_endpoint;
mod progress;
mod signals;
mod status;
mod supervisor;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use zkfence::{NodeFormat, Session, SessionOptions};

use crate::exit::Failure;

#[derive(Parser, Debug)]
#[command(
    name = "zkfence",
    version,
    about = "Distributed locks and leader election on Apache ZooKeeper: queue-fair, fenced, session-tied",
    after_long_help = exit::HELP,
    after_help = "Run `zkfence --help` for the exit codes."
)]
struct Cli {
    /// ZooKeeper servers: host:port[,host:port...][/chroot].
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_CONNECT",
        default_value = "127.0.0.1:2181",
        value_name = "HOSTS"
    )]
    connect: String,

    /// The session timeout to ask for: a crashed holder's lock frees about this long after it
    /// dies (the ensemble clamps it to its own bounds). E.g. "10s", "500ms", "1m".
    #[arg(long, global = true, default_value = "10s", value_parser = duration::parse, value_name = "DUR")]
    session_timeout: Duration,

    /// More log output on stderr: -v info, -vv debug, -vvv trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    /// Log filter for stderr, in `RUST_LOG` syntax (e.g. "zkfence=debug"); overrides -v.
    #[arg(long, global = true, env = "ZKFENCE_LOG", value_name = "FILTER")]
    log_level: Option<String>,

    /// Connect over TLS, trusting the CA certificates (PEM) in FILE to sign the servers'
    /// certificates; --connect then names the servers' secureClientPorts. The servers'
    /// certificates must name the host they are reached by.
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_TLS_CA",
        value_name = "FILE",
        help_heading = "Security"
    )]
    tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) for mutual TLS; with the servers' x509 auth
    /// provider its subject is our identity, and our nodes are ours alone. Needs --tls-key
    /// and --tls-ca.
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key",
        help_heading = "Security"
    )]
    tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert",
        help_heading = "Security"
    )]
    tls_key: Option<PathBuf>,

    /// Authenticate with SASL DIGEST-MD5 as USER; the password comes from the environment
    /// variable ZKFENCE_SASL_PASSWORD or from --sasl-password-file, never from the command
    /// line (which `ps` shows). Our nodes are then ours alone.
    ///
    /// Example: ZKFENCE_SASL_PASSWORD="$(cat /run/secrets/zk)" zkfence --sasl-user payments exec /locks/pay -- ./pay.sh
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_SASL_USER",
        value_name = "USER",
        help_heading = "Security"
    )]
    sasl_user: Option<String>,

    /// Read the SASL password from the first line of FILE (instead of ZKFENCE_SASL_PASSWORD).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires = "sasl_user",
        help_heading = "Security"
    )]
    sasl_password_file: Option<PathBuf>,

    /// Authenticate with ZooKeeper's `digest` scheme as USER: `--auth digest:USER`. The
    /// password comes from ZKFENCE_AUTH_PASSWORD or --auth-password-file, never from the
    /// command line. Our nodes are then ours alone.
    #[arg(long, global = true, value_name = "digest:USER", value_parser = parse_auth, help_heading = "Security")]
    auth: Option<String>,

    /// Read the --auth password from the first line of FILE (instead of ZKFENCE_AUTH_PASSWORD).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires = "auth",
        help_heading = "Security"
    )]
    auth_password_file: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run CMD while holding the lock LOCKPATH; release it when CMD exits.
    ///
    /// CMD sees ZKFENCE_TOKEN (the fencing token: pass it to every write the lock protects),
    /// ZKFENCE_LOCK_PATH and ZKFENCE_NODE in its environment. zkfence exits with CMD's exit
    /// code once CMD's whole process group is gone, then releases the lock.
    ///
    /// CMD never outlives the lock. It runs in a process group of its own under a small
    /// supervisor process that keeps its own copy of the lease's deadline, which zkfence
    /// extends each time the lease is renewed:
    ///
    /// - zkfence killed (kill -9, OOM, crash): the supervisor SIGKILLs CMD's group at once.
    ///
    /// - the lease stops being renewed (zkfence frozen, the ensemble silent) or is lost: the
    ///   group gets SIGTERM and, at the deadline (before the ensemble can expire the session
    ///   and let the next holder in), SIGKILL; zkfence exits 76. The SIGTERM comes --grace
    ///   before the deadline, but never earlier than half of what the lease had left at its
    ///   last renewal (about 0.3 x the session timeout): a --grace longer than that is cut
    ///   short, and CMD gets SIGKILL at the deadline whatever --grace says.
    ///
    /// - SIGINT, SIGTERM and SIGHUP sent to zkfence go to CMD's whole group (SIGKILL follows
    ///   after --grace); the lock is released once the group is gone.
    ///
    /// Examples:
    ///
    ///   zkfence exec /locks/backup -- ./backup.sh           one at a time, waiting in line
    ///
    ///   zkfence exec --no-wait /locks/backup -- ./backup.sh  exit 75 at once if taken (cron)
    ///
    ///   zkfence exec --shared /locks/catalog -- ./read.sh    readers together, writers alone
    ///
    ///   zkfence exec --limit 3 /limits/api -- ./call.sh      at most 3 at once
    Exec {
        /// The lock directory, e.g. /locks/backup.
        lockpath: String,
        /// Give up waiting after DUR and exit 75; "0" never waits behind a holder.
        #[arg(long, value_parser = duration::parse, value_name = "DUR")]
        timeout: Option<Duration>,
        /// Do not wait: exit 75 at once if the lock is taken (same as --timeout 0), like
        /// `flock -n`. E.g. `zkfence exec --no-wait /locks/report -- ./report.sh` in cron.
        #[arg(long, short = 'n', conflicts_with = "timeout")]
        no_wait: bool,
        /// Take the lock shared (the read side of a read/write lock): runs with other
        /// --shared runs at once, never with a plain `exec` (a writer) on the same path.
        /// E.g. `zkfence exec --shared /locks/catalog -- ./export.sh`.
        #[arg(long, short = 's', conflicts_with = "limit")]
        shared: bool,
        /// Up to N runs at once on LOCKPATH (a semaphore with N permits; every run on the
        /// path must use the same N). E.g. `zkfence exec --limit 3 /limits/api -- ./sync.sh`.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "format")]
        limit: Option<u32>,
        /// Queue node layout: curator (Apache Curator, the default) or kazoo (Python Kazoo).
        #[arg(long, value_parser = parse_format, value_name = "FORMAT")]
        format: Option<NodeFormat>,
        /// Our name in `zkfence status` (default: CMD's name).
        #[arg(long, value_name = "TEXT")]
        id: Option<String>,
        /// How long CMD's group may take to exit after SIGTERM before it gets SIGKILL. When the
        /// lease is running out, cut to what the lease has left (see above).
        #[arg(long, default_value = "5s", value_parser = duration::parse, value_name = "DUR")]
        grace: Duration,
        /// Serve zkfence's metrics as Prometheus text on ADDR (e.g. 127.0.0.1:9464) while
        /// running: acquire and hold times, losses, timeouts, leases held (the zkfence crate
        /// docs' Metrics table).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<SocketAddr>,
        /// The command and its arguments (after `--`).
        #[arg(required = true, last = true, value_name = "CMD")]
        cmd: Vec<String>,
    },

    /// Run CMD only while leading the election ELECTIONPATH.
    ///
    /// CMD runs under the same supervision as `exec` (its own process group, a supervisor
    /// holding the leadership's deadline): it is stopped before the next leader can start,
    /// also when zkfence is killed or frozen. On leadership loss CMD's group gets SIGTERM,
    /// and SIGKILL by the deadline (--grace, cut short as for `exec`), and zkfence campaigns
    /// again; when CMD exits on its own, zkfence resigns and campaigns again. With --once it
    /// leads at most once and exits with CMD's code (76 if leadership was lost). CMD sees
    /// ZKFENCE_TOKEN, ZKFENCE_LOCK_PATH, ZKFENCE_NODE and ZKFENCE_LEADER_ID.
    ///
    /// Example: zkfence elect /election/scheduler --id "$(hostname)" -- ./scheduler
    Elect {
        /// The election directory, e.g. /election/scheduler.
        electionpath: String,
        /// This candidate's name, shown by `zkfence leader`.
        #[arg(long, value_name = "NAME")]
        id: String,
        /// Lead at most once, then exit.
        #[arg(long)]
        once: bool,
        /// How long CMD's group may take to exit after SIGTERM before it gets SIGKILL; cut to
        /// what the leadership has left when it is running out.
        #[arg(long, default_value = "5s", value_parser = duration::parse, value_name = "DUR")]
        grace: Duration,
        /// Serve zkfence's metrics as Prometheus text on ADDR (e.g. 127.0.0.1:9464) while
        /// running, among them `zkfence_leader{path}`: 1 while this candidate leads.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<SocketAddr>,
        /// The command and its arguments (after `--`).
        #[arg(required = true, last = true, value_name = "CMD")]
        cmd: Vec<String>,
    },

    /// Show who holds the lock LOCKPATH and who waits, in queue order.
    Status {
        /// The lock directory.
        lockpath: String,
        /// Print JSON: {"path", "holder": CONTENDER|null, "waiters": [CONTENDER...]}.
        #[arg(long)]
        json: bool,
    },

    /// Show the leader of the election ELECTIONPATH and the candidates behind it.
    Leader {
        /// The election directory.
        electionpath: String,
        /// Print JSON: {"path", "holder": CONTENDER|null (the leader), "waiters": [...]}.
        #[arg(long)]
        json: bool,
    },

    /// Remove the empty lock directories under PATH (dry run unless --apply).
    ///
    /// A directory counts as empty if it is persistent, holds no data and everything below
    /// it is empty directories; one with a queue node or any node with data below is never
    /// touched, nor is PATH itself. Each delete is conditional on what was read, so a
    /// directory that gains a child meanwhile is kept (and reported).
    ///
    /// Example: zkfence gc /locks/seats            # lists what it would remove
    ///
    ///          zkfence gc /locks/seats --apply    # removes it
    Gc {
        /// The tree to clean, e.g. /locks.
        path: String,
        /// Remove them (the default only lists them).
        #[arg(long)]
        apply: bool,
    },

    /// Throwaway local ZooKeeper ensembles, for trying zkfence out.
    #[command(subcommand)]
    Ensemble(EnsembleCommand),

    /// Start a 3-node ensemble and play every promise of zkfence against it, as a timeline.
    ///
    /// Contention (FIFO, growing tokens), a fenced store refusing a paused holder's late
    /// write, a crashed holder's lock freed after the session timeout, the ZooKeeper leader
    /// killed while locks are held, and leader-election failover. Exits 0 only if every step
    /// behaved as promised.
    Demo,
}

#[derive(Subcommand, Debug)]
enum EnsembleCommand {
    /// Start an ensemble, print its connect string (the first line of stdout), and run until
    /// Ctrl-C or SIGTERM, then stop it.
    Up {
        /// Number of servers.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// ZooKeeper's tickTime: sessions may be as short as 2 ticks.
        #[arg(long, default_value = "200ms", value_parser = duration::parse, value_name = "DUR")]
        tick_time: Duration,
        /// The longest session timeout the servers grant.
        #[arg(long, default_value = "60s", value_parser = duration::parse, value_name = "DUR")]
        max_session_timeout: Duration,
    },
}

fn parse_format(s: &str) -> Result<NodeFormat, String> {
    s.parse()
}

/// `digest:USER` to USER. A password in the value is refused: the command line is public.
fn parse_auth(s: &str) -> Result<String, String> {
    let Some(user) = s.strip_prefix("digest:") else {
        return Err("expected digest:USER (the only scheme supported here)".into());
    };
    if user.contains(':') {
        return Err(
            "do not put the password on the command line (`ps` shows it): pass \
                    digest:USER and the password in ZKFENCE_AUTH_PASSWORD or --auth-password-file"
                .into(),
        );
    }
    if user.is_empty() {
        return Err("expected digest:USER with a user name".into());
    }
    Ok(user.to_string())
}

/// A secret from the first line of `file` if given, else from the environment variable `var`.
fn read_secret(file: Option<&Path>, var: &str, what: &str) -> Result<String, Failure> {
    match file {
        Some(path) => std::fs::read_to_string(path)
            .map(|text| text.lines().next().unwrap_or_default().to_string())
            .map_err(|e| {
                Failure::new(
                    exit::USAGE,
                    format!("cannot read the {what} from {}: {e}", path.display()),
                )
            }),
        None => std::env::var(var).map_err(|_| {
            Failure::new(
                exit::USAGE,
                format!("the {what} is missing: set {var}, or pass its file"),
            )
        }),
    }
}

/// How the CLI authenticates and encrypts: the flags, with the secrets already read.
#[derive(Clone, Default)]
pub(crate) struct Security {
    tls_ca: Option<PathBuf>,
    tls_identity: Option<(PathBuf, PathBuf)>,
    sasl: Option<(String, String)>,
    digest: Option<(String, String)>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("Security")
            .field("tls_ca", &self.tls_ca)
            .field("tls_identity", &self.tls_identity)
            .field("sasl_user", &self.sasl.as_ref().map(|(u, _)| u))
            .field("digest_user", &self.digest.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl Security {
    fn from_cli(cli: &Cli) -> Result<Security, Failure> {
        if cli.tls_cert.is_some() && cli.tls_ca.is_none() {
            return Err(Failure::new(
                exit::USAGE,
                "--tls-cert needs --tls-ca: the CA that signed the servers' certificates",
            ));
        }
        let sasl = match &cli.sasl_user {
            None => None,
            Some(user) => Some((
                user.clone(),
                read_secret(
                    cli.sasl_password_file.as_deref(),
                    "ZKFENCE_SASL_PASSWORD",
                    "SASL password",
                )?,
            )),
        };
        let digest = match &cli.auth {
            None => None,
            Some(user) => Some((
                user.clone(),
                read_secret(
                    cli.auth_password_file.as_deref(),
                    "ZKFENCE_AUTH_PASSWORD",
                    "--auth password",
                )?,
            )),
        };
        Ok(Security {
            tls_ca: cli.tls_ca.clone(),
            tls_identity: cli.tls_cert.clone().zip(cli.tls_key.clone()),
            sasl,
            digest,
        })
    }

    fn apply(&self, mut options: SessionOptions) -> SessionOptions {
        if let Some(ca) = &self.tls_ca {
            options = options.tls_ca_file(ca);
        }
        if let Some((cert, key)) = &self.tls_identity {
            options = options.tls_identity(cert, key);
        }
        if let Some((user, password)) = &self.sasl {
            options = options.sasl_digest(user, password);
        }
        if let Some((user, password)) = &self.digest {
            options = options.auth("digest", format!("{user}:{password}").as_bytes());
        }
        options
    }
}

/// What every command that talks to ZooKeeper needs.
#[derive(Debug, Clone)]
pub(crate) struct Global {
    pub(crate) connect: String,
    pub(crate) session_timeout: Duration,
    pub(crate) security: Security,
}

impl Global {
    /// Connects a session, or fails with exit code 3 (2 for a bad connect string).
    pub(crate) async fn connect(&self) -> Result<Session, Failure> {
        Session::connect(
            &self.connect,
            self.security
                .apply(SessionOptions::new().session_timeout(self.session_timeout)),
        )
        .await
        .map_err(Failure::from)
    }
}

/// Closes `session` and waits, at most `within`, until the ensemble has closed it, which
/// removes every node the session still has. Returns false if that was not confirmed (the
/// nodes then disappear when the session expires).
///
/// Every other handle on the session (locks, leases) must be dropped first.
pub(crate) async fn close(session: Session, within: Duration) -> bool {
    let mut states = session.client().state_watcher();
    drop(session);
    let closed = async {
        // Background deletes still hold the client; the session closes after they finish.
        while !states.peek_state().is_terminated() {
            states.changed().await;
        }
    };
    tokio::time::timeout(within, closed).await.is_ok()
}

/// Releases a lease and closes its session, waiting at most about one session timeout.
/// Says so on stderr if the ensemble did not confirm.
pub(crate) async fn release_and_close(lease: zkfence::Lease, session: Session) {
    let path = lease.lock_path().to_string();
    let within = session.session_timeout().max(Duration::from_secs(1));
    let released = tokio::time::timeout(within, lease.release()).await;
    let confirmed = matches!(released, Ok(Ok(())));
    if !confirmed {
        let why = match released {
            Ok(Err(e)) => e.to_string(),
            _ => format!("no answer within {within:?}"),
        };
        eprintln!("zkfence: could not confirm the release of {path} ({why}); the lock frees itself when the session expires");
    }
    close(session, within).await;
}

fn init_logging(verbose: u8, filter: Option<&str>) {
    let default = match verbose {
        0 => "error",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_new(filter.unwrap_or(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(supervisor::MODE) {
        supervisor::main(&args[2..]);
    }
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.log_level.as_deref());
    let security = match Security::from_cli(&cli) {
        Ok(security) => security,
        Err(failure) => {
            eprintln!("zkfence: {}", failure.message);
            return ExitCode::from(failure.code);
        }
    };
    let global = Global {
        connect: cli.connect,
        session_timeout: cli.session_timeout,
        security,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zkfence: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Exec {
                lockpath,
                timeout,
                no_wait,
                shared,
                limit,
                format,
                id,
                grace,
                metrics_addr,
                cmd,
            } => {
                if let Some(addr) = metrics_addr {
                    metrics_endpoint::serve(addr)?;
                }
                exec::run(
                    &global,
                    exec::Options {
                        lockpath,
                        timeout: if no_wait {
                            Some(Duration::ZERO)
                        } else {
                            timeout
                        },
                        format: format.unwrap_or(NodeFormat::Curator),
                        id,
                        grace,
                        shared,
                        limit: limit.map(|n| n as usize),
                        cmd,
                    },
                )
                .await
            }
            Command::Elect {
                electionpath,
                id,
                once,
                grace,
                metrics_addr,
                cmd,
            } => {
                if let Some(addr) = metrics_addr {
                    metrics_endpoint::serve(addr)?;
                }
                elect::run(
                    &global,
                    elect::Options {
                        path: electionpath,
                        id,
                        once,
                        grace,
                        cmd,
                    },
                )
                .await
            }
            Command::Status { lockpath, json } => {
                status::run(&global, &lockpath, json, status::Kind::Lock).await
            }
            Command::Leader { electionpath, json } => {
                status::run(&global, &electionpath, json, status::Kind::Election).await
            }
            Command::Gc { path, apply } => gc::run(&global, &path, apply).await,
            Command::Ensemble(EnsembleCommand::Up {
                nodes,
                tick_time,
                max_session_timeout,
            }) => ensemble::up(nodes, tick_time, max_session_timeout).await,
            Command::Demo => demo::run().await,
        }
    });
    // Background deletes may still be queued on the runtime; every command has already
    // awaited what it promised, so do not wait for stragglers.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zkfence: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
