//! Server-to-server partitions (`peer_links`, `isolate`): a server cut off from its peers
//! keeps its clients connected for a while, answers reads from its own (stale) tree but no
//! `sync`, then drops them; the others go on; after healing it rejoins.

mod common;

use std::time::{Duration, Instant};

use common::{connect, within};
use zkfence_testcontainers::Ensemble;
use zookeeper_client::{Acls, CreateMode, SessionState};

const TICK: Duration = Duration::from_millis(200);
const SYNC_LIMIT: u32 = 10;
/// `syncLimit × tickTime`: how long a follower goes on without its leader.
const SYNC_WINDOW: Duration = Duration::from_millis(200 * SYNC_LIMIT as u64);

async fn peer_linked_ensemble() -> Ensemble {
    Ensemble::builder()
        .nodes(3)
        .tick_time(TICK)
        .sync_limit(SYNC_LIMIT)
        .peer_links(true)
        .start()
        .await
        .unwrap()
}

/// Polls `mode` of node `i` until `want(mode)` holds; returns whether it did in time.
async fn mode_becomes(
    zk: &Ensemble,
    i: usize,
    timeout: Duration,
    want: impl Fn(Option<&str>) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if want(zk.mode(i).await.as_deref()) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until some node other than `not` reports `Mode: leader`; returns it.
async fn leader_other_than(zk: &Ensemble, not: usize, timeout: Duration) -> Option<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        for i in (0..zk.len()).filter(|&i| i != not) {
            if zk.mode(i).await.as_deref() == Some("leader") {
                return Some(i);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_follower_answers_reads_not_syncs_then_drops_its_clients_and_rejoins() {
    let zk = peer_linked_ensemble().await;
    let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    let f = (0..3).find(|&i| i != leader).unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != f).collect();
    let majority_cs = others
        .iter()
        .map(|&i| zk.node_connect_string(i))
        .collect::<Vec<_>>()
        .join(",");

    let on_f = connect(&zk.node_connect_string(f), Duration::from_secs(4)).await;
    let on_majority = connect(&majority_cs, Duration::from_secs(4)).await;
    on_f.create("/p", b"before", &persistent()).await.unwrap();
    on_f.create(
        "/p/eph",
        b"",
        &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
    )
    .await
    .unwrap();
    // The follower has applied its own write once the create returned; the majority too.
    on_majority.sync("/p").await.unwrap();
    let mut f_state = on_f.state_watcher();

    zk.isolate(f);
    let cut = Instant::now();
    assert_eq!(zk.isolated(), [f]);

    // The other two still form a quorum and take writes.
    within(
        Duration::from_secs(5),
        "a write on the majority side",
        on_majority.set_data("/p", b"after", None),
    )
    .await
    .expect("the majority serves writes while a follower is isolated");

    // A read is answered by the follower from its own tree: the stale value. (Sent before
    // the sync below: the server answers one session's requests in order, so a read behind
    // a pending sync would wait with it.)
    let (data, _) = within(
        Duration::from_secs(5),
        "a read on the isolated follower",
        on_f.get_data("/p"),
    )
    .await
    .expect("the isolated follower answers reads");
    let read_at = cut.elapsed();
    assert_eq!(
        data, b"before",
        "the isolated follower cannot know the new value"
    );
    assert!(
        read_at < SYNC_WINDOW,
        "read answered {read_at:?} after the cut, not within syncLimit × tick"
    );
    // A sync from the follower's client needs the leader: it does not complete (it fails
    // when the follower drops its clients, asserted below).
    let sync = tokio::spawn({
        let on_f = on_f.clone();
        async move { on_f.sync("/p").await }
    });

    // Then the follower gives up on its leader and drops its clients.
    let dropped = within(
        Duration::from_secs(20),
        "the follower drops its clients",
        async {
            loop {
                if f_state.changed().await != SessionState::SyncConnected {
                    return cut.elapsed();
                }
            }
        },
    )
    .await;
    assert!(
        dropped >= SYNC_WINDOW / 2,
        "the follower dropped its clients only {dropped:?} after the cut (syncLimit × tick = \
         {SYNC_WINDOW:?})"
    );
    let synced = within(Duration::from_secs(10), "the pending sync ends", sync)
        .await
        .unwrap();
    assert!(
        synced.is_err(),
        "the sync of an isolated follower succeeded"
    );
    assert!(
        mode_becomes(&zk, f, Duration::from_secs(10), |m| m.is_none()).await,
        "the isolated follower still serves"
    );
    assert!(
        leader_other_than(&zk, f, Duration::from_secs(10))
            .await
            .is_some(),
        "the majority lost its leader"
    );
    // The leader heard no more of the follower's session reports: it expires the session
    // of the follower's client, whose ephemeral node goes.
    within(
        Duration::from_secs(20),
        "the isolated client's ephemeral node is removed",
        async {
            while on_majority.check_stat("/p/eph").await.unwrap().is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;

    // Heal: it rejoins as a follower and serves the current data.
    zk.heal_peers(f);
    assert!(zk.isolated().is_empty());
    assert!(
        mode_becomes(&zk, f, Duration::from_secs(30), |m| m == Some("follower")).await,
        "the healed node did not rejoin as a follower:\n{}",
        zk.log_tail(20)
    );
    let again = connect(&zk.node_connect_string(f), Duration::from_secs(4)).await;
    again.sync("/p").await.unwrap();
    let (data, _) = again.get_data("/p").await.unwrap();
    assert_eq!(data, b"after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_leader_is_replaced_by_the_other_two_and_rejoins_as_follower() {
    let zk = peer_linked_ensemble().await;
    let old = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();

    zk.isolate(old);
    let new = leader_other_than(&zk, old, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no new leader among the others:\n{}", zk.log_tail(20)));
    assert_ne!(new, old);
    // The old leader lost its quorum: it stops serving.
    assert!(
        mode_becomes(&zk, old, Duration::from_secs(10), |m| m != Some("leader")).await,
        "the isolated leader still claims to lead"
    );
    let majority_cs = (0..3)
        .filter(|&i| i != old)
        .map(|i| zk.node_connect_string(i))
        .collect::<Vec<_>>()
        .join(",");
    let client = connect(&majority_cs, Duration::from_secs(4)).await;
    within(
        Duration::from_secs(10),
        "a write under the new leader",
        client.create("/new-leader", b"x", &persistent()),
    )
    .await
    .unwrap();

    zk.heal_all_peers();
    assert!(
        mode_becomes(&zk, old, Duration::from_secs(30), |m| m == Some("follower")).await,
        "the old leader did not rejoin as a follower:\n{}",
        zk.log_tail(20)
    );
    let on_old = connect(&zk.node_connect_string(old), Duration::from_secs(4)).await;
    on_old.sync("/new-leader").await.unwrap();
    assert_eq!(on_old.get_data("/new-leader").await.unwrap().0, b"x");
}

/// ZooKeeper keeps one election connection per pair, opened by the higher id: when a lower
/// id connects first, the higher one drops that connection and dials back to the address
/// the lower one *advertised* in its first message, its real one. Unless the link rewrites
/// that message, the dial-back skips the proxy, and `isolate` leaves that election link
/// up: an isolated leader goes on winning elections it cannot serve (seen in CI as "no new
/// leader among the others" for 30 s). A restarted node dials every peer first, so each
/// higher peer must dial it back through its proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_connections_dialled_back_pass_through_the_peer_links() {
    let zk = peer_linked_ensemble().await;
    let leader = zk.wait_for_leader(Duration::from_secs(10)).await.unwrap();
    // The lowest follower: the higher ids dial it back, and being no leader it has no
    // quorum connections coming in, so its incoming links carry election traffic only.
    let low = (0..3).find(|&i| i != leader).unwrap();
    zk.restart(low).await.unwrap();
    for high in (low + 1)..3 {
        let link = zk.peer_link(high, low);
        let deadline = Instant::now() + Duration::from_secs(10);
        while link.connection_count() != 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            link.connection_count(),
            1,
            "node {high}'s election connection to the restarted node {low} does not pass \
             its peer link"
        );
    }
}

#[tokio::test]
async fn peer_linked_ensemble_serves_like_a_direct_one() {
    let zk = peer_linked_ensemble().await;
    assert!(zk.has_peer_links());
    assert!(zk.isolated().is_empty());
    // Every node names the others at proxies, itself at its own ports.
    let cfg = std::fs::read_to_string(zk.dir().join("node1/zoo.cfg")).unwrap();
    let servers: Vec<&str> = cfg.lines().filter(|l| l.starts_with("server.")).collect();
    assert_eq!(servers.len(), 3, "{cfg}");
    assert!(
        servers[0].contains("=127.") && servers[1].contains("=127.0.0.1:"),
        "{cfg}"
    );
    let client = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    client.create("/x", b"1", &persistent()).await.unwrap();
    for i in 0..3 {
        let c = connect(&zk.node_connect_string(i), Duration::from_secs(4)).await;
        c.sync("/x").await.unwrap();
        assert_eq!(c.get_data("/x").await.unwrap().0, b"1");
    }
}

#[tokio::test]
#[should_panic(expected = "peer_links(true)")]
async fn isolate_without_peer_links_says_what_to_enable() {
    let zk = Ensemble::builder().nodes(1).start().await.unwrap();
    assert!(!zk.has_peer_links());
    zk.isolate(0);
}
