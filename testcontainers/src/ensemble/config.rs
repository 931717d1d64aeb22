//! What each node reads at start: its `zoo.cfg`, its `myid`, and the logging configs.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::peers::PeerLinks;
use super::ports::{random_loopback_ip, reserve_ports, reserve_ports_from};
use super::{Ensemble, Node};
use crate::HarnessError;

/// What every server of an ensemble is configured with (the builder's settings, checked).
#[derive(Debug, Clone)]
pub(super) struct ServerSettings {
    /// `tickTime`, in ms.
    pub(super) tick: u64,
    /// `initLimit`, in ticks.
    pub(super) init_limit: u32,
    /// `syncLimit`, in ticks.
    pub(super) sync_limit: u32,
    /// `minSessionTimeout`, in ms.
    pub(super) min_session: u64,
    /// `maxSessionTimeout`, in ms.
    pub(super) max_session: u64,
    /// Java system properties (`-Dkey=value`) for every server JVM.
    pub(super) jvm_props: Vec<(String, String)>,
    /// Whether every node also serves TLS on a `secureClientPort`.
    pub(super) secure: bool,
    /// Node `i`'s client port is this plus `i` (then the secure ports follow), instead of
    /// free ports picked at random.
    pub(super) client_port_base: Option<u16>,
}

impl Ensemble {
    /// Picks ports and writes the config and data dir of every node (wiping earlier ones).
    /// With `peer_links`, also starts the proxies on the server-to-server links and points
    /// each node's config at them for the other servers.
    pub(super) async fn prepare_nodes(
        &self,
        n: usize,
        settings: &ServerSettings,
        peer_links: bool,
    ) -> Result<(Vec<Node>, Option<PeerLinks>), HarnessError> {
        // The listeners hold the ports until the servers are about to be spawned.
        let mut taken = HashSet::new();
        let (clients, secure_clients) = match settings.client_port_base {
            Some(base) => {
                let secure = if settings.secure { n } else { 0 };
                let mut all = reserve_ports_from(Ipv4Addr::LOCALHOST, base, n + secure)?;
                let secure_clients = all.split_off(n);
                (all, secure_clients)
            }
            None => {
                let clients = reserve_ports(Ipv4Addr::LOCALHOST, n, &mut taken)?;
                let secure_clients = if settings.secure {
                    reserve_ports(Ipv4Addr::LOCALHOST, n, &mut taken)?
                } else {
                    Vec::new()
                };
                (clients, secure_clients)
            }
        };
        let peer_ip = if n > 1 {
            random_loopback_ip()
        } else {
            Ipv4Addr::LOCALHOST
        };
        let mut peer_taken = HashSet::new();
        let peers = if n > 1 {
            reserve_ports(peer_ip, 2 * n, &mut peer_taken)?
        } else {
            Vec::new()
        };
        let at = |port: u16| SocketAddr::V4(SocketAddrV4::new(peer_ip, port));
        // Each server's own (quorum, election) addresses: the ones it binds.
        let real: Vec<(SocketAddr, SocketAddr)> = peers
            .chunks(2)
            .map(|pe| (at(pe[0].0), at(pe[1].0)))
            .collect();
        let links = if peer_links {
            Some(PeerLinks::start(&real).await?)
        } else {
            None
        };
        let mut nodes = Vec::with_capacity(n);
        for (idx, (client_port, _)) in clients.iter().enumerate() {
            let id = idx + 1;
            let dir = self.dir_path.join(format!("node{id}"));
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
            let data = dir.join("data");
            fs::create_dir_all(&data)?;
            fs::write(data.join("myid"), format!("{id}\n"))?;
            let mut servers = String::new();
            for (k, &own) in real.iter().enumerate() {
                let (q, e) = match &links {
                    Some(links) if k != idx => links.addrs(idx, k),
                    _ => own,
                };
                let _ = writeln!(
                    servers,
                    "server.{}={}:{}:{}",
                    k + 1,
                    q.ip(),
                    q.port(),
                    e.port()
                );
            }
            let config = dir.join("zoo.cfg");
            let secure_port = secure_clients.get(idx).map(|(p, _)| *p);
            let mut text = zoo_cfg(settings, &data, *client_port, &servers);
            if let Some(port) = secure_port {
                let _ = writeln!(
                    text,
                    "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1"
                );
            }
            fs::write(&config, text)?;
            nodes.push(Node {
                log: dir.join("zookeeper.log"),
                config,
                dir,
                client: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, *client_port)),
                secure_client: secure_port
                    .map(|p| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p))),
                process: Mutex::new(None),
            });
        }
        drop(clients);
        drop(secure_clients);
        drop(peers);
        Ok((nodes, links))
    }
}

impl Ensemble {
    /// Sets node `i`'s `minSessionTimeout` and `maxSessionTimeout` for its next
    /// [`start`](Self::start) or [`restart`](Self::restart), as an operator changes one server's
    /// config in a rolling restart. Each connection to it then negotiates a session timeout
    /// within these bounds, also a session's reconnection: ZooKeeper clamps the requested
    /// value at every connect and revalidates the session at the leader with it.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_testcontainers::HarnessError> {
    /// use std::time::Duration;
    /// let zk = zkfence_testcontainers::Ensemble::builder().nodes(3).start().await?;
    /// zk.set_session_timeout_bounds(1, Duration::from_millis(400), Duration::from_secs(4))?;
    /// zk.restart(1).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Notable errors
    /// [`HarnessError::Io`] if the node's config cannot be read or written, and
    /// [`HarnessError::InvalidConfig`] if `min` is longer than `max`.
    pub fn set_session_timeout_bounds(
        &self,
        i: usize,
        min: Duration,
        max: Duration,
    ) -> Result<(), HarnessError> {
        if min > max {
            return Err(HarnessError::InvalidConfig(format!(
                "minSessionTimeout {min:?} is longer than maxSessionTimeout {max:?}"
            )));
        }
        let path = &self.nodes[i].config;
        let text = fs::read_to_string(path)?;
        let text: String = text
            .lines()
            .map(|line| {
                if line.starts_with("minSessionTimeout=") {
                    format!("minSessionTimeout={}\n", min.as_millis())
                } else if line.starts_with("maxSessionTimeout=") {
                    format!("maxSessionTimeout={}\n", max.as_millis())
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        fs::write(path, text)?;
        Ok(())
    }
}

/// The text of one node's `zoo.cfg`; `servers` holds its `server.N=...` lines.
fn zoo_cfg(s: &ServerSettings, data: &Path, client_port: u16, servers: &str) -> String {
    format!(
        "tickTime={tick}\n\
         initLimit={init}\n\
         syncLimit={sync}\n\
         dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         4lw.commands.whitelist=*\n\
         admin.enableServer=false\n\
         minSessionTimeout={min}\n\
         maxSessionTimeout={max}\n\
         maxClientCnxns=0\n\
         {servers}",
        tick = s.tick,
        init = s.init_limit,
        sync = s.sync_limit,
        min = s.min_session,
        max = s.max_session,
        data = data.display(),
    )
}

/// Logging to stdout (redirected to the node's log) for log4j 1.2 (Debian) and logback
/// (Apache release), without the line per four-letter word that polling would cause.
pub(super) fn write_logging_configs(dir: &Path) -> io::Result<()> {
    fs::write(
        dir.join("log4j.properties"),
        "log4j.rootLogger=INFO, CONSOLE\n\
         log4j.logger.org.apache.zookeeper.server.NIOServerCnxn=WARN\n\
         log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n\
         log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n\
         log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n",
    )?;
    fs::write(
        dir.join("logback.xml"),
        "<configuration>\n\
         <appender name=\"CONSOLE\" class=\"ch.qos.logback.core.ConsoleAppender\">\n\
         <encoder><pattern>%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>\n\
         </appender>\n\
         <logger name=\"org.apache.zookeeper.server.NIOServerCnxn\" level=\"WARN\"/>\n\
         <root level=\"INFO\"><appender-ref ref=\"CONSOLE\"/></root>\n\
         </configuration>\n",
    )?;
    Ok(())
}
