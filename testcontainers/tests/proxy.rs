//! The fault proxy partitions a client (its session expires, others are untouched) and
//! loses responses (the request is applied, the client sees an error).

mod common;

use std::time::{Duration, Instant};

use common::{connect, within};
use zkfence_testcontainers::Ensemble;
use zookeeper_client::{Acls, CreateMode, EventType, SessionState};

const SESSION: Duration = Duration::from_secs(2);

fn ephemeral() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

#[tokio::test]
async fn blackholed_client_loses_its_session_while_a_direct_one_keeps_it() {
    let zk = Ensemble::builder()
        .nodes(1)
        .tick_time(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let proxy = zk.proxy().await.unwrap();
    let victim = connect(&proxy.connect_string(), SESSION).await;
    let witness = connect(&zk.connect_string(), SESSION).await;
    assert_eq!(proxy.connection_count(), 1);

    within(
        SESSION,
        "victim create",
        victim.create("/victim", b"", &ephemeral()),
    )
    .await
    .unwrap();
    within(
        SESSION,
        "witness create",
        witness.create("/witness", b"", &ephemeral()),
    )
    .await
    .unwrap();
    let (stat, watcher) = within(SESSION, "watch", witness.check_and_watch_stat("/victim"))
        .await
        .unwrap();
    assert_eq!(stat.unwrap().ephemeral_owner, victim.session_id().0);
    let mut victim_state = victim.state_watcher();

    let partitioned = Instant::now();
    proxy.blackhole();
    let event = within(Duration::from_secs(15), "NodeDeleted", watcher.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDeleted);
    let deleted_after = partitioned.elapsed();

    // The server expired the victim, not the witness.
    assert_eq!(witness.state(), SessionState::SyncConnected);
    let stat = within(SESSION, "check witness", witness.check_stat("/witness"))
        .await
        .unwrap()
        .expect("the witness's ephemeral node remains");
    assert_eq!(stat.ephemeral_owner, witness.session_id().0);

    // And the victim finds out on its own (it cannot reach the server through the proxy).
    within(Duration::from_secs(15), "victim Expired", async {
        while victim_state.changed().await != SessionState::Expired {}
    })
    .await;
    eprintln!(
        "blackhole: ephemeral deleted after {deleted_after:?}, victim saw Expired after {:?}",
        partitioned.elapsed()
    );
}

#[tokio::test]
async fn held_response_is_applied_but_the_client_gets_an_error() {
    let zk = Ensemble::builder().nodes(1).start().await.unwrap();
    let proxy = zk.proxy().await.unwrap();
    let victim = connect(&proxy.connect_string(), SESSION).await;
    let witness = connect(&zk.connect_string(), SESSION).await;

    let (stat, watcher) = within(SESSION, "watch", witness.check_and_watch_stat("/held"))
        .await
        .unwrap();
    assert!(stat.is_none());

    proxy.hold_responses();
    // The request is sent when `create` is called, before the future is polled.
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let create = victim.create("/held", b"payload", &options);
    let event = within(Duration::from_secs(10), "NodeCreated", watcher.changed()).await;
    assert_eq!(event.event_type, EventType::NodeCreated);

    proxy.cut();
    let outcome = within(Duration::from_secs(10), "held create fails", create).await;
    assert!(
        outcome.is_err(),
        "the answer was held back, yet the client got {outcome:?}"
    );

    // After the cut the proxy forwards again: the victim's session survives and sees the node.
    let (data, _) = within(
        Duration::from_secs(10),
        "victim reads",
        victim.get_data("/held"),
    )
    .await
    .unwrap();
    assert_eq!(data, b"payload");
}

#[tokio::test]
async fn proxy_drop_closes_connections() {
    let zk = Ensemble::builder().nodes(1).start().await.unwrap();
    let proxy = zk.proxy_to(&[0]).await.unwrap();
    let client = connect(&proxy.connect_string(), SESSION).await;
    let mut state = client.state_watcher();
    let peers = |cons: &[zkfence_testcontainers::ConnectionInfo]| {
        cons.iter()
            .filter(|c| c.session_id == Some(client.session_id().0))
            .count()
    };
    assert_eq!(peers(&zk.connections(0).await.unwrap()), 1);
    drop(proxy);
    within(Duration::from_secs(10), "client sees Disconnected", async {
        while state.changed().await != SessionState::Disconnected {}
    })
    .await;
}

/// Sends `srvr` on `stream` and reads the answer until EOF, or fails after `timeout`.
async fn srvr_on(
    stream: &mut tokio::net::TcpStream,
    timeout: Duration,
) -> Result<String, tokio::time::error::Elapsed> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(b"srvr").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(timeout, stream.read_to_end(&mut out))
        .await
        .map(|r| {
            r.unwrap();
            String::from_utf8_lossy(&out).into_owned()
        })
}

#[tokio::test]
async fn proxy_modes_apply_to_raw_connections() {
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    let zk = Ensemble::builder().nodes(1).start().await.unwrap();
    let proxy = zk.proxy().await.unwrap();
    let addr = proxy.local_addrs()[0];
    assert_eq!(proxy.upstreams(), zk.client_addrs());
    let quiet = Duration::from_millis(300);
    let long = Duration::from_secs(10);

    // Forward.
    let mut s = TcpStream::connect(addr).await.unwrap();
    assert!(srvr_on(&mut s, long).await.unwrap().contains("Mode: "));

    // Blackhole: an existing and a new connection get nothing, and keep their sockets...
    let mut before = TcpStream::connect(addr).await.unwrap();
    proxy.blackhole();
    let mut during = TcpStream::connect(addr).await.unwrap();
    assert!(srvr_on(&mut before, quiet).await.is_err());
    assert!(srvr_on(&mut during, quiet).await.is_err());
    assert!(common::eventually(long, || proxy.connection_count() == 2).await);
    // ...until the partition heals, when the requests go through.
    proxy.heal();
    for s in [&mut before, &mut during] {
        let mut out = Vec::new();
        within(long, "answer after heal", s.read_to_end(&mut out))
            .await
            .unwrap();
        assert!(String::from_utf8_lossy(&out).contains("Mode: "));
    }

    // Hold: the request reaches the server (which answers and closes), the answer does not
    // reach the client, which only sees the close.
    proxy.hold_responses();
    let mut held = TcpStream::connect(addr).await.unwrap();
    assert_eq!(srvr_on(&mut held, long).await.unwrap(), "");
    proxy.heal();

    // Cut: open connections are closed.
    let mut open = TcpStream::connect(addr).await.unwrap();
    assert!(common::eventually(long, || proxy.connection_count() == 1).await);
    proxy.cut();
    let mut buf = [0u8; 16];
    let n = within(long, "EOF after cut", open.read(&mut buf)).await;
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    assert!(common::eventually(long, || proxy.connection_count() == 0).await);
    // And new ones are forwarded again.
    let mut s = TcpStream::connect(addr).await.unwrap();
    assert!(srvr_on(&mut s, long).await.unwrap().contains("Mode: "));
}

/// `FaultProxy::delay` adds its time once per direction and round trip, not per request:
/// five messages sent back to back come back after one added round trip, not five.
#[tokio::test]
async fn delay_adds_one_round_trip_to_pipelined_messages() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use zkfence_testcontainers::FaultProxy;

    // An echo server on loopback: the proxy's upstream, no ZooKeeper needed.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = FaultProxy::start(vec![upstream]).await.unwrap();
    let one_way = Duration::from_millis(200);
    proxy.delay(one_way);
    let mut client = tokio::net::TcpStream::connect(proxy.local_addrs()[0])
        .await
        .unwrap();
    client.set_nodelay(true).unwrap();
    let mut echoed = [0u8; 5];
    let delayed = exchange(&mut client, &mut echoed).await;
    assert_eq!(&echoed, b"abcde", "the bytes arrive whole and in order");
    // At least the added round trip; far less than five of them (2 s), which sending each
    // message only after the one before it was relayed would take.
    assert!(
        delayed >= one_way * 2,
        "added round trip missing: {delayed:?}"
    );
    assert!(
        delayed < one_way * 6,
        "messages were not pipelined: {delayed:?}"
    );

    proxy.delay(Duration::ZERO);
    let direct = exchange(&mut client, &mut echoed).await;
    assert_eq!(&echoed, b"abcde");
    assert!(direct < one_way, "the delay was not removed: {direct:?}");
    eprintln!("delay {one_way:?}: 5 pipelined messages echoed in {delayed:?}, {direct:?} without");
}

/// Writes five one-byte messages back to back and reads their echo; how long that took.
async fn exchange(client: &mut tokio::net::TcpStream, echoed: &mut [u8; 5]) -> Duration {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let start = Instant::now();
    for b in b"abcde" {
        client.write_all(&[*b]).await.unwrap();
    }
    within(
        Duration::from_secs(10),
        "echo",
        client.read_exact(&mut echoed[..]),
    )
    .await
    .unwrap();
    start.elapsed()
}
