//! What each node reads at start: its `zoo.cfg`, its `myid`, and the logging configs.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Mutex;

use super::ports::{random_loopback_ip, reserve_ports};
use super::{Ensemble, Node};
use crate::HarnessError;

impl Ensemble {
    /// Picks ports and writes the config and data dir of every node (wiping earlier ones).
    pub(super) fn prepare_nodes(
        &self,
        n: usize,
        tick: u64,
        min_session: u64,
        max_session: u64,
    ) -> Result<Vec<Node>, HarnessError> {
        // The listeners hold the ports until the servers are about to be spawned.
        let mut taken = HashSet::new();
        let clients = reserve_ports(Ipv4Addr::LOCALHOST, n, &mut taken)?;
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
        let mut servers = String::new();
        if n > 1 {
            for id in 1..=n {
                let (p, e) = (peers[2 * (id - 1)].0, peers[2 * (id - 1) + 1].0);
                let _ = writeln!(servers, "server.{id}={peer_ip}:{p}:{e}");
            }
        }
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
            let config = dir.join("zoo.cfg");
            let text = format!(
                "tickTime={tick}\n\
                 initLimit=10\n\
                 syncLimit=5\n\
                 dataDir={data}\n\
                 clientPort={client_port}\n\
                 clientPortAddress=127.0.0.1\n\
                 4lw.commands.whitelist=*\n\
                 admin.enableServer=false\n\
                 minSessionTimeout={min_session}\n\
                 maxSessionTimeout={max_session}\n\
                 maxClientCnxns=0\n\
                 {servers}",
                data = data.display(),
            );
            fs::write(&config, text)?;
            nodes.push(Node {
                log: dir.join("zookeeper.log"),
                config,
                dir,
                client: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, *client_port)),
                process: Mutex::new(None),
            });
        }
        drop(clients);
        drop(peers);
        Ok(nodes)
    }
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
