//! `--metrics-addr`: the binary serves Prometheus text, scraped here with a plain HTTP GET
//! over TCP; the leader gauge follows a failover between two `zkfence elect` processes; a
//! bad address fails before anything is acquired.

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::net::SocketAddr;
use std::time::Duration;

use common::{children, connect, eventually, shared_ensemble, unique_path, until_children};
use process::{next_line, signal, zkfence};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

/// A loopback address with a port free right now (the OS picks it).
fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// One scrape: `GET /` and the response body, or `None` if nothing answers there (yet).
async fn scrape(addr: SocketAddr) -> Option<String> {
    let get = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: zkfence\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(2), get)
        .await
        .ok()
        .flatten()
}

/// The value of the series `name{path="PATH"}` in a scrape, if present.
fn series(text: &str, name: &str, path: &str) -> Option<f64> {
    let prefix = format!("{name}{{path=\"{path}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `addr` until its `zkfence_leader` gauge for `path` reads `want`.
async fn until_leader_gauge(addr: SocketAddr, path: &str, want: f64, what: &str) {
    eventually(Duration::from_secs(20), what, || async {
        scrape(addr)
            .await
            .and_then(|text| series(&text, "zkfence_leader", path))
            == Some(want)
    })
    .await;
}

fn candidate(connect: &str, path: &str, id: &str, addr: SocketAddr) -> Child {
    let script = format!("echo leading {id}; while :; do sleep 1; done");
    zkfence(
        connect,
        &[
            "--session-timeout",
            "2s",
            "elect",
            path,
            "--id",
            id,
            "--grace",
            "1s",
            "--metrics-addr",
            &addr.to_string(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .unwrap()
}

#[tokio::test]
async fn the_leader_gauge_flips_to_the_other_candidate_on_failover() {
    let zk = shared_ensemble();
    let path = unique_path("metrics-elect");
    let (first_addr, second_addr) = (free_addr(), free_addr());
    let mut first = candidate(&zk.connect_string(), &path, "first", first_addr);
    assert_eq!(
        next_line(&mut first, Duration::from_secs(20)).await,
        "leading first"
    );
    let mut second = candidate(&zk.connect_string(), &path, "second", second_addr);
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    until_children(&observer, &path, 2).await;

    until_leader_gauge(first_addr, &path, 1.0, "the leader's gauge is 1").await;
    until_leader_gauge(second_addr, &path, 0.0, "the other candidate's gauge is 0").await;
    let text = scrape(first_addr).await.expect("a scrape");
    assert!(
        text.contains("# TYPE zkfence_leader gauge"),
        "described and typed: {text}"
    );

    // The leader dies without resigning: its session expires, and the other takes over.
    signal(&first, libc::SIGKILL);
    let _ = first.wait().await;
    assert_eq!(
        next_line(&mut second, Duration::from_secs(20)).await,
        "leading second"
    );
    until_leader_gauge(second_addr, &path, 1.0, "the new leader's gauge is 1").await;
    let text = scrape(second_addr).await.expect("a scrape");
    let grants = text
        .lines()
        .find(|l| {
            l.starts_with("zkfence_grants_total{")
                && l.contains("kind=\"election\"")
                && l.contains(&format!("path=\"{path}\""))
        })
        .unwrap_or_else(|| panic!("a grant counted: {text}"));
    assert!(grants.ends_with(" 1"), "{grants}");

    signal(&second, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(10), second.wait())
        .await
        .expect("zkfence exits on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
}

#[tokio::test]
async fn an_address_that_cannot_be_served_fails_before_anything_is_acquired() {
    let zk = shared_ensemble();
    let path = unique_path("metrics-bad-addr");
    let observer = connect(&zk.connect_string(), Duration::from_secs(4)).await;
    // Not an address: clap's usage error.
    let out = zkfence(
        &zk.connect_string(),
        &[
            "exec",
            &path,
            "--metrics-addr",
            "localhost-ish",
            "--",
            "true",
        ],
    )
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--metrics-addr"), "{stderr}");

    // An address taken by someone else: exit 2, saying so, and no node was ever created.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for args in [
        vec!["exec", &path, "--metrics-addr", &addr, "--", "true"],
        vec![
            "elect",
            &path,
            "--id",
            "x",
            "--metrics-addr",
            &addr,
            "--",
            "true",
        ],
    ] {
        let out = zkfence(&zk.connect_string(), &args).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "--metrics-addr {addr}: cannot serve metrics there"
            )),
            "{stderr}"
        );
    }
    assert!(
        observer.client().check_stat(&path).await.unwrap().is_none(),
        "nothing was acquired, not even the directory made"
    );
    assert!(children(&observer, &path).await.is_empty());
}
