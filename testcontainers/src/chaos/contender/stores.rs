//! A contender's connections to the stores its writes go to: the campaign's register, and
//! with `--postgres` PostgreSQL.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::super::{sql, Event};
use super::{emit, ContenderConfig};

/// The connection to the campaign's PostgreSQL (`--postgres`), opened when first needed and
/// again after an error.
pub(super) struct Database {
    url: String,
    client: Option<tokio_postgres::Client>,
}

impl Database {
    pub(super) fn new(url: String) -> Database {
        Database { url, client: None }
    }

    /// Writes (token, client, seq) through the recipe's fence and records PostgreSQL's
    /// answer; false only if the fence refused. An error is recorded as such (the write
    /// may or may not have committed: PostgreSQL's log at the end says) and the hold goes
    /// on, as it would with a store that answered nothing.
    pub(super) async fn write(
        &mut self,
        c: &ContenderConfig,
        token: u64,
        seq: u64,
        resource: &str,
    ) -> bool {
        let client = c.client;
        let t = Duration::from_millis(c.session_timeout_ms);
        let result = match self.client.as_mut() {
            Some(db) => sql::write_through_fence(db, resource, client, token, seq)
                .await
                .map_err(|e| sql::with_causes(&e)),
            None => match sql::connect(&self.url, t).await {
                Ok(db) => {
                    let db = self.client.insert(db);
                    sql::write_through_fence(db, resource, client, token, seq)
                        .await
                        .map_err(|e| sql::with_causes(&e))
                }
                Err(e) => Err(format!("connect: {e}")),
            },
        };
        match result {
            Ok(sql::Outcome::Written) => {
                emit(
                    c,
                    Event::PgWriteAccepted {
                        client,
                        token,
                        seq,
                        path: resource.to_string(),
                    },
                );
                true
            }
            Ok(sql::Outcome::Stale { newest }) => {
                emit(
                    c,
                    Event::PgWriteRefused {
                        client,
                        token,
                        seq,
                        newest,
                        path: resource.to_string(),
                    },
                );
                false
            }
            Err(error) => {
                self.client = None;
                emit(
                    c,
                    Event::PgWriteFailed {
                        client,
                        token,
                        seq,
                        error,
                        path: resource.to_string(),
                    },
                );
                true
            }
        }
    }
}

/// The connection to the campaign's register.
pub(super) struct Register {
    stream: BufReader<TcpStream>,
}

impl Register {
    pub(super) async fn connect(addr: SocketAddr) -> std::io::Result<Register> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Register {
            stream: BufReader::new(stream),
        })
    }

    /// Writes (token, client, seq) to `resource`, or with `read` reads it (a read lock's
    /// reader); `Ok(false)` if the fence refused it.
    pub(super) async fn send(
        &mut self,
        client: usize,
        token: u64,
        seq: u64,
        resource: &str,
        read: bool,
    ) -> std::io::Result<bool> {
        let line = match read {
            false => format!("{client} {token} {seq} {resource}\n"),
            true => format!("{client} {token} {seq} {resource} read\n"),
        };
        self.stream.get_mut().write_all(line.as_bytes()).await?;
        let mut answer = String::new();
        if self.stream.read_line(&mut answer).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(answer.trim() == "ok")
    }
}
