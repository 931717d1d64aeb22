//! Issue 43, item 1: the session timeout the servers renegotiate at a reconnect.
//!
//! ZooKeeper negotiates the session timeout at every connect: a server clamps the requested
//! value to its own `minSessionTimeout`/`maxSessionTimeout` and revalidates the session at
//! the leader with it, and the leader's expiry queue moves the session to the new deadline.
//! A holder whose session was opened at 30 s on a follower, which an operator then restarts
//! with `maxSessionTimeout=8000` (a rolling config change), reconnects to it with 8 s. When
//! that follower is then cut off from its peers, the leader expires the session about 8 s
//! after the cut and grants the waiter; a lease clock that kept 30 s vouched for the holder
//! for about 18 s (and the client library's own expiry came at 1.4 × 8 s): two holders.
//! All instants are taken on this process's clock.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::time::Instant;
use zkfence::{LeaseState, LossReason, Session, SessionOptions};
use zkfence_testcontainers::Ensemble;

/// What the holder asks for, and what the servers grant at first.
const ASKED: Duration = Duration::from_secs(30);
/// What the restarted follower grants at the reconnect.
const SHRUNK: Duration = Duration::from_secs(8);
/// A generous bound for steps of a few round trips or a server restart.
const STEP: Duration = Duration::from_secs(30);

async fn ensemble() -> Ensemble {
    Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(ASKED)
        .peer_links(true)
        .start()
        .await
        .expect("start an ensemble with peer links")
}

/// Restarts `node` with `maxSessionTimeout = max` and waits until it serves as a follower
/// again.
async fn restart_with_max(zk: &Ensemble, node: usize, max: Duration) {
    zk.set_session_timeout_bounds(node, TICK * 2, max).unwrap();
    zk.restart(node).await.expect("restart the follower");
}

/// The timeout `node` negotiated with the session `id`, as its `cons` lists it.
async fn negotiated_at(zk: &Ensemble, node: usize, id: i64) -> Option<Duration> {
    zk.connections(node)
        .await
        .ok()?
        .into_iter()
        .find(|c| c.session_id == Some(id))?
        .session_timeout
}

struct Trial {
    lost_after_cut: Duration,
    granted_after_cut: Duration,
    reason: LossReason,
    /// `Session::session_timeout()` after the reconnect.
    reported: Duration,
}

async fn trial(zk: &Ensemble, n: usize) -> Trial {
    let leader = zk.wait_for_leader(STEP).await.unwrap();
    let follower = (0..zk.len()).find(|&i| i != leader).unwrap();
    // The follower grants the full timeout first (a previous trial shrank it).
    restart_with_max(zk, follower, ASKED).await;
    let dir = unique_path(&format!("shrunk-{n}"));
    let holder = Session::connect(
        &zk.node_connect_string(follower),
        SessionOptions::new().session_timeout(ASKED),
    )
    .await
    .unwrap();
    assert_eq!(
        holder.session_timeout(),
        ASKED,
        "trial {n}: granted at first"
    );
    let lease = Arc::new(holder.lock(&dir).acquire().await.unwrap());

    // The operator's rolling change: the holder's server comes back granting at most 8 s,
    // and the holder reconnects to it (its connect string names no other server).
    restart_with_max(zk, follower, SHRUNK).await;
    let id = holder.id();
    eventually(
        STEP,
        "the holder reconnected with the shorter timeout",
        || async { negotiated_at(zk, follower, id).await == Some(SHRUNK) },
    )
    .await;
    assert_eq!(
        zk.wait_for_leader(STEP).await.unwrap(),
        leader,
        "trial {n}: the restart moved the leader"
    );
    assert_ne!(
        lease.state(),
        LeaseState::Lost(LossReason::SessionExpired),
        "trial {n}: the reconnect kept the session"
    );
    // The lease outlived the restart: the restart was short, and the clock renews again.
    eventually(STEP, "the lease is held again", || async {
        lease.state() == LeaseState::Held
    })
    .await;

    let waiter = connect(&zk.node_connect_string(leader), ASKED).await;
    let lock = waiter.lock(&dir);
    let granted = tokio::spawn(async move {
        let lease = lock.acquire().await;
        (Instant::now(), lease)
    });
    until_children(&waiter, &dir, 2).await;
    within(
        STEP,
        "a keepalive renews the clock",
        holder.valid_until_changed(),
    )
    .await
    .expect("renewed, not lapsed");

    let reported = holder.session_timeout();
    zk.isolate(follower);
    let cut = Instant::now();
    let watched = lease.clone();
    let lost = tokio::spawn(async move {
        let reason = watched.lost().await;
        (Instant::now(), reason)
    });
    let (granted_at, new_lease) = within(ASKED, "the waiter is granted", granted)
        .await
        .unwrap();
    let new_lease = new_lease.expect("the waiter holds the lock");
    let (lost_at, reason) = within(ASKED, "the holder is told it lost", lost)
        .await
        .unwrap();
    assert!(new_lease.token() > lease.token());
    new_lease.release().await.unwrap();
    zk.heal_all_peers();
    zk.wait_serving(follower, STEP)
        .await
        .expect("the follower rejoins");
    Trial {
        lost_after_cut: lost_at - cut,
        granted_after_cut: granted_at - cut,
        reason,
        reported,
    }
}

/// The scenario, 5 trials: the holder hears `Lost` before the waiter is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_shortened_at_a_reconnect_lapses_the_holder_before_anyone_else_is_granted() {
    let zk = ensemble().await;
    for n in 0..5 {
        let t = trial(&zk, n).await;
        eprintln!(
            "trial {n}: lost {:?} ({}), waiter granted {:?} after the cut",
            t.lost_after_cut, t.reason, t.granted_after_cut
        );
        assert!(
            t.lost_after_cut < t.granted_after_cut,
            "trial {n}: the waiter was granted {:?} after the cut, the holder heard Lost only \
             {:?} after it: two holders",
            t.granted_after_cut,
            t.lost_after_cut
        );
        assert_eq!(t.reason, LossReason::ClockLapsed, "trial {n}");
        assert_eq!(
            t.reported, SHRUNK,
            "trial {n}: the session's timeout is the one granted"
        );
    }
}
