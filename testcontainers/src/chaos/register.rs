//! The protected resource of a campaign: a register in the campaign process, behind a
//! [`Fence`], reached by the contenders over loopback TCP.
//!
//! A write is one line `CLIENT TOKEN SEQ`; the answer is `ok` or `stale NEWEST`. The fence's
//! decision and its record in the history are made under one lock, so the history lists the
//! register's decisions in the order it made them.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use zkfence::{Fence, FencingToken};

use super::history::Recorder;
use super::Event;

/// The register's server; dropping it stops accepting (connections end with their clients).
pub(crate) struct RegisterServer {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl RegisterServer {
    pub(crate) async fn start(recorder: Recorder) -> io::Result<RegisterServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let fence = Arc::new(Mutex::new(Fence::new()));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, fence.clone(), recorder.clone()));
            }
        });
        Ok(RegisterServer { addr, accept })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RegisterServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(stream: TcpStream, fence: Arc<Mutex<Fence>>, recorder: Recorder) {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut parts = line.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(client)), Some(Ok(token)), Some(Ok(seq))) =
            (parts.next(), parts.next(), parts.next())
        else {
            tracing::warn!(%line, "chaos register: malformed write");
            return;
        };
        let client = client as usize;
        let answer = {
            // One lock over the decision and its record: the history's order of writes is
            // the register's.
            let fence = fence.lock().unwrap();
            match fence.admit(FencingToken::new(token)) {
                Ok(()) => {
                    recorder.record(Event::WriteAccepted { client, token, seq });
                    "ok\n".to_string()
                }
                Err(stale) => {
                    let newest = stale.newest.get();
                    recorder.record(Event::WriteRefused {
                        client,
                        token,
                        seq,
                        newest,
                    });
                    format!("stale {newest}\n")
                }
            }
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
