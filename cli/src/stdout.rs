//! Standard output for the subcommands that print a report: a reader that stopped reading
//! (`zkfence man | head`, a pager quit early) ends the printing quietly, as it does for Unix
//! tools, instead of panicking (`println!`) or blaming the pipe. The process keeps ignoring
//! `SIGPIPE` (Rust's default): a supervisor must never be killed by its own output.

use std::io::Write;

use crate::exit::{self, Failure};

/// Writes `bytes` to standard output. A closed pipe is not an error: what the reader did not
/// read, it did not want.
pub fn write(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// [`write()`] of a report, any other error a [`Failure`] naming `what`.
pub fn report(what: &str, text: &str) -> Result<(), Failure> {
    write(text.as_bytes())
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot write the {what}: {e}")))
}
