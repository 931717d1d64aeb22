//! The keeper task of a ZooKeeper session: it follows the session's state into the lease
//! clock, sends the keepalives that renew it (every `T/6` unless a proof went out meanwhile;
//! a transaction while a lease is held or an acquire waits, a `sync` on an idle session), and
//! ends every lease the moment the clock runs out. The rule it renews by is in
//! [`clock`](super::clock).

use std::sync::Arc;

use tokio::time::Instant;

use crate::error::LossReason;

use super::clock::LeaseClock;
use super::{SessionState, Shared};

/// The keeper task: follows session state, renews the clock, and ends leases when it lapses.
pub(crate) async fn keep(shared: Arc<Shared>, states: zookeeper_client::StateWatcher) {
    let session_id = shared.client.session_id();
    tokio::select! {
        _ = watch_lapses(&shared.clock, session_id) => {}
        _ = follow_session(shared.clone(), states) => {}
    }
}

/// Ends every lease the moment the clock runs out.
///
/// While the clock holds, renewals move `valid_until` later, never sooner
/// ([`Clock::extend`](super::clock::Clock::extend)): so the keeper sleeps until the deadline it
/// knows and, on waking, lapses the clock only if the *current* deadline has passed, else
/// sleeps on to that one. The one change that moves it sooner (a shorter timeout granted at a
/// reconnect, [`Clock::cap`](super::clock::Clock::cap)) wakes it. It is not woken by each renewal (up to one a millisecond on a busy
/// session, each a task wake-up, often on the other worker thread). Once lapsed, only a
/// renewal changes anything: it waits for the clock to change, and watches the renewed clock
/// from that instant.
pub(super) async fn watch_lapses(
    lease_clock: &LeaseClock,
    session_id: zookeeper_client::SessionId,
) {
    let mut changes = lease_clock.clock.subscribe();
    loop {
        let clock = *changes.borrow_and_update();
        if clock.lapsed {
            if changes.changed().await.is_err() {
                return;
            }
            continue;
        }
        // The deadline is in boot time, which runs on while the machine is suspended and
        // tokio's timers do not: never sleep longer than a keepalive interval, so a lease is
        // lapsed within one of the machine waking up. A deadline moved earlier (the servers
        // granted a shorter timeout) wakes us too; renewals, which only move it later, do not.
        let wake = lease_clock
            .boot
            .to_tokio(clock.valid_until)
            .min(Instant::now() + lease_clock.keepalive_interval());
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = lease_clock.moved_earlier.notified() => continue,
        }
        let lapsed = lease_clock
            .clock
            .send_if_modified(|c| c.lapse_if_due(lease_clock.instant()));
        if lapsed {
            if lease_clock.vouching_matters() {
                tracing::warn!(
                    %session_id,
                    "lease clock lapsed: the leader has not vouched for the session in time"
                );
            } else {
                // An idle session's keepalives are touches, not proofs: its clock runs out
                // and the next acquire's create renews it.
                tracing::debug!(%session_id, "lease clock lapsed on an idle session");
            }
            lease_clock.lose_all(LossReason::ClockLapsed);
        }
    }
}

/// Follows the session's state and keeps the clock renewed; returns when the session ended.
async fn follow_session(shared: Arc<Shared>, mut states: zookeeper_client::StateWatcher) {
    use zookeeper_client::SessionState as Zs;
    let lease_clock = &shared.clock;
    let mut keepalive: Option<Keepalive> = None;
    // An idle session's keepalive is not a proof: it must pace the next one too.
    let mut last_keepalive_sent = lease_clock.last_proof_sent();
    loop {
        // From the timeout granted now (it can change at a reconnect).
        let interval = lease_clock.keepalive_interval();
        let next_keepalive = lease_clock
            .boot
            .to_tokio(lease_clock.last_proof_sent().max(last_keepalive_sent) + interval);
        // Leases granted at once start watching their nodes a keepalive interval after the
        // grant (see `holding.rs`).
        let next_watch = lease_clock
            .watch_due(interval * super::holding::WATCH_AFTER)
            .map(|at| lease_clock.boot.to_tokio(at));
        tokio::select! {
            state = states.changed() => {
                let new = match state {
                    Zs::SyncConnected | Zs::ConnectedReadOnly => SessionState::Connected,
                    Zs::Disconnected => SessionState::Disconnected,
                    Zs::Expired => SessionState::Expired,
                    Zs::Closed => SessionState::Closed,
                    Zs::AuthFailed => SessionState::AuthFailed,
                };
                let clock = lease_clock.now();
                // `Session::close` marks the session Closed for good: no later state of the
                // client's connection reopens it.
                lease_clock.clock.send_modify(|c| {
                    if c.state != SessionState::Closed {
                        c.state = new;
                    }
                });
                let session_id = shared.client.session_id();
                match new {
                    SessionState::Disconnected => {
                        let left = clock.valid_until.saturating_duration_since(lease_clock.instant());
                        tracing::warn!(%session_id, valid_for_ms = left.as_millis() as u64,
                            "disconnected from the ensemble: leases suspended until the lease clock runs out");
                    }
                    SessionState::Connected => tracing::info!(%session_id, "connected: renewing the lease clock"),
                    _ => tracing::warn!(%session_id, state = ?new, "zookeeper session ended"),
                }
                if new == SessionState::Expired {
                    crate::telemetry::session_expired();
                }
                if new.is_terminal() {
                    lease_clock.lose_all(lease_clock.now().loss_reason());
                    return;
                }
                if new == SessionState::Connected {
                    super::Counters::bump(&shared.counters.reconnects);
                    crate::telemetry::reconnected();
                    // The server may have granted another timeout: the clock follows it
                    // before anything more is counted (answers on the new connection also
                    // check, whichever comes first).
                    shared.follow_granted_timeout();
                    // Renew at once: a blip that ends inside valid_until must cost nobody a
                    // lock. A keepalive sent on the old connection will never be answered.
                    last_keepalive_sent = lease_clock.instant();
                    keepalive = Some(send_keepalive(&shared));
                }
            }
            _ = tokio::time::sleep_until(next_keepalive), if keepalive.is_none() => {
                // Only proofs and keepalives move the schedule: reads never delay one.
                let now = lease_clock.instant();
                if lease_clock.last_proof_sent().max(last_keepalive_sent) + interval <= now {
                    last_keepalive_sent = now;
                    keepalive = Some(send_keepalive(&shared));
                }
            }
            _ = async { tokio::time::sleep_until(next_watch.expect("guarded")).await }, if next_watch.is_some() => {
                // The loop's next turn starts the watches now due.
            }
            answered = async { keepalive.as_mut().expect("guarded").await }, if keepalive.is_some() => {
                keepalive = None;
                if answered {
                    super::Counters::bump(&shared.counters.keepalives);
                } else {
                    tracing::debug!("keepalive unanswered within its interval: sending another");
                }
            }
        }
    }
}

/// A keepalive in flight: resolves to whether it was answered (the answer already fed the
/// clock).
type Keepalive = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// Sends a keepalive with a timeout of its own: one that gets no answer within the interval
/// is abandoned, so the next asks on whatever connection is current (a late answer to the
/// abandoned one would still have been a valid proof; dropping it only under-counts).
fn send_keepalive(shared: &Arc<Shared>) -> Keepalive {
    let shared = shared.clone();
    let interval = shared.clock.keepalive_interval();
    Box::pin(async move {
        tokio::time::timeout(interval, shared.keepalive())
            .await
            .unwrap_or(false)
    })
}
