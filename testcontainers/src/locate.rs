//! Finding `java` and the ZooKeeper jars on this machine.

use std::env;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::HarnessError;

/// Debian's (and Ubuntu's) location of `zookeeper.jar` and its dependencies.
const DEBIAN_JAVA_DIR: &str = "/usr/share/java";

/// What is needed to launch a ZooKeeper server.
#[derive(Debug, Clone)]
pub(crate) struct ServerDist {
    /// The `java` executable.
    pub(crate) java: PathBuf,
    /// Class path entries (zookeeper jar, its deps, a logging backend).
    pub(crate) classpath: Vec<PathBuf>,
}

impl ServerDist {
    /// Finds Java and ZooKeeper, see [`find_java`] and [`find_zookeeper`].
    pub(crate) fn locate() -> Result<Self, HarnessError> {
        Ok(ServerDist {
            java: find_java()?,
            classpath: find_zookeeper()?,
        })
    }

    /// The class path as one `:`-separated string.
    pub(crate) fn classpath_string(&self) -> String {
        self.classpath
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(":")
    }
}

fn is_executable(p: &Path) -> bool {
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn non_empty_var(name: &str) -> Option<std::ffi::OsString> {
    env::var_os(name).filter(|v| !v.is_empty())
}

/// `$JAVA_HOME/bin/java` if `JAVA_HOME` is set, else `java` on `PATH`.
pub(crate) fn find_java() -> Result<PathBuf, HarnessError> {
    let mut searched = Vec::new();
    if let Some(home) = non_empty_var("JAVA_HOME") {
        let p = Path::new(&home).join("bin").join("java");
        if is_executable(&p) {
            return Ok(p);
        }
        searched.push(format!("$JAVA_HOME/bin/java = {}", p.display()));
    }
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            let p = dir.join("java");
            if is_executable(&p) {
                return Ok(p);
            }
        }
    }
    searched.push("`java` on PATH".to_owned());
    Err(HarnessError::JavaNotFound {
        searched: searched.join(", "),
    })
}

fn jars_in(dir: &Path) -> Vec<PathBuf> {
    let mut jars: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension() == Some(OsStr::new("jar")) && p.is_file())
        .collect();
    jars.sort();
    jars
}

fn is_server_jar(p: &Path) -> bool {
    let name = p.file_name().and_then(OsStr::to_str).unwrap_or("");
    name.starts_with("zookeeper")
        && !name.contains("jute")
        && !name.contains("prometheus")
        && !name.contains("-tests")
        && !name.contains("-sources")
        && !name.contains("-javadoc")
}

/// The class path of a ZooKeeper server: `$ZOOKEEPER_HOME/lib/*.jar` (Apache binary release
/// layout; its logback backend is used), else Debian's `/usr/share/java/zookeeper.jar`, whose
/// manifest names its dependencies, plus a logging backend (log4j 1.2 through
/// slf4j-log4j12, or slf4j-simple).
pub(crate) fn find_zookeeper() -> Result<Vec<PathBuf>, HarnessError> {
    if let Some(home) = non_empty_var("ZOOKEEPER_HOME") {
        let home = PathBuf::from(home);
        let mut jars = jars_in(&home.join("lib"));
        jars.extend(jars_in(&home));
        if jars.iter().any(|j| is_server_jar(j)) {
            return Ok(jars);
        }
        return Err(HarnessError::ZooKeeperNotFound {
            searched: format!(
                "$ZOOKEEPER_HOME = {} has no zookeeper-*.jar in lib/ or at its top",
                home.display()
            ),
        });
    }
    let dir = Path::new(DEBIAN_JAVA_DIR);
    let server = dir.join("zookeeper.jar");
    if !server.is_file() {
        return Err(HarnessError::ZooKeeperNotFound {
            searched: format!("$ZOOKEEPER_HOME (unset), {}", server.display()),
        });
    }
    let mut cp = vec![server];
    let log4j = [dir.join("slf4j-log4j12.jar"), dir.join("log4j-1.2.jar")];
    let simple = dir.join("slf4j-simple.jar");
    if log4j.iter().all(|p| p.is_file()) {
        cp.extend(log4j);
    } else if simple.is_file() {
        cp.push(simple);
    }
    Ok(cp)
}
