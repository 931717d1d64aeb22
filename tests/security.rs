//! Locks against secured ensembles: mutual TLS (client certificates as identities) and SASL
//! DIGEST-MD5. The lock keeps its promises over them (exclusion, growing tokens, the holder
//! learns first in a partition), another identity cannot touch it, and each bad input gets
//! its own clear error within the connect timeout, leaving nothing behind.
//!
//! Needs the crate features `tls` and `sasl` (on in `cargo test --workspace`, where the CLI
//! turns them on) and the `openssl` command for the per-test certificates.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::*;
use tokio::time::Instant;
use zkfence::zookeeper_client as zk;
use zkfence::{Error, FencedOp, LeaseState, Session, SessionOptions};
use zkfence_testcontainers::{ClientAuth, Ensemble};

/// Session timeout of the partition tests, as in `lock_faults.rs`.
const LONG: Duration = Duration::from_secs(4);
/// Generous bound for a step of a few round trips.
const STEP: Duration = Duration::from_secs(10);
/// The session timeout of the other tests.
const T: Duration = Duration::from_secs(4);
/// The connect timeout of the bad-input tests: each error must come within it.
const CONNECT: Duration = Duration::from_secs(3);

/// The SASL users of the test ensembles.
const SASL_USERS: &[(&str, &str)] = &[
    ("alice", "alice-pw"),
    ("bob", "bob-pw"),
    ("operator", "operator-pw"),
];

static SECURED: OnceLock<Ensemble> = OnceLock::new();
static SECURED_RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// A one-node ensemble with TLS (client certificates required) on its secure port and SASL
/// users on both ports, shared by the tests of this binary (each under its own path).
fn secured() -> &'static Ensemble {
    SECURED.get_or_init(|| {
        std::thread::spawn(|| {
            let rt = SECURED_RT.get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap()
            });
            rt.block_on(secured_ensemble())
        })
        .join()
        .expect("ensemble start thread")
    })
}

async fn secured_ensemble() -> Ensemble {
    let zk = Ensemble::builder()
        .nodes(1)
        .tick_time(TICK)
        .tls(ClientAuth::Need)
        .sasl_digest_users(SASL_USERS)
        .start()
        .await
        .expect("start a secured ensemble");
    // Every test's lock lives under /test: open it to all, or the first identity to create it
    // would own it.
    let admin = connect(&zk.connect_string(), T).await;
    match admin
        .client()
        .create(
            "/test",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
    {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("create /test: {e}"),
    }
    zk
}

/// How a session proves who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// A client certificate over TLS (`x509:CN=<name>,...`).
    Mtls,
    /// SASL DIGEST-MD5 on the plaintext port (`sasl:<name>`).
    Sasl,
}

/// Options and connect string for `who` over `via` against `zk`. For mutual TLS the
/// certificate is made now, named `who`: callers use names no parallel test uses.
fn identity(zk: &Ensemble, via: Via, who: &str) -> (SessionOptions, String) {
    let base = SessionOptions::new().session_timeout(T);
    match via {
        Via::Mtls => {
            let tls = zk.tls().expect("a TLS ensemble");
            let id = tls.client_identity(who).expect("a client certificate");
            (
                base.tls_ca_file(tls.ca_cert())
                    .tls_identity(&id.cert, &id.key),
                zk.secure_connect_string(),
            )
        }
        Via::Sasl => {
            let password = SASL_USERS
                .iter()
                .find(|(u, _)| *u == who)
                .map(|(_, p)| *p)
                .expect("a SASL user of the ensemble");
            (base.sasl_digest(who, password), zk.connect_string())
        }
    }
}

async fn connect_as(zk: &Ensemble, via: Via, who: &str) -> Session {
    let (options, connect) = identity(zk, via, who);
    Session::connect(&connect, options)
        .await
        .unwrap_or_else(|e| panic!("connect as {who} over {via:?}: {e}"))
}

/// Two sessions of the same identity contend in rounds: never two inside, every grant's
/// token above the one before.
async fn exclusion_and_tokens(via: Via, a: &str) {
    let zk = secured();
    let dir = unique_path(&format!("excl-{via:?}"));
    let sessions = [connect_as(zk, via, a).await, connect_as(zk, via, a).await];
    let inside = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for s in sessions.clone() {
        let (dir, inside, tokens) = (dir.clone(), inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let lease = s.lock(&dir).acquire().await.expect("acquire");
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokens.lock().unwrap().push(lease.token());
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        within(STEP * 3, "the rounds end", t).await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 10);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in grant order grow: {tokens:?}"
    );
    // The directory carries the identity's creator-only ACL, not world access.
    let (acl, _) = sessions[0].client().get_acl(&dir).await.unwrap();
    let scheme = match via {
        Via::Mtls => "x509",
        Via::Sasl => "sasl",
    };
    assert_eq!(acl.len(), 1, "{acl:?}");
    assert_eq!(acl[0].auth_id().scheme(), scheme, "{acl:?}");
    assert_eq!(acl[0].permission(), zk::Permission::ALL, "{acl:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_tokens_over_mutual_tls() {
    exclusion_and_tokens(Via::Mtls, "alice-excl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_tokens_over_sasl() {
    exclusion_and_tokens(Via::Sasl, "alice").await;
}

/// `lock_faults.rs`'s partition test, through a proxy that relays the secured bytes: the
/// holder hears `Lost` well before the server deletes its node, and the waiter is granted
/// only after that deletion.
async fn holder_learns_first(via: Via, who: &str) {
    let zk = secured();
    let (options, direct) = identity(zk, via, who);
    let options = options.session_timeout(LONG);
    let admin = Session::connect(&direct, options.clone()).await.unwrap();
    let waiter = Session::connect(&direct, options.clone()).await.unwrap();
    let dir = unique_path(&format!("partition-{via:?}"));
    let proxy = match via {
        Via::Mtls => zk.secure_proxy().await.unwrap(),
        Via::Sasl => zk.proxy().await.unwrap(),
    };
    let holder = Session::connect(&proxy.connect_string(), options.clone())
        .await
        .unwrap();
    partition::partition_the_holder(partition::Setup {
        admin: &admin,
        waiter: &waiter,
        holder: &holder,
        proxy: &proxy,
        dir: &dir,
        t: LONG,
    })
    .await
    .assert_the_holder_learned_first(&format!("{via:?}"))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_a_partitioned_holder_learns_first() {
    holder_learns_first(Via::Mtls, "alice-part").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_sasl_a_partitioned_holder_learns_first() {
    holder_learns_first(Via::Sasl, "alice").await;
}

/// Asserts `err` is the ACL denial for `path`, naming it and another identity.
fn assert_denied(err: &Error, path: &str, what: &str) {
    match err {
        Error::NoAuth { path: p, .. } => assert_eq!(p, path, "{what}: {err}"),
        other => panic!("{what}: expected an ACL denial, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(path) && text.contains("another identity"),
        "{what}: {text}"
    );
}

/// Another identity cannot enqueue on, read the queue of, delete the node of, or write
/// fenced by a lock held by alice; alice keeps her lease throughout, and nothing of the
/// intruder is left.
async fn intruder_is_kept_out(via: Via, owner: &str, intruder: &str) {
    let zk = secured();
    let dir = unique_path(&format!("intruder-{via:?}"));
    let alice = connect_as(zk, via, owner).await;
    let lease = alice.lock(&dir).acquire().await.unwrap();
    let held_token = lease.token();
    // A node anyone may write: the intruder's fenced write can only be stopped by the fence.
    let target = format!("{dir}-target");
    alice
        .client()
        .create(
            &target,
            b"v0",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let mallory = connect_as(zk, via, intruder).await;

    let err = within(STEP, "the intruder's acquire", mallory.lock(&dir).acquire())
        .await
        .unwrap_err();
    assert_denied(&err, &dir, "enqueue");
    let err = mallory.lock(&dir).contenders().await.unwrap_err();
    assert_denied(&err, &dir, "read the queue");
    let err = mallory
        .client()
        .delete(lease.path(), None)
        .await
        .unwrap_err();
    assert_eq!(err, zk::Error::NoAuth, "delete the holder's node");
    // What fenced_write sends, with alice's node as the fence: the check needs READ on it.
    let mallory_client = mallory.client();
    let mut writer = mallory_client.new_check_writer(lease.path(), None).unwrap();
    let err = writer.add_set_data(&target, b"mallory", None).map(|_| ());
    assert!(err.is_ok(), "{err:?}");
    let err = writer.commit().await.unwrap_err();
    assert!(
        matches!(
            err,
            zk::CheckWriteError::CheckFailed {
                source: zk::Error::NoAuth
            }
        ),
        "fenced write under alice's lock: {err:?}"
    );
    assert_eq!(
        mallory.client().get_data(&target).await.unwrap().0,
        b"v0",
        "the fenced write changed nothing"
    );
    // Without the fence the same write goes through (the target is open): the fence, not the
    // target's ACL, is what stopped it.
    mallory
        .client()
        .set_data(&target, b"unfenced", None)
        .await
        .unwrap();

    // Alice is unaffected: still held, same node, her fenced write works.
    assert_eq!(lease.state(), LeaseState::Held);
    assert_eq!(lease.token(), held_token);
    lease
        .fenced_write(&[FencedOp::SetData {
            path: target.clone(),
            data: b"alice".to_vec(),
            version: None,
        }])
        .await
        .unwrap();
    // Nothing of the intruder is left: the queue is alice's node alone, and the intruder
    // created nothing.
    let names = children(&alice, &dir).await;
    assert_eq!(names, vec![name_of(lease.path()).to_string()]);
    assert_eq!(mallory.metrics().creates, 0);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_another_identity_cannot_touch_the_lock() {
    intruder_is_kept_out(Via::Mtls, "alice-intr", "mallory-intr").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_sasl_another_identity_cannot_touch_the_lock() {
    intruder_is_kept_out(Via::Sasl, "alice", "bob").await;
}

/// The `acls` option widens the creator-only default: an operators' identity may read the
/// queue (`zkfence status`), still not enqueue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_grant_an_operator_read_but_not_the_lock() {
    let zk = secured();
    let dir = unique_path("operator-read");
    let (options, connect) = identity(zk, Via::Sasl, "alice");
    let mut acls = zk::Acls::creator_all().to_vec();
    acls.push(zk::Acl::new(
        zk::Permission::READ,
        zk::AuthId::new("sasl", "operator"),
    ));
    let alice = Session::connect(&connect, options.acls(acls))
        .await
        .unwrap();
    let lease = alice
        .lock(&dir)
        .with_id("alice-job")
        .acquire()
        .await
        .unwrap();
    let operator = connect_as(zk, Via::Sasl, "operator").await;
    let seen = operator.lock(&dir).contenders().await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].owner.id.as_deref(), Some("alice-job"));
    let err = within(
        STEP,
        "the operator's acquire",
        operator.lock(&dir).acquire(),
    )
    .await
    .unwrap_err();
    assert_denied(&err, &dir, "the operator enqueues");
    lease.release().await.unwrap();
}

/// `zk_znode_count` and `zk_ephemerals_count` of node 0, from `mntr`.
async fn tree_counts(zk: &Ensemble) -> (u64, u64) {
    let text = zk.four_letter(0, "mntr").await.unwrap();
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{key} in mntr: {text}"))
    };
    (get("zk_znode_count"), get("zk_ephemerals_count"))
}

/// Connects with `options` to `connect`, expecting an error within the connect timeout.
async fn connect_fails(connect: &str, options: SessionOptions, what: &str) -> Error {
    let started = Instant::now();
    let result = Session::connect(connect, options.connect_timeout(CONNECT)).await;
    let took = started.elapsed();
    let err = match result {
        Ok(_) => panic!("{what}: connected"),
        Err(e) => e,
    };
    eprintln!("{what}: {took:?}: {err}");
    assert!(
        took < CONNECT,
        "{what}: the error came after {took:?}, beyond the connect timeout {CONNECT:?}"
    );
    err
}

/// Each bad input gets the error that names it, within the connect timeout, and leaves
/// nothing on the ensemble (an ensemble of its own, so the counts are this test's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_input_gets_its_own_clear_error_within_the_connect_timeout() {
    let zk = secured_ensemble().await;
    let tls = zk.tls().unwrap();
    let alice = tls.client_identity("alice").unwrap();
    let before = tree_counts(&zk).await;
    let good = || {
        SessionOptions::new()
            .session_timeout(T)
            .tls_ca_file(tls.ca_cert())
            .tls_identity(&alice.cert, &alice.key)
    };
    let secure = zk.secure_connect_string();

    // A server whose certificate no CA of ours signed.
    let stranger =
        zkfence_testcontainers::TlsMaterial::generate(&zk.dir().join("stranger")).unwrap();
    let err = connect_fails(
        &secure,
        good().tls_ca_file(stranger.ca_cert()),
        "untrusted server certificate",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsHandshake { reason, .. } if reason.contains("not trusted")),
        "{err}"
    );

    // A client key file that is not there.
    let missing = zk.dir().join("no-such.key");
    let err = connect_fails(
        &secure,
        good().tls_identity(&alice.cert, &missing),
        "missing key file",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsConfig { path, reason } if *path == missing.display().to_string() && reason.contains("cannot read")),
        "{err}"
    );
    // A key file without a key (the certificate given twice).
    let err = connect_fails(
        &secure,
        good().tls_identity(&alice.cert, &alice.cert),
        "a key file without a key",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsConfig { reason, .. } if reason.contains("no usable private key")),
        "{err}"
    );

    // The TLS port without a client certificate, where the servers require one.
    let err = connect_fails(
        &secure,
        SessionOptions::new()
            .session_timeout(T)
            .tls_ca_file(tls.ca_cert()),
        "no client certificate",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsHandshake { reason, .. } if reason.contains("requires a client certificate")),
        "{err}"
    );

    // A wrong SASL password.
    let err = connect_fails(
        &zk.connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .sasl_digest("alice", "not-the-password"),
        "wrong SASL password",
    )
    .await;
    assert!(matches!(err, Error::AuthFailed), "{err}");
    assert!(err.to_string().contains("SASL"), "{err}");

    // A plaintext client on the TLS port.
    let err = connect_fails(
        &secure,
        SessionOptions::new().session_timeout(T),
        "plaintext client on the TLS port",
    )
    .await;
    assert!(matches!(err, Error::TlsRequired { .. }), "{err}");

    // A TLS client on the plaintext port.
    let err = connect_fails(
        &zk.connect_string(),
        good(),
        "TLS client on the plaintext port",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsHandshake { reason, .. } if reason.contains("does not speak TLS")),
        "{err}"
    );

    assert_eq!(
        tree_counts(&zk).await,
        before,
        "the bad inputs created nothing"
    );
    // And the good input works on the same ensemble.
    let s = Session::connect(&secure, good()).await.unwrap();
    drop(s);
}

/// Server name checking is on by default: a certificate of the right CA for other names is
/// refused, saying so; `tls_server_name_check(false)` accepts it (still only from that CA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_other_names_is_refused_unless_name_checks_are_off() {
    let dir = TempDir::new("misnamed");
    let misnamed =
        zkfence_testcontainers::TlsMaterial::generate_for(&dir.0, &["DNS:elsewhere.invalid"])
            .unwrap();
    let zk = Ensemble::builder()
        .nodes(1)
        .tick_time(TICK)
        .tls_material(misnamed.clone(), ClientAuth::None)
        .start()
        .await
        .unwrap();
    let options = SessionOptions::new()
        .session_timeout(T)
        .tls_ca_file(misnamed.ca_cert());
    let err = connect_fails(
        &zk.secure_connect_string(),
        options.clone(),
        "a certificate for other names",
    )
    .await;
    assert!(
        matches!(&err, Error::TlsHandshake { reason, .. } if reason.contains("not valid for the name")),
        "{err}"
    );
    let session = Session::connect(
        &zk.secure_connect_string(),
        options.tls_server_name_check(false),
    )
    .await
    .unwrap();
    let lease = session
        .lock(&unique_path("misnamed"))
        .acquire()
        .await
        .unwrap();
    lease.release().await.unwrap();
}

/// `ClientAuth::Want`: the server asks for a client certificate but takes a client without
/// one. Without one a session connects anonymously over TLS and its lock is open to all, as
/// on a plain port; with one it is identified (`x509:CN=...`) and its lock is its own, which
/// the anonymous session can neither enqueue in nor delete from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_client_certificates_wanted_a_client_without_one_is_anonymous_and_one_with_one_owns_its_lock(
) {
    let zk = Ensemble::builder()
        .nodes(1)
        .tick_time(TICK)
        .tls(ClientAuth::Want)
        .start()
        .await
        .unwrap();
    let admin = connect(&zk.connect_string(), T).await;
    admin
        .client()
        .create(
            "/test",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let tls = zk.tls().expect("a TLS ensemble");
    let anonymous_options = SessionOptions::new()
        .session_timeout(T)
        .tls_ca_file(tls.ca_cert());
    let anonymous = Session::connect(&zk.secure_connect_string(), anonymous_options)
        .await
        .expect("a client without a certificate is taken when certificates are only wanted");
    let id = tls.client_identity("wanted-owner").unwrap();
    let owner = Session::connect(
        &zk.secure_connect_string(),
        SessionOptions::new()
            .session_timeout(T)
            .tls_ca_file(tls.ca_cert())
            .tls_identity(&id.cert, &id.key),
    )
    .await
    .unwrap();

    let open_dir = unique_path("wanted-anonymous");
    let open_lease = anonymous.lock(&open_dir).acquire().await.unwrap();
    let (acl, _) = admin.client().get_acl(&open_dir).await.unwrap();
    assert_eq!(acl, zk::Acls::anyone_all().to_vec(), "anonymous: {acl:?}");

    let own_dir = unique_path("wanted-owner");
    let own_lease = owner.lock(&own_dir).acquire().await.unwrap();
    let (acl, _) = owner.client().get_acl(&own_dir).await.unwrap();
    assert_eq!(acl.len(), 1, "{acl:?}");
    assert_eq!(acl[0].auth_id().scheme(), "x509", "{acl:?}");
    assert!(acl[0].auth_id().id().contains("CN=wanted-owner"), "{acl:?}");
    let err = anonymous
        .lock(&own_dir)
        .try_acquire()
        .await
        .expect_err("the anonymous session enqueued under the owner's lock");
    assert_denied(&err, &own_dir, "enqueue");
    assert_eq!(
        anonymous.client().delete(own_lease.path(), None).await,
        Err(zk::Error::NoAuth),
        "the anonymous session deleted the owner's node"
    );
    assert_eq!(children(&owner, &own_dir).await.len(), 1);
    own_lease.release().await.unwrap();
    open_lease.release().await.unwrap();
}

/// A directory of this test's own under the system temp dir, removed (keys and all) when
/// dropped, also by a failing test.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "zkfence-security-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
