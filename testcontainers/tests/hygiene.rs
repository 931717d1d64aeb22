//! Ensembles clean up after tests that crash or panic, and explain what is missing when
//! ZooKeeper is not installed. Each test re-executes this test binary as a child process
//! (selected by name, with `ZKT_CHILD_MODE` set) and inspects what the child leaves behind.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{poll_until, process_alive};
use zkfence_testcontainers::{Ensemble, HarnessError};

const CHILD_ENV: &str = "ZKT_CHILD_MODE";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Starts a 1-node ensemble and prints its dir and server pid for the parent.
fn start_and_report() -> Ensemble {
    let zk = runtime()
        .block_on(Ensemble::builder().nodes(1).start())
        .expect("ensemble starts in the child");
    let mut out = std::io::stdout().lock();
    // A leading newline: libtest may have printed "test <name> ... " already.
    writeln!(out, "\nZKT_DIR={}", zk.dir().display()).unwrap();
    writeln!(out, "ZKT_PID={}", zk.pid(0).unwrap()).unwrap();
    out.flush().unwrap();
    zk
}

/// What a child run of test `name` printed and how it ended.
struct ChildRun {
    status: ExitStatus,
    dir: Option<PathBuf>,
    pid: Option<u32>,
    output: String,
}

/// Runs this test binary's test `name` in a child process with `ZKT_CHILD_MODE=1`.
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
    let (mut dir, mut pid, mut output) = (None, None, String::new());
    // The pipe closes when the child dies, so this ends.
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((_, d)) = line.split_once("ZKT_DIR=") {
            dir = Some(PathBuf::from(d));
        } else if let Some((_, p)) = line.split_once("ZKT_PID=") {
            pid = Some(p.parse::<u32>().unwrap());
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
        output,
    }
}

/// Asserts (polling, with a deadline) that the child's server and dir disappear.
fn assert_child_cleaned_up(run: &ChildRun) {
    let dir = run
        .dir
        .clone()
        .expect("the child reported its ensemble dir");
    let pid = run.pid.expect("the child reported its server pid");
    let marker = dir.to_string_lossy().into_owned();
    let clean = poll_until(Duration::from_secs(15), || {
        !process_alive(pid, Some(&marker)) && !dir.exists()
    });
    assert!(
        clean,
        "server {pid} alive: {}, {} exists: {}",
        process_alive(pid, Some(&marker)),
        dir.display(),
        dir.exists()
    );
}

#[test]
fn crashed_test_process_leaves_no_server_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let _zk = start_and_report();
        // SAFETY: plain syscalls; the process dies here, without unwinding or destructors.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        unreachable!("the process survived SIGKILL");
    }
    let run = run_child("crashed_test_process_leaves_no_server_behind", &[]);
    assert_eq!(
        run.status.signal(),
        Some(libc::SIGKILL),
        "child: {}\n{}",
        run.status,
        run.output
    );
    // Drop did not run: the watchdog must clean up.
    assert_child_cleaned_up(&run);
}

#[test]
fn panicking_test_prints_server_logs_and_cleans_up() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let _zk = start_and_report();
        panic!("deliberate panic with a live ensemble");
    }
    let run = run_child("panicking_test_prints_server_logs_and_cleans_up", &[]);
    assert!(!run.status.success(), "the child test should fail");
    assert!(
        run.output.contains("ZooKeeper logs of the ensemble") && run.output.contains("---- node 0"),
        "no server log in the output of the panicking test:\n{}",
        run.output
    );
    assert_child_cleaned_up(&run);
}

#[test]
fn missing_zookeeper_is_reported_with_what_to_install() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let err = runtime()
            .block_on(Ensemble::builder().nodes(1).start())
            .expect_err("no ZooKeeper there");
        assert!(
            matches!(err, HarnessError::ZooKeeperNotFound { .. }),
            "{err:?}"
        );
        println!("\nZKT_ERROR={err}");
        return;
    }
    let run = run_child(
        "missing_zookeeper_is_reported_with_what_to_install",
        &[("ZOOKEEPER_HOME", "/nonexistent/zookeeper-home")],
    );
    assert!(run.status.success(), "{}", run.output);
    assert!(
        run.output.contains("apt-get install -y zookeeper")
            && run.output.contains("ZOOKEEPER_HOME"),
        "{}",
        run.output
    );
}
