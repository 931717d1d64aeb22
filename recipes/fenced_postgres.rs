//! Fencing where the data lives: a real PostgreSQL refuses a stale lock holder's write.
//!
//! The lock service only issues fencing tokens; the database must refuse a write that carries
//! an older token than one it has already accepted. Here the fence is the `zkfence-fences`
//! crate's PostgreSQL fence ([`PgFence`], feature `postgres`): a row per protected resource
//! (keyed by the lock path) in the table `fence`, checked and raised in the *same
//! transaction* as the write it protects. The orchestrator creates the account's fence row
//! once, as a resource's owner does; each writer then only says resource, token and the
//! write:
//!
//! ```text
//! PgFence::with_table("fence")?.write(&mut db, lock, token, &[the account's UPDATE, the log's INSERT])
//!   -> Written(rows) | Refused(StaleToken { token, newest })
//! ```
//!
//! (Before the fences crate this recipe ran its own upsert, `INSERT INTO fence (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE fence.token <= EXCLUDED.token RETURNING token` and, when refused, `SELECT token FROM fence WHERE resource = $1`; the chaos campaign's `--postgres` still runs that copy, and checks it against this text, until it writes through the fences crate's sink.)
//!
//! The failure case of the design notes, played for real with two processes:
//!
//! 1. Writer A takes the lock `/recipes/fenced-postgres/<account>` (token t) and writes
//!    balance=100 through the fence: accepted.
//! 2. A checks its lease (held) and is about to write balance=120... and freezes: this
//!    program sends it SIGSTOP, as a long GC pause or a stalled VM would.
//! 3. A's session expires; writer B (another process) is granted the lock with a larger
//!    token and writes balance=80: accepted.
//! 4. A is resumed (SIGCONT) and carries on with the write it had started, still with token
//!    t: PostgreSQL refuses it, A reports "stale token" and stops.
//!
//! ```text
//! cargo run --example fenced_postgres       # starts a throwaway ensemble and PostgreSQL
//! cargo run --example fenced_postgres -- --connect 127.0.0.1:2181 \
//!     --database-url postgres://me@127.0.0.1:5432/mydb
//! ```
//!
//! Exits 0 only if the promise held: the final row is B's, and A's late write was refused.

mod common;

use std::error::Error;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio_postgres::{Client, NoTls};
use zkfence::{FencingToken, Lease, LeaseState, Session, SessionOptions};
use zkfence_fences::postgres::PgFence;
use zkfence_testcontainers::Postgres;

/// The tables: the fence (newest accepted token per protected resource), the protected data,
/// and a log of every accepted write (so that a lost write would show).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS account (
    id text PRIMARY KEY,
    balance bigint NOT NULL,
    written_by text NOT NULL,
    fence_token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS account_writes (
    seq bigserial PRIMARY KEY,
    account text NOT NULL,
    written_by text NOT NULL,
    balance bigint NOT NULL,
    fence_token bigint NOT NULL
);
";

/// A's session timeout: how long A must stay frozen before B can have the lock.
const SESSION_TIMEOUT: Duration = Duration::from_secs(2);
/// An upper bound for every step, so that a broken setup fails instead of hanging.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn Error>>;

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn lock_path(account: &str) -> String {
    format!("/recipes/fenced-postgres/{account}")
}

/// What the fence said about a write.
enum Outcome {
    Written,
    /// Refused: the database has accepted `newest`, a newer token.
    Stale {
        newest: i64,
    },
}

/// Connects to PostgreSQL; the error says which database could not be used and why.
async fn connect_db(url: &str) -> Res<Client> {
    let (client, connection) =
        tokio::time::timeout(STEP_TIMEOUT, tokio_postgres::connect(url, NoTls))
            .await
            .map_err(|_| format!("cannot use the database {url}: no answer in {STEP_TIMEOUT:?}"))?
            .map_err(|e| format!("cannot use the database {url}: {}", with_causes(&e)))?;
    // The connection object does the I/O; it ends when the client is dropped.
    tokio::spawn(async move {
        match connection.await {
            // A closed connection is the normal end (the client was dropped).
            Err(e) if !e.is_closed() => eprintln!("database connection ended: {e}"),
            _ => {}
        }
    });
    Ok(client)
}

/// The error and its causes: tokio-postgres's own message is only the kind ("db error",
/// "error connecting to server"); the server's message or the OS error is in the causes.
fn with_causes(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The fence: the `zkfence-fences` PostgreSQL fence in this recipe's table `fence`.
fn fence() -> PgFence {
    PgFence::with_table("fence").expect("a valid table name")
}

/// Writes `balance` to `account` through the fence of `resource`, in one transaction: the
/// fence check, the fence raise and the write commit together or not at all. The library
/// locks the fence row until the commit, so a concurrent writer waits and then sees our token.
async fn write_through_fence(
    db: &mut Client,
    resource: &str,
    account: &str,
    writer: &str,
    balance: i64,
    token: FencingToken,
) -> Result<Outcome, zkfence_fences::Error> {
    // Tokens are czxids, below 2^63: they fit a bigint.
    let t = i64::try_from(token.get()).expect("fencing tokens are below 2^63");
    let outcome = fence()
        .write(
            db,
            resource,
            token,
            &[
                (
                    "INSERT INTO account (id, balance, written_by, fence_token) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, \
         written_by = EXCLUDED.written_by, fence_token = EXCLUDED.fence_token",
                    &[&account, &balance, &writer, &t],
                ),
                (
                    "INSERT INTO account_writes (account, written_by, balance, fence_token) \
         VALUES ($1, $2, $3, $4)",
                    &[&account, &writer, &balance, &t],
                ),
            ],
        )
        .await?;
    Ok(match outcome {
        zkfence_fences::Outcome::Written(_) => Outcome::Written,
        zkfence_fences::Outcome::Refused(stale) => Outcome::Stale {
            newest: stale.newest.get() as i64,
        },
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match arg("--role").as_deref() {
        Some(role @ ("a" | "b")) => writer(role).await,
        Some(other) => Err(format!("unknown --role {other:?} (a or b)").into()),
        None => orchestrate().await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fenced_postgres: {e}");
            ExitCode::from(2)
        }
    }
}

// ---- the writers: separate processes ----

/// Writer A (`--role a`) or B (`--role b`): takes the lock, then works on the database. If
/// the database cannot be used, the lock is released before the error is reported.
async fn writer(role: &str) -> Res<ExitCode> {
    let name = role.to_uppercase();
    let connect = arg("--connect").ok_or("--connect HOSTS is required with --role")?;
    let url = arg("--database-url").ok_or("--database-url URL is required with --role")?;
    let account = arg("--account").ok_or("--account NAME is required with --role")?;
    let lock = lock_path(&account);

    let session = Session::connect(
        &connect,
        SessionOptions::new().session_timeout(SESSION_TIMEOUT),
    )
    .await?;
    let lease = session.lock(&lock).with_id(&name).acquire().await?;
    println!("{name}: holds the lock with token {}", lease.token());

    let db = match connect_db(&url).await {
        Ok(db) => db,
        Err(e) => {
            // Nothing was written: let the next holder have the lock now, not after our
            // session times out.
            let released = lease.release().await;
            let note = match released {
                Ok(()) => "the lock was released".to_string(),
                Err(r) => format!("releasing the lock failed too: {r}"),
            };
            return Err(format!("{name}: {e}; {note}").into());
        }
    };
    if role == "a" {
        writer_a(db, lease, &lock, &account).await
    } else {
        writer_b(db, lease, &lock, &account).await
    }
}

async fn writer_a(mut db: Client, lease: Lease, lock: &str, account: &str) -> Res<ExitCode> {
    let token = lease.token();
    match write_through_fence(&mut db, lock, account, "A", 100, token).await? {
        Outcome::Written => println!("A: wrote balance=100 with token {token}: accepted"),
        Outcome::Stale { newest } => {
            return Err(format!("A's first write was refused (newest token {newest})").into())
        }
    }
    // A checks its lease before the next write, as a careful holder does...
    let state = lease.state();
    if let LeaseState::Lost(reason) = state {
        return Err(format!("A lost its lease too early: {reason}").into());
    }
    println!("A: lease held ({state:?}); about to write balance=120");
    // ...and the process freezes between the check and the write. (Here: A waits for a line
    // on stdin while the driver SIGSTOPs it, so the pause falls exactly there.)
    let mut line = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await?;
    // Resumed, A carries on with the write it had started, with the token it holds.
    match write_through_fence(&mut db, lock, account, "A", 120, token).await? {
        Outcome::Stale { newest } => {
            println!(
                "A: write of balance=120 with token {token} refused: stale token \
                 (the database has accepted token {newest}); A stops"
            );
            println!("A: (its lease, meanwhile: {:?})", lease.state());
            // The session has expired: there is nothing left to release.
            drop(lease);
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Written => {
            println!("A: write of balance=120 with token {token} accepted: fencing failed");
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn writer_b(mut db: Client, lease: Lease, lock: &str, account: &str) -> Res<ExitCode> {
    let token = lease.token();
    match write_through_fence(&mut db, lock, account, "B", 80, token).await? {
        Outcome::Written => println!("B: wrote balance=80 with token {token}: accepted"),
        Outcome::Stale { newest } => {
            return Err(format!("B's write was refused (newest token {newest})").into())
        }
    }
    lease.release().await?;
    println!("B: released the lock");
    Ok(ExitCode::SUCCESS)
}

// ---- the driver ----

/// Starts (or uses) the ensemble and the database, plays the scenario with A and B as child
/// processes, and checks the database afterwards.
async fn orchestrate() -> Res<ExitCode> {
    let (connect, _zk) = common::ensemble().await?;
    let (url, _pg) = match arg("--database-url") {
        Some(url) => (url, None),
        None => {
            eprintln!("no --database-url: starting a local PostgreSQL");
            let pg = Postgres::launch().await?;
            (pg.url(), Some(pg))
        }
    };
    let db = connect_db(&url).await?;
    db.batch_execute(SCHEMA).await?;
    let account = arg("--account").unwrap_or_else(|| {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("acct-{}", &id[..12])
    });
    let lock = lock_path(&account);
    // The resource's owner creates its fence once; writers only write through it.
    fence().create(&db, &lock).await?;
    println!("account {account}, lock {lock}");

    let mut a = spawn_writer("a", &connect, &url, &account)?;
    let mut a_out = BufReader::new(a.stdout.take().expect("piped")).lines();
    relay_until(&mut a_out, "A: lease held").await?;

    // Freeze A for longer than its session timeout: B's grant has to wait for that.
    signal(&a, libc::SIGSTOP)?;
    println!("-- A freezes (SIGSTOP), past its {SESSION_TIMEOUT:?} session timeout");

    let mut b = spawn_writer("b", &connect, &url, &account)?;
    let mut b_out = BufReader::new(b.stdout.take().expect("piped")).lines();
    relay_until(&mut b_out, "B: released").await?;
    let b_status = tokio::time::timeout(STEP_TIMEOUT, b.wait()).await??;
    if !b_status.success() {
        return Err(format!("writer B failed ({b_status})").into());
    }

    signal(&a, libc::SIGCONT)?;
    println!("-- A resumes (SIGCONT)");
    let mut a_in = a.stdin.take().expect("piped");
    a_in.write_all(b"go\n").await?;
    drop(a_in);
    let a_said = relay_until(&mut a_out, "A stops").await;
    if a_said.is_ok() {
        while let Ok(Some(line)) = a_out.next_line().await {
            println!("{line}");
        }
    }
    let a_status = tokio::time::timeout(STEP_TIMEOUT, a.wait()).await??;
    a_said?;
    if !a_status.success() {
        return Err(format!("writer A failed ({a_status})").into());
    }

    // What the database holds is the proof.
    let row = db
        .query_one(
            "SELECT balance, written_by, fence_token FROM account WHERE id = $1",
            &[&account],
        )
        .await?;
    let (balance, written_by, row_token): (i64, String, i64) = (row.get(0), row.get(1), row.get(2));
    let writes: Vec<(String, i64, i64)> = db
        .query(
            "SELECT written_by, balance, fence_token FROM account_writes \
             WHERE account = $1 ORDER BY seq",
            &[&account],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    println!("final row: balance={balance} written_by={written_by} fence_token={row_token}");
    println!("accepted writes: {writes:?}");
    let held = match writes.as_slice() {
        [(wa, 100, ta), (wb, 80, tb)] => {
            wa == "A"
                && wb == "B"
                && tb > ta
                && balance == 80
                && written_by == "B"
                && row_token == *tb
        }
        _ => false,
    };
    if !held {
        return Err("fencing did not hold: see the rows above".into());
    }
    println!("the promise held: A's stale write was refused and B's write stands");
    Ok(ExitCode::SUCCESS)
}

fn spawn_writer(role: &str, connect: &str, url: &str, account: &str) -> Res<Child> {
    let me = std::env::current_exe()?;
    let child = Command::new(me)
        .args(["--role", role, "--connect", connect, "--database-url", url])
        .args(["--account", account])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    Ok(child)
}

/// Prints the child's lines until one contains `marker`; fails if it ends first.
async fn relay_until(lines: &mut Lines<BufReader<ChildStdout>>, marker: &str) -> Res<()> {
    let wait = async {
        while let Some(line) = lines.next_line().await? {
            println!("{line}");
            if line.contains(marker) {
                return Ok(());
            }
        }
        Err(format!("the writer ended before saying {marker:?}").into())
    };
    tokio::time::timeout(STEP_TIMEOUT, wait)
        .await
        .map_err(|_| format!("no {marker:?} from the writer in {STEP_TIMEOUT:?}"))?
}

fn signal(child: &Child, sig: libc::c_int) -> Res<()> {
    let pid = child.id().ok_or("the writer has exited")?;
    // SAFETY: kill(2) has no memory-safety preconditions; the child is not reaped yet, so
    // the pid is still its own.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}
