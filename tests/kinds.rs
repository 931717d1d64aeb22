//! Two kinds of lock on one path (issue 44 item 1): a semaphore keeps its nodes under
//! `locks/` and `leases/`, a lock, a read/write lock and an election beside them, so they
//! would not exclude each other there: whichever kind comes second is refused with
//! `Error::KindConflict` naming both, and nothing is left behind. A plain lock and a
//! read/write lock share one queue and do exclude each other (a plain lock is a writer to
//! the readers), as `zkfence exec` and `exec --shared` rely on. The check costs no request
//! on the hot path: an uncontended plain lock's cycle stays one create, one listing and one
//! delete.

mod common;

use std::time::Duration;

use common::*;
use zkfence::{Error, LockKind, Session};

const T: Duration = Duration::from_secs(4);

async fn session() -> Session {
    connect(&shared_ensemble().connect_string(), T).await
}

/// Asserts `err` is a kind conflict on `path` between `ours` and `theirs`.
fn assert_conflict(err: &Error, path: &str, ours: LockKind, theirs: LockKind) {
    match err {
        Error::KindConflict {
            path: p,
            ours: o,
            theirs: t,
            node,
        } => {
            assert_eq!((p.as_str(), *o, *t), (path, ours, theirs), "{err}");
            assert!(node.starts_with(path), "names a node under the path: {err}");
            let text = err.to_string();
            assert!(
                text.contains(&ours.to_string()) && text.contains(&theirs.to_string()),
                "the message names both kinds: {text}"
            );
        }
        other => panic!("expected a kind conflict between {ours} and {theirs}, got: {other}"),
    }
}

#[tokio::test]
async fn a_semaphore_is_refused_where_a_plain_lock_holds() {
    let dir = unique_path("plain-then-semaphore");
    let s = session().await;
    let held = s.lock(&dir).acquire().await.unwrap();
    let err = s.semaphore(&dir, 2).try_acquire().await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::Semaphore, LockKind::Lock);
    let err = s.semaphore(&dir, 2).acquire_timeout(T).await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::Semaphore, LockKind::Lock);
    // Nothing of the semaphore's was left: no lease, no turn.
    assert!(children(&s, &format!("{dir}/leases")).await.is_empty());
    assert!(children(&s, &format!("{dir}/locks")).await.is_empty());
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_plain_lock_is_refused_where_a_semaphore_holds() {
    let dir = unique_path("semaphore-then-plain");
    let s = session().await;
    let a = s.semaphore(&dir, 2).acquire().await.unwrap();
    let b = s.semaphore(&dir, 2).acquire().await.unwrap();
    let err = s.lock(&dir).try_acquire().await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::Lock, LockKind::Semaphore);
    let err = s.lock(&dir).acquire_timeout(T).await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::Lock, LockKind::Semaphore);
    let err = s.write_lock(&dir).acquire_timeout(T).await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::ReadWrite, LockKind::Semaphore);
    let err = s.election(&dir).campaign("c").await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::Election, LockKind::Semaphore);
    // The refused ones left no node beside the semaphore's directories.
    let left: Vec<String> = children(&s, &dir)
        .await
        .into_iter()
        .filter(|c| c != "locks" && c != "leases")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test]
async fn plain_and_read_write_locks_exclude_each_other() {
    let dir = unique_path("plain-and-rw");
    let s = session().await;
    let reader = s.read_lock(&dir).acquire().await.unwrap();
    assert!(
        s.lock(&dir).try_acquire().await.unwrap().is_none(),
        "a plain lock is a writer: it waits for the reader"
    );
    reader.release().await.unwrap();
    let plain = s.lock(&dir).acquire().await.unwrap();
    assert!(
        s.read_lock(&dir).try_acquire().await.unwrap().is_none(),
        "a reader waits for a plain holder"
    );
    plain.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_sees_another_kind_arrive_first_is_refused_not_granted() {
    // Both kinds race: a plain lock's create lands while a semaphore holds its turn. The
    // one that lists second sees the other; here the plain lock waits behind a plain holder
    // and a semaphore tries the path meanwhile: the semaphore is refused, and the waiter is
    // granted normally when the holder leaves.
    let dir = unique_path("race");
    let s = session().await;
    let holder = s.lock(&dir).acquire().await.unwrap();
    let l = s.lock(&dir);
    let waiter = tokio::spawn(async move { l.acquire().await });
    until_children(&s, &dir, 2).await;
    let err = s.semaphore(&dir, 3).acquire_timeout(T).await.unwrap_err();
    assert_conflict(&err, &dir, LockKind::Semaphore, LockKind::Lock);
    holder.release().await.unwrap();
    let granted = within(T, "the waiter's grant", waiter).await.unwrap();
    granted.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn an_uncontended_plain_cycle_is_still_three_requests() {
    let dir = unique_path("three-requests");
    let s = session().await;
    // The first acquire may make the directory; count a warm cycle.
    s.lock(&dir)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = s.metrics();
    s.lock(&dir)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let after = s.metrics();
    let used = (
        after.creates - before.creates,
        after.listings - before.listings,
        after.deletes - before.deletes,
    );
    assert_eq!(used, (1, 1, 1), "(creates, listings, deletes) of one cycle");
}
