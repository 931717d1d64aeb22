//! Secured ensembles: TLS on a `secureClientPort` (Netty, PEM key and trust stores made per
//! ensemble by the `openssl` command), client certificates as identities
//! (`authProvider.x509`), and SASL DIGEST-MD5 users (a JAAS file, `authProvider.sasl`).
//!
//! Every key and certificate is made fresh in the ensemble's own directory and removed with
//! it: nothing secret is committed or shared between tests.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use std::io;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::four_letter::parse_cons;
use super::Ensemble;
use crate::{ConnectionInfo, HarnessError};

/// Whether the servers ask TLS clients for a certificate (ZooKeeper's `ssl.clientAuth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client must present a certificate signed by the ensemble's CA (mutual TLS); its
    /// subject becomes the connection's identity (`x509:CN=...`).
    Need,
    /// A client may present one; one that does gets its identity as with `Need`. (The
    /// x509 provider is on, and it may fail a connection that presents none: the tests use
    /// `Need` or `None`.)
    Want,
    /// No client certificates: TLS only encrypts and authenticates the servers.
    None,
}

impl ClientAuth {
    fn zookeeper_value(self) -> &'static str {
        match self {
            ClientAuth::Need => "need",
            ClientAuth::Want => "want",
            ClientAuth::None => "none",
        }
    }
}

/// A CA and the certificates it signed, as PEM files in one directory: what a secured
/// ensemble's servers use, and what tests hand to clients.
///
/// [`EnsembleBuilder::tls`](crate::EnsembleBuilder::tls) makes one in the ensemble's
/// directory; [`TlsMaterial::generate`] makes another anywhere (e.g. a CA the ensemble does
/// not trust, to test that a client refuses its servers).
///
/// ```no_run
/// # fn f(dir: &std::path::Path) -> Result<(), zkfence_testcontainers::HarnessError> {
/// let other = zkfence_testcontainers::TlsMaterial::generate(dir)?;
/// let alice = other.client_identity("alice")?;
/// println!("CA {}, alice's cert {}", other.ca_cert().display(), alice.cert.display());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    dir: PathBuf,
    ca_cert: PathBuf,
    ca_key: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    server_store: PathBuf,
    /// The harness's own client certificate, for four-letter words on the TLS port.
    harness: Option<ClientIdentity>,
}

/// A client certificate and its private key (PEM files) signed by a [`TlsMaterial`]'s CA.
#[derive(Debug, Clone)]
pub struct ClientIdentity {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, unencrypted).
    pub key: PathBuf,
    /// The identity ZooKeeper's x509 provider gives a connection presenting it: the
    /// subject's distinguished name, e.g. `CN=alice,O=zkfence-test`.
    pub subject: String,
}

impl TlsMaterial {
    /// Makes a new CA (EC P-256, valid two days) in `dir`, and a server certificate it signed
    /// for `127.0.0.1` and `localhost` (subject alternative names), with the server's key and
    /// certificate also in one PEM file for ZooKeeper's `ssl.keyStore`, and the harness's own
    /// client certificate (`CN=zkt-harness`, for four-letter words on the TLS port).
    ///
    /// Needs the `openssl` command.
    pub fn generate(dir: &Path) -> Result<TlsMaterial, HarnessError> {
        Self::generate_for(dir, &["IP:127.0.0.1", "DNS:localhost"])
    }

    /// [`generate`](Self::generate) with other subject alternative names for the server
    /// certificate (`"IP:..."`, `"DNS:..."`), e.g. names the clients do not connect by, to
    /// test server name checking; give it to [`EnsembleBuilder::tls_material`](crate::EnsembleBuilder::tls_material).
    pub fn generate_for(dir: &Path, server_names: &[&str]) -> Result<TlsMaterial, HarnessError> {
        fs::create_dir_all(dir)?;
        let m = TlsMaterial {
            dir: dir.to_path_buf(),
            ca_cert: dir.join("ca.pem"),
            ca_key: dir.join("ca.key"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            server_store: dir.join("server-keystore.pem"),
            harness: None,
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/O=zkfence-test/CN=zkfence test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            path_str(&m.ca_key)?,
            "-out",
            path_str(&m.ca_cert)?,
        ])?;
        m.sign(
            "server",
            "/O=zkfence-test/CN=zookeeper",
            "serverAuth,clientAuth",
            &server_names.join(","),
            &m.server_cert,
            &m.server_key,
        )?;
        let mut store = fs::read_to_string(&m.server_key)?;
        store.push_str(&fs::read_to_string(&m.server_cert)?);
        fs::write(&m.server_store, store)?;
        let mut m = m;
        m.harness = Some(m.client_identity("zkt-harness")?);
        Ok(m)
    }

    /// The CA certificate (PEM): what clients trust the servers by.
    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// The servers' certificate (PEM).
    pub fn server_cert(&self) -> &Path {
        &self.server_cert
    }

    /// Makes a client certificate with common name `name`, signed by this CA (files
    /// `client-<name>.pem` and `client-<name>.key` in the material's directory; made again if
    /// asked again).
    pub fn client_identity(&self, name: &str) -> Result<ClientIdentity, HarnessError> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(HarnessError::InvalidConfig(format!(
                "client identity name {name:?}: use letters, digits, '-' and '_'"
            )));
        }
        let cert = self.dir.join(format!("client-{name}.pem"));
        let key = self.dir.join(format!("client-{name}.key"));
        self.sign(
            &format!("client-{name}"),
            &format!("/O=zkfence-test/CN={name}"),
            "clientAuth",
            "IP:127.0.0.1,DNS:localhost",
            &cert,
            &key,
        )?;
        Ok(ClientIdentity {
            cert,
            key,
            // Java prints the RDNs most specific first.
            subject: format!("CN={name},O=zkfence-test"),
        })
    }

    /// A new key and a certificate for it signed by the CA.
    fn sign(
        &self,
        stem: &str,
        subject: &str,
        usage: &str,
        names: &str,
        cert: &Path,
        key: &Path,
    ) -> Result<(), HarnessError> {
        let csr = self.dir.join(format!("{stem}.csr"));
        let ext = self.dir.join(format!("{stem}.ext"));
        let mut text = String::new();
        let _ = writeln!(text, "basicConstraints=CA:FALSE");
        let _ = writeln!(text, "keyUsage=critical,digitalSignature,keyAgreement");
        let _ = writeln!(text, "extendedKeyUsage={usage}");
        let _ = writeln!(text, "subjectAltName={names}");
        fs::write(&ext, text)?;
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            path_str(key)?,
            "-out",
            path_str(&csr)?,
        ])?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            path_str(&csr)?,
            "-CA",
            path_str(&self.ca_cert)?,
            "-CAkey",
            path_str(&self.ca_key)?,
            "-CAcreateserial",
            "-CAserial",
            path_str(&self.dir.join("ca.srl"))?,
            "-days",
            "2",
            "-extfile",
            path_str(&ext)?,
            "-out",
            path_str(cert)?,
        ])?;
        let _ = fs::remove_file(csr);
        let _ = fs::remove_file(ext);
        Ok(())
    }

    /// The Java system properties that make a server use this material on its
    /// `secureClientPort`.
    pub(super) fn server_properties(&self, auth: ClientAuth) -> Vec<(String, String)> {
        let show = |p: &Path| p.display().to_string();
        let mut props = vec![
            (
                "zookeeper.serverCnxnFactory".to_string(),
                "org.apache.zookeeper.server.NettyServerCnxnFactory".to_string(),
            ),
            (
                "zookeeper.ssl.keyStore.location".into(),
                show(&self.server_store),
            ),
            ("zookeeper.ssl.keyStore.type".into(), "PEM".into()),
            (
                "zookeeper.ssl.trustStore.location".into(),
                show(&self.ca_cert),
            ),
            ("zookeeper.ssl.trustStore.type".into(), "PEM".into()),
            (
                "zookeeper.ssl.clientAuth".into(),
                auth.zookeeper_value().into(),
            ),
        ];
        if auth != ClientAuth::None {
            // The provider that turns a client certificate into the `x509:<subject>`
            // identity; ZooKeeper closes a connection whose certificate it cannot check.
            props.push((
                "zookeeper.authProvider.x509".into(),
                "org.apache.zookeeper.server.auth.X509AuthenticationProvider".into(),
            ));
        }
        props
    }
}

impl Ensemble {
    /// The client connections of node `i`'s TLS port, parsed from `cons` asked over TLS (a
    /// server lists only the connections of the port asked; the asking connection, which has
    /// no session, is among them). Needs a [TLS ensemble](crate::EnsembleBuilder::tls) and
    /// the `openssl` command; fails after 5 s without an answer.
    pub async fn secure_connections(&self, i: usize) -> io::Result<Vec<ConnectionInfo>> {
        let (Some(tls), Some(addr)) = (self.tls.as_ref(), self.nodes[i].secure_client) else {
            return Err(io::Error::other("not a TLS ensemble"));
        };
        let harness = tls.harness.as_ref().expect("made with the material");
        let mut child = tokio::process::Command::new("openssl")
            .args([
                "s_client",
                "-quiet",
                "-connect",
                &addr.to_string(),
                "-CAfile",
            ])
            .arg(&tls.ca_cert)
            .arg("-cert")
            .arg(&harness.cert)
            .arg("-key")
            .arg(&harness.key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(b"cons").await?;
        drop(stdin);
        let out = tokio::time::timeout(Duration::from_secs(5), child.wait_with_output())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer to cons over TLS"))??;
        Ok(parse_cons(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Writes the JAAS file of a server that accepts SASL DIGEST-MD5 for `users` (name,
/// password), and returns the Java system properties that use it.
pub(super) fn sasl_server(
    dir: &Path,
    users: &[(String, String)],
) -> Result<Vec<(String, String)>, HarnessError> {
    let mut jaas =
        String::from("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required");
    for (user, password) in users {
        let ok = |s: &str| !s.is_empty() && !s.contains(['"', '\\', '\n', ';']);
        if !ok(user)
            || !ok(password)
            || !user.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(HarnessError::InvalidConfig(format!(
                "SASL user {user:?}: use letters, digits and '_' for the name, and a password \
                 without quotes, backslashes, ';' or newlines"
            )));
        }
        let _ = write!(jaas, "\n  user_{user}=\"{password}\"");
    }
    jaas.push_str(";\n};\n");
    let path = dir.join("jaas.conf");
    fs::write(&path, jaas)?;
    Ok(vec![
        (
            "java.security.auth.login.config".into(),
            path.display().to_string(),
        ),
        (
            "zookeeper.authProvider.sasl".into(),
            "org.apache.zookeeper.server.auth.SASLAuthenticationProvider".into(),
        ),
    ])
}

/// Jars the Netty connection factory needs that Debian's `zookeeper.jar` manifest does not
/// name (its Netty jars carry no class path of their own).
pub(super) fn netty_extras() -> Vec<PathBuf> {
    let dir = Path::new("/usr/share/java");
    [
        "netty-codec.jar",
        "netty-resolver.jar",
        "netty-transport-native-unix-common.jar",
    ]
    .iter()
    .map(|j| dir.join(j))
    .filter(|p| p.is_file())
    .collect()
}

fn path_str(p: &Path) -> Result<&str, HarnessError> {
    p.to_str()
        .ok_or_else(|| HarnessError::InvalidConfig(format!("path {} is not UTF-8", p.display())))
}

/// Runs `openssl args...`, failing with its stderr.
fn openssl(args: &[&str]) -> Result<(), HarnessError> {
    let out = Command::new("openssl").args(args).output().map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot run `openssl` (apt-get install -y openssl): {e}"),
        )
    })?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "`openssl {}` failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .into());
    }
    Ok(())
}
