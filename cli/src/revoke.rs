//! `zkfence revoke LOCKPATH`: ask the lock's holder to let go, with Curator's protocol
//! (`__REVOKE__` as the holder node's data). A revocable holder (`exec --revocable`, a
//! Curator `InterProcessMutex` made revocable) stops; one whose owner data does not say it
//! listens is not asked unless `--force`, since it would ignore the request.

use zkfence::Contender;

use crate::exit::{self, Failure};
use crate::remote::{close, Global};

/// Revokes the holder of `lockpath`, or its contender `node` (a name under `lockpath`, or
/// its full path); with `force`, also one that does not say it listens.
pub async fn run(
    global: &Global,
    lockpath: &str,
    node: Option<&str>,
    force: bool,
) -> Result<u8, Failure> {
    let session = global.connect().await?;
    let result = ask(&session, lockpath, node, force).await;
    close(session, std::time::Duration::from_secs(1)).await;
    let (target, asked) = result?;
    if asked {
        println!(
            "asked {target} to let go of {lockpath}: it stops and releases once it acts on the request"
        );
        Ok(exit::OK)
    } else {
        Err(Failure::new(
            exit::NOT_REVOCABLE,
            format!(
                "{target} does not take revocation requests (it was not started with \
                 `zkfence exec --revocable`, or is another client's): nothing was written. \
                 --force writes the request anyway (e.g. for a Curator holder made revocable)"
            ),
        ))
    }
}

/// The contender to ask, as the message names it, and whether it was asked.
async fn ask(
    session: &zkfence::Session,
    lockpath: &str,
    node: Option<&str>,
    force: bool,
) -> Result<(String, bool), Failure> {
    let contenders = session.lock(lockpath).contenders().await?;
    let (path, found): (String, Option<&Contender>) = match node {
        Some(node) => {
            let path = if node.starts_with('/') {
                node.to_string()
            } else {
                format!("{}/{node}", lockpath.trim_end_matches('/'))
            };
            let found = contenders.iter().find(|c| c.node == path);
            (path, found)
        }
        None => match contenders.first() {
            Some(holder) => (holder.node.clone(), Some(holder)),
            None => {
                return Err(Failure::new(
                    exit::ERROR,
                    format!("nobody holds {lockpath}: nothing to revoke"),
                ))
            }
        },
    };
    let target = match found {
        Some(c) => format!("{} ({})", c.node, c.owner),
        None => path.clone(),
    };
    // A node not among the contenders is for Session::revoke to refuse (NotALockNode).
    let listens = match found {
        Some(c) => c.owner.revocable || c.owner.revocation_requested(),
        None => true,
    };
    if !listens && !force {
        return Ok((target, false));
    }
    session.revoke(&path).await?;
    Ok((target, true))
}
