//! `zkfence demo`: every promise of zkfence, played against a real 3-node ensemble and
//! checked, as a timeline.
//!
//! 1. Contention: one holder at a time, first come first served, growing tokens.
//! 2. Fencing: a store that checks tokens refuses a paused holder's late write.
//! 3. Liveness: a crashed holder's lock frees itself after the session timeout.
//! 4. Fault tolerance: the ZooKeeper leader dies while locks are held; service goes on.
//! 5. Leader election: the leader's connection dies and another candidate takes over.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use zkfence::{Fence, FencingToken, LeaseState, Session, SessionOptions, StaleToken};
use zkfence_testcontainers::Ensemble;

use crate::exit::{self, Failure};

/// Short sessions keep the demo short: a dead holder's lock frees in about 2 s.
const SESSION: Duration = Duration::from_secs(2);
/// No step may take longer than this; a step that hangs fails instead.
const STEP_LIMIT: Duration = Duration::from_secs(30);

/// What a step proved, or what went wrong.
type Step = Result<String, String>;

/// Prints events with the time since the demo started.
#[derive(Clone, Copy)]
struct Timeline {
    start: Instant,
}

impl Timeline {
    fn say(&self, event: impl AsRef<str>) {
        println!(
            "  {:>7.3}s  {}",
            self.start.elapsed().as_secs_f64(),
            event.as_ref()
        );
    }
}

pub async fn run() -> Result<u8, Failure> {
    let tl = Timeline {
        start: Instant::now(),
    };
    println!("zkfence demo: every promise, played against a real 3-node ZooKeeper ensemble\n");
    tl.say("starting 3 ZooKeeper servers (tickTime 200 ms)");
    let zk = Ensemble::builder()
        .nodes(3)
        .tick_time(Duration::from_millis(200))
        .start()
        .await?;
    tl.say(format!("ensemble serving at {}", zk.connect_string()));

    type StepFn = for<'a> fn(
        &'a Ensemble,
        Timeline,
    ) -> std::pin::Pin<Box<dyn Future<Output = Step> + Send + 'a>>;
    let steps: [(&str, StepFn); 5] = [
        (
            "Contention: one holder at a time, first come first served, growing fencing tokens",
            |zk, tl| Box::pin(contention(zk, tl)),
        ),
        (
            "Fencing: the store refuses a paused holder's late write",
            |zk, tl| Box::pin(fencing(zk, tl)),
        ),
        (
            "Liveness: a crashed holder's lock frees itself after the session timeout",
            |zk, tl| Box::pin(crashed_holder(zk, tl)),
        ),
        (
            "Fault tolerance: the ZooKeeper leader dies while a lock is held",
            |zk, tl| Box::pin(server_failover(zk, tl)),
        ),
        (
            "Leader election: the leader's connection dies, another candidate takes over",
            |zk, tl| Box::pin(election_failover(zk, tl)),
        ),
    ];
    let mut held = 0;
    for (i, (title, step)) in steps.iter().enumerate() {
        println!("\n[{}/{}] {title}", i + 1, steps.len());
        let result = match tokio::time::timeout(STEP_LIMIT, step(&zk, tl)).await {
            Ok(result) => result,
            Err(_) => Err(format!("the step did not finish within {STEP_LIMIT:?}")),
        };
        match result {
            Ok(proof) => {
                held += 1;
                println!("  ✔ {proof}");
            }
            Err(why) => println!("  ✘ {why}"),
        }
    }
    let total = tl.start.elapsed().as_secs_f64();
    println!();
    if held == steps.len() {
        println!("✔ all {held} promises held ({total:.1} s)");
        Ok(exit::OK)
    } else {
        println!(
            "✘ {} of {} promises did not hold ({total:.1} s)",
            steps.len() - held,
            steps.len()
        );
        Ok(exit::ERROR)
    }
}

// ---- 1. Contention ----

async fn contention(zk: &Ensemble, tl: Timeline) -> Step {
    let path = "/demo/contention";
    let names = ["alice", "bob", "carol", "dave"];
    let holders = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));
    let observer = connect(&zk.connect_string(), SESSION).await?;
    let mut tasks = Vec::new();
    for (i, name) in names.into_iter().enumerate() {
        let session = connect(&zk.connect_string(), SESSION).await?;
        let (holders, most_at_once, granted) =
            (holders.clone(), most_at_once.clone(), grants.clone());
        tl.say(format!("{name:<6} asks for {path}"));
        tasks.push(tokio::spawn(async move {
            let lease = session
                .lock(path)
                .with_id(name)
                .acquire()
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
            most_at_once.fetch_max(now, Ordering::SeqCst);
            tl.say(format!("{name:<6} granted, token {}", lease.token()));
            granted.lock().unwrap().push((name, lease.token()));
            tokio::time::sleep(Duration::from_millis(250)).await; // the protected work
            holders.fetch_sub(1, Ordering::SeqCst);
            tl.say(format!("{name:<6} releases"));
            lease.release().await.map_err(|e| format!("{name}: {e}"))?;
            Ok::<_, String>(())
        }));
        // Let each client's node reach the queue before the next one asks: then the arrival
        // order is known, and FIFO can be checked against it.
        let lock = observer.lock(path);
        until(
            Duration::from_secs(5),
            &format!("{name} to join the queue"),
            || async {
                lock.contenders()
                    .await
                    .map(|c| c.iter().any(|c| c.owner.id.as_deref() == Some(name)))
                    .unwrap_or(false)
                    || grants.lock().unwrap().len() > i
            },
        )
        .await?;
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let grants = grants.lock().unwrap().clone();
    let order: Vec<&str> = grants.iter().map(|(n, _)| *n).collect();
    let tokens: Vec<u64> = grants.iter().map(|(_, t)| t.get()).collect();
    if order != names {
        return Err(format!(
            "granted in the order {order:?}, not in arrival order {names:?}"
        ));
    }
    if !tokens.windows(2).all(|w| w[0] < w[1]) {
        return Err(format!("tokens did not strictly grow: {tokens:?}"));
    }
    let most = most_at_once.load(Ordering::SeqCst);
    if most != 1 {
        return Err(format!("{most} clients held the lock at once"));
    }
    Ok(format!("granted in arrival order ({}), tokens {tokens:?} strictly growing, never two holders at once", order.join(" → ")))
}

// ---- 2. Fencing ----

/// A storage service that enforces fencing tokens: the lock service only hands them out.
#[derive(Default)]
struct Store {
    fence: Fence,
    value: Mutex<String>,
}

impl Store {
    fn write(&self, token: FencingToken, value: &str) -> Result<(), StaleToken> {
        self.fence.admit(token)?;
        *self.value.lock().unwrap() = value.to_string();
        Ok(())
    }
}

async fn fencing(zk: &Ensemble, tl: Timeline) -> Step {
    let path = "/demo/fenced";
    let store = Store::default();
    // Client A reaches the ensemble through a proxy: blackholing it freezes A's world the way
    // a long GC pause or a stalled VM would.
    let proxy = zk.proxy().await.map_err(|e| e.to_string())?;
    let a = connect(&proxy.connect_string(), SESSION).await?;
    let b = connect(&zk.connect_string(), SESSION).await?;

    let lease_a = a
        .lock(path)
        .with_id("A")
        .acquire()
        .await
        .map_err(|e| e.to_string())?;
    let token_a = lease_a.token();
    tl.say(format!("A holds {path} with token {token_a}"));
    store
        .write(token_a, "balance=100 (by A)")
        .map_err(|e| e.to_string())?;
    tl.say(format!(
        "store accepts A's write \"balance=100\" (token {token_a})"
    ));

    let lock_b = b.lock(path).with_id("B");
    let b_wait = tokio::spawn(async move {
        let lease = lock_b.acquire().await;
        (Instant::now(), lease)
    });
    let lock_view = b.lock(path);
    until(Duration::from_secs(5), "B to queue behind A", || async {
        lock_view
            .contenders()
            .await
            .map(|c| c.len() == 2)
            .unwrap_or(false)
    })
    .await?;
    tl.say("B waits behind A");

    proxy.blackhole();
    let paused = Instant::now();
    tl.say("A freezes (a long GC pause: the harness blackholes its connection)");
    let reason = lease_a.lost().await;
    let a_lost = Instant::now();
    tl.say(format!(
        "A's lease clock runs out after {:.2}s: lease lost ({reason}); a holder that checks would stop here",
        (a_lost - paused).as_secs_f64()
    ));
    let (b_granted, lease_b) = b_wait.await.map_err(|e| e.to_string())?;
    let lease_b = lease_b.map_err(|e| e.to_string())?;
    let token_b = lease_b.token();
    tl.say(format!(
        "the ensemble expires A's session; B granted with token {token_b}, {:.2}s after A froze",
        (b_granted - paused).as_secs_f64()
    ));
    store
        .write(token_b, "balance=80 (by B)")
        .map_err(|e| e.to_string())?;
    tl.say(format!(
        "store accepts B's write \"balance=80\" (token {token_b})"
    ));

    proxy.heal();
    tl.say(format!("A wakes up, still believing it holds the lock, and writes \"balance=120\" with token {token_a}"));
    let late = store.write(token_a, "balance=120 (by A, late)");
    match &late {
        Err(stale) => tl.say(format!("store rejects it: {stale}")),
        Ok(()) => tl.say("store ACCEPTED the stale write"),
    }
    let final_value = store.value.lock().unwrap().clone();
    lease_b.release().await.map_err(|e| e.to_string())?;

    if a_lost >= b_granted {
        return Err("B was granted before A learnt it had lost the lock".into());
    }
    if token_b <= token_a {
        return Err(format!(
            "B's token {token_b} is not larger than A's {token_a}"
        ));
    }
    if late.is_ok() || final_value != "balance=80 (by B)" {
        return Err(format!(
            "the stale write got through: the store holds {final_value:?}"
        ));
    }
    Ok(format!(
        "A knew it had lost the lock {:.2}s before B got it; B's token {token_b} > A's {token_a}; A's late write was rejected \
         (the store is an in-process stand-in that applies zkfence's Fence rule, so the refusal itself is by construction: \
         what the step shows is that the tokens ZooKeeper handed out let a store tell the late write apart; \
         `cargo run --example fenced_postgres` plays the same against a real PostgreSQL)",
        (b_granted - a_lost).as_secs_f64()
    ))
}

// ---- 3. A crashed holder ----

async fn crashed_holder(zk: &Ensemble, tl: Timeline) -> Step {
    let path = "/demo/crash";
    let exe = std::env::current_exe().map_err(|e| format!("cannot find our own binary: {e}"))?;
    // A real `zkfence exec` holds the lock; its own process group lets one SIGKILL take it
    // and its CMD down together, like a machine dying.
    let mut holder = tokio::process::Command::new(exe)
        .args([
            "--connect",
            &zk.connect_string(),
            "--session-timeout",
            "2s",
            "exec",
            "--id",
            "doomed-worker",
            path,
        ])
        .args(["--", "sleep", "60"])
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start `zkfence exec`: {e}"))?;
    let pid = holder.id().ok_or("the holder exited at once")? as i32;
    tl.say(format!(
        "`zkfence exec --id doomed-worker {path} -- sleep 60` starts (pid {pid})"
    ));

    let waiter = connect(&zk.connect_string(), SESSION).await?;
    let view = waiter.lock(path);
    until(
        Duration::from_secs(10),
        "the doomed worker to hold the lock",
        || async {
            view.contenders()
                .await
                .ok()
                .and_then(|c| c.first().and_then(|h| h.owner.id.clone()))
                .as_deref()
                == Some("doomed-worker")
        },
    )
    .await?;
    let doomed_token = view.contenders().await.map_err(|e| e.to_string())?[0].token;
    tl.say(format!(
        "doomed-worker holds {path} with token {doomed_token}"
    ));

    let lock = waiter.lock(path).with_id("survivor");
    let wait = tokio::spawn(async move {
        let lease = lock.acquire().await;
        (Instant::now(), lease)
    });
    until(Duration::from_secs(5), "the survivor to queue", || async {
        view.contenders()
            .await
            .map(|c| c.len() == 2)
            .unwrap_or(false)
    })
    .await?;
    tl.say("survivor waits behind it");

    // SAFETY: kill(2) on the process group we created; no memory is involved.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    let killed = Instant::now();
    let _ = holder.wait().await;
    tl.say("the doomed worker's machine dies (SIGKILL: no release, no goodbye)");
    let (granted, lease) = wait.await.map_err(|e| e.to_string())?;
    let lease = lease.map_err(|e| e.to_string())?;
    let after = (granted - killed).as_secs_f64();
    tl.say(format!(
        "survivor granted with token {} after {after:.2}s (session timeout {:.1}s)",
        lease.token(),
        SESSION.as_secs_f64()
    ));
    let token = lease.token();
    lease.release().await.map_err(|e| e.to_string())?;

    // The server expires a silent session one timeout after the last packet it heard, and
    // the holder pinged at most a third of a timeout before dying.
    let earliest = SESSION.as_secs_f64() * 0.5;
    let latest = SESSION.as_secs_f64() + 2.0;
    if !(earliest..=latest).contains(&after) {
        return Err(format!(
            "the lock freed {after:.2}s after the crash, expected about {:.1}s",
            SESSION.as_secs_f64()
        ));
    }
    if token <= doomed_token {
        return Err(format!(
            "the survivor's token {token} is not larger than the dead holder's {doomed_token}"
        ));
    }
    Ok(format!("the dead holder's lock freed itself {after:.2}s after the crash (session timeout 2 s); no deadlock"))
}

// ---- 4. The ZooKeeper leader dies ----

async fn server_failover(zk: &Ensemble, tl: Timeline) -> Step {
    let path = "/demo/failover";
    // Longer sessions here: a client of the dead server needs a moment to move to another
    // one, and the servers a moment to elect a new leader.
    let long = Duration::from_secs(4);
    let holder = connect(&zk.connect_string(), long).await?;
    let waiter = connect(&zk.connect_string(), long).await?;
    let lease = holder
        .lock(path)
        .with_id("holder")
        .acquire()
        .await
        .map_err(|e| e.to_string())?;
    tl.say(format!("holder holds {path} with token {}", lease.token()));
    let lock = waiter.lock(path).with_id("waiter");
    let wait = tokio::spawn(async move { lock.acquire().await });
    let view = holder.lock(path);
    until(Duration::from_secs(5), "the waiter to queue", || async {
        view.contenders()
            .await
            .map(|c| c.len() == 2)
            .unwrap_or(false)
    })
    .await?;
    // The waiter's place, to check that the failover did not cost it (nor grant it early).
    let waiter_node = view
        .contenders()
        .await
        .map_err(|e| e.to_string())?
        .get(1)
        .map(|c| c.node.clone())
        .ok_or("the waiter left the queue")?;
    tl.say("waiter waits behind it");

    let leader = zk
        .wait_for_leader(Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    zk.kill(leader);
    let killed = Instant::now();
    tl.say(format!(
        "ZooKeeper server {leader}, the ensemble's leader, is killed (SIGKILL)"
    ));
    let new_leader = zk
        .wait_for_leader(Duration::from_secs(15))
        .await
        .map_err(|e| e.to_string())?;
    tl.say(format!(
        "the two survivors elect server {new_leader} after {:.2}s",
        killed.elapsed().as_secs_f64()
    ));

    let renewed = lease.renew().await;
    let state = lease.state();
    match &renewed {
        Ok(_) => tl.say(format!(
            "holder renews through the new quorum: lease {state:?}, token {}",
            lease.token()
        )),
        Err(e) => tl.say(format!("holder could not renew: {e}")),
    }
    let held_through = renewed.is_ok() && state == LeaseState::Held;
    // Read after the renew's sync went through the new leader: the queue as it now is.
    let queue = view.contenders().await.map_err(|e| e.to_string())?;
    let still_queued = !wait.is_finished()
        && queue.len() == 2
        && queue[0].node == lease.path()
        && queue[1].node == waiter_node
        && queue[1].session_id == waiter.id();
    if still_queued {
        tl.say("the waiter is still queued behind the holder, same node, not granted");
    } else {
        tl.say(format!(
            "the waiter's place changed: granted early: {}, queue {:?}",
            wait.is_finished(),
            queue.iter().map(|c| c.node.as_str()).collect::<Vec<_>>()
        ));
    }
    let token = lease.token();
    lease.release().await.map_err(|e| e.to_string())?;
    tl.say("holder releases");
    let next = tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .map_err(|_| "the waiter was not granted within 10s of the release".to_string())?
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    tl.say(format!("waiter granted with token {}", next.token()));
    let next_token = next.token();
    next.release().await.map_err(|e| e.to_string())?;

    zk.start(leader).await.map_err(|e| e.to_string())?;
    tl.say(format!(
        "server {leader} restarted and rejoined the ensemble"
    ));
    if !held_through {
        return Err("the holder lost its lease during the failover".into());
    }
    if !still_queued {
        return Err(
            "the waiter did not stay queued (same node, not granted) through the failover".into(),
        );
    }
    if next_token <= token {
        return Err(format!(
            "the waiter's token {next_token} is not larger than {token}"
        ));
    }
    Ok(format!(
        "the holder kept its lease and the waiter its place while 1 of 3 servers (the leader) died; the lock passed on as usual (token {token} → {next_token})"
    ))
}

// ---- 5. Leader election ----

async fn election_failover(zk: &Ensemble, tl: Timeline) -> Step {
    let path = "/demo/election";
    let proxy = zk.proxy().await.map_err(|e| e.to_string())?;
    let first = connect(&proxy.connect_string(), SESSION).await?;
    let second = connect(&zk.connect_string(), SESSION).await?;
    let third = connect(&zk.connect_string(), SESSION).await?;

    let watcher = connect(&zk.connect_string(), SESSION).await?;
    let mut changes = watcher.election(path).observe();
    let observed = Arc::new(Mutex::new(Vec::new()));
    let seen = observed.clone();
    let observer = tokio::spawn(async move {
        while let Some(Ok(change)) = changes.next().await {
            if let Some(leader) = change {
                let id = leader.id.unwrap_or_default();
                tl.say(format!(
                    "observer: the leader is now {id} (token {})",
                    leader.token
                ));
                seen.lock().unwrap().push(id);
            }
        }
    });

    let leading = first
        .election(path)
        .campaign("scheduler-1")
        .await
        .map_err(|e| e.to_string())?;
    let token_1 = leading.token();
    tl.say(format!(
        "scheduler-1 campaigns and leads with token {token_1}"
    ));
    let campaign = |session: Session, id: &'static str| {
        tokio::spawn(async move {
            let leadership = session.election(path).campaign(id).await;
            (Instant::now(), leadership)
        })
    };
    until(
        Duration::from_secs(5),
        "the observer to see scheduler-1 lead",
        || async { observed.lock().unwrap().last().map(String::as_str) == Some("scheduler-1") },
    )
    .await?;
    let view = watcher.lock(path);
    let mut waiting = Vec::new();
    for (session, id, n) in [(second, "scheduler-2", 2), (third, "scheduler-3", 3)] {
        waiting.push(campaign(session, id));
        until(
            Duration::from_secs(5),
            &format!("{id} to campaign"),
            || async {
                view.contenders()
                    .await
                    .map(|c| c.len() == n)
                    .unwrap_or(false)
            },
        )
        .await?;
        tl.say(format!("{id} campaigns and waits"));
    }

    proxy.blackhole();
    let cut = Instant::now();
    tl.say("scheduler-1's connection dies (blackholed)");
    let reason = leading.lost().await;
    let lost = Instant::now();
    tl.say(format!(
        "scheduler-1 learns it lost leadership after {:.2}s ({reason}) and stops scheduling",
        (lost - cut).as_secs_f64()
    ));
    let mut waiting = waiting.into_iter();
    let (elected, leadership) = waiting
        .next()
        .expect("two campaigns")
        .await
        .map_err(|e| e.to_string())?;
    let leadership = leadership.map_err(|e| e.to_string())?;
    let token_2 = leadership.token();
    tl.say(format!(
        "scheduler-2 takes over with token {token_2}, {:.2}s after the cut",
        (elected - cut).as_secs_f64()
    ));
    until(
        Duration::from_secs(5),
        "the observer to see scheduler-2 lead",
        || async { observed.lock().unwrap().last().map(String::as_str) == Some("scheduler-2") },
    )
    .await?;
    let third_waits = !waiting.as_slice()[0].is_finished();

    observer.abort();
    for task in waiting {
        task.abort();
    }
    drop(leading);
    leadership.resign().await.map_err(|e| e.to_string())?;
    proxy.heal();

    if lost >= elected {
        return Err("scheduler-2 was elected before scheduler-1 knew it had lost".into());
    }
    if token_2 <= token_1 {
        return Err(format!(
            "the new leader's token {token_2} is not larger than {token_1}"
        ));
    }
    if !third_waits {
        return Err("scheduler-3 was elected too: two leaders".into());
    }
    Ok(format!(
        "one leader at a time: scheduler-1 stood down {:.2}s before scheduler-2 took over with a larger token ({token_1} → {token_2})",
        (elected - lost).as_secs_f64()
    ))
}

// ---- helpers ----

async fn connect(connect: &str, timeout: Duration) -> Result<Session, String> {
    Session::connect(connect, SessionOptions::new().session_timeout(timeout))
        .await
        .map_err(|e| e.to_string())
}

/// Polls `condition` every 20 ms until it holds, or fails after `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut condition: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !condition().await {
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
