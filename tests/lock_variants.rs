//! The queue's shared admission rule: a read/write lock.

mod common;

use std::time::Duration;

use common::*;
use zkfence::Session;

const T: Duration = Duration::from_secs(4);

async fn session() -> Session {
    connect(&shared_ensemble().connect_string(), T).await
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

    r1.release().await.unwrap();
    assert!(!writer.is_finished());
    r2.release().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap();
    assert!(w.path().contains("__WRIT__"));
    assert!(
        !late_reader.is_finished(),
        "the reader must wait for the writer ahead of it"
    );
    let wt = w.token();
    w.release().await.unwrap();
    let r3 = tokio::time::timeout(Duration::from_secs(5), late_reader)
        .await
        .unwrap()
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
