//! Injecting one planned fault: taking its place in the server budget, choosing its victim,
//! doing it, waiting, healing it, and recording each step.

use std::collections::HashSet;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::super::faults::{FaultKind, Planned, Reservation, Rng};
use super::super::history::Recorder;
use super::super::{Event, LOCK_PATH};
use super::Campaign;
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
                tokio::time::sleep(p.lasts).await;
                match p.kind {
                    FaultKind::PauseServer => self.zk.resume(server),
                    FaultKind::IsolateServer => self.zk.heal_peers(server),
                    _ => {
                        if !restart_or_recover(&self.zk, server, id, &self.recorder).await {
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

    /// A contender for `kind`, marked busy: the holder (always for a stall, half of the time
    /// otherwise) or any other. Waits up to a session timeout for a holder to stall.
    async fn pick_client(&self, kind: FaultKind, rng: &mut Rng) -> Option<usize> {
        let deadline = Instant::now() + self.config.session_timeout;
        let want_holder = kind == FaultKind::StallHolder || rng.percent(50);
        loop {
            if let Some(c) = self.try_pick_client(want_holder, rng) {
                return Some(c);
            }
            if kind != FaultKind::StallHolder {
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
            .map(Option::is_some)
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

    /// Deletes one waiter's node (never the holder's: the holder would learn of it only
    /// after the next waiter was granted, which no lock can prevent). Returns its path.
    async fn delete_a_waiter(&self, rng: &mut Rng) -> Option<String> {
        let client = self.admin.client();
        let step = self.config.session_timeout;
        let mut children = tokio::time::timeout(step, client.list_children(LOCK_PATH))
            .await
            .ok()?
            .ok()?;
        children.sort_by_key(|name| sequence_of(name));
        if children.len() < 2 {
            return None;
        }
        let victim = &children[1 + rng.below(children.len() as u64 - 1) as usize];
        let path = format!("{LOCK_PATH}/{victim}");
        // Only while the holder's node still exists: else the victim may hold the lock by now.
        let mut multi = client.new_multi_writer();
        multi
            .add_check_version(&format!("{LOCK_PATH}/{}", children[0]), -1)
            .ok()?;
        multi.add_delete(&path, None).ok()?;
        tokio::time::timeout(step, multi.commit())
            .await
            .ok()?
            .ok()?;
        Some(path)
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

/// Starts killed server `server` again (for fault `fault`). If it does not start (in
/// ZooKeeper 3.8.0 a server killed while writing the leader's snapshot may refuse its own
/// data: "The current epoch, a, is older than the last zxid", ZOOKEEPER-2354), records
/// [`Event::RestartFailed`], wipes its data as an operator would (its `myid` kept;
/// [`Event::ServerWiped`]) and starts it again, to resync from the leader. Returns whether
/// it serves again (then the caller records the heal); if not, both failures are recorded.
async fn restart_or_recover(
    zk: &Ensemble,
    server: usize,
    fault: usize,
    recorder: &Recorder,
) -> bool {
    let Err(e) = zk.start(server).await else {
        return true;
    };
    tracing::error!(server, %e, "chaos: a killed server did not start again; wiping its data");
    recorder.record(Event::RestartFailed {
        fault,
        server,
        error: e.to_string(),
    });
    zk.kill(server);
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
    match zk.start(server).await {
        Ok(()) => {
            tracing::info!(server, "chaos: a wiped server serves again");
            true
        }
        Err(e) => {
            tracing::error!(server, %e, "chaos: a wiped server did not start either");
            recorder.record(Event::RestartFailed {
                fault,
                server,
                error: format!("after wiping its data: {e}"),
            });
            false
        }
    }
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
        let serves = restart_or_recover(&zk, follower, 7, &recorder).await;
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
