//! The protected resources of a campaign: a register in the campaign process, with a
//! [`Fence`] per resource, reached by the contenders over loopback TCP.
//!
//! A write is one line `CLIENT TOKEN SEQ RESOURCE`, a read/write lock's read `CLIENT TOKEN SEQ
//! RESOURCE read`; the answer is `ok` or `stale NEWEST`. A write is admitted if its token is at
//! least as new as every write's and read's the resource has seen (a writer granted after a
//! reader has a newer token); a read if it is at least as new as every write's (readers share
//! the lock, so their tokens come in any order). The decision and its record in the history are
//! made under one lock, so the history lists the register's decisions in the order it made
//! them.

use std::collections::HashMap;
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
        let fences = Arc::new(Mutex::new(HashMap::new()));
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, fences.clone(), recorder.clone()));
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

/// What the register keeps per resource: the writers' fence, and the newest reader's token.
#[derive(Default)]
struct Resource {
    writes: Fence,
    newest_read: u64,
}

type Resources = Arc<Mutex<HashMap<String, Resource>>>;

async fn serve(stream: TcpStream, resources: Resources, recorder: Recorder) {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut parts = line.split_whitespace();
        let mut number = || parts.next().and_then(|p| p.parse::<u64>().ok());
        let (Some(client), Some(token), Some(seq)) = (number(), number(), number()) else {
            tracing::warn!(%line, "chaos register: malformed write");
            return;
        };
        let Some(path) = parts.next().map(str::to_string) else {
            tracing::warn!(%line, "chaos register: a write without its resource");
            return;
        };
        let is_read = parts.next() == Some("read");
        let client = client as usize;
        let newest = {
            // One lock over the decision and its record: the history's order of writes is
            // the register's.
            let mut resources = resources.lock().unwrap();
            let r = resources.entry(path.clone()).or_default();
            let written = r.writes.newest().get();
            if is_read {
                if token >= written {
                    r.newest_read = r.newest_read.max(token);
                    recorder.record(Event::ReadAccepted {
                        client,
                        token,
                        seq,
                        path,
                    });
                    None
                } else {
                    recorder.record(Event::ReadRefused {
                        client,
                        token,
                        seq,
                        newest: written,
                        path,
                    });
                    Some(written)
                }
            } else {
                // A reader's token raises the bar only for writers: checked before the fence,
                // which then admits (and keeps) the token, or refuses it.
                let decision = if token < r.newest_read {
                    Err(r.newest_read.max(written))
                } else {
                    r.writes
                        .admit(FencingToken::new(token))
                        .map_err(|stale| stale.newest.get())
                };
                match decision {
                    Ok(()) => {
                        recorder.record(Event::WriteAccepted {
                            client,
                            token,
                            seq,
                            path,
                        });
                        None
                    }
                    Err(newest) => {
                        recorder.record(Event::WriteRefused {
                            client,
                            token,
                            seq,
                            newest,
                            path,
                        });
                        Some(newest)
                    }
                }
            }
        };
        let answer = match newest {
            None => "ok\n".to_string(),
            Some(newest) => format!("stale {newest}\n"),
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
