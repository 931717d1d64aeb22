//! `zkfence chaos` (issue 23): a 60-second campaign with every fault kind against a real
//! ensemble finds no violation, prints its summary, and leaves a history that parses and a
//! timeline; settings that cannot work are refused before anything starts.
//!
//! This is the suite's one long test (about 70 s): it is what the issue asks CI to run.

mod process;

use std::collections::BTreeSet;
use std::time::Duration;

use process::bin;
use tokio::process::Command;

async fn chaos(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(
        limit,
        Command::new(bin())
            .arg("chaos")
            .args(args)
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
async fn a_minute_of_every_fault_kind_finds_no_violation() {
    let dir = std::env::temp_dir().join(format!(
        "zkfence-chaos-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let out = dir.to_str().unwrap();
    let (code, stdout, stderr) = chaos(
        &["--duration", "60s", "--seed", "23", "--out", out],
        Duration::from_secs(240),
    )
    .await;
    let summary = stdout.lines().next().unwrap_or_default();
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
    assert!(count("granted") >= 10, "{summary}");
    assert!(
        summary.contains(&format!("{} grants", count("granted"))),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("{} late writes refused", count("write-refused"))),
        "{summary}"
    );
    let svg = std::fs::read_to_string(dir.join("timeline.svg")).expect("the timeline");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("client 4") && svg.contains("faults"));

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
        (
            &["--check", "/nonexistent/history.jsonl"],
            "cannot check /nonexistent/history.jsonl",
        ),
        (&["--window", "1s..2s"], "--check"),
        (&["--check", "h.jsonl", "--window", "5s..1s"], "is empty"),
    ] {
        let (code, _, stderr) = chaos(args, Duration::from_secs(10)).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
