//! `--sink`: the stores' throwaway servers, the campaign's own sink of each (it makes the
//! resources' fences before the contenders start, and reads each store's record at the
//! end), and what the contenders are told to reach them by.

use std::collections::BTreeMap;
use std::time::Duration;

use zkfence_fences::sink::{EtcdSink, HttpSink, MySink, PgSink, RedisSink, Sink};

use super::super::{CommittedWrite, Event, Store};
use crate::{Etcd, HarnessError, MariaDb, Postgres, Redis};

/// How long the campaign waits for a store's answer (making a fence, reading its record):
/// a store on this machine answers in milliseconds; a loaded CI machine may take seconds.
const STORE_STEP: Duration = Duration::from_secs(30);

/// One store's server (the HTTP service is the campaign's own [`HttpSink`]) and the
/// campaign's sink of it.
pub(super) struct StoreServer {
    pub(super) store: Store,
    /// Keeps the server running (dropping it stops the server and removes its files).
    server: Server,
    sink: Box<dyn Sink>,
    /// What a contender connects its sink to: a URL, an endpoint, or the HTTP service's
    /// address.
    pub(super) address: String,
}

enum Server {
    Postgres(Postgres),
    Mariadb(MariaDb),
    Redis(Redis),
    Etcd(Etcd),
    /// The HTTP service lives in the campaign process: its sink is its server.
    InProcess,
}

/// Starts every store of `stores` and its sink, and makes the fence of each of `resources`
/// in it.
///
/// # Notable errors
/// The server's [`HarnessError`] (a missing server binary is
/// [`HarnessError::ServerNotFound`] or [`HarnessError::PostgresNotFound`]), and
/// [`HarnessError::Io`] naming the store if its fence cannot be made.
pub(super) async fn start(
    stores: &[Store],
    resources: &[String],
) -> Result<Vec<StoreServer>, HarnessError> {
    let mut started = Vec::with_capacity(stores.len());
    for &store in stores {
        let failed = |e: zkfence_fences::Error| {
            HarnessError::Io(std::io::Error::other(format!(
                "cannot use {}: {e}",
                store.title()
            )))
        };
        let (server, sink, address): (Server, Box<dyn Sink>, String) = match store {
            Store::Postgres => {
                let pg = Postgres::launch().await?;
                let url = pg.url();
                let sink = PgSink::connect(&url).await.map_err(failed)?;
                (Server::Postgres(pg), Box::new(sink), url)
            }
            Store::Mariadb => {
                let db = MariaDb::launch().await?;
                let url = db.url();
                let sink = MySink::connect(&url).await.map_err(failed)?;
                (Server::Mariadb(db), Box::new(sink), url)
            }
            Store::Redis => {
                let redis = Redis::launch().await?;
                let url = redis.url();
                let sink = RedisSink::connect(&url).await.map_err(failed)?;
                (Server::Redis(redis), Box::new(sink), url)
            }
            Store::Etcd => {
                let etcd = Etcd::launch().await?;
                let endpoint = etcd.endpoint();
                let sink = EtcdSink::connect(&endpoint).await.map_err(failed)?;
                (Server::Etcd(etcd), Box::new(sink), endpoint)
            }
            Store::Http => {
                let sink = HttpSink::start().await.map_err(failed)?;
                let addr = sink.addr().to_string();
                (Server::InProcess, Box::new(sink), addr)
            }
        };
        for resource in resources {
            match tokio::time::timeout(STORE_STEP, sink.create(resource)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(failed(e)),
                Err(_) => {
                    return Err(HarnessError::Io(std::io::Error::other(format!(
                        "{} did not make the fence of {resource} within {STORE_STEP:?}",
                        store.title()
                    ))))
                }
            }
        }
        tracing::info!(%store, %address, "chaos: store serving");
        started.push(StoreServer {
            store,
            server,
            sink,
            address,
        });
    }
    Ok(started)
}

impl StoreServer {
    /// The store's record, as [`Event::StoreFinal`]: each resource's newest token its fence
    /// accepted and every committed write, in its commit order per resource.
    pub(super) async fn record(&self, resources: &[String]) -> Event {
        let mut tokens = BTreeMap::new();
        let mut writes = Vec::new();
        let read = async {
            for resource in resources {
                let newest = self
                    .sink
                    .newest(resource)
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(t) = newest.filter(|t| t.get() > 0) {
                    tokens.insert(resource.clone(), t.get());
                }
                let committed = self
                    .sink
                    .committed(resource)
                    .await
                    .map_err(|e| e.to_string())?;
                for entry in committed {
                    let client = entry.writer.parse().map_err(|_| {
                        format!(
                            "{resource}: a write by {:?}, not a client's number",
                            entry.writer
                        )
                    })?;
                    writes.push(CommittedWrite {
                        client,
                        token: entry.token.get(),
                        seq: entry.seq,
                        path: resource.clone(),
                    });
                }
            }
            Ok::<(), String>(())
        };
        let error = match tokio::time::timeout(STORE_STEP, read).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(format!("no answer within {STORE_STEP:?}")),
        };
        if error.is_some() {
            tokens.clear();
            writes.clear();
        }
        Event::StoreFinal {
            store: self.store,
            tokens,
            writes,
            error,
        }
    }

    /// The server's processes (none for the HTTP service, which is the campaign's own).
    pub(super) fn pids(&self) -> Vec<u32> {
        match &self.server {
            Server::Postgres(pg) => pg.pids(),
            Server::Mariadb(s) => s.pid().into_iter().collect(),
            Server::Redis(s) => s.pid().into_iter().collect(),
            Server::Etcd(s) => s.pid().into_iter().collect(),
            Server::InProcess => Vec::new(),
        }
    }
}
