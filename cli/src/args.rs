//! The command line: every subcommand's flags and their help text, as clap definitions.
//!
//! `--help`, the man pages and the shell completions are all generated from these, so this
//! is the one source of what the CLI accepts and says about itself. `main.rs` turns a parsed
//! [`Cli`] into a job and runs it; the subcommand modules take the checked values, not these.
// The doc comments below are clap's --help text, written for a terminal (`[/chroot]`,
// `${fpath[1]}`): rustdoc would read their brackets as links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use zkfence::NodeFormat;

#[cfg(feature = "harness")]
use crate::chaos;
use crate::{duration, elect, exit, partition_status};

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
    pub(crate) verbose: u8,

    /// Log filter for stderr, in `RUST_LOG` syntax (e.g. "zkfence=debug"); overrides -v.
    #[arg(
        long,
        global = true,
        env = "ZKFENCE_LOG",
        value_name = "FILTER",
        help_heading = "Logging options"
    )]
    pub(crate) log_level: Option<String>,

    /// The connection and security options may also come before the subcommand
    /// (`zkfence --connect HOSTS exec ...`); after it, they win.
    #[command(flatten)]
    pub(crate) connection: ConnectArgs,

    #[command(flatten)]
    pub(crate) security: SecurityArgs,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the ensemble is and how long to try: every subcommand that talks to ZooKeeper.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Connection options")]
pub(crate) struct ConnectArgs {
    /// ZooKeeper servers: host:port[,host:port...][/chroot]; every host needs its port
    /// (ZooKeeper's is usually 2181). [default: 127.0.0.1:2181]
    #[arg(long, env = "ZKFENCE_CONNECT", value_name = "HOSTS")]
    pub(crate) connect: Option<String>,

    /// The session timeout to ask for: a crashed holder's lock frees about this long after it
    /// dies. The servers clamp it to their bounds (minSessionTimeout..maxSessionTimeout, 2 to
    /// 20 tickTimes unless configured); zkfence says so on stderr when they grant another,
    /// and `status --json` shows the granted one. Below 400ms is refused (exit 2). E.g. "10s",
    /// "500ms", "1m"; a bare number is seconds. [default: 10s]
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    pub(crate) session_timeout: Option<Duration>,

    /// Give up connecting after DUR (exit 3), like etcdctl's --dial-timeout. A server that
    /// refuses the connection, or a host that does not resolve, fails at once. Below 10ms is
    /// refused (exit 2). [default: the session timeout asked for, at least 1s]
    #[arg(long, value_parser = duration::parse, value_name = "DUR")]
    pub(crate) connect_timeout: Option<Duration>,

    /// The servers' tickTime (zoo.cfg), declared so the lease clock may trust a sync and
    /// keepalives need no transaction. Never lower than the servers' real tickTime: the
    /// lease clock is then only as safe as that. A session timeout too short for it is
    /// refused (exit 2). [default: undeclared: the clock trusts only committed writes]
    #[arg(long, env = "ZKFENCE_SERVER_TICK_TIME", value_parser = duration::parse, value_name = "DUR")]
    pub(crate) server_tick_time: Option<Duration>,
}

impl ConnectArgs {
    /// These, with `outer`'s (given before the subcommand) where these are unset.
    pub(crate) fn or(self, outer: &ConnectArgs) -> ConnectArgs {
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
pub(crate) struct SecurityArgs {
    /// Connect over TLS, trusting the CA certificates (PEM) in FILE to sign the servers'
    /// certificates; --connect then names the servers' secureClientPorts. The servers'
    /// certificates must name the host they are reached by.
    #[arg(long, env = "ZKFENCE_TLS_CA", value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) for mutual TLS; with the servers' x509 auth
    /// provider its subject is our identity, and our nodes are ours alone. Needs --tls-key
    /// and --tls-ca.
    #[arg(long, env = "ZKFENCE_TLS_CERT", value_name = "FILE")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "ZKFENCE_TLS_KEY", value_name = "FILE")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Authenticate with SASL DIGEST-MD5 as USER; the password comes from the environment
    /// variable ZKFENCE_SASL_PASSWORD or from --sasl-password-file, never from the command
    /// line (which `ps` shows). Our nodes are then ours alone.
    ///
    /// Example: ZKFENCE_SASL_PASSWORD="$(cat /run/secrets/zk)" zkfence exec --sasl-user payments /locks/pay ./pay.sh
    #[arg(long, env = "ZKFENCE_SASL_USER", value_name = "USER")]
    pub(crate) sasl_user: Option<String>,

    /// Read the SASL password from the first line of FILE (instead of ZKFENCE_SASL_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub(crate) sasl_password_file: Option<PathBuf>,

    /// Authenticate with ZooKeeper's `digest` scheme as USER: `--auth digest:USER`. The
    /// password comes from ZKFENCE_AUTH_PASSWORD or --auth-password-file, never from the
    /// command line. Our nodes are then ours alone.
    #[arg(long, value_name = "digest:USER", value_parser = parse_auth)]
    pub(crate) auth: Option<String>,

    /// Read the --auth password from the first line of FILE (instead of ZKFENCE_AUTH_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub(crate) auth_password_file: Option<PathBuf>,
}

impl SecurityArgs {
    pub(crate) fn or(self, outer: &SecurityArgs) -> SecurityArgs {
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
pub(crate) struct Remote {
    #[command(flatten)]
    pub(crate) connection: ConnectArgs,
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    /// - run from a terminal's foreground, CMD's group gets the terminal while it runs (it
    ///   may read it: psql, read), so Ctrl-C and Ctrl-Z go to CMD as they would without
    ///   zkfence; zkfence takes the terminal back when the group is gone.
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
        /// Our name in `zkfence status` (default: HOST:PROGRAM, this host's name and CMD's
        /// program name, never its arguments). It is stored in our node's data with this
        /// host's name and zkfence's pid, which anyone who may read LOCKPATH can read: put no
        /// secret in it.
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
    /// again; when CMD exits on its own, zkfence resigns and campaigns again (see --restart).
    /// With --once it leads at most once and exits with CMD's code (76 if leadership was
    /// lost). CMD sees ZKFENCE_TOKEN, ZKFENCE_LOCK_PATH, ZKFENCE_NODE and
    /// ZKFENCE_LEADER_ID.
    ///
    /// Example: zkfence elect /election/scheduler --id "$(hostname)" ./scheduler
    ///
    /// zkfence's options go before ELECTIONPATH; everything after CMD is CMD's own (a `--`
    /// before CMD works too).
    #[command(after_long_help = exit::HELP)]
    Elect {
        /// The election directory, e.g. /election/scheduler.
        electionpath: String,
        /// This candidate's name, shown by `zkfence leader` (default: HOST:PROGRAM, this
        /// host's name and CMD's program name, never its arguments). It is stored in our
        /// node's data with this host's name and zkfence's pid, which anyone who may read
        /// ELECTIONPATH can read: put no secret in it.
        #[arg(long, value_name = "NAME", help_heading = "Election options")]
        id: Option<String>,
        /// Lead at most once, then exit with CMD's code (76 if leadership was lost): the same
        /// as --restart never.
        #[arg(long, conflicts_with = "restart", help_heading = "Election options")]
        once: bool,
        /// When CMD ends on its own, campaign again to run it again: always; on-failure (a
        /// non-zero exit or a signal; a clean exit ends zkfence with 0); or never (exit with
        /// CMD's code). After a failure the next run waits 1s, doubling while it keeps
        /// failing up to 1m (a run of 1m or more starts over at 1s). After leadership
        /// was lost, always and on-failure campaign again at once, never exits 76.
        #[arg(long, value_enum, default_value_t = elect::Restart::Always, value_name = "WHEN", help_heading = "Election options")]
        restart: elect::Restart,
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
    /// For a partition set (`Session::partitions`, Kazoo's SetPartitioner): each item's
    /// owner, token, how long its node has existed, and the member it is moving to.
    ///
    /// Says so when LOCKPATH does not exist (exit 66), or holds lock directories rather than
    /// contenders. --json prints one JSON document, described below.
    #[command(after_long_help = with_json(STATUS_JSON))]
    Status {
        /// The lock directory.
        lockpath: String,
        /// Print JSON (the document is described at the end of --help).
        #[arg(long)]
        json: bool,
        /// For a partition set: the items its members divide, a count (1000) or
        /// comma-separated names (emails,invoices), as the members were given them. Without
        /// it: the items that have a lock directory now (all of them once the set has
        /// settled), which may leave out items nobody holds.
        #[arg(long, value_name = "ITEMS", value_parser = partition_status::parse_items)]
        items: Option<zkfence::Items>,
        #[command(flatten)]
        remote: Remote,
    },

    /// Show the leader of the election ELECTIONPATH, what it proclaimed, and the candidates
    /// behind it.
    ///
    /// How long the leader has led is not recorded in ZooKeeper: its node's age (since it
    /// joined the election) is shown, an upper bound. Exit 66 if ELECTIONPATH does not exist.
    #[command(after_long_help = with_json(LEADER_JSON))]
    Leader {
        /// The election directory.
        electionpath: String,
        /// Print JSON (the document is described at the end of --help).
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
    /// calls its RevocationListener. Nothing is released by force. The holder's owner data
    /// says whether it listens: one that does not (a plain `zkfence exec`, another client)
    /// is not asked, and zkfence exits 69 having written nothing; --force writes the request
    /// anyway (a Curator holder's data cannot say). A zkfence holder's owner stays readable
    /// in `status` after the request. Exits 1 if nobody holds the lock.
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
        /// Write the request even to a holder whose owner data does not say it listens
        /// (e.g. a Curator InterProcessMutex made revocable).
        #[arg(long)]
        force: bool,
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
        /// Print JSON: {"path": string, "exists": bool, "applied": bool, "empty":
        /// [string...], "removed": [string...], "kept": [{"path": string, "reason":
        /// string}...]}; `empty`, deepest first, is what was found; `removed` stays empty
        /// without --apply.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: Remote,
    },

    /// Throwaway local ZooKeeper ensembles, for trying zkfence out.
    #[cfg(feature = "harness")]
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
        /// A subcommand, e.g. exec (or `ensemble up`, for zkfence-ensemble-up(1)).
        #[arg(value_name = "SUBCOMMAND")]
        subcommand: Vec<String>,
    },

    /// Start a 3-node ensemble and play every promise of zkfence against it, as a timeline.
    ///
    /// Contention (FIFO, growing tokens), a fenced store refusing a paused holder's late
    /// write, a crashed holder's lock freed after the session timeout, the ZooKeeper leader
    /// killed while locks are held, and leader-election failover. Exits 0 only if every step
    /// behaved as promised.
    #[cfg(feature = "harness")]
    Demo,

    /// Run a randomized fault campaign against a throwaway local ensemble and check its
    /// whole history.
    ///
    /// CLIENTS contender processes, each with its own session through its own connection,
    /// drive the RECIPEs (a lock by default; --recipe mixed for all): acquire, write (token,
    /// client, sequence) to a register that a fence per resource guards (and through
    /// Lease::fenced_write, and with --sink to each STORE through its fence), hold a random
    /// time, release or drop. Faults from a seeded schedule start and heal meanwhile, one or
    /// more at a time. Then the checker applies each recipe's rules (one holder, one leader,
    /// readers together and a writer alone, at most PERMITS holders, a multi-lock's paths
    /// together, one owner per item; the old holder told first; tokens in order), each
    /// fence's rules by its own record, a grant after every heal, a holder told of its
    /// deleted node in time, and no leftover nodes or processes (see the guide,
    /// zkfence::guide::chaos).
    ///
    /// Prints a one-line summary; writes DIR/history.jsonl and DIR/timeline.svg. Exits 1
    /// if the checker found a violation (each is printed with the events around it).
    ///
    /// Example: zkfence chaos --duration 10m --session-timeout 10s --tick-time 2s --seed 7
    #[cfg(feature = "harness")]
    #[command(after_long_help = exit::HELP)]
    Chaos(chaos::Args),
}

#[cfg(feature = "harness")]
#[derive(Subcommand, Debug)]
pub(crate) enum EnsembleCommand {
    /// Start an ensemble, print its connect string (the first line of stdout), and run until
    /// Ctrl-C or SIGTERM, then stop it.
    ///
    /// Prints a table of its servers on stderr (server, client port, pid, role: leader,
    /// follower or standalone), and says so when one of them exits meanwhile (for a failover
    /// drill: `kill PID` of the leader, and watch the others elect a new one with `zkfence
    /// status`).
    Up {
        /// Number of servers.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Serve server N's clients on 127.0.0.1 port PORT+N-1 (PORT, PORT+1, ...) instead of
        /// free ports picked at random between 10000 and the kernel's ephemeral range;
        /// refused if one is taken. The servers' own links use a random 127.x.y.z address.
        #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
        base_port: Option<u16>,
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

/// A contender in every `--json` document: the one description of it, shown by `status
/// --help` and `leader --help` and their man pages (and the guide's CLI page, which a test
/// compares).
pub(crate) const JSON_CONTENDER: &str = r#"A CONTENDER is:

{"node": string,          full path of its queue node
 "token": integer,        the fencing token, the node's creation zxid (below 2^63)
 "sequence": integer,     the node's sequence number (32-bit signed), the queue order
 "session_id": string,    the owning ZooKeeper session in hex, "0x1000000a2b30001"
 "owner": {"id": string|null, "host": string|null, "pid": integer|null},
 "revocation_requested": bool,  someone asked this holder to let go (zkfence revoke);
                          a zkfence holder's owner is kept; Curator's Revoker overwrites
                          other clients' owner data, whose fields are then null
 "mode": "exclusive" | "shared" | "permit",
 "age_ms": integer}       time since the node was created (server clock against ours):
                          since it joined the queue, not since it holds or leads"#;

/// `status --json`'s document.
pub(crate) const STATUS_JSON: &str = r#"JSON output (--json), one document on stdout:

{"path": string,
 "exists": bool,          false when nothing is at the path (exit 66)
 "kind": "lock" | "read-write" | "semaphore" | "directory" | "partitions" | null,
                          null when the path does not exist or nobody queued there
 "limit": integer|null,   a semaphore's N, as its holders recorded it
 "holders": [CONTENDER...],
 "waiters": [CONTENDER...],
 "session_timeout_ms": integer,  the session timeout the servers granted: what
                          --session-timeout becomes on this ensemble
 "children": [string...], only when "kind" is "directory"
 for a partition set ("kind": "partitions"; "holders" and "waiters" are empty):
 "assignment": "sticky" | "kazoo",   how its members divide the items
 "items_from": "given" | "lock directories",   --items, or the items with a lock now
 "members": [{"id": string, "node": string, "session_id": string,
              "assignment": "sticky" | "kazoo", "host": string|null, "pid": integer|null}...],
 "items": [{"item": string,
            "owner": string|null,        the member holding it (by session), else the id in
                                         its holder's data; null when nobody holds it
            "token": integer|null, "session_id": string|null, "node": string|null,
            "age_ms": integer|null,      since the holder's node was created
            "waiting": integer,          contenders queued behind the holder
            "assigned_to": string|null,  the member the assignment gives it to now
            "moving_to": string|null}...]}   assigned_to when another (or nobody) holds it"#;

/// `leader --json`'s document.
pub(crate) const LEADER_JSON: &str = r#"JSON output (--json), one document on stdout:

{"path": string,
 "exists": bool,          false when nothing is at the path (exit 66)
 "leader": CONTENDER|null,
 "proclaimed": string|null,  the leader's Leadership::proclaim value as text (invalid
                          UTF-8 replaced); the text form prints it after "led by"
 "candidates": [CONTENDER...],
 "session_timeout_ms": integer}  the session timeout the servers granted"#;

/// A subcommand's JSON document, the contender's, then the exit codes: its long help's end.
fn with_json(document: &str) -> String {
    format!("{document}\n\n{JSON_CONTENDER}\n\n{}", exit::HELP)
}

/// The JSON documents a subcommand's man page describes, as `--help` ends with them.
pub(crate) fn json_of(subcommand: &str) -> Option<[&'static str; 2]> {
    match subcommand {
        "status" => Some([STATUS_JSON, JSON_CONTENDER]),
        "leader" => Some([LEADER_JSON, JSON_CONTENDER]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// A guide page or the README, read from the repository.
    fn doc(path: &str) -> String {
        let at = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&at).unwrap_or_else(|e| panic!("read {at}: {e}"))
    }

    /// The words of a shell command line as the shell would pass them (quotes and escapes
    /// removed, `$(...)` kept as text), up to a comment, a redirection or a pipe.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut chars = line.chars().peekable();
        let mut quote: Option<char> = None;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    in_word = true;
                }
                (None, '\\') => {
                    if let Some(next) = chars.next() {
                        word.push(next);
                        in_word = true;
                    }
                }
                (None, '#' | '>' | '|' | ';') if !in_word => break,
                (None, c) if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                (None, c) => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        if in_word {
            words.push(word);
        }
        words
    }

    /// Every `zkfence ...` command in the `sh` blocks of `markdown` (continued lines
    /// joined, leading `VAR=value` assignments dropped).
    fn examples(markdown: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut in_sh = false;
        let mut pending = String::new();
        for line in markdown.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("```") {
                in_sh = trimmed == "```sh";
                continue;
            }
            if !in_sh {
                continue;
            }
            if let Some(head) = line.strip_suffix('\\') {
                pending.push_str(head);
                continue;
            }
            let full = std::mem::take(&mut pending) + line;
            let words: Vec<String> = shell_words(&full)
                .into_iter()
                .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                .collect();
            if words.first().is_some_and(|w| w == "zkfence") {
                out.push(words);
            }
        }
        out
    }

    #[test]
    fn every_example_in_the_guide_and_the_readme_parses() {
        // Every page of the guide, not only the CLI's: the recipes', production's (systemd
        // and cron) and security's pages show commands too.
        let guide = format!("{}/../docs/guide", env!("CARGO_MANIFEST_DIR"));
        let mut paths: Vec<String> = std::fs::read_dir(&guide)
            .unwrap_or_else(|e| panic!("read {guide}: {e}"))
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".md"))
            .map(|name| format!("docs/guide/{name}"))
            .collect();
        paths.sort();
        assert!(paths.len() > 10, "{} guide pages found", paths.len());
        paths.push("README.md".into());
        let mut parsed = 0;
        for path in &paths {
            for words in examples(&doc(path)) {
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("{path}: {words:?} does not parse:\n{e}");
                }
                parsed += 1;
            }
        }
        assert!(parsed > 60, "{parsed} examples found");
    }

    #[test]
    fn the_guide_shows_the_help_texts_word_for_word() {
        let guide = doc("docs/guide/cli.md");
        assert!(
            guide.contains(exit::HELP),
            "the exit codes differ from --help's"
        );
        for document in [STATUS_JSON, LEADER_JSON] {
            assert!(
                guide.contains(document),
                "differs from --help's:\n{document}"
            );
        }
        let contender = JSON_CONTENDER.split_once("\n\n").unwrap().1;
        assert!(
            guide.contains(contender),
            "the CONTENDER differs from --help's"
        );
    }

    #[test]
    fn the_example_reader_reads_as_a_shell_would() {
        assert_eq!(
            shell_words(r#"zkfence elect --id "$(hostname)" /e ./s  # comment"#),
            ["zkfence", "elect", "--id", "$(hostname)", "/e", "./s"]
        );
        assert_eq!(
            shell_words("zkfence exec /l -- sh -c 'echo a; b' > out"),
            ["zkfence", "exec", "/l", "--", "sh", "-c", "echo a; b"]
        );
        // A wrong flag is caught.
        assert!(Cli::try_parse_from(["zkfence", "exec", "--no-such-flag", "/l", "x"]).is_err());
    }
}
