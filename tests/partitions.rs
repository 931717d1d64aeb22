//! Partitioned ownership on real ensembles: members join and leave one by one and in
//! bursts, a member is killed (a real process) or cut off (its proxy blackholed, its server
//! cut off from its peers), a worker is slow to release; after each change the items settle
//! balanced and sticky, and no item ever has two owners (an interval check over the history
//! the workers recorded, on this process's clock).

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::fleet::{moved, settled, Fleet};
use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;
use zkfence::{Assignment, Items, LossReason, OwnershipChange, Partitions, Session};

/// The session timeout of members that are cut off or killed.
const T: Duration = Duration::from_secs(2);
/// The session timeout of members and observers nothing happens to.
const CALM: Duration = Duration::from_secs(4);
/// How long the party must be still before members act, in these tests.
const SETTLE: Duration = Duration::from_millis(200);
/// Generous bound for settling after a change on a loaded machine.
const SETTLING: Duration = Duration::from_secs(30);

/// Logs with `RUST_LOG` (e.g. `zkfence=info`), shown with a failing test's output.
fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn partitions(session: &Session, path: &str, items: usize) -> Partitions {
    session.partitions(path, items).settle(SETTLE)
}

/// The fewest items any balanced assignment moves when the members go from `before` to
/// `after` ids (one join or one leave at a time, or a burst): the items of members that left,
/// plus what the newcomers must be given at least.
fn minimum_moves(owners: &[String], after: &[&str]) -> usize {
    let n = owners.len();
    let left = owners
        .iter()
        .filter(|o| !after.contains(&o.as_str()))
        .count();
    let newcomers = after
        .iter()
        .filter(|id| !owners.iter().any(|o| o == *id))
        .count();
    left.max(newcomers * (n / after.len()))
}

/// The owners the assignment gives under `members`, as ids.
fn assigned(members: &[&str], items: usize) -> Vec<String> {
    Assignment::Sticky
        .assign(members, &Items::count(items))
        .into_iter()
        .map(|o| o.unwrap().to_string())
        .collect()
}

/// Members join one at a time, then leave one at a time (in order, with `leave`): after each
/// change the items settle on exactly the assignment's owners (balanced), the items that
/// moved are close to the fewest any balanced assignment could move (sticky), and no item
/// ever had two owners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_joining_and_leaving_one_by_one_settle_balanced_and_sticky() {
    let zk = shared_ensemble();
    let path = unique_path("one-by-one");
    let n = 120;
    let observer = connect(&zk.connect_string(), CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let ids = ["m0", "m1", "m2", "m3", "m4"];
    let mut sessions = Vec::new();
    let mut owners: Option<Vec<String>> = None;
    let (mut moved_total, mut minimum_total) = (0, 0);
    for (k, id) in ids.iter().enumerate() {
        let session = connect(&zk.connect_string(), CALM).await;
        fleet.join(&partitions(&session, &path, n), id).await;
        sessions.push(session);
        let now = fleet.settled(&view, k + 1, SETTLING).await;
        assert_eq!(now, assigned(&ids[..=k], n), "after {id} joined");
        if let Some(before) = &owners {
            let (m, min) = (moved(before, &now), minimum_moves(before, &ids[..=k]));
            eprintln!("{id} joined: {m} items moved, at least {min} had to");
            moved_total += m;
            minimum_total += min;
        }
        owners = Some(now);
    }
    for (k, id) in ids.iter().enumerate().take(ids.len() - 1) {
        fleet.leave(id);
        let now = fleet.settled(&view, ids.len() - k - 1, SETTLING).await;
        assert_eq!(now, assigned(&ids[k + 1..], n), "after {id} left");
        let before = owners.as_ref().unwrap();
        let (m, min) = (moved(before, &now), minimum_moves(before, &ids[k + 1..]));
        eprintln!("{id} left: {m} items moved, at least {min} had to");
        moved_total += m;
        minimum_total += min;
        owners = Some(now);
        eventually(SETTLING, "the member that left ends its stream", || async {
            fleet.has_left(id)
        })
        .await;
    }
    eprintln!("over every change: {moved_total} moved, at least {minimum_total} had to");
    assert!(
        moved_total as f64 <= 1.5 * minimum_total as f64,
        "{moved_total} items moved where {minimum_total} had to: not sticky"
    );
    fleet.assert_one_owner_at_a_time();
}

/// Six members join at once: with the settle time they act once on the whole party, so each
/// item is granted about once (not once per join); then three leave at once, and only about
/// their items move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_joins_then_of_leaves_moves_items_about_once() {
    let zk = shared_ensemble();
    let path = unique_path("burst");
    let n = 90;
    let observer = connect(&zk.connect_string(), CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let ids = ["b0", "b1", "b2", "b3", "b4", "b5"];
    let mut sessions = Vec::new();
    for _ in ids {
        sessions.push(connect(&zk.connect_string(), CALM).await);
    }
    // A settle longer than the burst takes to join.
    let joins = ids.iter().zip(&sessions).map(|(id, session)| {
        let p = session
            .partitions(&path, n)
            .settle(Duration::from_millis(1500));
        let fleet = fleet.clone();
        async move { fleet.join(&p, id).await }
    });
    futures::future::join_all(joins).await;
    let before = fleet.settled(&view, ids.len(), SETTLING).await;
    assert_eq!(before, assigned(&ids, n));
    let grants = fleet.grants();
    eprintln!(
        "a burst of {} joins: {grants} grants for {n} items",
        ids.len()
    );
    assert!(
        grants <= n + n / 10,
        "{grants} grants for {n} items: the burst moved items more than once"
    );

    for id in &ids[..3] {
        fleet.leave(id);
    }
    let after = fleet.settled(&view, 3, SETTLING).await;
    assert_eq!(after, assigned(&ids[3..], n));
    let (m, min) = (moved(&before, &after), minimum_moves(&before, &ids[3..]));
    eprintln!("a burst of 3 leaves: {m} moved, at least {min} had to");
    assert!(m as f64 <= 1.3 * min as f64, "{m} moved where {min} had to");
    fleet.assert_one_owner_at_a_time();
}

/// A member whose worker does not release an item when asked keeps that item, and only
/// that one: the others settle. The item moves once the worker releases it; and when a slow
/// member's session dies instead, within its session timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_release_holds_back_only_its_item_and_moves_once_released_or_dead() {
    let zk = shared_ensemble();
    let path = unique_path("slow");
    let n = 40;
    let observer = connect(&zk.connect_string(), CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let proxy = zk.proxy().await.unwrap();
    let slow_session = connect(&proxy.connect_string(), T).await;
    fleet
        .join(
            &partitions(&slow_session, &path, n).release_within(Duration::from_millis(300)),
            "slow",
        )
        .await;
    let alone = fleet.settled(&view, 1, SETTLING).await;
    assert!(alone.iter().all(|o| o == "slow"));

    // Two items that "slow" will have to give to "fast": it holds on to them.
    let theirs = assigned(&["slow", "fast"], n);
    let moving: Vec<usize> = (0..n).filter(|&i| theirs[i] == "fast").take(2).collect();
    for &item in &moving {
        fleet.slow("slow", item);
    }
    let fast_session = connect(&zk.connect_string(), CALM).await;
    fleet
        .join(&partitions(&fast_session, &path, n), "fast")
        .await;
    eventually(SETTLING, "every other item settles", || async {
        let Ok(status) = view.status().await else {
            return false;
        };
        status.items.iter().all(|i| {
            moving.contains(&i.item.index()) || (i.moving_to().is_none() && i.holder.is_some())
        }) && moving.iter().all(|&m| fleet.holding_slow("slow", m))
    })
    .await;
    // Well past the release deadline, the held items have not moved.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = view.status().await.unwrap();
    for &item in &moving {
        let s = &status.items[item];
        assert_eq!(
            s.owner.as_deref(),
            Some("slow"),
            "item {item} moved before release"
        );
        assert_eq!(s.moving_to(), Some("fast"));
        assert_eq!(s.waiting, 1, "fast waits for item {item}");
    }

    // One released: it moves.
    fleet.release_slow("slow", moving[0]);
    eventually(SETTLING, "the released item moves", || async {
        view.status().await.unwrap().items[moving[0]]
            .owner
            .as_deref()
            == Some("fast")
    })
    .await;

    // The slow member dies with the other: its item moves once its session expires.
    proxy.blackhole();
    let cut = Instant::now();
    let now = fleet.settled(&view, 1, SETTLING).await;
    let took = cut.elapsed();
    eprintln!("the dead slow member's items moved {took:?} after the cut (T = {T:?})");
    assert!(now.iter().all(|o| o == "fast"));
    assert!(took < 3 * T, "moved {took:?} after the cut");
    eventually(
        SETTLING,
        "the slow worker hears it lost its item",
        || async {
            fleet
                .history()
                .iter()
                .any(|i| i.member == "slow" && i.item == moving[1] && i.ended.is_some())
        },
    )
    .await;
    fleet.assert_one_owner_at_a_time();
    let lost: Vec<_> = fleet
        .history()
        .into_iter()
        .filter(|i| i.member == "slow" && i.item == moving[1])
        .collect();
    assert!(
        matches!(
            lost.last().unwrap().lost,
            Some(LossReason::ClockLapsed | LossReason::SessionExpired)
        ),
        "the slow item's lease ended as lost: {:?}",
        lost.last().unwrap().lost
    );
}

/// A member cut off from the ensemble (its proxy blackholed) hears `Lost` for every item it
/// holds before any other member is granted one of them: for each item, its interval ends
/// before the next owner's begins. Its items move once the ensemble expires its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_member_loses_every_item_before_anyone_is_granted_one() {
    trace();
    let zk = shared_ensemble();
    let path = unique_path("cut");
    let n = 30;
    let observer = connect(&zk.connect_string(), CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let proxy = zk.proxy().await.unwrap();
    let doomed = connect(&proxy.connect_string(), T).await;
    fleet.join(&partitions(&doomed, &path, n), "doomed").await;
    let others: Vec<Session> = vec![
        connect(&zk.connect_string(), CALM).await,
        connect(&zk.connect_string(), CALM).await,
    ];
    fleet.join(&partitions(&others[0], &path, n), "o1").await;
    fleet.join(&partitions(&others[1], &path, n), "o2").await;
    let before = fleet.settled(&view, 3, SETTLING).await;
    let doomed_items: Vec<usize> = (0..n).filter(|&i| before[i] == "doomed").collect();
    assert!(!doomed_items.is_empty());

    eventually(SETTLING, "a keepalive renews the clock", || async {
        doomed.valid_until().is_some()
    })
    .await;
    proxy.blackhole();
    let cut = Instant::now();
    let after = fleet.settled(&view, 2, SETTLING).await;
    assert_eq!(after, assigned(&["o1", "o2"], n));
    // The ensemble shows the grants before the members' workers have them.
    eventually(SETTLING, "the workers have every moved item", || async {
        let history = fleet.history();
        doomed_items
            .iter()
            .all(|&item| history.iter().any(|i| i.item == item && i.granted > cut))
    })
    .await;
    let history = fleet.history();
    for &item in &doomed_items {
        // Its last grant of the item (an item may have come back to it as the others
        // joined), and the first grant of the item to anyone after it.
        let old = history
            .iter()
            .filter(|i| i.item == item && i.member == "doomed")
            .max_by_key(|i| i.granted)
            .unwrap();
        let new = history
            .iter()
            .filter(|i| i.item == item && i.granted > old.granted)
            .min_by_key(|i| i.granted)
            .unwrap();
        let lost_at = old.ended.expect("the doomed member was told");
        // The lease clock lapses first; a process starved for over half a session timeout
        // (a loaded machine) may hear of the expiry first instead: the order below is what
        // matters.
        assert!(
            matches!(
                old.lost,
                Some(LossReason::ClockLapsed | LossReason::SessionExpired)
            ),
            "item {item}: {:?}",
            old.lost
        );
        assert!(
            lost_at < new.granted,
            "item {item}: granted to {} {:?} before the cut-off member heard Lost",
            new.member,
            lost_at - new.granted
        );
    }
    let first_regrant = history
        .iter()
        .filter(|i| doomed_items.contains(&i.item) && i.member != "doomed" && i.granted > cut)
        .map(|i| i.granted)
        .min()
        .unwrap();
    let last_lost = history
        .iter()
        .filter(|i| i.member == "doomed")
        .filter_map(|i| i.ended)
        .max()
        .unwrap();
    eprintln!(
        "cut-off member: every item lost {:?} before the first was granted elsewhere",
        first_regrant - last_lost
    );
    assert!(
        last_lost < first_regrant,
        "the member loses all its items first"
    );
    fleet.assert_one_owner_at_a_time();
}

/// The child process of the kill test: joins as the id it is given, prints the items it is
/// granted, and runs until killed.
async fn run_killed_member() {
    let connect_string = std::env::var("ZK").unwrap();
    let path = std::env::var("PARTITION_PATH").unwrap();
    let n: usize = std::env::var("ITEMS").unwrap().parse().unwrap();
    let session = connect(&connect_string, T).await;
    let mut member = partitions(&session, &path, n).join("victim").await.unwrap();
    let mut held = Vec::new();
    while let Some(change) = member.next().await {
        if let OwnershipChange::Acquired { item, lease } = change.unwrap() {
            println!("ACQUIRED {}", item.index());
            held.push(lease);
        }
    }
}

/// A member in a process of its own is killed (SIGKILL): nobody is granted its items before
/// the ensemble has expired its session (its party node and its items' nodes go together),
/// and then they all move, within about the session timeout plus the settle time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_s_items_move_only_after_its_session_expires() {
    if child_role().is_some() {
        return run_killed_member().await;
    }
    let zk = shared_ensemble();
    let path = unique_path("killed");
    let n = 24;
    let observer = connect(&zk.connect_string(), CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let survivor = connect(&zk.connect_string(), CALM).await;
    fleet
        .join(&partitions(&survivor, &path, n), "survivor")
        .await;
    let mut child = spawn_child(
        "a_killed_member_s_items_move_only_after_its_session_expires",
        "victim",
        &[
            ("ZK", zk.connect_string()),
            ("PARTITION_PATH", path.clone()),
            ("ITEMS", n.to_string()),
        ],
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let before = settled(&view, 2, SETTLING).await;
    let victims: Vec<usize> = (0..n).filter(|&i| before[i] == "victim").collect();
    let mut announced = 0;
    while announced < victims.len() {
        let line = within(SETTLING, "the child announces its items", lines.next_line())
            .await
            .unwrap()
            .unwrap();
        // libtest may print its own "test name ... " in front of ours on the same line.
        if line.contains("ACQUIRED ") {
            announced += 1;
        }
    }
    let announced_at = Instant::now();
    // The victim's party node: its deletion is the expiry of its session.
    let status = view.status().await.unwrap();
    let victim_node = status
        .members
        .iter()
        .find(|m| m.id == "victim")
        .unwrap()
        .node
        .clone();
    let (_, deleted) = observer
        .client()
        .check_and_watch_stat(&victim_node)
        .await
        .unwrap();
    let expiry = tokio::spawn(async move {
        deleted.changed().await;
        Instant::now()
    });
    child.start_kill().unwrap();
    let killed = Instant::now();
    let after = fleet.settled(&view, 1, SETTLING).await;
    assert!(after.iter().all(|o| o == "survivor"));
    let expired = within(SETTLING, "the victim's session expires", expiry)
        .await
        .unwrap();
    // The ensemble shows the grants before the survivor's workers have them.
    eventually(
        SETTLING,
        "the survivor's workers have every moved item",
        || async {
            let history = fleet.history();
            victims.iter().all(|&item| {
                history
                    .iter()
                    .any(|i| i.item == item && i.granted > announced_at)
            })
        },
    )
    .await;
    let history = fleet.history();
    let regrants: Vec<Instant> = history
        .iter()
        .filter(|i| victims.contains(&i.item) && i.granted > announced_at)
        .map(|i| i.granted)
        .collect();
    assert_eq!(regrants.len(), victims.len());
    let first = *regrants.iter().min().unwrap();
    let last = *regrants.iter().max().unwrap();
    eprintln!(
        "killed: session expired {:?} after the kill, its items granted elsewhere {:?} to {:?} after",
        expired - killed,
        first - killed,
        last - killed
    );
    assert!(
        first + Duration::from_millis(20) >= expired,
        "an item of the killed member was granted {:?} before its session expired",
        expired - first
    );
    assert!(last - killed < 2 * T + SETTLE + Duration::from_secs(2));
    fleet.assert_one_owner_at_a_time();
}

/// A restarted member that comes back with its id before its old session expired is given
/// its own items back, and the others move nothing (Kafka's static membership): its new
/// node is the same member to the assignment, and its old items wait for the old session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_back_with_its_id_gets_its_items_and_nobody_else_moves() {
    let zk = shared_ensemble();
    let path = unique_path("static");
    let n = 30;
    let observer = connect(&zk.connect_string(), CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let steady = connect(&zk.connect_string(), CALM).await;
    fleet.join(&partitions(&steady, &path, n), "steady").await;
    let proxy = zk.proxy().await.unwrap();
    let first_life = connect(&proxy.connect_string(), T).await;
    fleet
        .join(&partitions(&first_life, &path, n), "phoenix")
        .await;
    let before = fleet.settled(&view, 2, SETTLING).await;
    let steady_grants = fleet.acquired("steady");

    proxy.blackhole();
    let second_life = connect(&zk.connect_string(), CALM).await;
    let again = Fleet::new();
    again
        .join(&partitions(&second_life, &path, n), "phoenix")
        .await;
    // Its old items wait for the old session to expire (the old and the new node are one
    // member to the assignment, so the party looks unchanged to the others).
    let its_own = before.iter().filter(|o| *o == "phoenix").count();
    eventually(
        SETTLING,
        "the new phoenix holds the old one's items",
        || async { again.acquired("phoenix") == its_own },
    )
    .await;
    let after = settled(&view, 2, SETTLING).await;
    assert_eq!(after, before, "every item back where it was");
    assert_eq!(
        fleet.acquired("steady"),
        steady_grants,
        "the steady member was granted nothing new"
    );
    fleet.assert_one_owner_at_a_time();
    again.assert_one_owner_at_a_time();
}

/// Bad input is refused before anything is created: items that cannot name a node, an id
/// that cannot be stored.
#[tokio::test]
async fn bad_items_and_ids_are_refused_and_leave_nothing() {
    let zk = shared_ensemble();
    let path = unique_path("bad");
    let s = connect(&zk.connect_string(), CALM).await;
    let err = s
        .partitions(&path, ["ok", "a/b"])
        .join("m")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("contains '/'"), "{err}");
    let err = s.partitions(&path, 4).join("").await.unwrap_err();
    assert!(err.to_string().contains("member id"), "{err}");
    let err = s.partitions("relative", 4).join("m").await.unwrap_err();
    assert!(matches!(err, zkfence::Error::InvalidPath { .. }), "{err}");
    assert!(children(&s, &path).await.is_empty());
}

/// A member's `owned()` lists what its workers hold, and follows releases.
#[tokio::test]
async fn owned_lists_what_the_member_holds() {
    let zk = shared_ensemble();
    let path = unique_path("owned");
    let s = connect(&zk.connect_string(), CALM).await;
    let mut member = partitions(&s, &path, 3).join("solo").await.unwrap();
    let mut leases = HashMap::new();
    while leases.len() < 3 {
        match within(SETTLING, "grants", member.next())
            .await
            .unwrap()
            .unwrap()
        {
            OwnershipChange::Acquired { item, lease } => {
                leases.insert(item.index(), lease);
            }
            other => panic!("{other:?}"),
        }
    }
    let owned: Vec<usize> = member.owned().iter().map(|i| i.index()).collect();
    assert_eq!(owned, [0, 1, 2]);
    member.leave();
    for _ in 0..3 {
        match within(SETTLING, "release requests", member.next())
            .await
            .unwrap()
            .unwrap()
        {
            OwnershipChange::ReleaseRequested { item, .. } => {
                leases
                    .remove(&item.index())
                    .unwrap()
                    .release()
                    .await
                    .unwrap();
            }
            other => panic!("{other:?}"),
        }
    }
    let mut released = 0;
    while let Some(change) = within(SETTLING, "the stream ends", member.next()).await {
        assert!(matches!(change.unwrap(), OwnershipChange::Released { .. }));
        released += 1;
    }
    assert_eq!(released, 3);
    assert!(member.owned().is_empty());
}

/// A member whose server is cut off from its peers (the server stays up and keeps its
/// client connections, and goes on answering reads for `syncLimit × tickTime`): for every
/// item it holds, it hears `Lost` before another member is granted that item. When the
/// server rejoins, the member's session has expired; it joins again on a new one and the
/// items settle over all three members again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_server_is_cut_off_from_its_peers_loses_each_item_before_it_moves() {
    trace();
    let zk = zkfence_testcontainers::Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        // The cut-off follower answers reads for 3 s, longer than the session timeout.
        .sync_limit(15)
        .peer_links(true)
        .start()
        .await
        .expect("start an ensemble with peer links");
    let leader = zk.wait_for_leader(Duration::from_secs(20)).await.unwrap();
    let follower = (0..zk.len()).find(|&i| i != leader).unwrap();
    let others: Vec<usize> = (0..zk.len()).filter(|&i| i != follower).collect();
    let others_connect = format!(
        "{},{}",
        zk.client_addr(others[0]),
        zk.client_addr(others[1])
    );
    let path = unique_path("isolated");
    let n = 30;
    let observer = connect(&others_connect, CALM).await;
    let view = partitions(&observer, &path, n);
    let fleet = Fleet::new();
    let cut_off = connect(&zk.node_connect_string(follower), T).await;
    fleet.join(&partitions(&cut_off, &path, n), "cut-off").await;
    let s1 = connect(&others_connect, CALM).await;
    let s2 = connect(&others_connect, CALM).await;
    fleet.join(&partitions(&s1, &path, n), "p1").await;
    fleet.join(&partitions(&s2, &path, n), "p2").await;
    let before = fleet.settled(&view, 3, SETTLING).await;
    let held: Vec<usize> = (0..n).filter(|&i| before[i] == "cut-off").collect();
    assert!(!held.is_empty());

    zk.isolate(follower);
    let cut = Instant::now();
    let after = fleet.settled(&view, 2, SETTLING).await;
    assert_eq!(after, assigned(&["p1", "p2"], n));
    // The ensemble shows the grants before the members' workers have them.
    eventually(SETTLING, "the workers have every moved item", || async {
        let history = fleet.history();
        held.iter()
            .all(|&item| history.iter().any(|i| i.item == item && i.granted > cut))
    })
    .await;
    let history = fleet.history();
    let mut worst = Duration::MAX;
    for &item in &held {
        let told = |what: &str| -> String {
            let intervals: Vec<String> = history
                .iter()
                .filter(|i| i.item == item)
                .map(|i| {
                    format!(
                        "{} {} from {:?} to {:?} ({:?})",
                        i.member,
                        i.token,
                        i.granted
                            .checked_duration_since(cut)
                            .map(|d| d.as_secs_f64())
                            .unwrap_or_else(|| -(cut - i.granted).as_secs_f64()),
                        i.ended.map(|e| e
                            .checked_duration_since(cut)
                            .map(|d| d.as_secs_f64())
                            .unwrap_or_else(|| -(cut - e).as_secs_f64())),
                        i.lost
                    )
                })
                .collect();
            format!("item {item}: {what}; its history (s from the cut): {intervals:#?}")
        };
        let old = history
            .iter()
            .filter(|i| i.item == item && i.member == "cut-off")
            .max_by_key(|i| i.granted)
            .unwrap_or_else(|| panic!("{}", told("never held by the cut-off member")));
        let new = history
            .iter()
            .filter(|i| i.item == item && i.granted > cut)
            .min_by_key(|i| i.granted)
            .unwrap_or_else(|| panic!("{}", told("not granted after the cut")));
        let lost_at = old
            .ended
            .unwrap_or_else(|| panic!("item {item}: the cut-off member never heard Lost"));
        // The lease clock lapses first; a process starved for over half a session timeout
        // (a loaded machine) may hear of the expiry first instead: the order below is what
        // matters.
        assert!(
            matches!(
                old.lost,
                Some(LossReason::ClockLapsed | LossReason::SessionExpired)
            ),
            "{}",
            told("the cut-off member's lease did not end as lost")
        );
        assert!(
            lost_at < new.granted,
            "{}",
            told("granted elsewhere before the cut-off member heard Lost")
        );
        worst = worst.min(new.granted - lost_at);
    }
    eprintln!(
        "server cut off: {} items each lost at least {worst:?} before granted elsewhere",
        held.len()
    );

    zk.heal_all_peers();
    zk.wait_serving(follower, Duration::from_secs(30))
        .await
        .expect("the follower rejoins");
    let healed = fleet.settled(&view, 3, Duration::from_secs(60)).await;
    assert_eq!(
        healed, before,
        "the member is back under its id, with its items"
    );
    fleet.assert_one_owner_at_a_time();
}

/// Dropping a member and its leases lets `Session::close` end the session at once: nothing
/// of the member keeps a handle on the session behind the caller's back.
#[tokio::test]
async fn closing_the_session_after_dropping_a_member_is_prompt() {
    let zk = shared_ensemble();
    let path = unique_path("close");
    let s = connect(&zk.connect_string(), CALM).await;
    let mut member = partitions(&s, &path, 5).join("closer").await.unwrap();
    let mut leases = Vec::new();
    while leases.len() < 5 {
        if let OwnershipChange::Acquired { lease, .. } = within(SETTLING, "grants", member.next())
            .await
            .unwrap()
            .unwrap()
        {
            leases.push(lease);
        }
    }
    drop(leases);
    drop(member);
    let closing = Instant::now();
    s.close().await;
    let took = closing.elapsed();
    assert!(
        took < CALM / 2,
        "close took {took:?}: something kept the session"
    );
}
