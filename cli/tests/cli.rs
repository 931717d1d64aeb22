//! The `zkfence` binary end to end, against real ZooKeeper ensembles: `exec` (exit codes,
//! environment, lost lease, timeout, signals), `elect`, `status`/`leader` JSON,
//! `ensemble up` and `demo`.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::time::Duration;

use common::{children, connect, shared_ensemble, unique_path, until_children};
use process::{finish, next_line, read_pid, run, signal, zkfence, Ran};
use tokio::time::Instant;

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn pid_file(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "zkfence-cli-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ))
}

#[tokio::test]
async fn exec_passes_cmd_exit_code_and_environment() {
    let zk = shared_ensemble();
    let path = unique_path("exec-env");
    let script = r#"echo "$ZKFENCE_TOKEN|$ZKFENCE_LOCK_PATH|$ZKFENCE_NODE"; exit 7"#;
    let mut tokens = vec![];
    for _ in 0..2 {
        let ran = run(
            zkfence(
                &zk.connect_string(),
                &["exec", &path, "--", "sh", "-c", script],
            ),
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(
            ran.code,
            Some(7),
            "CMD's exit code passes through; stderr: {}",
            ran.stderr
        );
        let fields: Vec<&str> = ran.stdout.trim().split('|').collect();
        let token: u64 = fields[0].parse().expect("ZKFENCE_TOKEN is a number");
        assert!(
            tokens.last().is_none_or(|last| token > *last),
            "tokens grow with each grant: {tokens:?} then {token}"
        );
        tokens.push(token);
        assert_eq!(fields[1], path);
        assert!(
            fields[2].starts_with(&format!("{path}/_c_")),
            "ZKFENCE_NODE is our node: {}",
            ran.stdout
        );
    }
    let ran = run(
        zkfence(&zk.connect_string(), &["exec", &path, "--", "true"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0));
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    assert!(
        children(&observer, &path).await.is_empty(),
        "every run released its node"
    );

    let ran = run(
        zkfence(
            &zk.connect_string(),
            &["exec", &path, "--", "/nonexistent/cmd"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(127), "{}", ran.stderr);
    assert!(ran.stderr.contains("not found"), "{}", ran.stderr);
    assert!(
        children(&observer, &path).await.is_empty(),
        "the lock is released when CMD cannot start"
    );
}

/// Blackholes a CLI holder's connection while CMD sleeps: zkfence must stop CMD and exit 76.
async fn lost_lease_case(name: &str, script: &str, expect_sigkill: bool) {
    let zk = shared_ensemble();
    let path = unique_path(name);
    let proxy = zk.proxy().await.unwrap();
    let pid_file = pid_file(name);
    let script = script.replace("PIDFILE", &pid_file.display().to_string());
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
            &script,
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let cmd_pid = read_pid(&pid_file);
    assert!(alive(cmd_pid));

    proxy.blackhole();
    let cut = Instant::now();
    let ran = finish(cli, Duration::from_secs(20)).await;
    let took = cut.elapsed();
    let _ = std::fs::remove_file(&pid_file);
    assert_eq!(
        ran.code,
        Some(76),
        "exit 76 when the lease is lost; stderr: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("lost the lock"),
        "says why: {}",
        ran.stderr
    );
    assert!(!alive(cmd_pid), "CMD (pid {cmd_pid}) was terminated");
    assert!(
        ran.stderr.contains("SIGKILL by the lease's deadline"),
        "names the plan: {}",
        ran.stderr
    );
    assert_eq!(
        ran.stderr.contains("still runs at the deadline"),
        expect_sigkill,
        "{}",
        ran.stderr
    );
    // The lease clock runs out just before the 2 s session could expire; then the grace.
    assert!(
        took < Duration::from_secs(2) + Duration::from_secs(if expect_sigkill { 3 } else { 2 }),
        "took {took:?}"
    );
    proxy.heal();
}

#[tokio::test]
async fn exec_terminates_cmd_when_the_lease_is_lost() {
    lost_lease_case(
        "exec-lost",
        "echo $$ > PIDFILE; echo ready; exec sleep 60",
        false,
    )
    .await;
}

#[tokio::test]
async fn exec_kills_a_cmd_that_ignores_sigterm_after_the_grace() {
    lost_lease_case(
        "exec-lost-kill",
        r#"trap "" TERM; echo $$ > PIDFILE; echo ready; while :; do sleep 0.2; done"#,
        true,
    )
    .await;
}

#[tokio::test]
async fn exec_times_out_naming_the_holder() {
    let zk = shared_ensemble();
    let path = unique_path("exec-timeout");
    let holder = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let lease = holder
        .lock(&path)
        .with_id("holder-x")
        .acquire()
        .await
        .unwrap();

    let started = Instant::now();
    let ran = run(
        zkfence(
            &zk.connect_string(),
            &["exec", &path, "--timeout", "1s", "--", "true"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        ran.stderr.contains("timed out") && ran.stderr.contains("holder-x"),
        "names the holder: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("1 ahead of us"),
        "names our position: {}",
        ran.stderr
    );
    assert_eq!(ran.stderr.lines().count(), 1, "one line: {}", ran.stderr);

    let ran = run(
        zkfence(
            &zk.connect_string(),
            &["exec", &path, "--timeout", "0", "--", "true"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(ran.stderr.contains("holder-x"), "{}", ran.stderr);

    let left = children(&holder, &path).await;
    assert_eq!(left.len(), 1, "only the holder's node remains: {left:?}");
    assert!(lease.path().ends_with(&left[0]));
    lease.release().await.unwrap();
}

#[tokio::test]
async fn sigterm_while_waiting_leaves_no_node() {
    let zk = shared_ensemble();
    let path = unique_path("exec-sig-wait");
    let holder = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let lease = holder.lock(&path).acquire().await.unwrap();
    let cli = zkfence(
        &zk.connect_string(),
        &["exec", &path, "--", "echo", "must not run"],
    )
    .spawn()
    .unwrap();
    until_children(&holder, &path, 2).await;

    signal(&cli, libc::SIGTERM);
    let ran = finish(cli, Duration::from_secs(10)).await;
    assert_eq!(ran.code, Some(128 + libc::SIGTERM), "{}", ran.stderr);
    assert!(!ran.stdout.contains("must not run"));
    // Checked at once: zkfence waited for the ensemble to remove the node before exiting.
    let left = children(&holder, &path).await;
    assert_eq!(left.len(), 1, "only the holder's node remains: {left:?}");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn sigterm_while_holding_is_forwarded_and_the_lock_released() {
    let zk = shared_ensemble();
    let path = unique_path("exec-sig-hold");
    let pid_file = pid_file("sig-hold");
    let script = format!(
        "echo $$ > {}; echo ready; exec sleep 60",
        pid_file.display()
    );
    let mut cli = zkfence(
        &zk.connect_string(),
        &["exec", &path, "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    assert_eq!(next_line(&mut cli, Duration::from_secs(20)).await, "ready");
    let cmd_pid = read_pid(&pid_file);
    let _ = std::fs::remove_file(&pid_file);

    signal(&cli, libc::SIGTERM);
    let ran = finish(cli, Duration::from_secs(10)).await;
    assert_eq!(
        ran.code,
        Some(128 + libc::SIGTERM),
        "CMD died of the forwarded SIGTERM; stderr: {}",
        ran.stderr
    );
    assert!(!alive(cmd_pid), "CMD got the signal");
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    assert!(
        children(&observer, &path).await.is_empty(),
        "the lock was released before zkfence exited"
    );
}

#[tokio::test]
async fn elect_runs_cmd_only_while_leading() {
    let zk = shared_ensemble();
    let path = unique_path("elect");
    let proxy = zk.proxy().await.unwrap();
    // Both CMDs write their intervals: the first a timestamp every 50 ms while it runs, the
    // second its start and its end.
    let first_log = pid_file("elect-first");
    let second_log = pid_file("elect-second");
    let first_script = format!(
        "echo ready; while :; do date +%s%N >> {}; sleep 0.05; done",
        first_log.display()
    );
    let mut first = zkfence(
        &proxy.connect_string(),
        &[
            "--session-timeout",
            "2s",
            "elect",
            &path,
            "--id",
            "first",
            "--once",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            &first_script,
        ],
    )
    .spawn()
    .unwrap();
    assert_eq!(
        next_line(&mut first, Duration::from_secs(20)).await,
        "ready"
    );
    let script = format!(
        r#"date +%s%N > {log}; echo "$ZKFENCE_LEADER_ID $ZKFENCE_TOKEN $ZKFENCE_LOCK_PATH"; sleep 0.3; date +%s%N >> {log}; exit 5"#,
        log = second_log.display()
    );
    let second = zkfence(
        &zk.connect_string(),
        &[
            "elect", &path, "--id", "second", "--once", "--", "sh", "-c", &script,
        ],
    )
    .spawn()
    .unwrap();
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    until_children(&observer, &path, 2).await;
    assert_eq!(
        observer
            .election(&path)
            .leader()
            .await
            .unwrap()
            .unwrap()
            .id
            .as_deref(),
        Some("first")
    );

    proxy.blackhole();
    let first = finish(first, Duration::from_secs(20)).await;
    assert_eq!(
        first.code,
        Some(76),
        "leadership lost with --once: {}",
        first.stderr
    );
    assert!(first.stderr.contains("lost leadership"), "{}", first.stderr);
    let second = finish(second, Duration::from_secs(20)).await;
    assert_eq!(
        second.code,
        Some(5),
        "CMD's code with --once: {}",
        second.stderr
    );
    let words: Vec<&str> = second.stdout.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{}", second.stdout);
    assert_eq!((words[0], words[2]), ("second", path.as_str()));
    assert!(
        words[1].parse::<u64>().is_ok_and(|t| t > 0),
        "ZKFENCE_TOKEN: {}",
        second.stdout
    );
    assert!(
        children(&observer, &path).await.is_empty(),
        "the leader resigned"
    );
    let stamps = |file: &std::path::Path| -> Vec<u128> {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let (first_run, second_run) = (stamps(&first_log), stamps(&second_log));
    let _ = std::fs::remove_file(&first_log);
    let _ = std::fs::remove_file(&second_log);
    assert!(!first_run.is_empty(), "the first CMD ran");
    assert_eq!(
        second_run.len(),
        2,
        "the second CMD wrote its start and end"
    );
    let (first_end, second_start) = (*first_run.last().unwrap(), second_run[0]);
    assert!(
        first_end < second_start,
        "the first CMD ({}..={first_end}) stopped before the second ({second_start}..={}) started: overlap {:.3}s",
        first_run[0],
        second_run[1],
        (first_end as f64 - second_start as f64) / 1e9
    );
    proxy.heal();
}

#[tokio::test]
async fn elect_campaigns_again_after_cmd_exits_until_signalled() {
    let zk = shared_ensemble();
    let path = unique_path("elect-again");
    let script = r#"echo "term $ZKFENCE_TOKEN"; sleep 0.2"#;
    let mut cli = zkfence(
        &zk.connect_string(),
        &["elect", &path, "--id", "looper", "--", "sh", "-c", script],
    )
    .spawn()
    .unwrap();
    // Each term ends when CMD exits; zkfence resigns and leads again with a newer token.
    let term = |line: String| -> u64 {
        line.strip_prefix("term ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not a term line: {line:?}"))
    };
    let first = term(next_line(&mut cli, Duration::from_secs(20)).await);
    let second = term(next_line(&mut cli, Duration::from_secs(20)).await);
    assert!(
        second > first,
        "a newer token each term: {first} then {second}"
    );
    signal(&cli, libc::SIGTERM);
    let ran = finish(cli, Duration::from_secs(10)).await;
    assert_eq!(ran.code, Some(128 + libc::SIGTERM), "{}", ran.stderr);
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    assert!(
        children(&observer, &path).await.is_empty(),
        "left the election"
    );
}

#[tokio::test]
async fn status_and_leader_report_known_queues_as_json() {
    let zk = shared_ensemble();
    let lock_path = unique_path("status");
    let a = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let b = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let lease = a.lock(&lock_path).with_id("alpha").acquire().await.unwrap();
    let lock_b = b.lock(&lock_path).with_id("beta");
    let waiting = tokio::spawn(async move { lock_b.acquire().await.map(drop) });
    until_children(&a, &lock_path, 2).await;

    let ran = run(
        zkfence(&zk.connect_string(), &["status", &lock_path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["path"], lock_path.as_str());
    let holder = &json["holders"][0];
    assert_eq!(holder["owner"]["id"], "alpha");
    assert_eq!(holder["token"], lease.token().get());
    assert_eq!(holder["sequence"], 0);
    assert_eq!(holder["node"], lease.path());
    assert_eq!(holder["session_id"], format!("0x{:x}", a.id() as u64));
    assert!(holder["age_ms"].as_u64().is_some());
    assert_eq!(holder["revocation_requested"], false);
    let waiters = json["waiters"].as_array().unwrap();
    assert_eq!(waiters.len(), 1);
    assert_eq!(waiters[0]["owner"]["id"], "beta");
    assert!(waiters[0]["token"].as_u64().unwrap() > lease.token().get());
    assert_eq!(waiters[0]["sequence"], 1);
    assert_eq!(waiters[0]["session_id"], format!("0x{:x}", b.id() as u64));
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
        "the contender shape is stable"
    );

    let ran = run(
        zkfence(&zk.connect_string(), &["status", &lock_path]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0));
    assert!(
        ran.stdout
            .starts_with(&format!("{lock_path}: held by alpha")),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("waiting") && ran.stdout.contains("beta"),
        "{}",
        ran.stdout
    );
    lease.release().await.unwrap();
    waiting.await.unwrap().unwrap();

    let election_path = unique_path("leader");
    let c1 = a.election(&election_path).campaign("c1").await.unwrap();
    let election_b = b.election(&election_path);
    let candidate = tokio::spawn(async move { election_b.campaign("c2").await.map(drop) });
    until_children(&a, &election_path, 2).await;
    let ran = run(
        zkfence(&zk.connect_string(), &["leader", &election_path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["leader"]["owner"]["id"], "c1");
    assert_eq!(json["leader"]["token"], c1.token().get());
    assert_eq!(json["candidates"][0]["owner"]["id"], "c2");
    let ran = run(
        zkfence(&zk.connect_string(), &["leader", &election_path]),
        Duration::from_secs(20),
    )
    .await;
    assert!(
        ran.stdout
            .starts_with(&format!("{election_path}: led by c1")),
        "{}",
        ran.stdout
    );
    c1.resign().await.unwrap();
    candidate.await.unwrap().unwrap();

    let ran = run(
        zkfence(
            &zk.connect_string(),
            &["status", &unique_path("empty"), "--json"],
        ),
        Duration::from_secs(20),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert!(
        json["holders"].as_array().unwrap().is_empty()
            && json["waiters"].as_array().unwrap().is_empty(),
        "{json}"
    );
}

/// `status` on a partition set: a table of items (owner, token, since, moving to), and the
/// same in `--json`. Member "a" holds all six items and does not let go of any; "b" joins,
/// so the items the assignment gives "b" show as moving to it, with "b" waiting for each.
#[tokio::test]
async fn status_shows_a_partition_set_with_the_items_moving() {
    let zk = shared_ensemble();
    let path = unique_path("partitions");
    let a = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let b = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let settle = Duration::from_millis(100);
    let mut first = a
        .partitions(&path, 6)
        .settle(settle)
        .join("a")
        .await
        .unwrap();
    let mut held = Vec::new();
    while held.len() < 6 {
        let change = tokio::time::timeout(Duration::from_secs(20), first.next())
            .await
            .expect("a is granted every item")
            .unwrap()
            .unwrap();
        if let zkfence::OwnershipChange::Acquired { lease, .. } = change {
            held.push(lease);
        }
    }
    let _second = b
        .partitions(&path, 6)
        .settle(settle)
        .join("b")
        .await
        .unwrap();
    let theirs: Vec<usize> = zkfence::Assignment::Sticky
        .assign(&["a", "b"], &zkfence::Items::count(6))
        .iter()
        .enumerate()
        .filter(|(_, o)| **o == Some("b"))
        .map(|(i, _)| i)
        .collect();
    assert!(!theirs.is_empty());
    // "b" queues behind "a" for each of its items; "a" holds on to them.
    let status = a.partitions(&path, 6);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !status
        .status()
        .await
        .unwrap()
        .items
        .iter()
        .filter(|i| theirs.contains(&i.item.index()))
        .all(|i| i.waiting == 1)
    {
        assert!(Instant::now() < deadline, "b never queued for its items");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let ran = run(
        zkfence(&zk.connect_string(), &["status", &path]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "{path}: partition set, 6 items (those with a lock directory"
        )) && lines[0].contains("over 2 members (sticky assignment)")
            && lines[0].ends_with(&format!("{} moving", theirs.len())),
        "{}",
        ran.stdout
    );
    assert_eq!(lines[1], "members: a, b", "{}", ran.stdout);
    let header: Vec<&str> = lines[2].split("  ").filter(|c| !c.is_empty()).collect();
    assert_eq!(
        header.iter().map(|c| c.trim()).collect::<Vec<_>>(),
        ["ITEM", "OWNER", "TOKEN", "SINCE", "MOVING TO"],
        "{}",
        ran.stdout
    );
    for (i, line) in lines[3..].iter().enumerate() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], i.to_string(), "{line}");
        assert_eq!(cells[1], "a", "{line}");
        assert_eq!(cells[2], held[i].token().to_string(), "{line}");
        if theirs.contains(&i) {
            assert_eq!(cells[4..], ["b", "(1", "waiting)"], "{line}");
        } else {
            assert_eq!(cells.len(), 4, "{line}");
        }
    }

    let ran = run(
        zkfence(
            &zk.connect_string(),
            &["status", &path, "--items", "6", "--json"],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).expect("valid JSON");
    assert_eq!(json["kind"], "partitions");
    assert_eq!(json["assignment"], "sticky");
    assert_eq!(json["items_from"], "given");
    let members: Vec<&str> = json["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["a", "b"]);
    let items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), 6);
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["item"], i.to_string());
        assert_eq!(item["owner"], "a");
        assert_eq!(item["token"], held[i].token().get());
        assert_eq!(item["session_id"], format!("0x{:x}", a.id() as u64));
        assert!(item["age_ms"].as_u64().is_some());
        let moving = theirs.contains(&i);
        assert_eq!(item["assigned_to"], if moving { "b" } else { "a" });
        assert_eq!(
            item["moving_to"],
            if moving {
                "b".into()
            } else {
                serde_json::Value::Null
            }
        );
        assert_eq!(item["waiting"], u64::from(moving));
    }

    let ran = run(
        zkfence(&zk.connect_string(), &["status", &path, "--items", "a,,b"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        ran.code,
        Some(2),
        "a bad --items is a usage error: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("comma-separated names"),
        "{}",
        ran.stderr
    );
    drop(held);
}

#[tokio::test]
async fn usage_and_connection_errors_have_their_codes() {
    let ran = run(
        zkfence("127.0.0.1:1", &["exec", "/x"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(2), "CMD missing is a usage error");
    let ran = run(
        zkfence("127.0.0.1:1", &["--session-timeout", "1s", "status", "/x"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert!(
        ran.stderr.starts_with("zkfence: could not reach") && ran.stderr.lines().count() == 1,
        "{}",
        ran.stderr
    );
    let ran = run(
        zkfence(
            &shared_ensemble().connect_string(),
            &["status", "relative/path"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("must start with '/'"), "{}", ran.stderr);
    let ran = run(
        zkfence(
            "127.0.0.1:1",
            &["--session-timeout", "soon", "status", "/x"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(2));
}

#[tokio::test]
async fn ensemble_up_prints_its_connect_string_and_stops_on_sigterm() {
    let mut up = zkfence("unused:1", &["ensemble", "up", "--nodes", "1"])
        .spawn()
        .unwrap();
    let connect_string = next_line(&mut up, Duration::from_secs(60)).await;
    assert!(connect_string.starts_with("127.0.0.1:"), "{connect_string}");
    let session = connect(&connect_string, Duration::from_secs(4)).await;
    let lease = session.lock("/up").acquire().await.unwrap();
    lease.release().await.unwrap();
    drop(session);

    signal(&up, libc::SIGTERM);
    let ran = finish(up, Duration::from_secs(15)).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let port: u16 = connect_string.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is gone"
    );
}

#[tokio::test]
async fn demo_keeps_every_promise() {
    let ran = run(zkfence("unused:1", &["demo"]), Duration::from_secs(120)).await;
    assert_eq!(
        ran.code,
        Some(0),
        "demo failed:\n{}\n{}",
        ran.stdout,
        ran.stderr
    );
    assert_eq!(ran.stdout.matches('✔').count(), 6, "{}", ran.stdout);
    assert!(ran.stdout.contains("all 5 promises held"), "{}", ran.stdout);
    assert!(!ran.stdout.contains('✘'));
}

/// Issue 24: `zkfence leader` prints what the leader proclaimed, in text and JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_prints_the_proclaimed_value() {
    let zk = shared_ensemble();
    let a = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let path = unique_path("leader-proclaim");
    let leadership = a.election(&path).campaign("c1").await.unwrap();
    let json =
        |ran: &Ran| -> serde_json::Value { serde_json::from_str(&ran.stdout).expect("valid JSON") };
    let before = run(
        zkfence(&zk.connect_string(), &["leader", &path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(json(&before)["proclaimed"], serde_json::Value::Null);
    leadership.proclaim("http://10.0.0.7:8080").await.unwrap();
    let after = run(
        zkfence(&zk.connect_string(), &["leader", &path, "--json"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(json(&after)["proclaimed"], "http://10.0.0.7:8080");
    assert_eq!(json(&after)["leader"]["owner"]["id"], "c1");
    let text = run(
        zkfence(&zk.connect_string(), &["leader", &path]),
        Duration::from_secs(20),
    )
    .await;
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!("{path}: led by c1")),
        "{}",
        text.stdout
    );
    assert_eq!(
        lines[1], "proclaimed: http://10.0.0.7:8080",
        "{}",
        text.stdout
    );
    leadership.resign().await.unwrap();
}
