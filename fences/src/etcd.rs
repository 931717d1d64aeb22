//! etcd: one transaction compares the fence key, then raises it and writes.
//!
//! The fence of a resource is a key (default `zkfence/fence/` + the resource) whose value is
//! the newest accepted token as 20 zero-padded decimal digits, so that etcd's byte-wise
//! value comparison is a numeric one. [`EtcdFence::write`] sends one transaction:
//!
//! ```text
//! IF   value(fence) < pad(token + 1)          -- i.e. stored <= token; false if missing
//! THEN put(fence, pad(token)), your ops...
//! ELSE get(fence)                             -- missing: no fence; else refused, newest
//! ```
//!
//! **Why it is atomic.** An etcd transaction is one entry in the Raft log, applied as one
//! step at one revision: no other write comes between its comparison and its puts. It is
//! committed on a quorum of members before it is acknowledged, so a fence raise survives the
//! loss of a minority of members and a leader change; what a member acknowledged is
//! fsynced to its write-ahead log (unless it runs with `--unsafe-no-fsync`). A restore from
//! a snapshot or backup sets fences back with the data: a stale holder may then write, so
//! restore only with every writer stopped.
//!
//! Tested against etcd 3.4 (Debian's `etcd-server`) with `etcd-client` 0.21: the KV and
//! transaction API used here is the v3 API every 3.x server serves.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use zkfence::FencingToken;

use crate::common::{check_input, check_resource, padded, refused};
use crate::{Error, Outcome};

const STORE: &str = "etcd";

fn et(e: etcd_client::Error) -> Error {
    Error::store(STORE, e)
}

/// The fences of resources under one key prefix.
///
/// ```no_run
/// # async fn example(lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
/// use etcd_client::{Client, TxnOp};
/// use zkfence_fences::{etcd::EtcdFence, Outcome};
///
/// let mut client = Client::connect(["http://127.0.0.1:2379"], None).await?;
/// let fence = EtcdFence::new();
/// fence.create(&mut client, "/locks/orders-42").await?; // the owner, once
///
/// // The writer: the check and the write in one transaction.
/// let ops = vec![TxnOp::put("orders/42/status", "shipped", None)];
/// match fence.write(&mut client, "/locks/orders-42", lease.token(), ops).await? {
///     Outcome::Written(revision) => println!("written at revision {revision}"),
///     Outcome::Refused(stale) => eprintln!("{stale}"), // a newer holder has written: stop
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct EtcdFence {
    prefix: Vec<u8>,
}

impl Default for EtcdFence {
    fn default() -> Self {
        EtcdFence::new()
    }
}

impl EtcdFence {
    /// Fences under the key prefix `zkfence/fence/`.
    ///
    /// ```
    /// let fence = zkfence_fences::etcd::EtcdFence::new();
    /// assert_eq!(fence.fence_key("/locks/a"), b"zkfence/fence//locks/a");
    /// ```
    pub fn new() -> EtcdFence {
        EtcdFence::with_prefix("zkfence/fence/")
    }

    /// Fences under the key prefix `prefix`.
    ///
    /// ```
    /// let fence = zkfence_fences::etcd::EtcdFence::with_prefix("app/fence/");
    /// assert_eq!(fence.fence_key("a"), b"app/fence/a");
    /// ```
    pub fn with_prefix(prefix: &str) -> EtcdFence {
        EtcdFence {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    /// The key of a resource's fence.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::etcd::EtcdFence::new().fence_key("x"), b"zkfence/fence/x");
    /// ```
    pub fn fence_key(&self, resource: &str) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(resource.as_bytes());
        key
    }

    /// Creates the resource's fence (accepting any token) if it does not exist; an existing
    /// fence keeps its token.
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidResource`], [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one idempotent transaction.
    ///
    /// ```no_run
    /// # async fn example(client: &mut etcd_client::Client) -> Result<(), zkfence_fences::Error> {
    /// zkfence_fences::etcd::EtcdFence::new().create(client, "/locks/orders-42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, client: &mut Client, resource: &str) -> Result<(), Error> {
        check_resource(resource)?;
        let key = self.fence_key(resource);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, padded(0), None)]);
        client.txn(txn).await.map_err(et)?;
        Ok(())
    }

    /// The newest token the resource's fence accepted (`Some(0)` before any write), or
    /// `None` if it has no fence.
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidResource`], [`Error::CorruptFence`], [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn example(client: &mut etcd_client::Client) -> Result<(), zkfence_fences::Error> {
    /// let newest = zkfence_fences::etcd::EtcdFence::new().newest(client, "/locks/orders-42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn newest(
        &self,
        client: &mut Client,
        resource: &str,
    ) -> Result<Option<FencingToken>, Error> {
        check_resource(resource)?;
        let got = client
            .get(self.fence_key(resource), None)
            .await
            .map_err(et)?;
        got.kvs()
            .first()
            .map(|kv| self.parse(resource, kv.value()).map(FencingToken::new))
            .transpose()
    }

    fn parse(&self, resource: &str, value: &[u8]) -> Result<u64, Error> {
        std::str::from_utf8(value)
            .ok()
            .filter(|s| s.len() == 20)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::CorruptFence {
                store: STORE,
                resource: resource.to_string(),
                found: String::from_utf8_lossy(value).chars().take(80).collect(),
            })
    }

    /// A fenced write: one transaction compares the resource's fence, raises it to `token`
    /// and applies `ops`, or refuses and writes nothing. Written carries the revision of the
    /// commit (etcd's order of every write).
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidToken`], [`Error::InvalidResource`]: nothing was sent.
    /// - [`Error::NoFence`], [`Error::CorruptFence`]: nothing was written.
    /// - [`Error::Store`]: etcd refused the transaction (e.g. an op touching the fence key
    ///   itself: "duplicate key given in txn request"), or the connection failed (the
    ///   transaction committed whole or not at all).
    ///
    /// # Cancel safety
    ///
    /// Once sent, the transaction commits whole or not at all; a cancelled call does not know
    /// which.
    ///
    /// ```no_run
    /// # async fn example(client: &mut etcd_client::Client, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use etcd_client::TxnOp;
    /// let ops = vec![TxnOp::put("orders/42/status", "shipped", None)];
    /// let revision = zkfence_fences::etcd::EtcdFence::new()
    ///     .write(client, "/locks/orders-42", lease.token(), ops)
    ///     .await?
    ///     .into_result()?;
    /// # Ok(()) }
    /// ```
    pub async fn write(
        &self,
        client: &mut Client,
        resource: &str,
        token: FencingToken,
        ops: Vec<TxnOp>,
    ) -> Result<Outcome<i64>, Error> {
        check_input(resource, token)?;
        let key = self.fence_key(resource);
        // stored <= token  <=>  stored < token + 1 (tokens are below 2^63: no overflow).
        let bound = padded(token.get() + 1);
        let mut then = vec![TxnOp::put(key.clone(), padded(token.get()), None)];
        then.extend(ops);
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Less, bound)])
            .and_then(then)
            .or_else([TxnOp::get(key, None)]);
        let answer = client.txn(txn).await.map_err(et)?;
        let revision = answer.header().map(|h| h.revision()).unwrap_or_default();
        if answer.succeeded() {
            return Ok(Outcome::Written(revision));
        }
        let stored = answer.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        match stored {
            None => Err(Error::NoFence {
                store: STORE,
                resource: resource.to_string(),
            }),
            Some(value) => Ok(refused(token, self.parse(resource, &value)?)),
        }
    }
}
