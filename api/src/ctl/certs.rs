//! `leaseholdctl certs init` (PROTOCOL P13.1): a new CA and one certificate per role, as PEM
//! files a cluster can start with (`--cert-file`, `--key-file`, `--trusted-ca-file`).
//!
//! Everything is made in memory first and written only when every file can be: without
//! `--force`, no existing file is touched (all the ones in the way are named); key files are
//! created with mode 0600. Operators with their own PKI issue the same roles by hand
//! (docs/SECURITY.md, "Certificates and roles").

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::ServerName;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::exit::CtlError;
use super::table::Table;
use crate::tls::Role;

/// The CA's certificate and key file names (P13.1).
pub const CA_CERT_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// The names every certificate is valid for, whatever `--host` adds (P13.1): the dev cluster and
/// every test address its processes by one of these.
pub const ALWAYS_VALID_FOR: [&str; 2] = ["127.0.0.1", "localhost"];

/// How long the role certificates are valid: a year, so a forgotten rotation shows within one
/// (docs/SECURITY.md, rotation).
pub const CERT_VALIDITY_DAYS: i64 = 365;
/// How long the CA is valid: ten years, since replacing it means reissuing every certificate.
pub const CA_VALIDITY_DAYS: i64 = 3650;
/// Certificates start this long before they are made, so a peer whose clock is a little behind
/// does not refuse a fresh certificate as not yet valid.
pub const BACKDATE_MINUTES: i64 = 60;

/// Most managers one `certs init` issues for. A Raft group is a handful of voters; the bound
/// leaves room for replacement ids and keeps a typo (`--managers 30000`) from generating keys for
/// minutes.
pub const MAX_MANAGERS: u64 = 100;
/// Most `--host` names, for the same reason: a certificate is sent in every handshake.
pub const MAX_HOSTS: usize = 100;

/// Mode of key files: readable by their owner only.
const KEY_FILE_MODE: u32 = 0o600;
/// Mode of certificate files: public, like the certificates themselves.
const CERT_FILE_MODE: u32 = 0o644;
/// Mode of a directory this command creates: it holds the CA key.
const DIR_MODE: u32 = 0o700;

/// What `certs init` is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    /// Where the files go; created (mode 0700) if absent.
    pub dir: PathBuf,
    /// Managers 1..=`managers` get a certificate each.
    pub managers: u64,
    /// Extra names (IP address or DNS name) every certificate is valid for.
    pub hosts: Vec<String>,
    /// Replace files that exist instead of refusing.
    pub force: bool,
}

/// What `certs init` wrote, as it prints it (`-o json` prints this).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitReport {
    pub dir: PathBuf,
    /// The names (IP addresses and DNS names) every role certificate is valid for.
    pub names: Vec<String>,
    /// Last day (UTC, `YYYY-MM-DD`) the role certificates are valid.
    pub valid_until: String,
    /// Last day (UTC) the CA is valid.
    pub ca_valid_until: String,
    pub files: Vec<WrittenFile>,
}

/// One file written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenFile {
    pub path: PathBuf,
    /// `CA certificate`, `CA private key`, `certificate` or `private key`.
    pub contents: String,
    /// The role URI of the certificate (or of the certificate the key belongs to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Octal permission bits, e.g. `0600`.
    pub mode: String,
}

/// The certificate file name of a role: `manager-<id>.pem`, `executor.pem`, `admin.pem`.
pub fn cert_file_name(role: Role) -> String {
    format!("{}.pem", file_stem(role))
}

/// The key file name of a role: `manager-<id>-key.pem`, `executor-key.pem`, `admin-key.pem`.
pub fn key_file_name(role: Role) -> String {
    format!("{}-key.pem", file_stem(role))
}

fn file_stem(role: Role) -> String {
    match role {
        Role::Manager { node_id } => format!("manager-{node_id}"),
        Role::Executor => "executor".to_owned(),
        Role::Admin => "admin".to_owned(),
    }
}

/// The roles `certs init` issues for: managers 1..=`managers`, the executor, the admin.
pub fn roles(managers: u64) -> Vec<Role> {
    (1..=managers)
        .map(|node_id| Role::Manager { node_id })
        .chain([Role::Executor, Role::Admin])
        .collect()
}

/// Issues everything, then writes it into `options.dir`.
pub fn init(options: &InitOptions) -> Result<InitReport, CtlError> {
    if options.managers == 0 || options.managers > MAX_MANAGERS {
        return Err(CtlError::BadInput(format!(
            "--managers must be between 1 and {MAX_MANAGERS}"
        )));
    }
    let names = subject_names(&options.hosts)?;
    let now = OffsetDateTime::now_utc();
    let validity = Validity::from(now)?;
    let files = issue(options.managers, &names, &validity)?;
    let written = write_files(&options.dir, &files, options.force)?;
    Ok(InitReport {
        dir: options.dir.clone(),
        names,
        valid_until: validity.cert_not_after.date().to_string(),
        ca_valid_until: validity.ca_not_after.date().to_string(),
        files: written,
    })
}

/// The table form of the report.
pub fn render(report: &InitReport) -> String {
    let mut table = Table::new(&["FILE", "CONTENTS", "ROLE", "MODE"]);
    for file in &report.files {
        table.push(vec![
            file.path.display().to_string(),
            file.contents.clone(),
            file.role.clone().unwrap_or_default(),
            file.mode.clone(),
        ]);
    }
    let mut text = table.render();
    text.push_str(&format!(
        "\nCertificates are valid for {} until {}; the CA until {}.\n\
         Keep {} away from the cluster's machines: anyone holding it can issue any role.\n",
        report.names.join(", "),
        report.valid_until,
        report.ca_valid_until,
        report.dir.join(CA_KEY_FILE).display(),
    ));
    text
}

/// `127.0.0.1`, `localhost`, then each host once, in the order given; each must be an IP address
/// or a DNS name a client could verify.
fn subject_names(hosts: &[String]) -> Result<Vec<String>, CtlError> {
    if hosts.len() > MAX_HOSTS {
        return Err(CtlError::BadInput(format!(
            "at most {MAX_HOSTS} --host names"
        )));
    }
    let mut names: Vec<String> = ALWAYS_VALID_FOR.iter().map(|s| (*s).to_owned()).collect();
    for host in hosts {
        // The same check a client makes of the name it connects to, so a name written here is
        // one a client can match.
        if ServerName::try_from(host.as_str()).is_err() {
            return Err(CtlError::BadInput(format!(
                "--host {host:?} is neither an IP address nor a DNS name"
            )));
        }
        let canonical = match host.parse::<IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => host.to_ascii_lowercase(),
        };
        if !names.contains(&canonical) {
            names.push(canonical);
        }
    }
    Ok(names)
}

/// Start and end of the CA's and the role certificates' validity.
struct Validity {
    not_before: OffsetDateTime,
    cert_not_after: OffsetDateTime,
    ca_not_after: OffsetDateTime,
}

impl Validity {
    fn from(now: OffsetDateTime) -> Result<Validity, CtlError> {
        let out_of_range = || CtlError::BadInput("the system clock is out of range".to_owned());
        Ok(Validity {
            not_before: now
                .checked_sub(time::Duration::minutes(BACKDATE_MINUTES))
                .ok_or_else(out_of_range)?,
            cert_not_after: now
                .checked_add(time::Duration::days(CERT_VALIDITY_DAYS))
                .ok_or_else(out_of_range)?,
            ca_not_after: now
                .checked_add(time::Duration::days(CA_VALIDITY_DAYS))
                .ok_or_else(out_of_range)?,
        })
    }
}

/// One PEM file to write.
struct PemFile {
    name: String,
    contents: String,
    /// A private key: written 0600, never printed.
    secret: bool,
    what: &'static str,
    role: Option<Role>,
}

/// Names the file only: `contents` may be a private key.
impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemFile")
            .field("name", &self.name)
            .field("secret", &self.secret)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

fn issuing(what: String) -> impl Fn(rcgen::Error) -> CtlError {
    move |e| CtlError::BadInput(format!("cannot issue {what}: {e}"))
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Leasehold");
    name.push(DnType::CommonName, common_name);
    name
}

/// The CA and every role's certificate and key, in the order they are written.
fn issue(managers: u64, names: &[String], validity: &Validity) -> Result<Vec<PemFile>, CtlError> {
    let mut ca = CertificateParams::default();
    ca.distinguished_name = distinguished_name("Leasehold cluster CA");
    // Signs role certificates directly; no intermediate CA below it.
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = validity.not_before;
    ca.not_after = validity.ca_not_after;
    let ca_key = KeyPair::generate().map_err(issuing("the CA key".to_owned()))?;
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(issuing("the CA certificate".to_owned()))?;
    let mut files = vec![
        PemFile {
            name: CA_CERT_FILE.to_owned(),
            contents: ca_cert.pem(),
            secret: false,
            what: "CA certificate",
            role: None,
        },
        PemFile {
            name: CA_KEY_FILE.to_owned(),
            contents: ca_key.serialize_pem(),
            secret: true,
            what: "CA private key",
            role: None,
        },
    ];
    let issuer = Issuer::new(ca, ca_key);

    for role in roles(managers) {
        let what = || format!("the {role} certificate");
        let mut params = CertificateParams::new(names.to_vec()).map_err(issuing(what()))?;
        let uri = role.san_uri().try_into().map_err(issuing(what()))?;
        params.subject_alt_names.push(SanType::URI(uri));
        params.distinguished_name = distinguished_name(&format!("leasehold {role}"));
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Every process both serves and calls its peers; admin only calls, but one shape for all
        // keeps operators' tooling simple.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        params.not_before = validity.not_before;
        params.not_after = validity.cert_not_after;
        let key = KeyPair::generate().map_err(issuing(format!("the {role} key")))?;
        let cert = params.signed_by(&key, &issuer).map_err(issuing(what()))?;
        files.push(PemFile {
            name: cert_file_name(role),
            contents: cert.pem(),
            secret: false,
            what: "certificate",
            role: Some(role),
        });
        files.push(PemFile {
            name: key_file_name(role),
            contents: key.serialize_pem(),
            secret: true,
            what: "private key",
            role: Some(role),
        });
    }
    Ok(files)
}

/// Writes `files` into `dir`: refuses, before writing anything, if any exists and not `force`.
fn write_files(dir: &Path, files: &[PemFile], force: bool) -> Result<Vec<WrittenFile>, CtlError> {
    create_dir(dir)?;
    if !force {
        let mut existing = Vec::new();
        for file in files {
            let path = dir.join(&file.name);
            match fs::symlink_metadata(&path) {
                Ok(_) => existing.push(file.name.clone()),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(CtlError::io("checking", path, e)),
            }
        }
        if !existing.is_empty() {
            let verb = if existing.len() == 1 {
                "exists"
            } else {
                "exist"
            };
            return Err(CtlError::BadInput(format!(
                "{}: {} already {verb}; nothing was written (--force replaces them)",
                dir.display(),
                existing.join(", ")
            )));
        }
    }
    let mut written = Vec::with_capacity(files.len());
    for file in files {
        let path = dir.join(&file.name);
        let mode = if file.secret {
            KEY_FILE_MODE
        } else {
            CERT_FILE_MODE
        };
        if force {
            // Removed rather than truncated, so the new file gets its own mode and a key is never
            // written into a file others could already read.
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(CtlError::io("replacing", path, e)),
            }
        }
        write_new(&path, file.contents.as_bytes(), mode)
            .map_err(|e| CtlError::io("writing", &path, e))?;
        written.push(WrittenFile {
            path,
            contents: file.what.to_owned(),
            role: file.role.map(|role| role.san_uri()),
            mode: format!("{mode:04o}"),
        });
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CtlError::io("syncing", dir, e))?;
    Ok(written)
}

fn create_dir(dir: &Path) -> Result<(), CtlError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DIR_MODE);
    }
    builder
        .create(dir)
        .map_err(|e| CtlError::io("creating", dir, e))
}

/// Creates `path` (it must not exist) with `mode`, so there is no moment at which a key file is
/// readable by others, and syncs it.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p13_1_file_names_are_the_protocols() {
        assert_eq!(
            cert_file_name(Role::Manager { node_id: 3 }),
            "manager-3.pem"
        );
        assert_eq!(
            key_file_name(Role::Manager { node_id: 3 }),
            "manager-3-key.pem"
        );
        assert_eq!(cert_file_name(Role::Executor), "executor.pem");
        assert_eq!(key_file_name(Role::Executor), "executor-key.pem");
        assert_eq!(cert_file_name(Role::Admin), "admin.pem");
        assert_eq!(key_file_name(Role::Admin), "admin-key.pem");
        assert_eq!(
            roles(2),
            [
                Role::Manager { node_id: 1 },
                Role::Manager { node_id: 2 },
                Role::Executor,
                Role::Admin
            ]
        );
    }

    #[test]
    fn names_always_include_loopback_and_each_host_once() {
        let hosts = [
            "node-a.example",
            "10.0.0.7",
            "localhost",
            "Node-A.example",
            "::1",
        ]
        .map(String::from);
        assert_eq!(
            subject_names(&hosts).unwrap(),
            [
                "127.0.0.1",
                "localhost",
                "node-a.example",
                "10.0.0.7",
                "::1"
            ]
        );
        for bad in ["", "has space", "[::1]", "a..b"] {
            assert!(
                matches!(subject_names(&[bad.to_owned()]), Err(CtlError::BadInput(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn key_contents_never_reach_debug() {
        let file = PemFile {
            name: "admin-key.pem".into(),
            contents: "-----BEGIN PRIVATE KEY-----\nSECRET\n".into(),
            secret: true,
            what: "private key",
            role: Some(Role::Admin),
        };
        assert!(!format!("{file:?}").contains("SECRET"));
    }
}
