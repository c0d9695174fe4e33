//! `leaseholdctl certs init` (PROTOCOL P13.1): a new CA and one certificate per role, as PEM
//! files a cluster can start with (`--cert-file`, `--key-file`, `--trusted-ca-file`).
//!
//! `leaseholdctl certs issue ROLE [--namespace NS]...` adds one executor or admin certificate
//! signed by the CA `certs init` left in `--dir` (`ca.pem`, `ca-key.pem`; the key is read, never
//! written or printed, and must be the key of `ca.pem`'s certificate). With `--namespace`, the
//! certificate is limited to those namespaces (PROTOCOL P18.2): it carries one role URI
//! `urn:leasehold:<role>:<namespace>` per namespace and no unlimited one. Without, it acts in
//! every namespace, like `certs init`'s. Both commands make every role certificate in one
//! function (`role_files`), so an issued certificate has exactly the shape of `certs init`'s:
//! the same names, validity, key usages and authority key identifier.
//!
//! Every certificate either makes has a subject of its own (issue 55, finding 7), since the
//! managers' audit log names an actor by its role and subject (P17.4): a `CN` of the files' stem
//! and the first eight hexadecimal digits of the SHA-256 of the certificate's public key
//! (`ops-alice 3f9a2c1e`), an `OU` naming the role and the namespaces it is limited to
//! (`admin of namespaces kv orders`, `admin of every namespace`, `manager 2`), and
//! `O=Leasehold`. Two certificates of one role, or one issued again under the same name, differ
//! in their key. The common name comes first, so it is what a record cut short still shows.
//!
//! Everything is made in memory first and written only when every file can be: without
//! `--force`, no existing file is touched (all the ones in the way are named); key files are
//! created with mode 0600. Operators with their own PKI issue the same roles by hand
//! (docs/SECURITY.md, "Certificates and roles").

mod written;
mod x509;

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};

use self::written::*;
use self::x509::*;
use super::exit::CtlError;
use super::table::{printable, Table};
use crate::tls::{NamespaceScope, Role, MAX_PEM_FILE_BYTES};

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

/// Longest `certs issue --name`.
pub const MAX_FILE_STEM_CHARS: usize = 64;

/// Longest attribute of a subject this command writes: RFC 5280's bound on a common name and an
/// organizational unit name (`ub-common-name`, `ub-organizational-unit-name`).
pub const MAX_SUBJECT_ATTRIBUTE_CHARS: usize = 64;
/// Hexadecimal digits of the SHA-256 of a certificate's public key its common name ends with.
pub const KEY_ID_HEX_DIGITS: usize = 8;

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

/// What `certs issue` is asked for: its arguments on the command line (the doc comments are its
/// `--help`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct IssueOptions {
    /// `executor` or `admin`. A manager's certificate names its node id and is made by
    /// `certs init --managers N`.
    #[arg(value_name = "ROLE", value_parser = issuable_role)]
    pub role: Role,
    /// A namespace the certificate is limited to (PROTOCOL P18.2); repeatable, or
    /// comma-separated. Without it, the certificate acts in every namespace.
    // The id is the global -n/--namespace's, so clap does not add that one to this command (it
    // would be a second `--namespace`), and `leaseholdctl -n kv certs issue executor` means the
    // same as `leaseholdctl certs issue executor -n kv`.
    #[arg(
        id = "namespace",
        short = 'n',
        long = "namespace",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub namespaces: Vec<String>,
    /// The directory `certs init` wrote the CA into (`ca.pem`, `ca-key.pem`); the new files go
    /// there too.
    #[arg(long)]
    pub dir: PathBuf,
    /// Another name (IP address or DNS name) the certificate is valid for; repeatable.
    #[arg(long = "host", value_name = "NAME")]
    pub hosts: Vec<String>,
    /// The files' stem: `<STEM>.pem` and `<STEM>-key.pem` (letters, digits, '-', '_' and '.',
    /// at most 64), and the name in the certificate's subject (`CN=<STEM> <key id>`), which the
    /// audit log records for its holder. Default: `executor` or `admin`, or
    /// `<role>-<first namespace>` for a limited certificate.
    #[arg(long, value_name = "STEM")]
    pub name: Option<String>,
    /// Replace existing files instead of refusing.
    #[arg(long)]
    pub force: bool,
}

/// What `certs issue` wrote, as it prints it (`-o json` prints this).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueReport {
    pub dir: PathBuf,
    /// `executor` or `admin`.
    pub role: String,
    /// The namespaces the certificate is limited to (P18.2), ascending; `null`: every namespace.
    pub namespaces: Option<Vec<String>>,
    /// The names (IP addresses and DNS names) the certificate is valid for.
    pub names: Vec<String>,
    /// The certificate's subject as RFC 4514 writes it, as the audit log records its holder
    /// (P17.4): `CN=<stem> <key id>, OU=<role and namespaces>, O=Leasehold`.
    pub subject: String,
    /// Last day (UTC, `YYYY-MM-DD`) the certificate is valid: a year, or less if the CA ends
    /// sooner.
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
    /// The role URI of the certificate (or of the certificate the key belongs to); for a
    /// certificate limited to namespaces, each of its role URIs, comma-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The subject of the certificate (or of the certificate the key belongs to), as RFC 4514
    /// writes it and the audit log records its holder; none for the CA's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Octal permission bits, e.g. `0600`.
    pub mode: String,
}

/// The certificate file name of a role: `manager-<id>.pem`, `executor.pem`, `admin.pem`.
pub fn cert_file_name(role: Role) -> String {
    cert_file_of(&file_stem(role))
}

/// The key file name of a role: `manager-<id>-key.pem`, `executor-key.pem`, `admin-key.pem`.
pub fn key_file_name(role: Role) -> String {
    key_file_of(&file_stem(role))
}

fn cert_file_of(stem: &str) -> String {
    format!("{stem}.pem")
}

fn key_file_of(stem: &str) -> String {
    format!("{stem}-key.pem")
}

/// The stem `certs issue` names its files with when not given `--name`: the role's own
/// (`executor`, `admin`) for an unlimited certificate, else the role and the first namespace in
/// ascending order (`executor-kv`).
pub fn default_stem(role: Role, scope: &NamespaceScope) -> String {
    match scope {
        NamespaceScope::Only(namespaces) => match namespaces.first() {
            Some(first) => format!("{}-{first}", file_stem(role)),
            None => file_stem(role),
        },
        NamespaceScope::All => file_stem(role),
    }
}

/// The role URIs of a certificate of `role` limited to `scope` (P18.2): the role's own for
/// [`NamespaceScope::All`], else one `urn:leasehold:<role>:<namespace>` per namespace.
pub fn role_uris(role: Role, scope: &NamespaceScope) -> Result<Vec<String>, CtlError> {
    match scope {
        NamespaceScope::All => Ok(vec![role.san_uri()]),
        NamespaceScope::Only(namespaces) => namespaces
            .iter()
            .map(|namespace| {
                role.scoped_san_uri(namespace).ok_or_else(|| {
                    CtlError::BadInput(format!(
                        "a {role} certificate cannot be limited to namespaces"
                    ))
                })
            })
            .collect(),
    }
}

/// The role `certs issue` is asked for: `executor` or `admin` (the CLI's parser of ROLE).
pub fn issuable_role(text: &str) -> Result<Role, String> {
    match text {
        "executor" => Ok(Role::Executor),
        "admin" => Ok(Role::Admin),
        other if other.starts_with("manager") => Err(MANAGER_NOT_ISSUED.to_owned()),
        _ => Err("the role is `executor` or `admin`".to_owned()),
    }
}

const MANAGER_NOT_ISSUED: &str = "`certs issue` issues executor and admin certificates; a \
     manager's certificate names its node id and is made by `certs init --managers N`";

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
    let files = issue_ca_and_roles(options.managers, &names, &validity)?;
    let written = write_files(&options.dir, &files, options.force)?;
    Ok(InitReport {
        dir: options.dir.clone(),
        names,
        valid_until: validity.cert_not_after.date().to_string(),
        ca_valid_until: validity.ca_not_after.date().to_string(),
        files: written,
    })
}

/// `certs issue`: one executor or admin certificate and its key, signed by the CA in
/// `options.dir`, written there. Everything asked is checked, and the CA read, before anything
/// is written.
pub fn issue(options: &IssueOptions) -> Result<IssueReport, CtlError> {
    let role = options.role;
    if let Role::Manager { .. } = role {
        return Err(CtlError::BadInput(MANAGER_NOT_ISSUED.to_owned()));
    }
    let scope = if options.namespaces.is_empty() {
        NamespaceScope::All
    } else {
        NamespaceScope::only(options.namespaces.iter().cloned())
            .map_err(|e| CtlError::BadInput(format!("--namespace: {e}")))?
    };
    let stem = match &options.name {
        Some(name) => {
            check_file_stem(name)?;
            name.clone()
        }
        None => default_stem(role, &scope),
    };
    // `--name ca` would write over the CA (on a case-insensitive file system, `--name CA` too).
    let written_names = [cert_file_of(&stem), key_file_of(&stem)];
    if written_names.iter().any(|written| {
        [CA_CERT_FILE, CA_KEY_FILE]
            .iter()
            .any(|ca| written.eq_ignore_ascii_case(ca))
    }) {
        return Err(CtlError::BadInput(format!(
            "--name {stem}: its files would replace the CA's ({CA_CERT_FILE}, {CA_KEY_FILE})"
        )));
    }
    let names = subject_names(&options.hosts)?;
    let ca = read_ca(&options.dir)?;
    let now = OffsetDateTime::now_utc();
    let validity = Validity::from(now)?.under_ca(&ca, now, &options.dir)?;
    let files = role_files(role, &scope, &stem, &names, &validity, &ca.issuer)?;
    let subject = files[0].subject.clone().unwrap_or_default();
    let written = write_files(&options.dir, &files, options.force)?;
    Ok(IssueReport {
        dir: options.dir.clone(),
        role: role.to_string(),
        namespaces: match &scope {
            NamespaceScope::All => None,
            NamespaceScope::Only(namespaces) => Some(namespaces.to_vec()),
        },
        names,
        subject,
        valid_until: validity.cert_not_after.date().to_string(),
        ca_valid_until: validity.ca_not_after.date().to_string(),
        files: written,
    })
}

/// A `--name`: 1 to [`MAX_FILE_STEM_CHARS`] letters, digits, `-`, `_` and `.`, not starting with
/// `.`, so it names a file in the directory and nothing else.
fn check_file_stem(stem: &str) -> Result<(), CtlError> {
    let safe = !stem.is_empty()
        && stem.len() <= MAX_FILE_STEM_CHARS
        && !stem.starts_with('.')
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if safe {
        Ok(())
    } else {
        let shown: String = stem.chars().take(MAX_FILE_STEM_CHARS + 1).collect();
        Err(CtlError::BadInput(format!(
            "--name {shown:?}: a file name stem is 1 to {MAX_FILE_STEM_CHARS} letters, digits, \
             '-', '_' and '.', not starting with '.'"
        )))
    }
}

/// The table form of the report.
pub fn render(report: &InitReport) -> String {
    let mut text = files_table(&report.files);
    text.push_str(&format!(
        "\nCertificates are valid for {} until {}; the CA until {}.\n\
         Keep {} away from the cluster's machines: anyone holding it can issue any role.\n",
        report.names.join(", "),
        report.valid_until,
        report.ca_valid_until,
        printable(&report.dir.join(CA_KEY_FILE).display().to_string()),
    ));
    text
}

/// The table form of `certs issue`'s report.
pub fn render_issue(report: &IssueReport) -> String {
    let mut text = files_table(&report.files);
    let scope = match &report.namespaces {
        None => "every namespace".to_owned(),
        Some(namespaces) => format!("namespaces {} only", namespaces.join(", ")),
    };
    text.push_str(&format!(
        "\nThe {} certificate may act in {scope} (PROTOCOL P18.2).\n\
         Its subject, as the audit log names its holder: {}\n\
         It is valid for {} until {}; the CA until {}.\n",
        report.role,
        printable(&report.subject),
        report.names.join(", "),
        report.valid_until,
        report.ca_valid_until,
    ));
    text
}

/// The files written: FILE, CONTENTS, ROLE, MODE, SUBJECT.
fn files_table(files: &[WrittenFile]) -> String {
    let mut table = Table::new(&["FILE", "CONTENTS", "ROLE", "MODE", "SUBJECT"]);
    for file in files {
        table.push(vec![
            file.path.display().to_string(),
            file.contents.clone(),
            file.role.clone().unwrap_or_default(),
            file.mode.clone(),
            file.subject.clone().unwrap_or_default(),
        ]);
    }
    table.render()
}

/// The role a certificate carries and the namespaces it is limited to, for its subject's `OU`:
/// `manager 2`, `executor of every namespace`, `admin of namespaces kv orders`. At most
/// [`MAX_SUBJECT_ATTRIBUTE_CHARS`]: past that, the count and as many names as fit, then `...`
/// (`executor of 40 namespaces kv orders ...`); the role URIs name them all.
pub fn scope_label(role: Role, scope: &NamespaceScope) -> String {
    let namespaces = match (role, scope) {
        (Role::Manager { .. }, _) => return role.to_string(),
        (_, NamespaceScope::All) => return format!("{role} of every namespace"),
        (_, NamespaceScope::Only(namespaces)) => namespaces,
    };
    // Separated by spaces: a comma in an attribute is one more thing for a reader of the
    // subject's RFC 4514 form (`CN=.., OU=.., O=..`) to unescape.
    let full = format!("{role} of namespaces {}", namespaces.join(" "));
    if full.len() <= MAX_SUBJECT_ATTRIBUTE_CHARS {
        return full;
    }
    const MORE: &str = "...";
    let mut label = format!("{role} of {} namespaces ", namespaces.len());
    for namespace in namespaces.iter() {
        if label.len() + namespace.len() + 1 + MORE.len() > MAX_SUBJECT_ATTRIBUTE_CHARS {
            break;
        }
        label.push_str(namespace);
        label.push(' ');
    }
    label.push_str(MORE);
    label
}

/// The first [`KEY_ID_HEX_DIGITS`] hexadecimal digits of the SHA-256 of `key`'s public key as a
/// certificate carries it (DER SubjectPublicKeyInfo), the end of its certificate's common name.
/// Anyone can compute it from the certificate:
/// `openssl x509 -in admin.pem -noout -pubkey | openssl pkey -pubin -outform der | sha256sum`.
pub fn key_id(key: &impl PublicKeyData) -> String {
    let digest = Sha256::digest(key.subject_public_key_info());
    let mut hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    hex.truncate(KEY_ID_HEX_DIGITS);
    hex
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::Parser;
    use x509_parser::prelude::GeneralName;

    use super::*;
    use crate::ctl::{run, CertsVerb, Cli, Noun};
    use crate::tls::{TlsConfig, TlsFiles};

    /// A directory holding what `certs init` writes for one manager.
    fn initialised() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        init(&InitOptions {
            dir: dir.path().to_owned(),
            managers: 1,
            hosts: Vec::new(),
            force: false,
        })
        .unwrap();
        dir
    }

    fn options(dir: &Path, role: Role, namespaces: &[&str]) -> IssueOptions {
        IssueOptions {
            dir: dir.to_owned(),
            role,
            namespaces: namespaces.iter().map(|ns| (*ns).to_owned()).collect(),
            hosts: Vec::new(),
            name: None,
            force: false,
        }
    }

    /// Every file of `dir` and its contents.
    fn files_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                (name, fs::read(entry.path()).unwrap())
            })
            .collect()
    }

    fn certificate(path: &Path) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(path).unwrap()
    }

    /// `<stem>.pem` and `<stem>-key.pem` of `dir`, loaded the way every process loads its TLS
    /// files: the chain to `ca.pem` and the key are checked.
    fn load(dir: &Path, stem: &str) -> TlsConfig {
        TlsConfig::load(&TlsFiles {
            cert_file: dir.join(cert_file_of(stem)),
            key_file: dir.join(key_file_of(stem)),
            trusted_ca_file: dir.join(CA_CERT_FILE),
        })
        .unwrap()
    }

    /// What `certs issue` wrote: file name, contents, role, mode.
    fn written(report: &IssueReport) -> Vec<(String, String, Option<String>, String)> {
        report
            .files
            .iter()
            .map(|file| {
                assert_eq!(file.path.parent(), Some(report.dir.as_path()));
                let name = file.path.file_name().unwrap().to_str().unwrap().to_owned();
                (
                    name,
                    file.contents.clone(),
                    file.role.clone(),
                    file.mode.clone(),
                )
            })
            .collect()
    }

    #[cfg(unix)]
    fn mode_of(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn p18_2_issue_limits_an_executor_certificate_to_namespaces() {
        let dir = initialised();
        let ca_before =
            [CA_CERT_FILE, CA_KEY_FILE].map(|name| fs::read(dir.path().join(name)).unwrap());
        let report = issue(&options(
            dir.path(),
            Role::Executor,
            &["orders", "kv", "orders"],
        ))
        .unwrap();

        let expected = NamespaceScope::only(["kv", "orders"]).unwrap();
        let cert_path = dir.path().join("executor-kv.pem");
        assert_eq!(
            Role::and_scope_of_certificate(&certificate(&cert_path)).unwrap(),
            (Role::Executor, expected.clone())
        );
        let tls = load(dir.path(), "executor-kv");
        assert_eq!(tls.role(), Role::Executor);
        assert_eq!(tls.scope(), &expected);

        let uris = "urn:leasehold:executor:kv,urn:leasehold:executor:orders".to_owned();
        assert_eq!(
            written(&report),
            [
                (
                    "executor-kv.pem".into(),
                    "certificate".into(),
                    Some(uris.clone()),
                    "0644".into()
                ),
                (
                    "executor-kv-key.pem".into(),
                    "private key".into(),
                    Some(uris.clone()),
                    "0600".into()
                ),
            ]
        );
        #[cfg(unix)]
        {
            assert_eq!(mode_of(&cert_path), CERT_FILE_MODE);
            assert_eq!(
                mode_of(&dir.path().join("executor-kv-key.pem")),
                KEY_FILE_MODE
            );
        }
        assert_eq!(report.role, "executor");
        assert_eq!(
            report.namespaces,
            Some(vec!["kv".to_owned(), "orders".to_owned()])
        );
        assert_eq!(report.names, ALWAYS_VALID_FOR);
        let text = render_issue(&report);
        assert!(text.contains(&uris), "{text}");
        assert!(
            text.contains("may act in namespaces kv, orders only"),
            "{text}"
        );
        assert!(
            text.contains(&format!("until {}", report.valid_until)),
            "{text}"
        );
        // The CA is read, never written.
        let ca_after =
            [CA_CERT_FILE, CA_KEY_FILE].map(|name| fs::read(dir.path().join(name)).unwrap());
        assert_eq!(ca_after, ca_before);
    }

    #[test]
    fn p18_2_issue_without_namespaces_is_unlimited() {
        let dir = initialised();
        let report = issue(&IssueOptions {
            hosts: vec!["node-a.example".to_owned()],
            name: Some("ops_admin.1".to_owned()),
            ..options(dir.path(), Role::Admin, &[])
        })
        .unwrap();
        assert_eq!(
            Role::and_scope_of_certificate(&certificate(&dir.path().join("ops_admin.1.pem")))
                .unwrap(),
            (Role::Admin, NamespaceScope::All)
        );
        let tls = load(dir.path(), "ops_admin.1");
        assert_eq!(
            (tls.role(), tls.scope()),
            (Role::Admin, &NamespaceScope::All)
        );
        let uri = Some("urn:leasehold:admin".to_owned());
        assert_eq!(
            written(&report),
            [
                (
                    "ops_admin.1.pem".into(),
                    "certificate".into(),
                    uri.clone(),
                    "0644".into()
                ),
                (
                    "ops_admin.1-key.pem".into(),
                    "private key".into(),
                    uri,
                    "0600".into()
                ),
            ]
        );
        assert_eq!(report.namespaces, None);
        assert_eq!(report.names, ["127.0.0.1", "localhost", "node-a.example"]);
        assert!(render_issue(&report).contains("may act in every namespace"));
    }

    #[test]
    fn default_stems_name_the_role_and_first_namespace() {
        assert_eq!(
            default_stem(Role::Executor, &NamespaceScope::All),
            "executor"
        );
        assert_eq!(default_stem(Role::Admin, &NamespaceScope::All), "admin");
        let scope = NamespaceScope::only(["orders", "kv"]).unwrap();
        assert_eq!(default_stem(Role::Executor, &scope), "executor-kv");
        assert_eq!(default_stem(Role::Admin, &scope), "admin-kv");
        assert_eq!(
            role_uris(Role::Admin, &scope).unwrap(),
            ["urn:leasehold:admin:kv", "urn:leasehold:admin:orders"]
        );
        assert!(matches!(
            role_uris(Role::Manager { node_id: 1 }, &scope),
            Err(CtlError::BadInput(_))
        ));
    }

    /// `certs issue` makes its certificate exactly as `certs init` makes its own: the same
    /// extensions (but the role URIs and the key's own identifier), issuer, subject attributes
    /// and validity. The subjects themselves differ (issue 55, finding 7).
    #[test]
    fn issued_certificates_have_the_shape_of_init_s() {
        let dir = initialised();
        issue(&options(dir.path(), Role::Executor, &["kv"])).unwrap();
        let init_der = certificate(&dir.path().join("executor.pem"));
        let issued_der = certificate(&dir.path().join("executor-kv.pem"));
        let ca_der = certificate(&dir.path().join(CA_CERT_FILE));
        let (_, init_cert) = X509Certificate::from_der(init_der.as_ref()).unwrap();
        let (_, issued) = X509Certificate::from_der(issued_der.as_ref()).unwrap();
        let (_, ca) = X509Certificate::from_der(ca_der.as_ref()).unwrap();

        let san = x509_parser::oid_registry::OID_X509_EXT_SUBJECT_ALT_NAME;
        let ski = x509_parser::oid_registry::OID_X509_EXT_SUBJECT_KEY_IDENTIFIER;
        let shape = |cert: &X509Certificate<'_>| {
            let extensions: Vec<_> = cert
                .extensions()
                .iter()
                .map(|ext| {
                    let value = (ext.oid != san && ext.oid != ski).then(|| ext.value.to_vec());
                    (ext.oid.to_id_string(), ext.critical, value)
                })
                .collect();
            let names: Vec<String> = cert
                .subject_alternative_name()
                .unwrap()
                .unwrap()
                .value
                .general_names
                .iter()
                .filter(|name| !matches!(name, GeneralName::URI(_)))
                .map(|name| name.to_string())
                .collect();
            let validity =
                cert.validity().not_after.to_datetime() - cert.validity().not_before.to_datetime();
            let subject_attributes: Vec<String> = cert
                .subject()
                .iter_attributes()
                .map(|attribute| attribute.attr_type().to_id_string())
                .collect();
            (
                extensions,
                names,
                subject_attributes,
                cert.issuer().as_raw().to_vec(),
                validity,
            )
        };
        assert_eq!(shape(&issued), shape(&init_cert));
        assert_eq!(
            shape(&issued).2,
            ["2.5.4.3", "2.5.4.11", "2.5.4.10"],
            "CN, OU, O"
        );
        assert_ne!(issued.subject().as_raw(), init_cert.subject().as_raw());
        assert_eq!(issued.issuer().as_raw(), ca.subject().as_raw());
        let authority_key_id = issued
            .extensions()
            .iter()
            .find_map(|ext| match ext.parsed_extension() {
                x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    aki.key_identifier.clone()
                }
                _ => None,
            })
            .unwrap();
        let ca_key_id = ca
            .extensions()
            .iter()
            .find_map(|ext| match ext.parsed_extension() {
                x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(ski) => {
                    Some(ski.clone())
                }
                _ => None,
            })
            .unwrap();
        assert_eq!(authority_key_id.0, ca_key_id.0);
    }

    #[test]
    fn issue_refuses_bad_input_and_writes_nothing() {
        let dir = initialised();
        let before = files_in(dir.path());
        let named = |name: &str| IssueOptions {
            name: Some(name.to_owned()),
            ..options(dir.path(), Role::Executor, &[])
        };
        let cases = [
            (
                options(dir.path(), Role::Executor, &["kv", "Bad_NS"]),
                "\"Bad_NS\"",
            ),
            (options(dir.path(), Role::Admin, &[""]), "namespace \"\""),
            (
                options(dir.path(), Role::Manager { node_id: 2 }, &[]),
                "certs init",
            ),
            (
                options(dir.path(), Role::Manager { node_id: 2 }, &["kv"]),
                "certs init",
            ),
            (named("../escape"), "--name \"../escape\""),
            (named("a/b"), "--name"),
            (named(".hidden"), "--name"),
            (named(""), "--name"),
            (named("has space"), "--name"),
            (named(&"x".repeat(MAX_FILE_STEM_CHARS + 1)), "--name"),
            (named("ca"), "replace the CA's"),
            (named("CA"), "replace the CA's"),
            (named("ca-key"), "replace the CA's"),
            (
                IssueOptions {
                    hosts: vec!["has space".to_owned()],
                    ..options(dir.path(), Role::Executor, &["kv"])
                },
                "--host",
            ),
        ];
        for (options, needle) in cases {
            match issue(&options) {
                Err(CtlError::BadInput(message)) => {
                    assert!(message.contains(needle), "{options:?}: {message}")
                }
                other => panic!("{options:?}: {other:?}"),
            }
            assert_eq!(files_in(dir.path()), before, "{options:?}");
        }
        // `--name` at its longest is fine.
        let longest = "x".repeat(MAX_FILE_STEM_CHARS);
        issue(&named(&longest)).unwrap();
        load(dir.path(), &longest);
    }

    #[test]
    fn issue_needs_the_ca_and_its_key() {
        let dir = initialised();
        let other = initialised();
        let ca_pem = fs::read(dir.path().join(CA_CERT_FILE)).unwrap();

        // No directory at all: an error naming ca.pem, and no directory made.
        let absent = dir.path().join("absent");
        match issue(&options(&absent, Role::Executor, &["kv"])) {
            Err(CtlError::BadInput(message)) => {
                assert!(
                    message.contains(&absent.join(CA_CERT_FILE).display().to_string()),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(!absent.exists());

        /// ca.pem's contents, ca-key.pem's (none: no such file), what the error names.
        type Case<'a> = (&'a [u8], Option<&'a [u8]>, &'a str);
        let other_key = fs::read(other.path().join(CA_KEY_FILE)).unwrap();
        let dir_key = fs::read(dir.path().join(CA_KEY_FILE)).unwrap();
        let issued_cert = fs::read(dir.path().join("executor.pem")).unwrap();
        let issued_key = fs::read(dir.path().join("executor-key.pem")).unwrap();
        let cases: [Case<'_>; 6] = [
            (&ca_pem, None, CA_KEY_FILE),
            (
                &ca_pem,
                Some(&other_key),
                "not the key of the CA certificate",
            ),
            (
                b"not a certificate",
                Some(&dir_key),
                "no PEM CERTIFICATE block",
            ),
            (&ca_pem, Some(b"not a key"), "not a usable private key"),
            // A role certificate and its key: the key matches, but it is no CA.
            (&issued_cert, Some(&issued_key), "is not a CA certificate"),
            (b"\xff\xfe", Some(&dir_key), "not UTF-8"),
        ];
        for (cert, key, needle) in cases {
            let work = tempfile::tempdir().unwrap();
            fs::write(work.path().join(CA_CERT_FILE), cert).unwrap();
            if let Some(key) = key {
                fs::write(work.path().join(CA_KEY_FILE), key).unwrap();
            }
            let before = files_in(work.path());
            match issue(&options(work.path(), Role::Executor, &["kv"])) {
                Err(CtlError::BadInput(message)) => assert!(message.contains(needle), "{message}"),
                other => panic!("{needle}: {other:?}"),
            }
            assert_eq!(files_in(work.path()), before, "{needle}");
        }

        // A rotation's ca.pem holding the old and the new CA: the key's certificate signs.
        let work = tempfile::tempdir().unwrap();
        let mut both = fs::read(other.path().join(CA_CERT_FILE)).unwrap();
        both.extend_from_slice(&ca_pem);
        fs::write(work.path().join(CA_CERT_FILE), &both).unwrap();
        fs::write(work.path().join(CA_KEY_FILE), &dir_key).unwrap();
        issue(&options(work.path(), Role::Executor, &["kv"])).unwrap();
        fs::write(work.path().join(CA_CERT_FILE), &ca_pem).unwrap();
        assert_eq!(load(work.path(), "executor-kv").role(), Role::Executor);
    }

    #[test]
    fn issued_certificates_end_no_later_than_the_ca() {
        let dir = initialised();
        let mut ca = read_ca(dir.path()).unwrap();
        let now = OffsetDateTime::now_utc();
        ca.not_after = now + time::Duration::days(10);
        let validity = Validity::from(now)
            .unwrap()
            .under_ca(&ca, now, dir.path())
            .unwrap();
        assert_eq!(validity.cert_not_after, ca.not_after);
        assert_eq!(validity.ca_not_after, ca.not_after);
        ca.not_after = now - time::Duration::days(1);
        match Validity::from(now).unwrap().under_ca(&ca, now, dir.path()) {
            Err(CtlError::BadInput(message)) => assert!(message.contains("expired"), "{message}"),
            other => panic!("{:?}", other.map(|v| v.cert_not_after)),
        }
    }

    #[test]
    fn issue_replaces_files_only_with_force() {
        let dir = initialised();
        let limited = options(dir.path(), Role::Executor, &["kv"]);
        issue(&limited).unwrap();
        let first = files_in(dir.path());
        match issue(&limited) {
            Err(CtlError::BadInput(message)) => assert!(
                message.contains("executor-kv.pem, executor-kv-key.pem already exist"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(files_in(dir.path()), first);
        issue(&IssueOptions {
            force: true,
            ..limited
        })
        .unwrap();
        let second = files_in(dir.path());
        assert_ne!(second["executor-kv.pem"], first["executor-kv.pem"]);
        assert_ne!(second["executor-kv-key.pem"], first["executor-kv-key.pem"]);
        assert_eq!(second[CA_KEY_FILE], first[CA_KEY_FILE]);
        assert_eq!(
            load(dir.path(), "executor-kv").scope(),
            &NamespaceScope::only(["kv"]).unwrap()
        );

        // An unlimited one is named like `certs init`'s, so it is in the way of that one.
        let unlimited = options(dir.path(), Role::Executor, &[]);
        assert!(matches!(issue(&unlimited), Err(CtlError::BadInput(_))));
        assert_eq!(files_in(dir.path()), second);
        issue(&IssueOptions {
            force: true,
            ..unlimited
        })
        .unwrap();
        assert_ne!(files_in(dir.path())["executor.pem"], second["executor.pem"]);
        assert_eq!(load(dir.path(), "executor").scope(), &NamespaceScope::All);
    }

    #[test]
    fn certs_issue_parses_its_arguments() {
        let parse = |argv: &[&str]| match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Noun::Certs {
                verb: CertsVerb::Issue(options),
            }) => Ok(options),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let argv = [
            "leaseholdctl",
            "certs",
            "issue",
            "executor",
            "--namespace",
            "orders",
            "-n",
            "kv,eu",
            "--dir",
            "d",
            "--host",
            "h1",
            "--name",
            "s",
            "--force",
        ];
        assert_eq!(
            parse(&argv).unwrap(),
            IssueOptions {
                hosts: vec!["h1".to_owned()],
                name: Some("s".to_owned()),
                force: true,
                ..options(Path::new("d"), Role::Executor, &["orders", "kv", "eu"])
            }
        );
        // The global -n before the noun means the same.
        assert_eq!(
            parse(&[
                "leaseholdctl",
                "-n",
                "kv",
                "certs",
                "issue",
                "admin",
                "--dir",
                "d"
            ])
            .unwrap(),
            options(Path::new("d"), Role::Admin, &["kv"])
        );
        assert_eq!(
            parse(&["leaseholdctl", "certs", "issue", "admin", "--dir", "d"]).unwrap(),
            options(Path::new("d"), Role::Admin, &[])
        );

        for (role, needle) in [
            ("manager", "certs init --managers"),
            ("manager-1", "certs init --managers"),
            ("operator", "`executor` or `admin`"),
        ] {
            let error = parse(&["leaseholdctl", "certs", "issue", role, "--dir", "d"]).unwrap_err();
            assert_eq!(
                error.exit_code(),
                i32::from(super::super::exit::code::BAD_INPUT)
            );
            assert!(error.to_string().contains(needle), "{error}");
        }
        assert!(parse(&["leaseholdctl", "certs", "issue", "admin"]).is_err());
    }

    #[tokio::test]
    async fn certs_issue_runs_with_either_output() {
        let dir = initialised();
        let path = dir.path().to_str().unwrap();
        let ctl = |argv: Vec<&str>| {
            let cli = Cli::try_parse_from(argv).unwrap();
            async move {
                let mut printed = Vec::new();
                run(cli, &mut printed)
                    .await
                    .map(|()| String::from_utf8(printed).unwrap())
            }
        };

        let json = ctl(vec![
            "leaseholdctl",
            "-o",
            "json",
            "certs",
            "issue",
            "executor",
            "--namespace",
            "kv",
            "--dir",
            path,
        ])
        .await
        .unwrap();
        let report: IssueReport = serde_json::from_str(&json).unwrap();
        assert_eq!(report.namespaces, Some(vec!["kv".to_owned()]));
        assert_eq!(report.files[0].path, dir.path().join("executor-kv.pem"));
        assert_eq!(
            report.files[0].role.as_deref(),
            Some("urn:leasehold:executor:kv")
        );

        let table = ctl(vec![
            "leaseholdctl",
            "certs",
            "issue",
            "admin",
            "--name",
            "ops",
            "--dir",
            path,
        ])
        .await
        .unwrap();
        assert!(table.contains("ops-key.pem"), "{table}");
        assert!(table.contains("may act in every namespace"), "{table}");

        // `certs init` still takes no namespace.
        let other = tempfile::tempdir().unwrap();
        let refused = ctl(vec![
            "leaseholdctl",
            "-n",
            "kv",
            "certs",
            "init",
            "--managers",
            "1",
            "--dir",
            other.path().to_str().unwrap(),
        ])
        .await
        .unwrap_err();
        assert!(refused.to_string().contains("`certs init`"), "{refused}");
    }

    /// The subject of `<stem>.pem` in `dir`, as the managers' audit log records it (P17.4).
    fn subject_of(dir: &Path, stem: &str) -> String {
        Role::subject_of_certificate(&certificate(&dir.join(cert_file_of(stem))))
    }

    /// The key id of `<stem>.pem` in `dir`, computed from the certificate alone.
    fn key_id_of(dir: &Path, stem: &str) -> String {
        let der = certificate(&dir.join(cert_file_of(stem)));
        let (_, parsed) = X509Certificate::from_der(der.as_ref()).unwrap();
        let digest = Sha256::digest(parsed.public_key().raw);
        digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
    }

    /// Issue 55, finding 7: every certificate `certs init` and `certs issue` make has a subject of
    /// its own, naming its role, the namespaces it is limited to and its holder (the stem), so
    /// the audit log tells a namespace-limited admin from the unlimited one, and two admins of
    /// one kind apart.
    #[test]
    fn every_certificate_has_a_subject_of_its_own_naming_role_and_namespaces() {
        let dir = initialised();
        let path = dir.path();
        let limited = issue(&options(path, Role::Admin, &["orders", "kv"])).unwrap();
        let unlimited = issue(&IssueOptions {
            name: Some("ops-alice".to_owned()),
            ..options(path, Role::Admin, &[])
        })
        .unwrap();
        let second_unlimited = issue(&IssueOptions {
            name: Some("ops-bob".to_owned()),
            ..options(path, Role::Admin, &[])
        })
        .unwrap();
        let executor = issue(&options(path, Role::Executor, &["kv"])).unwrap();

        let expected = [
            ("manager-1", "manager 1"),
            ("executor", "executor of every namespace"),
            ("admin", "admin of every namespace"),
            ("admin-kv", "admin of namespaces kv orders"),
            ("ops-alice", "admin of every namespace"),
            ("ops-bob", "admin of every namespace"),
            ("executor-kv", "executor of namespaces kv"),
        ];
        let mut subjects = Vec::new();
        for (stem, unit) in expected {
            let subject = subject_of(path, stem);
            assert_eq!(
                subject,
                format!(
                    "CN={stem} {}, OU={unit}, O=Leasehold",
                    key_id_of(path, stem)
                ),
                "{stem}"
            );
            subjects.push(subject);
        }
        let mut distinct = subjects.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), subjects.len(), "{subjects:#?}");

        // The report names the subject the certificate carries, and so does its table.
        for (report, stem) in [
            (&limited, "admin-kv"),
            (&unlimited, "ops-alice"),
            (&second_unlimited, "ops-bob"),
            (&executor, "executor-kv"),
        ] {
            assert_eq!(report.subject, subject_of(path, stem));
            assert!(report
                .files
                .iter()
                .all(|file| file.subject.as_deref() == Some(report.subject.as_str())));
            assert!(render_issue(report).contains(&report.subject));
        }

        // The same certificate issued again under the same name has a subject of its own too.
        issue(&IssueOptions {
            force: true,
            ..options(path, Role::Admin, &["orders", "kv"])
        })
        .unwrap();
        let reissued = subject_of(path, "admin-kv");
        assert!(reissued.starts_with("CN=admin-kv "), "{reissued}");
        assert!(
            reissued.ends_with(", OU=admin of namespaces kv orders, O=Leasehold"),
            "{reissued}"
        );
        assert_ne!(reissued, limited.subject);

        // A second `certs init` makes other subjects for the same files.
        let other = initialised();
        for stem in ["manager-1", "executor", "admin"] {
            assert_ne!(
                subject_of(other.path(), stem),
                subject_of(path, stem),
                "{stem}"
            );
        }
    }

    /// A subject's attributes stay within RFC 5280's 64 characters however many namespaces a
    /// certificate is limited to, and however long its stem.
    #[test]
    fn subject_attributes_stay_within_64_characters() {
        let many: Vec<String> = (0..1024).map(|i| format!("{i:0>63}")).collect();
        let scope = NamespaceScope::only(many.iter().cloned()).unwrap();
        let label = scope_label(Role::Executor, &scope);
        assert_eq!(label, "executor of 1024 namespaces ...");
        let short: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
        let label = scope_label(
            Role::Admin,
            &NamespaceScope::only(short.iter().cloned()).unwrap(),
        );
        assert!(
            label.starts_with("admin of 40 namespaces n0 n1 "),
            "{label}"
        );
        assert!(label.ends_with(" ..."), "{label}");
        assert!(label.len() <= MAX_SUBJECT_ATTRIBUTE_CHARS, "{label}");
        let fits = NamespaceScope::only(["kv", "orders"]).unwrap();
        assert_eq!(
            scope_label(Role::Admin, &fits),
            "admin of namespaces kv orders"
        );

        let dir = initialised();
        let longest = "x".repeat(MAX_FILE_STEM_CHARS);
        issue(&IssueOptions {
            name: Some(longest.clone()),
            ..options(dir.path(), Role::Executor, &[])
        })
        .unwrap();
        let der = certificate(&dir.path().join(cert_file_of(&longest)));
        let (_, parsed) = X509Certificate::from_der(der.as_ref()).unwrap();
        for attribute in parsed.subject().iter_attributes() {
            let value = attribute.as_str().unwrap();
            assert!(value.len() <= MAX_SUBJECT_ATTRIBUTE_CHARS, "{value}");
        }
        let common_name = parsed
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            common_name,
            format!(
                "{} {}",
                &longest[..MAX_SUBJECT_ATTRIBUTE_CHARS - KEY_ID_HEX_DIGITS - 1],
                key_id_of(dir.path(), &longest)
            )
        );
    }

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
            role: Some(Role::Admin.san_uri()),
            subject: Some("CN=admin 00000000, OU=admin of every namespace, O=Leasehold".into()),
        };
        assert!(!format!("{file:?}").contains("SECRET"));
    }
}
