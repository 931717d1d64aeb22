//! Throwaway store servers for tests of fencing where the data lives: Redis, etcd and
//! MariaDB, each over the one engine in `server.rs` (PostgreSQL has its own module: it is
//! several processes and shared memory).

mod etcd;
mod mariadb;
mod redis;

pub use etcd::Etcd;
pub use mariadb::MariaDb;
pub use redis::Redis;

/// The methods every store server shares, with their docs, for `$t` named `$name`.
macro_rules! shared_methods {
    ($t:ident) => {
        impl $t {
            /// The TCP port the server listens on for clients (the same across
            /// [`stop`](Self::stop) and [`start`](Self::start)).
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\nprintln!(\"{}:{}\", s.host(), s.port());\n# }\n```")]
            pub fn port(&self) -> u16 {
                self.server.port()
            }

            /// The address the server listens on: `"127.0.0.1"`.
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\nassert_eq!(s.host(), \"127.0.0.1\");\n# }\n```")]
            pub fn host(&self) -> &str {
                crate::server::HOST
            }

            /// The temporary directory holding the server's data and log (removed on drop).
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\nassert!(s.dir().is_dir());\n# }\n```")]
            pub fn dir(&self) -> &std::path::Path {
                self.server.dir()
            }

            /// The server's log file.
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\nprintln!(\"{}\", s.log_path().display());\n# }\n```")]
            pub fn log_path(&self) -> &std::path::Path {
                self.server.log_path()
            }

            /// The last `lines` lines of the server's log.
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\neprintln!(\"{}\", s.log_tail(20));\n# }\n```")]
            pub fn log_tail(&self, lines: usize) -> String {
                self.server.log_tail(lines)
            }

            /// The process id of the server, if it is running.
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\nif let Some(pid) = s.pid() { println!(\"pid {pid}\"); }\n# }\n```")]
            pub fn pid(&self) -> Option<u32> {
                self.server.pid()
            }

            /// Whether the server process is running (it may still be starting up).
            ///
            #[doc = concat!("```no_run\n# fn example(s: &zkfence_testcontainers::", stringify!($t), ") {\nif !s.is_running() { println!(\"down\"); }\n# }\n```")]
            pub fn is_running(&self) -> bool {
                self.server.is_running()
            }

            /// Stops the server cleanly (SIGTERM), or SIGKILL if it has not exited after
            /// 10 s. Blocks the calling thread meanwhile. Does nothing if it is not running.
            ///
            #[doc = concat!("```no_run\n# async fn example(s: &zkfence_testcontainers::", stringify!($t), ") -> Result<(), zkfence_testcontainers::HarnessError> {\ns.stop();\ns.start().await?;\n# Ok(()) }\n```")]
            pub fn stop(&self) {
                self.server.stop()
            }

            /// Crashes the server (SIGKILL) and waits until its processes are gone. What
            /// it had acknowledged but not yet written to disk is lost only if the
            /// *machine* crashes; the next [`start`](Self::start) recovers from the data
            /// directory. Does nothing if it is not running.
            ///
            #[doc = concat!("```no_run\n# async fn example(s: &zkfence_testcontainers::", stringify!($t), ") -> Result<(), zkfence_testcontainers::HarnessError> {\ns.kill();\ns.start().await?;\n# Ok(()) }\n```")]
            pub fn kill(&self) {
                self.server.kill()
            }

            /// Starts the server again after [`stop`](Self::stop) or [`kill`](Self::kill),
            /// on the same port with the same data, and waits (up to 60 s) until it serves.
            /// Only waits if it is running.
            ///
            /// # Notable errors
            ///
            /// [`HarnessError::Server`](crate::HarnessError::Server) with the log's tail if
            /// it does not serve in time or exits.
            ///
            /// # Cancel safety
            ///
            /// Cancelling leaves the server starting (or running); calling again waits for it.
            ///
            #[doc = concat!("```no_run\n# async fn example(s: &zkfence_testcontainers::", stringify!($t), ") -> Result<(), zkfence_testcontainers::HarnessError> {\ns.kill();\ns.start().await?;\n# Ok(()) }\n```")]
            pub async fn start(&self) -> Result<(), crate::HarnessError> {
                self.server
                    .restart(std::time::Duration::from_secs(60))
                    .await
            }
        }
    };
}
pub(crate) use shared_methods;
