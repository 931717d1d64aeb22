//! `zkfence exec` never lets CMD outlive the lock (issue 12), with real processes against a
//! real ensemble: zkfence killed or frozen, the lease lost, signals to the whole process
//! group; and the operator habits `--shared`, `--limit`, `--no-wait`.
//!
//! `ZKFENCE_TEST_BIN` runs these against another build of the binary (e.g. one from before
//! the supervisor, to see them fail).

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{children, connect, eventually, shared_ensemble, unique_path};
use process::{finish, next_line, read_pid, signal, zkfence};
use tokio::process::Child;
use tokio::time::Instant;

/// True while `pid` exists and is not a zombie (a zombie has stopped running).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// A scratch directory of this test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zkfence-sup-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Nanosecond wall-clock timestamps, one per line, as `date +%s%N` wrote them.
fn stamps(file: &Path) -> Vec<u128> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// CMD for the tests: a shell that starts a background child (pid in DIR/child), writes its
/// own pid to DIR/cmd, says "ready" and waits. The child holds none of zkfence's pipes, so a
/// surviving child cannot hold up the test's reads (and hide that it survived).
fn cmd_with_child(dir: &Path) -> String {
    format!(
        "sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {d}/child; echo $$ > {d}/cmd; echo ready; wait",
        d = dir.display()
    )
}

#[tokio::test]
async fn sigkill_of_zkfence_takes_cmd_and_its_child_down_before_the_session_can_expire() {
    let zk = shared_ensemble();
    let path = unique_path("sup-kill9");
    let dir = scratch("kill9");
    // A 4 s session: the lock cannot pass on for seconds after zkfence dies.
    let mut cli = zkfence(
        &zk.connect_string(),
        &[
            "--session-timeout",
            "4s",
            "exec",
            &path,
            "--",
            "sh",
            "-c",
            &cmd_with_child(&dir),
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let (cmd, child) = (read_pid(&dir.join("cmd")), read_pid(&dir.join("child")));
    assert!(running(cmd) && running(child));

    signal(&cli, libc::SIGKILL);
    let killed = Instant::now();
    let _ = cli.wait().await;
    while (running(cmd) || running(child)) && killed.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = killed.elapsed();
    assert!(
        !running(cmd) && !running(child),
        "CMD (pid {cmd}, running: {}) and its child (pid {child}, running: {}) must be gone within 1 s of zkfence's death",
        running(cmd),
        running(child)
    );
    // The session is still alive: the lock has not passed on yet, and CMD is already gone.
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    assert_eq!(
        children(&observer, &path).await.len(),
        1,
        "the dead zkfence's node is still there (its session has not expired), after {took:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One trial: freeze zkfence (not CMD) while CMD writes timestamps; a second exec queued on
/// the same lock writes its start time. Returns (last write of the first CMD, start of the
/// second), and checks that the first zkfence exits 76 once resumed.
async fn frozen_holder_trial(connect_string: &str, path: &str, dir: &Path) -> (u128, u128) {
    let first_log = dir.join("first");
    let second_log = dir.join("second");
    let writer = format!(
        "echo ready; while :; do date +%s%N >> {}; sleep 0.05; done",
        first_log.display()
    );
    let mut first = zkfence(
        connect_string,
        &[
            "--session-timeout",
            "2s",
            "exec",
            path,
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
    // The second holds for a while: a first CMD still running would write meanwhile. Its
    // own session is longer than the first's: at 2 s, a loaded machine's late keepalive
    // answers (seen at load 20) could leave its own lease too short to finish the 0.5 s,
    // which says nothing about the first (the trial's subject).
    let starter = format!("date +%s%N > {}; sleep 0.5", second_log.display());
    let second = zkfence(
        connect_string,
        &[
            "--session-timeout",
            "4s",
            "exec",
            path,
            "--",
            "sh",
            "-c",
            &starter,
        ],
    )
    .spawn()
    .unwrap();
    let observer = connect(connect_string, Duration::from_secs(4)).await;
    eventually(
        Duration::from_secs(10),
        "the second exec queued",
        || async { children(&observer, path).await.len() == 2 && !stamps(&first_log).is_empty() },
    )
    .await;

    signal(&first, libc::SIGSTOP);
    let second = finish(second, Duration::from_secs(20)).await;
    assert_eq!(
        second.code,
        Some(0),
        "the second exec ran: {}",
        second.stderr
    );
    signal(&first, libc::SIGCONT);
    let first = finish(first, Duration::from_secs(20)).await;
    assert_eq!(
        first.code,
        Some(76),
        "the resumed zkfence reports the lost lock: {}",
        first.stderr
    );
    let last = *stamps(&first_log).last().expect("the first CMD wrote");
    let start = stamps(&second_log)[0];
    (last, start)
}

#[tokio::test]
async fn a_frozen_zkfence_cannot_keep_cmd_running_past_the_lock() {
    let zk = shared_ensemble();
    let mut results = vec![];
    for trial in 0..10 {
        let path = unique_path(&format!("sup-stop-{trial}"));
        let dir = scratch("stop");
        let (last, start) = frozen_holder_trial(&zk.connect_string(), &path, &dir).await;
        results.push((last, start));
        let _ = std::fs::remove_dir_all(&dir);
    }
    let overlaps: Vec<String> = results
        .iter()
        .enumerate()
        .filter(|(_, (last, start))| last >= start)
        .map(|(i, (last, start))| {
            format!(
                "trial {i}: first CMD wrote {:.3}s after the second started",
                (last - start) as f64 / 1e9
            )
        })
        .collect();
    assert!(
        overlaps.is_empty(),
        "the first CMD's last write must precede the second's start in 10 of 10 trials: {overlaps:?}"
    );
}

#[tokio::test]
async fn a_lost_lease_stops_cmds_children_too() {
    let zk = shared_ensemble();
    let path = unique_path("sup-lost");
    let proxy = zk.proxy().await.unwrap();
    let dir = scratch("lost");
    let mut cli = zkfence(
        &proxy.connect_string(),
        &[
            "--session-timeout",
            "2s",
            "exec",
            &path,
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            &cmd_with_child(&dir),
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let (cmd, child) = (read_pid(&dir.join("cmd")), read_pid(&dir.join("child")));
    proxy.blackhole();
    let ran = finish(cli, Duration::from_secs(20)).await;
    assert_eq!(ran.code, Some(76), "{}", ran.stderr);
    assert!(
        !running(cmd) && !running(child),
        "CMD (running: {}) and its child (running: {}) are gone when zkfence exits: {}",
        running(cmd),
        running(child),
        ran.stderr
    );
    assert!(
        ran.stderr.contains("lost the lock") || ran.stderr.contains("run out"),
        "{}",
        ran.stderr
    );
    proxy.heal();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn term_int_and_hup_reach_the_whole_group_and_the_lock_is_released_first() {
    let zk = shared_ensemble();
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let path = unique_path("sup-sig");
        let dir = scratch("sig");
        let mut cli = zkfence(
            &zk.connect_string(),
            &[
                "exec",
                &path,
                "--grace",
                "1s",
                "--",
                "sh",
                "-c",
                &cmd_with_child(&dir),
            ],
        )
        .spawn()
        .unwrap();
        assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
        let (cmd, child) = (read_pid(&dir.join("cmd")), read_pid(&dir.join("child")));
        signal(&cli, sig);
        let ran = finish(cli, Duration::from_secs(15)).await;
        // Checked the moment zkfence is gone.
        let cmd_ran = running(cmd);
        let child_ran = running(child);
        let left = children(&observer, &path).await;
        assert_eq!(
            ran.code,
            Some(128 + sig),
            "signal {sig}: CMD died of it: {}",
            ran.stderr
        );
        assert!(
            !cmd_ran && !child_ran,
            "signal {sig}: CMD (running: {cmd_ran}) and its child (running: {child_ran}) are gone: {}",
            ran.stderr
        );
        assert!(
            left.is_empty(),
            "signal {sig}: the lock was released before zkfence exited: {left:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn no_wait_exits_75_at_once_when_taken() {
    let zk = shared_ensemble();
    let path = unique_path("sup-nowait");
    let holder = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let lease = holder.lock(&path).with_id("busy").acquire().await.unwrap();
    let started = Instant::now();
    let ran = finish(
        zkfence(
            &zk.connect_string(),
            &["exec", "--no-wait", &path, "--", "echo", "ran"],
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("busy"),
        "names the holder: {}",
        ran.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(5), "did not wait");
    assert_eq!(children(&holder, &path).await.len(), 1, "left no node");
    lease.release().await.unwrap();
    let ran = finish(
        zkfence(
            &zk.connect_string(),
            &["exec", "--no-wait", &path, "--", "true"],
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "runs when free: {}", ran.stderr);
}

/// A CMD that marks its start in DIR/start-NAME, waits (at most 10 s) until `peers` starts
/// exist, then writes its start and end timestamps to DIR/NAME.
fn rendezvous(dir: &Path, name: &str, peers: usize) -> String {
    format!(
        "d={d}; date +%s%N > $d/{name}; touch $d/start-{name}; i=0; \
         while [ $(ls $d | grep -c '^start-') -lt {peers} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
         sleep 0.2; date +%s%N >> $d/{name}",
        d = dir.display()
    )
}

/// The largest number of intervals that overlap at one instant.
fn max_overlap(intervals: &[(u128, u128)]) -> usize {
    let mut events: Vec<(u128, i32)> = intervals
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // At equal times the end comes first: touching intervals do not overlap.
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as usize
}

fn interval(dir: &Path, name: &str) -> (u128, u128) {
    let s = stamps(&dir.join(name));
    assert_eq!(s.len(), 2, "{name} wrote its start and end: {s:?}");
    (s[0], s[1])
}

#[tokio::test]
async fn shared_runs_together_and_excludes_a_plain_exec() {
    let zk = shared_ensemble();
    let path = unique_path("sup-shared");
    let dir = scratch("shared");
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let readers: Vec<Child> = ["r1", "r2"]
        .iter()
        .map(|name| {
            zkfence(
                &zk.connect_string(),
                &[
                    "exec",
                    "--shared",
                    &path,
                    "--",
                    "sh",
                    "-c",
                    &rendezvous(&dir, name, 2),
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    // The writer queues behind both readers.
    eventually(Duration::from_secs(10), "both readers in", || async {
        dir.join("start-r1").exists() && dir.join("start-r2").exists()
    })
    .await;
    let writer = zkfence(
        &zk.connect_string(),
        &["exec", &path, "--", "sh", "-c", &rendezvous(&dir, "w", 0)],
    )
    .spawn()
    .unwrap();
    for r in readers {
        let ran = finish(r, Duration::from_secs(20)).await;
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    }
    let ran = finish(writer, Duration::from_secs(20)).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let (r1, r2, w) = (
        interval(&dir, "r1"),
        interval(&dir, "r2"),
        interval(&dir, "w"),
    );
    assert_eq!(
        max_overlap(&[r1, r2]),
        2,
        "the two --shared runs ran at once: {r1:?} {r2:?}"
    );
    assert_eq!(
        max_overlap(&[r1, r2, w]),
        2,
        "the plain exec ran alone: readers {r1:?} {r2:?}, writer {w:?}"
    );
    assert!(
        w.0 > r1.1 && w.0 > r2.1,
        "the writer started after both readers ended"
    );

    // And a --shared run does not get in while a plain one holds.
    let lease = observer.lock(&path).acquire().await.unwrap();
    let ran = finish(
        zkfence(
            &zk.connect_string(),
            &["exec", "--shared", "--no-wait", &path, "--", "true"],
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        ran.code,
        Some(75),
        "--shared is excluded by a writer: {}",
        ran.stderr
    );
    lease.release().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn limit_runs_at_most_n_at_once() {
    let zk = shared_ensemble();
    let path = unique_path("sup-limit");
    let dir = scratch("limit");
    let names = ["a", "b", "c"];
    let runs: Vec<Child> = names
        .iter()
        .map(|name| {
            zkfence(
                &zk.connect_string(),
                &[
                    "exec",
                    "--limit",
                    "2",
                    &path,
                    "--",
                    "sh",
                    "-c",
                    &rendezvous(&dir, name, 2),
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    for r in runs {
        let ran = finish(r, Duration::from_secs(30)).await;
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    }
    let intervals: Vec<(u128, u128)> = names.iter().map(|n| interval(&dir, n)).collect();
    assert_eq!(
        max_overlap(&intervals),
        2,
        "two at once, never three: {intervals:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn limit_no_wait_is_turned_away_when_every_permit_is_taken() {
    let zk = shared_ensemble();
    let path = unique_path("sup-limit-nowait");
    let holder = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let sem = holder.semaphore(&path, 2);
    let p1 = sem.acquire().await.unwrap();
    let ran = finish(
        zkfence(
            &zk.connect_string(),
            &["exec", "--limit", "2", "--no-wait", &path, "--", "true"],
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        ran.code,
        Some(0),
        "one permit of two was free: {}",
        ran.stderr
    );
    let p2 = sem.acquire().await.unwrap();
    let ran = finish(
        zkfence(
            &zk.connect_string(),
            &["exec", "--limit", "2", "--no-wait", &path, "--", "true"],
        )
        .spawn()
        .unwrap(),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(75), "both permits taken: {}", ran.stderr);
    p1.release().await.unwrap();
    p2.release().await.unwrap();
}
