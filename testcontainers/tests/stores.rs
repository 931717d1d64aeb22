//! Throwaway Redis, etcd and MariaDB servers start and serve, run as an unprivileged user
//! where the server refuses root, keep what they acknowledged across kill and start, do not
//! collide, and leave nothing behind, also when the test process crashes (the crash test
//! re-executes this binary as a child, selected by name with `ZKT_CHILD_MODE` set).
//!
//! The clients are the servers' own protocols spoken by hand (RESP, etcd's JSON gateway,
//! the `mariadb` command line client), so this crate needs no client library.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{poll_until, process_alive};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zkfence_testcontainers::{Etcd, MariaDb, Redis};

const CHILD_ENV: &str = "ZKT_CHILD_MODE";

/// One request over a fresh connection; the whole answer (until the server closes, or
/// `until` shows up).
async fn exchange(port: u16, request: &[u8], until: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    s.write_all(request).await.expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if !until.is_empty() && got.windows(until.len()).any(|w| w == until) {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("an answer in time");
    String::from_utf8_lossy(&got).into_owned()
}

/// A RESP command.
fn resp(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len());
    for w in words {
        out.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    out.into_bytes()
}

fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A POST to etcd's JSON gateway (`/v3/kv/put`, `/v3/kv/range`).
async fn etcd_post(port: u16, path: &str, body: &str) -> String {
    let req = format!(
        "POST {path} HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    exchange(port, req.as_bytes(), b"").await
}

fn mariadb_sql(db: &MariaDb, sql: &str) -> Result<String, String> {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "-N", "-B", "-h", db.host()])
        .args(["-P", &db.port().to_string(), "-u", db.user(), db.database()])
        .args(["-e", sql])
        .stdin(Stdio::null())
        .output()
        .expect("the mariadb client runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

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

fn marker_of(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

fn processes_marked(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| process_alive(pid, Some(marker)))
        .collect()
}

/// After a drop: no process of the instance and no directory.
fn assert_gone(dir: &Path, what: &str) {
    let marker = marker_of(dir);
    assert!(
        poll_until(Duration::from_secs(10), || processes_marked(&marker)
            .is_empty()
            && !dir.exists()),
        "{what} left {:?} and dir exists: {}",
        processes_marked(&marker),
        dir.exists()
    );
}

#[tokio::test]
async fn redis_serves_keeps_acknowledged_writes_across_kill_and_goes_on_drop() {
    let redis = Redis::launch().await.expect("start Redis");
    assert!(redis.url().ends_with(&format!(":{}/", redis.port())));
    let set = exchange(redis.port(), &resp(&["SET", "k", "v1"]), b"\r\n").await;
    assert_eq!(set, "+OK\r\n");
    let port = redis.port();
    redis.kill();
    assert!(!redis.is_running());
    redis.start().await.expect("start again");
    assert_eq!(redis.port(), port);
    let got = exchange(port, &resp(&["GET", "k"]), b"v1\r\n").await;
    assert_eq!(got, "$2\r\nv1\r\n", "the append-only file kept the write");
    let dir = redis.dir().to_path_buf();
    drop(redis);
    assert_gone(&dir, "Redis");
}

#[tokio::test]
async fn etcd_serves_keeps_acknowledged_writes_across_kill_and_goes_on_drop() {
    let etcd = Etcd::launch().await.expect("start etcd");
    assert_eq!(etcd.endpoint(), format!("http://127.0.0.1:{}", etcd.port()));
    let body = format!(r#"{{"key":"{}","value":"{}"}}"#, base64("k"), base64("v1"));
    let put = etcd_post(etcd.port(), "/v3/kv/put", &body).await;
    assert!(put.starts_with("HTTP/1.0 200"), "{put}");
    etcd.kill();
    etcd.start().await.expect("start again");
    let range = format!(r#"{{"key":"{}"}}"#, base64("k"));
    let got = etcd_post(etcd.port(), "/v3/kv/range", &range).await;
    assert!(
        got.contains(&base64("v1")),
        "the write survived the kill: {got}"
    );
    let dir = etcd.dir().to_path_buf();
    drop(etcd);
    assert_gone(&dir, "etcd");
}

#[tokio::test]
async fn mariadb_serves_as_an_unprivileged_user_keeps_commits_across_kill_and_goes_on_drop() {
    let db = MariaDb::launch().await.expect("start MariaDB");
    let pid = db.pid().expect("running");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert_ne!(uid_of(pid), 0, "mariadbd runs as root");
    }
    mariadb_sql(
        &db,
        "CREATE TABLE t (k INT PRIMARY KEY, v TEXT) ENGINE=InnoDB; INSERT INTO t VALUES (1, 'v1')",
    )
    .expect("create and insert");
    assert_eq!(
        mariadb_sql(&db, "SELECT @@default_storage_engine").unwrap(),
        "InnoDB"
    );
    db.kill();
    db.start().await.expect("start again");
    assert_eq!(
        mariadb_sql(&db, "SELECT v FROM t WHERE k = 1").unwrap(),
        "v1"
    );
    let dir = db.dir().to_path_buf();
    drop(db);
    assert_gone(&dir, "MariaDB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_each_in_parallel_do_not_collide() {
    let (r1, r2, e1, e2, m1, m2) = tokio::join!(
        Redis::launch(),
        Redis::launch(),
        Etcd::launch(),
        Etcd::launch(),
        MariaDb::launch(),
        MariaDb::launch()
    );
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    let (e1, e2) = (e1.unwrap(), e2.unwrap());
    let (m1, m2) = (m1.unwrap(), m2.unwrap());
    let ports = [
        r1.port(),
        r2.port(),
        e1.port(),
        e2.port(),
        m1.port(),
        m2.port(),
    ];
    let mut unique = ports.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ports.len(), "{ports:?}");
    exchange(r1.port(), &resp(&["SET", "k", "one"]), b"\r\n").await;
    let got = exchange(r2.port(), &resp(&["GET", "k"]), b"\r\n").await;
    assert_eq!(got, "$-1\r\n", "the second Redis saw the first's key");
    assert_ne!(e1.dir(), e2.dir());
    mariadb_sql(&m1, "CREATE TABLE only_here (k INT)").unwrap();
    assert!(mariadb_sql(&m2, "SELECT * FROM only_here").is_err());
}

fn run_child(name: &str) -> (std::process::ExitStatus, Vec<(PathBuf, u32)>, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let (mut servers, mut output) = (Vec::new(), String::new());
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once("ZKT_SERVER=") {
            let (dir, pid) = rest.rsplit_once(' ').unwrap();
            servers.push((PathBuf::from(dir), pid.parse().unwrap()));
        }
        output.push_str(&line);
        output.push('\n');
    }
    let status = child.wait().unwrap();
    output.push_str(&err_reader.join().unwrap());
    (status, servers, output)
}

#[test]
fn a_crashed_test_process_leaves_no_store_server_behind() {
    const NAME: &str = "a_crashed_test_process_leaves_no_store_server_behind";
    if std::env::var_os(CHILD_ENV).is_some() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (r, e, m) =
            rt.block_on(async { tokio::join!(Redis::launch(), Etcd::launch(), MariaDb::launch()) });
        let (r, e, m) = (r.unwrap(), e.unwrap(), m.unwrap());
        let mut out = std::io::stdout().lock();
        // A leading newline: libtest may have printed "test <name> ... " already.
        writeln!(out).unwrap();
        for (dir, pid) in [
            (r.dir(), r.pid().unwrap()),
            (e.dir(), e.pid().unwrap()),
            (m.dir(), m.pid().unwrap()),
        ] {
            writeln!(out, "ZKT_SERVER={} {pid}", dir.display()).unwrap();
        }
        out.flush().unwrap();
        // SAFETY: plain syscalls; the process dies here, without unwinding or destructors.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        unreachable!("the process survived SIGKILL");
    }
    let (status, servers, output) = run_child(NAME);
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}\n{output}");
    assert_eq!(servers.len(), 3, "{output}");
    for (dir, pid) in servers {
        let marker = marker_of(&dir);
        let clean = poll_until(Duration::from_secs(20), || {
            processes_marked(&marker).is_empty() && !dir.exists()
        });
        assert!(
            clean,
            "server {pid} of {} alive: {}, dir exists: {}",
            dir.display(),
            process_alive(pid, Some(&marker)),
            dir.exists()
        );
    }
}
