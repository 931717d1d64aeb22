//! `zkfence`: distributed locks and leader election on Apache ZooKeeper, from the shell.
//!
//! The operator's face of the library: `exec` runs a command under a lock (like `flock`,
//! `etcdctl lock`, `consul lock`), `elect` runs one only while leading, `status` and `leader`
//! show a queue, `ensemble up` starts a throwaway local ensemble, and `demo` plays every
//! promise of the library against a real ensemble.
//!
//! This file only dispatches: the flags are defined in `args`, what the subcommands that talk
//! to ZooKeeper share in `remote`, and each subcommand in its own module.

mod args;
// `chaos`, `demo` and `ensemble up` run on the test harness (zkfence-testcontainers): the
// default feature `harness`; without it the binary is the server tool alone.
#[cfg(feature = "harness")]
mod chaos;
mod child;
mod clock;
#[cfg(feature = "harness")]
mod demo;
mod duration;
mod elect;
#[cfg(feature = "harness")]
mod ensemble;
mod exec;
mod exit;
mod gc;
mod generated;
mod logging;
mod metrics_endpoint;
mod partition_status;
mod progress;
mod remote;
mod revoke;
mod signals;
mod status;
mod stdout;
mod supervisor;
mod terminal;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use zkfence::NodeFormat;

#[cfg(feature = "harness")]
use crate::args::EnsembleCommand;
use crate::args::{Cli, Command, Remote};
use crate::exit::Failure;
use crate::remote::{check_path, Global};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(supervisor::MODE) {
        supervisor::main(&args[2..]);
    }
    #[cfg(feature = "harness")]
    if args.get(1).map(String::as_str) == Some(zkfence_testcontainers::chaos::CONTENDER_MODE) {
        let config = args.get(2).map_or("", String::as_str);
        std::process::exit(zkfence_testcontainers::chaos::contender_main(config));
    }
    let cli = Cli::parse();
    logging::init(cli.verbose, cli.log_level.as_deref());
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
    Status(Global, String, bool, status::Kind, Option<zkfence::Items>),
    Gc(Global, String, bool, bool),
    Revoke(Global, String, Option<String>, bool),
    #[cfg(feature = "harness")]
    EnsembleUp(ensemble::Options),
    #[cfg(feature = "harness")]
    Demo,
    Completions(clap_complete::Shell),
    Man(Vec<String>),
    #[cfg(feature = "harness")]
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
                        no_wait,
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
                restart,
                grace,
                metrics_addr,
                remote,
                cmd,
            } => {
                check_path(&electionpath)?;
                let global = Global::from_args(remote, &outer)?;
                let id = id.unwrap_or_else(|| child::default_id(&cmd));
                Job::Elect(
                    global,
                    elect::Options {
                        path: electionpath,
                        id,
                        restart: if once { elect::Restart::Never } else { restart },
                        grace,
                        cmd,
                    },
                    metrics_addr,
                )
            }
            Command::Status {
                lockpath,
                json,
                items,
                remote,
            } => {
                check_path(&lockpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Status(global, lockpath, json, status::Kind::Lock, items)
            }
            Command::Leader {
                electionpath,
                json,
                remote,
            } => {
                check_path(&electionpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Status(global, electionpath, json, status::Kind::Election, None)
            }
            Command::Revoke {
                lockpath,
                node,
                force,
                remote,
            } => {
                check_path(&lockpath)?;
                let global = Global::from_args(remote, &outer)?;
                Job::Revoke(global, lockpath, node, force)
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
            #[cfg(feature = "harness")]
            Command::Ensemble(EnsembleCommand::Up {
                nodes,
                base_port,
                tick_time,
                max_session_timeout,
            }) => Job::EnsembleUp(ensemble::Options {
                nodes,
                base_port,
                tick_time,
                max_session_timeout,
            }),
            #[cfg(feature = "harness")]
            Command::Demo => Job::Demo,
            Command::Completions { shell } => Job::Completions(shell),
            Command::Man { subcommand } => Job::Man(subcommand),
            #[cfg(feature = "harness")]
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
            Job::Status(global, path, json, kind, items) => {
                status::run(&global, &path, json, kind, items).await
            }
            Job::Gc(global, path, apply, json) => gc::run(&global, &path, apply, json).await,
            Job::Revoke(global, path, node, force) => {
                revoke::run(&global, &path, node.as_deref(), force).await
            }
            #[cfg(feature = "harness")]
            Job::EnsembleUp(options) => ensemble::up(options).await,
            #[cfg(feature = "harness")]
            Job::Demo => demo::run().await,
            Job::Completions(shell) => generated::completions(shell),
            Job::Man(subcommand) => generated::man(&subcommand),
            #[cfg(feature = "harness")]
            Job::Chaos(task) => chaos::run(task).await,
        }
    }
}
