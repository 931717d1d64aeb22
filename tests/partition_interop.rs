//! A partition set shared with Python Kazoo's `SetPartitioner` (Debian's `python3-kazoo`):
//! zkfence members with `kazoo_compatible()` and a real Kazoo member divide one set,
//! each item held by one of them at a time, as members join and leave.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fleet::Fleet;
use common::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use zkfence::{Assignment, Items, Partitions, Session};

/// A Kazoo member: a `SetPartitioner` on `path` over `range(n)`, reporting on stdout
/// `ACQUIRED i,j,...` once it holds its share, `RELEASING` before it lets go of it (it stops
/// acting then) and `RELEASED` after; `finish` on stdin makes it leave.
const DRIVER: &str = r#"
import sys, threading
from kazoo.client import KazooClient
hosts, path, n, ident = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start()
p = zk.SetPartitioner(path, set=range(n), identifier=ident, time_boundary=0.5)
stop = threading.Event()
def commands():
    for line in sys.stdin:
        if line.strip() == "finish":
            stop.set()
            return
threading.Thread(target=commands, daemon=True).start()
held = False
while not stop.is_set():
    if p.failed:
        print("FAILED", flush=True)
        sys.exit(1)
    elif p.release:
        if held:
            print("RELEASING", flush=True)
        p.release_set()
        if held:
            print("RELEASED", flush=True)
        held = False
    elif p.acquired:
        if not held:
            print("ACQUIRED " + ",".join(str(i) for i in p), flush=True)
            held = True
        p.state_change_event.wait(0.1)
        p.state_change_event.clear()
    elif p.allocating:
        p.wait_for_acquire(0.2)
print("RELEASING", flush=True)
p.finish()
print("FINISHED", flush=True)
zk.stop()
"#;

/// What the Kazoo member said, as intervals per item on this process's clock.
#[derive(Default)]
struct KazooHistory {
    /// (item, from, to): `to` is `None` while held.
    intervals: Vec<(usize, Instant, Option<Instant>)>,
    holding: Vec<usize>,
    finished: bool,
}

struct KazooMember {
    child: Child,
    history: Arc<Mutex<KazooHistory>>,
}

impl KazooMember {
    fn start(python: &str, path: &str, n: usize, ident: &str) -> KazooMember {
        let mut child = Command::new(python)
            .args([
                "-c",
                DRIVER,
                &shared_ensemble().connect_string(),
                path,
                &n.to_string(),
                ident,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run python3");
        let history = Arc::new(Mutex::new(KazooHistory::default()));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let recorded = history.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let now = Instant::now();
                let mut h = recorded.lock().unwrap();
                if let Some(items) = line.strip_prefix("ACQUIRED ") {
                    let items: Vec<usize> = items
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.parse().unwrap())
                        .collect();
                    for &item in &items {
                        h.intervals.push((item, now, None));
                    }
                    h.holding = items;
                } else if line == "RELEASING" {
                    for interval in h.intervals.iter_mut().filter(|i| i.2.is_none()) {
                        interval.2 = Some(now);
                    }
                    h.holding.clear();
                } else if line == "FINISHED" {
                    h.finished = true;
                } else if line == "FAILED" {
                    panic!("the Kazoo member failed");
                }
            }
        });
        KazooMember { child, history }
    }

    fn holding(&self) -> Vec<usize> {
        self.history.lock().unwrap().holding.clone()
    }

    async fn finish(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"finish\n").await.unwrap();
        stdin.flush().await.unwrap();
    }
}

/// The Kazoo identifiers of the party's members now (what both sides divide by).
async fn identifiers(view: &Partitions) -> Vec<String> {
    view.status()
        .await
        .unwrap()
        .members
        .into_iter()
        .map(|m| m.id)
        .collect()
}

/// Waits until every item is held by the member Kazoo's rule gives it to, with `members`
/// in the party and the Kazoo member holding exactly its share; returns the owners' ids.
async fn settled_with_kazoo(
    view: &Partitions,
    kazoo: Option<(&KazooMember, &str)>,
    members: usize,
) -> Vec<String> {
    let n = view.items().len();
    let mut last;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = view.status().await.unwrap();
        let ids: Vec<&str> = status.members.iter().map(|m| m.id.as_str()).collect();
        let expected = Assignment::Kazoo.assign(&ids, &Items::count(n));
        let unsettled = status
            .items
            .iter()
            .filter(|i| i.holder.is_none() || i.moving_to().is_some())
            .count();
        let kazoo_ok = kazoo.map_or(true, |(k, ident)| {
            let mut want: Vec<usize> = (0..n).filter(|&i| expected[i] == Some(ident)).collect();
            want.sort_unstable();
            let mut has = k.holding();
            has.sort_unstable();
            has == want
        });
        if ids.len() == members && unsettled == 0 && kazoo_ok {
            return status
                .items
                .iter()
                .map(|i| i.owner.clone().unwrap())
                .collect();
        }
        last = format!(
            "{} members, {unsettled} unsettled, kazoo holds its share: {kazoo_ok}",
            ids.len()
        );
        assert!(Instant::now() < deadline, "not settled: {last}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// No item was held by two at once: the zkfence workers' intervals and the Kazoo member's.
fn assert_one_owner_at_a_time(fleet: &Fleet, kazoo: &KazooMember) {
    fleet.assert_one_owner_at_a_time();
    let mut by_item: HashMap<usize, Vec<(Instant, Option<Instant>, String)>> = HashMap::new();
    for i in fleet.history() {
        by_item
            .entry(i.item)
            .or_default()
            .push((i.granted, i.ended, i.member));
    }
    for (item, from, to) in &kazoo.history.lock().unwrap().intervals {
        by_item
            .entry(*item)
            .or_default()
            .push((*from, *to, "kazoo".into()));
    }
    for (item, mut intervals) in by_item {
        intervals.sort_by_key(|i| i.0);
        for pair in intervals.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let ended = a.1.unwrap_or_else(|| {
                panic!("item {item}: {} still held it when {} got it", a.2, b.2)
            });
            assert!(
                ended <= b.0,
                "item {item}: {} held it {:?} into {}'s hold",
                a.2,
                ended - b.0,
                b.2
            );
        }
    }
}

fn kazoo_partitions(session: &Session, path: &str, n: usize) -> Partitions {
    session
        .partitions(path, n)
        .kazoo_compatible()
        .settle(Duration::from_millis(300))
}

/// One Kazoo member and zkfence members divide a set of 12 by Kazoo's rule: a zkfence
/// member joins beside Kazoo, a second one joins, Kazoo leaves, and after each change every
/// item is held by the member Kazoo's rule gives it to, each by one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_zkfence_members_divide_one_set() {
    let Some(py) = python_with_kazoo() else {
        return;
    };
    let zk = shared_ensemble();
    let path = unique_path("kazoo-partition");
    let n = 12;
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    let view = kazoo_partitions(&observer, &path, n);

    let mut kazoo = KazooMember::start(py, &path, n, "kazoo-1");
    let alone = settled_with_kazoo(&view, Some((&kazoo, "kazoo-1")), 1).await;
    assert!(alone.iter().all(|o| o == "kazoo-1"));

    let fleet = Fleet::new();
    let s1 = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    fleet.join(&kazoo_partitions(&s1, &path, n), "rust-1").await;
    let two = settled_with_kazoo(&view, Some((&kazoo, "kazoo-1")), 2).await;
    let ids = identifiers(&view).await;
    eprintln!("kazoo and one zkfence member: {ids:?} own {two:?}");
    assert_eq!(two.iter().filter(|o| *o == "kazoo-1").count(), n / 2);

    let s2 = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    fleet.join(&kazoo_partitions(&s2, &path, n), "rust-2").await;
    let three = settled_with_kazoo(&view, Some((&kazoo, "kazoo-1")), 3).await;
    assert_eq!(three.iter().filter(|o| *o == "kazoo-1").count(), n / 3);

    kazoo.finish().await;
    eventually(Duration::from_secs(30), "kazoo leaves", || async {
        kazoo.history.lock().unwrap().finished
    })
    .await;
    let without = settled_with_kazoo(&view, None, 2).await;
    assert!(without.iter().all(|o| o != "kazoo-1"));
    assert_one_owner_at_a_time(&fleet, &kazoo);
}
