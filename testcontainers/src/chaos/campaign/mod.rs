//! The campaign's driver: starts the ensemble, the register (and PostgreSQL), the
//! contender processes and the fault tasks, then stops everything, checks and writes.
//! Injecting each fault, and choosing its victim, is in `inject.rs`.

mod inject;
mod stores;

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;
use tokio::time::Instant;
use zkfence::zookeeper_client::{self as zk, Acls, CreateMode};
use zkfence::{Session, SessionOptions};

use super::contender::ContenderConfig;
use super::faults::{self, FaultKind, ServerBudget};
use super::history::Recorder;
use super::recipe::data_node;
use super::register::RegisterServer;
use super::{check, draw, write_jsonl, ChaosConfig, Event, Record, Report};
use crate::{Ensemble, FaultProxy, HarnessError};
use stores::StoreServer;

/// One contender's process, as the campaign drives it.
struct Slot {
    pid: u32,
    stdin: Option<ChildStdin>,
    exited: watch::Receiver<bool>,
}

/// What the campaign shares with its fault tasks.
struct Campaign {
    config: ChaosConfig,
    zk: Arc<Ensemble>,
    proxies: Vec<FaultProxy>,
    admin: Session,
    register: RegisterServer,
    /// With `--sink`: each store's server and the campaign's sink of it.
    stores: Vec<StoreServer>,
    recorder: Recorder,
    slots: Mutex<Vec<Option<Slot>>>,
    /// What each contender holds now, as its events say.
    holding: Arc<Mutex<Vec<Vec<HeldNode>>>>,
    busy_clients: Mutex<HashSet<usize>>,
    /// The servers hurt now: a minority at most, so that a quorum remains.
    servers: ServerBudget,
}

/// Runs a campaign (see the module docs) and returns its report; the violations are in
/// [`Report::violations`], not an error.
///
/// # Cancel safety
/// Not cancel safe: dropped midway, it leaves contender processes behind until their
/// standard input closes (they then stop), and no history is written. The ensemble is
/// removed as always.
///
/// # Notable errors
/// - [`HarnessError::InvalidConfig`] for settings that cannot work (see [`ChaosConfig`]).
/// - The ensemble's errors if it cannot start, and [`HarnessError::Io`] if a contender
///   cannot be started or the output cannot be written.
pub async fn run(config: ChaosConfig) -> Result<Report, HarnessError> {
    config.validate()?;
    std::fs::create_dir_all(&config.out_dir)?;
    let t = config.session_timeout;
    // The stores first: if one cannot start, no ensemble has been started for nothing.
    let stores = stores::start(&config.sinks, &config.fenced_resources()).await?;
    let zk = Ensemble::builder()
        .nodes(config.nodes)
        .tick_time(config.tick_time)
        .max_session_timeout(t.max(config.tick_time * 20))
        .peer_links(config.faults.contains(&FaultKind::IsolateServer))
        .start()
        .await?;
    let recorder = Recorder::new();
    recorder.record(Event::Campaign {
        seed: config.seed,
        duration_ms: config.duration.as_millis() as u64,
        nodes: config.nodes,
        clients: config.clients,
        session_timeout_ms: t.as_millis() as u64,
        tick_time_ms: config.tick_time.as_millis() as u64,
        faults: config.faults.clone(),
        grant_bound_ms: config.grant_bound().as_millis() as u64,
        postgres: false,
        sinks: config.sinks.clone(),
        recipes: config.recipes.clone(),
        permits: config.permits,
    });
    let mut proxies = Vec::with_capacity(config.clients);
    for _ in 0..config.clients {
        proxies.push(zk.proxy().await?);
    }
    let admin = Session::connect(
        &zk.connect_string(),
        SessionOptions::new().session_timeout(config.tick_time * 20),
    )
    .await
    .map_err(|e| HarnessError::InvalidConfig(format!("cannot connect to the ensemble: {e}")))?;
    make_data_nodes(&admin, &config).await?;
    let register = RegisterServer::start(recorder.clone()).await?;
    let campaign = Arc::new(Campaign {
        stores,
        zk: Arc::new(zk),
        proxies,
        admin,
        register,
        recorder: recorder.clone(),
        slots: Mutex::new((0..config.clients).map(|_| None).collect()),
        holding: Arc::new(Mutex::new(vec![Vec::new(); config.clients])),
        busy_clients: Mutex::new(HashSet::new()),
        servers: ServerBudget::new((config.nodes - 1) / 2),
        config,
    });
    for client in 0..campaign.config.clients {
        campaign.spawn_contender(client)?;
    }
    tracing::info!(seed = campaign.config.seed, "chaos campaign started");

    let plan = faults::schedule(
        campaign.config.seed,
        &campaign.config.faults,
        campaign.config.duration,
        t,
    );
    let mut tasks = tokio::task::JoinSet::new();
    for (id, planned) in plan.into_iter().enumerate() {
        let wait = planned.at.saturating_sub(recorder.now());
        tokio::time::sleep(wait).await;
        let c = campaign.clone();
        tasks.spawn(async move { c.inject(id, planned).await });
    }
    while tasks.join_next().await.is_some() {}
    let wait = campaign.config.duration.saturating_sub(recorder.now());
    tokio::time::sleep(wait).await;
    campaign.until_a_grant_after_the_last_heal().await;

    let campaign = Arc::into_inner(campaign).expect("every fault task has ended");
    let report = campaign.finish().await?;
    Ok(report)
}

impl Campaign {
    /// Starts contender `client` (again), with a task that forwards its events and one that
    /// records its end.
    fn spawn_contender(&self, client: usize) -> Result<(), HarnessError> {
        let c = &self.config;
        let contender = ContenderConfig {
            client,
            connect: self.proxies[client].connect_string(),
            direct: self.zk.connect_string(),
            recipes: c.recipes.clone(),
            permits: c.permits,
            register: self.register.addr(),
            session_timeout_ms: c.session_timeout.as_millis() as u64,
            seed: c.seed,
            max_hold_ms: c.max_hold().as_millis() as u64,
            origin_us: self.recorder.origin_us,
            sinks: (self.stores.iter())
                .map(|s| (s.store, s.address.clone()))
                .collect(),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(c.out_dir.join(format!("contender-{client}.log")))?;
        let mut child: Child = Command::new(&c.contender.0)
            .args(&c.contender.1)
            .arg(serde_json::to_string(&contender).expect("configs serialize"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        self.recorder
            .record(Event::ContenderStarted { client, pid });
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        let (exited_tx, exited) = watch::channel(false);
        let (recorder, holding) = (self.recorder.clone(), self.holding.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Record>(&line) {
                    Ok(record) => {
                        note_holding(&holding, &record.event);
                        recorder.push(record);
                    }
                    Err(e) => tracing::warn!(client, %line, %e, "chaos: not an event"),
                }
            }
            // Stdout closed: the process is ending.
            let status = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => format!("unknown: {e}"),
            };
            holding.lock().unwrap()[client].clear();
            recorder.record(Event::ContenderExited { client, status });
            let _ = exited_tx.send(true);
        });
        self.slots.lock().unwrap()[client] = Some(Slot { pid, stdin, exited });
        Ok(())
    }

    /// After the last fault: waits (up to the progress bound) for a grant after the last
    /// heal, so that the progress rule can be decided for it.
    async fn until_a_grant_after_the_last_heal(&self) {
        let last_heal = self
            .recorder
            .snapshot()
            .iter()
            .filter(|r| matches!(r.event, Event::FaultHealed { .. }))
            .map(|r| r.t_us)
            .max()
            .unwrap_or(0);
        let deadline = Instant::now() + self.config.grant_bound() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let granted = self
                .recorder
                .snapshot()
                .iter()
                .any(|r| r.t_us >= last_heal && matches!(r.event, Event::Granted { .. }));
            if granted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The nodes left under the recipes' paths, polled until there are none or a deadline
    /// (two session timeouts and 5 s: a killed contender's session has to expire first);
    /// or, if no listing could be made by then, why not (never counted as nodes left).
    ///
    /// The admin session may have expired during the campaign: its client is asked for on
    /// each pass (after an expiry the old handle belongs to the expired session), and if
    /// the session cannot serve (closed, or still expired after a few tries), a fresh one
    /// is opened.
    async fn nodes_left(&self) -> (Vec<String>, Option<String>) {
        let t = self.config.session_timeout;
        let deadline = Instant::now() + t * 2 + Duration::from_secs(5);
        let mut fresh: Option<Session> = None;
        let mut failures = 0;
        let queues: Vec<String> = self
            .config
            .recipes
            .iter()
            .flat_map(|r| r.queues())
            .collect();
        let result = loop {
            let session = fresh.as_ref().unwrap_or(&self.admin);
            let why = match list_queues(session, &queues, t).await {
                Ok(left) if left.is_empty() || Instant::now() > deadline => break (left, None),
                Ok(_) => None,
                Err(why) => Some(why),
            };
            if let Some(why) = why {
                failures += 1;
                tracing::warn!(%why, failures, "chaos: cannot check for nodes left yet");
                if Instant::now() > deadline {
                    break (
                        Vec::new(),
                        Some(format!("{why} (still after {failures} tries)")),
                    );
                }
                let state = session.state();
                let stuck = state.is_terminal()
                    && (state != zkfence::SessionState::Expired || failures >= 3);
                if stuck {
                    let options = SessionOptions::new().session_timeout(self.config.tick_time * 20);
                    let connect_string = self.zk.connect_string();
                    let connect = Session::connect(&connect_string, options);
                    if let Ok(Ok(s)) = tokio::time::timeout(t, connect).await {
                        if let Some(old) = fresh.replace(s) {
                            old.close().await;
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if let Some(s) = fresh {
            s.close().await;
        }
        result
    }

    /// Stops the contenders, looks for leftovers, stops the ensemble, checks, writes.
    async fn finish(self) -> Result<Report, HarnessError> {
        let t = self.config.session_timeout;
        // End of input: each contender releases what it holds and closes its session.
        let waits: Vec<_> = {
            let mut slots = self.slots.lock().unwrap();
            slots
                .iter_mut()
                .flatten()
                .map(|s| {
                    s.stdin = None;
                    (s.pid, s.exited.clone())
                })
                .collect()
        };
        let mut contenders_running = Vec::new();
        for (pid, mut exited) in waits {
            let ended =
                tokio::time::timeout(t * 2 + Duration::from_secs(5), exited.wait_for(|&e| e));
            if ended.await.is_err() {
                tracing::warn!(pid, "chaos: a contender did not stop; killing it");
                // SAFETY: kill(2) on our own unreaped child.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                let _ = tokio::time::timeout(Duration::from_secs(5), exited.wait_for(|&e| e)).await;
                contenders_running.push(pid);
            }
        }
        // A killed contender's session lingers until it expires: give it that long.
        let (leftover_nodes, nodes_unchecked) = self.nodes_left().await;
        self.admin.close().await;
        let mut server_pids: Vec<u32> = (0..self.config.nodes)
            .filter_map(|i| self.zk.pid(i))
            .collect();
        let resources = self.config.fenced_resources();
        for store in &self.stores {
            self.recorder.record(store.record(&resources).await);
            server_pids.extend(store.pids());
        }
        drop(self.stores);
        drop(self.proxies);
        drop(self.register);
        let zk = Arc::into_inner(self.zk).expect("no fault task holds the ensemble");
        drop(zk);
        let servers_running: Vec<u32> = server_pids.into_iter().filter(|&p| alive(p)).collect();
        self.recorder.record(Event::Finished {
            leftover_nodes,
            servers_running,
            contenders_running,
            nodes_unchecked,
        });

        let history = self.recorder.snapshot();
        let violations = check(&history);
        let history_path = self.config.out_dir.join("history.jsonl");
        let timeline_path = self.config.out_dir.join("timeline.svg");
        write_jsonl(&history_path, &history)?;
        draw(&history, &violations, &timeline_path)?;
        Ok(Report {
            seed: self.config.seed,
            duration: self.config.duration,
            history,
            violations,
            history_path,
            timeline_path,
        })
    }
}

/// The nodes under `queues` (a queue that does not exist has none), or why they could not
/// be listed within `t` each.
async fn list_queues(
    session: &Session,
    queues: &[String],
    t: Duration,
) -> Result<Vec<String>, String> {
    let mut left = Vec::new();
    for queue in queues {
        match tokio::time::timeout(t, session.client().list_children(queue)).await {
            Ok(Ok(children)) => left.extend(children.into_iter().map(|c| format!("{queue}/{c}"))),
            Ok(Err(zk::Error::NoNode)) => {}
            Ok(Err(e)) => return Err(format!("cannot list {queue}: {e}")),
            Err(_) => return Err(format!("listing {queue} took over {t:?}")),
        }
    }
    Ok(left)
}

/// One resource a contender holds, as its events say.
#[derive(Debug, Clone)]
pub(super) struct HeldNode {
    pub(super) path: String,
    pub(super) node: String,
}

/// Keeps `holding` in step with a contender's events.
fn note_holding(holding: &Mutex<Vec<Vec<HeldNode>>>, event: &Event) {
    let mut holding = holding.lock().unwrap();
    match event {
        Event::Granted {
            client, path, node, ..
        } => {
            holding[*client].retain(|h| h.path != *path);
            holding[*client].push(HeldNode {
                path: path.clone(),
                node: node.clone(),
            });
        }
        Event::Lost { client, path, .. }
        | Event::Released { client, path, .. }
        | Event::Dropped { client, path, .. } => holding[*client].retain(|h| h.path != *path),
        _ => {}
    }
}

/// Makes each resource's data node, where its holders' fenced writes into ZooKeeper go
/// (with its missing parents; persistent, so that they are there for every write).
async fn make_data_nodes(admin: &Session, config: &ChaosConfig) -> Result<(), HarnessError> {
    let failed =
        |e: String| HarnessError::InvalidConfig(format!("cannot make the data nodes: {e}"));
    let acl = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let client = admin.client();
    for recipe in &config.recipes {
        for resource in recipe.resources() {
            let node = data_node(&resource);
            let mut path = String::new();
            for part in node.split('/').skip(1) {
                path.push('/');
                path.push_str(part);
                let create = client.create(&path, b"", &acl);
                match tokio::time::timeout(config.session_timeout * 2, create).await {
                    Ok(Ok(_)) | Ok(Err(zk::Error::NodeExists)) => {}
                    Ok(Err(e)) => return Err(failed(format!("{path}: {e}"))),
                    Err(_) => return Err(failed(format!("{path}: no answer"))),
                }
            }
        }
    }
    Ok(())
}

/// Whether process `pid` exists (and is not a zombie we could reap: the ensemble reaps its
/// servers).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}
