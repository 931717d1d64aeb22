//! `--recipe partitions`: a contender's membership of the campaign's partition set, through
//! [`Session::partitions`]: it owns the items the assignment gives it (each item a lock, a
//! resource of its own in the history), writes each owned item at every step, releases an
//! item when asked, and leaves after a while.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use zkfence::{Lease, LeaseState, OwnershipChange, Session};

use super::super::recipe::PARTITION_ITEMS;
use super::super::{Event, Recipe};
use super::held::Part;
use super::stores::{Register, StoreWriter};
use super::{emit, emit_all, now_us, write_resource, Contender, Writes};

/// An item the member owns.
struct Owned {
    lease: Lease,
    /// When the member last saw the item's lease held (it looks every 10 ms).
    seen_held_us: u64,
    /// Whether the lease said it is lost (recorded): the item gets one more (late) write at
    /// the next step, as the step under way would, then it is dropped.
    lost: bool,
}

impl Contender {
    /// One membership: joins (within `3T`), stays one to three session timeouts, and leaves,
    /// releasing what it owns. Meanwhile it records each item it is granted, looks at every
    /// owned lease's state every 10 ms (recording a loss with the last look that saw the item
    /// held), writes every owned item at each step (a random pause up to `T/4`), and releases
    /// an item when the member is asked to. Returns whether the contender was asked to stop.
    pub(super) async fn membership(
        &mut self,
        session: &Session,
        id: &str,
        register: &mut Register,
        sinks: &mut [StoreWriter],
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let client = self.c.client;
        let t = self.t;
        let path = Recipe::Partitions.path();
        // A short settle, so that items move within a membership of a few session timeouts.
        let partitions = session.partitions(path, PARTITION_ITEMS).settle(t / 8);
        let mut member = tokio::select! {
            joined = tokio::time::timeout(t * 3, partitions.join(id)) => match joined {
                Ok(Ok(member)) => member,
                Ok(Err(e)) => {
                    emit(&self.c, Event::AcquireFailed { client, error: e.to_string() });
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return false;
                }
                Err(_) => {
                    emit(&self.c, Event::AcquireTimeout { client });
                    return false;
                }
            },
            _ = stop.changed() => return true,
        };
        let until = Instant::now() + self.rng.between(t, t * 3);
        let how = Writes {
            recipe: Recipe::Partitions,
            read: false,
            fenced_in_zk: self.rng.percent(50),
        };
        let mut owned: BTreeMap<String, Owned> = BTreeMap::new();
        let mut next_step = Instant::now() + self.rng.between(Duration::ZERO, t / 4);
        let stopped = loop {
            self.look_at_leases(&mut owned);
            if *stop.borrow() {
                break true;
            }
            if Instant::now() >= until {
                break false;
            }
            tokio::select! {
                change = member.next() => match change {
                    None => break false,
                    Some(Err(e)) => {
                        emit(&self.c, Event::AcquireFailed { client, error: e.to_string() });
                        break false;
                    }
                    Some(Ok(OwnershipChange::Acquired { lease, .. })) => {
                        let resource = lease.lock_path().to_string();
                        emit(&self.c, Event::Granted {
                            client,
                            token: lease.token().get(),
                            sequence: lease.sequence(),
                            recipe: Recipe::Partitions,
                            path: resource.clone(),
                            read: false,
                            node: lease.path().to_string(),
                            group: Vec::new(),
                            polls: true,
                        });
                        let seen_held_us = now_us(&self.c);
                        owned.insert(resource, Owned { lease, seen_held_us, lost: false });
                    }
                    Some(Ok(OwnershipChange::ReleaseRequested { item, .. })) => {
                        let resource = format!("{path}/locks/{}", item.name());
                        self.look_at_leases(&mut owned);
                        if let Some(o) = owned.remove(&resource) {
                            self.release(resource, o).await;
                        }
                    }
                    // The lease said so first, and the look above recorded it.
                    Some(Ok(_)) => {}
                },
                _ = tokio::time::sleep_until(next_step) => {
                    for (resource, o) in &owned {
                        self.seq += 1;
                        let part = Part { path: resource.clone(), lease: &o.lease };
                        let written = write_resource(&self.c, register, sinks, how, &part, self.seq, t);
                        if written.await.is_err() {
                            // The register is gone: the campaign is ending.
                            return true;
                        }
                    }
                    owned.retain(|_, o| !o.lost);
                    next_step = Instant::now() + self.rng.between(Duration::ZERO, t / 4);
                }
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                _ = stop.changed() => break true,
            }
        };
        self.look_at_leases(&mut owned);
        for (resource, o) in owned {
            self.release(resource, o).await;
        }
        member.leave();
        drop(member);
        stopped
    }

    /// Records the loss of each owned item whose lease says it is lost, with the last look
    /// that saw it held; notes the others as seen held now.
    fn look_at_leases(&self, owned: &mut BTreeMap<String, Owned>) {
        let now = now_us(&self.c);
        let mut lost = Vec::new();
        for (resource, o) in owned.iter_mut().filter(|(_, o)| !o.lost) {
            match o.lease.state() {
                LeaseState::Lost(reason) => {
                    o.lost = true;
                    lost.push(Event::Lost {
                        client: self.c.client,
                        token: o.lease.token().get(),
                        reason: reason.to_string(),
                        path: resource.clone(),
                        seen_held_us: Some(o.seen_held_us),
                    });
                }
                _ => o.seen_held_us = now,
            }
        }
        if !lost.is_empty() {
            emit_all(&self.c, lost);
        }
    }

    /// Releases an owned item (recorded before the release is sent), unless its lease was
    /// lost (then it is dropped).
    async fn release(&self, resource: String, o: Owned) {
        if o.lost {
            return;
        }
        emit(
            &self.c,
            Event::Released {
                client: self.c.client,
                token: o.lease.token().get(),
                path: resource,
            },
        );
        let _ = tokio::time::timeout(self.t, o.lease.release()).await;
    }
}
