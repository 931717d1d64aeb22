//! Fenced storage: a storage service that refuses writes from stale lock holders.
//!
//! The lock service only hands out fencing tokens; the protected resource must check them.
//! Here a small in-process storage service embeds a [`Fence`], and two clients write through
//! it while holding the lock `/recipes/fenced-storage/account-7`:
//!
//! 1. A holds the lock (token t) and writes.
//! 2. A freezes — a long GC pause, a stalled VM. (We blackhole its network with the test
//!    harness's fault proxy, which looks the same to everyone else.)
//! 3. A's session expires; B is granted the lock with a larger token and writes.
//! 4. A wakes up, still believing it holds the lock, and writes with token t: refused.
//!
//! ```text
//! cargo run --example fenced_storage                      # starts a throwaway ensemble
//! zkfence ensemble up                                     # or, in another terminal...
//! ZKFENCE_CONNECT=127.0.0.1:... cargo run --example fenced_storage
//! ```
//!
//! Exits 0 only if the stale write was refused.

mod common;

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Mutex;
use std::time::Duration;

use zkfence::{Fence, FencingToken, Session, SessionOptions, StaleToken};

const LOCK: &str = "/recipes/fenced-storage/account-7";

/// The storage service. It does not talk to ZooKeeper at all: it only remembers the newest
/// token it has seen and refuses older ones.
#[derive(Default)]
struct Storage {
    fence: Fence,
    rows: Mutex<BTreeMap<String, String>>,
}

impl Storage {
    fn put(&self, key: &str, value: &str, token: FencingToken) -> Result<(), StaleToken> {
        // Check and write under one lock, so a stale writer cannot slip in between.
        let mut rows = self.rows.lock().unwrap();
        self.fence.admit(token)?;
        rows.insert(key.to_string(), value.to_string());
        Ok(())
    }

    fn get(&self, key: &str) -> Option<String> {
        self.rows.lock().unwrap().get(key).cloned()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (connect, _local) = common::ensemble().await?;
    let storage = Storage::default();
    let two_seconds = SessionOptions::new().session_timeout(Duration::from_secs(2));

    // Client A reaches ZooKeeper through a proxy we can cut, to play the frozen process.
    let (proxy, through_proxy) = common::proxy_to(&connect).await?;
    let a = Session::connect(&through_proxy, two_seconds.clone()).await?;
    let b = Session::connect(&connect, two_seconds).await?;

    let lease_a = a.lock(LOCK).with_id("client-a").acquire().await?;
    let token_a = lease_a.token();
    storage.put("balance", "100", token_a)?;
    println!("A holds the lock with token {token_a} and writes balance=100: accepted");

    let lock_b = b.lock(LOCK).with_id("client-b");
    let b_waits = tokio::spawn(async move { lock_b.acquire().await });

    proxy.blackhole();
    println!("A freezes...");
    // A well-behaved holder would notice this and stop; a frozen one cannot look.
    let reason = lease_a.lost().await;
    println!("  (A's lease is lost: {reason}; but A is frozen and does not know)");

    let lease_b = b_waits.await??;
    let token_b = lease_b.token();
    storage.put("balance", "80", token_b)?;
    println!("B is granted the lock with token {token_b} and writes balance=80: accepted");

    proxy.heal();
    match storage.put("balance", "120", token_a) {
        Err(stale) => {
            println!("A wakes up and writes balance=120 with token {token_a}: refused ({stale})")
        }
        Ok(()) => return Err("the storage accepted a stale write".into()),
    }
    lease_b.release().await?;

    let balance = storage.get("balance");
    println!("final balance: {}", balance.as_deref().unwrap_or("-"));
    if balance.as_deref() != Some("80") || token_b <= token_a {
        return Err("fencing did not hold".into());
    }
    Ok(())
}
