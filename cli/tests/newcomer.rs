//! The CLI as a newcomer tried it (issue 44): each test runs the `zkfence` process and
//! checks its exit code and output, as the user saw them.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::time::Duration;

use common::{eventually, shared_ensemble, unique_path};
use process::{holding, run, zkfence};

const RUN: Duration = Duration::from_secs(30);

// ---- item 1 ------------------------------------------------------------------------------

#[tokio::test]
async fn two_kinds_of_lock_on_one_path_are_refused_with_exit_2() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("mix");
    let mut plain = holding(&c, &[&path], "plain").await;
    let ran = run(
        zkfence(
            &c,
            &[
                "exec",
                "--no-wait",
                "--limit",
                "2",
                &path,
                "sh",
                "-c",
                "echo SEMAPHORE RAN",
            ],
        ),
        RUN,
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        !ran.stdout.contains("SEMAPHORE RAN"),
        "CMD ran: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("a semaphore") && ran.stderr.contains("a plain lock"),
        "names both kinds: {}",
        ran.stderr
    );
    plain.kill().await.unwrap();

    // The reverse: both permits of a --limit 2 held, a plain --no-wait is refused.
    let path = unique_path("mix-reverse");
    let mut a = holding(&c, &["--limit", "2", &path], "a").await;
    let mut b = holding(&c, &["--limit", "2", &path], "b").await;
    let ran = run(
        zkfence(
            &c,
            &["exec", "--no-wait", &path, "sh", "-c", "echo PLAIN RAN"],
        ),
        RUN,
    )
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(!ran.stdout.contains("PLAIN RAN"), "CMD ran: {}", ran.stdout);
    assert!(ran.stderr.contains("a semaphore"), "{}", ran.stderr);
    a.kill().await.unwrap();
    b.kill().await.unwrap();
}

// ---- item 2 ------------------------------------------------------------------------------

#[tokio::test]
async fn exec_keeps_cmd_arguments_out_of_node_data() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("secret");
    let secret = "postgres://app:hunter2@db/prod";
    // As holding() does, with the secret an argument of CMD.
    let file = std::env::temp_dir().join(format!(
        "zkfence-newcomer-secret-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let script = format!("touch {}; exec sleep 60", file.display());
    let url = format!("DATABASE_URL={secret}");
    let mut child = zkfence(&c, &["exec", &path, "env", &url, "sh", "-c", &script])
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(20), "CMD runs", || {
        let file = file.clone();
        async move { file.exists() }
    })
    .await;
    let _ = std::fs::remove_file(&file);
    let status = run(zkfence(&c, &["status", "--json", &path]), RUN).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert!(
        !status.stdout.contains("hunter2"),
        "the secret is in node data: {}",
        status.stdout
    );
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let id = json["holders"][0]["owner"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(id.ends_with(":env"), "HOST:PROGRAM, as elect's: {id}");
    // And the raw data, as zkCli's `get` shows it.
    let session = common::connect(&c, Duration::from_secs(4)).await;
    for node in common::children(&session, &path).await {
        let (data, _) = session
            .client()
            .get_data(&format!("{path}/{node}"))
            .await
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&data).contains("hunter2"),
            "the secret is in {node}'s data"
        );
    }
    child.kill().await.unwrap();
}

// ---- item 4 ------------------------------------------------------------------------------

#[tokio::test]
async fn timeouts_that_cannot_work_are_refused_before_connecting() {
    let c = shared_ensemble().connect_string();
    for (flag, value) in [
        ("--session-timeout", "0"),
        ("--session-timeout", "1ms"),
        ("--session-timeout", "100ms"),
        ("--connect-timeout", "0"),
        ("--connect-timeout", "1ms"),
    ] {
        let ran = run(zkfence(&c, &[flag, value, "status", "/x"]), RUN).await;
        assert_eq!(ran.code, Some(2), "{flag} {value}: {}", ran.stderr);
        assert!(
            ran.stderr.contains(flag) && ran.stderr.contains("cannot work"),
            "{flag} {value}: {}",
            ran.stderr
        );
        assert!(
            !ran.stderr.contains("could not reach"),
            "not an unreachable ensemble: {}",
            ran.stderr
        );
    }
}

#[tokio::test]
async fn a_clamped_session_timeout_is_told_once_and_shown_in_json() {
    // The shared ensemble's tickTime is 200ms: sessions of 400ms to 4s.
    let c = shared_ensemble().connect_string();
    let path = unique_path("clamped");
    for (asked, granted, granted_ms) in [("5m", "4s", 4000), ("1h", "4s", 4000)] {
        let ran = run(
            zkfence(&c, &["--session-timeout", asked, "status", "--json", &path]),
            RUN,
        )
        .await;
        // A path nobody used: exit 66 (item 6), and the document still printed.
        assert_eq!(ran.code, Some(66), "{asked}: {}", ran.stderr);
        let told = format!("granted a session timeout of {granted}, not the {asked} asked for");
        assert_eq!(
            ran.stderr.matches(&told).count(),
            1,
            "{asked}: {}",
            ran.stderr
        );
        let json: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
        assert_eq!(json["session_timeout_ms"], granted_ms, "{}", ran.stdout);
    }
    // Granted as asked: nothing said.
    let ran = run(
        zkfence(&c, &["--session-timeout", "2s", "status", &path]),
        RUN,
    )
    .await;
    assert!(!ran.stderr.contains("granted"), "{}", ran.stderr);
}

// ---- item 5 ------------------------------------------------------------------------------

#[tokio::test]
async fn leader_does_not_call_its_candidacy_its_leadership() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("led");
    let session = common::connect(&c, Duration::from_secs(4)).await;
    let first = session.election(&path).campaign("first").await.unwrap();
    let second = session.election(&path);
    let waiting = tokio::spawn(async move { second.campaign("second").await });
    common::until_children(&session, &path, 2).await;
    first.resign().await.unwrap();
    let second = common::within(RUN, "second leads", waiting)
        .await
        .unwrap()
        .unwrap();
    let ran = run(zkfence(&c, &["leader", &path]), RUN).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let head = ran.stdout.lines().next().unwrap_or_default().to_string();
    assert!(
        head.starts_with(&format!("{path}: led by second"))
            && head.contains("a candidate for")
            && head.contains("leading for at most that long"),
        "{head}"
    );
    second.resign().await.unwrap();
}

// ---- item 6 ------------------------------------------------------------------------------

#[tokio::test]
async fn status_of_a_missing_path_says_so_with_exit_66() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("typo");
    for sub in ["status", "leader"] {
        let ran = run(zkfence(&c, &[sub, &path]), RUN).await;
        assert_eq!(ran.code, Some(66), "{sub}: {}", ran.stderr);
        assert!(ran.stdout.contains("no such"), "{sub}: {}", ran.stdout);
    }
}

#[tokio::test]
async fn an_idle_semaphore_is_described_without_excuses_or_an_empty_table() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("idle-semaphore");
    let session = common::connect(&c, Duration::from_secs(4)).await;
    // A semaphore's directories, persistent here so the servers' container sweep cannot
    // remove them before we look.
    for dir in [
        "/test".to_string(),
        path.clone(),
        format!("{path}/locks"),
        format!("{path}/leases"),
    ] {
        let made = session
            .client()
            .create(
                &dir,
                b"",
                &zkfence::zookeeper_client::CreateMode::Persistent
                    .with_acls(zkfence::zookeeper_client::Acls::anyone_all()),
            )
            .await;
        assert!(
            matches!(
                made,
                Ok(_) | Err(zkfence::zookeeper_client::Error::NodeExists)
            ),
            "{dir}: {made:?}"
        );
    }
    let ran = run(zkfence(&c, &["status", &path]), RUN).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(
        ran.stdout,
        format!("{path}: semaphore, nobody holds it, nobody waiting\n")
    );
}

#[tokio::test]
async fn no_wait_messages_name_the_flag_given_and_the_writer_ahead() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("said");
    let mut holder = holding(&c, &["--id", "h", &path], "h").await;
    let ran = run(zkfence(&c, &["exec", "--timeout", "0", &path, "true"]), RUN).await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("(--timeout 0)") && !ran.stderr.contains("--no-wait"),
        "{}",
        ran.stderr
    );
    holder.kill().await.unwrap();

    // Readers hold, a writer waits: a new reader waits for the writer, and is told so.
    let path = unique_path("writer-ahead");
    let mut r1 = holding(&c, &["--shared", "--id", "r1", &path], "r1").await;
    let mut writer = zkfence(&c, &["exec", "--id", "w", &path, "true"])
        .spawn()
        .unwrap();
    let session = common::connect(&c, Duration::from_secs(4)).await;
    common::until_children(&session, &path, 2).await;
    let ran = run(
        zkfence(&c, &["exec", "--no-wait", "--shared", &path, "true"]),
        RUN,
    )
    .await;
    assert_eq!(ran.code, Some(75), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("r1")
            && ran.stderr.contains("a writer waits ahead of us")
            && ran.stderr.contains("w ("),
        "{}",
        ran.stderr
    );
    r1.kill().await.unwrap();
    writer.kill().await.unwrap();
}

#[tokio::test]
async fn an_out_of_range_port_is_called_that() {
    let ran = run(zkfence("127.0.0.1:99999", &["status", "/x"]), RUN).await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("out of range"), "{}", ran.stderr);
}

// ---- item 7 ------------------------------------------------------------------------------

/// True if tmux runs here; in CI it must (install-deps installs it).
fn have_tmux() -> bool {
    let there = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok();
    assert!(
        there || std::env::var_os("CI").is_none(),
        "this test needs tmux (apt-get install tmux)"
    );
    there
}

/// A tmux session running `line` in a shell, killed when dropped.
struct Tmux(String);

impl Tmux {
    fn start(line: &str) -> Tmux {
        let name = format!("zkfence-{}", uuid::Uuid::new_v4().simple());
        // A tmux server whose last session was just killed exits, and a new session asked
        // of it meanwhile fails: ask again, a few times.
        for attempt in 0.. {
            let started = std::process::Command::new("tmux")
                .args([
                    "new-session",
                    "-d",
                    "-s",
                    &name,
                    "-x",
                    "200",
                    "-y",
                    "20",
                    line,
                ])
                .env_remove("ZKFENCE_CONNECT")
                .output()
                .unwrap();
            if started.status.success() {
                break;
            }
            assert!(
                attempt < 20,
                "tmux new-session: {}",
                String::from_utf8_lossy(&started.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Tmux(name)
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.0];
        args.extend_from_slice(keys);
        assert!(std::process::Command::new("tmux")
            .args(&args)
            .status()
            .unwrap()
            .success());
    }

    fn screen(&self) -> String {
        let out = std::process::Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

#[tokio::test]
async fn a_cmd_that_reads_the_terminal_gets_it() {
    if !have_tmux() {
        return;
    }
    let c = shared_ensemble().connect_string();
    let path = unique_path("tty");
    let dir = std::env::temp_dir().join(format!("zkfence-tty-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ready, got, rc) = (dir.join("ready"), dir.join("got"), dir.join("rc"));
    // As an interactive shell would run it: zkfence in the terminal's foreground, CMD
    // reading a line from it. Then zkfence's exit code, once the terminal is back.
    let line = format!(
        "{} --connect {c} exec {path} -- sh -c 'touch {}; read x; echo \"got $x\" > {}'; echo $? > {}; sleep 30",
        process::bin(),
        ready.display(),
        got.display(),
        rc.display()
    );
    let tmux = Tmux::start(&line);
    eventually(Duration::from_secs(20), "CMD runs", || {
        let ready = ready.clone();
        async move { ready.exists() }
    })
    .await;
    tmux.keys(&["hello", "Enter"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !rc.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "CMD never read the terminal (stopped by SIGTTIN?): {}",
            tmux.screen()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(&got).unwrap(), "got hello\n");
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "0");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- item 8 ------------------------------------------------------------------------------

/// Lines CMD appended to `log` so far.
fn runs(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |t| t.lines().count())
}

#[tokio::test]
async fn elect_restart_policy_stops_or_backs_off() {
    let c = shared_ensemble().connect_string();
    let dir =
        std::env::temp_dir().join(format!("zkfence-restart-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();

    // on-failure, CMD succeeds: it ran once, zkfence exits 0.
    let log = dir.join("clean");
    let script = format!("echo run >> {}; exit 0", log.display());
    let path = unique_path("restart-clean");
    let args = [
        "elect",
        "--restart",
        "on-failure",
        &path,
        "sh",
        "-c",
        &script,
    ];
    let ran = run(zkfence(&c, &args), RUN).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(runs(&log), 1);

    // never, CMD fails: once, with CMD's code.
    let log = dir.join("never");
    let script = format!("echo run >> {}; exit 3", log.display());
    let path = unique_path("restart-never");
    let args = ["elect", "--restart", "never", &path, "sh", "-c", &script];
    let ran = run(zkfence(&c, &args), RUN).await;
    assert_eq!(ran.code, Some(3), "{}", ran.stderr);
    assert_eq!(runs(&log), 1);

    // on-failure, CMD keeps failing: again after 1s, then 2s; SIGTERM ends it.
    let log = dir.join("failing");
    let script = format!("echo run >> {}; exit 3", log.display());
    let path = unique_path("restart-failing");
    let args = [
        "elect",
        "--restart",
        "on-failure",
        &path,
        "sh",
        "-c",
        &script,
    ];
    let child = zkfence(&c, &args).spawn().unwrap();
    eventually(Duration::from_secs(30), "three runs", || {
        let log = log.clone();
        async move { runs(&log) >= 3 }
    })
    .await;
    process::signal(&child, libc::SIGTERM);
    let ran = process::finish(child, RUN).await;
    assert!(
        ran.stderr
            .contains("exited with code 3: resigned leadership")
            && ran
                .stderr
                .contains("campaigning again in 1s (--restart on-failure)")
            && ran
                .stderr
                .contains("campaigning again in 2s (--restart on-failure)"),
        "{}",
        ran.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn elect_says_it_stopped_cmd_after_forwarding_a_signal() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("elect-sigterm");
    let ready = std::env::temp_dir().join(format!(
        "zkfence-elect-ready-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let script = format!("touch {}; exec sleep 60", ready.display());
    let child = zkfence(&c, &["elect", &path, "sh", "-c", &script])
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(20), "CMD runs", || {
        let ready = ready.clone();
        async move { ready.exists() }
    })
    .await;
    process::signal(&child, libc::SIGTERM);
    let ran = process::finish(child, RUN).await;
    assert!(
        ran.stderr
            .contains("stopped after zkfence forwarded SIGTERM to its process group"),
        "{}",
        ran.stderr
    );
    let _ = std::fs::remove_file(&ready);
}

// ---- item 9 ------------------------------------------------------------------------------

#[tokio::test]
async fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
    let c = shared_ensemble().connect_string();
    let path = unique_path("colour");
    // Into a pipe (or a file): plain text.
    let ran = run(zkfence(&c, &["-v", "status", &path]), RUN).await;
    assert!(ran.stderr.contains("INFO"), "{}", ran.stderr);
    assert!(
        !ran.stderr.contains('\x1b'),
        "escape codes in a pipe: {:?}",
        ran.stderr
    );
    if !have_tmux() {
        return;
    }
    // On a terminal: coloured, unless NO_COLOR says otherwise.
    for (no_color, coloured) in [("", true), ("NO_COLOR=1 ", false)] {
        let done =
            std::env::temp_dir().join(format!("zkfence-colour-{}", uuid::Uuid::new_v4().simple()));
        let line = format!(
            "{no_color}{} --connect {c} -v status {path}; touch {}; sleep 30",
            process::bin(),
            done.display()
        );
        let tmux = Tmux::start(&line);
        eventually(Duration::from_secs(20), "zkfence ran", || {
            let done = done.clone();
            async move { done.exists() }
        })
        .await;
        let out = std::process::Command::new("tmux")
            .args(["capture-pane", "-e", "-p", "-t", &tmux.0])
            .output()
            .unwrap();
        let screen = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(screen.contains("INFO"), "{screen}");
        assert_eq!(
            screen.contains('\x1b'),
            coloured,
            "{no_color:?}: {screen:?}"
        );
        let _ = std::fs::remove_file(&done);
    }
}

// ---- item 10 -----------------------------------------------------------------------------

/// `zkfence man ARGS...` rendered as man(1) shows it (groff), as plain text.
async fn man_page(args: &[&str]) -> String {
    let mut all = vec!["man"];
    all.extend_from_slice(args);
    let ran = run(zkfence("unused:1", &all), RUN).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let file = std::env::temp_dir().join(format!("zkfence-{}.1", uuid::Uuid::new_v4().simple()));
    std::fs::write(&file, &ran.stdout).unwrap();
    let rendered = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-P-cbou"])
        .arg(&file)
        .env("MANWIDTH", "100")
        .output();
    let _ = std::fs::remove_file(&file);
    let rendered = match rendered {
        Ok(out) if out.status.success() => out.stdout,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "this test needs groff (apt-get install groff-base)"
            );
            eprintln!("skipping the rendering: groff missing");
            return ran.stdout;
        }
    };
    String::from_utf8_lossy(&rendered).into_owned()
}

/// The lines of the section `title` of a rendered page.
fn section_of(page: &str, title: &str) -> Vec<String> {
    page.lines()
        .skip_while(|l| l.trim() != title)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        // Filled text is justified with extra spaces: compare words.
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[tokio::test]
async fn man_pages_keep_the_tables_and_name_the_commands_as_typed() {
    let exit_table = run(zkfence("unused:1", &["--help"]), RUN).await.stdout;
    let exit_table: Vec<String> = exit_table
        .lines()
        .skip_while(|l| *l != "Exit codes:")
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(exit_table.len() > 10, "{exit_table:?}");

    let top = man_page(&[]).await;
    assert!(
        !top.contains("zkfence-help"),
        "a page that does not exist: {top}"
    );
    for sub in ["exec", "elect", "status", "leader", "revoke", "gc"] {
        assert!(top.contains(&format!("zkfence-{sub}(1)")), "{top}");
        let page = man_page(&[sub]).await;
        let synopsis = section_of(&page, "SYNOPSIS").join(" ");
        assert!(
            synopsis.starts_with(&format!("zkfence {sub} ")),
            "{sub}: {synopsis}"
        );
        // Line for line, not reflowed into a paragraph.
        let exit = section_of(&page, "EXIT STATUS");
        assert_eq!(
            exit.iter().filter(|l| !l.is_empty()).collect::<Vec<_>>(),
            exit_table
                .iter()
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>(),
            "{sub}'s EXIT STATUS"
        );
    }
    assert_eq!(
        section_of(&top, "EXIT STATUS")
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>(),
        exit_table
            .iter()
            .filter(|l| !l.is_empty())
            .cloned()
            .collect::<Vec<_>>()
    );

    // Every page a page lists can be printed: `zkfence-ensemble-up(1)` is `zkfence man
    // ensemble up`.
    let mut pages = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = pages.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let page = man_page(&args).await;
        seen += 1;
        let me = std::iter::once("zkfence")
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join("-");
        for word in page.split_whitespace() {
            if let Some(name) = word
                .strip_prefix(&format!("{me}-"))
                .and_then(|w| w.strip_suffix("(1)"))
            {
                let mut sub = path.clone();
                sub.extend(name.split('-').map(str::to_string));
                let ran = run(
                    zkfence(
                        "unused:1",
                        &[
                            &["man"][..],
                            &sub.iter().map(String::as_str).collect::<Vec<_>>(),
                        ]
                        .concat(),
                    ),
                    RUN,
                )
                .await;
                assert_eq!(
                    ran.code,
                    Some(0),
                    "{me} lists {name}, which has no page: {}",
                    ran.stderr
                );
                pages.push(sub);
            }
        }
    }
    assert!(seen > 10, "{seen} pages");

    // The JSON documents are in the help and the pages themselves, not "in the README".
    for sub in ["status", "leader"] {
        let help = run(zkfence("unused:1", &[sub, "--help"]), RUN).await.stdout;
        assert!(!help.contains("README"), "{sub} --help: {help}");
        assert!(help.contains("A CONTENDER is:"), "{sub} --help: {help}");
        let json = section_of(&man_page(&[sub]).await, "JSON OUTPUT").join("\n");
        assert!(
            json.contains("\"revocation_requested\": bool"),
            "{sub}: {json}"
        );
    }
    let leader = run(zkfence("unused:1", &["leader", "--help"]), RUN)
        .await
        .stdout;
    assert!(leader.contains("\"proclaimed\""), "{leader}");
}

// ---- item 11 -----------------------------------------------------------------------------

/// Three consecutive free ports on 127.0.0.1 (free when looked at).
fn free_base_port() -> u16 {
    loop {
        let base = 20_000 + (uuid::Uuid::new_v4().as_u128() % 8_000) as u16;
        let free = (0..3).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if free {
            return base;
        }
    }
}

/// Reads `lines` into `seen` until one satisfies `until` (at most 30 s); returns all seen.
async fn read_until<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    seen: &mut Vec<String>,
    until: impl Fn(&str) -> bool,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("stderr so far: {seen:#?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("stderr ended: {seen:#?}"));
        seen.push(line.clone());
        if until(&line) {
            return seen.clone();
        }
    }
}

#[tokio::test]
async fn ensemble_up_shows_its_servers_takes_a_base_port_and_reports_one_that_died() {
    use tokio::io::AsyncBufReadExt;
    let base = free_base_port();
    let base_arg = base.to_string();
    let mut up = zkfence(
        "unused:1",
        &["ensemble", "up", "--nodes", "3", "--base-port", &base_arg],
    )
    .spawn()
    .unwrap();
    let connect = process::next_line(&mut up, Duration::from_secs(90)).await;
    assert_eq!(
        connect,
        format!(
            "127.0.0.1:{base},127.0.0.1:{},127.0.0.1:{}",
            base + 1,
            base + 2
        )
    );
    let mut stderr = tokio::io::BufReader::new(up.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let lines = read_until(&mut stderr, &mut seen, |l| l.contains("ensemble up")).await;
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|w| w.len() == 4 && w[0].parse::<u32>().is_ok())
        .collect();
    assert_eq!(rows.len(), 3, "{lines:#?}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], (i + 1).to_string());
        assert_eq!(row[1], (base + i as u16).to_string());
        assert!(row[2].parse::<u32>().is_ok(), "a pid: {row:?}");
    }
    let leaders: Vec<&Vec<String>> = rows.iter().filter(|r| r[3] == "leader").collect();
    assert_eq!(leaders.len(), 1, "{lines:#?}");
    // A failover drill: kill the leader.
    let pid: i32 = leaders[0][2].parse().unwrap();
    let server = leaders[0][0].clone();
    // SAFETY: kill(2) on the server's JVM, which this test's ensemble started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let told = format!("server {server} (127.0.0.1:");
    let lines = read_until(&mut stderr, &mut seen, |l| {
        l.starts_with(&format!("zkfence: {told}"))
    })
    .await;
    assert!(
        lines
            .last()
            .unwrap()
            .contains(&format!("pid {pid}) exited")),
        "{lines:#?}"
    );
    process::signal(&up, libc::SIGTERM);
    let ran = process::finish(up, Duration::from_secs(60)).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // Nothing of it is left: no server is listening on its ports.
    for i in 0..3 {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", base + i)).is_err(),
            "port {} still served",
            base + i
        );
    }
}

// ---- item 12 -----------------------------------------------------------------------------

#[tokio::test]
async fn a_windowed_recheck_keeps_the_whole_timeline() {
    let dir =
        std::env::temp_dir().join(format!("zkfence-recheck-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let history = dir.join("history.jsonl");
    // A real campaign's history, as the README's chaos section shows it.
    let gz = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/chaos-history-2027b.jsonl.gz"
    );
    let unzipped = std::process::Command::new("gzip")
        .args(["-dc", gz])
        .output()
        .unwrap();
    assert!(unzipped.status.success());
    std::fs::write(&history, unzipped.stdout).unwrap();
    let history_arg = history.display().to_string();
    let whole = run(
        zkfence("unused:1", &["chaos", "--check", &history_arg]),
        RUN,
    )
    .await;
    assert_eq!(whole.code, Some(0), "{}", whole.stderr);
    let timeline = dir.join("timeline.svg");
    let before = std::fs::read(&timeline).unwrap();
    let windowed = run(
        zkfence(
            "unused:1",
            &["chaos", "--check", &history_arg, "--window", "40s..160s"],
        ),
        RUN,
    )
    .await;
    assert_eq!(windowed.code, Some(0), "{}", windowed.stderr);
    let window = dir.join("timeline-40s-160s.svg");
    assert!(
        windowed
            .stdout
            .contains(&format!("timeline: {}", window.display())),
        "{}",
        windowed.stdout
    );
    assert!(window.exists(), "{}", windowed.stdout);
    assert_eq!(
        std::fs::read(&timeline).unwrap(),
        before,
        "the whole timeline was overwritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
