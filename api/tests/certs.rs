//! `leaseholdctl certs init` (PROTOCOL P13.1), run through the CLI into a temporary directory:
//! every pair it writes loads with `TlsConfig::load` and proves its role, keys are 0600, nothing
//! is overwritten without `--force`, and the certificates work in a real handshake under the
//! names asked for.
#![cfg(feature = "cli")]
// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use leasehold_api::ctl::certs::{cert_file_name, key_file_name, roles, InitReport};
use leasehold_api::ctl::{self, Cli, CtlError};
use leasehold_api::{Role, TlsConfig, TlsFiles};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

async fn certs_init(dir: &Path, extra: &[&str]) -> Result<String, CtlError> {
    let mut args = vec![
        "leaseholdctl".to_owned(),
        "certs".to_owned(),
        "init".to_owned(),
        "--dir".to_owned(),
        dir.display().to_string(),
        "--managers".to_owned(),
        "3".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let cli = Cli::try_parse_from(args).unwrap();
    let mut out = Vec::new();
    ctl::run(cli, &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

fn files_of(dir: &Path, role: Role) -> TlsFiles {
    TlsFiles {
        cert_file: dir.join(cert_file_name(role)),
        key_file: dir.join(key_file_name(role)),
        trusted_ca_file: dir.join("ca.pem"),
    }
}

#[tokio::test]
async fn p13_1_certs_init_writes_one_loadable_pair_per_role() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().join("certs");
    let printed = certs_init(&dir, &["--host", "node-a.example", "--host", "10.1.2.3"])
        .await
        .unwrap();

    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "admin-key.pem",
            "admin.pem",
            "ca-key.pem",
            "ca.pem",
            "executor-key.pem",
            "executor.pem",
            "manager-1-key.pem",
            "manager-1.pem",
            "manager-2-key.pem",
            "manager-2.pem",
            "manager-3-key.pem",
            "manager-3.pem",
        ]
    );
    for name in &names {
        assert!(printed.contains(name.as_str()), "{printed}");
    }
    assert!(printed.contains("node-a.example"), "{printed}");
    // What was printed holds no key material.
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");

    for role in roles(3) {
        let config = TlsConfig::load(&files_of(&dir, role)).unwrap();
        assert_eq!(config.role(), role);
    }

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |name: &str| {
            std::fs::metadata(dir.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        for name in &names {
            if name.ends_with("-key.pem") {
                assert_eq!(mode(name), 0o600, "{name}");
            }
        }
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
}

#[tokio::test]
async fn p13_1_certs_init_refuses_to_overwrite_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    certs_init(dir.path(), &[]).await.unwrap();
    let before = std::fs::read(dir.path().join("ca.pem")).unwrap();

    let refused = certs_init(dir.path(), &[]).await.unwrap_err();
    assert_eq!(refused.exit_code(), 2);
    let message = refused.to_string();
    for name in ["ca.pem", "ca-key.pem", "manager-3-key.pem", "admin.pem"] {
        assert!(message.contains(name), "{message}");
    }
    assert_eq!(std::fs::read(dir.path().join("ca.pem")).unwrap(), before);

    // One file in the way is enough to refuse, and it is the one named.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("executor.pem"), "mine").unwrap();
    let message = certs_init(other.path(), &[]).await.unwrap_err().to_string();
    assert!(message.contains("executor.pem"), "{message}");
    assert!(!message.contains("admin.pem"), "{message}");
    assert!(!other.path().join("ca.pem").exists());

    certs_init(dir.path(), &["--force"]).await.unwrap();
    assert_ne!(std::fs::read(dir.path().join("ca.pem")).unwrap(), before);
    for role in roles(3) {
        assert_eq!(
            TlsConfig::load(&files_of(dir.path(), role)).unwrap().role(),
            role
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("admin-key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn certs_init_json_lists_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let printed = certs_init(dir.path(), &["-o", "json"]).await.unwrap();
    let report: InitReport = serde_json::from_str(&printed).unwrap();
    assert_eq!(report.files.len(), 2 + 2 * 5);
    assert_eq!(report.names, ["127.0.0.1", "localhost"]);
    let admin_key = report
        .files
        .iter()
        .find(|f| f.path.ends_with("admin-key.pem"))
        .unwrap();
    assert_eq!(admin_key.mode, "0600");
    assert_eq!(admin_key.role.as_deref(), Some("urn:leasehold:admin"));
}

#[test]
fn certs_init_checks_its_arguments() {
    for args in [
        vec!["certs", "init", "--dir", "x"],
        vec!["certs", "init", "--dir", "x", "--managers", "0"],
        vec!["certs", "init", "--dir", "x", "--managers", "101"],
        vec!["certs", "init", "--managers", "3"],
    ] {
        let parsed = Cli::try_parse_from(std::iter::once("leaseholdctl").chain(args.clone()));
        assert!(parsed.is_err(), "{args:?}");
    }
}

#[tokio::test]
async fn certs_init_rejects_a_host_that_is_no_name() {
    let dir = tempfile::tempdir().unwrap();
    let error = certs_init(dir.path(), &["--host", "not a name"])
        .await
        .unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(error.to_string().contains("not a name"), "{error}");
    assert!(!dir.path().join("ca.pem").exists());
}

/// A manager's certificate serves under a `--host` name and an executor's is accepted as a
/// client; the manager's name is verified, so another name is refused.
#[tokio::test]
async fn p13_2_issued_certificates_work_in_a_handshake_under_their_names() {
    let dir = tempfile::tempdir().unwrap();
    certs_init(dir.path(), &["--host", "manager-1.cluster.example"])
        .await
        .unwrap();
    let manager = TlsConfig::load(&files_of(dir.path(), Role::Manager { node_id: 1 })).unwrap();
    let executor = TlsConfig::load(&files_of(dir.path(), Role::Executor)).unwrap();

    for (name, accepted) in [
        ("manager-1.cluster.example", true),
        ("localhost", true),
        ("127.0.0.1", true),
        ("manager-2.cluster.example", false),
    ] {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let acceptor = TlsAcceptor::from(manager.server_config());
        let server = async move {
            let mut stream = acceptor.accept(server_io).await.ok()?;
            let mut ping = [0u8; 4];
            stream.read_exact(&mut ping).await.ok()?;
            let peer = stream.get_ref().1.peer_certificates()?.first()?.clone();
            // Answered, so the client keeps the connection open until the server is done.
            stream.write_all(b"pong").await.ok()?;
            stream.flush().await.ok()?;
            Role::of_certificate(&peer).ok()
        };
        let connector = TlsConnector::from(Arc::new(executor.client_config()));
        let server_name = ServerName::try_from(name.to_owned()).unwrap();
        let client = async move {
            let mut stream = connector.connect(server_name, client_io).await?;
            stream.write_all(b"ping").await?;
            stream.flush().await?;
            let mut pong = [0u8; 4];
            stream.read_exact(&mut pong).await.map(drop)
        };
        let (served, called) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(server, client)
        })
        .await
        .unwrap();
        assert_eq!(called.is_ok(), accepted, "{name}: {called:?}");
        assert_eq!(served, accepted.then_some(Role::Executor), "{name}");
    }
}
