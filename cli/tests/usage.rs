//! The CLI as a new user meets it (issues 21 items 4–6 and 26): arguments checked before any
//! connect, `status` on shared and limited locks, a mismatched `--limit`, CMD without `--`,
//! connect failures named per server, one exit-code table, one JSON schema, readable help.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::net::TcpListener;
use std::time::Duration;

use common::{connect, shared_ensemble, unique_path, until_children};
use process::{bin, holding, run, zkfence};
use tokio::process::Command;
use tokio::time::Instant;

/// A port that accepts TCP connections (the kernel's backlog does) but never answers: an
/// ensemble that cannot be reached in time.
fn silent_server() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// `zkfence ARGS...` without any `--connect` (for subcommands that take it themselves).
fn zkfence_bare(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("ZKFENCE_CONNECT")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

// ---- issue 21 item 4 -------------------------------------------------------------------

#[tokio::test]
async fn bad_arguments_fail_at_once_even_with_the_ensemble_unreachable() {
    let (_silent, addr) = silent_server();
    let cases: [(&[&str], &str); 8] = [
        (&["exec", "locks/x", "--", "true"], "must start with '/'"),
        (
            &["exec", "/locks/x/", "--", "true"],
            "must not end with '/'",
        ),
        (
            &["elect", "elections/x", "--", "true"],
            "must start with '/'",
        ),
        (&["status", "locks/x"], "must start with '/'"),
        (&["leader", "/a//b"], "empty segment"),
        (&["gc", "locks"], "must start with '/'"),
        (
            &["--auth", "digest:u", "status", "/x"],
            "ZKFENCE_AUTH_PASSWORD",
        ),
        (
            &["status", "--connect", "host:2181,", "/x"],
            "connect string",
        ),
    ];
    for (args, says) in cases {
        let ran = run(zkfence(&addr, args), Duration::from_secs(30)).await;
        assert_eq!(ran.code, Some(2), "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{args:?}: {}", ran.stderr);
        assert!(
            ran.took < Duration::from_secs(3),
            "{args:?} took {:?}: it waited for the network",
            ran.took
        );
    }
}

// ---- issue 21 item 5 -------------------------------------------------------------------

#[tokio::test]
async fn status_shows_every_holder_of_a_semaphore_with_its_limit() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let path = unique_path("status-limit");
    let mut a = holding(&c, &["--limit", "2", "--id", "alpha", &path], "a").await;
    let mut b = holding(&c, &["--limit", "2", "--id", "beta", &path], "b").await;

    let ran = run(
        zkfence(&c, &["status", &path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["kind"], "semaphore", "{json}");
    assert_eq!(json["limit"], 2, "{json}");
    assert_eq!(json["exists"], true, "{json}");
    let holders = json["holders"].as_array().expect("holders");
    let ids: Vec<&str> = holders
        .iter()
        .map(|h| h["owner"]["id"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(ids, ["alpha", "beta"], "{json}");
    assert!(json["waiters"].as_array().unwrap().is_empty(), "{json}");

    let ran = run(zkfence(&c, &["status", &path]), Duration::from_secs(20)).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout
            .starts_with(&format!("{path}: semaphore (limit 2), held by 2 of 2:")),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("alpha") && ran.stdout.contains("beta"),
        "{}",
        ran.stdout
    );

    let ran = run(
        zkfence(
            &c,
            &["exec", "--limit", "2", "--no-wait", &path, "--", "true"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("alpha") && ran.stderr.contains("beta") && !ran.stderr.contains('?'),
        "the --no-wait message names both holders: {}",
        ran.stderr
    );
    a.kill().await.unwrap();
    b.kill().await.unwrap();
}

#[tokio::test]
async fn status_shows_every_shared_reader_as_a_holder() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let path = unique_path("status-shared");
    let mut r1 = holding(&c, &["--shared", "--id", "reader-1", &path], "r1").await;
    let mut r2 = holding(&c, &["--shared", "--id", "reader-2", &path], "r2").await;
    let observer = connect(&c, Duration::from_secs(4)).await;
    let writer = observer.write_lock(&path).with_id("writer");
    let waiting = tokio::spawn(async move { writer.acquire().await.map(drop) });
    until_children(&observer, &path, 3).await;

    let ran = run(
        zkfence(&c, &["status", &path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["kind"], "read-write", "{json}");
    let holders: Vec<(&str, &str)> = json["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["owner"]["id"].as_str().unwrap(),
                h["mode"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        holders,
        [("reader-1", "shared"), ("reader-2", "shared")],
        "{json}"
    );
    let waiters = json["waiters"].as_array().unwrap();
    assert_eq!(waiters.len(), 1, "{json}");
    assert_eq!(waiters[0]["owner"]["id"], "writer");
    assert_eq!(waiters[0]["mode"], "exclusive");

    let ran = run(zkfence(&c, &["status", &path]), Duration::from_secs(20)).await;
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!("{path}: read/write lock, held shared by 2")),
        "{}",
        ran.stdout
    );
    let roles: Vec<&str> = lines[2..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(roles, ["holder", "holder", "waiting"], "{}", ran.stdout);

    // A writer that does not wait names both readers.
    let ran = run(
        zkfence(&c, &["exec", "--no-wait", &path, "--", "true"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("holders: reader-1") && ran.stderr.contains("reader-2"),
        "{}",
        ran.stderr
    );
    r1.kill().await.unwrap();
    r2.kill().await.unwrap();
    within_secs(20, waiting).await;
}

async fn within_secs(secs: u64, task: tokio::task::JoinHandle<zkfence::Result<()>>) {
    common::within(Duration::from_secs(secs), "the writer gets the lock", task)
        .await
        .unwrap()
        .unwrap();
}

// ---- issue 21 item 6 -------------------------------------------------------------------

#[tokio::test]
async fn a_mismatched_limit_is_refused() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let path = unique_path("limit-mismatch");
    let mut a = holding(&c, &["--limit", "2", "--id", "alpha", &path], "a").await;
    for wait in [true, false] {
        let mut args = vec!["exec", "--limit", "3"];
        if !wait {
            args.push("--no-wait");
        }
        args.extend_from_slice(&[&path, "--", "sh", "-c", "echo ran"]);
        let ran = run(zkfence(&c, &args), Duration::from_secs(20)).await;
        assert_eq!(ran.code, Some(2), "wait={wait}: {}", ran.stderr);
        assert!(
            ran.stderr.contains("--limit 3") && ran.stderr.contains("limit 2"),
            "wait={wait}: {}",
            ran.stderr
        );
        assert!(!ran.stdout.contains("ran"), "CMD did not run");
    }
    // The same limit is still admitted.
    let ran = run(
        zkfence(&c, &["exec", "--limit", "2", &path, "--", "true"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    a.kill().await.unwrap();
}

// ---- issue 26 item 1 -------------------------------------------------------------------

#[tokio::test]
async fn cmd_may_follow_the_path_without_double_dash() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let path = unique_path("no-dashes");
    let ran = run(
        zkfence(
            &c,
            &[
                "exec",
                &path,
                "sh",
                "-c",
                "echo \"$0 $1\"; exit 7",
                "sh",
                "--x",
            ],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(7), "{}", ran.stderr);
    assert_eq!(ran.stdout.trim(), "sh --x", "CMD's own options stay CMD's");
    let ran = run(
        zkfence(
            &c,
            &["exec", "--no-wait", &path, "--", "sh", "-c", "exit 5"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(5), "`--` still works: {}", ran.stderr);
    let election = unique_path("no-dashes-elect");
    let ran = run(
        zkfence(&c, &["elect", "--once", &election, "sh", "-c", "exit 4"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);
    let help = run(zkfence_bare(&["exec", "--help"]), Duration::from_secs(10)).await;
    assert!(
        help.stdout.contains("<LOCKPATH> <CMD>...") && help.stdout.contains("(or after `--`)"),
        "{}",
        help.stdout
    );
}

// ---- issue 26 item 2 -------------------------------------------------------------------

#[tokio::test]
async fn connect_failures_name_their_cause_per_server() {
    let (_silent, silent) = silent_server();
    // Refused, and an unknown host: no need to wait for the connect timeout.
    let ran = run(
        zkfence_bare(&[
            "status",
            "--connect",
            "127.0.0.1:1,nosuchhost.invalid:2181",
            "/x",
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("127.0.0.1:1: connection refused")
            && ran.stderr.contains("nosuchhost.invalid:2181: unknown host"),
        "{}",
        ran.stderr
    );
    assert!(ran.took < Duration::from_secs(5), "took {:?}", ran.took);

    // A server that never answers: --connect-timeout bounds the wait.
    let ran = run(
        zkfence_bare(&[
            "status",
            "--connect",
            &silent,
            "--connect-timeout",
            "1s",
            "/x",
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert!(
        ran.stderr.contains(&format!("{silent}: timed out")),
        "{}",
        ran.stderr
    );
    assert!(
        ran.took >= Duration::from_millis(900) && ran.took < Duration::from_secs(4),
        "took {:?}",
        ran.took
    );

    // A host without a port is refused before anything is sent.
    let ran = run(
        zkfence_bare(&["status", "--connect", "localhost", "/x"]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("\"localhost\" has no port") && ran.stderr.contains("localhost:2181"),
        "{}",
        ran.stderr
    );
}

// ---- issue 26 item 3 -------------------------------------------------------------------

/// The exit-code table of the README: the lines of the code block that starts "Exit codes:".
/// The exit-code table of the guide's CLI page (docs/guide/cli.md), which the README may
/// also show: the same text wherever it is.
fn readme_exit_codes() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR")))
            .unwrap_or_else(|e| panic!("read {path}: {e}"))
    };
    let guide = table_in(&read("docs/guide/cli.md"));
    let readme = read("README.md");
    if readme.contains("Exit codes:\n") {
        assert_eq!(
            table_in(&readme),
            guide,
            "the README's exit codes and the guide's differ"
        );
    }
    guide
}

fn table_in(markdown: &str) -> String {
    let start = markdown
        .find("Exit codes:\n")
        .expect("the page has the exit-code table");
    let end = start
        + markdown[start..]
            .find("\n```")
            .expect("the table's block ends");
    markdown[start..end].to_string()
}

#[tokio::test]
async fn every_help_shows_the_one_exit_code_table_of_the_readme() {
    let table = readme_exit_codes();
    assert!(table.contains("\n  3 "), "{table}");
    for args in [
        &["--help"][..],
        &["exec", "--help"],
        &["elect", "--help"],
        &["status", "--help"],
        &["leader", "--help"],
        &["revoke", "--help"],
        &["gc", "--help"],
        &["chaos", "--help"],
    ] {
        let ran = run(zkfence_bare(args), Duration::from_secs(10)).await;
        assert_eq!(ran.code, Some(0));
        assert!(
            ran.stdout.contains(&table),
            "{args:?} shows the README's table:\n{}\n---\n{table}",
            ran.stdout
        );
    }
}

// ---- issue 26 item 5 -------------------------------------------------------------------

#[tokio::test]
async fn status_says_when_a_path_does_not_exist_or_holds_lock_directories() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let parent = unique_path("status-parent");
    let session = connect(&c, Duration::from_secs(4)).await;
    let lease = session
        .lock(&format!("{parent}/child"))
        .acquire()
        .await
        .unwrap();

    let missing = format!("{parent}/typo");
    let ran = run(zkfence(&c, &["status", &missing]), Duration::from_secs(20)).await;
    // Issue 44 item 6: said by the exit code too.
    assert_eq!(ran.code, Some(66), "{}", ran.stderr);
    assert_eq!(
        ran.stdout,
        format!("{missing}: no such lock directory (nobody has queued there)\n")
    );
    let ran = run(
        zkfence(&c, &["status", &missing, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["exists"], false, "{json}");
    assert!(json["holders"].as_array().unwrap().is_empty(), "{json}");

    let ran = run(zkfence(&c, &["status", &parent]), Duration::from_secs(20)).await;
    assert_eq!(
        ran.stdout,
        format!("{parent}: no contenders; it holds the lock directories: child\n")
    );
    let ran = run(
        zkfence(&c, &["status", &parent, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["exists"], true, "{json}");
    assert_eq!(json["kind"], "directory", "{json}");
    assert_eq!(json["children"], serde_json::json!(["child"]), "{json}");
    lease.release().await.unwrap();
}

// ---- issue 26 item 4 -------------------------------------------------------------------

#[tokio::test]
async fn every_json_output_follows_the_documented_schema() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let session = connect(&c, Duration::from_secs(4)).await;
    let lock_path = unique_path("schema-lock");
    let lease = session
        .lock(&lock_path)
        .with_id("alpha")
        .acquire()
        .await
        .unwrap();
    let ran = run(
        zkfence(&c, &["status", &lock_path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    let mut keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "exists",
            "holders",
            "kind",
            "limit",
            "path",
            "session_timeout_ms",
            "waiters"
        ],
        "{json}"
    );
    assert_eq!(json["kind"], "lock");
    let holder = &json["holders"][0];
    let mut keys: Vec<&String> = holder.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "age_ms",
            "mode",
            "node",
            "owner",
            "revocation_requested",
            "sequence",
            "session_id",
            "token"
        ],
        "{json}"
    );
    assert_eq!(holder["owner"]["id"], "alpha");
    assert_eq!(holder["owner"]["pid"], std::process::id());
    assert!(holder["owner"]["host"].is_string(), "{json}");
    assert_eq!(holder["token"], lease.token().get(), "token: a JSON number");
    assert_eq!(
        holder["session_id"],
        format!("0x{:x}", session.id() as u64),
        "session_id: a hex string"
    );
    lease.release().await.unwrap();

    let election = unique_path("schema-elect");
    let leader = session.election(&election).campaign("c1").await.unwrap();
    let ran = run(
        zkfence(&c, &["leader", &election, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    let mut keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "candidates",
            "exists",
            "leader",
            "path",
            "proclaimed",
            "session_timeout_ms"
        ],
        "{json}"
    );
    assert_eq!(json["leader"]["owner"]["id"], "c1");
    assert!(json["candidates"].as_array().unwrap().is_empty());
    leader.resign().await.unwrap();

    let tree = unique_path("schema-gc");
    let persistent = zkfence::zookeeper_client::CreateMode::Persistent
        .with_acls(zkfence::zookeeper_client::Acls::anyone_all());
    let client = session.client();
    let _ = client.create("/test", b"", &persistent).await;
    client.create(&tree, b"", &persistent).await.unwrap();
    client
        .create(&format!("{tree}/empty"), b"", &persistent)
        .await
        .unwrap();
    let ran = run(
        zkfence(&c, &["gc", &tree, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(
        json,
        serde_json::json!({
            "path": tree, "exists": true, "applied": false,
            "empty": [format!("{tree}/empty")], "removed": [], "kept": []
        })
    );
    let ran = run(
        zkfence(&c, &["gc", &tree, "--json", "--apply"]),
        Duration::from_secs(20),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(
        json["removed"],
        serde_json::json!([format!("{tree}/empty")])
    );
    assert_eq!(json["applied"], true);
}

// ---- issue 26 item 6 -------------------------------------------------------------------

#[tokio::test]
async fn help_groups_options_and_offers_only_what_applies() {
    let up = run(
        zkfence_bare(&["ensemble", "up", "--help"]),
        Duration::from_secs(10),
    )
    .await;
    for absent in ["--connect", "--tls-ca", "--sasl-user", "--session-timeout"] {
        assert!(
            !up.stdout.contains(absent),
            "ensemble up offers {absent}:\n{}",
            up.stdout
        );
    }
    let exec = run(zkfence_bare(&["exec", "--help"]), Duration::from_secs(10)).await;
    for heading in ["Lock options:", "Connection options:", "Security options:"] {
        assert!(exec.stdout.contains(heading), "{heading}\n{}", exec.stdout);
    }
    let lock_at = exec.stdout.find("Lock options:").unwrap();
    let conn_at = exec.stdout.find("Connection options:").unwrap();
    let timeout_at = exec.stdout.find("--timeout <DUR>").unwrap();
    let connect_at = exec.stdout.find("--connect <HOSTS>").unwrap();
    assert!(
        lock_at < timeout_at && timeout_at < conn_at,
        "{}",
        exec.stdout
    );
    assert!(conn_at < connect_at, "{}", exec.stdout);
    for option in ["--connect <HOSTS>", "--tls-ca <FILE>", "--timeout <DUR>"] {
        assert_eq!(
            exec.stdout.matches(option).count(),
            1,
            "{option} once:\n{}",
            exec.stdout
        );
    }
    assert!(
        exec.stdout.contains("--timeout <DUR>") && exec.stdout.contains("\"30\" means 30s"),
        "a bare number is seconds, documented: {}",
        exec.stdout
    );
    let err = run(
        zkfence_bare(&["exec", "/x", "--bogus"]),
        Duration::from_secs(10),
    )
    .await;
    assert!(!err.stderr.contains("--connect <HOSTS>"), "{}", err.stderr);
}

#[tokio::test]
async fn elect_id_defaults_to_the_host_and_cmd() {
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let election = unique_path("elect-id");
    let ran = run(
        zkfence(
            &c,
            &[
                "elect",
                "--once",
                &election,
                "--",
                "sh",
                "-c",
                "echo \"$ZKFENCE_LEADER_ID\"",
            ],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        ran.stdout.trim(),
        format!("{}:sh", host.trim()),
        "the default id"
    );
}

// ---- issue 26 item 7 -------------------------------------------------------------------

#[tokio::test]
async fn a_trailing_slash_chroot_means_no_chroot() {
    let zk = shared_ensemble();
    let c = format!("{}/", zk.connect_string());
    let ran = run(
        zkfence(&c, &["status", &unique_path("chroot-slash")]),
        Duration::from_secs(20),
    )
    .await;
    // Connected, no chroot to miss: the path is just not there (66).
    assert_eq!(ran.code, Some(66), "{}", ran.stderr);
}

#[tokio::test]
async fn an_elect_cmd_killed_by_a_signal_is_reported_so() {
    let zk = shared_ensemble();
    let election = unique_path("elect-killed");
    let ran = run(
        zkfence(
            &zk.connect_string(),
            &["elect", "--once", &election, "--", "sh", "-c", "kill -9 $$"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(137), "{}", ran.stderr);
    assert!(ran.stderr.contains("killed by SIGKILL"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("exited with code"), "{}", ran.stderr);
}

/// The waiting line on a terminal (issue 21 item 5): behind a semaphore it names the permits'
/// holders and the limit, not "joining the queue". Run in tmux, read from its screen.
#[tokio::test]
async fn the_waiting_line_names_a_semaphores_holders() {
    if std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "this test needs tmux (apt-get install tmux)"
        );
        eprintln!("skipping: tmux missing");
        return;
    }
    let zk = shared_ensemble();
    let c = zk.connect_string();
    let path = unique_path("waiting-line");
    let mut holder = holding(&c, &["--limit", "1", "--id", "alpha", &path], "alpha").await;
    let tmux_session = format!("zkfence-{}", uuid::Uuid::new_v4().simple());
    let line = format!(
        "{} exec --connect {c} --limit 1 --timeout 30s {path} -- true",
        bin()
    );
    let started = std::process::Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &tmux_session,
            "-x",
            "200",
            "-y",
            "10",
            &line,
        ])
        .env_remove("ZKFENCE_CONNECT")
        .status()
        .unwrap();
    assert!(started.success());
    let screen = || {
        let out = std::process::Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &tmux_session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The last screen that showed anything, for the failure message.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    let seen = loop {
        let text = screen();
        if text.contains("1 of 1 permits held (alpha") {
            break Some(text);
        }
        if !text.trim().is_empty() {
            last = text;
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = std::process::Command::new("tmux")
        .args(["kill-session", "-t", &tmux_session])
        .status();
    holder.kill().await.unwrap();
    let text = seen.unwrap_or_else(|| panic!("the waiting line never named the holder:\n{last}"));
    assert!(text.contains("next for a permit"), "{text}");
    assert!(
        text.contains("(alpha") && !text.contains("true ("),
        "only the holder, not us: {text}"
    );
}

/// Issue 24: completions and the man page are generated from the same definitions as
/// `--help`: each names every subcommand, the man page is roff with the exit codes, each
/// subcommand's own page exists, and a shell or page that does not exist is refused.
#[tokio::test]
async fn completions_and_man_pages_are_generated_from_the_definitions() {
    let subcommands = [
        "exec", "elect", "status", "leader", "revoke", "gc", "ensemble", "demo",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let ran = run(
            zkfence_bare(&["completions", shell]),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(ran.code, Some(0), "{shell}: {}", ran.stderr);
        for sub in subcommands {
            assert!(ran.stdout.contains(sub), "{shell} completes {sub}");
        }
        // Options of a subcommand too.
        assert!(
            ran.stdout.contains("revocable"),
            "{shell} completes exec --revocable"
        );
    }
    let bash = run(
        zkfence_bare(&["completions", "bash"]),
        Duration::from_secs(10),
    )
    .await;
    assert!(
        bash.stdout.contains("complete -F _zkfence"),
        "{}",
        bash.stdout
    );

    let man = run(zkfence_bare(&["man"]), Duration::from_secs(10)).await;
    assert_eq!(man.code, Some(0), "{}", man.stderr);
    assert!(man.stdout.contains(".TH zkfence 1"), "{}", man.stdout);
    let listed = man
        .stdout
        .split(".SH SUBCOMMANDS")
        .nth(1)
        .expect("a SUBCOMMANDS section");
    for sub in subcommands {
        assert!(
            listed.contains(&format!("zkfence\\-{sub}(1)")),
            "lists {sub}:\n{listed}"
        );
    }
    assert!(man.stdout.contains(".SH \"EXIT STATUS\""), "{}", man.stdout);
    let exec = run(zkfence_bare(&["man", "exec"]), Duration::from_secs(10)).await;
    assert_eq!(exec.code, Some(0), "{}", exec.stderr);
    assert!(
        exec.stdout.contains(".TH zkfence-exec 1"),
        "{}",
        exec.stdout
    );
    assert!(exec.stdout.contains("revocable"), "{}", exec.stdout);

    for bad in [&["completions", "tcsh"][..], &["man", "nope"]] {
        let ran = run(zkfence_bare(bad), Duration::from_secs(10)).await;
        assert_eq!(ran.code, Some(2), "{bad:?}: {}", ran.stderr);
        assert!(ran.stdout.is_empty(), "{bad:?} prints nothing on stdout");
    }
}

/// A reader that stops reading (`zkfence completions zsh | head -1`, a pager quit early) is
/// no error of ours: the printing subcommands stop quietly, as Unix tools do, instead of
/// panicking or blaming the pipe.
#[tokio::test]
async fn printing_into_a_closed_pipe_stops_quietly() {
    for args in [
        &["completions", "zsh"][..],
        &["completions", "bash"][..],
        &["man"][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        // Closed before the command writes a byte: every write of it fails with EPIPE.
        drop(reader);
        let mut cmd = zkfence_bare(args);
        cmd.stdout(writer);
        // Not `run`: its `output()` would give the command a pipe of its own.
        let ran = process::finish(cmd.spawn().unwrap(), Duration::from_secs(20)).await;
        assert!(
            !ran.stderr.contains("panicked") && ran.stderr.trim().is_empty(),
            "zkfence {args:?} into a closed pipe wrote to stderr: {}",
            ran.stderr
        );
        assert_eq!(ran.code, Some(0), "zkfence {args:?}: {}", ran.stderr);
    }
    // A report read from the ensemble too.
    let connect = shared_ensemble().connect_string();
    let path = unique_path("closed-pipe");
    for json in [false, true] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut args = vec!["status", path.as_str()];
        if json {
            args.push("--json");
        }
        let mut cmd = zkfence(&connect, &args);
        cmd.stdout(writer);
        let ran = process::finish(cmd.spawn().unwrap(), Duration::from_secs(30)).await;
        assert!(
            ran.stderr.trim().is_empty(),
            "zkfence status (json {json}) into a closed pipe wrote to stderr: {}",
            ran.stderr
        );
        // A path nobody used: 66, said on a stdout nobody reads.
        assert_eq!(ran.code, Some(66), "zkfence status: {}", ran.stderr);
    }
}

/// `--server-tick-time` (or `ZKFENCE_SERVER_TICK_TIME`) declares the servers' `tickTime` to
/// the lease clock, as `SessionOptions::server_tick_time` does: settings it makes unsound are
/// refused with exit 2 before anything is held, a sound declaration runs, a bad value is
/// named.
#[tokio::test]
async fn server_tick_time_is_declared_to_the_lease_clock() {
    let zk = shared_ensemble();
    let path = unique_path("tick-declared");
    let exec = |tick: &str| {
        let tick = tick.to_string();
        let path = path.clone();
        let connect = zk.connect_string();
        async move {
            let args = [
                "--session-timeout",
                "4s",
                "--server-tick-time",
                &tick,
                "exec",
                &path,
                "--",
                "true",
            ];
            run(zkfence(&connect, &args), Duration::from_secs(20)).await
        }
    };
    // The ensemble's own tickTime (200 ms): the clock keeps 4 s − 2 × 200 ms less its margin.
    let sound = exec("200ms").await;
    assert_eq!(sound.code, Some(0), "{}", sound.stderr);
    // 2 × 2 s leaves a 4 s session's clock nothing to vouch with.
    let unsound = exec("2s").await;
    assert_eq!(unsound.code, Some(2), "{}", unsound.stderr);
    assert!(unsound.stderr.contains("unsound"), "{}", unsound.stderr);
    // The same from the environment.
    let mut from_env = zkfence(
        &zk.connect_string(),
        &["--session-timeout", "4s", "exec", &path, "--", "true"],
    );
    from_env.env("ZKFENCE_SERVER_TICK_TIME", "2s");
    let from_env = run(from_env, Duration::from_secs(20)).await;
    assert_eq!(from_env.code, Some(2), "{}", from_env.stderr);
    assert!(from_env.stderr.contains("unsound"), "{}", from_env.stderr);
    let bad = exec("soon").await;
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("--server-tick-time"), "{}", bad.stderr);
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    until_children(&observer, &path, 0).await;
}
