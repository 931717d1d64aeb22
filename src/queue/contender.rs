//! Who is in a queue, for operators and for error messages: [`Contender`], read from the
//! nodes' names, stats and owner data.

use crate::error::Result;
use crate::node::{self, OwnerInfo};
use crate::session::Shared;
use crate::token::FencingToken;

use super::enqueue::Pending;
use super::{Queue, CLEANUP_GRACE};

/// One contender in a queue, as [`Lock::contenders`](crate::Lock::contenders) reports it.
///
/// ```no_run
/// # async fn f(session: zkfence::Session) -> zkfence::Result<()> {
/// for (i, c) in session.lock("/locks/backup").contenders().await?.iter().enumerate() {
///     let role = if i == 0 { "holds" } else { "waits" };
///     println!("{role}: token {} by {} (session {:#x})", c.token, c.owner, c.session_id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// Full path of the contender's node.
    pub node: String,
    /// The fencing token it holds or will hold: its node's creation zxid.
    pub token: FencingToken,
    /// The node's sequence number, which orders the queue.
    pub sequence: i32,
    /// The ZooKeeper session that owns the node.
    pub session_id: i64,
    /// Owner metadata from the node's data.
    pub owner: OwnerInfo,
    /// When the node was created, in Unix milliseconds (server clock).
    pub created_ms: i64,
}

/// "ID (host, pid N), token T, session 0x…": how zkfence names a contender to an operator.
impl std::fmt::Display for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} with token {}, session 0x{:x}",
            self.owner, self.token, self.session_id as u64
        )
    }
}

impl Contender {
    /// True for the read side of a read/write lock (ours, Curator's `__READ__` or Kazoo's
    /// `__rlock__` node), which holds together with the other readers ahead of any writer;
    /// false for every exclusive contender (a lock, a writer, a candidate, a permit).
    ///
    /// ```
    /// # use zkfence::{Contender, FencingToken, OwnerInfo};
    /// let reader = Contender {
    ///     node: "/locks/catalog/_c_0f1e-__READ__0000000003".into(),
    ///     token: FencingToken::new(7),
    ///     sequence: 3,
    ///     session_id: 1,
    ///     owner: OwnerInfo::default(),
    ///     created_ms: 0,
    /// };
    /// assert!(reader.is_shared());
    /// ```
    pub fn is_shared(&self) -> bool {
        node::is_shared(self.node.rsplit('/').next().unwrap_or(&self.node))
    }
}

/// [`list_contenders`] as of the call: a `sync` first (a round trip to the ZooKeeper leader,
/// no transaction) makes our server catch up, so that a server behind the leader (a follower
/// cut off from it still answers reads with what it last heard) does not show a queue older
/// than the call: a holder that took the lock before the call missing, or one that left
/// before it still there.
pub(crate) async fn list_contenders_now(
    shared: &Shared,
    dir: &str,
    limit: usize,
) -> Result<Vec<Contender>> {
    shared.sync(dir).await?;
    list_contenders(shared, dir, limit).await
}

/// The first `limit` contenders under `dir`, holder first, with their owner data. A
/// contender that left between the listing and the read is skipped.
pub(crate) async fn list_contenders(
    shared: &Shared,
    dir: &str,
    limit: usize,
) -> Result<Vec<Contender>> {
    let Some(children) = shared.list(dir).await? else {
        return Ok(vec![]);
    };
    contenders_among(shared, dir, children, limit).await
}

/// The first `limit` contenders among `children` (a listing of `dir`), holder first, with
/// their owner data, as [`list_contenders`] reads them.
pub(crate) async fn contenders_among(
    shared: &Shared,
    dir: &str,
    children: Vec<String>,
    limit: usize,
) -> Result<Vec<Contender>> {
    let mut queue = node::queue_order(children);
    queue.truncate(limit);
    let paths: Vec<String> = queue
        .iter()
        .map(|(_, name)| format!("{dir}/{name}"))
        .collect();
    let read = shared.data_many(&paths).await?;
    Ok(queue
        .into_iter()
        .zip(paths)
        .zip(read)
        .filter_map(|(((sequence, _), node), read)| {
            let (data, stat) = read?;
            Some(Contender {
                node,
                token: FencingToken::from_zxid(stat.czxid),
                sequence,
                session_id: stat.ephemeral_owner,
                owner: OwnerInfo::decode(&data),
                created_ms: stat.ctime,
            })
        })
        .collect())
}

/// What a queue says about its contenders.
impl Queue {
    /// Lists the contenders, holder first, with their owner data (bounded multi-reads).
    pub(crate) async fn contenders(&self) -> Result<Vec<Contender>> {
        node::validate_path(&self.dir)?;
        list_contenders_now(&self.shared(), &self.dir, usize::MAX).await
    }

    /// The contender named `name`, for [`Error::Timeout`](crate::Error::Timeout): one read,
    /// only on the error path, bounded so a silent ensemble does not delay the error; `None`
    /// if it could not be read (gone meanwhile, or no answer).
    pub(super) async fn describe(&self, name: Option<&str>) -> Option<Box<Contender>> {
        let name = name?;
        let path = format!("{}/{name}", self.dir);
        match tokio::time::timeout(CLEANUP_GRACE, self.shared().data(&path)).await {
            Ok(Ok(Some((data, stat)))) => Some(Box::new(Contender {
                node: path,
                token: FencingToken::from_zxid(stat.czxid),
                sequence: node::sequence_of(name).unwrap_or_default(),
                session_id: stat.ephemeral_owner,
                owner: OwnerInfo::decode(&data),
                created_ms: stat.ctime,
            })),
            _ => None,
        }
    }

    /// How many are ahead of us and who holds now, for [`Error::Timeout`](crate::Error::Timeout):
    /// one listing and one read, bounded together by the cleanup grace so a silent ensemble
    /// does not delay the error. Read when the acquire gives up, which may be before it
    /// looked at all. `None` for what could not be read in time; no holder if nobody else
    /// holds. Our own node is still there (the cleanup comes after the error) and is first
    /// if the holder left just as we gave up: we do not name ourselves.
    pub(super) async fn at_timeout(
        &self,
        ours: &Pending,
    ) -> (Option<usize>, Option<Box<Contender>>) {
        let own = ours
            .created
            .as_ref()
            .map(|created| created.path.rsplit('/').next().unwrap_or(&created.path));
        let marker = ours.marker();
        let is_ours = |name: &str| match own {
            Some(own) => name == own,
            // The create's answer was lost: a node with our marker may be ours.
            None => ours.sent && name.contains(&marker),
        };
        let look = async {
            let Ok(Some(children)) = self.shared().list(&self.dir).await else {
                return (None, None);
            };
            let queue = node::queue_order(children);
            let ahead = match own {
                Some(own) => queue.iter().position(|(_, name)| name == own),
                // No node of ours is known: every other contender is ahead of it.
                None => Some(queue.iter().filter(|(_, name)| !is_ours(name)).count()),
            };
            let holder = match queue.first() {
                Some((_, first)) if !is_ours(first) => self.describe(Some(first)).await,
                _ => None,
            };
            (ahead, holder)
        };
        tokio::time::timeout(CLEANUP_GRACE, look)
            .await
            .unwrap_or((None, None))
    }

    /// How many are ahead of `node` and who else holds, for a timeout error; bounded by the
    /// cleanup grace so a silent ensemble does not delay the error.
    pub(crate) async fn progress_of(&self, node: &str) -> (usize, Option<Box<Contender>>) {
        let listed = tokio::time::timeout(CLEANUP_GRACE, self.shared().list(&self.dir)).await;
        let Ok(Ok(Some(children))) = listed else {
            return (0, None);
        };
        let queue = node::queue_order(children);
        let name = node.rsplit('/').next().unwrap_or(node);
        let ahead = queue
            .iter()
            .position(|(_, n)| n == name)
            .unwrap_or(queue.len());
        // Not ourselves, if the holder left just as we gave up.
        let holder = queue
            .first()
            .filter(|(_, n)| n != name)
            .map(|(_, n)| n.clone());
        (ahead, self.describe(holder.as_deref()).await)
    }
}
