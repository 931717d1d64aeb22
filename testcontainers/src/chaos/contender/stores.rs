//! A contender's connections to the stores its writes go to: the campaign's register, and
//! with `--sink` each store through its fence (`zkfence-fences`' sinks; the HTTP service by
//! `PUT`s with the fencing headers, as any client of a fenced service sends them).

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use zkfence::FencingToken;
use zkfence_fences::sink::{EtcdSink, MySink, PgSink, RedisSink, Sink};
use zkfence_fences::Outcome;

use super::super::{Event, Store, WriteOutcome};
use super::{emit, ContenderConfig};

/// One store as a contender writes to it: connected when first needed, again after a
/// failed connect.
pub(super) struct StoreWriter {
    store: Store,
    address: String,
    sink: Option<Writer>,
}

enum Writer {
    Sink(Box<dyn Sink>),
    Http(Box<HttpWriter>),
}

impl StoreWriter {
    pub(super) fn new(store: Store, address: String) -> StoreWriter {
        StoreWriter {
            store,
            address,
            sink: None,
        }
    }

    async fn connect(&self) -> Result<Writer, String> {
        let address = &self.address;
        let sink: Box<dyn Sink> = match self.store {
            Store::Postgres => Box::new(PgSink::connect(address).await.map_err(|e| e.to_string())?),
            Store::Mariadb => Box::new(MySink::connect(address).await.map_err(|e| e.to_string())?),
            Store::Redis => Box::new(
                RedisSink::connect(address)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            Store::Etcd => Box::new(
                EtcdSink::connect(address)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            Store::Http => return Ok(Writer::Http(Box::new(HttpWriter::new(address)))),
        };
        Ok(Writer::Sink(sink))
    }

    /// Writes (token, client, seq) to `resource` through the store's fence and records what
    /// the writer heard; false only if the fence refused. An error is recorded as such (the
    /// write may or may not have committed: the store's record at the end says) and the hold
    /// goes on, as it would with a store that answered nothing. A store that does not answer
    /// within the session timeout counts as an error.
    pub(super) async fn write(
        &mut self,
        c: &ContenderConfig,
        token: u64,
        seq: u64,
        resource: &str,
    ) -> bool {
        let client = c.client;
        let t = Duration::from_millis(c.session_timeout_ms);
        let entry =
            zkfence_fences::sink::Entry::new(client.to_string(), seq, FencingToken::new(token));
        let attempt = async {
            if self.sink.is_none() {
                self.sink = Some(self.connect().await.map_err(|e| format!("connect: {e}"))?);
            }
            match self.sink.as_ref().expect("connected above") {
                Writer::Sink(sink) => sink
                    .write(resource, &entry)
                    .await
                    .map_err(|e| e.to_string()),
                Writer::Http(http) => http.write(resource, &entry).await,
            }
        };
        let result = match tokio::time::timeout(t, attempt).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {t:?}")),
        };
        let (outcome, newest, error) = match result {
            Ok(Outcome::Written(())) => (WriteOutcome::Written, None, None),
            Ok(Outcome::Refused(stale)) => (WriteOutcome::Refused, Some(stale.newest.get()), None),
            Err(error) => (WriteOutcome::Failed, None, Some(error)),
        };
        emit(
            c,
            Event::StoreWrite {
                store: self.store,
                client,
                token,
                seq,
                path: resource.to_string(),
                outcome,
                newest,
                error,
            },
        );
        outcome != WriteOutcome::Refused
    }
}

/// A client of the campaign's fenced HTTP service: `PUT /` with the entry as its body and
/// the fencing headers (`zkfence_fences::http::fencing_headers`); the layer answers a stale
/// token with a refusal naming the newest.
struct HttpWriter {
    url: String,
    client: HttpClient<HttpConnector, Full<Bytes>>,
}

impl HttpWriter {
    fn new(addr: &str) -> HttpWriter {
        HttpWriter {
            url: format!("http://{addr}/"),
            client: HttpClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn write(
        &self,
        resource: &str,
        entry: &zkfence_fences::sink::Entry,
    ) -> Result<Outcome, String> {
        let headers = zkfence_fences::http::fencing_headers(resource, entry.token)
            .map_err(|e| e.to_string())?;
        let mut request = http::Request::put(&self.url)
            .body(Full::new(Bytes::from(entry.to_string())))
            .map_err(|e| e.to_string())?;
        request.headers_mut().extend(headers);
        let response = (self.client.request(request).await).map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        // Read to the end, so that the connection can serve the next request.
        let _ = body.collect().await.map_err(|e| e.to_string())?;
        let response = http::Response::from_parts(parts, ());
        zkfence_fences::http::outcome_of(&response, entry.token).map_err(|e| e.to_string())
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
