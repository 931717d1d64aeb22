//! An HTTP service you own: a `tower` layer that checks a fencing token before your handler
//! runs, and the client side that sends it.
//!
//! # The headers
//!
//! A fenced request carries two headers:
//!
//! - `Fencing-Token: 4294967302`: the writer's token ([`Lease::token`]), in decimal.
//! - `Fencing-Resource: /locks/orders-42`: the resource key, percent-encoded (bytes outside
//!   `A-Z a-z 0-9 - . _ ~ / :` are written `%XX`), by convention the lock's path
//!   ([`Lease::lock_path`]). A service can instead derive the resource from the request
//!   ([`FencingLayer::resource_from`]); then this header is ignored.
//!
//! # The answers
//!
//! | case | status | body | headers |
//! |---|---|---|---|
//! | admitted | your handler's | your handler's | |
//! | a newer token was admitted | **409 Conflict** | `stale fencing token T for resource R: …` | `Fencing-Token-Newest: N` |
//! | no or bad header, token 0, bad resource key, no fence for the resource | **400 Bad Request** | what is wrong | |
//! | the fence's store failed | **503 Service Unavailable** | the error | |
//!
//! 409, not 412: 412 answers the standard conditional headers (`If-Match`, …); a fencing
//! token is the service's own rule about the state of the resource, which is what 409 says.
//! [`newest_token`] reads the refusal on the client side.
//!
//! # Why it is atomic
//!
//! The layer handles one fenced request per resource at a time, in this process: it takes a
//! per-resource lock, checks and raises the fence, runs your handler to its response, and
//! only then lets the next request for that resource in. So no newer writer's handler can run
//! between an older writer's check and its write, and the handler's writes are in token
//! order. Requests for different resources run in parallel. This holds within one process:
//! with several replicas of the service writing the same data, fence in the data's store
//! instead (the handler uses [`crate::postgres`], [`crate::redis`], …), where the check is
//! atomic with the write.
//!
//! A handler that is cancelled (the client went away) after the check has raised the fence
//! without writing: that refuses only tokens older than one that was granted, which are stale
//! anyway.
//!
//! # The fence behind the layer
//!
//! A [`FenceBackend`]: [`MemoryFences`] (in this process; gone with it, so a restarted
//! service must start its fences at least at the newest token it wrote, e.g.
//! [`MemoryFences::create_at`] from what it persisted); or, with the store's feature too, a
//! store's fence that outlives the process: `PgFences`, `MyFences`, `RedisFences`,
//! `EtcdFences` (each admits with a write of the fence alone); or your own.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use zkfence_fences::http::{FencingLayer, MemoryFences};
//!
//! let fences = MemoryFences::new();
//! fences.create("/locks/orders-42")?; // the owner: a fence per resource
//! let app = axum::Router::new()
//!     .route("/orders/42", axum::routing::put(|| async { "written" }))
//!     .layer(FencingLayer::new(fences));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```
//!
//! [`Lease::token`]: zkfence::Lease::token
//! [`Lease::lock_path`]: zkfence::Lease::lock_path

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use zkfence::{Fence, FencingToken, Lease};

use crate::common::{check_input, check_resource, refused};
use crate::{Error, Outcome};

/// The request header with the writer's token: `Fencing-Token`.
pub const FENCING_TOKEN: HeaderName = HeaderName::from_static("fencing-token");
/// The request header with the resource key, percent-encoded: `Fencing-Resource`.
pub const FENCING_RESOURCE: HeaderName = HeaderName::from_static("fencing-resource");
/// The header of a 409 refusal with the newest admitted token: `Fencing-Token-Newest`.
pub const FENCING_TOKEN_NEWEST: HeaderName = HeaderName::from_static("fencing-token-newest");

const STORE: &str = "the HTTP service's fence";

/// A boxed future of a backend's answer.
pub type AdmitFuture<'a> = Pin<Box<dyn Future<Output = Result<Outcome, Error>> + Send + 'a>>;

/// Where the layer's fences live: admits `token` for `resource` if no newer token was
/// admitted, raising the fence; [`Outcome::Refused`] with the newest otherwise;
/// [`Error::NoFence`] for a resource without a fence.
///
/// ```
/// use zkfence_fences::http::{AdmitFuture, FenceBackend, MemoryFences};
/// use zkfence_fences::FencingToken;
///
/// // A backend that forwards to another, logging each check.
/// #[derive(Clone)]
/// struct Logged(MemoryFences);
/// impl FenceBackend for Logged {
///     fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a> {
///         println!("admit {token} for {resource}");
///         self.0.admit(resource, token)
///     }
/// }
/// ```
pub trait FenceBackend: Clone + Send + Sync + 'static {
    /// The check and the raise, as one step for this backend.
    fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a>;
}

/// Fences in this process's memory, one [`zkfence::Fence`] per resource.
///
/// ```
/// use zkfence_fences::{http::MemoryFences, FencingToken};
/// let fences = MemoryFences::new();
/// fences.create("/locks/a").unwrap();
/// assert_eq!(fences.newest("/locks/a"), Some(FencingToken::new(0)));
/// assert_eq!(fences.newest("/locks/b"), None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryFences {
    fences: Arc<Mutex<HashMap<String, Arc<Fence>>>>,
}

impl MemoryFences {
    /// No fences yet.
    ///
    /// ```
    /// let fences = zkfence_fences::http::MemoryFences::new();
    /// ```
    pub fn new() -> MemoryFences {
        MemoryFences::default()
    }

    /// Creates the resource's fence, accepting any token, if it does not exist.
    ///
    /// ```
    /// zkfence_fences::http::MemoryFences::new().create("/locks/a").unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`].
    pub fn create(&self, resource: &str) -> Result<(), Error> {
        self.create_at(resource, FencingToken::new(0))
    }

    /// Creates the resource's fence starting at `newest` (e.g. the newest token the
    /// service persisted with its data before a restart) if it does not exist.
    ///
    /// ```
    /// use zkfence_fences::{http::MemoryFences, FencingToken};
    /// let fences = MemoryFences::new();
    /// fences.create_at("/locks/a", FencingToken::new(40)).unwrap();
    /// assert_eq!(fences.newest("/locks/a"), Some(FencingToken::new(40)));
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`].
    pub fn create_at(&self, resource: &str, newest: FencingToken) -> Result<(), Error> {
        check_resource(resource)?;
        self.fences
            .lock()
            .unwrap()
            .entry(resource.to_string())
            .or_insert_with(|| Arc::new(Fence::starting_at(newest)));
        Ok(())
    }

    /// The newest token the resource's fence admitted, `None` if it has no fence.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::http::MemoryFences::new().newest("x"), None);
    /// ```
    pub fn newest(&self, resource: &str) -> Option<FencingToken> {
        let fence = self.fences.lock().unwrap().get(resource).cloned();
        fence.map(|f| f.newest())
    }
}

impl FenceBackend for MemoryFences {
    fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a> {
        let fence = self.fences.lock().unwrap().get(resource).cloned();
        Box::pin(async move {
            let Some(fence) = fence else {
                return Err(Error::NoFence {
                    store: STORE,
                    resource: resource.to_string(),
                });
            };
            Ok(match fence.admit(token) {
                Ok(()) => Outcome::Written(()),
                Err(stale) => Outcome::Refused(stale),
            })
        })
    }
}

/// The layer's fences in Redis ([`RedisFence`](crate::redis::RedisFence): a check that
/// raises the fence and writes nothing else): they outlive the service's process.
///
/// ```no_run
/// # async fn example(conn: redis::aio::MultiplexedConnection) -> Result<(), zkfence_fences::Error> {
/// use zkfence_fences::http::{FencingLayer, RedisFences};
/// let layer = FencingLayer::new(RedisFences::new(conn));
/// # Ok(()) }
/// ```
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[derive(Clone)]
pub struct RedisFences {
    fence: crate::redis::RedisFence,
    conn: ::redis::aio::MultiplexedConnection,
}

#[cfg(feature = "redis")]
impl RedisFences {
    /// Fences under [`RedisFence::new`](crate::redis::RedisFence::new)'s prefix, over `conn`.
    ///
    /// ```no_run
    /// # fn example(conn: redis::aio::MultiplexedConnection) {
    /// let fences = zkfence_fences::http::RedisFences::new(conn);
    /// # }
    /// ```
    pub fn new(conn: ::redis::aio::MultiplexedConnection) -> RedisFences {
        RedisFences::with_fence(crate::redis::RedisFence::new(), conn)
    }

    /// Fences as `fence` keeps them, over `conn`.
    ///
    /// ```no_run
    /// # fn example(conn: redis::aio::MultiplexedConnection) {
    /// use zkfence_fences::{http::RedisFences, redis::RedisFence};
    /// let fences = RedisFences::with_fence(RedisFence::with_prefix("svc:fence:"), conn);
    /// # }
    /// ```
    pub fn with_fence(
        fence: crate::redis::RedisFence,
        conn: ::redis::aio::MultiplexedConnection,
    ) -> RedisFences {
        RedisFences { fence, conn }
    }
}

#[cfg(feature = "redis")]
impl std::fmt::Debug for RedisFences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFences")
            .field("fence", &self.fence)
            .finish()
    }
}

#[cfg(feature = "redis")]
impl FenceBackend for RedisFences {
    fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a> {
        Box::pin(async move {
            let nothing = crate::redis::Write::new();
            let mut conn = self.conn.clone();
            self.fence.write(&mut conn, resource, token, &nothing).await
        })
    }
}

/// The layer's fences in etcd ([`EtcdFence`](crate::etcd::EtcdFence): a transaction that
/// raises the fence and writes nothing else): they outlive the service's process.
///
/// ```no_run
/// # fn example(client: etcd_client::Client) {
/// use zkfence_fences::http::{EtcdFences, FencingLayer};
/// let layer = FencingLayer::new(EtcdFences::new(client));
/// # }
/// ```
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
#[derive(Clone)]
pub struct EtcdFences {
    fence: crate::etcd::EtcdFence,
    client: etcd_client::Client,
}

#[cfg(feature = "etcd")]
impl EtcdFences {
    /// Fences under [`EtcdFence::new`](crate::etcd::EtcdFence::new)'s prefix, over `client`.
    ///
    /// ```no_run
    /// # fn example(client: etcd_client::Client) {
    /// let fences = zkfence_fences::http::EtcdFences::new(client);
    /// # }
    /// ```
    pub fn new(client: etcd_client::Client) -> EtcdFences {
        EtcdFences {
            fence: crate::etcd::EtcdFence::new(),
            client,
        }
    }
}

#[cfg(feature = "etcd")]
impl std::fmt::Debug for EtcdFences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdFences")
            .field("fence", &self.fence)
            .finish()
    }
}

#[cfg(feature = "etcd")]
impl FenceBackend for EtcdFences {
    fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a> {
        Box::pin(async move {
            let mut client = self.client.clone();
            let outcome = self
                .fence
                .write(&mut client, resource, token, Vec::new())
                .await?;
            Ok(outcome.map(|_revision| ()))
        })
    }
}

/// The layer's fences in PostgreSQL ([`PgFence`](crate::postgres::PgFence): a transaction
/// that raises the fence row and writes nothing else), over one connection (admits take
/// turns on it): they outlive the service's process.
///
/// ```no_run
/// # fn example(db: tokio_postgres::Client) {
/// use zkfence_fences::http::{FencingLayer, PgFences};
/// let layer = FencingLayer::new(PgFences::new(db));
/// # }
/// ```
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
#[derive(Clone)]
pub struct PgFences {
    fence: crate::postgres::PgFence,
    db: Arc<tokio::sync::Mutex<tokio_postgres::Client>>,
}

#[cfg(feature = "postgres")]
impl PgFences {
    /// Fences in [`PgFence::new`](crate::postgres::PgFence::new)'s table, over `db`.
    ///
    /// ```no_run
    /// # fn example(db: tokio_postgres::Client) {
    /// let fences = zkfence_fences::http::PgFences::new(db);
    /// # }
    /// ```
    pub fn new(db: tokio_postgres::Client) -> PgFences {
        PgFences {
            fence: crate::postgres::PgFence::new(),
            db: Arc::new(tokio::sync::Mutex::new(db)),
        }
    }
}

#[cfg(feature = "postgres")]
impl std::fmt::Debug for PgFences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgFences")
            .field("fence", &self.fence)
            .finish()
    }
}

#[cfg(feature = "postgres")]
impl FenceBackend for PgFences {
    fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a> {
        Box::pin(async move {
            let mut db = self.db.lock().await;
            let outcome = self.fence.write(&mut db, resource, token, &[]).await?;
            Ok(outcome.map(|_rows| ()))
        })
    }
}

/// The layer's fences in MySQL or MariaDB ([`MyFence`](crate::mysql::MyFence): a transaction
/// that raises the fence row and writes nothing else), over a connection pool: they outlive
/// the service's process.
///
/// ```no_run
/// # fn example(pool: mysql_async::Pool) {
/// use zkfence_fences::http::{FencingLayer, MyFences};
/// let layer = FencingLayer::new(MyFences::new(pool));
/// # }
/// ```
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
#[derive(Clone)]
pub struct MyFences {
    fence: crate::mysql::MyFence,
    pool: mysql_async::Pool,
}

#[cfg(feature = "mysql")]
impl MyFences {
    /// Fences in [`MyFence::new`](crate::mysql::MyFence::new)'s table, over `pool`.
    ///
    /// ```no_run
    /// # fn example(pool: mysql_async::Pool) {
    /// let fences = zkfence_fences::http::MyFences::new(pool);
    /// # }
    /// ```
    pub fn new(pool: mysql_async::Pool) -> MyFences {
        MyFences {
            fence: crate::mysql::MyFence::new(),
            pool,
        }
    }
}

#[cfg(feature = "mysql")]
impl std::fmt::Debug for MyFences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MyFences")
            .field("fence", &self.fence)
            .finish()
    }
}

#[cfg(feature = "mysql")]
impl FenceBackend for MyFences {
    fn admit<'a>(&'a self, resource: &'a str, token: FencingToken) -> AdmitFuture<'a> {
        Box::pin(async move {
            let mut conn = self
                .pool
                .get_conn()
                .await
                .map_err(|e| Error::store("MySQL", e))?;
            let outcome = self
                .fence
                .write(&mut conn, resource, token, Vec::new())
                .await?;
            Ok(outcome.map(|_rows| ()))
        })
    }
}

/// How the layer finds a request's resource key, when the service says.
type ResourceFn = dyn Fn(&http::request::Parts) -> Option<String> + Send + Sync;
type ResourceOf = Arc<ResourceFn>;

/// The `tower` layer: wrap the routes that write (see the [module docs](self)).
///
/// ```
/// use zkfence_fences::http::{FencingLayer, MemoryFences};
/// let layer = FencingLayer::new(MemoryFences::new())
///     // One resource per order, whatever the client says.
///     .resource_from(|parts| Some(format!("/locks{}", parts.uri.path())));
/// ```
#[derive(Clone)]
pub struct FencingLayer<B> {
    backend: B,
    resource_of: Option<ResourceOf>,
    turns: Turns,
}

impl<B: std::fmt::Debug> std::fmt::Debug for FencingLayer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencingLayer")
            .field("backend", &self.backend)
            .field("resource_from_request", &self.resource_of.is_some())
            .finish()
    }
}

impl<B: FenceBackend> FencingLayer<B> {
    /// A layer checking fences in `backend`, the resource named by `Fencing-Resource`.
    ///
    /// ```
    /// let layer = zkfence_fences::http::FencingLayer::new(zkfence_fences::http::MemoryFences::new());
    /// ```
    pub fn new(backend: B) -> FencingLayer<B> {
        FencingLayer {
            backend,
            resource_of: None,
            turns: Turns::default(),
        }
    }

    /// The resource key comes from the request (its path, say) instead of the
    /// `Fencing-Resource` header; `None` answers 400.
    ///
    /// ```
    /// use zkfence_fences::http::{FencingLayer, MemoryFences};
    /// let layer = FencingLayer::new(MemoryFences::new())
    ///     .resource_from(|parts| parts.uri.path().strip_prefix("/orders/").map(|id| format!("/locks/orders-{id}")));
    /// ```
    pub fn resource_from(
        mut self,
        f: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> FencingLayer<B> {
        self.resource_of = Some(Arc::new(f));
        self
    }
}

impl<S, B: Clone> tower_layer::Layer<S> for FencingLayer<B> {
    type Service = FencingService<S, B>;

    fn layer(&self, inner: S) -> FencingService<S, B> {
        FencingService {
            inner,
            backend: self.backend.clone(),
            resource_of: self.resource_of.clone(),
            turns: self.turns.clone(),
        }
    }
}

/// Per resource, a lock held from a request's check to its handler's response.
#[derive(Clone, Default)]
struct Turns(Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>);

impl Turns {
    async fn take(&self, resource: &str) -> Turn {
        let lock = self
            .0
            .lock()
            .unwrap()
            .entry(resource.to_string())
            .or_default()
            .clone();
        let guard = lock.clone().lock_owned().await;
        Turn {
            turns: self.clone(),
            resource: resource.to_string(),
            lock,
            _guard: Some(guard),
        }
    }
}

/// A resource's turn; the map's entry goes with the last turn, so the map holds only
/// resources with requests in flight.
struct Turn {
    turns: Turns,
    resource: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    _guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self._guard.take();
        let mut map = self.turns.0.lock().unwrap();
        // The map's and ours: nobody else waits for this resource.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.resource);
        }
    }
}

/// The service [`FencingLayer`] wraps around yours.
#[derive(Clone)]
pub struct FencingService<S, B> {
    inner: S,
    backend: B,
    resource_of: Option<ResourceOf>,
    turns: Turns,
}

impl<S: std::fmt::Debug, B: std::fmt::Debug> std::fmt::Debug for FencingService<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencingService")
            .field("inner", &self.inner)
            .field("backend", &self.backend)
            .finish()
    }
}

impl<S, B, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for FencingService<S, B>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: FenceBackend,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The clone that was made ready is the one to call (tower's usual swap).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let backend = self.backend.clone();
        let turns = self.turns.clone();
        let (parts, body) = req.into_parts();
        let found = request_fence(&parts, self.resource_of.as_deref());
        Box::pin(async move {
            let (resource, token) = match found {
                Ok(found) => found,
                Err(why) => return Ok(answer(StatusCode::BAD_REQUEST, why, None)),
            };
            let _turn = turns.take(&resource).await;
            match backend.admit(&resource, token).await {
                Ok(Outcome::Written(())) => {
                    tracing::trace!(%resource, %token, "fencing: admitted");
                    inner.call(Request::from_parts(parts, body)).await
                }
                Ok(Outcome::Refused(stale)) => {
                    tracing::info!(%resource, token = %stale.token, newest = %stale.newest, "fencing: refused a stale token");
                    let text = format!(
                        "stale fencing token {} for resource {resource:?}: a newer holder (token \
                         {}) has written; this holder lost the lock",
                        stale.token, stale.newest
                    );
                    Ok(answer(StatusCode::CONFLICT, text, Some(stale.newest)))
                }
                Err(e @ Error::Store { .. }) => {
                    tracing::warn!(%resource, error = %e, "fencing: the fence's store failed");
                    Ok(answer(StatusCode::SERVICE_UNAVAILABLE, e.to_string(), None))
                }
                Err(e) => Ok(answer(StatusCode::BAD_REQUEST, e.to_string(), None)),
            }
        })
    }
}

fn answer<B: From<String>>(
    status: StatusCode,
    text: String,
    newest: Option<FencingToken>,
) -> Response<B> {
    let mut response = Response::new(B::from(text + "\n"));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(newest) = newest {
        headers.insert(FENCING_TOKEN_NEWEST, HeaderValue::from(newest.get()));
    }
    response
}

/// The resource and token of a request, checked; else what is wrong, for the 400's body.
fn request_fence(
    parts: &http::request::Parts,
    resource_of: Option<&ResourceFn>,
) -> Result<(String, FencingToken), String> {
    let token = token_of(&parts.headers)?;
    let resource = match resource_of {
        Some(f) => f(parts).ok_or_else(|| {
            format!(
                "the service fences no resource for {} {}",
                parts.method,
                parts.uri.path()
            )
        })?,
        None => resource_header(&parts.headers)?,
    };
    check_input(&resource, token).map_err(|e| e.to_string())?;
    Ok((resource, token))
}

fn token_of(headers: &HeaderMap) -> Result<FencingToken, String> {
    let Some(value) = headers.get(FENCING_TOKEN) else {
        return Err(
            "no Fencing-Token header: a fenced request carries the writer's token \
                    (e.g. `Fencing-Token: 4294967302`)"
                .into(),
        );
    };
    let text = value.to_str().unwrap_or_default().trim();
    text.parse::<u64>().map(FencingToken::new).map_err(|_| {
        format!(
            "the Fencing-Token header {:?} is not a decimal token (e.g. `Fencing-Token: \
             4294967302`)",
            String::from_utf8_lossy(value.as_bytes())
        )
    })
}

fn resource_header(headers: &HeaderMap) -> Result<String, String> {
    let Some(value) = headers.get(FENCING_RESOURCE) else {
        return Err(
            "no Fencing-Resource header: a fenced request names the resource key, \
                    percent-encoded (e.g. `Fencing-Resource: /locks/orders-42`)"
                .into(),
        );
    };
    percent_decode(value.as_bytes()).ok_or_else(|| {
        format!(
            "the Fencing-Resource header {:?} is not percent-encoded UTF-8",
            String::from_utf8_lossy(value.as_bytes())
        )
    })
}

fn keeps(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~/:".contains(&b)
}

/// The resource key as the `Fencing-Resource` header writes it.
///
/// ```
/// assert_eq!(zkfence_fences::http::percent_encode("/locks/naïve key"), "/locks/na%C3%AFve%20key");
/// ```
pub fn percent_encode(resource: &str) -> String {
    let mut out = String::with_capacity(resource.len());
    for &b in resource.as_bytes() {
        if keeps(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(bytes: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The two headers of a fenced request for `resource` and `token`.
///
/// ```
/// use zkfence_fences::{http::fencing_headers, FencingToken};
/// let h = fencing_headers("/locks/orders 42", FencingToken::new(77)).unwrap();
/// assert_eq!(h["fencing-token"], "77");
/// assert_eq!(h["fencing-resource"], "/locks/orders%2042");
/// ```
///
/// # Errors
///
/// [`Error::InvalidToken`] for 0, [`Error::InvalidResource`] for a key that breaks the
/// crate's rule.
pub fn fencing_headers(resource: &str, token: FencingToken) -> Result<HeaderMap, Error> {
    check_input(resource, token)?;
    let mut headers = HeaderMap::with_capacity(2);
    headers.insert(FENCING_TOKEN, HeaderValue::from(token.get()));
    let encoded = HeaderValue::from_str(&percent_encode(resource))
        .expect("percent-encoded keys are visible ASCII");
    headers.insert(FENCING_RESOURCE, encoded);
    Ok(headers)
}

/// The headers of a fenced request by the holder of `lease`: its token, and its lock's path
/// as the resource.
///
/// ```no_run
/// # async fn example(lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_fences::http::lease_headers;
/// let request = http::Request::put("http://127.0.0.1:8080/orders/42")
///     .body(String::from("shipped"))?;
/// let (mut parts, body) = request.into_parts();
/// parts.headers.extend(lease_headers(&lease)?);
/// // ... send http::Request::from_parts(parts, body) with your client (hyper, reqwest's
/// // `.headers(lease_headers(&lease)?)`, ...)
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::InvalidResource`] if the lock's path is longer than the crate's 512 bytes.
pub fn lease_headers(lease: &Lease) -> Result<HeaderMap, Error> {
    fencing_headers(lease.lock_path(), lease.token())
}

/// The newest token a 409 refusal names (`Fencing-Token-Newest`), `None` for any other
/// answer.
///
/// ```
/// use zkfence_fences::{http::newest_token, FencingToken};
/// let refused = http::Response::builder()
///     .status(409)
///     .header("fencing-token-newest", "90")
///     .body(())
///     .unwrap();
/// assert_eq!(newest_token(&refused), Some(FencingToken::new(90)));
/// ```
pub fn newest_token<T>(response: &Response<T>) -> Option<FencingToken> {
    if response.status() != StatusCode::CONFLICT {
        return None;
    }
    let text = response
        .headers()
        .get(FENCING_TOKEN_NEWEST)?
        .to_str()
        .ok()?;
    text.trim().parse().ok().map(FencingToken::new)
}

/// The client's reading of an answer: written (2xx), refused (409), or an error.
///
/// ```
/// use zkfence_fences::{http::outcome_of, FencingToken, Outcome};
/// let ok = http::Response::builder().status(204).body(()).unwrap();
/// assert!(outcome_of(&ok, FencingToken::new(5)).unwrap().is_written());
/// ```
///
/// # Errors
///
/// [`Error::Store`] with the status for any answer but a 2xx or a 409 naming the newest
/// token.
pub fn outcome_of<T>(response: &Response<T>, token: FencingToken) -> Result<Outcome, Error> {
    if response.status().is_success() {
        return Ok(Outcome::Written(()));
    }
    match newest_token(response) {
        Some(newest) => Ok(refused(token, newest.get())),
        None => Err(Error::store(
            "HTTP service",
            format!("answered {}", response.status()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding_round_trips() {
        for key in ["/locks/a", "naïve key; 'q' \"d\" {b} %41 +", "✓"] {
            let enc = percent_encode(key);
            assert!(enc.bytes().all(|b| b.is_ascii_graphic()), "{enc}");
            assert_eq!(percent_decode(enc.as_bytes()).as_deref(), Some(key));
        }
        assert_eq!(percent_decode(b"%4"), None);
        assert_eq!(percent_decode(b"%ff"), None);
    }
}
