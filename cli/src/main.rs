//! `zkfence`: distributed locks and leader election on Apache ZooKeeper, from the shell.
//!
//! The operator's face of the library: `exec` runs a command under a lock (like `flock`,
//! `etcdctl lock`, `consul lock`), `elect` runs one only while leading, `status` and `leader`
//! show a queue, `ensemble up` starts a throwaway local ensemble, and `demo` plays every
//! promise of the library against a real ensemble.

mod chaos;
mod child;
mod clock;
mod demo;
mod duration;
mod elect;
mod ensemble;
mod exec;
mod exit;
mod gc;
mod generated;
mod metrics_endpoint;
mod progress;
mod revoke;
mod signals;
mod status;
mod stdout;
mod supervisor;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
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
pub(crate) struct Cli {
    /// More log output on stderr: -v info, -vv debug, -vvv trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = "Logging options")]
    verbose: u8,

    /// Log filter for stderr, in `RUST_LOG` syntax (e.g. "zkfence=debug"); overrides -v.
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_LOG",
        value_name = "FILTER",
        help_heading = "Logging options"
    )]
    log_level: Option<String>,

    /// The connection and security options may also come before the subcommand
    /// (`zkfence --connect HOSTS exec ...`); after it, they win.
    #[command(flatten)]
    connection: ConnectArgs,

    #[command(flatten)]
    security: SecurityArgs,

    #[command(subcommand)]
    command: Command,
}

/// Where the ensemble is and how long to try: every subcommand that talks to ZooKeeper.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Connection options")]
struct ConnectArgs {
    /// ZooKeeper servers: host:port[,host:port...][/chroot]; every host needs its port
    /// (ZooKeeper's is usually 2181). [default: 127.0.0.1:2181]
    #[arg(long, env = "ZKFENCE_CONNECT", value_name = "HOSTS")]
    connect: Option<String>,

    /// The session timeout to ask for: a crashed holder's lock frees about this long after it
    /// dies (the ensemble clamps it to its own bounds). E.g. "10s", "500ms", "1m"; a bare
    /// number is seconds. [default: 10s]
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    session_timeout: Option<Duration>,

    /// Give up connecting after DUR (exit 3), like etcdctl's --dial-timeout. A server that
    /// refuses the connection, or a host that does not resolve, fails at once. [default:
    /// the session timeout]
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    connect_timeout: Option<Duration>,

    /// The servers' tickTime (zoo.cfg), declared so the lease clock may trust a sync and
    /// keepalives need no transaction. Never lower than the servers' real tickTime: the
    /// lease clock is then only as safe as that. A session timeout too short for it is
    /// refused (exit 2). [default: undeclared: the clock trusts only committed writes]
    #[arg(long, env = "ZKFENCE_SERVER_TICK_TIME", value_parser = duration::parse, value_name = "DUR")]
    server_tick_time: Option<Duration>,
}

impl ConnectArgs {
    /// These, with `outer`'s (given before the subcommand) where these are unset.
    fn or(self, outer: &ConnectArgs) -> ConnectArgs {
        ConnectArgs {
            connect: self.connect.or_else(|| outer.connect.clone()),
            session_timeout: self.session_timeout.or(outer.session_timeout),
            connect_timeout: self.connect_timeout.or(outer.connect_timeout),
            server_tick_time: self.server_tick_time.or(outer.server_tick_time),
        }
    }
}

/// TLS and authentication: every subcommand that talks to ZooKeeper.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Security options")]
struct SecurityArgs {
    /// Connect over TLS, trusting the CA certificates (PEM) in FILE to sign the servers'
    /// certificates; --connect then names the servers' secureClientPorts. The servers'
    /// certificates must name the host they are reached by.
    #[arg(long, env = "ZKFENCE_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) for mutual TLS; with the servers' x509 auth
    /// provider its subject is our identity, and our nodes are ours alone. Needs --tls-key
    /// and --tls-ca.
    #[arg(long, env = "ZKFENCE_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "ZKFENCE_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,

    /// Authenticate with SASL DIGEST-MD5 as USER; the password comes from the environment
    /// variable ZKFENCE_SASL_PASSWORD or from --sasl-password-file, never from the command
    /// line (which `ps` shows). Our nodes are then ours alone.
    ///
    /// Example: ZKFENCE_SASL_PASSWORD="$(cat /run/secrets/zk)" zkfence exec --sasl-user payments /locks/pay ./pay.sh
    #[arg(long, env = "ZKFENCE_SASL_USER", value_name = "USER")]
    sasl_user: Option<String>,

    /// Read the SASL password from the first line of FILE (instead of ZKFENCE_SASL_PASSWORD).
    #[arg(long, value_name = "FILE")]
    sasl_password_file: Option<PathBuf>,

    /// Authenticate with ZooKeeper's `digest` scheme as USER: `--auth digest:USER`. The
    /// password comes from ZKFENCE_AUTH_PASSWORD or --auth-password-file, never from the
    /// command line. Our nodes are then ours alone.
    #[arg(long, value_name = "digest:USER", value_parser = parse_auth)]
    auth: Option<String>,

    /// Read the --auth password from the first line of FILE (instead of ZKFENCE_AUTH_PASSWORD).
    #[arg(long, value_name = "FILE")]
    auth_password_file: Option<PathBuf>,
}

impl SecurityArgs {
    fn or(self, outer: &SecurityArgs) -> SecurityArgs {
        SecurityArgs {
            tls_ca: self.tls_ca.or_else(|| outer.tls_ca.clone()),
            tls_cert: self.tls_cert.or_else(|| outer.tls_cert.clone()),
            tls_key: self.tls_key.or_else(|| outer.tls_key.clone()),
            sasl_user: self.sasl_user.or_else(|| outer.sasl_user.clone()),
            sasl_password_file: self
                .sasl_password_file
                .or_else(|| outer.sasl_password_file.clone()),
            auth: self.auth.or_else(|| outer.auth.clone()),
            auth_password_file: self
                .auth_password_file
                .or_else(|| outer.auth_password_file.clone()),
        }
    }
}

/// The options of every subcommand that talks to ZooKeeper.
#[derive(Args, Debug, Clone, Default)]
struct Remote {
    #[command(flatten)]
    connection: ConnectArgs,
    #[command(flatten)]
    security: SecurityArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(after_long_help = exit::HELP)]
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
    ///   zkfence exec /locks/backup ./backup.sh --full        one at a time, waiting in line
    ///
    ///   zkfence exec --no-wait /locks/backup ./backup.sh     exit 75 at once if taken (cron)
    ///
    ///   zkfence exec --shared /locks/catalog ./read.sh       readers together, writers alone
    ///
    ///   zkfence exec --limit 3 /limits/api ./call.sh         at most 3 at once
    ///
    /// zkfence's options go before LOCKPATH; everything after CMD is CMD's own (a `--`
    /// before CMD works too, as with flock and etcdctl lock).
    Exec {
        /// The lock directory, e.g. /locks/backup.
        lockpath: String,
        /// Give up waiting after DUR and exit 75; "0" never waits behind a holder. E.g.
        /// "30s", "500ms", "2m"; a bare number is seconds ("30" means 30s).
        #[arg(long, value_parser = duration::parse, value_name = "DUR", help_heading = "Lock options")]
        timeout: Option<Duration>,
        /// Do not wait: exit 75 at once if the lock is taken (same as --timeout 0), like
        /// `flock -n`. E.g. `zkfence exec --no-wait /locks/report ./report.sh` in cron.
        #[arg(
            long,
            short = 'n',
            conflicts_with = "timeout",
            help_heading = "Lock options"
        )]
        no_wait: bool,
        /// Take the lock shared (the read side of a read/write lock): runs with other
        /// --shared runs at once, never with a plain `exec` (a writer) on the same path.
        #[arg(
            long,
            short = 's',
            conflicts_with = "limit",
            help_heading = "Lock options"
        )]
        shared: bool,
        /// Up to N runs at once on LOCKPATH (a semaphore with N permits). Each run records
        /// its N where the others see it; a run with another N is refused (exit 2) while
        /// any holder of the first remains.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "format", help_heading = "Lock options")]
        limit: Option<u32>,
        /// Queue node layout: curator (Apache Curator, the default) or kazoo (Python Kazoo).
        #[arg(long, value_parser = parse_format, value_name = "FORMAT", help_heading = "Lock options")]
        format: Option<NodeFormat>,
        /// Our name in `zkfence status` (default: CMD's command line).
        #[arg(long, value_name = "TEXT", help_heading = "Lock options")]
        id: Option<String>,
        /// Let `zkfence revoke` (or Curator's Revoker) ask us to let go: a request is treated
        /// like SIGTERM to CMD's group (SIGKILL after --grace); the lock is released once the
        /// group is gone, and zkfence exits 79. Without it, requests are ignored.
        #[arg(long, conflicts_with = "limit", help_heading = "Lock options")]
        revocable: bool,
        /// How long CMD's group may take to exit after SIGTERM before it gets SIGKILL; cut to
        /// what the lease has left when it is running out (see above).
        #[arg(long, default_value = "5s", value_parser = duration::parse, value_name = "DUR", help_heading = "Lock options")]
        grace: Duration,
        /// Serve zkfence's metrics as Prometheus text on ADDR (e.g. 127.0.0.1:9464) while
        /// running.
        #[arg(long, value_name = "ADDR", help_heading = "Lock options")]
        metrics_addr: Option<SocketAddr>,
        /// The command and its arguments: everything after LOCKPATH (or after `--`).
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        cmd: Vec<String>,
        #[command(flatten)]
        remote: Remote,
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
    /// Example: zkfence elect /election/scheduler --id "$(hostname)" ./scheduler
    ///
    /// zkfence's options go before ELECTIONPATH; everything after CMD is CMD's own (a `--`
    /// before CMD works too).
    #[command(after_long_help = exit::HELP)]
    Elect {
        /// The election directory, e.g. /election/scheduler.
        electionpath: String,
        /// This candidate's name, shown by `zkfence leader` (default: HOST:CMD, this host's
        /// name and CMD's program name).
        #[arg(long, value_name = "NAME", help_heading = "Election options")]
        id: Option<String>,
        /// Lead at most once, then exit.
        #[arg(long, help_heading = "Election options")]
        once: bool,
        /// How long CMD's group may take to exit after SIGTERM before it gets SIGKILL; cut to
        /// what the leadership has left when it is running out.
        #[arg(long, default_value = "5s", value_parser = duration::parse, value_name = "DUR", help_heading = "Election options")]
        grace: Duration,
        /// Serve zkfence's metrics as Prometheus text on ADDR (e.g. 127.0.0.1:9464) while
        /// running, among them `zkfence_leader{path}`: 1 while this candidate leads.
        #[arg(long, value_name = "ADDR", help_heading = "Election options")]
        metrics_addr: Option<SocketAddr>,
        /// The command and its arguments: everything after ELECTIONPATH (or after `--`).
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        cmd: Vec<String>,
        #[command(flatten)]
        remote: Remote,
    },

    /// Show who holds the lock LOCKPATH and who waits, in queue order: every holder of a
    /// read/write lock (shared readers) or of a semaphore (`exec --limit`), with its kind.
    ///
    /// Says so when LOCKPATH does not exist, or holds lock directories rather than
    /// contenders. --json prints the document described in the README ("JSON output").
    #[command(after_long_help = exit::HELP)]
    Status {
        /// The lock directory.
        lockpath: String,
        /// Print JSON: {"path", "exists", "kind", "limit", "holders": [CONTENDER...],
        /// "waiters": [CONTENDER...]} (and "children" for a directory of lock directories).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },

    /// Show the leader of the election ELECTIONPATH and the candidates behind it.
    #[command(after_long_help = exit::HELP)]
    Leader {
        /// The election directory.
        electionpath: String,
        /// Print JSON: {"path", "exists", "leader": CONTENDER|null, "candidates":
        /// [CONTENDER...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },

    /// Ask the holder of the lock LOCKPATH to let go (Curator's revocation: `__REVOKE__`
    /// written as the data of the holder's node).
    ///
    /// A revocable holder stops and releases: `zkfence exec --revocable` treats it like
    /// SIGTERM to CMD's group and exits 79, and a Curator `InterProcessMutex` made revocable
    /// calls its RevocationListener. Any other holder ignores it. Nothing is released by
    /// force. Exits 1 if nobody holds the lock.
    ///
    /// Example: zkfence revoke /locks/backup
    #[command(after_long_help = exit::HELP)]
    Revoke {
        /// The lock directory.
        lockpath: String,
        /// Revoke this contender instead of the holder: its node's name under LOCKPATH (as
        /// `zkfence status --json` lists it) or its full path.
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        #[command(flatten)]
        remote: Remote,
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
    #[command(after_long_help = exit::HELP)]
    Gc {
        /// The tree to clean, e.g. /locks.
        path: String,
        /// Remove them (the default only lists them).
        #[arg(long)]
        apply: bool,
        /// Print JSON: {"path", "exists", "applied", "empty": [PATH...], "removed":
        /// [PATH...], "kept": [{"path", "reason"}...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },

    /// Throwaway local ZooKeeper ensembles, for trying zkfence out.
    #[command(subcommand)]
    Ensemble(EnsembleCommand),

    /// Print the shell completion script for SHELL on stdout.
    ///
    /// Examples:
    ///
    ///   zkfence completions bash > /etc/bash_completion.d/zkfence
    ///
    ///   zkfence completions zsh > "${fpath[1]}/_zkfence"
    ///
    ///   zkfence completions fish > ~/.config/fish/completions/zkfence.fish
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },

    /// Print the man page zkfence(1) on stdout, as roff; with SUBCOMMAND, its own page
    /// zkfence-SUBCOMMAND(1), which zkfence(1) refers to.
    ///
    /// Example: zkfence man > /usr/local/share/man/man1/zkfence.1
    ///
    ///          zkfence man exec > /usr/local/share/man/man1/zkfence-exec.1
    Man {
        /// A subcommand, e.g. exec.
        subcommand: Option<String>,
    },

    /// Start a 3-node ensemble and play every promise of zkfence against it, as a timeline.
    ///
    /// Contention (FIFO, growing tokens), a fenced store refusing a paused holder's late
    /// write, a crashed holder's lock freed after the session timeout, the ZooKeeper leader
    /// killed while locks are held, and leader-election failover. Exits 0 only if every step
    /// behaved as promised.
    Demo,

    /// Run a randomized fault campaign against a throwaway local ensemble and check its
    /// whole history.
    ///
    /// CLIENTS contender processes, each with its own session through its own connection,
    /// contend for one lock: acquire, write (token, client, sequence) to a register that a
    /// fence guards, hold a random time, release or drop. Faults from a seeded schedule start
    /// and heal meanwhile, one or more at a time. Then the checker looks for overlapping
    /// holds, tokens out of order, stale writes the fence accepted, faults not followed by
    /// a grant, and leftover nodes and processes (see the README, "zkfence chaos").
    ///
    /// Prints a one-line summary; writes DIR/history.jsonl and DIR/timeline.svg. Exits 1
    /// if the checker found a violation (each is printed with the events around it).
    ///
    /// Example: zkfence chaos --duration 10m --session-timeout 10s --tick-time 2s --seed 7
    #[command(after_long_help = exit::HELP)]
    Chaos(chaos::Args),
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
    fn from_args(args: &SecurityArgs) -> Result<Security, Failure> {
        let needs = |given: bool, what: &str, other: bool, hint: &str| {
            if given && !other {
                Err(Failure::new(exit::USAGE, format!("{what} needs {hint}")))
            } else {
                Ok(())
            }
        };
        needs(
            args.tls_cert.is_some(),
            "--tls-cert",
            args.tls_ca.is_some(),
            "--tls-ca: the CA that signed the servers' certificates",
        )?;
        needs(
            args.tls_cert.is_some(),
            "--tls-cert",
            args.tls_key.is_some(),
            "--tls-key: its private key",
        )?;
        needs(
            args.tls_key.is_some(),
            "--tls-key",
            args.tls_cert.is_some(),
            "--tls-cert: the certificate it belongs to",
        )?;
        needs(
            args.sasl_password_file.is_some(),
            "--sasl-password-file",
            args.sasl_user.is_some(),
            "--sasl-user",
        )?;
        needs(
            args.auth_password_file.is_some(),
            "--auth-password-file",
            args.auth.is_some(),
            "--auth digest:USER",
        )?;
        let sasl = match &args.sasl_user {
            None => None,
            Some(user) => Some((
                user.clone(),
                read_secret(
                    args.sasl_password_file.as_deref(),
                    "ZKFENCE_SASL_PASSWORD",
                    "SASL password",
                )?,
            )),
        };
        let digest = match &args.auth {
            None => None,
            Some(user) => Some((
                user.clone(),
                read_secret(
                    args.auth_password_file.as_deref(),
                    "ZKFENCE_AUTH_PASSWORD",
                    "--auth password",
                )?,
            )),
        };
        Ok(Security {
            tls_ca: args.tls_ca.clone(),
            tls_identity: args.tls_cert.clone().zip(args.tls_key.clone()),
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
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) server_tick_time: Option<Duration>,
    pub(crate) security: Security,
}

impl Global {
    /// The options of a subcommand (`remote`, then those before it, then the defaults),
    /// checked as far as they can be without a server: the connect string, the secrets.
    fn from_args(remote: Remote, outer: &Remote) -> Result<Global, Failure> {
        let connection = remote.connection.or(&outer.connection);
        let security = Security::from_args(&remote.security.or(&outer.security))?;
        let connect = connection
            .connect
            .unwrap_or_else(|| "127.0.0.1:2181".to_string());
        zkfence::validate_connect_string(&connect)?;
        Ok(Global {
            connect,
            session_timeout: connection
                .session_timeout
                .unwrap_or(Duration::from_secs(10)),
            connect_timeout: connection.connect_timeout,
            server_tick_time: connection.server_tick_time,
            security,
        })
    }

    /// Connects a session, or fails with exit code 3 (2 for a bad connect string).
    pub(crate) async fn connect(&self) -> Result<Session, Failure> {
        let mut options = SessionOptions::new().session_timeout(self.session_timeout);
        if let Some(t) = self.connect_timeout {
            options = options.connect_timeout(t);
        }
        if let Some(tick) = self.server_tick_time {
            options = options.server_tick_time(tick);
        }
        Session::connect(&self.connect, self.security.apply(options))
            .await
            .map_err(Failure::from)
    }
}

/// A lock or election path, checked before anything is sent (exit 2).
fn check_path(path: &str) -> Result<(), Failure> {
    zkfence::validate_path(path).map_err(Failure::from)
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
    if args.get(1).map(String::as_str) == Some(zkfence_testcontainers::chaos::CONTENDER_MODE) {
        let config = args.get(2).map_or("", String::as_str);
        std::process::exit(zkfence_testcontainers::chaos::contender_main(config));
    }
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.log_level.as_deref());
    // Everything that needs no server is checked here, before the runtime and any connect:
    // a typo fails at once, also when the ensemble is unreachable.
    let job = match Job::of(cli) {
        Ok(job) => job,
        Err(failure) => {
            eprintln!("zkfence: {}", failure.message);
            return ExitCode::from(failure.code);
        }
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
    let outcome = runtime.block_on(job.run());
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

/// A subcommand with its arguments checked: what is left needs the ensemble.
enum Job {
    Exec(Global, exec::Options, Option<SocketAddr>),
    Elect(Global, elect::Options, Option<SocketAddr>),
    Status(Global, String, bool, status::Kind),
    Gc(Global, String, bool, bool),
    Revoke(Global, String, Option<String>),
    EnsembleUp(usize, Duration, Duration),
    Demo,
    Completions(clap_complete::Shell),
    Man(Option<String>),
    Chaos(chaos::Task),
}

impl Job {
    fn of(cli: Cli) -> Result<Job, Failure> {
        let outer = Remote {
            connection: cli.connection,
            security: cli.security,
        };
        Ok(match cli.command {
            Command::Exec {
                lockpath,
                timeout,
                no_wait,
                shared,
                limit,
                format,
                id,
                revocable,
                grace,
                metrics_addr,
                remote,
                cmd,
            } => {
                check_path(&lockpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Exec(
                    global,
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
                        revocable,
                        cmd,
                    },
                    metrics_addr,
                )
            }
            Command::Elect {
                electionpath,
                id,
                once,
                grace,
                metrics_addr,
                remote,
                cmd,
            } => {
                check_path(&electionpath)?;
                let global = Global::from_args(remote, &outer)?;
                let id = id.unwrap_or_else(|| elect::default_id(&cmd));
                Job::Elect(
                    global,
                    elect::Options {
                        path: electionpath,
                        id,
                        once,
                        grace,
                        cmd,
                    },
                    metrics_addr,
                )
            }
            Command::Status {
                lockpath,
                json,
                remote,
            } => {
                check_path(&lockpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Status(global, lockpath, json, status::Kind::Lock)
            }
            Command::Leader {
                electionpath,
                json,
                remote,
            } => {
                check_path(&electionpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Status(global, electionpath, json, status::Kind::Election)
            }
            Command::Revoke {
                lockpath,
                node,
                remote,
            } => {
                check_path(&lockpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Revoke(global, lockpath, node)
            }
            Command::Gc {
                path,
                apply,
                json,
                remote,
            } => {
                gc::check_root(&path)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Gc(global, path, apply, json)
            }
            Command::Ensemble(EnsembleCommand::Up {
                nodes,
                tick_time,
                max_session_timeout,
            }) => Job::EnsembleUp(nodes, tick_time, max_session_timeout),
            Command::Demo => Job::Demo,
            Command::Completions { shell } => Job::Completions(shell),
            Command::Man { subcommand } => Job::Man(subcommand),
            Command::Chaos(args) => Job::Chaos(chaos::task(args)?),
        })
    }

    async fn run(self) -> Result<u8, Failure> {
        match self {
            Job::Exec(global, options, metrics_addr) => {
                if let Some(addr) = metrics_addr {
                    metrics_endpoint::serve(addr)?;
                }
                exec::run(&global, options).await
            }
            Job::Elect(global, options, metrics_addr) => {
                if let Some(addr) = metrics_addr {
                    metrics_endpoint::serve(addr)?;
                }
                elect::run(&global, options).await
            }
            Job::Status(global, path, json, kind) => status::run(&global, &path, json, kind).await,
            Job::Gc(global, path, apply, json) => gc::run(&global, &path, apply, json).await,
            Job::Revoke(global, path, node) => revoke::run(&global, &path, node.as_deref()).await,
            Job::EnsembleUp(nodes, tick_time, max_session_timeout) => {
                ensemble::up(nodes, tick_time, max_session_timeout).await
            }
            Job::Demo => demo::run().await,
            Job::Completions(shell) => generated::completions(shell),
            Job::Man(subcommand) => generated::man(subcommand.as_deref()),
            Job::Chaos(task) => chaos::run(task).await,
        }
    }
}
