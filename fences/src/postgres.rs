//! PostgreSQL: a fence row per resource, checked and raised in the writer's transaction.
//!
//! The fence is a table (default `zkfence_fence`) of `(resource text PRIMARY KEY, token
//! bigint)`. A fenced write is one transaction:
//!
//! ```sql
//! BEGIN;
//! UPDATE zkfence_fence SET token = $2 WHERE resource = $1 AND token <= $2 RETURNING token;
//! -- a row back: admitted; run the write's statements, then COMMIT
//! -- no row: SELECT token ... (missing: no fence; else refused, newest token), ROLLBACK
//! ```
//!
//! **Why it is atomic.** The `UPDATE` takes the fence row's lock and keeps it until the
//! transaction ends, so the check, the raise and the write commit together or not at all,
//! and a second writer's `UPDATE` waits for the first to end. At READ COMMITTED (the
//! default) it then re-reads the row and sees the raised token (and is refused if its own is
//! older); at REPEATABLE READ or SERIALIZABLE it fails with a serialization error
//! (SQLSTATE 40001), which [`Error::Store`] carries: run the transaction again. A writer that
//! dies before its commit leaves nothing: PostgreSQL rolls its transaction back, fence raise
//! included.
//!
//! Two ways to use it: [`PgFence::write`] (the statements given, in a transaction it opens
//! and ends), or [`PgFence::begin`] / [`PgFence::admit`] for a transaction of your own.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Transaction};
use zkfence::FencingToken;

use crate::common::{check_input, check_resource, refused, token_i64};
use crate::{Error, Outcome};

const STORE: &str = "PostgreSQL";

fn pg(e: tokio_postgres::Error) -> Error {
    Error::store(STORE, e)
}

/// Whether `e` is a concurrent `CREATE … IF NOT EXISTS` that lost the race (the object
/// exists now): a unique violation on the catalog, or a duplicate table.
pub(crate) fn created_concurrently(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE
    )
}

/// A statement of a fenced write and its parameters.
pub type Statement<'a> = (&'a str, &'a [&'a (dyn ToSql + Sync)]);

/// The fence table's statements, for one table name.
///
/// ```no_run
/// # async fn example(mut db: tokio_postgres::Client, lease: zkfence::Lease) -> Result<(), zkfence_fences::Error> {
/// use zkfence_fences::{postgres::PgFence, Outcome};
///
/// let fence = PgFence::new();
/// fence.install(&db).await?;                      // the owner: the table, once
/// fence.create(&db, "/locks/account-7").await?;   // the owner: a fence per resource
///
/// // The writer: the fence and the write commit together, or nothing does.
/// let outcome = fence
///     .write(&mut db, "/locks/account-7", lease.token(), &[(
///         "UPDATE account SET balance = $1 WHERE id = $2",
///         &[&120i64, &"account-7"],
///     )])
///     .await?;
/// if let Outcome::Refused(stale) = outcome {
///     eprintln!("{stale}"); // a newer holder has written: stop
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgFence {
    table: String,
    install: String,
    create: String,
    admit: String,
    newest: String,
}

impl Default for PgFence {
    fn default() -> Self {
        PgFence::new()
    }
}

impl PgFence {
    /// The fence in the table `zkfence_fence`.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::postgres::PgFence::new().table(), "zkfence_fence");
    /// ```
    pub fn new() -> PgFence {
        PgFence::build("zkfence_fence".to_string())
    }

    /// The fence in the table `name`: an identifier (letters, digits, `_`, not starting
    /// with a digit, at most 63 bytes), optionally schema-qualified (`app.fence`).
    ///
    /// ```
    /// use zkfence_fences::postgres::PgFence;
    /// assert_eq!(PgFence::with_table("app.fence").unwrap().table(), "app.fence");
    /// assert!(PgFence::with_table("fence; DROP TABLE x").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] naming the table if it is not such a name.
    pub fn with_table(name: &str) -> Result<PgFence, Error> {
        let ok = !name.is_empty()
            && name.split('.').count() <= 2
            && name.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && !part.starts_with(|c: char| c.is_ascii_digit())
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if !ok {
            return Err(Error::InvalidResource {
                resource: name.chars().take(80).collect(),
                why: "not a table name: use letters, digits and _ (at most 63), optionally \
                      schema.table"
                    .into(),
            });
        }
        Ok(PgFence::build(name.to_string()))
    }

    fn build(table: String) -> PgFence {
        PgFence {
            install: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                 resource text PRIMARY KEY, \
                 token bigint NOT NULL CHECK (token >= 0))"
            ),
            create: format!(
                "INSERT INTO {table} (resource, token) VALUES ($1, 0) \
                 ON CONFLICT (resource) DO NOTHING"
            ),
            admit: format!(
                "UPDATE {table} SET token = $2 WHERE resource = $1 AND token <= $2 \
                 RETURNING token"
            ),
            newest: format!("SELECT token FROM {table} WHERE resource = $1"),
            table,
        }
    }

    /// The table's name.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::postgres::PgFence::new().table(), "zkfence_fence");
    /// ```
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the fence table if it does not exist (the owner, once).
    ///
    /// # Notable errors
    ///
    /// [`Error::Store`] if PostgreSQL refuses (e.g. no `CREATE` privilege on the schema).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement is one transaction; run it again.
    ///
    /// ```no_run
    /// # async fn example(db: &tokio_postgres::Client) -> Result<(), zkfence_fences::Error> {
    /// zkfence_fences::postgres::PgFence::new().install(db).await?;
    /// # Ok(()) }
    /// ```
    pub async fn install(&self, db: &impl GenericClient) -> Result<(), Error> {
        match db.batch_execute(&self.install).await {
            // Two installs at once: `IF NOT EXISTS` does not serialize them, and the loser
            // fails on the catalog's unique index. The table exists: done.
            Err(e) if created_concurrently(&e) => Ok(()),
            other => other.map_err(pg),
        }
    }

    /// Creates the resource's fence (accepting any token) if it does not exist; an existing
    /// fence keeps its token.
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidResource`] for a key that breaks the crate's rule.
    /// - [`Error::Store`] if the table is missing (run [`install`](Self::install)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it is one idempotent statement.
    ///
    /// ```no_run
    /// # async fn example(db: &tokio_postgres::Client) -> Result<(), zkfence_fences::Error> {
    /// zkfence_fences::postgres::PgFence::new().create(db, "/locks/account-7").await?;
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, db: &impl GenericClient, resource: &str) -> Result<(), Error> {
        check_resource(resource)?;
        db.execute(&self.create, &[&resource]).await.map_err(pg)?;
        Ok(())
    }

    /// The newest token the resource's fence accepted (`Some(0)` for a fence no write has
    /// passed yet), or `None` if it has no fence.
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidResource`], [`Error::Store`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn example(db: &tokio_postgres::Client) -> Result<(), zkfence_fences::Error> {
    /// let fence = zkfence_fences::postgres::PgFence::new();
    /// println!("{:?}", fence.newest(db, "/locks/account-7").await?);
    /// # Ok(()) }
    /// ```
    pub async fn newest(
        &self,
        db: &impl GenericClient,
        resource: &str,
    ) -> Result<Option<FencingToken>, Error> {
        check_resource(resource)?;
        let row = db.query_opt(&self.newest, &[&resource]).await.map_err(pg)?;
        Ok(row.map(|r| FencingToken::new(r.get::<_, i64>(0) as u64)))
    }

    /// The check, in a transaction of yours: raises the resource's fence to `token` if no
    /// newer token passed it, and holds the fence row's lock until the transaction ends.
    /// On [`Outcome::Written`] write and commit; on [`Outcome::Refused`] write nothing (roll
    /// back).
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidToken`], [`Error::InvalidResource`]: nothing was sent.
    /// - [`Error::NoFence`] if the resource has no fence.
    /// - [`Error::Store`], e.g. a serialization failure at REPEATABLE READ: roll back and
    ///   run the transaction again.
    ///
    /// # Cancel safety
    ///
    /// Cancelling leaves the transaction in an unknown state: drop it (PostgreSQL rolls it
    /// back).
    ///
    /// ```no_run
    /// # async fn example(mut db: tokio_postgres::Client, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence_fences::{postgres::PgFence, Outcome};
    /// let fence = PgFence::new();
    /// let tx = db.transaction().await?;
    /// if let Outcome::Written(()) = fence.admit(&tx, "/locks/account-7", lease.token()).await? {
    ///     let row = tx.query_one("SELECT balance FROM account WHERE id = $1", &[&"account-7"]).await?;
    ///     let balance: i64 = row.get(0);
    ///     tx.execute("UPDATE account SET balance = $1 WHERE id = $2", &[&(balance + 20), &"account-7"]).await?;
    ///     tx.commit().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn admit(
        &self,
        tx: &Transaction<'_>,
        resource: &str,
        token: FencingToken,
    ) -> Result<Outcome, Error> {
        check_input(resource, token)?;
        let t = token_i64(token)?;
        // Typed: parse, bind and execute in one round trip (an untyped statement is
        // prepared first, a round trip of its own).
        if tx
            .query_typed_opt(&self.admit, &[(&resource, Type::TEXT), (&t, Type::INT8)])
            .await
            .map_err(pg)?
            .is_some()
        {
            return Ok(Outcome::Written(()));
        }
        // Not admitted: a newer token, or no fence. At READ COMMITTED this read sees the
        // newest committed token (a new snapshot per statement).
        match tx
            .query_typed_opt(&self.newest, &[(&resource, Type::TEXT)])
            .await
            .map_err(pg)?
        {
            None => Err(Error::NoFence {
                store: STORE,
                resource: resource.to_string(),
            }),
            Some(row) => Ok(refused(token, row.get::<_, i64>(0) as u64)),
        }
    }

    /// Opens a transaction and runs [`admit`](Self::admit) in it: the transaction to write
    /// in and commit, or the refusal (the transaction rolled back).
    ///
    /// # Notable errors
    ///
    /// As [`admit`](Self::admit); the transaction is rolled back.
    ///
    /// # Cancel safety
    ///
    /// Cancelling drops the transaction: PostgreSQL rolls it back.
    ///
    /// ```no_run
    /// # async fn example(mut db: tokio_postgres::Client, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence_fences::{postgres::PgFence, Outcome};
    /// match PgFence::new().begin(&mut db, "/locks/account-7", lease.token()).await? {
    ///     Outcome::Written(tx) => {
    ///         tx.execute("UPDATE account SET balance = 0 WHERE id = $1", &[&"account-7"]).await?;
    ///         tx.commit().await?;
    ///     }
    ///     Outcome::Refused(stale) => return Err(stale.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn begin<'c>(
        &self,
        db: &'c mut Client,
        resource: &str,
        token: FencingToken,
    ) -> Result<Outcome<Transaction<'c>>, Error> {
        check_input(resource, token)?;
        let tx = db.transaction().await.map_err(pg)?;
        match self.admit(&tx, resource, token).await? {
            Outcome::Written(()) => Ok(Outcome::Written(tx)),
            Outcome::Refused(stale) => {
                tx.rollback().await.map_err(pg)?;
                Ok(Outcome::Refused(stale))
            }
        }
    }

    /// A fenced write: the check and `statements`, in one transaction it commits (written,
    /// with each statement's count of rows) or rolls back (refused, or an error).
    ///
    /// # Notable errors
    ///
    /// As [`admit`](Self::admit), and a statement's own error (the transaction rolled back:
    /// nothing was written). An error of the commit leaves the outcome unknown (committed
    /// whole or not at all).
    ///
    /// # Cancel safety
    ///
    /// Cancelling before the commit was sent rolls everything back; while it is in flight,
    /// the outcome is unknown (whole or nothing).
    ///
    /// ```no_run
    /// # async fn example(mut db: tokio_postgres::Client, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence_fences::postgres::PgFence;
    /// let rows = PgFence::new()
    ///     .write(&mut db, "/locks/account-7", lease.token(), &[
    ///         ("UPDATE account SET balance = $1 WHERE id = $2", &[&80i64, &"account-7"]),
    ///         ("INSERT INTO audit (account, balance) VALUES ($1, $2)", &[&"account-7", &80i64]),
    ///     ])
    ///     .await?
    ///     .into_result()?;
    /// assert_eq!(rows.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn write(
        &self,
        db: &mut Client,
        resource: &str,
        token: FencingToken,
        statements: &[Statement<'_>],
    ) -> Result<Outcome<Vec<u64>>, Error> {
        let tx = match self.begin(db, resource, token).await? {
            Outcome::Written(tx) => tx,
            Outcome::Refused(stale) => return Ok(Outcome::Refused(stale)),
        };
        let mut rows = Vec::with_capacity(statements.len());
        for (sql, params) in statements {
            // An error drops `tx`: rolled back.
            rows.push(tx.execute(*sql, params).await.map_err(pg)?);
        }
        tx.commit().await.map_err(pg)?;
        Ok(Outcome::Written(rows))
    }
}

/// The token-column pattern: the protected row carries its own token (no fence table). One
/// statement, `UPDATE t SET <yours>, token = $t WHERE key = $k AND token <= $t`, atomic on the
/// row (its lock); no row updated means stale or missing, which a read then tells apart.
///
/// Use it when one row is the whole resource; the fence table ([`PgFence`]) when a write
/// spans rows or tables.
///
/// ```no_run
/// # async fn example(db: tokio_postgres::Client, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_fences::{postgres::PgTokenColumn, Outcome};
/// // account(id text PRIMARY KEY, balance bigint, fence_token bigint NOT NULL DEFAULT 0)
/// let column = PgTokenColumn::new("account", "id", "fence_token")?;
/// match column
///     .update(&db, &"account-7", lease.token(), "balance = $1", &[&120i64])
///     .await?
/// {
///     Outcome::Written(()) => {}
///     Outcome::Refused(stale) => return Err(stale.into()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgTokenColumn {
    table: String,
    key: String,
    token: String,
    read: String,
}

impl PgTokenColumn {
    /// The rows of `table`, keyed by `key_column`, fenced by `token_column` (a `bigint`,
    /// 0 for a row no fenced write has touched).
    ///
    /// ```
    /// use zkfence_fences::postgres::PgTokenColumn;
    /// assert!(PgTokenColumn::new("account", "id", "fence_token").is_ok());
    /// assert!(PgTokenColumn::new("account", "id; --", "fence_token").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a name that is not an identifier.
    pub fn new(table: &str, key_column: &str, token_column: &str) -> Result<PgTokenColumn, Error> {
        let table = PgFence::with_table(table)?.table;
        for column in [key_column, token_column] {
            PgFence::with_table(column).and_then(|_| {
                if column.contains('.') {
                    Err(Error::InvalidResource {
                        resource: column.to_string(),
                        why: "not a column name".into(),
                    })
                } else {
                    Ok(())
                }
            })?;
        }
        Ok(PgTokenColumn {
            read: format!("SELECT {token_column} FROM {table} WHERE {key_column} = $1"),
            table,
            key: key_column.to_string(),
            token: token_column.to_string(),
        })
    }

    /// Updates the row whose key is `key` with `set` (your `SET` list, its parameters `$1`…
    /// `$n` given in `params`) and raises its token to `token`, if no newer token has
    /// written it.
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidToken`]: nothing was sent.
    /// - [`Error::NoFence`] if no row has the key (the resource named is the key).
    /// - [`Error::Store`], e.g. an error in `set`.
    ///
    /// # Cancel safety
    ///
    /// One statement: once sent it runs whole or not at all.
    ///
    /// ```no_run
    /// # async fn example(db: tokio_postgres::Client, lease: zkfence::Lease) -> Result<(), zkfence_fences::Error> {
    /// let column = zkfence_fences::postgres::PgTokenColumn::new("account", "id", "fence_token")?;
    /// let outcome = column.update(&db, &"account-7", lease.token(), "balance = balance + $1", &[&20i64]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn update(
        &self,
        db: &impl GenericClient,
        key: &(dyn ToSql + Sync),
        token: FencingToken,
        set: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Outcome, Error> {
        crate::common::check_token(token)?;
        let t = token_i64(token)?;
        let n = params.len();
        let sql = format!(
            "UPDATE {} SET {set}, {tok} = ${} WHERE {} = ${} AND {tok} <= ${}",
            self.table,
            n + 1,
            self.key,
            n + 2,
            n + 1,
            tok = self.token
        );
        let mut all: Vec<&(dyn ToSql + Sync)> = params.to_vec();
        all.push(&t);
        all.push(key);
        if db.execute(&sql, &all).await.map_err(pg)? > 0 {
            return Ok(Outcome::Written(()));
        }
        // Not updated: a newer token (tokens only grow, so this read sees it or a newer
        // one), or no row when the update ran (then no token above ours is there).
        let row = db.query_opt(&self.read, &[key]).await.map_err(pg)?;
        match row.map(|r| r.get::<_, i64>(0)) {
            Some(newest) if newest > t => Ok(refused(token, newest as u64)),
            _ => Err(Error::NoFence {
                store: STORE,
                resource: format!("row {}.{} = {key:?}", self.table, self.key),
            }),
        }
    }
}
