//! Throwaway, real Apache ZooKeeper ensembles on loopback, with fault injection, for tests,
//! benchmarks and demos.
//!
//! [`Ensemble`] starts `n` genuine ZooKeeper servers (one JVM each, `QuorumPeerMain`) in a
//! temporary directory and returns once a quorum serves. It can kill, stop, pause, resume
//! and restart single nodes, ask them four-letter words (`srvr`, `cons`, `mntr`, ...), and
//! put a [`FaultProxy`] between clients and servers to fake network partitions
//! ([`FaultProxy::blackhole`]), lost responses ([`FaultProxy::hold_responses`]) and dropped
//! connections ([`FaultProxy::cut`]).
//!
//! # Requirements
//!
//! A Java runtime (`$JAVA_HOME/bin/java`, else `java` on `PATH`) and a ZooKeeper server:
//! `$ZOOKEEPER_HOME/lib/*.jar` (an unpacked Apache binary release), else Debian's
//! `/usr/share/java/zookeeper.jar` (`apt-get install -y zookeeper`). Tested with
//! ZooKeeper 3.8.0 and Java 17. Each server takes about 0.5–1.5 s to start and ~150 MB of
//! memory.
//!
//! # Isolation and hygiene
//!
//! Every ensemble has its own directory, client ports on `127.0.0.1` picked below the
//! kernel's ephemeral port range, and quorum/election ports on a loopback address of its
//! own, so ensembles of tests running in parallel (threads or processes) do not collide.
//! Dropping an ensemble kills its servers and removes its directory (and, when the test is
//! panicking, prints the tail of the server logs first). If the test process dies without
//! dropping it, a watchdog process does the cleaning.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use zkfence_testcontainers::Ensemble;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let zk = Ensemble::builder()
//!     .nodes(3)
//!     .tick_time(Duration::from_millis(200))
//!     .start()
//!     .await?;
//! println!("connect your client to {}", zk.connect_string());
//!
//! // Fail over: kill the leader, wait for another one.
//! let leader = zk.wait_for_leader(Duration::from_secs(10)).await?;
//! zk.kill(leader);
//! let new_leader = zk.wait_for_leader(Duration::from_secs(10)).await?;
//! assert_ne!(leader, new_leader);
//! zk.start(leader).await?;
//!
//! // Partition one client from the servers.
//! let proxy = zk.proxy().await?;
//! println!("connect the victim client to {}", proxy.connect_string());
//! proxy.blackhole();
//! // ... its session expires after the session timeout ...
//! proxy.heal();
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod ensemble;
mod error;
mod locate;
mod proxy;

pub use ensemble::{ConnectionInfo, Ensemble, EnsembleBuilder};
pub use error::HarnessError;
pub use proxy::FaultProxy;
