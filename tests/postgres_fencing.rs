//! Fencing where the data lives: a real PostgreSQL refuses a stale holder's write.
//!
//! - The `fenced_postgres` recipe's frozen-writer scenario (A and B separate processes, A
//!   SIGSTOPped past its session timeout), 10 trials, checked against the database.
//! - 4 writer processes x 50 grants through the fence while the ZooKeeper leader is killed.
//! - A database that is down or refuses the login: a clear error, and the lock released.
//! - The shell form: `zkfence exec LOCK -- sh -c 'psql ... -v token="$ZKFENCE_TOKEN" ...'`.
//!
//! All tests share one PostgreSQL server (each uses its own account row and lock path); the
//! test that kills a ZooKeeper server has its own ensemble.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use common::{child_role, shared_ensemble, spawn_child, unique_path, within};
use futures::StreamExt;
use tokio::process::Command;
use tokio_postgres::{Client, NoTls};
use zkfence::{Session, SessionOptions};
use zkfence_testcontainers::Postgres;

/// The recipe's tables (the same DDL as `recipes/fenced_postgres.rs`).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fence (resource text PRIMARY KEY, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS account (
    id text PRIMARY KEY, balance bigint NOT NULL, written_by text NOT NULL,
    fence_token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS account_writes (
    seq bigserial PRIMARY KEY, account text NOT NULL, written_by text NOT NULL,
    balance bigint NOT NULL, fence_token bigint NOT NULL);
";

static SHARED_PG: OnceLock<Postgres> = OnceLock::new();
static SHARED_PG_RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The PostgreSQL server shared by this binary's tests, with the schema in place. Started on a
/// runtime of its own (each test has its own and ends); the harness's watchdog stops it
/// when the test process exits.
fn shared_pg() -> &'static Postgres {
    SHARED_PG.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = SHARED_PG_RT.get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap()
            });
            rt.block_on(async {
                let pg = Postgres::launch().await.expect("start PostgreSQL");
                // Created once here: concurrent CREATE TABLE IF NOT EXISTS may race.
                let (db, conn) = tokio_postgres::connect(&pg.url(), NoTls)
                    .await
                    .expect("connect");
                let io = tokio::spawn(conn);
                db.batch_execute(SCHEMA).await.expect("create the schema");
                drop(db);
                let _ = io.await;
                pg
            })
        })
        .join()
        .expect("PostgreSQL start thread")
    })
}

async fn db(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// `target/<profile>`, from this test binary's path (`target/<profile>/deps/...`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

static BUILT: OnceLock<()> = OnceLock::new();

/// Builds the recipe and the CLI once (quick when cargo has them already), with the same
/// cargo, manifest, target dir and profile as this test.
fn build_binaries() {
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        let profile = profile_dir();
        let target = profile.parent().expect("target dir").to_path_buf();
        for what in [
            ["-p", "zkfence", "--example", "fenced_postgres"],
            ["-p", "zkfence-cli", "--bin", "zkfence"],
        ] {
            let mut cmd = std::process::Command::new(&cargo);
            cmd.args(["build", "--quiet", "-j2", "--manifest-path", manifest])
                .arg("--target-dir")
                .arg(&target)
                .args(what)
                .stdin(Stdio::null());
            if profile.file_name().and_then(|n| n.to_str()) == Some("release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "cargo build {what:?} failed");
        }
    });
}

fn recipe_bin() -> PathBuf {
    build_binaries();
    profile_dir().join("examples").join("fenced_postgres")
}

fn zkfence_bin() -> PathBuf {
    build_binaries();
    profile_dir().join("zkfence")
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run(cmd: &mut Command, timeout: Duration, what: &str) -> Ran {
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let out = within(timeout, what, cmd.output())
        .await
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn account_name(tag: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{tag}-{}", &id[..12])
}

/// The accepted writes of `account`, in commit order: (writer, balance, token).
async fn writes_of(db: &Client, account: &str) -> Vec<(String, i64, i64)> {
    db.query(
        "SELECT written_by, balance, fence_token FROM account_writes \
         WHERE account = $1 ORDER BY seq",
        &[&account],
    )
    .await
    .expect("read account_writes")
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

async fn row_of(db: &Client, account: &str) -> Option<(i64, String, i64)> {
    db.query_opt(
        "SELECT balance, written_by, fence_token FROM account WHERE id = $1",
        &[&account],
    )
    .await
    .expect("read account")
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

// ---- the frozen writer ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_writers_late_write_is_refused_by_postgres_10_trials() {
    let bin = recipe_bin();
    let connect = shared_ensemble().connect_string();
    let url = shared_pg().url();
    let db = db(&url).await;

    // Two trials at a time: each spends most of its time waiting for A's session to expire.
    let trials = futures::stream::iter(0..10)
        .map(|trial| {
            let (bin, connect, url) = (bin.clone(), connect.clone(), url.clone());
            async move {
                let account = account_name(&format!("frozen{trial}"));
                let mut cmd = Command::new(&bin);
                cmd.args(["--connect", &connect, "--database-url", &url])
                    .args(["--account", &account]);
                let ran = run(&mut cmd, Duration::from_secs(90), "the recipe").await;
                (trial, account, ran)
            }
        })
        .buffer_unordered(2)
        .collect::<Vec<_>>()
        .await;

    for (trial, account, ran) in trials {
        let ctx = format!("trial {trial}:\n{}\n{}", ran.stdout, ran.stderr);
        assert_eq!(ran.code, Some(0), "{ctx}");
        assert!(ran.stdout.contains("refused: stale token"), "{ctx}");
        // The database, not the recipe's word, decides.
        let writes = writes_of(&db, &account).await;
        let [(wa, 100, ta), (wb, 80, tb)] = writes.as_slice() else {
            panic!("accepted writes {writes:?}, expected A's 100 then B's 80; {ctx}");
        };
        assert_eq!((wa.as_str(), wb.as_str()), ("A", "B"), "{ctx}");
        assert!(tb > ta, "B's token {tb} is not larger than A's {ta}; {ctx}");
        // No write lost that carried the newest token: B's is the final row.
        assert_eq!(
            row_of(&db, &account).await,
            Some((80, "B".to_string(), *tb)),
            "{ctx}"
        );
        let lock = format!("/recipes/fenced-postgres/{account}");
        let fence: i64 = db
            .query_one("SELECT token FROM fence WHERE resource = $1", &[&lock])
            .await
            .expect("read the fence")
            .get(0);
        assert_eq!(fence, *tb, "{ctx}");
    }
}

#[tokio::test]
async fn the_recipe_starts_its_own_ensemble_and_database_when_given_none() {
    let mut cmd = Command::new(recipe_bin());
    cmd.env_remove("ZKFENCE_CONNECT");
    let ran = run(&mut cmd, Duration::from_secs(180), "the recipe").await;
    assert_eq!(ran.code, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("starting a local ZooKeeper ensemble"));
    assert!(ran.stderr.contains("starting a local PostgreSQL"));
    assert!(ran.stdout.contains("the promise held"), "{}", ran.stdout);
}

// ---- many writers under a leader failover ----

const WRITERS: usize = 4;
const GRANTS_PER_WRITER: usize = 50;
const CONTENTION_TEST: &str = "many_writers_through_the_fence_while_the_zookeeper_leader_is_killed";

/// A session for a contention writer, tried again while the ensemble elects a leader (it
/// refuses clients meanwhile).
async fn new_session(connect: &str) -> Session {
    let options = SessionOptions::new().session_timeout(Duration::from_secs(4));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match Session::connect(connect, options.clone()).await {
            Ok(session) => return session,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("connect failed ({e}); again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect to {connect}: {e}"),
        }
    }
}

/// One writer process of the contention test: `GRANTS_PER_WRITER` grants of the lock, one
/// fenced write each; prints `GRANT <token> WROTE|STALE` per grant.
async fn contention_writer() {
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let (connect, url, lock, account, me) = (
        env("PGF_CONNECT"),
        env("PGF_URL"),
        env("PGF_LOCK"),
        env("PGF_ACCOUNT"),
        env("PGF_NAME"),
    );
    let mut db = db(&url).await;
    let mut session = new_session(&connect).await;
    let mut grants = 0;
    while grants < GRANTS_PER_WRITER {
        let lease = match session.lock(&lock).with_id(&me).acquire().await {
            Ok(lease) => lease,
            Err(e) => {
                // The failover: a new session if this one is gone, else try again.
                eprintln!("{me}: acquire failed ({e}); again");
                if e.is_session_terminal() {
                    session = new_session(&connect).await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        grants += 1;
        let token = i64::try_from(lease.token().get()).unwrap();
        let tx = db.transaction().await.expect("begin");
        let admitted = tx
            .query_opt(
                "INSERT INTO fence (resource, token) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token \
                 WHERE fence.token <= EXCLUDED.token RETURNING token",
                &[&lock, &token],
            )
            .await
            .expect("fence");
        if admitted.is_some() {
            tx.execute(
                "INSERT INTO account (id, balance, written_by, fence_token) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET \
                 balance = account.balance + 1, written_by = EXCLUDED.written_by, \
                 fence_token = EXCLUDED.fence_token",
                &[&account, &1i64, &me, &token],
            )
            .await
            .expect("write");
            tx.execute(
                "INSERT INTO account_writes (account, written_by, balance, fence_token) \
                 VALUES ($1, $2, 1, $3)",
                &[&account, &me, &token],
            )
            .await
            .expect("log");
            tx.commit().await.expect("commit");
            println!("GRANT {token} WROTE");
        } else {
            tx.rollback().await.expect("rollback");
            println!("GRANT {token} STALE");
        }
        if let Err(e) = lease.release().await {
            // Our node may outlive a failed delete while the session lives: start afresh,
            // closing the session takes its nodes with it.
            eprintln!("{me}: release failed ({e}); new session");
            session = new_session(&connect).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_writers_through_the_fence_while_the_zookeeper_leader_is_killed() {
    if child_role().as_deref() == Some("pg-writer") {
        contention_writer().await;
        return;
    }
    let zk = common::own_ensemble(3).await;
    let url = shared_pg().url();
    let db = db(&url).await;
    let lock = unique_path("pg-contention");
    let account = account_name("contended");

    let mut children = Vec::new();
    for i in 0..WRITERS {
        children.push(spawn_child(
            CONTENTION_TEST,
            "pg-writer",
            &[
                ("PGF_CONNECT", zk.connect_string()),
                ("PGF_URL", url.clone()),
                ("PGF_LOCK", lock.clone()),
                ("PGF_ACCOUNT", account.clone()),
                ("PGF_NAME", format!("w{i}")),
            ],
        ));
    }

    // Kill the leader once the writers are well under way.
    let count = || async {
        db.query_one(
            "SELECT count(*) FROM account_writes WHERE account = $1",
            &[&account],
        )
        .await
        .expect("count")
        .get::<_, i64>(0)
    };
    common::eventually(Duration::from_secs(60), "40 accepted writes", || async {
        count().await >= 40
    })
    .await;
    let leader = zk
        .wait_for_leader(Duration::from_secs(20))
        .await
        .expect("a leader");
    zk.kill(leader);
    let at_kill = count().await;
    eprintln!("killed ZooKeeper leader {leader} after {at_kill} accepted writes");

    let mut reported: Vec<(i64, bool)> = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = within(
            Duration::from_secs(90),
            "a writer process",
            child.wait_with_output(),
        )
        .await
        .expect("writer output");
        assert!(out.status.success(), "writer w{i} failed: {}", out.status);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mine: Vec<(i64, bool)> = text
            .lines()
            .filter_map(|l| {
                // The test harness's "test NAME ... " may precede the first report.
                let mut f = l[l.find("GRANT ")? + 6..].split(' ');
                Some((f.next()?.parse().ok()?, f.next()? == "WROTE"))
            })
            .collect();
        assert_eq!(mine.len(), GRANTS_PER_WRITER, "w{i}:\n{text}");
        reported.extend(mine);
    }

    let writes = writes_of(&db, &account).await;
    assert!(
        (at_kill as usize) < writes.len(),
        "no write after the leader was killed ({at_kill} of {})",
        writes.len()
    );
    // The fence token in the table only grows (commit order is seq order: each write
    // locks the fence row until it commits).
    let tokens: Vec<i64> = writes.iter().map(|w| w.2).collect();
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fence token went {} -> {}",
            pair[0],
            pair[1]
        );
    }
    // Accepted writes are exactly the grants that wrote.
    let mut wrote: Vec<i64> = reported.iter().filter(|r| r.1).map(|r| r.0).collect();
    wrote.sort_unstable();
    assert_eq!(
        wrote, tokens,
        "accepted writes vs grants that reported a write"
    );
    assert_eq!(reported.len(), WRITERS * GRANTS_PER_WRITER);
    let (balance, _, row_token) = row_of(&db, &account).await.expect("the account row");
    assert_eq!(
        balance as usize,
        writes.len(),
        "a write was lost or doubled"
    );
    assert_eq!(Some(&row_token), tokens.last());
    eprintln!(
        "{} grants, {} wrote, {} refused as stale",
        reported.len(),
        writes.len(),
        reported.len() - writes.len()
    );
}

// ---- bad input ----

/// Runs writer B of the recipe against `url`: it takes the lock, then cannot use the
/// database. Returns its stderr after checking that it failed and let the lock go.
async fn writer_against_bad_database(url: &str) -> String {
    let connect = shared_ensemble().connect_string();
    let account = account_name("baddb");
    let lock = format!("/recipes/fenced-postgres/{account}");
    let mut cmd = Command::new(recipe_bin());
    cmd.args(["--role", "b", "--connect", &connect, "--database-url", url])
        .args(["--account", &account]);
    let ran = run(&mut cmd, Duration::from_secs(90), "writer B").await;
    let ctx = format!("{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, Some(2), "{ctx}");
    assert!(ran.stdout.contains("B: holds the lock"), "{ctx}");
    assert!(
        ran.stderr
            .contains(&format!("B: cannot use the database {url}: ")),
        "{ctx}"
    );
    assert!(ran.stderr.contains("the lock was released"), "{ctx}");
    // Free at once: B's session asked for 2 s, so a node left behind would still be there.
    let other = Session::connect(
        &connect,
        SessionOptions::new().session_timeout(Duration::from_secs(4)),
    )
    .await
    .expect("connect");
    let lease = other.lock(&lock).try_acquire().await.expect("try_acquire");
    assert!(
        lease.is_some(),
        "the lock is still held after B failed; {ctx}"
    );
    ran.stderr
}

#[tokio::test]
async fn a_database_that_is_down_gives_a_clear_error_and_the_lock_is_released() {
    let pg = Postgres::launch().await.expect("start PostgreSQL");
    let url = pg.url();
    pg.stop();
    let stderr = writer_against_bad_database(&url).await;
    assert!(stderr.contains("Connection refused"), "{stderr}");
}

#[tokio::test]
async fn a_database_that_refuses_the_login_gives_a_clear_error_and_the_lock_is_released() {
    let pg = shared_pg();
    let url = format!(
        "postgres://intruder@{}:{}/{}",
        pg.host(),
        pg.port(),
        pg.database()
    );
    let stderr = writer_against_bad_database(&url).await;
    assert!(
        stderr.contains("role \"intruder\" does not exist"),
        "{stderr}"
    );
}

// ---- from the shell ----

/// The per-row fence for psql: one statement, so the check and the write are one
/// transaction. No row updated (a newer token has written) makes `\gset` fail, and
/// ON_ERROR_STOP turns that into psql's exit status 3.
const FENCED_UPDATE_SQL: &str = r#"\set ON_ERROR_STOP on
UPDATE account SET balance = :balance, written_by = 'shell', fence_token = :token
 WHERE id = :'account' AND fence_token <= :token
 RETURNING fence_token AS written \gset
\echo written with fence token :written
"#;

/// The command an operator runs: psql's variables are set from zkfence's environment by
/// the inner shell (`$ZKFENCE_TOKEN` exists only inside `zkfence exec`).
const PSQL: &str = r#"psql "$DATABASE_URL" -X -q -v account="$ACCOUNT" -v balance="$BALANCE" -v token="$ZKFENCE_TOKEN" -f "$SQL_FILE""#;

#[tokio::test]
async fn zkfence_exec_runs_the_fenced_update_from_the_shell() {
    let pg = shared_pg();
    let db = db(&pg.url()).await;
    let connect = shared_ensemble().connect_string();
    let account = account_name("shell");
    let lock = unique_path("acct");
    db.execute(
        "INSERT INTO account (id, balance, written_by, fence_token) VALUES ($1, 0, 'setup', 0)",
        &[&account],
    )
    .await
    .expect("insert the account");
    let sql_file = std::env::temp_dir().join(format!("{account}.sql"));
    std::fs::write(&sql_file, FENCED_UPDATE_SQL).expect("write the SQL file");
    // Debian's psql wrapper, or the server's own if that is missing.
    let path = format!(
        "{}:{}",
        pg.bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |balance: i64, token: Option<i64>| {
        let mut cmd = match token {
            // `zkfence exec /locks/acct -- sh -c 'psql ... -v token="$ZKFENCE_TOKEN" ...'`
            None => {
                let mut c = Command::new(zkfence_bin());
                c.args(["--connect", &connect, "exec", &lock, "--", "sh", "-c", PSQL]);
                c
            }
            // A holder replaying an old token, outside the lock.
            Some(t) => {
                let mut c = Command::new("sh");
                c.args(["-c", PSQL]).env("ZKFENCE_TOKEN", t.to_string());
                c
            }
        };
        cmd.env("PATH", &path)
            .env("DATABASE_URL", pg.url())
            .env("ACCOUNT", &account)
            .env("BALANCE", balance.to_string())
            .env("SQL_FILE", &sql_file);
        cmd
    };

    let first = run(
        &mut shell(10, None),
        Duration::from_secs(60),
        "zkfence exec",
    )
    .await;
    assert_eq!(first.code, Some(0), "{}\n{}", first.stdout, first.stderr);
    let t1 = row_of(&db, &account).await.expect("row").2;
    assert!(t1 > 0);
    assert!(
        first
            .stdout
            .contains(&format!("written with fence token {t1}")),
        "{}",
        first.stdout
    );

    let second = run(
        &mut shell(20, None),
        Duration::from_secs(60),
        "zkfence exec",
    )
    .await;
    assert_eq!(second.code, Some(0), "{}\n{}", second.stdout, second.stderr);
    let after_second = row_of(&db, &account).await.expect("row");
    assert_eq!((after_second.0, after_second.1.as_str()), (20, "shell"));
    let t2 = after_second.2;
    assert!(
        t2 > t1,
        "the second grant's token {t2} is not above the first's {t1}"
    );

    // The first holder, late, with its old token: refused, psql fails, the row stays.
    let stale = run(&mut shell(99, Some(t1)), Duration::from_secs(60), "psql").await;
    assert_eq!(stale.code, Some(3), "{}\n{}", stale.stdout, stale.stderr);
    assert!(
        stale.stderr.contains("no rows returned for \\gset"),
        "{}",
        stale.stderr
    );
    assert_eq!(row_of(&db, &account).await.expect("row"), after_second);
    let _ = std::fs::remove_file(&sql_file);
}
