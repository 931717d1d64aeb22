//! Injecting one planned fault: taking its place in the server budget, choosing its victim,
//! doing it, waiting, healing it, and recording each step.

use std::collections::HashSet;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::super::faults::{FaultKind, Planned, Reservation, Rng};
use super::super::history::Recorder;
use super::super::{Event, Recipe};
use super::{Campaign, HeldNode};
use crate::Ensemble;

impl Campaign {
    /// Starts one planned fault, waits its time, heals it.
    pub(super) async fn inject(&self, id: usize, p: Planned) {
        let mut rng = Rng::new(p.pick);
        // A server fault takes its slot in the budget before anything else (see
        // `ServerBudget`): two faults starting together cannot both pass a full budget.
        let mut slot = None;
        if p.kind.hurts_a_server() {
            let deadline = Instant::now() + self.config.session_timeout * 4;
            slot = loop {
                if let Some(r) = self.servers.try_reserve() {
                    break Some(r);
                }
                if Instant::now() > deadline {
                    return self.skip(id, p.kind, "other servers were hurt meanwhile");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
        }
        let started = |client: Option<usize>, server: Option<usize>| {
            tracing::info!(fault = id, kind = %p.kind, ?client, ?server, lasts = ?p.lasts, "chaos: fault");
            self.recorder.record(Event::FaultStarted {
                fault: id,
                kind: p.kind,
                client,
                server,
            })
        };
        let healed = || {
            self.recorder.record(Event::FaultHealed {
                fault: id,
                kind: p.kind,
            })
        };
        match p.kind {
            FaultKind::KillLeader
            | FaultKind::KillFollower
            | FaultKind::PauseServer
            | FaultKind::IsolateServer => {
                let mut slot = slot.expect("server faults reserve a slot");
                let Some(server) = self.pick_server(p.kind, &mut rng, &mut slot).await else {
                    return self.skip(id, p.kind, "no server fits (no leader?)");
                };
                started(None, Some(server));
                let zk = self.zk.clone();
                let kind = p.kind;
                let _ = tokio::task::spawn_blocking(move || match kind {
                    FaultKind::PauseServer => zk.pause(server),
                    FaultKind::IsolateServer => zk.isolate(server),
                    _ => zk.kill(server),
                })
                .await;
                // A killed server's client port is held meanwhile (see `hold_port`).
                let held = match p.kind {
                    FaultKind::KillLeader | FaultKind::KillFollower => hold_port(&self.zk, server),
                    _ => None,
                };
                tokio::time::sleep(p.lasts).await;
                match p.kind {
                    FaultKind::PauseServer => self.zk.resume(server),
                    FaultKind::IsolateServer => self.zk.heal_peers(server),
                    _ => {
                        let recorder = &self.recorder;
                        if !restart_or_recover(&self.zk, server, id, recorder, held).await {
                            // Never healed: its slot stays taken, so that no other server
                            // fault can take the quorum away too.
                            std::mem::forget(slot);
                            return;
                        }
                    }
                }
                healed();
                drop(slot);
            }
            FaultKind::ShrinkTimeout => {
                let mut slot = slot.expect("server faults reserve a slot");
                let c = &self.config;
                let shrunk = (c.session_timeout / 4).max(c.tick_time * 2);
                started(None, None);
                if !self.rolling_restart(shrunk, id, &mut slot).await {
                    // A server that would not start keeps its slot (see the kill faults).
                    std::mem::forget(slot);
                    return;
                }
                // No server is down while the shorter timeout holds: other server faults may
                // come meanwhile (a server cut off from its peers while its sessions run on
                // the shorter timeout is issue 43's case).
                drop(slot);
                tokio::time::sleep(p.lasts).await;
                // The restore waits for room, before any new server fault (`queue_heal`), as
                // long as other server faults can last; a server that never started again
                // keeps its slot for good, and then the servers keep the shorter timeout (the
                // fault is never healed, as that server's).
                let deadline = Instant::now() + self.config.session_timeout * 10;
                let turn = self.servers.queue_heal();
                let mut slot = loop {
                    if let Some(r) = turn.try_reserve() {
                        break r;
                    }
                    if Instant::now() > deadline {
                        tracing::error!(
                            fault = id,
                            "chaos: no room to restore the servers' timeout"
                        );
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                drop(turn);
                if !self
                    .rolling_restart(self.max_session_timeout(), id, &mut slot)
                    .await
                {
                    std::mem::forget(slot);
                    return;
                }
                healed();
                drop(slot);
            }
            FaultKind::DeleteHolder => {
                let Some(client) = self.pick_client(p.kind, &mut rng).await else {
                    return self.skip(id, p.kind, "no contender fits (no holder)");
                };
                let held = self.holding.lock().unwrap()[client].clone();
                let Some(victim) = held.get(rng.below(held.len().max(1) as u64) as usize) else {
                    self.busy_clients.lock().unwrap().remove(&client);
                    return self.skip(id, p.kind, "the holder let go meanwhile");
                };
                started(Some(client), None);
                match self.delete_node(&victim.node).await {
                    Ok(()) => {
                        tracing::info!(client, node = %victim.node, "chaos: deleted a holder's node");
                        self.recorder.record(Event::HolderNodeDeleted {
                            fault: id,
                            client,
                            path: victim.path.clone(),
                            node: victim.node.clone(),
                        });
                    }
                    Err(e) => {
                        tracing::info!(client, node = %victim.node, %e, "chaos: a holder's node was not deleted")
                    }
                }
                healed();
                self.busy_clients.lock().unwrap().remove(&client);
            }
            FaultKind::DeleteWaiter => {
                // Recorded first, like every fault: the deletion may be seen at once.
                started(None, None);
                match self.delete_a_waiter(&mut rng).await {
                    Some(node) => tracing::info!(%node, "chaos: deleted a waiter's node"),
                    None => tracing::info!("chaos: no waiter's node to delete"),
                }
                healed();
            }
            _ => {
                let Some(client) = self.pick_client(p.kind, &mut rng).await else {
                    return self.skip(id, p.kind, "no contender fits (no holder)");
                };
                started(Some(client), None);
                let proxy = &self.proxies[client];
                match p.kind {
                    FaultKind::BlackholeClient => {
                        proxy.blackhole();
                        tokio::time::sleep(p.lasts).await;
                        proxy.heal();
                    }
                    FaultKind::CutClient => proxy.cut(),
                    FaultKind::StallHolder => {
                        self.signal(client, libc::SIGSTOP);
                        tokio::time::sleep(p.lasts).await;
                        self.signal(client, libc::SIGCONT);
                    }
                    FaultKind::KillClient => {
                        self.signal(client, libc::SIGKILL);
                        self.wait_exited(client).await;
                        tokio::time::sleep(p.lasts).await;
                        if let Err(e) = self.spawn_contender(client) {
                            tracing::error!(client, %e, "chaos: cannot start a contender again");
                        }
                    }
                    FaultKind::ExpireSession => self.command(client, "expire").await,
                    _ => unreachable!("server kinds are handled above"),
                }
                healed();
                self.busy_clients.lock().unwrap().remove(&client);
            }
        }
    }

    fn skip(&self, id: usize, kind: FaultKind, why: &str) {
        tracing::info!(fault = id, %kind, why, "chaos: fault skipped");
        self.recorder.record(Event::FaultSkipped {
            fault: id,
            kind,
            why: why.into(),
        });
    }

    /// A server for `kind`, claimed in `slot`: the leader, a follower, or any (half of the
    /// time the leader, for an isolation).
    async fn pick_server(
        &self,
        kind: FaultKind,
        rng: &mut Rng,
        slot: &mut Reservation<'_>,
    ) -> Option<usize> {
        let leader = self.zk.leader().await;
        slot.claim(|busy| self.choose_server(kind, leader, busy, rng))
    }

    fn choose_server(
        &self,
        kind: FaultKind,
        leader: Option<usize>,
        busy: &HashSet<usize>,
        rng: &mut Rng,
    ) -> Option<usize> {
        let free: Vec<usize> = (0..self.config.nodes)
            .filter(|i| !busy.contains(i) && self.zk.is_running(*i))
            .collect();
        let followers: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&i| Some(i) != leader)
            .collect();
        let chosen = match kind {
            FaultKind::KillLeader => leader.filter(|l| free.contains(l)),
            FaultKind::KillFollower => pick(&followers, rng),
            FaultKind::IsolateServer if rng.percent(50) => leader.filter(|l| free.contains(l)),
            _ => pick(&free, rng),
        }?;
        Some(chosen)
    }

    /// A contender for `kind`, marked busy: a holder (always for a stall or a holder's
    /// delete, half of the time otherwise) or any other. Waits up to a session timeout for a
    /// holder for those that need one.
    async fn pick_client(&self, kind: FaultKind, rng: &mut Rng) -> Option<usize> {
        let deadline = Instant::now() + self.config.session_timeout;
        let needs_holder = matches!(kind, FaultKind::StallHolder | FaultKind::DeleteHolder);
        let want_holder = needs_holder || rng.percent(50);
        loop {
            if let Some(c) = self.try_pick_client(want_holder, rng) {
                return Some(c);
            }
            if !needs_holder {
                // No free holder: anyone else will do.
                return self.try_pick_client(false, rng);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn try_pick_client(&self, want_holder: bool, rng: &mut Rng) -> Option<usize> {
        let holding: Vec<bool> = self
            .holding
            .lock()
            .unwrap()
            .iter()
            .map(|held: &Vec<HeldNode>| !held.is_empty())
            .collect();
        let alive: Vec<bool> = self
            .slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.as_ref().is_some_and(|s| !*s.exited.borrow()))
            .collect();
        let mut busy = self.busy_clients.lock().unwrap();
        let free: Vec<usize> = (0..self.config.clients)
            .filter(|&c| !busy.contains(&c) && alive[c] && (holding[c] || !want_holder))
            .collect();
        let chosen = pick(&free, rng)?;
        busy.insert(chosen);
        Some(chosen)
    }

    /// Deletes one waiter's node, in a queue of one of the recipes (never a holder's: see
    /// [`waiters`]). Returns its path.
    async fn delete_a_waiter(&self, rng: &mut Rng) -> Option<String> {
        let client = self.admin.client();
        let step = self.config.session_timeout;
        // A partition set's party is not a queue of waiters: every member is admitted.
        let mut queues: Vec<String> = (self.config.recipes.iter())
            .flat_map(|r| r.queues())
            .filter(|q| !q.ends_with("/party"))
            .collect();
        // Every queue in a random order, the first with a waiter gives the victim.
        for i in (1..queues.len()).rev() {
            queues.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for queue in queues {
            let Ok(Ok(mut children)) =
                tokio::time::timeout(step, client.list_children(&queue)).await
            else {
                continue;
            };
            children.sort_by_key(|name| sequence_of(name));
            let candidates = waiters(&queue, &children, self.config.permits);
            let Some((victim, guards)) = candidates
                .get(rng.below(candidates.len().max(1) as u64) as usize)
                .cloned()
            else {
                continue;
            };
            let path = format!("{queue}/{}", children[victim]);
            // Only while the nodes that keep it waiting exist: else it may hold by now.
            let mut multi = client.new_multi_writer();
            for g in guards {
                multi
                    .add_check_version(&format!("{queue}/{}", children[g]), -1)
                    .ok()?;
            }
            multi.add_delete(&path, None).ok()?;
            return match tokio::time::timeout(step, multi.commit()).await {
                Ok(Ok(_)) => Some(path),
                _ => None,
            };
        }
        None
    }

    /// Deletes `node` (a holder's), as an operator would: `Ok` once the ensemble answered.
    async fn delete_node(&self, node: &str) -> Result<(), String> {
        let step = self.config.session_timeout;
        match tokio::time::timeout(step, self.admin.client().delete(node, None)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {step:?}")),
        }
    }

    /// The servers' `maxSessionTimeout` as the campaign started them.
    pub(super) fn max_session_timeout(&self) -> Duration {
        let c = &self.config;
        c.session_timeout.max(c.tick_time * 20)
    }

    /// Restarts every server, one at a time, with `max` as its `maxSessionTimeout` (each
    /// claimed in `slot` while it is down, so that no other fault hurts it meanwhile; a
    /// server another fault hurts is waited for, up to a session timeout, then left as it
    /// is). Returns whether every restarted server serves again.
    async fn rolling_restart(
        &self,
        max: Duration,
        fault: usize,
        slot: &mut Reservation<'_>,
    ) -> bool {
        for server in 0..self.config.nodes {
            let deadline = Instant::now() + self.config.session_timeout;
            while slot.claim_next(server).is_none() {
                if Instant::now() > deadline {
                    tracing::info!(
                        server,
                        "chaos: a server stays as it is (another fault hurts it)"
                    );
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if slot.server() != Some(server) {
                continue;
            }
            // The minimum as the campaign started the servers: ZooKeeper's default, 2 ticks.
            let min = self.config.tick_time * 2;
            if let Err(e) = self.zk.set_session_timeout_bounds(server, min, max) {
                tracing::error!(server, %e, "chaos: cannot set maxSessionTimeout");
                continue;
            }
            tracing::info!(
                server,
                ?max,
                "chaos: restarting a server with a new maxSessionTimeout"
            );
            let zk = self.zk.clone();
            let _ = tokio::task::spawn_blocking(move || zk.stop(server)).await;
            let held = hold_port(&self.zk, server);
            if !restart_or_recover(&self.zk, server, fault, &self.recorder, held).await {
                return false;
            }
        }
        self.record_session_timeouts(fault).await;
        true
    }

    /// Records the session timeouts the servers negotiated with every connected session
    /// (their `cons`), as evidence of what a `shrink-timeout` did: once every contender's
    /// session is back (they reconnect after the last restart), or after a session timeout.
    async fn record_session_timeouts(&self, fault: usize) {
        let deadline = Instant::now() + self.config.session_timeout;
        let timeouts_ms = loop {
            let mut timeouts_ms = Vec::new();
            for server in 0..self.config.nodes {
                if let Ok(connections) = self.zk.connections(server).await {
                    timeouts_ms.extend(
                        (connections.iter())
                            .filter_map(|c| c.session_timeout)
                            .map(|t| t.as_millis() as u64),
                    );
                }
            }
            // The contenders' sessions and the campaign's own.
            if timeouts_ms.len() > self.config.clients || Instant::now() > deadline {
                break timeouts_ms;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let mut timeouts_ms = timeouts_ms;
        timeouts_ms.sort_unstable();
        tracing::info!(
            fault,
            ?timeouts_ms,
            "chaos: the sessions' negotiated timeouts"
        );
        self.recorder
            .record(Event::SessionTimeouts { fault, timeouts_ms });
    }

    fn signal(&self, client: usize, sig: i32) {
        if let Some(slot) = &self.slots.lock().unwrap()[client] {
            if !*slot.exited.borrow() {
                // SAFETY: kill(2) on our own child, which is not reaped while `exited` is
                // false (the pid cannot have been reused).
                unsafe { libc::kill(slot.pid as i32, sig) };
            }
        }
    }

    pub(super) async fn wait_exited(&self, client: usize) {
        let exited = self.slots.lock().unwrap()[client]
            .as_ref()
            .map(|s| s.exited.clone());
        if let Some(mut exited) = exited {
            let _ = exited.wait_for(|&e| e).await;
        }
    }

    async fn command(&self, client: usize, line: &str) {
        let stdin = self.slots.lock().unwrap()[client]
            .as_mut()
            .and_then(|s| s.stdin.take());
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(format!("{line}\n").as_bytes()).await;
            if let Some(slot) = self.slots.lock().unwrap()[client].as_mut() {
                slot.stdin = Some(stdin);
            }
        }
    }
}

/// Binds the client port of stopped server `server`, so that no other process on this
/// machine takes it while the server is down: every harness here picks random free ports,
/// and a 30-minute run once met another engineer's ensemble on a port its killed server had
/// freed; its clients, through their proxies, then joined that ensemble. The listener is
/// dropped just before the server starts (both set `SO_REUSEADDR`); the server's first
/// second of startup stays exposed, and [`restart_or_recover`] checks it got its port.
fn hold_port(zk: &Ensemble, server: usize) -> Option<std::net::TcpListener> {
    let addr = zk.client_addr(server);
    match std::net::TcpListener::bind(addr) {
        Ok(listener) => Some(listener),
        Err(e) => {
            tracing::warn!(server, %addr, %e, "chaos: cannot hold a stopped server's port");
            None
        }
    }
}

/// Whether the server answering on `server`'s client port is ours: its `conf` names our
/// node's data directory.
async fn is_ours(zk: &Ensemble, server: usize) -> Result<(), String> {
    let ours = zk.data_dir(server);
    let ours = ours.to_string_lossy();
    match zk.four_letter(server, "conf").await {
        Ok(conf) => {
            let theirs = conf
                .lines()
                .find_map(|l| l.strip_prefix("dataDir="))
                .unwrap_or("none");
            if theirs.starts_with(ours.as_ref()) {
                Ok(())
            } else {
                Err(format!(
                    "its client port {} answers as another ZooKeeper server (dataDir={theirs}, \
                     ours {ours}): another process took the port while it was down",
                    zk.client_addr(server)
                ))
            }
        }
        Err(e) => Err(format!("conf on its client port: {e}")),
    }
}

/// Starts stopped server `server` again (for fault `fault`), first letting go of its port
/// (`held`, see [`hold_port`]). If it does not start (in ZooKeeper 3.8.0 a server killed
/// while writing the leader's snapshot may refuse its own data: "The current epoch, a, is
/// older than the last zxid", ZOOKEEPER-2354), records [`Event::RestartFailed`], wipes its
/// data as an operator would (its `myid` kept; [`Event::ServerWiped`]) and starts it again,
/// to resync from the leader. Returns whether it serves again (then the caller records the
/// heal); if not, both failures are recorded. A server whose port another process took
/// meanwhile is [`Event::ServerReplaced`]: not ours any more, never healed.
async fn restart_or_recover(
    zk: &Ensemble,
    server: usize,
    fault: usize,
    recorder: &Recorder,
    held: Option<std::net::TcpListener>,
) -> bool {
    drop(held);
    let started = match zk.start(server).await {
        Ok(()) => Ok(()),
        Err(e) => {
            tracing::error!(server, %e, "chaos: a killed server did not start again; wiping its data");
            recorder.record(Event::RestartFailed {
                fault,
                server,
                error: e.to_string(),
            });
            zk.kill(server);
            let held = hold_port(zk, server);
            if let Err(e) = zk.wipe_data(server) {
                tracing::error!(server, %e, "chaos: cannot wipe a server's data");
                recorder.record(Event::RestartFailed {
                    fault,
                    server,
                    error: format!("cannot wipe its data: {e}"),
                });
                return false;
            }
            recorder.record(Event::ServerWiped { fault, server });
            drop(held);
            zk.start(server).await.map_err(|e| {
                tracing::error!(server, %e, "chaos: a wiped server did not start either");
                recorder.record(Event::RestartFailed {
                    fault,
                    server,
                    error: format!("after wiping its data: {e}"),
                });
            })
        }
    };
    if started.is_err() {
        return false;
    }
    match is_ours(zk, server).await {
        Ok(()) => true,
        Err(error) => {
            tracing::error!(server, %error, "chaos: a restarted server is not ours");
            recorder.record(Event::ServerReplaced {
                fault,
                server,
                error,
            });
            false
        }
    }
}

/// The nodes of `queue` (sorted by sequence) that wait, each with the nodes whose existence
/// keeps it waiting: in a semaphore's permits, every node after the first `permits` (kept
/// waiting by those); in a read/write lock, a writer after the first node (kept waiting by
/// it) and a reader after a writer (kept waiting by that writer); in any other queue, every
/// node after the first.
fn waiters(queue: &str, children: &[String], permits: usize) -> Vec<(usize, Vec<usize>)> {
    if queue.ends_with("/leases") {
        return (permits..children.len())
            .map(|i| (i, (0..permits).collect()))
            .collect();
    }
    if queue == Recipe::Rwlock.path() {
        let first_writer = children.iter().position(|c| !is_reader(c));
        return (1..children.len())
            .filter_map(|i| match (is_reader(&children[i]), first_writer) {
                (false, _) => Some((i, vec![0])),
                (true, Some(w)) if w < i => Some((i, vec![w])),
                (true, _) => None,
            })
            .collect();
    }
    (1..children.len()).map(|i| (i, vec![0])).collect()
}

/// Whether a read/write lock's node is a reader's (Curator's name, which zkfence writes).
fn is_reader(name: &str) -> bool {
    name.contains("__READ__")
}

fn pick(from: &[usize], rng: &mut Rng) -> Option<usize> {
    (!from.is_empty()).then(|| from[rng.below(from.len() as u64) as usize])
}

/// The queue sequence at the end of a node's name (`..-lock-0000000042`); unknown names
/// sort last.
fn sequence_of(name: &str) -> i64 {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[name.len() - digits..].parse().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zkfence::zookeeper_client::{Acls, CreateMode};
    use zkfence::{Session, SessionOptions};

    #[test]
    fn only_nodes_that_wait_are_chosen_with_what_keeps_them_waiting() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let lock = names(&["_c_a-lock-01", "_c_b-lock-02", "_c_c-lock-03"]);
        assert_eq!(
            waiters("/zkfence-chaos/lock", &lock, 2),
            vec![(1, vec![0]), (2, vec![0])]
        );
        // Readers ahead of the first writer hold; a writer waits for the first node, a reader
        // behind a writer for that writer.
        let rw = names(&[
            "_c_a-__READ__01",
            "_c_b-__READ__02",
            "_c_c-__WRIT__03",
            "_c_d-__READ__04",
        ]);
        assert_eq!(
            waiters(Recipe::Rwlock.path(), &rw, 2),
            vec![(2, vec![0]), (3, vec![2])]
        );
        // The first `permits` of a semaphore's leases hold; the rest wait for all of them.
        let leases = names(&["_c_a-lease-01", "_c_b-lease-02", "_c_c-lease-03"]);
        assert_eq!(
            waiters("/zkfence-chaos/semaphore/leases", &leases, 2),
            vec![(2, vec![0, 1])]
        );
        assert!(waiters("/zkfence-chaos/semaphore/leases", &leases[..2], 2).is_empty());
    }

    /// ZOOKEEPER-2354 as the 30-minute campaign met it, reproduced in seconds: a follower
    /// whose `currentEpoch` is older than its last zxid refuses to start; the campaign
    /// records that, wipes the follower's data (keeping its `myid`) and it resyncs.
    #[tokio::test]
    async fn a_follower_refusing_its_epoch_is_recorded_wiped_and_healed() {
        let zk = Ensemble::builder().nodes(3).start().await.unwrap();
        let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
        let follower = (leader + 1) % 3;
        let step = Duration::from_secs(10);
        let session = Session::connect(&zk.connect_string(), SessionOptions::new())
            .await
            .unwrap();
        let acl = CreateMode::Persistent.with_acls(Acls::anyone_all());
        tokio::time::timeout(step, session.client().create("/kept", b"v1", &acl))
            .await
            .unwrap()
            .unwrap();
        session.close().await;
        // Once the follower serves /kept, its own log holds that epoch-1 zxid.
        let direct = zk.node_connect_string(follower);
        let s = Session::connect(&direct, SessionOptions::new())
            .await
            .unwrap();
        s.client().sync("/kept").await.unwrap();
        let (data, _) = s.client().get_data("/kept").await.unwrap();
        assert_eq!(data, b"v1");
        s.close().await;

        zk.kill(follower);
        let epoch = zk.data_dir(follower).join("version-2/currentEpoch");
        std::fs::write(&epoch, "0").unwrap();

        let recorder = Recorder::new();
        let serves = restart_or_recover(&zk, follower, 7, &recorder, None).await;
        let events: Vec<Event> = recorder.snapshot().into_iter().map(|r| r.event).collect();
        assert!(serves, "not recovered: {events:#?}");
        assert_eq!(events.len(), 2, "{events:#?}");
        match &events[0] {
            Event::RestartFailed {
                fault: 7,
                server,
                error,
            } => {
                assert_eq!(*server, follower);
                assert!(error.contains("older than the last zxid"), "{error}");
            }
            other => panic!("not a restart failure: {other:?}"),
        }
        assert_eq!(
            events[1],
            Event::ServerWiped {
                fault: 7,
                server: follower
            }
        );
        assert_eq!(
            is_ours(&zk, follower).await,
            Ok(()),
            "our own, by its dataDir"
        );
        let myid = std::fs::read_to_string(zk.data_dir(follower).join("myid")).unwrap();
        assert_eq!(myid.trim(), (follower + 1).to_string());
        // Resynced from the leader: it serves the data it had wiped.
        let s = Session::connect(&direct, SessionOptions::new())
            .await
            .unwrap();
        let (data, _) = tokio::time::timeout(step, s.client().get_data("/kept"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(data, b"v1");
        s.close().await;
    }
}
