//! One trait over every store's fence and its record of committed writes, for test harnesses:
//! the conformance suite (`tests/conformance.rs`, one test body for every store) and the
//! chaos campaign (`zkfence chaos --sink …`).
//!
//! A [`Sink`] writes an [`Entry`] (writer, sequence number, token) to a resource *through
//! that store's fence*, and reads back what the store committed **in the store's own commit
//! order**, so a checker judges each store by its own record rather than by the writers'
//! reports (a writer may report after a later writer, or die before it reports):
//!
//! | sink | the write (one atomic step with the fence) | the record, in commit order |
//! |---|---|---|
//! | [`PgSink`] | upsert the value row, insert a log row (`bigserial`) | log rows by serial: each is taken under the fence row's lock |
//! | [`MySink`] | the same, InnoDB, `AUTO_INCREMENT` | the same |
//! | [`RedisSink`] | `SET` the value key, `RPUSH` the log list, in the script | the list |
//! | [`EtcdSink`] | put the value key and a log key, in the transaction | log keys by create revision |
//! | [`HttpSink`] | a `PUT` through [`FencingLayer`](crate::http::FencingLayer) over a loopback hyper server, whose handler sets the value and appends to the log | the log (appended in the handler, one request per resource at a time) |
//!
//! A campaign would, per store: `create` the resource's fence once, `write` every step of
//! every contender with the token of the lease it holds (recording `Written`/`Refused`/an
//! error as it sees it), and at the end read `committed` and check that tokens never go down
//! in commit order, that every committed token was granted to its writer, and that no write
//! reported `Written` is missing. `abandon_write` is a writer dying in the middle of a
//! write.
//!
//! ```no_run
//! # async fn example(url: &str, lease: zkfence::Lease) -> Result<(), zkfence_fences::Error> {
//! use zkfence_fences::sink::{Entry, PgSink, Sink};
//!
//! let sink = PgSink::connect(url).await?;
//! sink.create("/locks/chaos").await?;
//! let entry = Entry::new("client-3", 17, lease.token());
//! let outcome = sink.write("/locks/chaos", &entry).await?;
//! let record = sink.committed("/locks/chaos").await?; // PostgreSQL's order
//! # Ok(()) }
//! ```

use std::fmt;

use zkfence::FencingToken;

use crate::{Error, Outcome};

/// One fenced write of a harness: who wrote, its own sequence number, and the token.
///
/// ```
/// use zkfence_fences::{sink::Entry, FencingToken};
/// let e = Entry::new("w1", 3, FencingToken::new(40));
/// assert_eq!(e.to_string(), "40 3 w1");
/// assert_eq!("40 3 w1".parse::<Entry>().unwrap(), e);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The writer (a contender's name or number).
    pub writer: String,
    /// The writer's sequence number of the write.
    pub seq: u64,
    /// The token the write carried.
    pub token: FencingToken,
}

impl Entry {
    /// An entry.
    ///
    /// ```
    /// let e = zkfence_fences::sink::Entry::new("w1", 1, zkfence_fences::FencingToken::new(9));
    /// ```
    pub fn new(writer: impl Into<String>, seq: u64, token: FencingToken) -> Entry {
        Entry {
            writer: writer.into(),
            seq,
            token,
        }
    }
}

/// As stored: `TOKEN SEQ WRITER` (the writer last, so it may hold spaces).
impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.token, self.seq, self.writer)
    }
}

impl std::str::FromStr for Entry {
    type Err = Error;

    fn from_str(s: &str) -> Result<Entry, Error> {
        let mut parts = s.splitn(3, ' ');
        let parsed = (|| {
            let token = parts.next()?.parse().ok()?;
            let seq = parts.next()?.parse().ok()?;
            let writer = parts.next()?.to_string();
            Some(Entry::new(writer, seq, FencingToken::new(token)))
        })();
        parsed.ok_or_else(|| Error::store("sink", format!("not an entry: {s:?}")))
    }
}

/// A store's fence and its record of committed writes (see the [module docs](self)).
///
/// Every method takes the resource key; resources are kept apart (their own fence, value
/// and record).
#[async_trait::async_trait]
pub trait Sink: Send + Sync {
    /// The store's name: `postgres`, `mariadb`, `redis`, `etcd`, `http`.
    fn name(&self) -> &'static str;

    /// Creates the resource's fence if missing (the owner's step).
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidResource`], [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: idempotent.
    async fn create(&self, resource: &str) -> Result<(), Error>;

    /// Writes `entry` through the resource's fence with `entry.token`: sets the resource's
    /// value and appends the entry to its record, in one atomic step with the check.
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidToken`], [`Error::InvalidResource`], [`Error::NoFence`],
    /// [`Error::Store`] (the outcome is unknown: whole or nothing).
    ///
    /// # Cancel safety
    ///
    /// Once sent, whole or nothing; a cancelled call does not know which.
    async fn write(&self, resource: &str, entry: &Entry) -> Result<Outcome, Error>;

    /// Starts writing `entry` and dies: the connection is dropped at the worst point the
    /// store's protocol has (the SQL stores: after the fence check, before the write and
    /// the commit; Redis, etcd and HTTP: once the request is sent, before the answer). The
    /// store must keep the write whole or not at all.
    ///
    /// # Notable errors
    ///
    /// [`Error::Store`] if the write could not even be started.
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    async fn abandon_write(&self, resource: &str, entry: &Entry) -> Result<(), Error>;

    /// Every entry the store committed for the resource, in the store's commit order.
    ///
    /// # Notable errors
    ///
    /// [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn committed(&self, resource: &str) -> Result<Vec<Entry>, Error>;

    /// The resource's value: the entry of the last committed write.
    ///
    /// # Notable errors
    ///
    /// [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn current(&self, resource: &str) -> Result<Option<Entry>, Error>;

    /// The newest token the resource's fence accepted; `None` if it has no fence.
    ///
    /// # Notable errors
    ///
    /// [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn newest(&self, resource: &str) -> Result<Option<FencingToken>, Error>;
}

#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "etcd",
        feature = "http"
    )),
    allow(dead_code)
)]
fn parse_all<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Vec<Entry>, Error> {
    texts.into_iter().map(str::parse).collect()
}

/// Lowercase hex of a key, so that one resource's keys never share a prefix with another's.
#[cfg(feature = "etcd")]
fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

// ---- PostgreSQL ----

#[cfg(feature = "postgres")]
pub use pg::PgSink;

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use crate::postgres::PgFence;
    use std::sync::Mutex;
    use tokio_postgres::{Client, NoTls};

    const SCHEMA: &str = "
        CREATE TABLE IF NOT EXISTS zkfence_sink_value (resource text PRIMARY KEY, entry text NOT NULL);
        CREATE TABLE IF NOT EXISTS zkfence_sink_log (
            seq bigserial PRIMARY KEY, resource text NOT NULL, entry text NOT NULL);
        CREATE INDEX IF NOT EXISTS zkfence_sink_log_resource ON zkfence_sink_log (resource, seq);";
    const SET_VALUE: &str = "INSERT INTO zkfence_sink_value (resource, entry) VALUES ($1, $2) \
        ON CONFLICT (resource) DO UPDATE SET entry = EXCLUDED.entry";
    const LOG: &str = "INSERT INTO zkfence_sink_log (resource, entry) VALUES ($1, $2)";

    fn pg(e: tokio_postgres::Error) -> Error {
        Error::store("PostgreSQL", e)
    }

    /// [`Sink`] over [`PgFence`]: a pool of connections to one database.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_fences::Error> {
    /// let sink = zkfence_fences::sink::PgSink::connect("postgres://me@127.0.0.1/db").await?;
    /// # Ok(()) }
    /// ```
    pub struct PgSink {
        url: String,
        fence: PgFence,
        idle: Mutex<Vec<Client>>,
    }

    impl PgSink {
        /// Connects, and creates the fence table and the sink's tables if missing.
        ///
        /// # Notable errors
        ///
        /// [`Error::Store`] if the database cannot be used.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: nothing is left half made (each statement is idempotent).
        ///
        /// ```no_run
        /// # async fn example() -> Result<(), zkfence_fences::Error> {
        /// let sink = zkfence_fences::sink::PgSink::connect("postgres://me@127.0.0.1/db").await?;
        /// # Ok(()) }
        /// ```
        pub async fn connect(url: &str) -> Result<PgSink, Error> {
            let sink = PgSink {
                url: url.to_string(),
                fence: PgFence::new(),
                idle: Mutex::new(Vec::new()),
            };
            let db = sink.take().await?;
            sink.fence.install(&db).await?;
            // Sinks connecting at once race on `IF NOT EXISTS`: the loser tries again and
            // finds the tables made.
            let mut attempt = 0;
            loop {
                match db.batch_execute(SCHEMA).await {
                    Ok(()) => break,
                    Err(e) if attempt < 5 && crate::postgres::created_concurrently(&e) => {
                        attempt += 1;
                    }
                    Err(e) => return Err(pg(e)),
                }
            }
            sink.give(db);
            Ok(sink)
        }

        async fn open(&self) -> Result<Client, Error> {
            let (client, connection) = tokio_postgres::connect(&self.url, NoTls)
                .await
                .map_err(pg)?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok(client)
        }

        async fn take(&self) -> Result<Client, Error> {
            let idle = self.idle.lock().unwrap().pop();
            match idle {
                Some(c) if !c.is_closed() => Ok(c),
                _ => self.open().await,
            }
        }

        fn give(&self, client: Client) {
            self.idle.lock().unwrap().push(client);
        }
    }

    #[async_trait::async_trait]
    impl Sink for PgSink {
        fn name(&self) -> &'static str {
            "postgres"
        }

        async fn create(&self, resource: &str) -> Result<(), Error> {
            let db = self.take().await?;
            self.fence.create(&db, resource).await?;
            self.give(db);
            Ok(())
        }

        async fn write(&self, resource: &str, entry: &Entry) -> Result<Outcome, Error> {
            let mut db = self.take().await?;
            let text = entry.to_string();
            let outcome = self
                .fence
                .write(
                    &mut db,
                    resource,
                    entry.token,
                    &[(SET_VALUE, &[&resource, &text]), (LOG, &[&resource, &text])],
                )
                .await?;
            self.give(db);
            Ok(outcome.map(|_| ()))
        }

        async fn abandon_write(&self, resource: &str, entry: &Entry) -> Result<(), Error> {
            // A connection of its own, dropped after the check: PostgreSQL rolls back.
            let mut db = self.open().await?;
            if let Outcome::Written(tx) = self.fence.begin(&mut db, resource, entry.token).await? {
                std::mem::forget(tx); // no ROLLBACK sent: the process "dies" here
            }
            drop(db);
            Ok(())
        }

        async fn committed(&self, resource: &str) -> Result<Vec<Entry>, Error> {
            let db = self.take().await?;
            let rows = db
                .query(
                    "SELECT entry FROM zkfence_sink_log WHERE resource = $1 ORDER BY seq",
                    &[&resource],
                )
                .await
                .map_err(pg)?;
            self.give(db);
            parse_all(rows.iter().map(|r| r.get::<_, &str>(0)))
        }

        async fn current(&self, resource: &str) -> Result<Option<Entry>, Error> {
            let db = self.take().await?;
            let row = db
                .query_opt(
                    "SELECT entry FROM zkfence_sink_value WHERE resource = $1",
                    &[&resource],
                )
                .await
                .map_err(pg)?;
            self.give(db);
            row.map(|r| r.get::<_, &str>(0).parse()).transpose()
        }

        async fn newest(&self, resource: &str) -> Result<Option<FencingToken>, Error> {
            let db = self.take().await?;
            let newest = self.fence.newest(&db, resource).await;
            self.give(db);
            newest
        }
    }
}

// ---- MySQL / MariaDB ----

#[cfg(feature = "mysql")]
pub use my::MySink;

#[cfg(feature = "mysql")]
mod my {
    use super::*;
    use crate::mysql::MyFence;
    use mysql_async::prelude::Queryable;
    use mysql_async::{Pool, TxOpts};

    fn my(e: mysql_async::Error) -> Error {
        Error::store("MySQL", e)
    }

    /// [`Sink`] over [`MyFence`]: a connection pool to one database.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_fences::Error> {
    /// let sink = zkfence_fences::sink::MySink::connect("mysql://me@127.0.0.1/db").await?;
    /// # Ok(()) }
    /// ```
    pub struct MySink {
        opts: mysql_async::Opts,
        pool: Pool,
        fence: MyFence,
    }

    impl MySink {
        /// Connects, and creates the fence table and the sink's tables if missing.
        ///
        /// # Notable errors
        ///
        /// [`Error::Store`] if the database cannot be used (or the URL is not a MySQL URL).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: each statement is idempotent.
        ///
        /// ```no_run
        /// # async fn example() -> Result<(), zkfence_fences::Error> {
        /// let sink = zkfence_fences::sink::MySink::connect("mysql://me@127.0.0.1/db").await?;
        /// # Ok(()) }
        /// ```
        pub async fn connect(url: &str) -> Result<MySink, Error> {
            let opts = mysql_async::Opts::from_url(url).map_err(|e| Error::store("MySQL", e))?;
            let sink = MySink {
                pool: Pool::new(opts.clone()),
                opts,
                fence: MyFence::new(),
            };
            let mut conn = sink.pool.get_conn().await.map_err(my)?;
            sink.fence.install(&mut conn).await?;
            conn.query_drop(
                "CREATE TABLE IF NOT EXISTS zkfence_sink_value (\
                 resource VARBINARY(512) NOT NULL PRIMARY KEY, entry TEXT NOT NULL) ENGINE=InnoDB",
            )
            .await
            .map_err(my)?;
            conn.query_drop(
                "CREATE TABLE IF NOT EXISTS zkfence_sink_log (\
                 seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, \
                 resource VARBINARY(512) NOT NULL, entry TEXT NOT NULL, \
                 KEY (resource, seq)) ENGINE=InnoDB",
            )
            .await
            .map_err(my)?;
            Ok(sink)
        }
    }

    #[async_trait::async_trait]
    impl Sink for MySink {
        fn name(&self) -> &'static str {
            "mariadb"
        }

        async fn create(&self, resource: &str) -> Result<(), Error> {
            let mut conn = self.pool.get_conn().await.map_err(my)?;
            self.fence.create(&mut conn, resource).await
        }

        async fn write(&self, resource: &str, entry: &Entry) -> Result<Outcome, Error> {
            let mut conn = self.pool.get_conn().await.map_err(my)?;
            let text = entry.to_string();
            let key = resource.as_bytes().to_vec();
            let outcome = self
                .fence
                .write(
                    &mut conn,
                    resource,
                    entry.token,
                    vec![
                        (
                            "INSERT INTO zkfence_sink_value (resource, entry) VALUES (?, ?) \
                             ON DUPLICATE KEY UPDATE entry = VALUES(entry)",
                            (key.clone(), text.clone()).into(),
                        ),
                        (
                            "INSERT INTO zkfence_sink_log (resource, entry) VALUES (?, ?)",
                            (key, text).into(),
                        ),
                    ],
                )
                .await?;
            Ok(outcome.map(|_| ()))
        }

        async fn abandon_write(&self, resource: &str, entry: &Entry) -> Result<(), Error> {
            // A connection outside the pool, closed after the check: InnoDB rolls back.
            let mut conn = mysql_async::Conn::new(self.opts.clone())
                .await
                .map_err(my)?;
            let mut tx = conn
                .start_transaction(TxOpts::default())
                .await
                .map_err(my)?;
            let admitted = self.fence.admit(&mut tx, resource, entry.token).await?;
            let _ = admitted;
            std::mem::forget(tx); // no ROLLBACK sent: the process "dies" here
            drop(conn);
            Ok(())
        }

        async fn committed(&self, resource: &str) -> Result<Vec<Entry>, Error> {
            let mut conn = self.pool.get_conn().await.map_err(my)?;
            let texts: Vec<String> = conn
                .exec(
                    "SELECT entry FROM zkfence_sink_log WHERE resource = ? ORDER BY seq",
                    (resource.as_bytes(),),
                )
                .await
                .map_err(my)?;
            parse_all(texts.iter().map(String::as_str))
        }

        async fn current(&self, resource: &str) -> Result<Option<Entry>, Error> {
            let mut conn = self.pool.get_conn().await.map_err(my)?;
            let text: Option<String> = conn
                .exec_first(
                    "SELECT entry FROM zkfence_sink_value WHERE resource = ?",
                    (resource.as_bytes(),),
                )
                .await
                .map_err(my)?;
            text.map(|t| t.parse()).transpose()
        }

        async fn newest(&self, resource: &str) -> Result<Option<FencingToken>, Error> {
            let mut conn = self.pool.get_conn().await.map_err(my)?;
            self.fence.newest(&mut conn, resource).await
        }
    }
}

// ---- Redis ----

#[cfg(feature = "redis")]
pub use rd::RedisSink;

#[cfg(feature = "redis")]
mod rd {
    use super::*;
    use crate::redis::{RedisFence, Write};
    use ::redis::aio::MultiplexedConnection;
    use ::redis::AsyncCommands;

    fn rd(e: ::redis::RedisError) -> Error {
        Error::store("Redis", e)
    }

    /// [`Sink`] over [`RedisFence`]: one multiplexed connection.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_fences::Error> {
    /// let sink = zkfence_fences::sink::RedisSink::connect("redis://127.0.0.1/").await?;
    /// # Ok(()) }
    /// ```
    pub struct RedisSink {
        client: ::redis::Client,
        conn: MultiplexedConnection,
        fence: RedisFence,
    }

    impl RedisSink {
        /// Connects.
        ///
        /// # Notable errors
        ///
        /// [`Error::Store`] if Redis cannot be reached.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe.
        ///
        /// ```no_run
        /// # async fn example() -> Result<(), zkfence_fences::Error> {
        /// let sink = zkfence_fences::sink::RedisSink::connect("redis://127.0.0.1/").await?;
        /// # Ok(()) }
        /// ```
        pub async fn connect(url: &str) -> Result<RedisSink, Error> {
            let client = ::redis::Client::open(url).map_err(rd)?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(rd)?;
            Ok(RedisSink {
                client,
                conn,
                fence: RedisFence::new(),
            })
        }

        fn value_key(resource: &str) -> String {
            format!("zkfence:sink:value:{resource}")
        }

        fn log_key(resource: &str) -> String {
            format!("zkfence:sink:log:{resource}")
        }

        fn write_of(resource: &str, entry: &Entry) -> Write {
            let text = entry.to_string();
            Write::new()
                .set(Self::value_key(resource), &text)
                .rpush(Self::log_key(resource), &text)
        }
    }

    #[async_trait::async_trait]
    impl Sink for RedisSink {
        fn name(&self) -> &'static str {
            "redis"
        }

        async fn create(&self, resource: &str) -> Result<(), Error> {
            self.fence.create(&mut self.conn.clone(), resource).await
        }

        async fn write(&self, resource: &str, entry: &Entry) -> Result<Outcome, Error> {
            let write = Self::write_of(resource, entry);
            self.fence
                .write(&mut self.conn.clone(), resource, entry.token, &write)
                .await
        }

        async fn abandon_write(&self, resource: &str, entry: &Entry) -> Result<(), Error> {
            // A connection of its own, closed as soon as the script is sent.
            let mut conn = self
                .client
                .get_multiplexed_async_connection()
                .await
                .map_err(rd)?;
            let write = Self::write_of(resource, entry);
            let fence = self.fence.clone();
            let resource = resource.to_string();
            let token = entry.token;
            let task = tokio::spawn(async move {
                let _ = fence.write(&mut conn, &resource, token, &write).await;
            });
            // Let it send; then it dies with its connection.
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            task.abort();
            Ok(())
        }

        async fn committed(&self, resource: &str) -> Result<Vec<Entry>, Error> {
            let texts: Vec<String> = self
                .conn
                .clone()
                .lrange(Self::log_key(resource), 0, -1)
                .await
                .map_err(rd)?;
            parse_all(texts.iter().map(String::as_str))
        }

        async fn current(&self, resource: &str) -> Result<Option<Entry>, Error> {
            let text: Option<String> = self
                .conn
                .clone()
                .get(Self::value_key(resource))
                .await
                .map_err(rd)?;
            text.map(|t| t.parse()).transpose()
        }

        async fn newest(&self, resource: &str) -> Result<Option<FencingToken>, Error> {
            self.fence.newest(&mut self.conn.clone(), resource).await
        }
    }
}

// ---- etcd ----

#[cfg(feature = "etcd")]
pub use et::EtcdSink;

#[cfg(feature = "etcd")]
mod et {
    use super::*;
    use crate::etcd::EtcdFence;
    use etcd_client::{Client, GetOptions, SortOrder, SortTarget, TxnOp};

    fn et(e: etcd_client::Error) -> Error {
        Error::store("etcd", e)
    }

    /// [`Sink`] over [`EtcdFence`].
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_fences::Error> {
    /// let sink = zkfence_fences::sink::EtcdSink::connect("http://127.0.0.1:2379").await?;
    /// # Ok(()) }
    /// ```
    pub struct EtcdSink {
        endpoint: String,
        client: Client,
        fence: EtcdFence,
    }

    impl EtcdSink {
        /// Connects.
        ///
        /// # Notable errors
        ///
        /// [`Error::Store`] if etcd cannot be reached.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe.
        ///
        /// ```no_run
        /// # async fn example() -> Result<(), zkfence_fences::Error> {
        /// let sink = zkfence_fences::sink::EtcdSink::connect("http://127.0.0.1:2379").await?;
        /// # Ok(()) }
        /// ```
        pub async fn connect(endpoint: &str) -> Result<EtcdSink, Error> {
            let client = Client::connect([endpoint], None).await.map_err(et)?;
            Ok(EtcdSink {
                endpoint: endpoint.to_string(),
                client,
                fence: EtcdFence::new(),
            })
        }

        fn value_key(resource: &str) -> String {
            format!("zkfence/sink/value/{}", hex(resource))
        }

        fn log_prefix(resource: &str) -> String {
            format!("zkfence/sink/log/{}/", hex(resource))
        }

        fn ops(resource: &str, entry: &Entry) -> Vec<TxnOp> {
            let text = entry.to_string();
            let log_key = format!(
                "{}{}",
                Self::log_prefix(resource),
                uuid::Uuid::new_v4().simple()
            );
            vec![
                TxnOp::put(Self::value_key(resource), text.clone(), None),
                TxnOp::put(log_key, text, None),
            ]
        }
    }

    #[async_trait::async_trait]
    impl Sink for EtcdSink {
        fn name(&self) -> &'static str {
            "etcd"
        }

        async fn create(&self, resource: &str) -> Result<(), Error> {
            self.fence.create(&mut self.client.clone(), resource).await
        }

        async fn write(&self, resource: &str, entry: &Entry) -> Result<Outcome, Error> {
            let ops = Self::ops(resource, entry);
            let outcome = self
                .fence
                .write(&mut self.client.clone(), resource, entry.token, ops)
                .await?;
            Ok(outcome.map(|_revision| ()))
        }

        async fn abandon_write(&self, resource: &str, entry: &Entry) -> Result<(), Error> {
            // A client (and connection) of its own, dropped as soon as the request is out.
            let mut client = Client::connect([self.endpoint.as_str()], None)
                .await
                .map_err(et)?;
            let ops = Self::ops(resource, entry);
            let fence = self.fence.clone();
            let resource = resource.to_string();
            let token = entry.token;
            let task = tokio::spawn(async move {
                let _ = fence.write(&mut client, &resource, token, ops).await;
            });
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            task.abort();
            Ok(())
        }

        async fn committed(&self, resource: &str) -> Result<Vec<Entry>, Error> {
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            let got = self
                .client
                .clone()
                .get(Self::log_prefix(resource), Some(options))
                .await
                .map_err(et)?;
            let texts: Vec<String> = got
                .kvs()
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                .collect();
            parse_all(texts.iter().map(String::as_str))
        }

        async fn current(&self, resource: &str) -> Result<Option<Entry>, Error> {
            let got = self
                .client
                .clone()
                .get(Self::value_key(resource), None)
                .await
                .map_err(et)?;
            got.kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).parse())
                .transpose()
        }

        async fn newest(&self, resource: &str) -> Result<Option<FencingToken>, Error> {
            self.fence.newest(&mut self.client.clone(), resource).await
        }
    }
}

// ---- HTTP ----

#[cfg(feature = "http")]
pub use web::HttpSink;

#[cfg(feature = "http")]
mod web {
    use super::*;
    use crate::http::{fencing_headers, outcome_of, FencingLayer, MemoryFences};
    use http::{Request, Response, StatusCode};
    use http_body_util::{BodyExt, Full};
    use hyper::body::{Bytes, Incoming};
    use hyper_util::client::legacy::Client as HttpClient;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use std::collections::HashMap;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;
    use tower_layer::Layer;

    /// What the service holds: per resource, its value and its log.
    #[derive(Default)]
    struct State {
        values: HashMap<String, String>,
        logs: HashMap<String, Vec<String>>,
    }

    type Shared = Arc<Mutex<State>>;

    fn web(e: impl Into<crate::common::BoxError>) -> Error {
        Error::store("HTTP service", e)
    }

    /// [`Sink`] over [`FencingLayer`] with [`MemoryFences`]: a hyper server on a loopback
    /// port in this process, whose handler (`PUT /`, the body an entry) sets the resource's
    /// value and appends to its log; a hyper client writes through it.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), zkfence_fences::Error> {
    /// let sink = zkfence_fences::sink::HttpSink::start().await?;
    /// # Ok(()) }
    /// ```
    pub struct HttpSink {
        addr: SocketAddr,
        fences: MemoryFences,
        state: Shared,
        client: HttpClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
        server: tokio::task::JoinHandle<()>,
    }

    impl Drop for HttpSink {
        fn drop(&mut self) {
            self.server.abort();
        }
    }

    impl HttpSink {
        /// Starts the server on a free loopback port (it stops when the sink is dropped).
        ///
        /// # Notable errors
        ///
        /// [`Error::Store`] if no port can be bound.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe.
        ///
        /// ```no_run
        /// # async fn example() -> Result<(), zkfence_fences::Error> {
        /// let sink = zkfence_fences::sink::HttpSink::start().await?;
        /// println!("serving on {}", sink.addr());
        /// # Ok(()) }
        /// ```
        pub async fn start() -> Result<HttpSink, Error> {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(web)?;
            let addr = listener.local_addr().map_err(web)?;
            let fences = MemoryFences::new();
            let state = Shared::default();
            let handler_state = state.clone();
            let handler = tower_service_fn(move |req: Request<Incoming>| {
                let state = handler_state.clone();
                async move {
                    let resource = req
                        .headers()
                        .get(crate::http::FENCING_RESOURCE)
                        .and_then(|v| v.to_str().ok())
                        .map(|s| s.to_string())
                        .unwrap_or_default();
                    let body = req.into_body().collect().await.map(|b| b.to_bytes());
                    let Ok(body) = body else {
                        return Ok(status(StatusCode::BAD_REQUEST, "unreadable body"));
                    };
                    let text = String::from_utf8_lossy(&body).into_owned();
                    // The handler's own I/O before it commits, as a real write takes time:
                    // without the layer's per-resource turn, a newer request's handler
                    // would overtake an older one's here (the conformance suite sees it).
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    // One critical section: the value and the log change together.
                    let mut s = state.lock().unwrap();
                    s.values.insert(resource.clone(), text.clone());
                    s.logs.entry(resource).or_default().push(text);
                    Ok::<_, std::convert::Infallible>(status(StatusCode::NO_CONTENT, ""))
                }
            });
            let service = FencingLayer::new(fences.clone()).layer(handler);
            let server = tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let service = service.clone();
                    tokio::spawn(async move {
                        let hyper_service = hyper_util::service::TowerToHyperService::new(service);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), hyper_service)
                            .await;
                    });
                }
            });
            let client = HttpClient::builder(TokioExecutor::new()).build_http();
            Ok(HttpSink {
                addr,
                fences,
                state,
                client,
                server,
            })
        }

        /// The server's address.
        ///
        /// ```no_run
        /// # fn example(sink: &zkfence_fences::sink::HttpSink) {
        /// println!("{}", sink.addr());
        /// # }
        /// ```
        pub fn addr(&self) -> SocketAddr {
            self.addr
        }

        fn request(&self, resource: &str, entry: &Entry) -> Result<Request<Full<Bytes>>, Error> {
            let headers = fencing_headers(resource, entry.token)?;
            let mut req = Request::put(format!("http://{}/", self.addr))
                .body(Full::new(Bytes::from(entry.to_string())))
                .map_err(web)?;
            req.headers_mut().extend(headers);
            Ok(req)
        }
    }

    fn status(code: StatusCode, text: &str) -> Response<Full<Bytes>> {
        let mut r = Response::new(Full::new(Bytes::from(text.to_string())));
        *r.status_mut() = code;
        r
    }

    /// A tower service from an async closure (tower's `service_fn`, without tower).
    fn tower_service_fn<F>(f: F) -> ServiceFn<F> {
        ServiceFn(f)
    }

    #[derive(Clone)]
    struct ServiceFn<F>(F);

    impl<F, Fut, Req, Res, E> tower_service::Service<Req> for ServiceFn<F>
    where
        F: FnMut(Req) -> Fut,
        Fut: std::future::Future<Output = Result<Res, E>>,
    {
        type Response = Res;
        type Error = E;
        type Future = Fut;

        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), E>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Req) -> Fut {
            (self.0)(req)
        }
    }

    /// The percent-decoded resource the handler stored under (it reads the raw header).
    fn stored_key(resource: &str) -> String {
        crate::http::percent_encode(resource)
    }

    #[async_trait::async_trait]
    impl Sink for HttpSink {
        fn name(&self) -> &'static str {
            "http"
        }

        async fn create(&self, resource: &str) -> Result<(), Error> {
            self.fences.create(resource)
        }

        async fn write(&self, resource: &str, entry: &Entry) -> Result<Outcome, Error> {
            let req = self.request(resource, entry)?;
            let response = self.client.request(req).await.map_err(web)?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(web)?.to_bytes();
            let response = Response::from_parts(parts, ());
            if response.status() == StatusCode::BAD_REQUEST {
                // The service's words for bad input, as the other stores' errors say it.
                let why = String::from_utf8_lossy(&body).trim().to_string();
                if why.starts_with("no fence") {
                    return Err(Error::NoFence {
                        store: "the HTTP service's fence",
                        resource: resource.to_string(),
                    });
                }
                return Err(web(why));
            }
            outcome_of(&response, entry.token)
        }

        async fn abandon_write(&self, resource: &str, entry: &Entry) -> Result<(), Error> {
            // The request written whole on a raw connection, which is closed at once.
            let headers = fencing_headers(resource, entry.token)?;
            let body = entry.to_string();
            let mut text = format!(
                "PUT / HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
                self.addr,
                body.len()
            );
            for (name, value) in &headers {
                text.push_str(&format!(
                    "{name}: {}\r\n",
                    value.to_str().expect("ASCII headers")
                ));
            }
            text.push_str("\r\n");
            text.push_str(&body);
            let mut stream = tokio::net::TcpStream::connect(self.addr)
                .await
                .map_err(web)?;
            stream.write_all(text.as_bytes()).await.map_err(web)?;
            drop(stream);
            Ok(())
        }

        async fn committed(&self, resource: &str) -> Result<Vec<Entry>, Error> {
            let texts = self
                .state
                .lock()
                .unwrap()
                .logs
                .get(&stored_key(resource))
                .cloned()
                .unwrap_or_default();
            parse_all(texts.iter().map(String::as_str))
        }

        async fn current(&self, resource: &str) -> Result<Option<Entry>, Error> {
            let text = self
                .state
                .lock()
                .unwrap()
                .values
                .get(&stored_key(resource))
                .cloned();
            text.map(|t| t.parse()).transpose()
        }

        async fn newest(&self, resource: &str) -> Result<Option<FencingToken>, Error> {
            Ok(self.fences.newest(resource))
        }
    }
}
