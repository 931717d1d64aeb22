//! zkfence's own log lines on stderr (`-v`, `--log-level`, `ZKFENCE_LOG`).

use std::io::IsTerminal;

/// Sends log events at `verbose`'s level (or `filter`'s, in `RUST_LOG` syntax) to stderr.
pub fn init(verbose: u8, filter: Option<&str>) {
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
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .init();
}

/// Colour only on a terminal, and not when `NO_COLOR` is set to anything but the empty
/// string (no-color.org): escape codes in a file or a pipe are noise to whoever reads it.
fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.map_or(true, |v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colour;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
