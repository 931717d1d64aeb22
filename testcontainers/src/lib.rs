//! Throwaway, real Apache ZooKeeper ensembles on loopback, with fault injection, for tests,
//! benchmarks and demos.
//!
//! [`Ensemble`] starts `n` genuine ZooKeeper servers (one JVM each, `QuorumPeerMain`) in a
//! temporary directory and returns once a quorum serves. It can kill, stop, pause, resume
//! and restart single nodes, ask them four-letter words (`srvr`, `cons`, `mntr`, ...), and
//! put a [`FaultProxy`] between clients and servers to fake network partitions
//! ([`FaultProxy::blackhole`]), lost responses ([`FaultProxy::hold_responses`]) and dropped
//! connections ([`FaultProxy::cut`]), and adds latency ([`FaultProxy::delay`]). With
//! [`EnsembleBuilder::peer_links`] it also cuts one server off from its peers while its
//! clients stay connected ([`Ensemble::isolate`]).
//!
//! [`EnsembleBuilder::tls`] and [`EnsembleBuilder::sasl_digest_users`] secure an ensemble:
//! TLS on a `secureClientPort` with a CA and certificates made fresh per ensemble
//! ([`TlsMaterial`], by the `openssl` command), client certificates as identities, SASL
//! DIGEST-MD5 users.
//!
//! With the feature `chaos`, `chaos::run` runs a randomized fault campaign against an
//! ensemble and checks its whole history (the `zkfence chaos` command).
//!
//! [`Postgres`] starts a throwaway PostgreSQL server the same way (Debian's `postgresql`
//! binaries, a cluster in a temporary directory, a free loopback port, the same cleanup
//! guarantees), for tests of fencing where the data lives; so do [`MariaDb`] (Debian's
//! `mariadb-server`), [`Redis`] (`redis-server`) and [`Etcd`] (`etcd-server`), each one
//! server process in a temporary directory on a free loopback port.
//!
//! # Faults
//!
//! What each fault does, and what a test can expect of ZooKeeper (3.8) under it:
//!
//! * **Node crash** ([`Ensemble::kill`], SIGKILL): the node's clients see their
//!   connection reset and move to another server within their session timeout; if it was
//!   the leader, the others elect a new one (about `initLimit`/election time, a second or
//!   two with the default 200 ms tick). [`Ensemble::stop`] is the graceful variant.
//! * **Node freeze** ([`Ensemble::pause`], SIGSTOP): sockets stay open but nothing is
//!   answered, to clients or peers; like a long GC pause. [`Ensemble::resume`] ends it.
//! * **Client-side partition** ([`FaultProxy`], from [`Ensemble::proxy`]): between some
//!   clients and the servers. [`FaultProxy::blackhole`] holds the bytes and keeps every
//!   socket open (the client notices only by its own timeouts),
//!   [`FaultProxy::hold_responses`] lets requests through and loses the answers, and
//!   [`FaultProxy::cut`] closes the connections.
//! * **Server-to-server partition** ([`Ensemble::isolate`], needs
//!   [`EnsembleBuilder::peer_links`]): every node's config names the other servers at
//!   proxies, one per directed link (quorum and election port); `isolate(i)` blackholes
//!   every link touching node `i` (bytes held, sockets open, no reset on either side),
//!   while `i`'s client port stays reachable and its clients stay connected. Then:
//!   - an isolated **follower** goes on answering reads from its own, increasingly stale,
//!     copy of the tree for up to `syncLimit × tickTime` ([`EnsembleBuilder::sync_limit`],
//!     default 5 ticks) after the last packet from its leader; writes and `sync` from its
//!     clients are forwarded to the leader and do not complete; the leader stops hearing
//!     its session reports, so the sessions of its clients are expired by the leader
//!     after their timeout. Then the follower gives up on its leader, closes its client
//!     connections (its clients see `Disconnected` and try other servers) and does not
//!     serve again until healed, because it cannot find a quorum.
//!   - an isolated **leader** loses its quorum after about `syncLimit × tickTime`, drops
//!     its clients and stops serving; the others elect a new leader among themselves
//!     (within a few seconds) and serve reads and writes.
//!   - [`Ensemble::heal_peers`] / [`Ensemble::heal_all_peers`]: held bytes flow again
//!     and the node rejoins as a follower within seconds ([`Ensemble::mode`] shows it).
//!
//!   [`Ensemble::peer_link`] gives the proxy of one directed link for finer faults.
//!
//! # Requirements
//!
//! A Java runtime (`$JAVA_HOME/bin/java`, else `java` on `PATH`) and a ZooKeeper server:
//! `$ZOOKEEPER_HOME/lib/*.jar` (an unpacked Apache binary release), else Debian's
//! `/usr/share/java/zookeeper.jar` (`apt-get install -y zookeeper`). Tested with
//! ZooKeeper 3.8.0 and Java 17. Each server takes about 0.5–1.5 s to start and ~150 MB of
//! memory.
//!
//! PostgreSQL, for [`Postgres`] only: `apt-get install -y postgresql` (any major version,
//! found under `/usr/lib/postgresql/*/bin`), or `PG_BINDIR` pointing at its binaries. As
//! root, the server runs as the `postgres` user the package creates. [`MariaDb`], [`Redis`] and
//! [`Etcd`]: `apt-get install -y mariadb-server redis-server etcd-server` (as root, MariaDB
//! runs as the package's `mysql` user).
//!
//! # Isolation and hygiene
//!
//! Every ensemble has its own directory, client ports on `127.0.0.1` picked below the
//! kernel's ephemeral port range, and quorum/election ports on a loopback address of its
//! own, so ensembles of tests running in parallel (threads or processes) do not collide.
//! Dropping an ensemble kills its servers and removes its directory (and, when the test is
//! panicking, prints the tail of the server logs first). If the test process dies without
//! dropping it, a watchdog process does the cleaning. The same holds for a [`Postgres`]:
//! dropped, it shuts down fast and its directory goes; after a crash of the test process
//! its watchdog kills the postmaster and every backend (each marked with the instance's
//! directory name), removes its shared memory segment and the directory.
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

#[cfg(feature = "chaos")]
pub mod chaos;
mod ensemble;
mod error;
mod hygiene;
mod locate;
mod postgres;
mod proxy;
mod server;
mod stores;

pub use ensemble::{
    ClientAuth, ClientIdentity, ConnectionInfo, Ensemble, EnsembleBuilder, TlsMaterial,
};
pub use error::HarnessError;
pub use postgres::{Postgres, PostgresBuilder};
pub use proxy::FaultProxy;
pub use stores::{Etcd, MariaDb, Redis};
