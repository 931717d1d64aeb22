//! `zkfence exec` and `status` from the shell against an ensemble with TLS and SASL: the
//! flags, the passwords from the environment or a file, and the refusals (another
//! identity's lock, a wrong password, a password on the command line).

#[path = "../../tests/common/mod.rs"]
mod common;
mod process;

use std::time::Duration;

use common::unique_path;
use process::{zkfence, Ran};
use tokio::process::Command;
use zkfence::{Session, SessionOptions};
use zkfence_testcontainers::{ClientAuth, Ensemble};

const LIMIT: Duration = Duration::from_secs(30);

async fn run(cmd: Command) -> Ran {
    process::run(cmd, LIMIT).await
}

/// `zkfence --connect <TLS port> --tls-ca CA --sasl-user USER ARGS...`, the password in the
/// environment.
fn secured(zk: &Ensemble, user: &str, password: &str, args: &[&str]) -> Command {
    let ca = zk.tls().unwrap().ca_cert().display().to_string();
    let mut all = vec![
        "--session-timeout",
        "4s",
        "--tls-ca",
        &ca,
        "--sasl-user",
        user,
    ];
    all.extend_from_slice(args);
    let mut cmd = zkfence(&zk.secure_connect_string(), &all);
    cmd.env("ZKFENCE_SASL_PASSWORD", password);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_status_over_tls_and_sasl() {
    let zk = Ensemble::builder()
        .nodes(1)
        .tls(ClientAuth::None)
        .sasl_digest_users(&[("alice", "alice-pw"), ("bob", "bob-pw")])
        .start()
        .await
        .unwrap();
    let lock = unique_path("cli-secure");

    // exec runs the command under the lock, over TLS as sasl:alice, and the lock directory is
    // alice's alone.
    let ran = run(secured(
        &zk,
        "alice",
        "alice-pw",
        &["exec", &lock, "--", "sh", "-c", "echo token=$ZKFENCE_TOKEN"],
    ))
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.stdout.starts_with("token="), "{}", ran.stdout);
    let admin = Session::connect(
        &zk.secure_connect_string(),
        SessionOptions::new()
            .tls_ca_file(zk.tls().unwrap().ca_cert())
            .sasl_digest("alice", "alice-pw"),
    )
    .await
    .unwrap();
    let (acl, _) = admin.client().get_acl(&lock).await.unwrap();
    assert_eq!(acl.len(), 1, "{acl:?}");
    assert_eq!(acl[0].auth_id().scheme(), "sasl", "{acl:?}");
    assert_eq!(acl[0].auth_id().id(), "alice", "{acl:?}");

    // status, as alice with the password in a file, shows her holder.
    let lease = admin
        .lock(&lock)
        .with_id("alice-job")
        .acquire()
        .await
        .unwrap();
    let password_file = zk.dir().join("alice.password");
    std::fs::write(&password_file, "alice-pw\n").unwrap();
    let ca = zk.tls().unwrap().ca_cert().display().to_string();
    let file = password_file.display().to_string();
    let mut cmd = zkfence(
        &zk.secure_connect_string(),
        &[
            "--tls-ca",
            &ca,
            "--sasl-user",
            "alice",
            "--sasl-password-file",
            &file,
            "status",
            &lock,
            "--json",
        ],
    );
    cmd.env_remove("ZKFENCE_SASL_PASSWORD");
    let ran = run(cmd).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(json["holders"][0]["owner"]["id"], "alice-job", "{json}");

    // bob may neither read alice's queue nor queue on it: exit 4, naming the lock.
    let ran = run(secured(&zk, "bob", "bob-pw", &["status", &lock])).await;
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);
    assert!(
        ran.stderr.contains(&lock) && ran.stderr.contains("another identity"),
        "{}",
        ran.stderr
    );
    let ran = run(secured(
        &zk,
        "bob",
        "bob-pw",
        &["exec", "--no-wait", &lock, "--", "true"],
    ))
    .await;
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);

    // A wrong password: exit 4, saying SASL.
    let ran = run(secured(&zk, "alice", "wrong", &["status", &lock])).await;
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);
    assert!(ran.stderr.contains("SASL"), "{}", ran.stderr);

    // Passwords never on the command line; none at all is a usage error.
    let ran = run(zkfence(
        &zk.connect_string(),
        &["--auth", "digest:alice:secret", "status", &lock],
    ))
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("command line"), "{}", ran.stderr);
    let mut cmd = zkfence(
        &zk.connect_string(),
        &["--sasl-user", "alice", "status", &lock],
    );
    cmd.env_remove("ZKFENCE_SASL_PASSWORD");
    let ran = run(cmd).await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("ZKFENCE_SASL_PASSWORD"),
        "{}",
        ran.stderr
    );

    // A CA file that is not there is the command line's fault (exit 2, naming the file); a
    // plaintext client on the TLS port too; a server certificate nobody vouches for is an
    // identity that failed (exit 4).
    let missing = "/nonexistent/zkfence-ca.pem";
    let ran = run(zkfence(
        &zk.secure_connect_string(),
        &["--tls-ca", missing, "status", &lock],
    ))
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains(missing), "{}", ran.stderr);
    let ran = run(zkfence(
        &zk.secure_connect_string(),
        &["--session-timeout", "4s", "status", &lock],
    ))
    .await;
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    let stranger_dir = std::env::temp_dir().join(format!(
        "zkfence-stranger-ca-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let stranger = zkfence_testcontainers::TlsMaterial::generate(&stranger_dir).unwrap();
    let stranger_ca = stranger.ca_cert().display().to_string();
    let ran = run(zkfence(
        &zk.secure_connect_string(),
        &[
            "--session-timeout",
            "4s",
            "--tls-ca",
            &stranger_ca,
            "status",
            &lock,
        ],
    ))
    .await;
    assert_eq!(ran.code, Some(4), "{}", ran.stderr);
    let _ = std::fs::remove_dir_all(&stranger_dir);

    // The holder was never disturbed.
    assert_eq!(lease.state(), zkfence::LeaseState::Held);
    lease.release().await.unwrap();
}
