//! MySQL and MariaDB: a fence row per resource, locked with `SELECT … FOR UPDATE` in the
//! writer's InnoDB transaction.
//!
//! The fence is an InnoDB table (default `zkfence_fence`) of `(resource VARBINARY(512)
//! PRIMARY KEY, token BIGINT UNSIGNED)`. A fenced write is one transaction:
//!
//! ```sql
//! START TRANSACTION;
//! SELECT token FROM zkfence_fence WHERE resource = ? FOR UPDATE;
//! -- no row: no fence (roll back); a newer token: refused (roll back)
//! UPDATE zkfence_fence SET token = ? WHERE resource = ?;   -- only if ours is newer
//! -- the write's statements, then COMMIT
//! ```
//!
//! **Why not `INSERT … ON DUPLICATE KEY UPDATE`.** It cannot refuse: it always succeeds, and
//! its affected-rows count (0 when the row is unchanged) cannot tell "a newer token is
//! stored" from "the same holder writes again with an equal token".
//!
//! **Why it is atomic.** `SELECT … FOR UPDATE` is an InnoDB *locking read*: whatever the
//! isolation level (READ COMMITTED, REPEATABLE READ, SERIALIZABLE), it reads the newest
//! committed version of the row (not the transaction's snapshot) and takes an exclusive
//! lock on its index record, held until the transaction commits or rolls back. A second
//! writer's `SELECT … FOR UPDATE` of the same resource waits for that lock and then reads
//! the token the first one committed. So the check, the raise and the write happen under
//! one lock and commit together: no other fenced writer can come between them, and a writer
//! that dies before its commit leaves nothing (InnoDB rolls it back, raise included).
//!
//! **What it needs.** InnoDB for the fence table (what [`MyFence::install`] creates) *and*
//! for the tables written (MyISAM ignores transactions: its writes would stay after a
//! rollback). A lock wait past `innodb_lock_wait_timeout` (50 s by default) fails the
//! statement only (`innodb_rollback_on_timeout` is off by default): the fence rolls its
//! transaction back on any error. Resource keys are `VARBINARY`, compared byte for byte: the
//! default collations would take `Acct`, `acct` and `acct ` for one key.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Transaction, TxOpts};
use zkfence::FencingToken;

use crate::common::{check_input, check_resource, refused, MAX_RESOURCE_LEN};
use crate::{Error, Outcome};

const STORE: &str = "MySQL";

fn my(e: mysql_async::Error) -> Error {
    Error::store(STORE, e)
}

/// A statement of a fenced write and its parameters.
pub type Statement<'a> = (&'a str, Params);

/// The fence table's statements, for one table name.
///
/// ```no_run
/// # async fn example(mut conn: mysql_async::Conn, lease: zkfence::Lease) -> Result<(), zkfence_fences::Error> {
/// use zkfence_fences::{mysql::MyFence, Outcome};
///
/// let fence = MyFence::new();
/// fence.install(&mut conn).await?;                     // the owner: the table, once
/// fence.create(&mut conn, "/locks/account-7").await?;  // the owner: a fence per resource
///
/// // The writer: the fence and the write commit together, or nothing does.
/// let outcome = fence
///     .write(&mut conn, "/locks/account-7", lease.token(), vec![(
///         "UPDATE account SET balance = ? WHERE id = ?",
///         (120i64, "account-7").into(),
///     )])
///     .await?;
/// if let Outcome::Refused(stale) = outcome {
///     eprintln!("{stale}"); // a newer holder has written: stop
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MyFence {
    table: String,
    install: String,
    create: String,
    lock: String,
    raise: String,
    newest: String,
}

impl Default for MyFence {
    fn default() -> Self {
        MyFence::new()
    }
}

impl MyFence {
    /// The fence in the table `zkfence_fence`.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::mysql::MyFence::new().table(), "zkfence_fence");
    /// ```
    pub fn new() -> MyFence {
        MyFence::build("zkfence_fence".to_string())
    }

    /// The fence in the table `name`: letters, digits and `_` (at most 64), optionally
    /// database-qualified (`app.fence`).
    ///
    /// ```
    /// use zkfence_fences::mysql::MyFence;
    /// assert!(MyFence::with_table("app.fence").is_ok());
    /// assert!(MyFence::with_table("fence`; DROP TABLE x").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] naming the table if it is not such a name.
    pub fn with_table(name: &str) -> Result<MyFence, Error> {
        let ok = name.split('.').count() <= 2
            && name.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 64
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if !ok {
            return Err(Error::InvalidResource {
                resource: name.chars().take(80).collect(),
                why: "not a table name: use letters, digits and _ (at most 64), optionally \
                      database.table"
                    .into(),
            });
        }
        Ok(MyFence::build(name.to_string()))
    }

    fn build(table: String) -> MyFence {
        MyFence {
            install: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                 resource VARBINARY({MAX_RESOURCE_LEN}) NOT NULL PRIMARY KEY, \
                 token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB"
            ),
            create: format!("INSERT IGNORE INTO {table} (resource, token) VALUES (?, 0)"),
            lock: format!("SELECT token FROM {table} WHERE resource = ? FOR UPDATE"),
            raise: format!("UPDATE {table} SET token = ? WHERE resource = ?"),
            newest: format!("SELECT token FROM {table} WHERE resource = ?"),
            table,
        }
    }

    /// The table's name.
    ///
    /// ```
    /// assert_eq!(zkfence_fences::mysql::MyFence::new().table(), "zkfence_fence");
    /// ```
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the fence table (InnoDB) if it does not exist (the owner, once).
    ///
    /// # Notable errors
    ///
    /// [`Error::Store`] if the server refuses (e.g. no `CREATE` privilege).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: run it again.
    ///
    /// ```no_run
    /// # async fn example(conn: &mut mysql_async::Conn) -> Result<(), zkfence_fences::Error> {
    /// zkfence_fences::mysql::MyFence::new().install(conn).await?;
    /// # Ok(()) }
    /// ```
    pub async fn install(&self, conn: &mut Conn) -> Result<(), Error> {
        conn.query_drop(&self.install).await.map_err(my)
    }

    /// Creates the resource's fence (accepting any token) if it does not exist; an existing
    /// fence keeps its token.
    ///
    /// # Notable errors
    ///
    /// [`Error::InvalidResource`]; [`Error::Store`] if the table is missing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it is one idempotent statement.
    ///
    /// ```no_run
    /// # async fn example(conn: &mut mysql_async::Conn) -> Result<(), zkfence_fences::Error> {
    /// zkfence_fences::mysql::MyFence::new().create(conn, "/locks/account-7").await?;
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, conn: &mut Conn, resource: &str) -> Result<(), Error> {
        check_resource(resource)?;
        conn.exec_drop(&self.create, (resource.as_bytes(),))
            .await
            .map_err(my)
    }

    /// The newest token the resource's fence accepted (`Some(0)` before any write), or
    /// `None` if it has no fence.
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
    /// # async fn example(conn: &mut mysql_async::Conn) -> Result<(), zkfence_fences::Error> {
    /// let newest = zkfence_fences::mysql::MyFence::new().newest(conn, "/locks/account-7").await?;
    /// # Ok(()) }
    /// ```
    pub async fn newest(
        &self,
        conn: &mut Conn,
        resource: &str,
    ) -> Result<Option<FencingToken>, Error> {
        check_resource(resource)?;
        let token: Option<u64> = conn
            .exec_first(&self.newest, (resource.as_bytes(),))
            .await
            .map_err(my)?;
        Ok(token.map(FencingToken::new))
    }

    /// The check, in a transaction of yours: locks the resource's fence row until the
    /// transaction ends and raises it to `token` if no newer token passed it. On
    /// [`Outcome::Written`] write and commit; on [`Outcome::Refused`] roll back.
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidToken`], [`Error::InvalidResource`]: nothing was sent.
    /// - [`Error::NoFence`] if the resource has no fence.
    /// - [`Error::Store`], e.g. a lock wait timeout or a deadlock: roll back, run again.
    ///
    /// # Cancel safety
    ///
    /// Cancelling leaves the transaction in an unknown state: drop it (rolled back).
    ///
    /// ```no_run
    /// # async fn example(mut conn: mysql_async::Conn, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use mysql_async::prelude::Queryable;
    /// use zkfence_fences::{mysql::MyFence, Outcome};
    /// let mut tx = conn.start_transaction(mysql_async::TxOpts::default()).await?;
    /// if MyFence::new().admit(&mut tx, "/locks/account-7", lease.token()).await?.is_written() {
    ///     tx.exec_drop("UPDATE account SET balance = balance + 20 WHERE id = ?", ("account-7",)).await?;
    ///     tx.commit().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_>,
        resource: &str,
        token: FencingToken,
    ) -> Result<Outcome, Error> {
        check_input(resource, token)?;
        let stored: Option<u64> = tx
            .exec_first(&self.lock, (resource.as_bytes(),))
            .await
            .map_err(my)?;
        let Some(stored) = stored else {
            return Err(Error::NoFence {
                store: STORE,
                resource: resource.to_string(),
            });
        };
        if stored > token.get() {
            return Ok(refused(token, stored));
        }
        if stored < token.get() {
            tx.exec_drop(&self.raise, (token.get(), resource.as_bytes()))
                .await
                .map_err(my)?;
        }
        Ok(Outcome::Written(()))
    }

    /// A fenced write: the check and `statements`, in one transaction it commits (written,
    /// with each statement's count of affected rows) or rolls back (refused, or an error).
    ///
    /// # Notable errors
    ///
    /// As [`admit`](Self::admit), and a statement's own error (rolled back: nothing was
    /// written). An error of the commit leaves the outcome unknown (whole or nothing).
    ///
    /// # Cancel safety
    ///
    /// Cancelling before the commit was sent rolls everything back (the connection rolls
    /// back a dropped transaction); while it is in flight the outcome is unknown.
    ///
    /// ```no_run
    /// # async fn example(mut conn: mysql_async::Conn, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence_fences::mysql::MyFence;
    /// let rows = MyFence::new()
    ///     .write(&mut conn, "/locks/account-7", lease.token(), vec![
    ///         ("UPDATE account SET balance = ? WHERE id = ?", (80i64, "account-7").into()),
    ///     ])
    ///     .await?
    ///     .into_result()?;
    /// # Ok(()) }
    /// ```
    pub async fn write(
        &self,
        conn: &mut Conn,
        resource: &str,
        token: FencingToken,
        statements: Vec<Statement<'_>>,
    ) -> Result<Outcome<Vec<u64>>, Error> {
        check_input(resource, token)?;
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(my)?;
        // On an error `tx` is dropped: the connection rolls it back before its next use.
        if let Outcome::Refused(stale) = self.admit(&mut tx, resource, token).await? {
            tx.rollback().await.map_err(my)?;
            return Ok(Outcome::Refused(stale));
        }
        let mut rows = Vec::with_capacity(statements.len());
        for (sql, params) in statements {
            tx.exec_drop(sql, params).await.map_err(my)?;
            rows.push(tx.affected_rows());
        }
        tx.commit().await.map_err(my)?;
        Ok(Outcome::Written(rows))
    }
}

/// The token-column pattern in MySQL's dialect: the protected row carries its own token (no
/// fence table). In one transaction: `SELECT token … FOR UPDATE` of the row (the locking read
/// that makes the fence table atomic, see the module docs), then, if no newer token is
/// there, `UPDATE t SET <yours>, token = ? WHERE key = ?`. (A bare conditional `UPDATE`
/// cannot tell stale from equal-and-unchanged: MySQL counts changed rows.)
///
/// ```no_run
/// # async fn example(mut conn: mysql_async::Conn, lease: zkfence::Lease) -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence_fences::{mysql::MyTokenColumn, Outcome};
/// // account(id VARCHAR(64) PRIMARY KEY, balance BIGINT, fence_token BIGINT UNSIGNED NOT NULL DEFAULT 0)
/// let column = MyTokenColumn::new("account", "id", "fence_token")?;
/// let outcome = column
///     .update(&mut conn, "account-7", lease.token(), "balance = ?", vec![120i64.into()])
///     .await?;
/// if let Outcome::Refused(stale) = outcome {
///     return Err(stale.into());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MyTokenColumn {
    table: String,
    key: String,
    token: String,
    lock: String,
}

impl MyTokenColumn {
    /// The rows of `table`, keyed by `key_column`, fenced by `token_column` (a `BIGINT
    /// UNSIGNED`, 0 for a row no fenced write has touched). InnoDB only.
    ///
    /// ```
    /// use zkfence_fences::mysql::MyTokenColumn;
    /// assert!(MyTokenColumn::new("account", "id", "fence_token").is_ok());
    /// assert!(MyTokenColumn::new("account", "id`", "fence_token").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`] for a name that is not an identifier.
    pub fn new(table: &str, key_column: &str, token_column: &str) -> Result<MyTokenColumn, Error> {
        let table = MyFence::with_table(table)?.table;
        for column in [key_column, token_column] {
            if column.contains('.') {
                return Err(Error::InvalidResource {
                    resource: column.to_string(),
                    why: "not a column name".into(),
                });
            }
            MyFence::with_table(column)?;
        }
        Ok(MyTokenColumn {
            lock: format!("SELECT {token_column} FROM {table} WHERE {key_column} = ? FOR UPDATE"),
            table,
            key: key_column.to_string(),
            token: token_column.to_string(),
        })
    }

    /// Updates the row whose key is `key` with `set` (your `SET` list, its `?` parameters in
    /// `params`) and raises its token to `token`, if no newer token has written it.
    ///
    /// # Notable errors
    ///
    /// - [`Error::InvalidToken`]: nothing was sent.
    /// - [`Error::NoFence`] if no row has the key.
    /// - [`Error::Store`] (the transaction rolled back).
    ///
    /// # Cancel safety
    ///
    /// Cancelling before the commit was sent rolls back; during it, whole or nothing.
    ///
    /// ```no_run
    /// # async fn example(conn: &mut mysql_async::Conn, lease: zkfence::Lease) -> Result<(), zkfence_fences::Error> {
    /// let column = zkfence_fences::mysql::MyTokenColumn::new("account", "id", "fence_token")?;
    /// let outcome = column.update(conn, "account-7", lease.token(), "balance = balance + ?", vec![20i64.into()]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn update(
        &self,
        conn: &mut Conn,
        key: impl Into<mysql_async::Value>,
        token: FencingToken,
        set: &str,
        params: Vec<mysql_async::Value>,
    ) -> Result<Outcome, Error> {
        crate::common::check_token(token)?;
        let key: mysql_async::Value = key.into();
        let mut tx = conn
            .start_transaction(TxOpts::default())
            .await
            .map_err(my)?;
        let stored: Option<u64> = tx
            .exec_first(&self.lock, (key.clone(),))
            .await
            .map_err(my)?;
        let Some(stored) = stored else {
            tx.rollback().await.map_err(my)?;
            return Err(Error::NoFence {
                store: STORE,
                resource: format!("row {}.{} = {}", self.table, self.key, key.as_sql(false)),
            });
        };
        if stored > token.get() {
            tx.rollback().await.map_err(my)?;
            return Ok(refused(token, stored));
        }
        let sql = format!(
            "UPDATE {} SET {set}, {} = ? WHERE {} = ?",
            self.table, self.token, self.key
        );
        let mut all = params;
        all.push(token.get().into());
        all.push(key);
        tx.exec_drop(sql, all).await.map_err(my)?;
        tx.commit().await.map_err(my)?;
        Ok(Outcome::Written(()))
    }
}
