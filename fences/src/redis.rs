//! Redis: one Lua script compares the stored token, raises it and runs the write.
//!
//! The fence of a resource is a string key (default `zkfence:fence:` + the resource) holding
//! the newest accepted token in decimal. [`RedisFence::write`] runs one script (`EVALSHA`,
//! falling back to `EVAL` once per server):
//!
//! ```lua
//! local stored = redis.call('GET', KEYS[1])          -- missing: no fence, nothing written
//! if newer(stored, ARGV[1]) then return stored end   -- refused, nothing written
//! redis.call('SET', KEYS[1], ARGV[1])
//! -- then each command of the Write, with its keys from KEYS[2..]
//! ```
//!
//! **Why it is atomic.** Redis runs a script to its end before any other command: no other
//! writer's check or write can come between this one's check and write. Tokens are compared
//! as decimal strings (length, then digits), never as Lua numbers, which are doubles and
//! would round tokens above 2⁵³.
//!
//! **What it does not undo.** A script has no rollback: if a command of the write fails
//! (say `HSET` on a key that holds a string), the commands before it and the fence raise
//! stay applied. Write commands that cannot fail on your keys' types.
//!
//! **Cluster.** Every key a script touches must be in one hash slot: give the resource a
//! hash tag that the data keys share (resource `{orders:42}`, data `{orders:42}:status`;
//! the fence key `zkfence:fence:{orders:42}` is in the same slot).
//!
//! **Persistence and failover, plainly.** The fence is only as durable as Redis's copy of
//! it. With the default RDB snapshots, a restart loses every fence raise since the last
//! snapshot, and a stale holder is then accepted. Run with `appendonly yes` and
//! `appendfsync always` (with `everysec`, a crash of the machine loses up to a second).
//! Replication is asynchronous: a primary can acknowledge a raise and die before a replica
//! has it; Sentinel or Cluster then promotes that replica, which holds the older token, and
//! the stale holder's next write is **accepted** (and the newer holder's acknowledged write
//! is gone). `WAIT` narrows the window but does not close it: it does not make the replica
//! that is promoted one that had the write. Where a write after a failover must never come
//! from a stale holder, keep the fence in a store that replicates by consensus (etcd,
//! PostgreSQL with synchronous replication). Eviction: a fence key has no TTL, so
//! `volatile-*` policies never evict it; under `allkeys-*` it can be evicted, and the next
//! write gets [`Error::NoFence`] (set `maxmemory-policy noeviction`).

use ::redis::aio::ConnectionLike;
use ::redis::{Script, Value};
use zkfence::FencingToken;

use crate::common::{check_input, check_resource, refused};
use crate::{Error, Outcome};

const STORE: &str = "Redis";

fn rd(e: ::redis::RedisError) -> Error {
    Error::store(STORE, e)
}

/// The script. ARGV[1] is the token; ARGV[2] the number of commands; then per command the
/// number of its parts, and per part a kind (`k`: the value is an index into KEYS, `a`: the
/// value is an argument) and the value.
const SCRIPT: &str = r#"
local stored = redis.call('GET', KEYS[1])
if not stored then return {'nofence'} end
local t = ARGV[1]
if not string.match(stored, '^%d+$') then return {'corrupt', stored} end
if #stored > #t or (#stored == #t and stored > t) then return {'stale', stored} end
if stored ~= t then redis.call('SET', KEYS[1], t) end
local i = 3
for c = 1, tonumber(ARGV[2]) do
  local parts = tonumber(ARGV[i]); i = i + 1
  local argv = {}
  for p = 1, parts do
    if ARGV[i] == 'k' then argv[p] = KEYS[tonumber(ARGV[i + 1])] else argv[p] = ARGV[i + 1] end
    i = i + 2
  end
  redis.call(unpack(argv))
end
return {'written'}
"#;

/// The commands of a fenced write, run in order by the script after the check.
///
/// ```
/// use zkfence_fences::redis::Write;
/// let write = Write::new()
///     .set("orders:42:status", "shipped")
///     .command("HSET", &["orders:42"], &["status", "shipped"])
///     .command("XADD", &["orders:log"], &["*", "order", "42", "status", "shipped"]);
/// assert_eq!(write.len(), 3);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Write {
    /// Per command, its parts: (is a key, bytes).
    commands: Vec<Vec<(bool, Vec<u8>)>>,
}

impl Write {
    /// No commands: a write of the fence alone (it raises the fence, or is refused).
    ///
    /// ```
    /// assert!(zkfence_fences::redis::Write::new().is_empty());
    /// ```
    pub fn new() -> Write {
        Write::default()
    }

    /// Adds `name keys... args...` (most commands take their keys first). Keys are declared
    /// to Redis as keys (`KEYS`), as a script must for Redis Cluster.
    ///
    /// ```
    /// let w = zkfence_fences::redis::Write::new().command("LPUSH", &["jobs"], &["job-1"]);
    /// # assert_eq!(w.len(), 1);
    /// ```
    pub fn command(
        mut self,
        name: &str,
        keys: &[impl AsRef<[u8]>],
        args: &[impl AsRef<[u8]>],
    ) -> Write {
        let mut parts = vec![(false, name.as_bytes().to_vec())];
        parts.extend(keys.iter().map(|k| (true, k.as_ref().to_vec())));
        parts.extend(args.iter().map(|a| (false, a.as_ref().to_vec())));
        self.commands.push(parts);
        self
    }

    /// Adds `SET key value`.
    ///
    /// ```
    /// let w = zkfence_fences::redis::Write::new().set("k", "v");
    /// # assert_eq!(w.len(), 1);
    /// ```
    pub fn set(self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Write {
        self.command("SET", &[key.as_ref()], &[value.as_ref()])
    }

    /// Adds `RPUSH key value`.
    ///
    /// ```
    /// let w = zkfence_fences::redis::Write::new().rpush("log", "entry");
    /// # assert_eq!(w.len(), 1);
    /// ```
    pub fn rpush(self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Write {
        self.command("RPUSH", &[key.as_ref()], &[value.as_ref()])
    }

    /// Adds `DEL key`.
    ///
    /// ```
    /// let w = zkfence_fences::redis::Write::new().del("k");
    /// # assert_eq!(w.len(), 1);
    /// ```
    pub fn del(self, key: impl AsRef<[u8]>) -> Write {
        self.command("DEL", &[key.as_ref()], &[] as &[&[u8]])
    }

    /// How many commands.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::redis::Write::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether there is no command.
    ///
    /// ```
    /// assert!(zkfence_fences::redis::Write::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// The fences of resources in one Redis (or one hash slot of a cluster).
///
/// ```no_run
/// # async fn example(lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_fences::{redis::{RedisFence, Write}, Outcome};
///
/// let client = ::redis::Client::open("redis://127.0.0.1/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let fence = RedisFence::new();
/// fence.create(&mut conn, "/locks/orders-42").await?; // the owner, once
///
/// // The writer: the check and the write in one script.
/// let write = Write::new().set("orders:42:status", "shipped");
/// if let Outcome::Refused(stale) = fence.write(&mut conn, "/locks/orders-42", lease.token(), &write).await? {
///     eprintln!("{stale}"); // a newer holder has written: stop
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisFence {
    prefix: String,
    script: Script,
}

impl Default for RedisFence {
    fn default() -> Self {
        RedisFence::new()
    }
}

impl RedisFence {
    /// Fences under the key prefix `zkfence:fence:`.
    ///
    /// ```
    /// let fence = zkfence_fences::redis::RedisFence::new();
    /// assert_eq!(fence.fence_key("a"), "zkfence:fence:a");
    /// ```
    pub fn new() -> RedisFence {
        RedisFence::with_prefix("zkfence:fence:")
    }

    /// Fences under the key prefix `prefix`.
    ///
    /// ```
    /// let fence = zkfence_fences::redis::RedisFence::with_prefix("app:fence:");
    /// assert_eq!(fence.fence_key("a"), "app:fence:a");
    /// ```
    pub fn with_prefix(prefix: &str) -> RedisFence {
        RedisFence {
            prefix: prefix.to_string(),
            script: Script::new(SCRIPT),
        }
    }

    /// The key of a resource's fence.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::redis::RedisFence::new().fence_key("{o:1}"), "zkfence:fence:{o:1}");
    /// ```
    pub fn fence_key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    /// Creates the resource's fence (accepting any token) if it does not exist (`SET key 0
    /// NX`); an existing fence keeps its token.
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidResource`], [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one idempotent command.
    ///
    /// ```no_run
    /// # async fn example(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), zkfence_fences::Error> {
    /// zkfence_fences::redis::RedisFence::new().create(conn, "/locks/orders-42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn create(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        resource: &str,
    ) -> Result<(), Error> {
        check_resource(resource)?;
        let _: Value = ::redis::cmd("SET")
            .arg(self.fence_key(resource))
            .arg("0")
            .arg("NX")
            .query_async(conn)
            .await
            .map_err(rd)?;
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
    /// # async fn example(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), zkfence_fences::Error> {
    /// let newest = zkfence_fences::redis::RedisFence::new().newest(conn, "/locks/orders-42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn newest(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        resource: &str,
    ) -> Result<Option<FencingToken>, Error> {
        check_resource(resource)?;
        let stored: Option<String> = ::redis::cmd("GET")
            .arg(self.fence_key(resource))
            .query_async(conn)
            .await
            .map_err(rd)?;
        stored
            .map(|s| self.parse(resource, &s).map(FencingToken::new))
            .transpose()
    }

    fn parse(&self, resource: &str, stored: &str) -> Result<u64, Error> {
        stored.parse().map_err(|_| Error::CorruptFence {
            store: STORE,
            resource: resource.to_string(),
            found: stored.chars().take(80).collect(),
        })
    }

    /// A fenced write: one script checks the resource's fence, raises it to `token` and runs
    /// `write`'s commands, or refuses and writes nothing.
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidToken`], [`Error::InvalidResource`]: nothing was sent.
    /// - [`Error::NoFence`], [`Error::CorruptFence`]: nothing was written.
    /// - [`Error::Store`]: a command of the write failed (those before it stayed applied,
    ///   see the module docs), or the connection did (the script ran whole or not at all).
    ///
    /// # Cancel safety
    ///
    /// Once sent, the script runs whole or not at all; a cancelled call does not know which.
    ///
    /// ```no_run
    /// # async fn example(conn: &mut redis::aio::MultiplexedConnection, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence_fences::redis::{RedisFence, Write};
    /// let write = Write::new().set("orders:42:status", "shipped").rpush("orders:42:log", "shipped");
    /// RedisFence::new().write(conn, "/locks/orders-42", lease.token(), &write).await?.into_result()?;
    /// # Ok(()) }
    /// ```
    pub async fn write(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        resource: &str,
        token: FencingToken,
        write: &Write,
    ) -> Result<Outcome, Error> {
        check_input(resource, token)?;
        let mut invocation = self.script.prepare_invoke();
        invocation.key(self.fence_key(resource));
        invocation.arg(token.get().to_string());
        invocation.arg(write.commands.len());
        let mut next_key = 2usize;
        for parts in &write.commands {
            invocation.arg(parts.len());
            for (is_key, bytes) in parts {
                if *is_key {
                    invocation.key(bytes.as_slice());
                    invocation.arg("k").arg(next_key);
                    next_key += 1;
                } else {
                    invocation.arg("a").arg(bytes.as_slice());
                }
            }
        }
        let answer: Vec<String> = invocation.invoke_async(conn).await.map_err(rd)?;
        match answer.first().map(String::as_str) {
            Some("written") => Ok(Outcome::Written(())),
            Some("stale") => {
                let stored = answer.get(1).map(String::as_str).unwrap_or_default();
                Ok(refused(token, self.parse(resource, stored)?))
            }
            Some("nofence") => Err(Error::NoFence {
                store: STORE,
                resource: resource.to_string(),
            }),
            Some("corrupt") => Err(Error::CorruptFence {
                store: STORE,
                resource: resource.to_string(),
                found: answer.get(1).cloned().unwrap_or_default(),
            }),
            _ => Err(Error::store(
                STORE,
                format!("unexpected answer from the fence script: {answer:?}"),
            )),
        }
    }
}
