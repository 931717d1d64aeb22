//! Builder knobs reach the servers: the container check interval, the session timeout
//! bounds, `syncLimit`.

mod common;

use std::time::{Duration, Instant};

use common::{connect, within};
use zkfence_testcontainers::{Ensemble, HarnessError};
use zookeeper_client::{Acls, Client, CreateMode};

const CHECK: Duration = Duration::from_millis(200);

/// Creates container `path`, gives it a child and deletes the child: the state in which
/// ZooKeeper's container manager removes a container (one that never had a child stays).
async fn emptied_container(client: &Client, path: &str) {
    let acl = Acls::anyone_all();
    client
        .create(path, b"", &CreateMode::Container.with_acls(acl))
        .await
        .unwrap();
    let child = format!("{path}/child");
    client
        .create(&child, b"", &CreateMode::Persistent.with_acls(acl))
        .await
        .unwrap();
    client.delete(&child, None).await.unwrap();
}

async fn exists(client: &Client, path: &str) -> bool {
    client.check_stat(path).await.unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emptied_container_disappears_within_a_few_check_intervals() {
    let (fast, default) = tokio::join!(
        Ensemble::builder()
            .nodes(1)
            .container_check_interval(CHECK)
            .start(),
        Ensemble::builder().nodes(1).start(),
    );
    let (fast, default) = (fast.unwrap(), default.unwrap());
    let on_fast = connect(&fast.connect_string(), Duration::from_secs(4)).await;
    let on_default = connect(&default.connect_string(), Duration::from_secs(4)).await;

    // A container that still has a child, and one that never had one, are kept.
    let acl = Acls::anyone_all();
    on_fast
        .create("/full", b"", &CreateMode::Container.with_acls(acl))
        .await
        .unwrap();
    on_fast
        .create("/full/child", b"", &CreateMode::Persistent.with_acls(acl))
        .await
        .unwrap();
    on_fast
        .create("/never", b"", &CreateMode::Container.with_acls(acl))
        .await
        .unwrap();

    emptied_container(&on_fast, "/locks").await;
    emptied_container(&on_default, "/locks").await;
    let emptied = Instant::now();
    let gone_after = within(
        Duration::from_secs(20),
        "the emptied container is removed",
        async {
            while exists(&on_fast, "/locks").await {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            emptied.elapsed()
        },
    )
    .await;
    // A few intervals, with room for a loaded machine.
    assert!(
        gone_after < 10 * CHECK,
        "removed only after {gone_after:?} (interval {CHECK:?})"
    );
    // Several more checks have run: the others are still there.
    tokio::time::sleep(3 * CHECK).await;
    assert!(
        exists(&on_fast, "/full").await,
        "a container with a child was removed"
    );
    assert!(
        exists(&on_fast, "/never").await,
        "a never-used container was removed"
    );
    // Without the knob, ZooKeeper checks once a minute: the same container is still there
    // (so the fast removal above is the knob's doing).
    assert!(
        exists(&on_default, "/locks").await,
        "the default ensemble removed its container after {:?} already",
        emptied.elapsed()
    );
}

#[tokio::test]
async fn session_timeout_bounds_are_what_the_builder_says() {
    let zk = Ensemble::builder()
        .nodes(1)
        .tick_time(Duration::from_millis(100))
        .min_session_timeout(Duration::from_millis(1500))
        .max_session_timeout(Duration::from_millis(2500))
        .start()
        .await
        .unwrap();
    let short = connect(&zk.connect_string(), Duration::from_millis(300)).await;
    assert_eq!(short.session_timeout(), Duration::from_millis(1500));
    let long = connect(&zk.connect_string(), Duration::from_secs(30)).await;
    assert_eq!(long.session_timeout(), Duration::from_millis(2500));
    let cfg = std::fs::read_to_string(zk.dir().join("node1/zoo.cfg")).unwrap();
    assert!(cfg.contains("syncLimit=5\n"), "{cfg}");
}

#[tokio::test]
async fn min_session_timeout_alone_raises_the_default_maximum() {
    // 20 × 100 ms = 2 s is below the minimum asked for: the maximum follows it.
    let zk = Ensemble::builder()
        .nodes(1)
        .tick_time(Duration::from_millis(100))
        .min_session_timeout(Duration::from_secs(3))
        .sync_limit(7)
        .start()
        .await
        .unwrap();
    let c = connect(&zk.connect_string(), Duration::from_secs(1)).await;
    assert_eq!(c.session_timeout(), Duration::from_secs(3));
    let cfg = std::fs::read_to_string(zk.dir().join("node1/zoo.cfg")).unwrap();
    assert!(cfg.contains("syncLimit=7\n"), "{cfg}");
}

#[tokio::test]
async fn impossible_settings_are_refused_before_starting_anything() {
    let err = Ensemble::builder()
        .min_session_timeout(Duration::from_secs(5))
        .max_session_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::InvalidConfig(_)), "{err:?}");
    let err = Ensemble::builder().sync_limit(0).start().await.unwrap_err();
    assert!(matches!(err, HarnessError::InvalidConfig(_)), "{err:?}");
}
