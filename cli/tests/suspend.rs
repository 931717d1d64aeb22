//! Issue 43, item 3: the supervisor's deadlines count a suspend of the machine.
//!
//! `CLOCK_MONOTONIC` (tokio's and std's `Instant`, and `poll`'s timeouts) stops while the
//! machine is suspended; ZooKeeper's servers go on counting. So the deadline zkfence hands
//! the supervisor is on `CLOCK_BOOTTIME`, and the supervisor sleeps on a timer of that clock.
//! A machine cannot be suspended in a test; a time namespace can be started with its boot
//! clock ahead (`unshare --time --boottime`), which is what a supervisor that reads the
//! deadline after a suspend sees: the same monotonic clock, a boot clock further on. Such a
//! supervisor, handed a deadline 30 s ahead by a zkfence outside, must find it long past and
//! not start CMD; a supervisor on the monotonic clock would start it.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SUPERVISOR_MODE: &str = "__zkfence-supervise";

fn boot_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// Starts the supervisor (as zkfence does, in `prefix` if any) with a deadline `ahead` on
/// this process's boot clock and CMD `touch MARKER`; returns its messages until it ends.
fn supervise(prefix: &[&str], ahead: Duration, marker: &std::path::Path) -> Vec<String> {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let fd = theirs.as_raw_fd();
    // SAFETY: clearing FD_CLOEXEC on our own descriptor, so the supervisor inherits it.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, 0);
    }
    let deadline = boot_ns() + ahead.as_nanos();
    let zkfence = env!("CARGO_BIN_EXE_zkfence");
    let (program, mut args) = match prefix.split_first() {
        Some((p, rest)) => (*p, rest.iter().map(|a| a.to_string()).collect::<Vec<_>>()),
        None => (zkfence, vec![]),
    };
    if !prefix.is_empty() {
        args.push(zkfence.to_string());
    }
    args.extend([
        SUPERVISOR_MODE.to_string(),
        fd.to_string(),
        std::process::id().to_string(),
        "1000".to_string(),
        deadline.to_string(),
        "the lock /suspend".to_string(),
        "--".to_string(),
        "touch".to_string(),
        marker.display().to_string(),
    ]);
    let mut child = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"));
    drop(theirs);
    ours.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut lines = vec![];
    let started = Instant::now();
    for line in BufReader::new(&ours).lines() {
        let Ok(line) = line else { break };
        let last = line.starts_with("done") || line.starts_with("failed");
        lines.push(line);
        if last {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{lines:?}");
    }
    let _ = child.wait();
    lines
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zkfence-suspend-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_supervisor_whose_boot_clock_moved_past_the_deadline_does_not_start_cmd() {
    let dir = scratch("ahead");
    let marker = dir.join("ran");
    // A boot clock 1000 s ahead of the monotonic one: a suspend of 1000 s since zkfence
    // read the deadline (30 s ahead).
    let lines = supervise(
        &["unshare", "--time", "--boottime", "1000"],
        Duration::from_secs(30),
        &marker,
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("failed 76 ") && l.contains("ran out")),
        "the supervisor should refuse: {lines:?}"
    );
    assert!(!marker.exists(), "CMD ran past the deadline");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The control: the same supervisor and deadline without the suspend runs CMD.
#[test]
fn a_supervisor_within_the_deadline_starts_cmd() {
    let dir = scratch("within");
    let marker = dir.join("ran");
    let lines = supervise(&[], Duration::from_secs(30), &marker);
    assert!(
        lines.first().is_some_and(|l| l.starts_with("started ")),
        "{lines:?}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("done code 0 exited")),
        "{lines:?}"
    );
    assert!(marker.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
