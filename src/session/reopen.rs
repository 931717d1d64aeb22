//! A [`Session`](super::Session) that outlives an expiry: when the ensemble expires the
//! ZooKeeper session, the keeper has already told every lease of it `Lost`; then a new
//! ZooKeeper session is opened with the same connect string and options, with capped,
//! jittered exponential backoff while the ensemble cannot be reached.
//!
//! Leases, and queues in progress, stay bound to the ZooKeeper session their node belongs
//! to (an ephemeral node cannot move to another session); only new acquires use the new one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use super::{open, Counters, SessionOptions, SessionState, Shared};
use crate::error::Error;

/// The live ZooKeeper session of one `Session` handle and its keeper.
pub(super) struct Current {
    live: watch::Sender<Arc<Shared>>,
    keeper: Mutex<AbortHandle>,
    /// False once no new ZooKeeper session will come: reopening is off, was stopped by
    /// `close`, or the credentials were rejected.
    reopening: AtomicBool,
}

impl Current {
    pub(super) fn new(shared: Arc<Shared>, keeper: &JoinHandle<()>) -> Current {
        Current {
            live: watch::Sender::new(shared),
            keeper: Mutex::new(keeper.abort_handle()),
            reopening: AtomicBool::new(true),
        }
    }

    pub(super) fn live(&self) -> Arc<Shared> {
        self.live.borrow().clone()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<Arc<Shared>> {
        self.live.subscribe()
    }

    pub(super) fn reopening(&self) -> bool {
        self.reopening.load(Ordering::Acquire)
    }

    /// No new session will come: wakes whoever waits for one, so they see the last.
    pub(super) fn stop_reopening(&self) {
        self.reopening.store(false, Ordering::Release);
        self.live.send_modify(|_| {});
    }

    pub(super) fn stop_keeper(&self) {
        self.keeper.lock().unwrap().abort();
    }

    fn replace(&self, shared: Arc<Shared>, keeper: &JoinHandle<()>) {
        *self.keeper.lock().unwrap() = keeper.abort_handle();
        self.live.send_replace(shared);
    }

    /// The live session; right after an expiry, the next one, waited for until `deadline`.
    pub(super) async fn live_or_next(&self, deadline: Option<Instant>) -> Arc<Shared> {
        // The common case, on every acquire, without a receiver made and dropped.
        let live = self.live.borrow().clone();
        if live.clock.now().state != SessionState::Expired || !self.reopening() {
            return live;
        }
        let mut sessions = self.subscribe();
        loop {
            let shared = sessions.borrow_and_update().clone();
            if shared.clock.now().state != SessionState::Expired || !self.reopening() {
                return shared;
            }
            let changed = async {
                match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline, sessions.changed())
                        .await
                        .unwrap_or(Ok(())),
                    None => sessions.changed().await,
                }
            };
            if changed.await.is_err() || deadline.is_some_and(|d| Instant::now() >= d) {
                return shared;
            }
        }
    }
}

/// Follows the live session: after each expiry, opens the next one. Runs until the session
/// ends for another reason, the credentials are rejected, or the handle is dropped.
pub(super) async fn reopen(
    current: Arc<Current>,
    mut keeper: JoinHandle<()>,
    connect: String,
    options: SessionOptions,
) {
    loop {
        // The keeper returns once the session ended and it told every lease so: nothing of
        // the old session looks held by the time a new one is asked for.
        let _ = (&mut keeper).await;
        let ended = current.live();
        if ended.clock.now().state != SessionState::Expired {
            current.stop_reopening();
            return;
        }
        let counters = ended.counters.clone();
        let expired_id = ended.client.session_id();
        drop(ended);
        Counters::bump(&counters.expiries);
        tracing::warn!(session_id = %expired_id,
            "zookeeper session expired: its leases are lost; opening a new session");
        let (initial, max) = options.reopen_backoff;
        let mut pause = initial;
        loop {
            Counters::bump(&counters.reopen_attempts);
            match open(&connect, &options, counters.clone(), true).await {
                Ok((shared, next_keeper)) => {
                    tracing::info!(session_id = %shared.client.session_id(), expired = %expired_id,
                        "a new zookeeper session replaces the expired one");
                    current.replace(shared, &next_keeper);
                    crate::telemetry::session_reopened();
                    keeper = next_keeper;
                    break;
                }
                Err(err @ Error::AuthFailed) => {
                    tracing::error!(%err, "the ensemble rejected the credentials: not reopening");
                    current.stop_reopening();
                    return;
                }
                Err(err) => {
                    let wait = jittered(pause);
                    tracing::warn!(%err, retry_in_ms = wait.as_millis() as u64,
                        "could not open a new zookeeper session");
                    tokio::time::sleep(wait).await;
                    pause = (pause * 2).min(max);
                }
            }
        }
    }
}

/// `pause` plus up to half of it at random, so that the clients of one ensemble that lost
/// it together do not come back in step.
fn jittered(pause: Duration) -> Duration {
    let random = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    pause + pause * random / 2000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_adds_at_most_half() {
        let pause = Duration::from_millis(400);
        for _ in 0..1000 {
            let wait = jittered(pause);
            assert!(wait >= pause && wait <= pause * 3 / 2, "{wait:?}");
        }
    }
}
