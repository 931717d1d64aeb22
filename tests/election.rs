//! Leader election on real ensembles: exactly one leader at every instant, failover after a
//! killed or partitioned leader (the old leader hears `lost` first, the new token is larger),
//! resignation in queue order, Curator's expired-session trap, a ZooKeeper server failover
//! that changes nothing, `run`'s cancel/requeue/shutdown semantics, and the scheduler recipe.
//!
//! Instants compared by a test are taken in one process, on one clock (`tokio::time::Instant`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, Instant};
use zkfence::{
    Error, FencingToken, LeaderChanges, LeaderInfo, LeaderTask, Leadership, LeaseState, LossReason,
};
use zkfence::{Session, SessionOptions, SessionState};

/// Session timeout for tests that hurt clients (tickTime 200 ms ensembles).
const T: Duration = Duration::from_secs(2);
/// Generous bound for steps that take a few round trips.
const STEP: Duration = Duration::from_secs(10);
/// How much later one session may hear of a commit than another (two notifications of one
/// event race on a loaded machine).
const NOTIFICATION_SKEW: Duration = Duration::from_millis(20);

fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// `(candidate id, token)` of an observed leader, for readable comparisons.
fn who(info: &Option<LeaderInfo>) -> Option<(String, u64)> {
    info.as_ref()
        .map(|l| (l.id.clone().unwrap_or_default(), l.token.get()))
}

/// The next leader change, within `STEP`.
async fn next_change(changes: &mut LeaderChanges) -> Option<LeaderInfo> {
    match timeout(STEP, changes.next()).await {
        Err(_) => panic!("no leader change within {STEP:?}"),
        Ok(None) => panic!("the observer stopped"),
        Ok(Some(Err(e))) => panic!("the observer failed: {e}"),
        Ok(Some(Ok(info))) => info,
    }
}

/// Campaigns in a task of its own; the instant of election arrives with the leadership.
fn campaign_in_background(
    session: &Session,
    path: &str,
    id: &str,
) -> oneshot::Receiver<(Instant, Leadership)> {
    let (tx, rx) = oneshot::channel();
    let election = session.election(path);
    let id = id.to_string();
    tokio::spawn(async move {
        let leadership = election
            .campaign(&id)
            .await
            .unwrap_or_else(|e| panic!("{id} campaigns: {e}"));
        let _ = tx.send((Instant::now(), leadership));
    });
    rx
}

/// One candidate's term as its own view saw it: from `campaign` returning to just before
/// `resign` (or to `lost` resolving).
#[derive(Debug, Clone)]
struct Term {
    id: String,
    token: FencingToken,
    start: Instant,
    end: Instant,
}

/// Panics unless the terms, ordered by start, never overlap and their tokens grow.
fn assert_disjoint(terms: &mut [Term]) {
    terms.sort_by_key(|t| t.start);
    for w in terms.windows(2) {
        assert!(
            w[0].end < w[1].start,
            "two leaders at once: {:?} and {:?}",
            w[0],
            w[1]
        );
        assert!(
            w[0].token < w[1].token,
            "token did not grow: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_leader_among_campaigners_at_every_observed_instant() {
    trace();
    const CANDIDATES: usize = 4;
    const TERMS_EACH: usize = 5;
    let zk = shared_ensemble();
    let path = unique_path("one-leader");
    let observer = connect(&zk.connect_string(), T).await;
    let mut changes = observer.election(&path).observe();
    assert_eq!(
        who(&next_change(&mut changes).await),
        None,
        "nobody leads before anyone campaigns"
    );

    let terms = Arc::new(Mutex::new(Vec::<Term>::new()));
    let mut candidates = vec![];
    for c in 0..CANDIDATES {
        let session = connect(&zk.connect_string(), T).await;
        let (path, terms) = (path.clone(), terms.clone());
        candidates.push(tokio::spawn(async move {
            let election = session.election(&path);
            let id = format!("c{c}");
            for n in 0..TERMS_EACH {
                let leadership = election.campaign(&id).await.unwrap();
                let start = Instant::now();
                assert_eq!(
                    leadership.state(),
                    LeaseState::Held,
                    "{id} elected but not holding"
                );
                if n == 0 {
                    // The first leader holds on until everyone is queued: from then on the
                    // queue is never empty until the last term, as each resigning candidate
                    // queues again at the back.
                    until_children(&session, &path, CANDIDATES).await;
                }
                // The leader's work: a varying stretch, so terms interleave differently.
                tokio::time::sleep(Duration::from_millis(10 + ((c * 17 + n * 29) % 50) as u64))
                    .await;
                assert_eq!(
                    leadership.state(),
                    LeaseState::Held,
                    "{id} lost leadership while working"
                );
                let end = Instant::now();
                terms.lock().unwrap().push(Term {
                    id: id.clone(),
                    token: leadership.token(),
                    start,
                    end,
                });
                leadership.resign().await.unwrap();
            }
        }));
    }
    for c in candidates {
        timeout(Duration::from_secs(60), c)
            .await
            .expect("candidates finish")
            .unwrap();
    }

    // Each candidate's own view: the terms never overlap, and tokens grow in election order.
    let mut terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), CANDIDATES * TERMS_EACH);
    assert_disjoint(&mut terms);

    // The observer's view: one leader per change, in election order, ending with nobody.
    // Its items are buffered, so read them until it has said "nobody" and then kept quiet.
    let mut seen = vec![];
    loop {
        match timeout(Duration::from_millis(500), changes.next()).await {
            Ok(Some(Ok(info))) => seen.push(who(&info)),
            Ok(other) => panic!("observer ended: {other:?}"),
            Err(_) if seen.last() == Some(&None) => break,
            Err(_) => panic!("the observer never reported that nobody leads: {seen:?}"),
        }
    }
    let leaders: Vec<(String, u64)> = seen.iter().flatten().cloned().collect();
    assert!(!leaders.is_empty(), "the observer saw no leader");
    // Exactly one leader while anyone campaigns: "nobody" only once everyone is done.
    assert!(
        seen[..seen.len() - 1].iter().all(Option::is_some),
        "the observer saw nobody leading while candidates were queued: {seen:?}"
    );
    for w in seen.windows(2) {
        assert_ne!(
            w[0], w[1],
            "a change repeated the previous leader: {seen:?}"
        );
    }
    for w in leaders.windows(2) {
        assert!(w[0].1 < w[1].1, "observed tokens must grow: {seen:?}");
    }
    for (id, token) in &leaders {
        assert!(
            terms.iter().any(|t| &t.id == id && t.token.get() == *token),
            "observed leader {id}/{token} that never held a term"
        );
    }
    eprintln!(
        "{} terms, the observer saw {} of them",
        terms.len(),
        leaders.len()
    );
}

/// The old leader hears `lost` before the ensemble can elect another: compared against the
/// server-side deletion of its node (an admin's exists-watch on the ZooKeeper leader), with
/// the lease clock's margin. The bound, as in `lock_faults`: cut right after a keepalive
/// sent at `s` was answered; the leader cannot expire the session before `s + T`, and the
/// clock lapses by `s + 0.65 T`, so the deletion comes at least `0.35 T` after `lost`; `T/5`
/// is asserted (the rest is room for a late timer). A clock with no margin lapses at `s + T`,
/// at most ~1.5 tickTime (300 ms) before the deletion, and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_observes_lost_well_before_its_node_is_deleted() {
    trace();
    // Longer than `T`: the margin to measure is a fraction of it, the noise is not.
    const PARTITION_T: Duration = Duration::from_secs(4);
    let zk = shared_ensemble();
    let server = zk.leader().await.expect("the shared ensemble has a leader");
    let admin = connect(&zk.node_connect_string(server), PARTITION_T).await;
    // The next leader hears of the deletion from a follower, after the ZooKeeper leader.
    let new = connect(
        &zk.node_connect_string((server + 1) % zk.len()),
        PARTITION_T,
    )
    .await;
    for trial in 0..3 {
        let path = unique_path("partitioned-leader");
        let proxy = zk.proxy().await.unwrap();
        let old = connect(&proxy.connect_string(), PARTITION_T).await;
        let old_leadership = old.election(&path).campaign("old").await.unwrap();
        let elected = campaign_in_background(&new, &path, "new");
        until_children(&admin, &path, 2).await;
        let (stat, deleted) = admin
            .client()
            .check_and_watch_stat(old_leadership.lease().path())
            .await
            .unwrap();
        assert!(stat.is_some());
        let deletion = tokio::spawn(async move {
            let event = deleted.changed().await;
            (Instant::now(), event.event_type)
        });

        timeout(STEP, old.valid_until_changed())
            .await
            .expect("a keepalive renews the clock")
            .expect("renewed, not lapsed");
        proxy.blackhole();
        let cut = Instant::now();
        let reason = timeout(3 * PARTITION_T, old_leadership.lost())
            .await
            .expect("the old leader hears it lost");
        let lost_at = Instant::now();
        let (deleted_at, event) = timeout(3 * PARTITION_T, deletion)
            .await
            .expect("the server deletes the old leader's node")
            .unwrap();
        let (elected_at, new_leadership) = timeout(3 * PARTITION_T, elected)
            .await
            .expect("the next is elected")
            .unwrap();

        eprintln!(
            "trial {trial}: after the cut, lost at {:?}, node deleted at {:?}, next elected at {:?}",
            lost_at - cut,
            deleted_at - cut,
            elected_at - cut
        );
        assert_eq!(reason, LossReason::ClockLapsed);
        assert_eq!(event, zkfence::zookeeper_client::EventType::NodeDeleted);
        assert!(
            lost_at < deleted_at,
            "trial {trial}: lost after the deletion"
        );
        // Two sessions hear of one commit; the next leader, on a follower, hears later than
        // the admin on the ZooKeeper leader, by a hop. A small tolerance keeps the race
        // between two notifications out; an election before the deletion would be ~0.35 T
        // early.
        assert!(
            deleted_at <= elected_at + NOTIFICATION_SKEW,
            "trial {trial}: elected {:?} before the deletion was seen",
            deleted_at - elected_at
        );
        assert!(
            deleted_at - lost_at >= PARTITION_T / 5,
            "trial {trial}: lost only {:?} before the server deleted the node; the clock \
             promises about 0.35 T",
            deleted_at - lost_at
        );
        assert!(new_leadership.token() > old_leadership.token());
        assert_eq!(
            old_leadership.state(),
            LeaseState::Lost(LossReason::ClockLapsed)
        );
        new_leadership.resign().await.unwrap();
    }
}

/// Child role: campaign, print the token once leading, then hang until killed.
async fn be_a_leader_process() {
    let connect_string = std::env::var("ZKFENCE_TEST_CONNECT").expect("connect string");
    let path = std::env::var("ZKFENCE_TEST_PATH").expect("election path");
    let session = connect(&connect_string, T).await;
    let leadership = session.election(&path).campaign("child").await.unwrap();
    println!("\nLEADING {} {}", leadership.token(), session.id());
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_process_elects_the_next_with_a_larger_token() {
    trace();
    if child_role().as_deref() == Some("leader") {
        return be_a_leader_process().await;
    }
    let zk = shared_ensemble();
    let path = unique_path("sigkill-leader");
    let mut child = spawn_child(
        "sigkill_of_the_leader_process_elects_the_next_with_a_larger_token",
        "leader",
        &[
            ("ZKFENCE_TEST_CONNECT", zk.connect_string()),
            ("ZKFENCE_TEST_PATH", path.clone()),
        ],
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (child_token, child_session) = timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // libtest may have printed "test <name> ... " on the same line first.
            if let Some((_, rest)) = line.split_once("LEADING ") {
                let (token, session) = rest.split_once(' ').unwrap();
                return (
                    token.parse::<u64>().unwrap(),
                    session.parse::<i64>().unwrap(),
                );
            }
        }
        panic!("the child exited before leading");
    })
    .await
    .expect("the child leads");

    let observer = connect(&zk.connect_string(), T).await;
    let mut changes = observer.election(&path).observe();
    let first = next_change(&mut changes).await.expect("the child leads");
    assert_eq!(
        (first.token.get(), first.session_id),
        (child_token, child_session)
    );

    let parent = connect(&zk.connect_string(), T).await;
    let elected = campaign_in_background(&parent, &path, "parent");
    until_children(&parent, &path, 2).await;

    child.start_kill().unwrap();
    let killed = Instant::now();
    child.wait().await.unwrap();
    let (elected_at, leadership) = timeout(T + Duration::from_secs(1), elected)
        .await
        .expect("elected within the session timeout + 1 s")
        .unwrap();
    assert!(
        leadership.token().get() > child_token,
        "token {} after {child_token}",
        leadership.token()
    );
    let next = next_change(&mut changes).await;
    assert_eq!(
        who(&next),
        Some(("parent".into(), leadership.token().get())),
        "the observer goes straight to the parent"
    );
    eprintln!("elected {:?} after the SIGKILL", elected_at - killed);
    leadership.resign().await.unwrap();
    assert_eq!(who(&next_change(&mut changes).await), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_hands_over_in_queue_order() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("resign-order");
    let observer = connect(&zk.connect_string(), T).await;
    let mut changes = observer.election(&path).observe();
    assert_eq!(who(&next_change(&mut changes).await), None);

    let first = connect(&zk.connect_string(), T).await;
    let mut current = first.election(&path).campaign("c0").await.unwrap();
    assert_eq!(
        who(&next_change(&mut changes).await),
        Some(("c0".into(), current.token().get()))
    );

    // c1, c2, c3 queue in this order (each waits until the previous one is queued).
    let (tx, mut elected) = mpsc::unbounded_channel();
    let mut sessions = vec![];
    for i in 1..=3 {
        let session = connect(&zk.connect_string(), T).await;
        let (election, tx) = (session.election(&path), tx.clone());
        tokio::spawn(async move {
            let leadership = election.campaign(&format!("c{i}")).await.unwrap();
            let _ = tx.send((i, leadership));
        });
        until_children(&observer, &path, i + 1).await;
        sessions.push(session);
    }

    for expected in 1..=3 {
        let previous = current.token();
        current.resign().await.unwrap();
        let (i, leadership) = timeout(STEP, elected.recv())
            .await
            .expect("the next in line is elected")
            .unwrap();
        assert_eq!(i, expected, "resign must hand over to the next in line");
        assert!(leadership.token() > previous);
        // Lockstep with the observer: it reports exactly this change, and nobody else leads.
        assert_eq!(
            who(&next_change(&mut changes).await),
            Some((format!("c{i}"), leadership.token().get()))
        );
        assert!(
            elected.try_recv().is_err(),
            "only one candidate may be elected per resignation"
        );
        let leader = observer
            .election(&path)
            .leader()
            .await
            .unwrap()
            .expect("a leader");
        assert_eq!(leader.token, leadership.token());
        current = leadership;
    }
    current.resign().await.unwrap();
    assert_eq!(
        who(&next_change(&mut changes).await),
        None,
        "after the last resignation nobody leads"
    );
}

/// Curator's trap (CURATOR-696, fixed in Curator by checking the node's ephemeral owner): a
/// candidate whose session expired connects a new session at once and finds its old node
/// still there, owned by the dead session. Taking that node for its own made two leaders.
/// Here the new session must queue behind the old node like anybody else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_never_leads_through_its_expired_sessions_node() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("curator-trap");
    let proxy = zk.proxy().await.unwrap();
    let observer = connect(&zk.connect_string(), T).await;
    let mut changes = observer.election(&path).observe();
    assert_eq!(who(&next_change(&mut changes).await), None);

    // Candidate "a", first session: through the proxy. A wide lease margin makes it hear
    // `lost` well before the server deletes its node, so the trap is reliably armed.
    let a1 = Session::connect(
        &proxy.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .lease_margin(Duration::from_millis(800)),
    )
    .await
    .unwrap();
    let a1_leadership = a1.election(&path).campaign("a").await.unwrap();
    let a1_start = Instant::now();
    let a1_node = a1_leadership.lease().path().to_string();
    assert_eq!(
        who(&next_change(&mut changes).await),
        Some(("a".into(), a1_leadership.token().get()))
    );

    let b = connect(&zk.connect_string(), T).await;
    let b_elected = campaign_in_background(&b, &path, "b");
    until_children(&observer, &path, 2).await;

    proxy.blackhole();
    timeout(3 * T, a1_leadership.lost())
        .await
        .expect("a's first session hears lost");
    let a1_end = Instant::now();

    // At once: a new session for "a" campaigns again, while the old node is still there.
    let a2 = connect(&zk.connect_string(), T).await;
    let mut a2_elected = campaign_in_background(&a2, &path, "a");
    let lock = observer.lock(&path);
    let deadline = Instant::now() + STEP;
    let contenders = loop {
        let contenders = lock.contenders().await.unwrap();
        if contenders.iter().any(|c| c.session_id == a2.id()) {
            break contenders;
        }
        assert!(
            Instant::now() < deadline,
            "a's new session never queued: {contenders:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        contenders[0].node, a1_node,
        "the trap is armed: a's old node still leads the queue {contenders:#?}"
    );
    assert_eq!(contenders[0].session_id, a1.id());
    assert_eq!(contenders.len(), 3, "{contenders:#?}");
    assert_eq!(
        contenders[2].session_id,
        a2.id(),
        "a's new session queues last, in a node of its own"
    );
    assert_ne!(contenders[2].node, a1_node);
    assert!(
        a2_elected.try_recv().is_err(),
        "a's new session must not lead while its old node exists"
    );

    // The server expires the first session: b, next in line, is elected, not a.
    let (b_start, b_leadership) = timeout(3 * T, b_elected)
        .await
        .expect("b is elected")
        .unwrap();
    assert!(a1_end < b_start, "a heard lost after b was elected");
    assert_eq!(
        who(&next_change(&mut changes).await),
        Some(("b".into(), b_leadership.token().get()))
    );
    assert!(
        a2_elected.try_recv().is_err(),
        "a's new session must not lead while b does"
    );
    let leader = observer.election(&path).leader().await.unwrap().unwrap();
    assert_eq!(leader.session_id, b.id());

    // The first session learns it expired once its network heals, and stays lost.
    proxy.heal();
    eventually(3 * T, "a's first session reports Expired", || async {
        a1_leadership.lease().session().state() == SessionState::Expired
    })
    .await;
    assert!(matches!(a1_leadership.state(), LeaseState::Lost(_)));

    let b_end = Instant::now();
    let b_token = b_leadership.token();
    b_leadership.resign().await.unwrap();
    let (a2_start, a2_leadership) = timeout(STEP, a2_elected)
        .await
        .expect("a's new session is elected")
        .unwrap();
    assert_eq!(
        who(&next_change(&mut changes).await),
        Some(("a".into(), a2_leadership.token().get()))
    );
    assert_eq!(a2_leadership.lease().session().id(), a2.id());

    let mut terms = vec![
        Term {
            id: "a (first session)".into(),
            token: a1_leadership.token(),
            start: a1_start,
            end: a1_end,
        },
        Term {
            id: "b".into(),
            token: b_token,
            start: b_start,
            end: b_end,
        },
        Term {
            id: "a (new session)".into(),
            token: a2_leadership.token(),
            start: a2_start,
            end: Instant::now(),
        },
    ];
    assert_disjoint(&mut terms);
    a2_leadership.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_zookeeper_leader_changes_no_leadership() {
    trace();
    // Sessions long enough that the ensemble's re-election (~0.5 s here) and the clients'
    // reconnection (~1.3 s) fit in a lease with room to spare on a loaded machine.
    const LONG: Duration = Duration::from_secs(6);
    let zk = zkfence_testcontainers::Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(Duration::from_secs(10))
        .start()
        .await
        .expect("start an ensemble");
    let path = unique_path("server-failover");
    let a = connect(&zk.connect_string(), LONG).await;
    let b = connect(&zk.connect_string(), LONG).await;
    let observer = connect(&zk.connect_string(), LONG).await;
    assert_eq!(
        a.session_timeout(),
        LONG,
        "the servers granted the session timeout asked for"
    );
    let leadership = a.election(&path).campaign("a").await.unwrap();
    let mut changes = observer.election(&path).observe();
    assert_eq!(
        who(&next_change(&mut changes).await),
        Some(("a".into(), leadership.token().get()))
    );
    let mut b_elected = campaign_in_background(&b, &path, "b");
    until_children(&observer, &path, 2).await;

    // Followers that lose the ZooKeeper leader drop their clients: the leader's session is
    // disconnected, which must not cost the leadership.
    let disconnected = tokio::spawn({
        let a = a.clone();
        async move {
            while let Some(state) = a.state_changed().await {
                if state.is_terminal() {
                    break;
                }
                if a.state() == SessionState::Disconnected {
                    return true;
                }
            }
            false
        }
    });
    let server = zk.leader().await.expect("a ZooKeeper leader");
    zk.kill(server);
    let killed = Instant::now();
    // Watch for any change while the ensemble elects a new leader and every session is
    // back, then for one more session timeout: a lapsed lease clock would show by then.
    let window = async {
        let new_server = zk
            .wait_for_leader(Duration::from_secs(30))
            .await
            .expect("the ensemble recovers");
        let recovered = killed.elapsed();
        eventually(
            Duration::from_secs(30),
            "all sessions connected again",
            || async {
                [&a, &b, &observer]
                    .iter()
                    .all(|s| s.state() == SessionState::Connected)
            },
        )
        .await;
        let reconnected = killed.elapsed();
        tokio::time::sleep(LONG).await;
        (new_server, recovered, reconnected)
    };
    let (new_server, recovered, reconnected) = tokio::select! {
        reason = leadership.lost() => panic!("leadership lost during the server failover: {reason}"),
        change = changes.next() => panic!("the observer saw a leader change: {change:?}"),
        elected = &mut b_elected => panic!("b was elected during the server failover: {elected:?}"),
        done = window => done,
    };
    assert_ne!(new_server, server);
    assert!(
        disconnected.is_finished() && disconnected.await.unwrap(),
        "the leader's session was never disconnected: the test did not test anything"
    );
    assert_eq!(leadership.state(), LeaseState::Held);
    leadership
        .lease()
        .renew()
        .await
        .expect("the leadership is confirmed by the new quorum");
    let leader = observer.election(&path).leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.session_id, leader.token),
        (a.id(), leadership.token())
    );
    eprintln!("ZooKeeper leader {server} killed: new one {new_server} after {recovered:?}, sessions back after {reconnected:?}");

    leadership.resign().await.unwrap();
    let (_, b_leadership) = timeout(STEP, b_elected)
        .await
        .expect("b is elected after a resigns")
        .unwrap();
    b_leadership.resign().await.unwrap();
}

/// SIGSTOP, as a long GC pause or a frozen VM: first the follower the leader's session is
/// connected to, then the ZooKeeper leader, each while a candidate waits. Neither changes the
/// leadership; each pause lasts until the leader's client gives up on its server (checked),
/// and its session reconnects within what the lease clock tolerates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_follower_or_the_zookeeper_leader_changes_no_leadership() {
    trace();
    // A paused ZooKeeper leader is given up on after syncLimit ticks (1 s), then a new one is
    // elected and clients reconnect; a paused follower's clients notice after ~0.4 T. The
    // lease lapses ~0.6 T after the last keepalive: 8 s sessions leave room for both.
    const PAUSE_T: Duration = Duration::from_secs(8);
    let zk = zkfence_testcontainers::Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .max_session_timeout(Duration::from_secs(10))
        .start()
        .await
        .expect("start an ensemble");
    let server = zk.wait_for_leader(STEP).await.unwrap();
    let followers: Vec<usize> = (0..zk.len()).filter(|i| *i != server).collect();
    // Clients only on the followers, so the paused ZooKeeper leader disconnects them all.
    let cs = followers
        .iter()
        .map(|i| zk.node_connect_string(*i))
        .collect::<Vec<_>>()
        .join(",");
    let path = unique_path("paused-server");
    let a = connect(&cs, PAUSE_T).await;
    let b = connect(&cs, PAUSE_T).await;
    let leadership = a.election(&path).campaign("a").await.unwrap();
    let mut b_elected = campaign_in_background(&b, &path, "b");
    until_children(&b, &path, 2).await;

    let deadline = Instant::now() + STEP;
    let on = 'found: loop {
        for &i in &followers {
            if let Ok(cons) = zk.connections(i).await {
                if cons.iter().any(|c| c.session_id == Some(a.id())) {
                    break 'found i;
                }
            }
        }
        assert!(Instant::now() < deadline, "a's session on no follower");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The follower is resumed as soon as a's client gives up on it: left paused, the
    // client's reconnect may pick it again (the library shuffles the servers) and wait out a
    // connect timeout, by which time the lease has rightly lapsed.
    for (what, paused_server, resume_at_disconnect) in [
        ("a's follower", on, true),
        ("the ZooKeeper leader", server, false),
    ] {
        // Pause right after a keepalive: the lease then has its full ~0.6 T ahead.
        timeout(STEP, a.valid_until_changed())
            .await
            .expect("a keepalive renews the clock")
            .expect("renewed");
        let disconnected = tokio::spawn({
            let a = a.clone();
            async move {
                while let Some(state) = a.state_changed().await {
                    if state.is_terminal() {
                        break;
                    }
                    if a.state() == SessionState::Disconnected {
                        return true;
                    }
                }
                false
            }
        });
        zk.pause(paused_server);
        let paused = Instant::now();
        let recovered = async {
            eventually(2 * PAUSE_T, "a's session disconnected", || async {
                disconnected.is_finished()
            })
            .await;
            if resume_at_disconnect {
                zk.resume(paused_server);
            }
            eventually(2 * PAUSE_T, "a's session connected again", || async {
                a.state() == SessionState::Connected
            })
            .await;
            let back = paused.elapsed();
            leadership
                .lease()
                .renew()
                .await
                .expect("confirmed while the server is paused");
            back
        };
        let back = tokio::select! {
            reason = leadership.lost() => panic!("{what} paused: leadership lost ({reason}) after {:?}", paused.elapsed()),
            elected = &mut b_elected => panic!("{what} paused: b was elected: {elected:?}"),
            back = recovered => back,
        };
        eprintln!("{what} paused: a's session was back after {back:?}");
        assert!(
            disconnected.await.unwrap(),
            "{what}: a was never disconnected"
        );
        zk.resume(paused_server);
        zk.wait_serving(paused_server, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(leadership.state(), LeaseState::Held, "{what}");
        let leader = timeout(STEP, b.election(&path).leader())
            .await
            .expect("leader() answers")
            .unwrap()
            .expect("a leader");
        assert_eq!(
            (leader.session_id, leader.token),
            (a.id(), leadership.token()),
            "{what}"
        );
        assert!(b_elected.try_recv().is_err(), "{what}: b must not lead");
    }
    let token = leadership.token();
    leadership.resign().await.unwrap();
    let (_, b_leadership) = timeout(STEP, b_elected)
        .await
        .expect("b is elected after a resigns")
        .unwrap();
    assert!(b_leadership.token() > token);
    b_leadership.resign().await.unwrap();
}

/// What a [`Recorder`] saw, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Led(u64),
    Returned(u64),
    Cancelled(u64, Instant),
}

/// A leader task that records its calls, and its cancellation (its future dropped).
struct Recorder {
    calls: Arc<Mutex<Vec<Call>>>,
    /// Which call (1-based) returns `Ok` at once instead of leading until cancelled.
    returns_on: Option<usize>,
    count: usize,
}

/// Records `Cancelled` if dropped while armed, i.e. when `lead`'s future is dropped.
struct OnCancel(Arc<Mutex<Vec<Call>>>, u64);

impl Drop for OnCancel {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap()
            .push(Call::Cancelled(self.1, Instant::now()));
    }
}

#[async_trait::async_trait]
impl LeaderTask for Recorder {
    async fn lead(&mut self, leadership: Leadership) -> zkfence::Result<()> {
        self.count += 1;
        let token = leadership.token().get();
        self.calls.lock().unwrap().push(Call::Led(token));
        if self.returns_on == Some(self.count) {
            self.calls.lock().unwrap().push(Call::Returned(token));
            return Ok(());
        }
        let _cancelled = OnCancel(self.calls.clone(), token);
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn calls(calls: &Arc<Mutex<Vec<Call>>>) -> Vec<Call> {
    calls.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancels_on_loss_requeues_hands_on_when_done_and_resigns_on_shutdown() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("run");
    let admin = connect(&zk.connect_string(), T).await;
    let runner = connect(&zk.connect_string(), T).await;
    let log = Arc::new(Mutex::new(vec![]));
    let mut task = Recorder {
        calls: log.clone(),
        returns_on: Some(2),
        count: 0,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let election = runner.election(&path);
    let running = tokio::spawn(async move {
        election
            .run("r", &mut task, async {
                let _ = stopped.await;
            })
            .await
    });

    eventually(STEP, "the task leads", || async { !calls(&log).is_empty() }).await;
    let Call::Led(t1) = calls(&log)[0] else {
        panic!("{:?}", calls(&log))
    };
    let other = connect(&zk.connect_string(), T).await;
    let b_elected = campaign_in_background(&other, &path, "b");
    until_children(&admin, &path, 2).await;

    // Someone deletes the leader's node: the task is cancelled, and r queues again behind b.
    let leader = admin.election(&path).leader().await.unwrap().unwrap();
    assert_eq!(leader.session_id, runner.id());
    admin.client().delete(&leader.node, None).await.unwrap();
    let (_, b_leadership) = timeout(STEP, b_elected)
        .await
        .expect("b is elected")
        .unwrap();
    eventually(STEP, "the task is cancelled", || async {
        calls(&log).len() == 2
    })
    .await;
    assert!(
        matches!(calls(&log)[1], Call::Cancelled(t, _) if t == t1),
        "{:?}",
        calls(&log)
    );
    eventually(STEP, "r queues again", || async {
        let contenders = admin.lock(&path).contenders().await.unwrap();
        contenders.len() == 2 && contenders[1].session_id == runner.id()
    })
    .await;

    // b resigns: r leads again (call 2), returns at once, which hands leadership on; alone
    // in the election, r is elected again (call 3) with a new node and a larger token.
    b_leadership.resign().await.unwrap();
    eventually(STEP, "r leads twice more", || async {
        calls(&log).len() == 5
    })
    .await;
    let log_now = calls(&log);
    let (Call::Led(t2), Call::Returned(r2), Call::Led(t3)) = (log_now[2], log_now[3], log_now[4])
    else {
        panic!("unexpected calls {log_now:?}")
    };
    assert!(t1 < t2 && t2 == r2 && t2 < t3, "{log_now:?}");
    let leader = admin.election(&path).leader().await.unwrap().unwrap();
    assert_eq!(leader.token.get(), t3);
    assert_eq!(
        children(&admin, &path).await.len(),
        1,
        "the returned leadership's node was deleted"
    );

    // Shutdown: the task is cancelled, and `run` returns once our node is gone.
    stop.send(()).unwrap();
    timeout(STEP, running)
        .await
        .expect("run returns on shutdown")
        .unwrap()
        .expect("run returns Ok");
    assert!(
        children(&admin, &path).await.is_empty(),
        "run resigned before returning"
    );
    assert!(
        matches!(calls(&log).last(), Some(Call::Cancelled(t, _)) if *t == t3),
        "{:?}",
        calls(&log)
    );
    assert_eq!(calls(&log).len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_cancels_a_partitioned_leader_before_the_next_is_elected() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("run-partition");
    let proxy = zk.proxy().await.unwrap();
    let runner = connect(&proxy.connect_string(), T).await;
    let log = Arc::new(Mutex::new(vec![]));
    let mut task = Recorder {
        calls: log.clone(),
        returns_on: None,
        count: 0,
    };
    let election = runner.election(&path);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        election
            .run("r", &mut task, async {
                let _ = stopped.await;
            })
            .await
    });
    eventually(STEP, "the task leads", || async { !calls(&log).is_empty() }).await;
    let first_session = runner.id();

    let other = connect(&zk.connect_string(), T).await;
    let b_elected = campaign_in_background(&other, &path, "b");
    until_children(&other, &path, 2).await;
    proxy.blackhole();
    let (b_start, b_leadership) = timeout(3 * T, b_elected)
        .await
        .expect("b is elected")
        .unwrap();
    let log_now = calls(&log);
    let Some(&Call::Cancelled(_, cancelled_at)) = log_now.get(1) else {
        panic!("not cancelled: {log_now:?}")
    };
    assert!(
        cancelled_at < b_start,
        "lead was cancelled {:?} after b was elected",
        cancelled_at - b_start
    );

    // r's session expired at the server; when its network heals it learns so, its Session
    // opens a new one, and `run` is a candidate again without a restart: behind b.
    proxy.heal();
    eventually(3 * T, "r campaigns again on a new session", || async {
        let contenders = other.lock(&path).contenders().await.unwrap();
        contenders.len() == 2
            && contenders[1].owner.id.as_deref() == Some("r")
            && contenders[1].session_id != first_session
    })
    .await;
    assert_ne!(runner.id(), first_session);
    assert_eq!(
        calls(&log).len(),
        2,
        "not led while b leads: {:?}",
        calls(&log)
    );
    b_leadership.resign().await.unwrap();
    eventually(STEP, "r leads again", || async { calls(&log).len() == 3 }).await;
    stop.send(()).unwrap();
    timeout(STEP, running)
        .await
        .expect("run returns on shutdown")
        .unwrap()
        .expect("run returns Ok");
}

/// With reopening off, `run` ends with the session, as a plain ZooKeeper handle would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_ends_with_an_expired_session_that_does_not_reopen() {
    let zk = shared_ensemble();
    let path = unique_path("run-no-reopen");
    let proxy = zk.proxy().await.unwrap();
    let runner = Session::connect(
        &proxy.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .reopen_after_expiry(false),
    )
    .await
    .unwrap();
    let log = Arc::new(Mutex::new(vec![]));
    let mut task = Recorder {
        calls: log.clone(),
        returns_on: None,
        count: 0,
    };
    let election = runner.election(&path);
    let running =
        tokio::spawn(async move { election.run("r", &mut task, std::future::pending()).await });
    eventually(STEP, "the task leads", || async { !calls(&log).is_empty() }).await;
    proxy.blackhole();
    let admin = connect(&zk.connect_string(), T).await;
    eventually(3 * T, "the server expired r's session", || async {
        children(&admin, &path).await.is_empty()
    })
    .await;
    proxy.heal();
    let result = timeout(3 * T, running)
        .await
        .expect("run ends with the session")
        .unwrap();
    assert!(matches!(result, Err(Error::SessionExpired)), "{result:?}");
    assert_eq!(calls(&log).len(), 2, "not led again: {:?}", calls(&log));
}

#[tokio::test]
async fn scheduler_leader_recipe_runs_against_a_harness_ensemble() {
    let output = tokio::process::Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", "scheduler_leader"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("ZKFENCE_CONNECT")
        .kill_on_drop(true)
        .output();
    let output = timeout(Duration::from_secs(600), output)
        .await
        .expect("the recipe finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the recipe failed: {}",
        output.status
    );
    assert!(
        stdout.contains("failover"),
        "the recipe reports its failover"
    );
}

/// Issue 21, item 1: when the lease clock lapses, `run` hands leadership on only once the
/// leader task is dropped. The task here is busy without an await (a blocking call, a long
/// computation) across the lapse, so `run` can drop it only when it next yields; before the
/// fix the node was deleted at the lapse (as soon as the ensemble answered again), and the
/// next candidate led while the old task still ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_hands_leadership_on_after_a_lapse_only_once_the_leader_task_is_dropped() {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Busy {
        started: mpsc::UnboundedSender<()>,
        let_go: Arc<AtomicBool>,
        dropped: Arc<Mutex<Option<Instant>>>,
    }
    struct MarkDrop(Arc<Mutex<Option<Instant>>>);
    impl Drop for MarkDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(Instant::now());
        }
    }
    #[async_trait::async_trait]
    impl LeaderTask for Busy {
        async fn lead(&mut self, leadership: zkfence::Leadership) -> zkfence::Result<()> {
            let _mark = MarkDrop(self.dropped.clone());
            let _ = self.started.send(());
            while !self.let_go.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::future::pending::<()>().await;
            drop(leadership);
            Ok(())
        }
    }
    let zk = shared_ensemble();
    let path = unique_path("run-lapse");
    let proxy = zk.proxy().await.unwrap();
    let t = Duration::from_secs(4);
    let runner = connect(&proxy.connect_string(), t).await;
    let other = connect(&zk.connect_string(), t).await;
    let (started, mut leading) = mpsc::unbounded_channel();
    let let_go = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(Mutex::new(None));
    let mut task = Busy {
        started,
        let_go: let_go.clone(),
        dropped: dropped.clone(),
    };
    let election = runner.election(&path);
    let running =
        tokio::spawn(async move { election.run("a", &mut task, std::future::pending()).await });
    timeout(STEP, leading.recv())
        .await
        .expect("a leads")
        .unwrap();
    let next = other.election(&path);
    let campaigning = tokio::spawn(async move {
        let leadership = next.campaign("b").await;
        (leadership, Instant::now())
    });
    until_children(&other, &path, 2).await;

    // The ensemble stops answering a (its requests still arrive: the session lives), so its
    // clock lapses; then answers again.
    proxy.hold_responses();
    eventually(3 * t, "a's lease clock lapsed", || async {
        runner.valid_until().is_none()
    })
    .await;
    proxy.heal();
    let watched = Instant::now();
    while !campaigning.is_finished() && watched.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let led_while_busy = campaigning.is_finished();
    let_go.store(true, Ordering::SeqCst);
    let (leadership, elected_at) = timeout(3 * t, campaigning).await.expect("b leads").unwrap();
    let leadership = leadership.expect("b's campaign");
    eventually(3 * t, "a's task is dropped", || async {
        dropped.lock().unwrap().is_some()
    })
    .await;
    let dropped_at = dropped.lock().unwrap().unwrap();
    assert!(
        !led_while_busy && dropped_at < elected_at,
        "b led {:?} before a's task was dropped (b led while a's task was busy: {led_while_busy})",
        dropped_at.saturating_duration_since(elected_at)
    );
    leadership.resign().await.unwrap();
    running.abort();
}

/// The value an observed leader proclaims, as text.
fn proclaimed(info: &Option<LeaderInfo>) -> Option<String> {
    let value = info.as_ref()?.owner.proclaimed.as_ref()?;
    Some(String::from_utf8_lossy(value).into_owned())
}

/// Issue 24: `Leadership::proclaim` changes the advertised value without giving up
/// leadership; an observer sees each value, in order, and `leader()` the last one, with the
/// candidate's id intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_each_proclaimed_value_in_order() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("proclaim");
    let leader_session = connect(&zk.connect_string(), T).await;
    let observer = connect(&zk.connect_string(), T).await;
    let election = observer.election(&path);
    let leadership = leader_session
        .election(&path)
        .campaign("node-a")
        .await
        .unwrap();
    let mut changes = election.observe();
    let first = within(STEP, "the first item", changes.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(who(&first).unwrap().0, "node-a");
    assert_eq!(proclaimed(&first), None, "nothing proclaimed yet");
    // Paced: each value is seen before the next is proclaimed.
    for value in ["v1", "v2", "v3"] {
        leadership.proclaim(value).await.unwrap();
        let seen = within(STEP, "the proclaimed value", changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (who(&seen), proclaimed(&seen)),
            (who(&first), Some(value.to_string()))
        );
    }
    // Back to back: what is seen is in the order proclaimed, and ends with the last.
    for i in 4..=8 {
        leadership.proclaim(format!("v{i}")).await.unwrap();
    }
    let mut seen = vec![];
    while seen.last().map(String::as_str) != Some("v8") {
        let change = within(STEP, "v8 is seen", changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(who(&change), who(&first), "the leader did not change");
        seen.push(proclaimed(&change).unwrap());
    }
    let numbers: Vec<u32> = seen.iter().map(|v| v[1..].parse().unwrap()).collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "in order: {seen:?}"
    );
    let now = election.leader().await.unwrap();
    assert_eq!(proclaimed(&now).as_deref(), Some("v8"));
    assert_eq!(now.unwrap().id.as_deref(), Some("node-a"));
    assert_eq!(leadership.state(), LeaseState::Held);
    leadership.resign().await.unwrap();
}

/// Issue 24: a leader whose node was deleted (deposed by an operator) cannot proclaim: the
/// version-checked write fails with `LockLost`, and the next leader's value is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_proclaim_fails_with_lost() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("proclaim-deposed");
    let a = connect(&zk.connect_string(), T).await;
    let b = connect(&zk.connect_string(), T).await;
    let old = a.election(&path).campaign("a").await.unwrap();
    old.proclaim("from a").await.unwrap();
    let next = b.election(&path);
    let campaign = tokio::spawn(async move { next.campaign("b").await });
    until_children(&b, &path, 2).await;
    // Depose: delete the leader's node behind its back.
    b.client().delete(old.lease().path(), None).await.unwrap();
    let new = within(STEP, "b is elected", campaign)
        .await
        .unwrap()
        .unwrap();
    new.proclaim("from b").await.unwrap();
    match old.proclaim("still a").await {
        Err(Error::LockLost {
            reason: LossReason::NodeDeleted,
            ..
        }) => {}
        other => panic!("expected LockLost(NodeDeleted), got {other:?}"),
    }
    let leader = b.election(&path).leader().await.unwrap();
    assert_eq!(proclaimed(&leader).as_deref(), Some("from b"));
    assert_eq!(leader.unwrap().id.as_deref(), Some("b"));
    new.resign().await.unwrap();
}
