//! `--postgres`: the contenders' fenced write to a PostgreSQL row, by the SQL of the
//! `fenced_postgres` recipe.
//!
//! The statements are copied from `recipes/fenced_postgres.rs` (an example program, which
//! nothing can import): the fence row per resource raised by a conditional upsert
//! (`WHERE fence.token <= EXCLUDED.token`), the protected row and the log of accepted
//! writes, all in one transaction. A test below keeps the copy equal to the recipe's text.
//! A campaign maps its writes onto the recipe's tables: the resource and the account are both
//! the resource's path (each a fence row and a row of its own), `written_by` the client's
//! number and `balance` the write's sequence number; the log, in `seq` order, is PostgreSQL's own order of the writes it
//! accepted (an accepted write inserts into it while holding the fence row's lock, so the
//! next writer's check waits for its commit).

use std::time::Duration;

use std::collections::BTreeMap;

use tokio_postgres::{Client, NoTls};

use super::PgLogged;

/// The recipe's tables (its `SCHEMA`).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS fence (
    resource text PRIMARY KEY,
    token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS account (
    id text PRIMARY KEY,
    balance bigint NOT NULL,
    written_by text NOT NULL,
    fence_token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS account_writes (
    seq bigserial PRIMARY KEY,
    account text NOT NULL,
    written_by text NOT NULL,
    balance bigint NOT NULL,
    fence_token bigint NOT NULL
);
";

/// The fence: admits a token at least as new as the stored one and stores it; no row back
/// means a newer token was stored.
pub(crate) const ADMIT: &str = "INSERT INTO fence (resource, token) VALUES ($1, $2) \
     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token \
     WHERE fence.token <= EXCLUDED.token \
     RETURNING token";
/// The newest token stored, read when the fence refused.
pub(crate) const NEWEST: &str = "SELECT token FROM fence WHERE resource = $1";
/// The protected write.
pub(crate) const WRITE: &str =
    "INSERT INTO account (id, balance, written_by, fence_token) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, \
         written_by = EXCLUDED.written_by, fence_token = EXCLUDED.fence_token";
/// The log of accepted writes.
pub(crate) const LOG: &str =
    "INSERT INTO account_writes (account, written_by, balance, fence_token) \
         VALUES ($1, $2, $3, $4)";
/// The accepted writes in PostgreSQL's order (the recipe's final query).
pub(crate) const WRITES: &str = "SELECT written_by, balance, fence_token FROM account_writes \
             WHERE account = $1 ORDER BY seq";

/// What the fence said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Written,
    /// Refused: PostgreSQL had stored `newest`.
    Stale {
        newest: u64,
    },
}

/// Connects to PostgreSQL within `limit`; the connection's I/O runs on a task of its own,
/// which ends when the client is dropped.
pub(crate) async fn connect(url: &str, limit: Duration) -> Result<Client, String> {
    let (client, connection) = tokio::time::timeout(limit, tokio_postgres::connect(url, NoTls))
        .await
        .map_err(|_| format!("no answer from {url} in {limit:?}"))?
        .map_err(|e| format!("{url}: {}", with_causes(&e)))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            if !e.is_closed() {
                tracing::warn!(error = %with_causes(&e), "chaos: PostgreSQL connection ended");
            }
        }
    });
    Ok(client)
}

/// The error and its causes (tokio-postgres's own message is only the kind).
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Writes (token, client, seq) through the fence of `resource`, in one transaction, as the
/// recipe's `write_through_fence` does: the check, the raise and the write commit together
/// or not at all.
pub(crate) async fn write_through_fence(
    db: &mut Client,
    resource: &str,
    client: usize,
    token: u64,
    seq: u64,
) -> Result<Outcome, tokio_postgres::Error> {
    // Tokens are czxids, below 2^63: they fit a bigint; so does a sequence number.
    let token = i64::try_from(token).expect("fencing tokens are below 2^63");
    let balance = i64::try_from(seq).expect("sequence numbers are below 2^63");
    let writer = client.to_string();
    let tx = db.transaction().await?;
    if tx.query_opt(ADMIT, &[&resource, &token]).await?.is_none() {
        let newest: i64 = tx.query_one(NEWEST, &[&resource]).await?.get(0);
        tx.rollback().await?;
        return Ok(Outcome::Stale {
            newest: newest as u64,
        });
    }
    tx.execute(WRITE, &[&resource, &balance, &writer, &token])
        .await?;
    tx.execute(LOG, &[&resource, &writer, &balance, &token])
        .await?;
    tx.commit().await?;
    Ok(Outcome::Written)
}

/// What PostgreSQL holds at the end: each resource's fence row's token (if it has one), and
/// the accepted writes of each resource in its order (one resource after another: each has
/// its own fence row, so only each resource's order is PostgreSQL's to keep).
pub(crate) async fn final_state(
    db: &Client,
    resources: &[String],
) -> Result<(BTreeMap<String, u64>, Vec<PgLogged>), String> {
    let mut tokens = BTreeMap::new();
    let mut writes = Vec::new();
    for resource in resources {
        let token = db
            .query_opt(NEWEST, &[resource])
            .await
            .map_err(|e| with_causes(&e))?
            .map(|row| row.get::<_, i64>(0) as u64);
        if let Some(token) = token {
            tokens.insert(resource.clone(), token);
        }
        let rows = db
            .query(WRITES, &[resource])
            .await
            .map_err(|e| with_causes(&e))?;
        for row in rows {
            let (by, seq, token): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let client = by
                .parse()
                .map_err(|_| format!("a logged write by {by:?}, not a client's number"))?;
            writes.push(PgLogged {
                client,
                token: token as u64,
                seq: seq as u64,
                path: resource.clone(),
            });
        }
    }
    Ok((tokens, writes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace collapsed and the string literals' `\` line continuations removed, so that
    /// the recipe's source can be searched for a statement's text.
    fn flat(s: &str) -> String {
        s.replace("\\\n", " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn the_statements_are_the_recipes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../recipes/fenced_postgres.rs");
        let recipe = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("the recipe {path} (in the workspace): {e}"));
        let recipe = flat(&recipe);
        for (name, sql) in [
            ("SCHEMA", SCHEMA),
            ("ADMIT", ADMIT),
            ("NEWEST", NEWEST),
            ("WRITE", WRITE),
            ("LOG", LOG),
            ("WRITES", WRITES),
        ] {
            assert!(
                recipe.contains(&flat(sql)),
                "{name} is not the recipe's statement any more: {sql}"
            );
        }
    }
}
