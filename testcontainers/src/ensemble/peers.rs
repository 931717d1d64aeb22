//! Proxies on the server-to-server links, to cut one server off from its peers while its
//! clients stay connected.
//!
//! Every node's `zoo.cfg` lists its own `server.N` line with the ports it binds, and every
//! other server at the two ports (quorum, election) of a [`FaultProxy`] that forwards to that
//! server. So each *directed* link `from -> to` (the connections `from` opens to `to`) goes
//! through a proxy of its own, and a node is isolated by blackholing every link that starts
//! or ends at it. ZooKeeper opens election connections in both directions (and keeps the one
//! the higher id opened), and a follower opens its quorum connection to the leader; both
//! directions of a pair are always blocked together, so which one carries the traffic does
//! not matter.
//!
//! One election detail would route around the proxies: a server that receives a connection
//! from a lower id drops it and dials back, to the address the lower id *advertised* in its
//! first message (its real one, from its own `server.N` line) rather than the one in its
//! config. The election proxies therefore rewrite that first message to the protocol's
//! original form, the sid alone, which ZooKeeper still accepts (checked in 3.8's
//! `QuorumCnxManager.handleConnection`) and answers by dialling the address in its config:
//! the proxy. `election_connections_dialled_back_pass_through_the_peer_links` fails if a
//! version stops doing so.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;

use crate::FaultProxy;

/// The proxies of one ensemble's peer links and the runtime that relays for them.
///
/// The relays run on a runtime of their own (one worker thread) rather than the test's: a
/// test that blocks its thread (a current-thread `#[tokio::test]` calling
/// [`Ensemble::stop`](super::Ensemble::stop), or a synchronous test that dropped the
/// runtime it started the ensemble on) would otherwise freeze every link, and the quorum
/// with it.
#[derive(Debug)]
pub(super) struct PeerLinks {
    /// `(from, to)` -> the proxy whose two listeners forward to `to`'s quorum and election
    /// ports, named in `from`'s config.
    links: HashMap<(usize, usize), FaultProxy>,
    isolated: Mutex<BTreeSet<usize>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl PeerLinks {
    /// Starts a proxy for every directed link between the servers whose real (quorum,
    /// election) addresses are `servers`, by index.
    pub(super) async fn start(servers: &[(SocketAddr, SocketAddr)]) -> io::Result<PeerLinks> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("zkt-peer-links")
            .enable_all()
            .build()?;
        let servers = servers.to_vec();
        let links = runtime
            .spawn(async move {
                let mut links = HashMap::new();
                for from in 0..servers.len() {
                    for (to, &(quorum, election)) in servers.iter().enumerate() {
                        if from != to {
                            let proxy = FaultProxy::start_rewriting(vec![
                                (quorum, None),
                                (election, Some(election_hello_without_address)),
                            ])
                            .await?;
                            links.insert((from, to), proxy);
                        }
                    }
                }
                Ok::<_, io::Error>(links)
            })
            .await
            .map_err(io::Error::other)??;
        Ok(PeerLinks {
            links,
            isolated: Mutex::new(BTreeSet::new()),
            runtime: Some(runtime),
        })
    }

    /// The (quorum, election) addresses `from` is to use for `to`.
    pub(super) fn addrs(&self, from: usize, to: usize) -> (SocketAddr, SocketAddr) {
        let a = self.links[&(from, to)].local_addrs();
        (a[0], a[1])
    }

    /// The proxy of the link `from -> to`.
    pub(super) fn link(&self, from: usize, to: usize) -> &FaultProxy {
        &self.links[&(from, to)]
    }

    /// Blackholes every link touching `i`.
    pub(super) fn isolate(&self, i: usize) {
        self.isolated.lock().unwrap().insert(i);
        self.apply();
    }

    /// Heals the links touching `i`, except those to other isolated nodes.
    pub(super) fn heal(&self, i: usize) {
        self.isolated.lock().unwrap().remove(&i);
        self.apply();
    }

    /// Heals every link.
    pub(super) fn heal_all(&self) {
        self.isolated.lock().unwrap().clear();
        self.apply();
    }

    /// The isolated nodes, in index order.
    pub(super) fn isolated(&self) -> Vec<usize> {
        self.isolated.lock().unwrap().iter().copied().collect()
    }

    /// Brings every link in line with the isolated set: a link is blackholed iff one of its
    /// ends is isolated. Holding the lock makes concurrent calls apply in one order.
    fn apply(&self) {
        let isolated = self.isolated.lock().unwrap();
        for (&(from, to), proxy) in &self.links {
            if isolated.contains(&from) || isolated.contains(&to) {
                proxy.blackhole();
            } else {
                proxy.heal();
            }
        }
    }
}

/// The first message of an election connection without the sender's advertised address.
///
/// It reads `protocol version (i64 < 0), sid (i64), length (i32), address`, all big-endian,
/// since ZooKeeper 3.5; a first long `>= 0` is the older form, the sid alone, which the
/// receiver answers from its config. Returns `None` until the message is whole.
fn election_hello_without_address(bytes: &[u8]) -> Option<Vec<u8>> {
    let version = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    if version >= 0 {
        return Some(bytes.to_vec());
    }
    let sid = bytes.get(8..16)?;
    let len = u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?) as usize;
    let after = bytes.get(20 + len..)?;
    Some([sid, after].concat())
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        self.links.clear();
        if let Some(rt) = self.runtime.take() {
            // Not `drop(rt)`: that blocks, which panics inside the test's async context.
            rt.shutdown_background();
        }
    }
}

impl super::Ensemble {
    fn peer_links(&self) -> &PeerLinks {
        self.peers.as_ref().expect(
            "server-to-server faults need an ensemble started with \
             EnsembleBuilder::peer_links(true)",
        )
    }

    /// Whether the ensemble was started with [`peer_links`](crate::EnsembleBuilder::peer_links),
    /// i.e. supports [`isolate`](Self::isolate).
    ///
    /// ```no_run
    /// # fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// if zk.has_peer_links() {
    ///     zk.isolate(0);
    /// }
    /// # }
    /// ```
    pub fn has_peer_links(&self) -> bool {
        self.peers.is_some()
    }

    /// Cuts node `i` off from every other server: a network partition between servers that
    /// leaves `i`'s client port reachable. Every link touching `i` (its connections to the
    /// others' quorum and election ports, and theirs to its) is blackholed: bytes are held,
    /// sockets stay open, neither side sees a FIN or a reset, and new connections are
    /// accepted but reach nobody. See the crate docs (*Faults*) for what follows on each
    /// side.
    ///
    /// Panics unless the ensemble was started with
    /// [`peer_links(true)`](crate::EnsembleBuilder::peer_links).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// let zk = zkfence_testcontainers::Ensemble::builder().peer_links(true).start().await?;
    /// let leader = zk.wait_for_leader(Duration::from_secs(10)).await?;
    /// zk.isolate(leader);
    /// // The other two elect a leader among themselves.
    /// zk.heal_peers(leader);
    /// # Ok(()) }
    /// ```
    pub fn isolate(&self, i: usize) {
        assert!(i < self.len(), "node {i} out of range");
        self.peer_links().isolate(i);
    }

    /// Heals the links of an [`isolate`](Self::isolate)d node `i` (those to another
    /// isolated node stay blackholed). Held bytes flow again, like after a healed
    /// partition; ZooKeeper reconnects where it had given a connection up.
    ///
    /// ```no_run
    /// # fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// zk.isolate(1);
    /// zk.heal_peers(1);
    /// # }
    /// ```
    pub fn heal_peers(&self, i: usize) {
        assert!(i < self.len(), "node {i} out of range");
        self.peer_links().heal(i);
    }

    /// Heals every server-to-server link.
    ///
    /// ```no_run
    /// # fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// zk.isolate(0);
    /// zk.isolate(2);
    /// zk.heal_all_peers();
    /// # }
    /// ```
    pub fn heal_all_peers(&self) {
        self.peer_links().heal_all();
    }

    /// The nodes currently [`isolate`](Self::isolate)d, in index order (empty without peer
    /// links).
    ///
    /// ```no_run
    /// # fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// zk.isolate(2);
    /// assert_eq!(zk.isolated(), [2]);
    /// # }
    /// ```
    pub fn isolated(&self) -> Vec<usize> {
        self.peers
            .as_ref()
            .map(PeerLinks::isolated)
            .unwrap_or_default()
    }

    /// The proxy of the directed link `from -> to`: the connections `from` opens to `to`'s
    /// quorum port (listener 0) and election port (listener 1), for finer faults than
    /// [`isolate`](Self::isolate) (e.g. [`FaultProxy::cut`] to reset them). The next
    /// `isolate`/`heal_peers` call sets its mode again.
    ///
    /// Panics unless started with [`peer_links(true)`](crate::EnsembleBuilder::peer_links),
    /// or if `from == to`.
    ///
    /// ```no_run
    /// # fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// // Close node 0's connections to node 1; ZooKeeper opens new ones.
    /// zk.peer_link(0, 1).cut();
    /// # }
    /// ```
    pub fn peer_link(&self, from: usize, to: usize) -> &FaultProxy {
        assert!(from != to, "a node has no link to itself");
        self.peer_links().link(from, to)
    }
}

#[cfg(test)]
mod tests {
    use super::election_hello_without_address as rewrite;

    fn hello(version: i64, sid: i64, addr: &str) -> Vec<u8> {
        let mut m = version.to_be_bytes().to_vec();
        m.extend(sid.to_be_bytes());
        m.extend((addr.len() as u32).to_be_bytes());
        m.extend(addr.as_bytes());
        m
    }

    #[test]
    fn the_address_goes_and_the_sid_and_what_follows_stay() {
        let mut m = hello(-65536, 3, "127.0.0.2:3888");
        m.extend(b"next");
        let mut want = 3i64.to_be_bytes().to_vec();
        want.extend(b"next");
        assert_eq!(rewrite(&m).unwrap(), want);
    }

    #[test]
    fn a_partial_message_asks_for_more() {
        let m = hello(-65535, 2, "127.0.0.2:3888|127.0.0.3:3888");
        for cut in 0..m.len() {
            assert_eq!(rewrite(&m[..cut]), None, "cut at {cut}");
        }
        assert_eq!(rewrite(&m).unwrap(), 2i64.to_be_bytes());
    }

    #[test]
    fn the_old_form_passes_unchanged() {
        let m = 5i64.to_be_bytes();
        assert_eq!(rewrite(&m).unwrap(), m);
    }
}
