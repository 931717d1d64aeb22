//! A first program against zkfence (issue 44 item 14): what it meets is natural or said where
//! it meets it. A leader task needs only zkfence (`#[zkfence::async_trait]`); a hand-written
//! campaign loop knows what to retry after its session lapsed (`Error::is_retryable`); a
//! fenced write's client error is matched through the re-exported client; a proclaimed value
//! reads as text.

mod common;

use std::time::Duration;

use common::*;
use zkfence::{zookeeper_client as zk, Error, FencedOp, Leadership, SessionOptions};

const T: Duration = Duration::from_secs(2);

struct Once(Option<tokio::sync::oneshot::Sender<String>>);

#[zkfence::async_trait]
impl zkfence::LeaderTask for Once {
    async fn lead(&mut self, leadership: Leadership) -> zkfence::Result<()> {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(leadership.id().to_string());
        }
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_leader_task_needs_only_zkfence() {
    let session = connect(&shared_ensemble().connect_string(), T).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut task = Once(Some(tx));
    let election = session.election(&unique_path("first-task"));
    let (led_tx, led_rx) = tokio::sync::oneshot::channel::<()>();
    let run = election.run("first", &mut task, async {
        let _ = led_rx.await;
    });
    let watch = async {
        let id = rx.await.expect("led");
        assert_eq!(id, "first");
        let _ = led_tx.send(());
    };
    let (ran, ()) = within(Duration::from_secs(20), "a term", async {
        tokio::join!(run, watch)
    })
    .await;
    ran.unwrap();
}

#[tokio::test]
async fn a_campaign_loop_retries_what_is_retryable_after_its_session_lapsed() {
    let zk = shared_ensemble();
    let proxy = zk.proxy().await.unwrap();
    let session = zkfence::Session::connect(
        &proxy.connect_string(),
        SessionOptions::new().session_timeout(T),
    )
    .await
    .unwrap();
    let path = unique_path("first-loop");
    let election = session.election(&path);
    let first = election.campaign("a").await.unwrap();
    // The session lapses: the ensemble expires it while we are cut off.
    proxy.blackhole();
    let admin = connect(&zk.connect_string(), T).await;
    eventually(5 * T, "the server expired the session", || async {
        children(&admin, &path).await.is_empty()
    })
    .await;
    proxy.heal();
    drop(first);
    // The loop the campaign docs show: retry what is retryable.
    let mut errors = Vec::new();
    let leadership = within(10 * T, "leading again", async {
        loop {
            match election.campaign("a").await {
                Ok(leadership) => break leadership,
                Err(e) if e.is_retryable() => errors.push(e.to_string()),
                Err(e) => panic!("not retryable after a lapse: {e}"),
            }
        }
    })
    .await;
    assert!(errors.len() <= 3, "{errors:?}");
    leadership.resign().await.unwrap();
}

#[tokio::test]
async fn a_fenced_writes_client_error_is_matched_through_the_reexport() {
    let session = connect(&shared_ensemble().connect_string(), T).await;
    let lease = session
        .lock(&unique_path("first-fence"))
        .acquire()
        .await
        .unwrap();
    let missing = unique_path("first-missing");
    let err = lease
        .fenced_write(&[FencedOp::SetData {
            path: missing,
            data: b"x".to_vec(),
            version: None,
        }])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::FencedWriteFailed {
                source: zk::Error::NoNode,
                index: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_retryable(), "{err}");
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_proclaimed_value_reads_as_text() {
    let session = connect(&shared_ensemble().connect_string(), T).await;
    let path = unique_path("first-proclaim");
    let leadership = session.election(&path).campaign("a").await.unwrap();
    leadership.proclaim(b"http://10.0.0.7:8080").await.unwrap();
    let leader = session.lock(&path).contenders().await.unwrap().remove(0);
    assert_eq!(
        leader.owner.proclaimed_text().as_deref(),
        Some("http://10.0.0.7:8080")
    );
    leadership.resign().await.unwrap();
}
