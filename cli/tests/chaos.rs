//! `zkfence chaos` (issues 23, 43, 45 and 46): a 60-second campaign of every recipe
//! (`--recipe mixed`) with every fault kind against a real ensemble, its writes going through
//! the fences of real PostgreSQL, MariaDB, Redis and etcd servers and an HTTP service too
//! (`--sink all`), finds no violation, prints its summary, and leaves a
//! history that parses and a timeline; settings that cannot work (PostgreSQL missing
//! included) are refused before anything starts; a history whose final check for nodes left
//! could not be made fails, saying why.
//!
//! This is the suite's one long test (about 70 s): it is what the issues ask CI to run.

mod process;

use std::collections::BTreeSet;
use std::time::Duration;

use process::bin;
use tokio::process::Command;

async fn chaos(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    chaos_env(args, &[], limit).await
}

async fn chaos_env(
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(
        limit,
        Command::new(bin())
            .arg("chaos")
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("zkfence chaos did not finish within {limit:?}"))
    .expect("run zkfence chaos");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_minute_of_every_recipe_and_fault_kind_with_every_store_finds_no_violation() {
    let dir = std::env::temp_dir().join(format!(
        "zkfence-chaos-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let out = dir.to_str().unwrap();
    let (code, stdout, stderr) = chaos(
        &[
            "--duration",
            "60s",
            "--seed",
            "23",
            "--recipe",
            "mixed",
            "--sink",
            "all",
            "--out",
            out,
        ],
        Duration::from_secs(240),
    )
    .await;
    let summary = stdout.lines().next().unwrap_or_default();
    // The figures, for whoever reads the test's output (--nocapture).
    eprintln!("{summary}");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        summary.starts_with("zkfence chaos: seed 23, 60s: ") && summary.ends_with(" 0 violations"),
        "{summary}"
    );

    let history = std::fs::read_to_string(dir.join("history.jsonl")).expect("the history");
    let events: Vec<serde_json::Value> = history
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(events[0]["event"], "campaign", "{}", events[0]);
    assert_eq!(events.last().unwrap()["event"], "finished");
    let count = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    let kinds: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["event"] == "fault-started")
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.len() >= 5, "only {kinds:?} ran");
    assert!(
        kinds.contains("delete-holder") && kinds.contains("shrink-timeout"),
        "issue 43's kinds ran: {kinds:?}"
    );
    assert!(count("granted") >= 10, "{summary}");
    // Every recipe was granted, and its grants counted in the summary.
    for recipe in [
        "lock",
        "election",
        "rwlock",
        "semaphore",
        "multi",
        "partitions",
    ] {
        let n = events
            .iter()
            .filter(|e| e["event"] == "granted" && e["recipe"] == recipe)
            .count();
        assert!(n >= 2, "{recipe}: {n} grants: {summary}");
        assert!(summary.contains(&format!("{recipe} {n}")), "{summary}");
    }
    let zk_committed = events
        .iter()
        .filter(|e| e["event"] == "zk-write" && e["committed"] == true)
        .count();
    assert!(
        summary.contains(&format!("ZooKeeper {zk_committed} fenced writes committed")),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("{} reads served", count("read-accepted"))),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("{} grants", count("granted"))),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("{} late writes refused", count("write-refused"))),
        "{summary}"
    );
    // Each store: its record of committed writes is in the history, and the summary counts
    // it and the writers' refusals.
    for (store, title) in [
        ("postgres", "PostgreSQL"),
        ("mariadb", "MariaDB"),
        ("redis", "Redis"),
        ("etcd", "etcd"),
        ("http", "HTTP service"),
    ] {
        let record = events
            .iter()
            .find(|e| e["event"] == "store-final" && e["store"] == store)
            .unwrap_or_else(|| panic!("no record of {store}"));
        assert!(record["error"].is_null(), "{record}");
        let committed = record["writes"].as_array().expect("the record").len();
        assert!(committed >= count("granted") / 2, "{store}: {summary}");
        let of = |outcome: &str| {
            (events.iter())
                .filter(|e| {
                    e["event"] == "store-write" && e["store"] == store && e["outcome"] == outcome
                })
                .count()
        };
        assert!(
            summary.contains(&format!(
                "{title} {committed} writes accepted, {} late writes refused",
                of("refused")
            )),
            "{store}: {summary}"
        );
        assert!(
            of("written") + of("failed") >= committed / 2,
            "{store}'s writers report their commits: {summary}"
        );
    }
    let svg = std::fs::read_to_string(dir.join("timeline.svg")).expect("the timeline");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("client 4") && svg.contains("faults"));
    assert!(svg.contains("semaphore hold"), "a legend entry per recipe");

    // The history is the evidence: checked again, it gives the same summary.
    let (code, again, stderr) = chaos(
        &["--check", dir.join("history.jsonl").to_str().unwrap()],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(again.lines().next(), Some(summary));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_before_anything_starts() {
    for (args, says) in [
        (&["--nodes", "4"][..], "3 or 5 servers"),
        (
            &["--faults", "kill-leader,kill-everyone"],
            "unknown fault kind \"kill-everyone\"",
        ),
        (
            &["--session-timeout", "10s", "--tick-time", "200ms"],
            "within 2 and 20 tickTimes",
        ),
        (&["--clients", "1"], "--clients"),
        (&["--recipe", "lock,mutex"], "unknown recipe \"mutex\""),
        (
            &["--recipe", "semaphore", "--permits", "5"],
            "fewer than the 5 clients",
        ),
        (&["--check", "h.jsonl", "--recipe", "multi"], "--recipe"),
        (&["--sink", "postgres,mongodb"], "unknown store \"mongodb\""),
        (&["--check", "h.jsonl", "--sink", "redis"], "--sink"),
        (
            &["--check", "/nonexistent/history.jsonl"],
            "cannot check /nonexistent/history.jsonl",
        ),
        (&["--window", "1s..2s"], "--check"),
        (&["--check", "h.jsonl", "--window", "5s..1s"], "is empty"),
        (&["--check", "h.jsonl", "--postgres"], "--postgres"),
    ] {
        let (code, _, stderr) = chaos(args, Duration::from_secs(10)).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // No PostgreSQL server binaries: a clear error, and no ensemble was started for nothing
    // (nothing was written to --out either).
    let dir = std::env::temp_dir().join(format!(
        "zkfence-chaos-nopg-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let (code, stdout, stderr) = chaos_env(
        &["--postgres", "--out", dir.to_str().unwrap()],
        &[("PG_BINDIR", "/nonexistent/pg/bin")],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("no PostgreSQL server found") && stderr.contains("/nonexistent/pg/bin"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("seed"),
        "the campaign did not start: {stderr}"
    );
    assert!(!dir.exists(), "nothing was written");
}

#[tokio::test]
async fn a_check_for_nodes_left_that_could_not_be_made_fails_the_run_with_its_reason() {
    // The end of a history whose final listing could not be made (the admin session had
    // expired, say): not a leftover node, but the run must still fail, saying why.
    let dir = std::env::temp_dir().join(format!(
        "zkfence-chaos-unchecked-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let history = dir.join("history.jsonl");
    std::fs::write(
        &history,
        concat!(
            r#"{"t_us":0,"event":"campaign","seed":5,"duration_ms":1000,"nodes":3,"clients":2,"session_timeout_ms":4000,"tick_time_ms":200,"faults":[],"grant_bound_ms":26000}"#,
            "\n",
            r#"{"t_us":2000000,"event":"finished","leftover_nodes":[],"servers_running":[],"contenders_running":[],"nodes_unchecked":"cannot list /zkfence-chaos/lock: session expired (still after 9 tries)"}"#,
            "\n",
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = chaos(
        &["--check", history.to_str().unwrap()],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "could not check for nodes left: cannot list /zkfence-chaos/lock: session expired"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("nodes left under"), "{stderr}");
    assert!(
        stdout
            .lines()
            .next()
            .unwrap_or_default()
            .ends_with(" 1 violations"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Histories recorded on the library before issue 43's fix, kept in docs/: the checker finds
/// what went wrong in each again (the rules cannot quietly stop seeing it).
#[tokio::test]
async fn the_recorded_failures_of_issue_43_are_found_again() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
    let dir = std::env::temp_dir().join(format!(
        "zkfence-chaos-43-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, says, count) in [
        (
            "chaos-history-delete-holder-before-fix.jsonl.gz",
            "a holder whose node was deleted was not told",
            1,
        ),
        (
            "chaos-history-shrink-timeout-before-fix.jsonl.gz",
            "overlapping holds",
            2,
        ),
    ] {
        let history = dir.join(name.trim_end_matches(".gz"));
        let unzipped = std::process::Command::new("gzip")
            .args(["-dc", &format!("{docs}/{name}")])
            .output()
            .expect("gzip");
        assert!(unzipped.status.success(), "{name}");
        std::fs::write(&history, unzipped.stdout).unwrap();
        let (code, stdout, stderr) = chaos(
            &["--check", history.to_str().unwrap()],
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(code, Some(1), "{name}: {stdout}\n{stderr}");
        assert_eq!(stderr.matches(says).count(), count, "{name}: {stderr}");
        let summary = stdout.lines().next().unwrap_or_default();
        assert!(
            summary.ends_with(&format!(" {count} violations")),
            "{summary}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
