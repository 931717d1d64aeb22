//! `zkfence revoke LOCKPATH`: ask the lock's holder to let go, with Curator's protocol
//! (`__REVOKE__` as the holder node's data). A revocable holder (`exec --revocable`, a
//! Curator `InterProcessMutex` made revocable) stops; any other ignores it.

use crate::exit::{self, Failure};
use crate::remote::{close, Global};

/// Revokes the holder of `lockpath`, or its contender `node` (a name under `lockpath`, or
/// its full path).
pub async fn run(global: &Global, lockpath: &str, node: Option<&str>) -> Result<u8, Failure> {
    let session = global.connect().await?;
    let result = match node {
        Some(node) => {
            let path = if node.starts_with('/') {
                node.to_string()
            } else {
                format!("{}/{node}", lockpath.trim_end_matches('/'))
            };
            session.revoke(&path).await.map(|()| Some(path))
        }
        None => session
            .lock(lockpath)
            .revoke_holder()
            .await
            .map(|holder| holder.map(|h| format!("{} ({h})", h.node))),
    };
    close(session, std::time::Duration::from_secs(1)).await;
    match result? {
        Some(revoked) => {
            println!(
                "asked {revoked} to let go of {lockpath}: a revocable holder stops and releases, any other ignores it"
            );
            Ok(exit::OK)
        }
        None => Err(Failure::new(
            exit::ERROR,
            format!("nobody holds {lockpath}: nothing to revoke"),
        )),
    }
}
