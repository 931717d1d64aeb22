//! The stores a campaign's writes go to beside its register (`--sink`): each through its
//! own fence from `zkfence-fences`, each judged by its own record of committed writes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A store the contenders write every step to, through its fence (a
/// [`Sink`](zkfence_fences::sink::Sink) of `zkfence-fences`), in a throwaway server the
/// campaign starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Store {
    /// PostgreSQL ([`Postgres`](crate::Postgres)): the fence row's check in the writer's
    /// transaction; the record is the log's serial order.
    Postgres,
    /// MariaDB ([`MariaDb`](crate::MariaDb)): the same in MySQL's dialect, InnoDB.
    Mariadb,
    /// Redis ([`Redis`](crate::Redis)): a script that compares and writes in one step; the
    /// record is a list.
    Redis,
    /// etcd ([`Etcd`](crate::Etcd)): a transaction comparing the token key; the record is the
    /// log keys by create revision.
    Etcd,
    /// An HTTP service behind zkfence-fences' `FencingLayer`, on loopback in the campaign
    /// process; the contenders send it `PUT`s with the fencing headers.
    Http,
}

impl Store {
    /// Every store, in a fixed order (what `all` means).
    pub const ALL: [Store; 5] = [
        Store::Postgres,
        Store::Mariadb,
        Store::Redis,
        Store::Etcd,
        Store::Http,
    ];

    /// The name used on the command line and in the history (`postgres`, `mariadb`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Store::Postgres => "postgres",
            Store::Mariadb => "mariadb",
            Store::Redis => "redis",
            Store::Etcd => "etcd",
            Store::Http => "http",
        }
    }

    /// The name people call it by, in the summary and the violations (`PostgreSQL`, ...).
    pub fn title(self) -> &'static str {
        match self {
            Store::Postgres => "PostgreSQL",
            Store::Mariadb => "MariaDB",
            Store::Redis => "Redis",
            Store::Etcd => "etcd",
            Store::Http => "HTTP service",
        }
    }

    /// Whether the fence's check and the write commit as one atomic step (a transaction, a
    /// script), so that the fence is raised exactly by the writes that committed. The HTTP
    /// service's layer admits the token, then its handler writes: a request dropped in
    /// between leaves the fence raised without the write (it refuses more, never less).
    pub fn checks_and_writes_atomically(self) -> bool {
        self != Store::Http
    }

    /// Parses a comma-separated list of names, `all` meaning every store; sorted, each once.
    ///
    /// ```
    /// use zkfence_testcontainers::chaos::Store;
    /// assert_eq!(Store::parse_list("redis,postgres").unwrap(), vec![Store::Postgres, Store::Redis]);
    /// assert_eq!(Store::parse_list("all").unwrap(), Store::ALL.to_vec());
    /// assert!(Store::parse_list("mongodb").is_err());
    /// ```
    ///
    /// # Notable errors
    /// An unknown name, saying which names there are.
    pub fn parse_list(s: &str) -> Result<Vec<Store>, String> {
        let mut stores = Vec::new();
        for name in s.split(',').map(str::trim) {
            if name == "all" {
                stores.extend(Store::ALL);
            } else {
                stores.push(name.parse()?);
            }
        }
        stores.sort();
        stores.dedup();
        Ok(stores)
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Store {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Store::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Store::ALL.iter().map(|r| r.name()).collect();
                format!(
                    "unknown store {s:?}; expected one of: {}, or all",
                    names.join(", ")
                )
            })
    }
}
