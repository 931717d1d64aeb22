//! Four-letter-word commands (`srvr`, `cons`, ...) and the parsing of their answers.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Ensemble;

/// How long one four-letter-word exchange may take.
pub(super) const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(2);

impl Ensemble {
    /// Sends a four-letter-word command (e.g. `"srvr"`, `"cons"`, `"mntr"`, `"wchc"`) to
    /// node `i` and returns its answer. Fails with [`io::ErrorKind::TimedOut`] if the node
    /// does not answer within 2 s (e.g. when paused).
    pub async fn four_letter(&self, i: usize, cmd: &str) -> io::Result<String> {
        four_letter_at(self.nodes[i].client, cmd, FOUR_LETTER_TIMEOUT)
            .await
            .map(|(text, _)| text)
    }

    /// The `Mode:` node `i` reports in `srvr` (`"leader"`, `"follower"`, `"standalone"`,
    /// ...), or `None` if it does not answer with one in 2 s (not serving, paused, down).
    ///
    /// ```no_run
    /// # async fn example(zk: &zkfence_testcontainers::Ensemble) {
    /// if zk.mode(0).await.as_deref() == Some("follower") {
    ///     println!("node 0 follows");
    /// }
    /// # }
    /// ```
    pub async fn mode(&self, i: usize) -> Option<String> {
        let (text, _) = four_letter_at(self.nodes[i].client, "srvr", FOUR_LETTER_TIMEOUT)
            .await
            .ok()?;
        mode_of(&text).map(str::to_owned)
    }

    /// Whether node `i` serves clients: it answers `srvr` with a `Mode:` line.
    pub async fn serving(&self, i: usize) -> bool {
        self.serving_within(i, FOUR_LETTER_TIMEOUT).await
    }

    /// The client connections of node `i`, parsed from `cons` (without the connection that
    /// asks).
    pub async fn connections(&self, i: usize) -> io::Result<Vec<ConnectionInfo>> {
        let (text, me) = four_letter_at(self.nodes[i].client, "cons", FOUR_LETTER_TIMEOUT).await?;
        Ok(parse_cons(&text)
            .into_iter()
            .filter(|c| c.peer != me)
            .collect())
    }

    pub(super) async fn serving_within(&self, i: usize, timeout: Duration) -> bool {
        match four_letter_at(self.nodes[i].client, "srvr", timeout).await {
            Ok((text, _)) => mode_of(&text).is_some(),
            Err(_) => false,
        }
    }
}

/// One client connection of a server, parsed from the `cons` four-letter word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The client's address as the server sees it (a proxy's address if proxied).
    pub peer: SocketAddr,
    /// The session id (`sid=0x..`), if the connection has established a session.
    pub session_id: Option<i64>,
    /// Packets received from the client (`recved`).
    pub received: u64,
    /// Packets sent to the client (`sent`).
    pub sent: u64,
    /// The last operation the server processed for the client (`lop`: `CREA`, `GETC`,
    /// `MULT`, `PING`, ...), if it has processed one.
    pub last_operation: Option<String>,
    /// The session timeout this server negotiated with the client (`to`), if the connection
    /// has established a session: it can differ between servers, and change at a reconnect.
    pub session_timeout: Option<Duration>,
}

/// Parses `cons` output lines such as
/// ` /127.0.0.1:39516[1](queued=0,recved=5,sent=5,sid=0x100009a2c7d0000,lop=PING,...)`.
pub(super) fn parse_cons(text: &str) -> Vec<ConnectionInfo> {
    text.lines().filter_map(parse_cons_line).collect()
}

fn parse_cons_line(line: &str) -> Option<ConnectionInfo> {
    let line = line.trim().strip_prefix('/')?;
    let (addr, rest) = line.split_once('[')?;
    let peer: SocketAddr = addr.parse().ok()?;
    let fields = rest.split_once('(')?.1;
    let fields = fields.strip_suffix(')').unwrap_or(fields);
    let mut info = ConnectionInfo {
        peer,
        session_id: None,
        received: 0,
        sent: 0,
        last_operation: None,
        session_timeout: None,
    };
    for kv in fields.split(',') {
        match kv.split_once('=') {
            Some(("recved", v)) => info.received = v.parse().unwrap_or(0),
            Some(("sent", v)) => info.sent = v.parse().unwrap_or(0),
            Some(("lop", v)) if v != "NA" => info.last_operation = Some(v.to_string()),
            Some(("to", v)) => info.session_timeout = v.parse().ok().map(Duration::from_millis),
            Some(("sid", v)) => {
                let hex = v.trim_start_matches("0x");
                info.session_id = u64::from_str_radix(hex, 16).ok().map(|u| u as i64);
            }
            _ => {}
        }
    }
    Some(info)
}

/// The `Mode:` of a `srvr` answer, if it has one.
pub(super) fn mode_of(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(str::trim)
}

/// Sends a four-letter word, returns the answer and the local address used.
pub(super) async fn four_letter_at(
    addr: SocketAddr,
    cmd: &str,
    timeout: Duration,
) -> io::Result<(String, SocketAddr)> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await?;
        let me = s.local_addr()?;
        s.write_all(cmd.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok((String::from_utf8_lossy(&out).into_owned(), me))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{addr} did not answer `{cmd}` within {timeout:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cons() {
        let text = " /127.0.0.1:39516[1](queued=0,recved=5,sent=6,sid=0x100009a2c7d0000,lop=PING,est=1700000000000,to=2000,lcxid=0x1,lzxid=0xffffffffffffffff,lresp=1,llat=0,minlat=0,avglat=0.0,maxlat=3)\n /127.0.0.1:39518[0](queued=0,recved=1,sent=0)\n\n";
        let cons = parse_cons(text);
        assert_eq!(cons.len(), 2);
        assert_eq!(cons[0].peer, "127.0.0.1:39516".parse().unwrap());
        assert_eq!(cons[0].session_id, Some(0x100009a2c7d0000));
        assert_eq!((cons[0].received, cons[0].sent), (5, 6));
        assert_eq!(cons[0].last_operation.as_deref(), Some("PING"));
        assert_eq!(cons[1].session_id, None);
        assert_eq!(cons[1].last_operation, None);
    }

    #[test]
    fn finds_mode() {
        assert_eq!(
            mode_of("Zxid: 0x0\nMode: follower\nNode count: 5\n"),
            Some("follower")
        );
        assert_eq!(
            mode_of("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }
}
