//! The queue's other admission rules: a read/write lock, and a semaphore (n holders).

mod common;

use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use zkfence::Session;

const T: Duration = Duration::from_secs(4);

async fn session() -> Session {
    connect(&shared_ensemble().connect_string(), T).await
}

/// Asserts that `task` (an acquire) is not granted within a window of several round trips:
/// a wrong grant needs a notification and a round trip or two, which this leaves time for.
async fn still_waiting<T: std::fmt::Debug>(task: &mut tokio::task::JoinHandle<T>, what: &str) {
    if let Ok(done) = tokio::time::timeout(Duration::from_millis(500), task).await {
        panic!("{what}: granted too early: {done:?}");
    }
}

#[tokio::test]
async fn readers_share_writers_exclude_and_queue_order_is_kept() {
    let dir = unique_path("rw");
    let s = session().await;
    let r1 = s.read_lock(&dir).acquire().await.unwrap();
    let r2 = s
        .read_lock(&dir)
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("readers share");
    assert!(
        r1.path().contains("__READ__"),
        "Curator's read-lock node name: {}",
        r1.path()
    );

    // A writer waits for both readers.
    let w = s.write_lock(&dir);
    let writer = tokio::spawn(async move { w.acquire().await.unwrap() });
    eventually(Duration::from_secs(5), "writer queued", || async {
        children(&s, &dir).await.len() == 3
    })
    .await;
    // A reader behind the waiting writer waits too: writers do not starve.
    let r3 = s.read_lock(&dir);
    let late_reader = tokio::spawn(async move { r3.acquire().await.unwrap() });
    eventually(Duration::from_secs(5), "late reader queued", || async {
        children(&s, &dir).await.len() == 4
    })
    .await;
    assert!(
        s.read_lock(&dir).try_acquire().await.unwrap().is_none(),
        "a writer is queued"
    );

    let (r2_name, writer_name) = {
        let queue = queue_order(children(&s, &dir).await);
        (queue[1].clone(), queue[2].clone())
    };
    let mut writer = writer;
    let mut late_reader = late_reader;
    r1.release().await.unwrap();
    // Every contender is on this session, so once this synced listing is answered, r1's
    // deletion notification has arrived; a writer that wrongly watched r1 holds within a
    // round trip of it.
    assert_eq!(
        queue_order(children(&s, &dir).await)[..2],
        [r2_name.clone(), writer_name.clone()],
        "r1 is gone, r2 still reads"
    );
    still_waiting(&mut writer, "the writer, while r2 reads").await;
    r2.release().await.unwrap();
    let w = within(Duration::from_secs(5), "the writer's grant", writer)
        .await
        .unwrap();
    assert!(w.path().contains("__WRIT__"));
    assert_eq!(
        queue_order(children(&s, &dir).await)[0],
        writer_name,
        "the server's queue has the writer first"
    );
    still_waiting(
        &mut late_reader,
        "the reader behind the writer, while it writes",
    )
    .await;
    let wt = w.token();
    w.release().await.unwrap();
    let r3 = within(
        Duration::from_secs(5),
        "the late reader's grant",
        late_reader,
    )
    .await
    .unwrap();
    assert!(r3.token() > wt);
    // A plain lock on the same path counts as a writer.
    let plain = s.lock(&dir);
    assert!(plain.try_acquire().await.unwrap().is_none());
    r3.release().await.unwrap();
    plain
        .try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_admits_at_most_its_permits() {
    let dir = unique_path("semaphore");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = vec![];
    for _ in 0..6 {
        let s = session().await;
        let (dir, inside, most) = (dir.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let sem = s.semaphore(&dir, 3);
            for _ in 0..15 {
                let permit = sem.acquire().await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Hold across a round trip so holders overlap.
                permit.renew().await.unwrap();
                // Work long enough for others to get a permit meanwhile (a turn hand-over
                // costs two writes).
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within(Duration::from_secs(60), "the semaphore's users finish", t)
            .await
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once with 3 permits");
    assert!(most >= 2, "permits were never shared ({most})");
}

#[tokio::test]
async fn any_holders_release_frees_a_permit_for_the_next_waiter() {
    let dir = unique_path("semaphore-any");
    let s = session().await;
    let first = s.semaphore(&dir, 2).acquire().await.unwrap();
    let second = s.semaphore(&dir, 2).acquire().await.unwrap();
    assert!(
        s.semaphore(&dir, 2).try_acquire().await.unwrap().is_none(),
        "no permit is free"
    );
    let third = s.semaphore(&dir, 2);
    let waiting = tokio::spawn(async move { third.acquire().await });
    eventually(
        Duration::from_secs(5),
        "third waits for a permit",
        || async { children(&s, &format!("{dir}/leases")).await.len() == 3 },
    )
    .await;
    // The *younger* holder leaves: a waiter watching only the oldest would miss this.
    second.release().await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    assert!(third.token() > first.token());
    let holders = s.semaphore(&dir, 2).holders().await.unwrap();
    assert_eq!(holders.len(), 2);
    assert_eq!(holders[0].token, first.token());
    assert_eq!(holders[1].token, third.token());
}

#[tokio::test]
async fn a_semaphore_timeout_leaves_nothing_behind() {
    let dir = unique_path("semaphore-timeout");
    let s = session().await;
    let held = s.semaphore(&dir, 1).acquire().await.unwrap();
    let err = s
        .semaphore(&dir, 1)
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, zkfence::Error::Timeout { path, .. } if *path == dir),
        "{err}"
    );
    assert_eq!(
        children(&s, &format!("{dir}/leases")).await.len(),
        1,
        "only the holder's lease"
    );
    eventually(
        Duration::from_secs(5),
        "the turn is handed back",
        || async { children(&s, &format!("{dir}/locks")).await.is_empty() },
    )
    .await;
    held.release().await.unwrap();
    s.semaphore(&dir, 1)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn waiters_for_permits_are_not_a_herd() {
    let dir = unique_path("semaphore-herd");
    let holder_session = session().await;
    let permits = [
        holder_session.semaphore(&dir, 2).acquire().await.unwrap(),
        holder_session.semaphore(&dir, 2).acquire().await.unwrap(),
    ];
    let waiters: Vec<Session> = {
        let mut v = vec![];
        for _ in 0..6 {
            v.push(session().await);
        }
        v
    };
    for w in &waiters {
        let sem = w.semaphore(&dir, 2);
        tokio::spawn(async move {
            let p = sem.acquire().await.unwrap();
            std::future::pending::<()>().await;
            drop(p);
        });
    }
    // One acquirer waits for a permit, five wait for their turn.
    eventually(Duration::from_secs(10), "all waiting", || async {
        waiters.iter().map(|w| w.metrics().watches).sum::<u64>() >= 6
    })
    .await;
    let wakeups = || waiters.iter().map(|w| w.metrics().wakeups).sum::<u64>();
    let before = wakeups();
    let [p0, _p1] = permits;
    p0.release().await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the next waiter holds and the next turn waits",
        || async {
            children(&holder_session, &format!("{dir}/leases"))
                .await
                .len()
                == 3
                && waiters.iter().map(|w| w.metrics().watches).sum::<u64>() >= 7
        },
    )
    .await;
    for w in &waiters {
        w.client().sync("/").await.unwrap();
    }
    // The permit waiter wakes and takes the permit; handing on its turn wakes the next one.
    assert_eq!(
        wakeups() - before,
        2,
        "a release wakes the permit waiter and the next turn, nobody else"
    );
}

/// Issue 21 item 6: every permit records the limit; a different one is refused before
/// anything is created, and the same one is still admitted.
#[tokio::test]
async fn a_semaphore_refuses_a_different_number_of_permits() {
    let s = session().await;
    let dir = unique_path("sem-limit");
    let first = s.semaphore(&dir, 2).with_id("two").acquire().await.unwrap();
    let leases = format!("{dir}/leases");
    let before = children(&s, &leases).await;
    let err = s.semaphore(&dir, 3).try_acquire().await.unwrap_err();
    match &err {
        zkfence::Error::PermitsMismatch {
            path,
            ours: 3,
            theirs: 2,
            holder,
        } => {
            assert_eq!(path, &dir);
            assert_eq!(holder.owner.id.as_deref(), Some("two"));
            assert_eq!(holder.owner.permits, Some(2));
        }
        other => panic!("expected PermitsMismatch, got {other:?}"),
    }
    assert!(err.to_string().contains("limit 2"), "{err}");
    let err = s
        .semaphore(&dir, 1)
        .acquire_timeout(Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(err, zkfence::Error::PermitsMismatch { ours: 1, .. }),
        "{err}"
    );
    assert_eq!(children(&s, &leases).await, before, "nothing was created");
    let second = s.semaphore(&dir, 2).try_acquire().await.unwrap();
    assert!(second.is_some(), "the same limit is admitted");
    drop(second);
    first.release().await.unwrap();
}
