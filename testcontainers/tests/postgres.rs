//! Throwaway PostgreSQL servers start, accept connections, do not collide, survive stop,
//! start and kill, and leave nothing behind, also when the test process crashes. The
//! crash and missing-install tests re-execute this test binary as a child process
//! (selected by name, with `ZKT_CHILD_MODE` set) and inspect what the child leaves.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{poll_until, process_alive};
use zkfence_testcontainers::{HarnessError, Postgres};

const CHILD_ENV: &str = "ZKT_CHILD_MODE";

/// Runs `sql` through `psql` against `pg`; returns its trimmed output, or its stderr.
fn psql(pg: &Postgres, sql: &str) -> Result<String, String> {
    let out = Command::new(pg.bin_dir().join("psql"))
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", pg.host(), "-p", &pg.port().to_string()])
        .args(["-U", pg.user(), "-d", pg.database(), "-c", sql])
        .stdin(Stdio::null())
        .output()
        .expect("psql runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The real uid of a process, from `/proc`.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

/// Live processes whose command line contains `marker` (the instance's dir name).
fn processes_marked(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| process_alive(pid, Some(marker)))
        .collect()
}

/// The System V shared memory id a running server recorded in its `postmaster.pid`.
fn shmid_of(pg: &Postgres) -> u64 {
    let text = std::fs::read_to_string(pg.dir().join("data/postmaster.pid")).unwrap();
    text.lines()
        .nth(6)
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no shmid in postmaster.pid:\n{text}"))
}

/// Whether a System V shared memory segment with this id exists.
fn shm_exists(shmid: u64) -> bool {
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    table
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()) == Some(shmid))
}

fn marker_of(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

#[tokio::test]
async fn starts_accepts_connections_and_drop_removes_dir_and_processes() {
    let pg = Postgres::launch().await.unwrap();
    assert_eq!(pg.host(), "127.0.0.1");
    assert_eq!(
        pg.url(),
        format!("postgres://zkfence@127.0.0.1:{}/zkfence", pg.port())
    );
    assert_eq!(
        psql(
            &pg,
            "CREATE TABLE t (x int); INSERT INTO t VALUES (41), (1); SELECT sum(x) FROM t"
        )
        .unwrap(),
        "42"
    );
    assert_eq!(psql(&pg, "SELECT current_database()").unwrap(), "zkfence");
    let pid = pg.pid().unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_ne!(uid_of(pid), 0, "the server runs as root");
    }
    let pids = pg.pids();
    assert!(pids.contains(&pid), "{pids:?} lacks the postmaster {pid}");
    assert!(
        pids.len() > 1,
        "no backends found besides the postmaster: {pids:?}"
    );

    let dir = pg.dir().to_path_buf();
    drop(pg);
    assert!(!dir.exists(), "{} survived the drop", dir.display());
    let marker = marker_of(&dir);
    let left = processes_marked(&marker);
    assert!(left.is_empty(), "processes left after drop: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_in_parallel_do_not_collide() {
    let (a, b) = tokio::join!(
        Postgres::builder().database("alpha").start(),
        Postgres::builder().database("beta").user("other").start(),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    psql(
        &a,
        "CREATE TABLE who (name text); INSERT INTO who VALUES ('a')",
    )
    .unwrap();
    psql(
        &b,
        "CREATE TABLE who (name text); INSERT INTO who VALUES ('b')",
    )
    .unwrap();
    assert_eq!(psql(&a, "SELECT name FROM who").unwrap(), "a");
    assert_eq!(psql(&b, "SELECT name FROM who").unwrap(), "b");
    assert_eq!(psql(&b, "SELECT current_user").unwrap(), "other");
    assert!(b.url().ends_with("/beta") && b.url().starts_with("postgres://other@"));
    // Stopping one leaves the other serving.
    a.stop();
    assert!(psql(&a, "SELECT 1").is_err());
    assert_eq!(psql(&b, "SELECT 1").unwrap(), "1");
}

#[tokio::test]
async fn stop_start_and_kill_keep_the_port_and_committed_data() {
    let pg = Postgres::launch().await.unwrap();
    let port = pg.port();
    psql(&pg, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)").unwrap();

    pg.stop();
    assert!(!pg.is_running());
    assert!(pg.pids().is_empty(), "{:?}", pg.pids());
    let err = psql(&pg, "SELECT 1").unwrap_err();
    assert!(
        err.contains("refused") || err.contains("could not connect"),
        "{err}"
    );
    pg.start().await.unwrap();
    assert_eq!(pg.port(), port);
    psql(&pg, "INSERT INTO t VALUES (2)").unwrap();

    // A crash: committed rows survive (crash recovery), nothing of the old server stays.
    let shmid = shmid_of(&pg);
    assert!(shm_exists(shmid));
    pg.kill();
    assert!(
        !shm_exists(shmid),
        "the killed server's shared memory {shmid} stays"
    );
    assert!(!pg.is_running());
    assert!(pg.pids().is_empty(), "{:?}", pg.pids());
    pg.start().await.unwrap();
    assert_eq!(
        psql(&pg, "SELECT string_agg(x::text, ',' ORDER BY x) FROM t").unwrap(),
        "1,2"
    );
}

#[tokio::test]
async fn invalid_names_are_refused() {
    let err = Postgres::builder()
        .database("no; drop")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::InvalidConfig(_)), "{err:?}");
}

// ---- child-process tests ----

/// What a child run of test `name` printed and how it ended.
struct ChildRun {
    status: ExitStatus,
    dir: Option<PathBuf>,
    pid: Option<u32>,
    shmid: Option<u64>,
    output: String,
}

fn run_child(name: &str, extra_env: &[(&str, &str)]) -> ChildRun {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Collect stderr on a thread so that neither pipe can fill up and block the child.
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let (mut dir, mut pid, mut shmid, mut output) = (None, None, None, String::new());
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((_, d)) = line.split_once("ZKT_DIR=") {
            dir = Some(PathBuf::from(d));
        } else if let Some((_, p)) = line.split_once("ZKT_PID=") {
            pid = Some(p.parse::<u32>().unwrap());
        } else if let Some((_, id)) = line.split_once("ZKT_SHMID=") {
            shmid = Some(id.parse::<u64>().unwrap());
        }
        output.push_str(&line);
        output.push('\n');
    }
    let status = child.wait().unwrap();
    output.push_str(&err_reader.join().unwrap());
    ChildRun {
        status,
        dir,
        pid,
        shmid,
        output,
    }
}

#[test]
fn crashed_test_process_leaves_no_postgres_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pg = rt
            .block_on(Postgres::launch())
            .expect("postgres starts in the child");
        psql(&pg, "SELECT 1").unwrap();
        let mut out = std::io::stdout().lock();
        // A leading newline: libtest may have printed "test <name> ... " already.
        writeln!(out, "\nZKT_DIR={}", pg.dir().display()).unwrap();
        writeln!(out, "ZKT_PID={}", pg.pid().unwrap()).unwrap();
        writeln!(out, "ZKT_SHMID={}", shmid_of(&pg)).unwrap();
        out.flush().unwrap();
        // SAFETY: plain syscalls; the process dies here, without unwinding or destructors.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        unreachable!("the process survived SIGKILL");
    }
    let run = run_child("crashed_test_process_leaves_no_postgres_behind", &[]);
    assert_eq!(
        run.status.signal(),
        Some(libc::SIGKILL),
        "child: {}\n{}",
        run.status,
        run.output
    );
    let dir = run.dir.clone().expect("the child reported its dir");
    let pid = run.pid.expect("the child reported its server pid");
    let shmid = run.shmid.expect("the child reported its shared memory id");
    let marker = marker_of(&dir);
    // Drop did not run: the watchdog must kill the postmaster and every backend.
    let clean = poll_until(Duration::from_secs(20), || {
        processes_marked(&marker).is_empty() && !dir.exists() && !shm_exists(shmid)
    });
    assert!(
        clean,
        "postmaster {pid} alive: {}, marked processes: {:?}, {} exists: {}, shared memory \
         {shmid} exists: {}",
        process_alive(pid, Some(&marker)),
        processes_marked(&marker),
        dir.display(),
        dir.exists(),
        shm_exists(shmid)
    );
}

#[test]
fn missing_postgres_is_reported_with_what_to_install() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = rt
            .block_on(Postgres::launch())
            .expect_err("no PostgreSQL there");
        assert!(
            matches!(err, HarnessError::PostgresNotFound { .. }),
            "{err:?}"
        );
        println!("\nZKT_ERROR={err}");
        return;
    }
    let run = run_child(
        "missing_postgres_is_reported_with_what_to_install",
        &[("PG_BINDIR", "/nonexistent/postgresql/bin")],
    );
    assert!(run.status.success(), "{}", run.output);
    assert!(
        run.output.contains("apt-get install -y postgresql") && run.output.contains("PG_BINDIR"),
        "{}",
        run.output
    );
}
