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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use crate::args::Cli;
    use crate::exit;

    /// The guide's reference page, which carries every subcommand's `--help` word for word.
    const PAGE: &str = "docs/guide/cli_reference.md";

    /// Every command's path below `zkfence` (`[]` for zkfence itself, `["ensemble", "up"]`),
    /// in the order `--help` lists them, without clap's `help`.
    fn paths(command: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        out.push(prefix.to_vec());
        for sub in command.get_subcommands() {
            if sub.get_name() == "help" || sub.is_hide_set() {
                continue;
            }
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_string());
            paths(sub, &path, out);
        }
    }

    /// What `zkfence PATH... --help` prints where no `ZKFENCE_*` variable is set (the values
    /// of the `env` options in the environment of whoever renders it are blanked), with the
    /// exit codes every command ends with left to the page's own section.
    fn help(path: &[String]) -> String {
        let mut argv = vec!["zkfence".to_string()];
        argv.extend(path.iter().cloned());
        argv.push("--help".into());
        let err = Cli::command()
            .try_get_matches_from(&argv)
            .expect_err("--help ends the parse");
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{argv:?}");
        let text: Vec<String> = err
            .render()
            .to_string()
            .lines()
            .map(|line| match line.trim_start().strip_prefix("[env: ") {
                Some(env) if line.ends_with(']') => {
                    let name = env.split('=').next().unwrap_or(env).trim_end_matches(']');
                    format!(
                        "{}[env: {name}=]",
                        &line[..line.len() - line.trim_start().len()]
                    )
                }
                _ => line.to_string(),
            })
            .collect();
        let text = text.join("\n");
        let text = text.trim_end();
        text.strip_suffix(exit::HELP)
            .map(|rest| format!("{}\n[the exit codes: below]", rest.trim_end()))
            .unwrap_or_else(|| text.to_string())
    }

    /// `zkfence`, `zkfence exec`, `zkfence ensemble up`: the command as it is typed.
    fn command_line(path: &[String]) -> String {
        std::iter::once("zkfence")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn section(path: &[String]) -> String {
        format!(
            "## `{}`\n\n```text\n{}\n```\n",
            command_line(path),
            help(path)
        )
    }

    fn page(sections: &[String]) -> String {
        format!(
            "# Every subcommand's `--help`\n\n\
             What `zkfence --help` and `zkfence SUBCOMMAND --help` print, word for word: this \
             page is generated\nfrom the CLI's clap definitions (`cli/src/args.rs`), the one \
             source of `--help`, the man pages\n(`zkfence man`) and the shell completions, and \
             a test (`cli/src/generated.rs`) fails when it is\nnot current. After changing a \
             flag or its help, regenerate it:\n\n\
             ```sh\nZKFENCE_BLESS=1 cargo test -p zkfence-cli --bin zkfence \
             the_guide_carries_every_help_text\n```\n\n\
             (As printed where no `ZKFENCE_*` variable is set; every command's long help ends with \
             the exit\ncodes, which are given once, at the end.) \
             [The `zkfence` command](crate::guide::cli) is\nthe guide to these.\n\n{}\n\
             ## Exit codes\n\n```text\n{}\n```\n",
            sections.join("\n"),
            exit::HELP
        )
    }

    #[test]
    fn the_guide_carries_every_help_text() {
        let mut all = Vec::new();
        paths(&Cli::command(), &[], &mut all);
        assert!(all.len() > 10, "{} commands found", all.len());
        let sections: Vec<String> = all.iter().map(|p| section(p)).collect();
        let at = format!("{}/../{PAGE}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("ZKFENCE_BLESS").is_some() {
            std::fs::write(&at, page(&sections)).unwrap();
        }
        let text = std::fs::read_to_string(&at).unwrap_or_default();
        for (path, section) in all.iter().zip(&sections) {
            assert!(
                text.contains(section.as_str()),
                "{PAGE} does not carry `{} --help` as it is now; regenerate it with \
                 ZKFENCE_BLESS=1 cargo test -p zkfence-cli --bin zkfence \
                 the_guide_carries_every_help_text",
                command_line(path)
            );
        }
        assert!(text.contains(exit::HELP), "{PAGE}: the exit codes differ");
    }
}
