//! Issue 21: the bounds of `zkfence exec` hold exactly, also when something else goes wrong
//! at the same moment: CMD's whole group is gone before the lock can pass on after a lapse,
//! a deadline handed to the supervisor cannot be stretched by a stall of zkfence, and a
//! group member zkfence may not signal is reported instead of waited for forever.
//!
//! `ZKFENCE_TEST_BIN` runs these against another build of the binary (e.g. one from before
//! the fixes, to see them fail).

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{children, connect, eventually, shared_ensemble, unique_path};
use process::{next_line, read_pid, signal, zkfence};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A scratch directory of this test, open to every user (one test runs zkfence as nobody).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zkfence-handoff-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// Nanosecond timestamps of `date +%s%N` (the one wall clock of this machine), one a line.
fn stamps(file: &Path) -> Vec<u128> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// True while `pid` is stopped (SIGSTOP).
fn stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

/// The children of `pid` (of all its threads).
fn children_of(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                out.extend(
                    list.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    }
    out
}

/// CLOCK_BOOTTIME now, in nanoseconds: the clock of the supervisor's deadlines, which every
/// process of the machine shares.
fn boot_ns() -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// Forwards every line of `child`'s stderr to the returned channel (and keeps them all).
fn stderr_lines(child: &mut Child) -> mpsc::UnboundedReceiver<String> {
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits (at most `limit`) for a line containing `needle`; returns it, and every line seen.
async fn line_with(
    lines: &mut mpsc::UnboundedReceiver<String>,
    needle: &str,
    limit: Duration,
    seen: &mut Vec<String>,
) -> String {
    let deadline = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) => {
                seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
            Ok(None) => panic!("stderr ended without {needle:?}: {seen:#?}"),
            Err(_) => panic!("no {needle:?} on stderr within {limit:?}: {seen:#?}"),
        }
    }
}

/// Waits for `child` to exit (at most `limit`): its exit code.
async fn exit_code(child: &mut Child, limit: Duration) -> Option<i32> {
    tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("zkfence did not exit within {limit:?}"))
        .expect("wait for zkfence")
        .code()
}

/// Item 1: when the lease clock lapses while CMD runs, the node stays until the supervisor
/// reports CMD's group gone, so the next holder's CMD starts only after the first one's has
/// ended. Here the ensemble stops answering zkfence (requests still reach it, so the session
/// lives: the lapse is the clock's, not an expiry) while its supervisor is frozen, so CMD
/// (which ignores SIGTERM) runs on past the lapse; the ensemble answers again, and only when
/// the supervisor is resumed is CMD's group killed. Before the fix the library deleted the
/// node as soon as the ensemble answered again, and the second CMD started while the first
/// still wrote.
#[tokio::test]
async fn after_a_lapse_the_next_cmd_starts_only_once_the_first_group_is_gone() {
    let zk = shared_ensemble();
    let path = unique_path("handoff-lapse");
    let proxy = zk.proxy().await.unwrap();
    let dir = scratch("lapse");
    let first_log = dir.join("first");
    let second_log = dir.join("second");
    let writer = format!(
        "trap '' TERM; echo ready; while :; do date +%s%N >> {}; sleep 0.02; done",
        first_log.display()
    );
    let mut first = zkfence(
        &proxy.connect_string(),
        &[
            "--session-timeout",
            "4s",
            "--log-level",
            "zkfence=warn",
            "exec",
            &path,
            "--grace",
            "200ms",
            "--",
            "sh",
            "-c",
            &writer,
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(
        next_line(&mut first, Duration::from_secs(20)).await,
        "ready"
    );
    let mut first_err = stderr_lines(&mut first);
    let starter = format!("date +%s%N > {}", second_log.display());
    let mut second = zkfence(
        &zk.connect_string(),
        &[
            "--session-timeout",
            "4s",
            "exec",
            &path,
            "--",
            "sh",
            "-c",
            &starter,
        ],
    )
    .spawn()
    .unwrap();
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    eventually(
        Duration::from_secs(10),
        "the second exec queued",
        || async { children(&observer, &path).await.len() == 2 },
    )
    .await;
    let pid = first.id().unwrap() as i32;
    let supervisor = *children_of(pid).first().expect("the supervisor runs");
    // SAFETY: kill(2) on the supervisor our child started.
    assert_eq!(unsafe { libc::kill(supervisor, libc::SIGSTOP) }, 0);

    proxy.hold_responses();
    let mut seen = vec![];
    line_with(
        &mut first_err,
        "lease lost",
        Duration::from_secs(15),
        &mut seen,
    )
    .await;
    proxy.heal();
    // The window in which a node deleted on the lapse lets the second CMD in, while the first
    // still runs (its supervisor frozen).
    let watched = Instant::now();
    while !second_log.exists() && watched.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second_started_while_frozen = second_log.exists();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(supervisor, libc::SIGCONT) }, 0);
    let code = exit_code(&mut first, Duration::from_secs(20)).await;
    let second_code = exit_code(&mut second, Duration::from_secs(20)).await;
    while let Ok(line) = first_err.try_recv() {
        seen.push(line);
    }
    assert_eq!(
        code,
        Some(76),
        "the first exec reports the lost lock: {seen:#?}"
    );
    assert_eq!(second_code, Some(0), "the second exec ran");
    let last = *stamps(&first_log).last().expect("the first CMD wrote");
    let start = stamps(&second_log)[0];
    assert!(
        !second_started_while_frozen && last < start,
        "the second CMD started {:.3}s before the first CMD's last write (started while the first's supervisor was frozen: {second_started_while_frozen})",
        (last as f64 - start as f64) / 1e9
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Item 2: the deadline handed to the supervisor is an absolute CLOCK_BOOTTIME instant, so
/// a stall of zkfence between computing it and handing it over does not move it. A test hook
/// freezes zkfence (SIGSTOP) right there, until past that deadline; the ensemble is silent,
/// so no renewal comes after. The supervisor must not run CMD past the original deadline
/// (before the fix it got "the time left" and counted it from its own start, a stall late).
#[tokio::test]
async fn a_stall_before_the_deadline_is_handed_over_does_not_move_it() {
    let zk = shared_ensemble();
    let path = unique_path("handoff-stall");
    let proxy = zk.proxy().await.unwrap();
    let dir = scratch("stall");
    let cmd_log = dir.join("cmd");
    // CMD leaves its pid: a sign that it was started at all.
    let cmd = format!(
        "trap '' TERM; echo $$ > {}; echo ready; while :; do sleep 0.02; done",
        cmd_log.display()
    );
    let mut cli = zkfence(
        &proxy.connect_string(),
        &[
            "--session-timeout",
            "4s",
            "exec",
            &path,
            "--grace",
            "10s",
            "--",
            "sh",
            "-c",
            &cmd,
        ],
    );
    cli.env("ZKFENCE_TEST_STOP_BEFORE_DEADLINE", "1");
    let mut cli = cli.spawn().unwrap();
    let mut err = stderr_lines(&mut cli);
    let mut seen = vec![];
    let line = line_with(
        &mut err,
        "zkfence-test: deadline",
        Duration::from_secs(20),
        &mut seen,
    )
    .await;
    let deadline: u128 = line
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .expect("the deadline in ns");
    let pid = cli.id().unwrap() as i32;
    let frozen = Instant::now();
    while !stopped(pid) {
        assert!(
            frozen.elapsed() < Duration::from_secs(5),
            "zkfence never stopped"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Nothing renews the lease after the stall, which lasts until past the deadline.
    proxy.blackhole();
    let past = deadline + 500_000_000;
    tokio::time::sleep(Duration::from_nanos(past.saturating_sub(boot_ns()) as u64)).await;
    signal(&cli, libc::SIGCONT);
    let code = exit_code(&mut cli, Duration::from_secs(20)).await;
    let ended = boot_ns();
    while let Ok(line) = err.try_recv() {
        seen.push(line);
    }
    assert!(
        !cmd_log.exists(),
        "CMD was started after the deadline zkfence computed before its stall, and zkfence \
         exited {:.3}s past that deadline: {seen:#?}",
        (ended - deadline) as f64 / 1e9
    );
    assert_eq!(code, Some(76), "{seen:#?}");
    proxy.heal();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Item 3: a member of CMD's group that zkfence may not signal (another user's process: here
/// a setuid-root helper that makes itself root for good, under a zkfence run as nobody)
/// escapes the group kill. zkfence says so and exits 77 instead of waiting for the group
/// forever. Runs only as root (it needs to make the helper and become nobody).
#[tokio::test]
async fn a_group_member_of_another_user_is_reported_not_waited_for() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to set up a process of another user");
        return;
    }
    let zk = shared_ensemble();
    let path = unique_path("handoff-foreign");
    let dir = scratch("foreign");
    // A setuid-root perl: run by nobody, it becomes root (real uid too), which nobody may not
    // signal; it prints its pid and waits.
    let perl = dir.join("rootperl");
    std::fs::copy("/usr/bin/perl", &perl).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&perl, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let cmd = format!(
        "{perl} -e '$< = $> = 0; open(my $f, \">\", \"{d}/root\"); print $f \"$$\\n\"; close $f; sleep 30' & \
         while [ ! -s {d}/root ]; do sleep 0.02; done; echo ready; wait",
        perl = perl.display(),
        d = dir.display()
    );
    let mut cli = tokio::process::Command::new("setpriv");
    cli.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &process::bin(),
        "--connect",
        &zk.connect_string(),
        "exec",
        &path,
        "--grace",
        "300ms",
        "--",
        "sh",
        "-c",
        &cmd,
    ])
    .env_remove("ZKFENCE_CONNECT")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    let mut cli = cli.spawn().unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let root = read_pid(&dir.join("root"));
    let mut err = stderr_lines(&mut cli);
    signal(&cli, libc::SIGTERM);
    let code = tokio::time::timeout(Duration::from_secs(10), cli.wait()).await;
    let mut seen = vec![];
    while let Ok(line) = err.try_recv() {
        seen.push(line);
    }
    // SAFETY: kill(2) as root on the helper this test started.
    unsafe { libc::kill(root, libc::SIGKILL) };
    let code = code
        .unwrap_or_else(|_| panic!("zkfence waited for a process it may not signal: {seen:#?}"))
        .unwrap()
        .code();
    assert_eq!(code, Some(77), "{seen:#?}");
    let said = seen.join("\n");
    assert!(
        said.contains("another user") && said.contains(&root.to_string()),
        "names the process it cannot signal: {said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
