//! What zkfence is compared with: the protocol floor done with raw `zookeeper-client` calls,
//! `zookeeper-client`'s own `Client::lock` (the "peer"), and Python Kazoo's `Lock` through
//! `benches/kazoo_driver.py`. Each scenario drives these the way it drives zkfence.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use zookeeper_client as zkc;

use crate::server::Bench;
use crate::stats::Samples;
use crate::{progress, Result, SESSION_TIMEOUT};

// ---------------------------------------------------------------------------------------------
// The raw floor
// ---------------------------------------------------------------------------------------------

pub fn any_acls() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all())
}

pub fn ephemeral_sequential() -> zkc::CreateOptions<'static> {
    zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all())
}

/// Creates `dir` and its parents if missing (setup, never measured).
pub async fn mkdir(client: &zkc::Client, dir: &str) -> Result<()> {
    match client.mkdir(dir, &any_acls()).await {
        Ok(()) | Err(zkc::Error::NodeExists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One uncontended cycle of the protocol floor: create ephemeral-sequential (a Curator-style
/// name, as ours), list the directory to see who is first, delete.
pub async fn floor_cycle(client: &zkc::Client, dir: &str) -> Result<()> {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, sequence) = client.create(&prefix, b"", &ephemeral_sequential()).await?;
    client.list_children(dir).await?;
    client.delete(&format!("{prefix}{sequence}"), None).await?;
    Ok(())
}

/// [`floor_cycle`] as zkfence sends it: the getChildren right behind the create, before the
/// create's answer (one round trip to the grant instead of two), the listing's answer awaited
/// first (the create's comes before it, so it wakes the task once), then the delete.
pub async fn pipelined_floor_cycle(client: &zkc::Client, dir: &str) -> Result<()> {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    // zookeeper-client sends a request when it is called.
    let node = client.create(&prefix, b"", &ephemeral_sequential());
    let listing = client.list_children(dir);
    listing.await?;
    let (_, sequence) = node.await?;
    client.delete(&format!("{prefix}{sequence}"), None).await?;
    Ok(())
}

/// One cycle of the protocol floor on a lock whose directory is gone (a fresh lock): the
/// directory's create (a container, as ours), the node's create and the listing sent together
/// (one round trip, two transactions), then the delete. Known missing by construction: the
/// caller waited for the server to remove it.
pub async fn fresh_floor_cycle(client: &zkc::Client, dir: &str) -> Result<()> {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let container = zkc::CreateMode::Container.with_acls(zkc::Acls::anyone_all());
    // zookeeper-client sends a request when it is called, so these three go out together.
    let directory = client.create(dir, b"", &container);
    let node = client.create(&prefix, b"", &ephemeral_sequential());
    let listing = client.list_children(dir);
    let (directory, node, listing) = futures::join!(directory, node, listing);
    match directory {
        Ok(_) | Err(zkc::Error::NodeExists) => {}
        Err(e) => return Err(e.into()),
    }
    let (_, sequence) = node?;
    listing?;
    client.delete(&format!("{prefix}{sequence}"), None).await?;
    Ok(())
}

/// [`floor_cycle`] on a container directory the server may remove in the instant it is empty
/// between two cycles: a create that finds it gone makes it again, as a lock must.
pub async fn floor_cycle_regrowing(client: &zkc::Client, dir: &str) -> Result<()> {
    match floor_cycle(client, dir).await {
        Err(e) if matches!(e.downcast_ref::<zkc::Error>(), Some(zkc::Error::NoNode)) => {
            fresh_floor_cycle(client, dir).await
        }
        other => other,
    }
}

/// The protocol done with raw `zookeeper-client` calls and nothing else: create, list, watch
/// the predecessor, hold without listing again when the predecessor was the head of our
/// listing. Run in the same closed loop as ours, it is the floor under the same load: what is
/// left between it and ours is the library's own cost. Returns our node's path.
pub async fn recipe_acquire(client: &zkc::Client, dir: &str) -> Result<String> {
    let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, sequence) = client.create(&prefix, b"", &ephemeral_sequential()).await?;
    let (me, node) = (sequence.into_i64(), format!("{prefix}{sequence}"));
    loop {
        let mut queue: Vec<(i64, String)> = client
            .list_children(dir)
            .await?
            .into_iter()
            .filter_map(|name| Some((name.get(name.len().checked_sub(10)?..)?.parse().ok()?, name)))
            .collect();
        queue.sort_unstable();
        let index = queue
            .iter()
            .position(|(s, _)| *s == me)
            .ok_or("our node vanished")?;
        if index == 0 {
            return Ok(node);
        }
        let (stat, watcher) = client
            .check_and_watch_stat(&format!("{dir}/{}", queue[index - 1].1))
            .await?;
        if stat.is_some()
            && watcher.changed().await.event_type == zkc::EventType::NodeDeleted
            && index == 1
        {
            return Ok(node);
        }
    }
}

/// The handoff's latency floor: session A deletes a node that session B watches; the time
/// from the delete call until B's `NodeDeleted` fires (one quorum write plus one
/// notification). The second samples add the getChildren a waiter deeper than second in line
/// must send before it knows it holds the lock. With `reenqueue`, A also creates a new
/// queue node right behind its delete, as a releaser in the closed loop does when it queues
/// again: the second samples then show what that write does to the getChildren.
pub async fn notify_floor(
    a: &zkc::Client,
    b: &zkc::Client,
    dir: &str,
    n: usize,
    reenqueue: bool,
) -> Result<(Samples, Samples)> {
    let persistent = any_acls();
    let (mut notified, mut listed) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let start = Instant::now();
    for _ in 0..n {
        let path = format!("{dir}/{}", uuid::Uuid::new_v4().simple());
        a.create(&path, b"", &persistent).await?;
        let (stat, watcher) = b.check_and_watch_stat(&path).await?;
        if stat.is_none() {
            return Err(format!("{path} vanished before the delete").into());
        }
        let prefix = format!("{dir}/_c_{}-lock-", uuid::Uuid::new_v4());
        let options = ephemeral_sequential();
        let t0 = Instant::now();
        // Requests are sent when `delete`/`create` are called, not when polled.
        let delete = a.delete(&path, None);
        let again = reenqueue.then(|| a.create(&prefix, b"", &options));
        let event = watcher.changed().await;
        let t1 = Instant::now();
        b.list_children(dir).await?;
        let t2 = Instant::now();
        delete.await?;
        if let Some(create) = again {
            let (_, sequence) = create.await?;
            a.delete(&format!("{prefix}{sequence}"), None).await?;
        }
        if event.event_type != zkc::EventType::NodeDeleted {
            return Err(format!("expected NodeDeleted on {path}, got {event:?}").into());
        }
        notified.push(t1 - t0);
        listed.push(t2 - t0);
    }
    let elapsed = start.elapsed();
    Ok((
        Samples {
            latencies: notified,
            ops: n,
            elapsed,
            ..Default::default()
        },
        Samples {
            latencies: listed,
            ops: n,
            elapsed,
            ..Default::default()
        },
    ))
}

/// The write limit: create ephemeral-sequential + delete with a short name, pipelined by all
/// tasks on one connection.
pub async fn raw_cycle(client: &zkc::Client, dir: &str) -> Result<()> {
    let prefix = format!("{dir}/n-");
    let (_, sequence) = client.create(&prefix, b"", &ephemeral_sequential()).await?;
    client.delete(&format!("{prefix}{sequence}"), None).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The peer: zookeeper-client's Client::lock
// ---------------------------------------------------------------------------------------------

fn peer_options() -> Result<zkc::LockOptions<'static>> {
    Ok(zkc::LockOptions::new(zkc::Acls::anyone_all())
        .with_ancestor_options(zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all()))?)
}

/// One acquire with `Client::lock` and the curator prefix.
pub async fn peer_acquire<'c>(client: &'c zkc::Client, dir: &str) -> Result<zkc::LockClient<'c>> {
    Ok(client
        .lock(
            zkc::LockPrefix::new_curator(dir, "lock-")?,
            b"",
            peer_options()?,
        )
        .await?)
}

/// Releases like `Lease::release`: deletes the node and waits for the answer. (Dropping a
/// `LockClient` only spawns the delete, so a release could not be awaited; the guard is
/// forgotten, which leaks only its path string.)
pub async fn peer_release(client: &zkc::Client, lock: zkc::LockClient<'_>) -> Result<()> {
    let path = lock.lock_path().to_owned();
    std::mem::forget(lock);
    client.delete(&path, None).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Python Kazoo drivers: a script that reads one JSON command a line and answers one JSON line
// ---------------------------------------------------------------------------------------------

/// A Kazoo driver process (benches/kazoo_driver.py, benches/kazoo_partitioner.py), the one
/// way both Kazoo arms start, talk to and stop their script.
struct KazooDriver {
    /// What error messages call it ("Kazoo driver").
    name: &'static str,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl KazooDriver {
    /// Starts `script` (under `benches/`) with `args` on the first Python that imports
    /// `kazoo`; `None`, said as `skipping`, if there is none.
    async fn start(
        name: &'static str,
        script: &str,
        args: &[String],
        skipping: &str,
    ) -> Result<Option<KazooDriver>> {
        let python = ["python3", "/usr/bin/python3"].into_iter().find(|py| {
            std::process::Command::new(py)
                .args(["-c", "import kazoo"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        let Some(python) = python else {
            progress(format!("python3 cannot import kazoo: {skipping}"));
            return Ok(None);
        };
        let mut child = tokio::process::Command::new(python)
            .arg(format!("{}/benches/{script}", env!("CARGO_MANIFEST_DIR")))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("driver stdin")?;
        let lines = BufReader::new(child.stdout.take().ok_or("driver stdout")?).lines();
        Ok(Some(KazooDriver {
            name,
            child,
            stdin,
            lines,
        }))
    }

    async fn read(&mut self) -> Result<Value> {
        let line = self
            .lines
            .next_line()
            .await?
            .ok_or_else(|| format!("the {} exited", self.name))?;
        let value: Value = serde_json::from_str(&line)?;
        if let Some(error) = value.get("error") {
            return Err(format!("{}: {error}", self.name).into());
        }
        Ok(value)
    }

    async fn call(&mut self, command: Value) -> Result<Value> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        self.read().await
    }

    async fn quit(mut self) {
        let _ = self.stdin.write_all(b"{\"cmd\": \"quit\"}\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Python Kazoo, through benches/kazoo_driver.py
// ---------------------------------------------------------------------------------------------

pub struct Kazoo {
    driver: KazooDriver,
    pub pid: u32,
    /// The session of the uncontended cycles.
    pub single: i64,
    /// The sessions of the handoff.
    pub contended: Vec<i64>,
}

impl Kazoo {
    /// Starts the driver with the first Python that imports `kazoo`; `None` if there is none.
    pub async fn start(bench: &Bench) -> Result<Option<Kazoo>> {
        let args = [
            bench.connect.clone(),
            bench.plan.contenders.to_string(),
            SESSION_TIMEOUT.as_secs().to_string(),
        ];
        let skipping = "skipping Kazoo (Debian: apt-get install python3-kazoo)";
        let Some(mut driver) =
            KazooDriver::start("Kazoo driver", "kazoo_driver.py", &args, skipping).await?
        else {
            return Ok(None);
        };
        let pid = driver.child.id().ok_or("the Kazoo driver exited")?;
        let hello = driver.read().await?;
        let single = hello["single"].as_i64().ok_or("driver: no session id")?;
        let contended = hello["contended"]
            .as_array()
            .ok_or("driver: no session ids")?
            .iter()
            .filter_map(Value::as_i64)
            .collect();
        progress(format!(
            "Kazoo {} on Python {} found",
            hello["kazoo"], hello["python"]
        ));
        Ok(Some(Kazoo {
            driver,
            pid,
            single,
            contended,
        }))
    }

    async fn call(&mut self, command: Value) -> Result<Value> {
        self.driver.call(command).await
    }

    /// One read on each of the driver's sessions (see `server::touch`).
    pub async fn touch(&mut self) -> Result<()> {
        self.call(json!({"cmd": "touch"})).await.map(drop)
    }

    pub async fn uncontended(&mut self, path: &str, cycles: usize) -> Result<Samples> {
        let answer = self
            .call(json!({"cmd": "uncontended", "path": path, "cycles": cycles}))
            .await?;
        samples_from(&answer)
    }

    pub async fn contended(&mut self, path: &str, handoffs: usize) -> Result<Samples> {
        let answer = self
            .call(json!({"cmd": "contended", "path": path, "handoffs": handoffs}))
            .await?;
        samples_from(&answer)
    }

    pub async fn quit(self) {
        self.driver.quit().await
    }
}

fn samples_from(answer: &Value) -> Result<Samples> {
    let latencies = answer["latencies_s"]
        .as_array()
        .ok_or("driver: no latencies")?
        .iter()
        .filter_map(Value::as_f64)
        .map(Duration::from_secs_f64)
        .collect();
    Ok(Samples {
        latencies,
        ops: answer["ops"].as_u64().ok_or("driver: no ops")? as usize,
        elapsed: Duration::from_secs_f64(answer["elapsed_s"].as_f64().ok_or("driver: no elapsed")?),
        ..Default::default()
    })
}

// ---------------------------------------------------------------------------------------------
// Python Kazoo's SetPartitioner, through benches/kazoo_partitioner.py
// ---------------------------------------------------------------------------------------------

/// Members of Kazoo partition sets, each a `SetPartitioner` on a session of its own, run by
/// the driver process.
pub struct KazooPartitioner {
    driver: KazooDriver,
}

impl KazooPartitioner {
    /// Starts the driver with the first Python that imports `kazoo`; `None` if there is none.
    pub async fn start(bench: &Bench) -> Result<Option<KazooPartitioner>> {
        let args = [bench.connect.clone(), SESSION_TIMEOUT.as_secs().to_string()];
        let driver = KazooDriver::start(
            "Kazoo partitioner driver",
            "kazoo_partitioner.py",
            &args,
            "skipping Kazoo's SetPartitioner",
        )
        .await?;
        Ok(driver.map(|driver| KazooPartitioner { driver }))
    }

    async fn call(&mut self, command: Value) -> Result<Value> {
        self.driver.call(command).await
    }

    /// Joins member `id` to the set at `path` over `range(items)`, with Kazoo's
    /// `time_boundary` of `settle`; returns its session id.
    pub async fn join(
        &mut self,
        path: &str,
        items: usize,
        id: &str,
        settle: Duration,
    ) -> Result<i64> {
        let answer = self
            .call(
                json!({"cmd": "join", "path": path, "items": items, "id": id,
                         "settle_s": settle.as_secs_f64()}),
            )
            .await?;
        answer["session"]
            .as_i64()
            .ok_or_else(|| "driver: no session id".into())
    }

    /// Member `id` leaves (`finish()`: releases its items and leaves the party).
    pub async fn leave(&mut self, id: &str) -> Result<()> {
        self.call(json!({"cmd": "leave", "id": id})).await.map(drop)
    }

    /// One read on each member's session (see `server::touch`).
    pub async fn touch(&mut self) -> Result<()> {
        self.call(json!({"cmd": "touch"})).await.map(drop)
    }

    /// Every member leaves and closes its session.
    pub async fn stop(&mut self) -> Result<()> {
        self.call(json!({"cmd": "stop"})).await.map(drop)
    }

    pub async fn quit(self) {
        self.driver.quit().await
    }
}
