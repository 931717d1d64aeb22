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
/// of subcommands and the exit codes), or with `subcommand` its own page, `zkfence-NAME(1)`
/// (`ensemble up` for `zkfence-ensemble-up(1)`), which the lists refer to (its synopsis says
/// `zkfence NAME`, as it is typed).
///
/// The exit codes and the JSON documents are tables: they are written unfilled (`.nf`), in
/// sections of their own, where clap_mangen would have reflowed them as a paragraph.
pub fn man(subcommand: &[String]) -> Result<u8, Failure> {
    let page = page(subcommand)?;
    let mut out = Vec::new();
    render(&page, subcommand, &mut out)
        .and_then(|()| crate::stdout::write(&out))
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot write the man page: {e}")))?;
    Ok(exit::OK)
}

/// `command` and every command below it without a `help` subcommand, which has no page.
fn without_help(command: clap::Command) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut command = command.disable_help_subcommand(true);
    for name in names {
        command = command.mut_subcommand(name, without_help);
    }
    command
}

/// The command a page describes, without the help text's tail (written as sections here).
fn page(path: &[String]) -> Result<clap::Command, Failure> {
    let mut page = without_help(Cli::command());
    for (depth, name) in path.iter().enumerate() {
        let Some(sub) = page.find_subcommand(name) else {
            let names: Vec<&str> = page.get_subcommands().map(|s| s.get_name()).collect();
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "no page for {:?}; the pages below it are: {}",
                    path[..=depth].join(" "),
                    names.join(", ")
                ),
            ));
        };
        let words = &path[..=depth];
        page = sub
            .clone()
            .display_name(format!("zkfence-{}", words.join("-")))
            .bin_name(format!("zkfence {}", words.join(" ")))
            .version(env!("CARGO_PKG_VERSION"));
    }
    Ok(page.after_help(None::<&str>).after_long_help(None::<&str>))
}

fn render(page: &clap::Command, path: &[String], out: &mut Vec<u8>) -> std::io::Result<()> {
    // The exit codes on the top page and on every page of a command that runs.
    let has_exit_codes = path.is_empty() || page.get_subcommands().next().is_none();
    let man = clap_mangen::Man::new(page.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if page.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if page.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(out)?;
    }
    if let [name] = path {
        if let Some(documents) = crate::args::json_of(name) {
            section(out, "JSON OUTPUT", &documents.join("\n\n"))?;
        }
    }
    if has_exit_codes {
        let table = exit::HELP
            .strip_prefix("Exit codes:\n")
            .unwrap_or(exit::HELP);
        section(out, "EXIT STATUS", table)?;
    }
    man.render_version_section(out)
}

/// A man page section of preformatted `text`, written line for line.
fn section(out: &mut Vec<u8>, title: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(out, ".SH \"{title}\"")?;
    writeln!(out, ".nf")?;
    for line in text.lines() {
        // roff: a backslash is written \e; a line starting with . or ' would be a request.
        let line = line.replace('\\', "\\e");
        let line = if line.starts_with('.') || line.starts_with('\'') {
            format!("\\&{line}")
        } else {
            line
        };
        writeln!(out, "{line}")?;
    }
    writeln!(out, ".fi")
}
