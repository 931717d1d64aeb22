//! Process hygiene shared by the ZooKeeper and PostgreSQL harnesses: signalling a child's
//! process group, and the watchdog that kills a harness's processes and removes its
//! directory when the owning (test) process dies without cleaning up.

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

/// Once its stdin reaches EOF, i.e. when the owning process is gone (or dismissed it):
/// kills every process whose command line matches `$ZKT_PATTERN` (again while any is
/// found, so that a child forked meanwhile goes too, at most 50 rounds), removes the System V
/// shared memory segment named in line 7 of `$ZKT_SHM_PIDFILE` if that is set and exists (a
/// PostgreSQL `postmaster.pid`: a killed server leaves its segment), then removes
/// `$ZKT_DIR`. All are passed in the environment, so this shell's own command line does not
/// match and `pkill` cannot kill the watchdog itself.
const WATCHDOG_SCRIPT: &str = r#"trap '' INT HUP; read _; i=0; while pkill -KILL -f -- "$ZKT_PATTERN" && [ $i -lt 50 ]; do i=$((i+1)); sleep 0.1; done; if [ -n "$ZKT_SHM_PIDFILE" ] && [ -f "$ZKT_SHM_PIDFILE" ]; then id=$(sed -n 7p "$ZKT_SHM_PIDFILE" | awk '{print $2}'); [ -n "$id" ] && ipcrm -m "$id"; fi; rm -rf -- "$ZKT_DIR""#;

/// The watchdog shell and the write end of its stdin pipe.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// A watchdog for a harness whose processes all have `dir` in their command line.
    pub(crate) fn for_dir(dir: &Path) -> io::Result<Watchdog> {
        // A trailing slash so that the pattern cannot match a sibling dir with a longer name.
        let dir_slash = format!("{}/", dir.display());
        Watchdog::spawn(Path::new(&dir_slash), &regex_escape(&dir_slash), None)
    }

    /// A watchdog that kills the processes matching the extended regex `pattern`, removes
    /// the shared memory segment named in the PostgreSQL pid file `shm_pid_file` (if given
    /// and there), and removes `dir`.
    pub(crate) fn spawn(
        dir: &Path,
        pattern: &str,
        shm_pid_file: Option<&Path>,
    ) -> io::Result<Watchdog> {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .env("ZKT_DIR", dir)
            .env("ZKT_PATTERN", pattern)
            .env("ZKT_SHM_PIDFILE", shm_pid_file.unwrap_or(Path::new("")))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group: not hit by terminal signals to ours, nor by our group kills.
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Lets the watchdog go after the harness cleaned up itself.
    pub(crate) fn dismiss(mut self) {
        // EOF on its stdin: it finds nothing to kill and nothing to remove, and exits.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Sends `sig` to the process group led by `child` (and to `child` itself).
pub(crate) fn signal_group(child: &Child, sig: libc::c_int) {
    // The child is not reaped yet, so its pid (= its group id) cannot have been reused.
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(-pid, sig);
        libc::kill(pid, sig);
    }
}

/// SIGKILLs `child`'s process group and reaps it.
pub(crate) fn kill_and_reap(mut child: Child) {
    signal_group(&child, libc::SIGKILL);
    let _ = child.wait();
}

/// The pids of live (not zombie) processes whose command line contains `marker`.
pub(crate) fn pids_matching(marker: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            // A zombie's command line is empty, so it never matches.
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// Escapes `s` for use as a literal in an extended regular expression (`pkill -f`).
pub(crate) fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.^$*+?()[]{}|".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_regex() {
        assert_eq!(regex_escape("/tmp/a.b+c/"), r"/tmp/a\.b\+c/");
    }
}
