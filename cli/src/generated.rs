//! What is generated from the command-line definitions themselves, so it cannot drift from
//! `--help`: shell completions (`zkfence completions SHELL`) and the man page (`zkfence man`).

use clap::CommandFactory;

use crate::args::Cli;
use crate::exit::{self, Failure};

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut command = Cli::command();
    // Into memory first: the generator panics on a write error (a closed pipe among them).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "zkfence", &mut script);
    crate::stdout::write(&script).map_err(|e| {
        Failure::new(
            exit::ERROR,
            format!("cannot write the completion script: {e}"),
        )
    })?;
    Ok(exit::OK)
}

/// Prints a man page as roff on stdout: `zkfence(1)` (the synopsis, every option, the list
/// of subcommands and the exit codes), or with `subcommand` its own page, `zkfence-NAME(1)`,
/// which the list refers to.
pub fn man(subcommand: Option<&str>) -> Result<u8, Failure> {
    let command = Cli::command();
    let page = match subcommand {
        None => command,
        Some(name) => match command.find_subcommand(name) {
            Some(sub) => sub
                .clone()
                .name(format!("zkfence-{name}"))
                .version(env!("CARGO_PKG_VERSION")),
            None => {
                let names: Vec<&str> = command
                    .get_subcommands()
                    .map(|s| s.get_name())
                    .filter(|n| *n != "help")
                    .collect();
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "no subcommand {name:?}; the pages are: {}",
                        names.join(", ")
                    ),
                ));
            }
        },
    };
    let man = clap_mangen::Man::new(page);
    let mut out = Vec::new();
    man.render(&mut out)
        .and_then(|()| crate::stdout::write(&out))
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot write the man page: {e}")))?;
    Ok(exit::OK)
}
