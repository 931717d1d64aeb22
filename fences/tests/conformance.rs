//! The conformance suite: ONE body per property, run against every store's fence through the
//! [`Sink`] trait, each store a real server started by `zkfence-testcontainers` (PostgreSQL,
//! MariaDB, Redis, etcd; the HTTP layer served by hyper on loopback), and real zkfence
//! leases from a real ZooKeeper where a property is about what ZooKeeper issues.
//!
//! Properties (one test each, per store: `<store>::<property>`):
//! - concurrent writers with interleaved tokens: the store's own record never goes back in
//!   token order, loses no write it acknowledged, and holds the largest token;
//! - a late writer (a released lease's token, after a newer holder wrote) is refused with the
//!   newest token;
//! - equal tokens (one holder's repeated writes) are accepted;
//! - a writer that dies between check and write leaves no half state;
//! - tokens from two lock paths are kept apart;
//! - tokens keep growing across a lock directory's re-creation, and the fence follows;
//! - bad input (token 0, a missing fence, odd or invalid resource keys) gets a clear error
//!   and writes nothing.
//!
//! Beside them, `http_layer_over::<backend>`: the HTTP layer in front of a handler with its
//! fences in memory or in each store, answering real requests (204, 409 with the newest
//! token, 400 saying what is wrong), a store's fences outliving a restart of the service.
//!
//! The servers are shared by the binary's tests (each test uses resource keys and lock paths
//! of its own); each test makes its own sink (its connections live on its runtime).

use std::sync::OnceLock;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use zkfence::{FencingToken, Lease, Session, SessionOptions};
use zkfence_fences::sink::{Entry, EtcdSink, HttpSink, MySink, PgSink, RedisSink, Sink};
use zkfence_fences::{Error, Outcome};
use zkfence_testcontainers::{Ensemble, Etcd, MariaDb, Postgres, Redis};

/// The servers, started once per binary on a runtime of their own (each test has its own,
/// which ends with it); their watchdogs clean up when the process exits.
struct Servers {
    zk: Ensemble,
    pg: Postgres,
    maria: MariaDb,
    redis: Redis,
    etcd: Etcd,
}

static SERVERS: OnceLock<Servers> = OnceLock::new();
static SERVERS_RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

fn servers() -> &'static Servers {
    SERVERS.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = SERVERS_RT.get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap()
            });
            rt.block_on(async {
                let (zk, pg, maria, redis, etcd) = tokio::join!(
                    Ensemble::builder().nodes(1).start(),
                    Postgres::launch(),
                    MariaDb::launch(),
                    Redis::launch(),
                    Etcd::launch()
                );
                Servers {
                    zk: zk.expect("start ZooKeeper"),
                    pg: pg.expect("start PostgreSQL"),
                    maria: maria.expect("start MariaDB"),
                    redis: redis.expect("start Redis"),
                    etcd: etcd.expect("start etcd"),
                }
            })
        })
        .join()
        .expect("server start thread")
    })
}

#[derive(Clone, Copy, Debug)]
enum Store {
    Postgres,
    MariaDb,
    Redis,
    Etcd,
    Http,
}

/// A sink of the store on the shared server, connected on this test's runtime.
async fn sink(store: Store) -> Box<dyn Sink> {
    let s = servers();
    let made: Result<Box<dyn Sink>, Error> = match store {
        Store::Postgres => PgSink::connect(&s.pg.url()).await.map(|x| Box::new(x) as _),
        Store::MariaDb => MySink::connect(&s.maria.url())
            .await
            .map(|x| Box::new(x) as _),
        Store::Redis => RedisSink::connect(&s.redis.url())
            .await
            .map(|x| Box::new(x) as _),
        Store::Etcd => EtcdSink::connect(&s.etcd.endpoint())
            .await
            .map(|x| Box::new(x) as _),
        Store::Http => HttpSink::start().await.map(|x| Box::new(x) as _),
    };
    made.unwrap_or_else(|e| panic!("a {store:?} sink: {e}"))
}

/// A resource key no other test uses.
fn resource(name: &str) -> String {
    format!("/conformance/{name}-{}", uuid::Uuid::new_v4().simple())
}

async fn session() -> Session {
    Session::connect(
        &servers().zk.connect_string(),
        SessionOptions::new().session_timeout(Duration::from_secs(4)),
    )
    .await
    .expect("connect to ZooKeeper")
}

async fn lease(session: &Session, path: &str) -> Lease {
    tokio::time::timeout(Duration::from_secs(30), session.lock(path).acquire())
        .await
        .expect("a grant in time")
        .expect("acquire")
}

fn t(raw: u64) -> FencingToken {
    FencingToken::new(raw)
}

async fn written(sink: &dyn Sink, resource: &str, entry: &Entry) {
    match sink.write(resource, entry).await {
        Ok(Outcome::Written(())) => {}
        other => panic!("{}: {entry} to {resource}: {other:?}", sink.name()),
    }
}

async fn refused(sink: &dyn Sink, resource: &str, entry: &Entry) -> FencingToken {
    match sink.write(resource, entry).await {
        Ok(Outcome::Refused(stale)) => {
            assert_eq!(stale.token, entry.token, "{}", sink.name());
            stale.newest
        }
        other => panic!(
            "{}: {entry} to {resource}: expected a refusal, got {other:?}",
            sink.name()
        ),
    }
}

// ---- the properties: one body each, for every store ----

/// 4 writers at once, each with its own tokens (writer w has w+1, w+5, w+9, ...), so the
/// tokens arrive interleaved and every writer is sometimes behind another.
async fn concurrent_writers_with_interleaved_tokens(store: Store) {
    const WRITERS: u64 = 4;
    const EACH: u64 = 25;
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let r = resource("concurrent");
    sink.create(&r).await.unwrap();
    let reports = futures::future::join_all((0..WRITERS).map(|w| {
        let r = r.clone();
        async move {
            let mut mine = Vec::new();
            for i in 0..EACH {
                let entry = Entry::new(format!("w{w}"), i, t(1000 + i * WRITERS + w + 1));
                let outcome = sink.write(&r, &entry).await;
                mine.push((entry, outcome));
                // Writers at different speeds: the fast ones get ahead, so the slow ones'
                // tokens are often behind a newer one already written.
                tokio::time::sleep(Duration::from_millis(w)).await;
            }
            mine
        }
    }))
    .await;
    let record = sink.committed(&r).await.unwrap();
    let tokens: Vec<u64> = record.iter().map(|e| e.token.get()).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "{}: the store committed a token after a newer one: {tokens:?}",
        sink.name()
    );
    let mut acknowledged = 0;
    for (entry, outcome) in reports.into_iter().flatten() {
        match outcome {
            Ok(Outcome::Written(())) => {
                acknowledged += 1;
                assert!(
                    record.contains(&entry),
                    "{}: {entry} acknowledged, not committed",
                    sink.name()
                );
            }
            Ok(Outcome::Refused(stale)) => {
                assert!(
                    !record.contains(&entry),
                    "{}: {entry} refused, committed",
                    sink.name()
                );
                assert!(stale.newest > entry.token, "{}: {stale:?}", sink.name());
                assert!(
                    tokens.contains(&stale.newest.get()),
                    "{}: refused by {}, a token never committed",
                    sink.name(),
                    stale.newest
                );
            }
            Err(e) => panic!("{}: {entry}: {e}", sink.name()),
        }
    }
    assert_eq!(
        acknowledged,
        record.len(),
        "{}: committed writes nobody acknowledged",
        sink.name()
    );
    let largest = 1000 + EACH * WRITERS;
    assert_eq!(
        tokens.last(),
        Some(&largest),
        "{}: the largest token is never stale",
        sink.name()
    );
    assert_eq!(sink.current(&r).await.unwrap().as_ref(), record.last());
    assert_eq!(sink.newest(&r).await.unwrap(), Some(t(largest)));
    assert!(
        record.len() < (WRITERS * EACH) as usize,
        "{}: no write was refused: the writers did not interleave",
        sink.name()
    );
}

/// A's lease, B's newer lease after A released; A's write comes late.
async fn a_late_writer_is_refused(store: Store) {
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let path = resource("late");
    sink.create(&path).await.unwrap();
    let (sa, sb) = (session().await, session().await);
    let a = lease(&sa, &path).await;
    let ta = a.token();
    written(sink, &path, &Entry::new("A", 1, ta)).await;
    a.release().await.unwrap();
    let b = lease(&sb, &path).await;
    let tb = b.token();
    assert!(tb > ta, "ZooKeeper's tokens grow: {ta} then {tb}");
    written(sink, &path, &Entry::new("B", 1, tb)).await;
    let newest = refused(sink, &path, &Entry::new("A", 2, ta)).await;
    assert_eq!(newest, tb);
    let record = sink.committed(&path).await.unwrap();
    assert_eq!(record, vec![Entry::new("A", 1, ta), Entry::new("B", 1, tb)]);
    assert_eq!(
        sink.current(&path).await.unwrap(),
        Some(Entry::new("B", 1, tb))
    );
    b.release().await.unwrap();
}

async fn equal_tokens_are_accepted(store: Store) {
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let path = resource("equal");
    sink.create(&path).await.unwrap();
    let s = session().await;
    let held = lease(&s, &path).await;
    let entries: Vec<Entry> = (1..=3)
        .map(|i| Entry::new("holder", i, held.token()))
        .collect();
    for e in &entries {
        written(sink, &path, e).await;
    }
    assert_eq!(sink.committed(&path).await.unwrap(), entries);
    assert_eq!(sink.newest(&path).await.unwrap(), Some(held.token()));
    held.release().await.unwrap();
}

async fn a_writer_dying_between_check_and_write_leaves_no_half_state(store: Store) {
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let r = resource("dying");
    sink.create(&r).await.unwrap();
    let first = Entry::new("w", 1, t(100));
    written(sink, &r, &first).await;
    let dying = Entry::new("dying", 1, t(110));
    sink.abandon_write(&r, &dying).await.unwrap();
    // A token between the two: the SQL stores die after the check and before the write,
    // so their transaction (fence raise included) is rolled back and this one is admitted.
    // (Redis, etcd and HTTP die after sending: the write may have run whole, and the HTTP
    // layer's in-memory fence may have been raised before its handler was cancelled, which
    // refuses only a token older than one that was granted.)
    let between = Entry::new("w", 2, t(105));
    let between_outcome = sink.write(&r, &between).await.unwrap();
    if matches!(store, Store::Postgres | Store::MariaDb) {
        assert!(
            between_outcome.is_written(),
            "{}: the dead writer's check outlived it: {between_outcome:?}",
            sink.name()
        );
    }
    let last = Entry::new("w", 3, t(120));
    written(sink, &r, &last).await;
    // From here the dying write can no longer commit (a newer token is in).
    let record = sink.committed(&r).await.unwrap();
    let has_dying = record.contains(&dying);
    if matches!(store, Store::Postgres | Store::MariaDb) {
        assert!(
            !has_dying,
            "{}: the dead writer's write committed: {record:?}",
            sink.name()
        );
    }
    let mut expected = vec![first.clone()];
    // Whole or nothing, in token order.
    match (has_dying, between_outcome.is_written()) {
        (true, true) => {
            // Only in token order: between (105) before dying (110).
            expected.push(between.clone());
            expected.push(dying.clone());
        }
        (true, false) => expected.push(dying.clone()),
        (false, true) => expected.push(between.clone()),
        (false, false) => {}
    }
    expected.push(last.clone());
    assert_eq!(record, expected, "{}", sink.name());
    assert_eq!(
        sink.current(&r).await.unwrap(),
        Some(last),
        "{}",
        sink.name()
    );
    assert_eq!(
        sink.newest(&r).await.unwrap(),
        Some(t(120)),
        "{}",
        sink.name()
    );
}

async fn tokens_from_two_lock_paths_are_kept_apart(store: Store) {
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let (pa, pb) = (resource("path-a"), resource("path-b"));
    sink.create(&pa).await.unwrap();
    sink.create(&pb).await.unwrap();
    let s = session().await;
    let a = lease(&s, &pa).await;
    let b = lease(&s, &pb).await;
    assert!(b.token() > a.token());
    // B's larger token on its own resource does not fence A's.
    written(sink, &pb, &Entry::new("B", 1, b.token())).await;
    written(sink, &pa, &Entry::new("A", 1, a.token())).await;
    // A token of another lock is no token for this resource: A's (smaller) is refused on B's.
    assert_eq!(
        refused(sink, &pb, &Entry::new("A", 2, a.token())).await,
        b.token()
    );
    assert_eq!(sink.newest(&pa).await.unwrap(), Some(a.token()));
    assert_eq!(sink.newest(&pb).await.unwrap(), Some(b.token()));
    assert_eq!(
        sink.committed(&pa).await.unwrap(),
        vec![Entry::new("A", 1, a.token())]
    );
    a.release().await.unwrap();
    b.release().await.unwrap();
}

async fn tokens_keep_growing_across_a_lock_directorys_recreation(store: Store) {
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let path = resource("recreated");
    sink.create(&path).await.unwrap();
    let s = session().await;
    let first = lease(&s, &path).await;
    let (t1, seq1) = (first.token(), first.sequence());
    written(sink, &path, &Entry::new("first", 1, t1)).await;
    first.release().await.unwrap();
    // The directory removed (an operator, or ZooKeeper's container check) and made again by
    // the next acquire: its sequence counter starts over; the token does not.
    match s.client().delete(&path, None).await {
        Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
        Err(e) => panic!("delete {path}: {e}"),
    }
    let second = lease(&s, &path).await;
    let t2 = second.token();
    assert_eq!(
        second.sequence(),
        0,
        "a re-created directory counts from 0 (was {seq1})"
    );
    assert!(t2 > t1, "tokens grow across re-creation: {t1} then {t2}");
    written(sink, &path, &Entry::new("second", 1, t2)).await;
    assert_eq!(refused(sink, &path, &Entry::new("first", 2, t1)).await, t2);
    second.release().await.unwrap();
}

async fn bad_input_gets_a_clear_error(store: Store) {
    let sink = sink(store).await;
    let sink: &dyn Sink = &*sink;
    let name = sink.name();

    // Token 0: never issued.
    let r = resource("zero");
    sink.create(&r).await.unwrap();
    match sink.write(&r, &Entry::new("w", 1, t(0))).await {
        Err(e @ Error::InvalidToken { .. }) => assert!(e.to_string().contains("token 0"), "{e}"),
        other => panic!("{name}: token 0: {other:?}"),
    }
    assert_eq!(sink.committed(&r).await.unwrap(), vec![]);

    // A resource whose fence was never created.
    let missing = resource("missing");
    match sink.write(&missing, &Entry::new("w", 1, t(7))).await {
        Err(e @ Error::NoFence { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("no fence") && text.contains(&missing),
                "{name}: {text}"
            );
        }
        other => panic!("{name}: a missing fence: {other:?}"),
    }
    assert_eq!(sink.committed(&missing).await.unwrap(), vec![], "{name}");
    assert_eq!(sink.newest(&missing).await.unwrap(), None, "{name}");

    // Odd keys that every store holds, each its own fence: case, a trailing space (MySQL's
    // default collations fold both), quotes and SQL, braces (a Redis Cluster hash tag),
    // percent signs, non-ASCII.
    let base = resource("odd");
    let odd = [
        format!("{base}-Acct"),
        format!("{base}-acct"),
        format!("{base}-acct "),
        format!("{base}-'; DROP TABLE zkfence_fence; --\""),
        format!("{base}-{{tag}}:%41%"),
        format!("{base}-naïve ✓ 鍵"),
    ];
    for (i, key) in odd.iter().enumerate() {
        sink.create(key)
            .await
            .unwrap_or_else(|e| panic!("{name}: create {key:?}: {e}"));
        written(sink, key, &Entry::new("w", i as u64, t(500 - i as u64))).await;
    }
    for (i, key) in odd.iter().enumerate() {
        assert_eq!(
            sink.newest(key).await.unwrap(),
            Some(t(500 - i as u64)),
            "{name}: {key:?} shares its fence with another key"
        );
        assert_eq!(
            sink.committed(key).await.unwrap(),
            vec![Entry::new("w", i as u64, t(500 - i as u64))],
            "{name}: {key:?}"
        );
    }

    // Keys no store should be given: a clear error, nothing written.
    for (key, says) in [
        (String::new(), "empty"),
        (format!("{base}-nul\0byte"), "U+0000"),
        (format!("{base}-two\nlines"), "U+000A"),
        ("k".repeat(513), "513 bytes"),
    ] {
        match sink.create(&key).await {
            Err(e @ Error::InvalidResource { .. }) => {
                assert!(e.to_string().contains(says), "{name}: {e}")
            }
            other => panic!("{name}: create {key:?}: {other:?}"),
        }
        match sink.write(&key, &Entry::new("w", 1, t(9))).await {
            Err(Error::InvalidResource { .. }) => {}
            other => panic!("{name}: write {key:?}: {other:?}"),
        }
    }
}

// ---- every property for every store ----

macro_rules! for_store {
    ($module:ident, $store:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_writers_with_interleaved_tokens() {
                super::concurrent_writers_with_interleaved_tokens($store).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_late_writer_is_refused() {
                super::a_late_writer_is_refused($store).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn equal_tokens_are_accepted() {
                super::equal_tokens_are_accepted($store).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_writer_dying_between_check_and_write_leaves_no_half_state() {
                super::a_writer_dying_between_check_and_write_leaves_no_half_state($store).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tokens_from_two_lock_paths_are_kept_apart() {
                super::tokens_from_two_lock_paths_are_kept_apart($store).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tokens_keep_growing_across_a_lock_directorys_recreation() {
                super::tokens_keep_growing_across_a_lock_directorys_recreation($store).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_input_gets_a_clear_error() {
                super::bad_input_gets_a_clear_error($store).await
            }
        }
    };
}

for_store!(postgres, Store::Postgres);
for_store!(mariadb, Store::MariaDb);
for_store!(redis, Store::Redis);
for_store!(etcd, Store::Etcd);
for_store!(http, Store::Http);

// ---- the HTTP layer over each store's fence ----
//
// Not a sink property: the layer in front of a handler, its fence kept in memory or in a
// store, answering real requests on loopback; a store's fence outlives the service (a new
// layer over the same store still refuses the old token).

use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use zkfence_fences::http::{
    fencing_headers, EtcdFences, FenceBackend, FencingLayer, MemoryFences, MyFences, PgFences,
    RedisFences, FENCING_TOKEN_NEWEST,
};

/// An axum app whose `PUT /` answers 204, behind the layer over `backend`.
async fn serve_layer<B: FenceBackend>(backend: B) -> std::net::SocketAddr {
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::put(|| async { ::http::StatusCode::NO_CONTENT }),
        )
        .layer(FencingLayer::new(backend));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// PUTs to `addr` with the fencing headers of (`resource`, `token`), or none; the status,
/// the `Fencing-Token-Newest` header and the body.
async fn put(
    addr: std::net::SocketAddr,
    fencing: Option<(&str, u64)>,
) -> (u16, Option<u64>, String) {
    use http_body_util::BodyExt;
    let client = HttpClient::builder(TokioExecutor::new()).build_http();
    let mut req = ::http::Request::put(format!("http://{addr}/"))
        .body(http_body_util::Full::new(hyper::body::Bytes::new()))
        .unwrap();
    if let Some((resource, token)) = fencing {
        req.headers_mut()
            .extend(fencing_headers(resource, t(token)).unwrap());
    }
    let res = client.request(req).await.expect("an answer");
    let status = res.status().as_u16();
    let newest = res
        .headers()
        .get(FENCING_TOKEN_NEWEST)
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, newest, String::from_utf8_lossy(&body).into_owned())
}

/// The layer over `backend` (and, if the store keeps its fences, over a second backend of
/// the same store, as after a restart of the service).
async fn the_layer_fences_requests<B: FenceBackend>(
    store: &str,
    resource: &str,
    backend: B,
    after_restart: Option<B>,
) {
    let addr = serve_layer(backend).await;
    assert_eq!(put(addr, Some((resource, 10))).await.0, 204, "{store}");
    assert_eq!(
        put(addr, Some((resource, 10))).await.0,
        204,
        "{store}: an equal token"
    );
    let (status, newest, body) = put(addr, Some((resource, 5))).await;
    assert_eq!((status, newest), (409, Some(10)), "{store}: {body}");
    assert!(body.contains("stale fencing token 5"), "{store}: {body}");
    let (status, _, body) = put(addr, None).await;
    assert_eq!(status, 400, "{store}: {body}");
    assert!(body.contains("no Fencing-Token header"), "{store}: {body}");
    let unknown = format!("{resource}-never-created");
    let (status, _, body) = put(addr, Some((&unknown, 11))).await;
    assert_eq!(status, 400, "{store}: {body}");
    assert!(body.contains("no fence"), "{store}: {body}");
    if let Some(again) = after_restart {
        let addr = serve_layer(again).await;
        let (status, newest, body) = put(addr, Some((resource, 7))).await;
        assert_eq!(
            (status, newest),
            (409, Some(10)),
            "{store} after a restart: {body}"
        );
        assert_eq!(put(addr, Some((resource, 12))).await.0, 204, "{store}");
    }
}

mod http_layer_over {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory() {
        let r = resource("layer-memory");
        let fences = MemoryFences::new();
        fences.create(&r).unwrap();
        the_layer_fences_requests("memory", &r, fences, None).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        let r = resource("layer-pg");
        sink(Store::Postgres).await.create(&r).await.unwrap();
        let client = || async {
            let (db, conn) = tokio_postgres::connect(&servers().pg.url(), tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            PgFences::new(db)
        };
        the_layer_fences_requests("postgres", &r, client().await, Some(client().await)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mariadb() {
        let r = resource("layer-maria");
        sink(Store::MariaDb).await.create(&r).await.unwrap();
        let pool = || MyFences::new(mysql_async::Pool::new(servers().maria.url().as_str()));
        the_layer_fences_requests("mariadb", &r, pool(), Some(pool())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis() {
        let r = resource("layer-redis");
        sink(Store::Redis).await.create(&r).await.unwrap();
        let conn = || async {
            let client = ::redis::Client::open(servers().redis.url()).unwrap();
            RedisFences::new(client.get_multiplexed_async_connection().await.unwrap())
        };
        the_layer_fences_requests("redis", &r, conn().await, Some(conn().await)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd() {
        let r = resource("layer-etcd");
        sink(Store::Etcd).await.create(&r).await.unwrap();
        let client = || async {
            EtcdFences::new(
                etcd_client::Client::connect([servers().etcd.endpoint()], None)
                    .await
                    .unwrap(),
            )
        };
        the_layer_fences_requests("etcd", &r, client().await, Some(client().await)).await;
    }
}

// ---- the token-column pattern (PostgreSQL, MariaDB) ----
//
// The protected row carries its own token. One body for both: concurrent writers with
// interleaved tokens counting their hits into the row, equal tokens, a late token, a missing
// row and token 0.

use zkfence_fences::mysql::MyTokenColumn;
use zkfence_fences::postgres::PgTokenColumn;

/// A table with a token column, and how to reach it (each PostgreSQL update on a connection
/// of its own, each MariaDB update on a pooled one: the writers' updates really are
/// concurrent in the server).
enum Column {
    Pg(String, PgTokenColumn),
    My(String, mysql_async::Pool, MyTokenColumn),
}

async fn pg_client() -> tokio_postgres::Client {
    let (db, conn) = tokio_postgres::connect(&servers().pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db
}

impl Column {
    /// A table of its own with one row, `row`, at token 0.
    async fn make(store: Store) -> Column {
        let table = format!("tc_{}", uuid::Uuid::new_v4().simple());
        match store {
            Store::Postgres => {
                let (db, conn) =
                    tokio_postgres::connect(&servers().pg.url(), tokio_postgres::NoTls)
                        .await
                        .unwrap();
                tokio::spawn(conn);
                db.batch_execute(&format!(
                    "CREATE TABLE {table} (id text PRIMARY KEY, hits bigint NOT NULL DEFAULT 0, \
                     fence_token bigint NOT NULL DEFAULT 0); INSERT INTO {table} (id) VALUES ('row')"
                ))
                .await
                .unwrap();
                let column = PgTokenColumn::new(&table, "id", "fence_token").unwrap();
                Column::Pg(table, column)
            }
            Store::MariaDb => {
                let pool = mysql_async::Pool::new(servers().maria.url().as_str());
                let mut conn = pool.get_conn().await.unwrap();
                conn.query_drop(format!(
                    "CREATE TABLE {table} (id VARCHAR(64) PRIMARY KEY, hits BIGINT NOT NULL DEFAULT 0, \
                     fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0) ENGINE=InnoDB"
                ))
                .await
                .unwrap();
                conn.query_drop(format!("INSERT INTO {table} (id) VALUES ('row')"))
                    .await
                    .unwrap();
                let column = MyTokenColumn::new(&table, "id", "fence_token").unwrap();
                Column::My(table, pool, column)
            }
            other => unreachable!("{other:?} has no token column"),
        }
    }

    /// `hits = hits + 1` on `key`, fenced by `token`.
    async fn hit(&self, key: &str, token: u64) -> Result<Outcome, Error> {
        match self {
            Column::Pg(_, column) => {
                let db = pg_client().await;
                column
                    .update(&db, &key, t(token), "hits = hits + $1", &[&1i64])
                    .await
            }
            Column::My(_, pool, column) => {
                let mut conn = pool.get_conn().await.unwrap();
                column
                    .update(
                        &mut conn,
                        key,
                        t(token),
                        "hits = hits + ?",
                        vec![1i64.into()],
                    )
                    .await
            }
        }
    }

    /// The row's (hits, token).
    async fn row(&self) -> (i64, u64) {
        match self {
            Column::Pg(table, _) => {
                let sql = format!("SELECT hits, fence_token FROM {table} WHERE id = 'row'");
                let r = pg_client().await.query_one(&sql, &[]).await.unwrap();
                (r.get(0), r.get::<_, i64>(1) as u64)
            }
            Column::My(table, pool, _) => {
                let sql = format!("SELECT hits, fence_token FROM {table} WHERE id = 'row'");
                let mut conn = pool.get_conn().await.unwrap();
                conn.query_first(sql).await.unwrap().unwrap()
            }
        }
    }
}

async fn the_token_column_fences_its_row(store: Store) {
    const WRITERS: u64 = 4;
    const EACH: u64 = 20;
    // One column handle per writer (its own connection), over the same table.
    let first = Column::make(store).await;
    let reports = futures::future::join_all((0..WRITERS).map(|w| {
        let column = &first;
        async move {
            let mut mine = Vec::new();
            for i in 0..EACH {
                let token = 1000 + i * WRITERS + w + 1;
                mine.push((token, column.hit("row", token).await));
                tokio::time::sleep(Duration::from_millis(w)).await;
            }
            mine
        }
    }))
    .await;
    let mut written = 0;
    for (token, outcome) in reports.into_iter().flatten() {
        match outcome {
            Ok(Outcome::Written(())) => written += 1,
            Ok(Outcome::Refused(stale)) => {
                assert!(stale.newest.get() > token, "{store:?}: {stale:?}")
            }
            Err(e) => panic!("{store:?}: token {token}: {e}"),
        }
    }
    let largest = 1000 + EACH * WRITERS;
    assert_eq!(
        first.row().await,
        (written, largest),
        "{store:?}: hits are the writes acknowledged"
    );
    assert!(
        written < (WRITERS * EACH) as i64,
        "{store:?}: the writers did not interleave"
    );
    // An equal token again, then a late one.
    assert!(
        first.hit("row", largest).await.unwrap().is_written(),
        "{store:?}"
    );
    match first.hit("row", 1001).await.unwrap() {
        Outcome::Refused(stale) => assert_eq!(stale.newest, t(largest), "{store:?}"),
        other => panic!("{store:?}: a late token: {other:?}"),
    }
    assert_eq!(first.row().await, (written + 1, largest), "{store:?}");
    // No such row; token 0.
    match first.hit("no-such-row", 5000).await {
        Err(e @ Error::NoFence { .. }) => assert!(e.to_string().contains("no-such-row"), "{e}"),
        other => panic!("{store:?}: a missing row: {other:?}"),
    }
    assert!(
        matches!(first.hit("row", 0).await, Err(Error::InvalidToken { .. })),
        "{store:?}"
    );
}

mod token_column {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        the_token_column_fences_its_row(Store::Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mariadb() {
        the_token_column_fences_its_row(Store::MariaDb).await
    }
}
