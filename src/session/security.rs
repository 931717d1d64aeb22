//! TLS and SASL for the session: the [`SessionOptions`] that ask for them (each behind its
//! crate feature, `tls` and `sasl`), the files they name (read at connect, so a missing or
//! bad file is a clear error before anything is sent), and the diagnosis of a connect that
//! does not get through.
//!
//! The diagnosis exists because the client library retries a failed TLS handshake, or a
//! connection the server closed, silently until its timeout: the caller would only ever see
//! "connect timed out". So when a connect has not succeeded after a quarter of its timeout,
//! one TLS handshake of our own per server tells why: an untrusted or misnamed server
//! certificate, a server that rejects our client certificate, a port that does not speak TLS,
//! or (for a plaintext client) a port that does. Healthy connects finish long before and pay
//! nothing for it.

use std::time::Duration;

use zookeeper_client as zk;

use super::SessionOptions;
use crate::error::{ConnectFailure, Error, ServerFailure};

/// What the session authenticates and encrypts with, beyond `SessionOptions::auth`.
#[derive(Clone, Default)]
pub(crate) struct Security {
    #[cfg(feature = "tls")]
    tls: Option<TlsFiles>,
    #[cfg(feature = "sasl")]
    sasl: Option<SaslDigest>,
}

#[cfg(feature = "tls")]
#[derive(Clone, Debug)]
struct TlsFiles {
    ca: Option<std::path::PathBuf>,
    identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    server_name_check: bool,
}

#[cfg(feature = "sasl")]
#[derive(Clone)]
struct SaslDigest {
    user: String,
    password: String,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Security");
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls);
        // Never the password: options end up in logs.
        #[cfg(feature = "sasl")]
        d.field("sasl_user", &self.sasl.as_ref().map(|s| s.user.as_str()));
        d.finish()
    }
}

impl Security {
    /// Whether the session has an identity of its own besides `auth` (a SASL user or a TLS
    /// client certificate): its nodes then default to creator-only ACLs.
    pub(crate) fn authenticates(&self) -> bool {
        #[allow(unused_mut)]
        let mut any = false;
        #[cfg(feature = "tls")]
        {
            any |= self.tls.as_ref().is_some_and(|t| t.identity.is_some());
        }
        #[cfg(feature = "sasl")]
        {
            any |= self.sasl.is_some();
        }
        any
    }
}

#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
impl SessionOptions {
    /// Connects over TLS, trusting the CA certificates (PEM) in `path` to sign the servers'
    /// certificates. Every server of the connect string is then spoken to over TLS (its
    /// `secureClientPort`). The file is read at connect: a missing, unreadable or
    /// certificate-less file is [`Error::TlsConfig`].
    ///
    /// ```no_run
    /// # async fn f() -> zkfence::Result<()> {
    /// let options = zkfence::SessionOptions::new().tls_ca_file("/etc/zookeeper/ca.pem");
    /// let session = zkfence::Session::connect("zk1.example.com:2281", options).await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.security.tls_files().ca = Some(path.into());
        self
    }

    /// Presents the client certificate in `cert` (PEM, the chain from ours up) with its
    /// private key in `key` (PEM, PKCS#8, PKCS#1 or SEC1) for mutual TLS. With the servers'
    /// `authProvider.x509`, the certificate's subject is the session's identity
    /// (`x509:CN=...`), and the session's nodes default to creator-only ACLs. Needs
    /// [`tls_ca_file`](Self::tls_ca_file). Read at connect: a missing file, one without a
    /// certificate or key, or a key that does not match the certificate is
    /// [`Error::TlsConfig`].
    ///
    /// ```no_run
    /// let options = zkfence::SessionOptions::new()
    ///     .tls_ca_file("/etc/zookeeper/ca.pem")
    ///     .tls_identity("/etc/payments/client.pem", "/etc/payments/client.key");
    /// ```
    pub fn tls_identity(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.security.tls_files().identity = Some((cert.into(), key.into()));
        self
    }

    /// Whether the servers' certificates must name the host they were reached by (on by
    /// default). Turning it off still requires a certificate signed by the CA, but lets
    /// anyone holding such a certificate stand in for a server: do it only where every
    /// certificate the CA signs belongs to the ensemble.
    ///
    /// ```no_run
    /// let options = zkfence::SessionOptions::new()
    ///     .tls_ca_file("/etc/zookeeper/ca.pem")
    ///     .tls_server_name_check(false);
    /// ```
    pub fn tls_server_name_check(mut self, check: bool) -> Self {
        self.security.tls_files().server_name_check = check;
        self
    }
}

#[cfg(feature = "tls")]
impl Security {
    fn tls_files(&mut self) -> &mut TlsFiles {
        self.tls.get_or_insert(TlsFiles {
            ca: None,
            identity: None,
            server_name_check: true,
        })
    }
}

#[cfg(feature = "sasl")]
#[cfg_attr(docsrs, doc(cfg(feature = "sasl")))]
impl SessionOptions {
    /// Authenticates with SASL DIGEST-MD5 as `user` (a `user_<name>` of the servers' JAAS
    /// `Server` section, with `authProvider.sasl` configured). The session's identity is
    /// then `sasl:<user>`, and its nodes default to creator-only ACLs. A wrong user or
    /// password fails the connect with [`Error::AuthFailed`].
    ///
    /// Keep the password out of command lines and source: read it from a file or the
    /// environment.
    ///
    /// ```no_run
    /// # async fn f() -> zkfence::Result<()> {
    /// let password = std::env::var("ZK_PASSWORD").unwrap_or_default();
    /// let options = zkfence::SessionOptions::new().sasl_digest("payments", &password);
    /// let session = zkfence::Session::connect("zk1.example.com:2181", options).await?;
    /// # Ok(()) }
    /// ```
    pub fn sasl_digest(mut self, user: &str, password: &str) -> Self {
        self.security.sasl = Some(SaslDigest {
            user: user.to_string(),
            password: password.to_string(),
        });
        self
    }
}

/// A connector with TLS and SASL applied, and what is needed to diagnose a failed connect.
pub(crate) struct Secured {
    connector: zk::Connector,
    #[cfg(feature = "tls")]
    probe: probe::Probe,
}

/// Why a connect failed: the client library's error, or what the diagnosis found.
pub(crate) enum Failed {
    /// The client library's own error.
    Client(zk::Error),
    /// The diagnosis found the cause; the error names it.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Found(Error),
}

/// Applies the options' TLS and SASL settings to `connector`, reading the TLS files.
///
/// # Notable errors
/// - [`Error::TlsConfig`] if a TLS file is missing, unreadable or holds no usable PEM.
#[allow(unused_mut)]
pub(crate) fn configure(
    mut connector: zk::Connector,
    options: &SessionOptions,
) -> Result<Secured, Error> {
    #[cfg(feature = "sasl")]
    if let Some(sasl) = &options.security.sasl {
        connector = connector.with_sasl(zk::SaslOptions::digest_md5(
            sasl.user.clone(),
            sasl.password.clone(),
        ));
    }
    #[cfg(feature = "tls")]
    {
        let (tls, probe) = probe::configure(options.security.tls.as_ref())?;
        if let Some(tls) = tls {
            connector = connector.with_tls(tls);
        }
        Ok(Secured { connector, probe })
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = options;
        Ok(Secured { connector })
    }
}

impl Secured {
    /// Connects to `hosts` (over TLS if it is configured), giving up at `within` with
    /// [`Error::ConnectFailed`] naming each server's reason. Meanwhile it looks at every
    /// server (a name lookup and a TCP connect): if each one refuses or does not resolve,
    /// it fails at once instead of waiting out `within`. With TLS, if that has not
    /// succeeded after a quarter of `within`, it diagnoses the handshake too; a cause found
    /// ends the connect at once.
    pub(crate) async fn connect(
        self,
        connect: &str,
        hosts: &str,
        within: Duration,
    ) -> Result<zk::Client, Failed> {
        let deadline = tokio::time::Instant::now() + within;
        #[cfg(feature = "tls")]
        let Secured { connector, probe } = self;
        #[cfg(not(feature = "tls"))]
        let Secured { connector } = self;
        let attempt = async {
            #[cfg(feature = "tls")]
            if probe.secure() {
                return connector.secure_connect(hosts).await;
            }
            connector.connect(hosts).await
        };
        tokio::pin!(attempt);
        let each = (within / 2).clamp(Duration::from_millis(100), Duration::from_secs(2));
        let looked = reach::look_at_all(hosts, each);
        tokio::pin!(looked);
        #[cfg(feature = "tls")]
        let tls_check = async {
            tokio::time::sleep(within / 4).await;
            probe.diagnose(hosts, within / 4).await
        };
        #[cfg(not(feature = "tls"))]
        let tls_check = std::future::pending::<(Option<Error>, Vec<ServerFailure>)>();
        tokio::pin!(tls_check);
        let mut tls_pending = true;
        let mut seen: Option<Vec<ServerFailure>> = None;
        // Servers whose TLS handshake failed while another's looked fine.
        let mut tls_failed: Vec<ServerFailure> = Vec::new();
        let failed = |servers: Vec<ServerFailure>| {
            tracing::warn!(connect, "no ZooKeeper server reached");
            Failed::Found(Error::ConnectFailed {
                connect: connect.to_string(),
                timeout: within,
                servers,
            })
        };
        loop {
            tokio::select! {
                done = &mut attempt => {
                    return match done {
                        Ok(client) => Ok(client),
                        Err(e @ (zk::Error::AuthFailed | zk::Error::BadArguments(_))) => {
                            Err(Failed::Client(e))
                        }
                        Err(e) => {
                            // The client gave up on its own (it fails eagerly on a reopen):
                            // say why per server, as far as the look got by the deadline.
                            let servers = match seen {
                                Some(servers) => servers,
                                None => tokio::time::timeout_at(deadline, &mut looked)
                                    .await
                                    .unwrap_or_default(),
                            };
                            Err(failed(reach::or_other(servers, hosts, &e)))
                        }
                    };
                }
                servers = &mut looked, if seen.is_none() => {
                    if servers.iter().all(|s| s.reason != ConnectFailure::TimedOut) {
                        return Err(failed(servers));
                    }
                    seen = Some(servers);
                }
                found = &mut tls_check, if tls_pending => match found {
                    (Some(error), _) => return Err(Failed::Found(error)),
                    (None, servers) => {
                        tls_pending = false;
                        tls_failed = servers;
                    }
                },
                _ = tokio::time::sleep_until(deadline) => {
                    let mut servers = reach::timed_out(seen, hosts);
                    for s in &mut servers {
                        if let Some(t) = tls_failed.iter().find(|t| t.server == s.server) {
                            s.reason = t.reason.clone();
                        }
                    }
                    return Err(failed(servers));
                }
            }
        }
    }
}

mod reach {
    //! One look at each server of a connect string: does its name resolve, does its port
    //! take a TCP connection. What tells an operator why a connect does not get through.

    use std::io::ErrorKind;
    use std::net::{TcpStream, ToSocketAddrs};
    use std::time::Duration;

    use zookeeper_client as zk;

    use crate::error::{ConnectFailure, ServerFailure};

    /// The servers of `hosts`, scheme prefixes removed.
    pub(super) fn servers(hosts: &str) -> Vec<String> {
        hosts
            .split(',')
            .map(|h| {
                let h = h.trim();
                h.strip_prefix("tcp+tls://")
                    .or_else(|| h.strip_prefix("tcp://"))
                    .unwrap_or(h)
                    .to_string()
            })
            .collect()
    }

    /// Each server's reason, if it is not reached: refused or unknown, or else `TimedOut`
    /// (it took a TCP connection, or did not answer one within `each`: in both cases only
    /// the ZooKeeper handshake can tell, and it did not come in time).
    pub(super) async fn look_at_all(hosts: &str, each: Duration) -> Vec<ServerFailure> {
        let looks = servers(hosts).into_iter().map(|server| async move {
            let name = server.clone();
            let reason = tokio::task::spawn_blocking(move || look(&name, each))
                .await
                .unwrap_or(ConnectFailure::TimedOut);
            ServerFailure { server, reason }
        });
        futures::future::join_all(looks).await
    }

    fn look(server: &str, each: Duration) -> ConnectFailure {
        let Ok(addrs) = server.to_socket_addrs() else {
            return ConnectFailure::UnknownHost;
        };
        let mut refused = false;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, each) {
                Ok(_) => return ConnectFailure::TimedOut,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => refused = true,
                Err(_) => {}
            }
        }
        if refused {
            ConnectFailure::Refused
        } else {
            ConnectFailure::TimedOut
        }
    }

    /// Every server timed out, but those the look found refused or unknown.
    pub(super) fn timed_out(seen: Option<Vec<ServerFailure>>, hosts: &str) -> Vec<ServerFailure> {
        seen.unwrap_or_else(|| {
            servers(hosts)
                .into_iter()
                .map(|server| ServerFailure {
                    server,
                    reason: ConnectFailure::TimedOut,
                })
                .collect()
        })
    }

    /// The look's reasons, or the client's error for every server if the look has none.
    pub(super) fn or_other(
        seen: Vec<ServerFailure>,
        hosts: &str,
        e: &zk::Error,
    ) -> Vec<ServerFailure> {
        if !seen.is_empty() {
            return seen;
        }
        servers(hosts)
            .into_iter()
            .map(|server| ServerFailure {
                server,
                reason: ConnectFailure::Other {
                    reason: e.to_string(),
                },
            })
            .collect()
    }
}

#[cfg(feature = "tls")]
mod probe {
    //! The TLS files read into client options, and one handshake per server to tell why a
    //! connect does not get through.

    use std::io::{ErrorKind, Read};
    use std::net::{TcpStream, ToSocketAddrs};
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use zookeeper_client as zk;

    use super::TlsFiles;
    use crate::error::{ConnectFailure, Error, ServerFailure};

    /// How to look at a server: with the session's own TLS settings, or (a plaintext session)
    /// only to see whether the port speaks TLS.
    pub(super) struct Probe {
        config: Arc<rustls::ClientConfig>,
        /// The session's TLS settings, if it uses TLS.
        tls: Option<TlsFiles>,
    }

    fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
        std::fs::read(path).map_err(|e| Error::TlsConfig {
            path: path.display().to_string(),
            reason: format!("cannot read the {what}: {e}"),
        })
    }

    fn bad(path: &Path, reason: impl Into<String>) -> Error {
        Error::TlsConfig {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }

    /// Reads the TLS files into the client library's options, and builds the probe's own
    /// configuration from the same files (which also checks that the key fits the
    /// certificate, before anything is sent).
    pub(super) fn configure(
        files: Option<&TlsFiles>,
    ) -> Result<(Option<zk::TlsOptions>, Probe), Error> {
        let Some(files) = files else {
            // A plaintext session: the probe trusts nothing, it only needs to see whether a
            // server answers a TLS handshake at all.
            let config = rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            return Ok((
                None,
                Probe {
                    config: Arc::new(config),
                    tls: None,
                },
            ));
        };
        let Some(ca_path) = &files.ca else {
            let cert = files.identity.as_ref().map(|(c, _)| c.as_path());
            return Err(bad(
                cert.unwrap_or(Path::new("")),
                "a TLS client certificate needs the CA of the servers too: \
                 set SessionOptions::tls_ca_file (CLI: --tls-ca)",
            ));
        };
        let ca = read(ca_path, "CA certificates")?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            let cert = cert.map_err(|e| bad(ca_path, format!("not valid PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(ca_path, format!("holds an unusable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad(
                ca_path,
                "holds no CA certificate (expected PEM \"-----BEGIN CERTIFICATE-----\")",
            ));
        }
        let ca_text = String::from_utf8_lossy(&ca);
        let mut options = zk::TlsOptions::new()
            .with_pem_ca(&ca_text)
            .map_err(|e| bad(ca_path, e.to_string()))?;
        if !files.server_name_check {
            // SAFETY: not about memory. The client library marks this `unsafe` because it
            // opens the connection to a man in the middle holding any certificate of the
            // CA; the caller asked for it with `tls_server_name_check(false)`.
            options = unsafe { options.with_no_hostname_verification() };
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let config = match &files.identity {
            None => builder.with_no_client_auth(),
            Some((cert_path, key_path)) => {
                let cert = read(cert_path, "client certificate")?;
                let chain = CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(cert_path, format!("not valid PEM: {e}")))?;
                if chain.is_empty() {
                    return Err(bad(
                        cert_path,
                        "holds no certificate (expected PEM \"-----BEGIN CERTIFICATE-----\")",
                    ));
                }
                let key = read(key_path, "private key")?;
                let parsed = PrivateKeyDer::from_pem_slice(&key).map_err(|e| {
                    bad(
                        key_path,
                        format!("holds no usable private key (PEM PKCS#8, PKCS#1 or SEC1): {e}"),
                    )
                })?;
                let config = builder.with_client_auth_cert(chain, parsed).map_err(|e| {
                    bad(
                        key_path,
                        format!(
                            "the key does not fit the certificate in {}: {e}",
                            cert_path.display()
                        ),
                    )
                })?;
                options = options
                    .with_pem_identity(
                        &String::from_utf8_lossy(&cert),
                        &String::from_utf8_lossy(&key),
                    )
                    .map_err(|e| bad(key_path, e.to_string()))?;
                config
            }
        };
        // Without server name checking, the probe's verifier still reports a name that does
        // not match; `classify` then lets it pass.
        Ok((
            Some(options),
            Probe {
                config: Arc::new(config),
                tls: Some(files.clone()),
            },
        ))
    }

    /// What one handshake with one server showed.
    enum Verdict {
        /// Not reachable at all: nothing to say beyond the connect's own timeout.
        Unreachable,
        /// Nothing wrong at the TLS level (or a plaintext server, for a plaintext session).
        Fine,
        /// The cause, as an error.
        Found(Error),
    }

    impl Probe {
        pub(super) fn secure(&self) -> bool {
            self.tls.is_some()
        }

        /// Looks at every server of `hosts`, each for at most `each`. Returns an error only
        /// if no server looked fine and at least one showed a cause: a connect that could
        /// still get through on another server is left to do so. Also returns each server
        /// whose handshake showed a cause, for [`ConnectFailure::Tls`] should the connect
        /// time out.
        pub(super) async fn diagnose(
            &self,
            hosts: &str,
            each: Duration,
        ) -> (Option<Error>, Vec<ServerFailure>) {
            let each = each.clamp(Duration::from_millis(100), Duration::from_secs(2));
            let mut found = None;
            let mut fine = false;
            let mut servers = Vec::new();
            for host in hosts.split(',') {
                let host = host.trim();
                let host = host
                    .strip_prefix("tcp+tls://")
                    .or_else(|| host.strip_prefix("tcp://"))
                    .unwrap_or(host)
                    .to_string();
                let config = self.config.clone();
                let tls = self.tls.clone();
                let server = host.clone();
                let verdict =
                    tokio::task::spawn_blocking(move || look(&host, config, tls.as_ref(), each))
                        .await
                        .unwrap_or(Verdict::Unreachable);
                match verdict {
                    Verdict::Fine => fine = true,
                    Verdict::Unreachable => {}
                    Verdict::Found(e) => {
                        servers.push(ServerFailure {
                            server,
                            reason: ConnectFailure::Tls {
                                reason: match &e {
                                    Error::TlsHandshake { reason, .. } => reason.clone(),
                                    other => other.to_string(),
                                },
                            },
                        });
                        found.get_or_insert(e);
                    }
                }
            }
            (if fine { None } else { found }, servers)
        }
    }

    /// One TLS handshake with `host` (`name:port`), then a short read: a server that rejects
    /// our client certificate says so (an alert) only after our side of the handshake is done.
    fn look(
        host: &str,
        config: Arc<rustls::ClientConfig>,
        tls: Option<&TlsFiles>,
        each: Duration,
    ) -> Verdict {
        let Some((name, port)) = host.rsplit_once(':') else {
            return Verdict::Unreachable;
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        let Ok(port) = port.parse::<u16>() else {
            return Verdict::Unreachable;
        };
        let Some(addr) = (name, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
        else {
            return Verdict::Unreachable;
        };
        let Ok(mut sock) = TcpStream::connect_timeout(&addr, each) else {
            return Verdict::Unreachable;
        };
        let _ = sock.set_read_timeout(Some(each));
        let _ = sock.set_write_timeout(Some(each));
        let Ok(server_name) = ServerName::try_from(name.to_string()) else {
            return Verdict::Unreachable;
        };
        let Ok(mut conn) = rustls::ClientConnection::new(config, server_name) else {
            return Verdict::Unreachable;
        };
        while conn.is_handshaking() {
            if let Err(e) = conn.complete_io(&mut sock) {
                return classify(host, tls, &e, false);
            }
        }
        // Done on our side. A server that will not have our certificate (or wants one) sends
        // its alert now; a healthy one waits for the ZooKeeper handshake, so the read times
        // out.
        let _ = sock.set_read_timeout(Some(each.min(Duration::from_millis(500))));
        let mut byte = [0u8; 1];
        match rustls::Stream::new(&mut conn, &mut sock).read(&mut byte) {
            Ok(0) => classify(
                host,
                tls,
                &std::io::Error::from(ErrorKind::UnexpectedEof),
                true,
            ),
            Ok(_) => Verdict::Fine,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Verdict::Fine
            }
            Err(e) => classify(host, tls, &e, true),
        }
    }

    /// Turns a handshake's failure into what it means for the session's settings.
    fn classify(
        host: &str,
        tls: Option<&TlsFiles>,
        e: &std::io::Error,
        handshaken: bool,
    ) -> Verdict {
        let tls_error = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        let Some(files) = tls else {
            // A plaintext session: only whether the server speaks TLS matters. It does if it
            // sent anything TLS, a certificate (which nothing is trusted to sign) or an alert.
            return match tls_error {
                Some(rustls::Error::InvalidCertificate(_) | rustls::Error::AlertReceived(_)) => {
                    Verdict::Found(Error::TlsRequired {
                        server: host.to_string(),
                    })
                }
                _ => Verdict::Fine,
            };
        };
        let handshake = |reason: String| {
            Verdict::Found(Error::TlsHandshake {
                server: host.to_string(),
                reason,
            })
        };
        let ca = files
            .ca
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        use rustls::CertificateError as C;
        match tls_error {
            Some(rustls::Error::InvalidCertificate(cert)) => match cert {
                C::NotValidForName | C::NotValidForNameContext { .. }
                    if !files.server_name_check =>
                {
                    Verdict::Fine
                }
                C::NotValidForName | C::NotValidForNameContext { .. } => handshake(format!(
                    "the server's certificate is not valid for the name {:?} it was reached by \
                     ({cert:?}); connect by a name or address the certificate holds",
                    host.rsplit_once(':').map_or(host, |(n, _)| n)
                )),
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. } => handshake(format!(
                    "the server's certificate is outside its validity period ({cert:?})"
                )),
                _ => handshake(format!(
                    "the server's certificate is not trusted: it is not signed by a CA of {ca} \
                     ({cert:?}); pass the CA that signed the servers' certificates"
                )),
            },
            Some(rustls::Error::AlertReceived(alert))
                if handshaken || files.identity.is_some() || is_client_cert_alert(alert) =>
            {
                if files.identity.is_some() {
                    handshake(format!(
                        "the server rejected our client certificate (TLS alert {alert:?}); it must be \
                         signed by a CA the servers trust (their ssl.trustStore)"
                    ))
                } else {
                    handshake(format!(
                        "the server requires a client certificate (TLS alert {alert:?}); set \
                         SessionOptions::tls_identity (CLI: --tls-cert and --tls-key)"
                    ))
                }
            }
            Some(rustls::Error::AlertReceived(alert)) => handshake(format!(
                "the server refused the handshake (TLS alert {alert:?})"
            )),
            Some(rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. }) => {
                handshake(not_tls())
            }
            Some(other) => handshake(format!("{other}")),
            None if handshaken => handshake(format!(
                "the server closed the connection right after the handshake ({e}); it likely \
                 requires a client certificate it trusts (ssl.clientAuth): {}",
                if files.identity.is_some() {
                    "ours is not signed by a CA it trusts"
                } else {
                    "set SessionOptions::tls_identity (CLI: --tls-cert and --tls-key)"
                }
            )),
            None if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
            ) =>
            {
                handshake(not_tls())
            }
            None => Verdict::Unreachable,
        }
    }

    fn not_tls() -> String {
        "the server does not speak TLS on this port (it closed the connection or answered \
         something else to the TLS hello); connect to its secureClientPort, or drop TLS for a \
         plaintext clientPort"
            .into()
    }

    fn is_client_cert_alert(alert: &rustls::AlertDescription) -> bool {
        use rustls::AlertDescription as A;
        matches!(
            alert,
            A::CertificateRequired
                | A::BadCertificate
                | A::UnknownCA
                | A::CertificateUnknown
                | A::AccessDenied
        )
    }
}
