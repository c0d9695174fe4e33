//! TLS for every listener and every client, and the role a certificate proves (PROTOCOL §13).
//!
//! A process loads its three files once ([`TlsConfig::load`]): its certificate (chain), its
//! private key and the cluster's CA. From them come the one server configuration (a client
//! certificate chained to the CA is required, P13.2) and the one client configuration (the
//! process's own certificate is presented; only the CA is trusted, and the server's name is
//! verified). Both use the aws-lc-rs provider explicitly, the one reqwest links, so nothing
//! depends on a process-wide default provider being installed.
//!
//! Who a caller is comes from its certificate alone (P13.1): exactly one URI subject alternative
//! name `urn:leasehold:manager:<id>`, `urn:leasehold:executor` or `urn:leasehold:admin`
//! ([`Role::of_certificate`]). An executor's or admin's certificate may instead be limited to
//! namespaces (P18.2): one or more URIs `urn:leasehold:executor:<namespace>` (or
//! `urn:leasehold:admin:<namespace>`), all of one role, and no unlimited one beside them
//! ([`Role::and_scope_of_certificate`], [`NamespaceScope`]). What each role may do is the
//! authorization layer's business (P13.3), not this module's.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// `text` with every character outside printable ASCII replaced by `?`: fit for a header value and
/// a log line.
pub fn printable_ascii(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// Every Leasehold role URI starts with this (compared without regard to case when counting, so
/// a differently spelled second role is refused rather than ignored).
pub const ROLE_URI_PREFIX: &str = "urn:leasehold:";

/// Most namespaces one certificate may be limited to (P18.2): as many as a cluster holds.
pub const MAX_SCOPED_NAMESPACES: usize = crate::wire::MAX_NAMESPACES;

/// Largest certificate, key or CA file read. Real ones are a few KiB (a CA bundle kept during a
/// rotation, a few more); the bound stops a mistyped path such as `/dev/zero` from being read
/// forever.
pub const MAX_PEM_FILE_BYTES: u64 = 1024 * 1024;

/// Longest role URI quoted in an error. The URI comes from a certificate, so an error that may be
/// logged shows a bounded, escaped prefix of it.
const MAX_QUOTED_URI_CHARS: usize = 96;

/// ALPN protocols the server offers: HTTP/2 and HTTP/1.1 (P13.2). A server that speaks only one of
/// them narrows `alpn_protocols` on its copy of the configuration.
const SERVER_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// ALPN protocols the client offers: only HTTP/1.1, because the workspace's reqwest is built
/// without its `http2` feature and could not speak HTTP/2 if the server chose it.
const CLIENT_ALPN: [&[u8]; 1] = [b"http/1.1"];

/// The three files of P13.2: `--cert-file`, `--key-file`, `--trusted-ca-file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This process's certificate, PEM; intermediates, if any, follow it in the same file.
    pub cert_file: PathBuf,
    /// The private key of `cert_file`, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// The cluster's CA certificate(s), PEM: the only issuers trusted, for servers and clients.
    /// More than one is allowed, so a new CA can be trusted beside the old during a rotation.
    pub trusted_ca_file: PathBuf,
}

/// Why a TLS file, a certificate or a role was refused. Each message is one line and names the
/// file when there is one.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file was read but its contents are unusable; `problem` says how.
    #[error("{}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
    #[error(
        "certificate carries no leasehold role (a URI subject alternative name \
         urn:leasehold:manager:<id>, urn:leasehold:executor or urn:leasehold:admin)"
    )]
    NoRole,
    #[error(
        "certificate carries {} leasehold role URIs ({}); exactly one is allowed, or several \
         namespaces of one executor or admin role (urn:leasehold:executor:<namespace>, at most \
         {MAX_SCOPED_NAMESPACES})",
        uris.len(),
        uris.join(", ")
    )]
    SeveralRoles {
        /// Quoted and shortened, as they appear in the message.
        uris: Vec<String>,
    },
    #[error(
        "certificate's role URI {uri} is none of urn:leasehold:manager:<id>, \
         urn:leasehold:executor[:<namespace>], urn:leasehold:admin[:<namespace>]"
    )]
    UnknownRole {
        /// Quoted and shortened, as it appears in the message.
        uri: String,
    },
    #[error("not a readable X.509 certificate: {reason}")]
    BadCertificate { reason: String },
    /// The crypto provider cannot make a configuration at all (not a problem of any file).
    #[error("the TLS crypto provider: {0}")]
    Provider(String),
}

/// Who a caller is (P13.1), proved by a certificate chained to the cluster's CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A manager, with its Raft node id: `urn:leasehold:manager:<id>`.
    Manager { node_id: u64 },
    /// An executor: `urn:leasehold:executor`. Which executor is proved by its credential (P13.4),
    /// not by the certificate.
    Executor,
    /// An operator: `urn:leasehold:admin`.
    Admin,
}

/// The namespaces a certificate may act in (PROTOCOL P18.2): every one, or only those its role
/// URIs name. Reads are not limited by it; what it changes is (docs/SECURITY.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum NamespaceScope {
    /// An unlimited certificate (`urn:leasehold:executor`, `urn:leasehold:admin`, a manager's).
    #[default]
    All,
    /// Only these, ascending and each once.
    Only(Arc<[String]>),
}

impl NamespaceScope {
    /// The scope of exactly `namespaces` (sorted and deduplicated here). Each must be a
    /// namespace name ([`crate::wire::check_namespace_name`]); an empty list is refused.
    pub fn only<I, S>(namespaces: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut names: Vec<String> = namespaces.into_iter().map(Into::into).collect();
        if names.is_empty() {
            return Err("a limited certificate names at least one namespace".to_owned());
        }
        for name in &names {
            crate::wire::check_namespace_name(name).map_err(|e| e.to_string())?;
        }
        names.sort_unstable();
        names.dedup();
        if names.len() > MAX_SCOPED_NAMESPACES {
            return Err(format!(
                "{} namespaces; a certificate is limited to at most {MAX_SCOPED_NAMESPACES}",
                names.len()
            ));
        }
        Ok(NamespaceScope::Only(names.into()))
    }

    /// Whether a caller of this scope may act in `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            NamespaceScope::All => true,
            NamespaceScope::Only(names) => names.iter().any(|name| name == namespace),
        }
    }

    /// Whether the scope leaves some namespace out.
    pub fn is_limited(&self) -> bool {
        matches!(self, NamespaceScope::Only(_))
    }

    /// The namespaces, comma-separated (names hold no comma), as a follower forwards them to
    /// the leader; `None` for [`NamespaceScope::All`].
    pub fn header_value(&self) -> Option<String> {
        match self {
            NamespaceScope::All => None,
            NamespaceScope::Only(names) => Some(names.join(",")),
        }
    }

    /// The scope a [`NamespaceScope::header_value`] stands for.
    pub fn from_header_value(value: &str) -> Result<Self, String> {
        Self::only(value.split(','))
    }
}

impl fmt::Display for NamespaceScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamespaceScope::All => f.write_str("every namespace"),
            NamespaceScope::Only(names) => write!(f, "namespaces {}", names.join(", ")),
        }
    }
}

impl Role {
    /// The URI subject alternative name that carries this role limited to `namespace`
    /// (P18.2), for issuing a certificate; `None` for a manager, which is never limited.
    pub fn scoped_san_uri(&self, namespace: &str) -> Option<String> {
        match self {
            Role::Manager { .. } => None,
            Role::Executor | Role::Admin => Some(format!("{}:{namespace}", self.san_uri())),
        }
    }

    /// The URI subject alternative name that carries this role, for issuing a certificate.
    pub fn san_uri(&self) -> String {
        match self {
            Role::Manager { node_id } => format!("{ROLE_URI_PREFIX}manager:{node_id}"),
            Role::Executor => format!("{ROLE_URI_PREFIX}executor"),
            Role::Admin => format!("{ROLE_URI_PREFIX}admin"),
        }
    }

    /// Parses one role URI, exactly as [`Role::san_uri`] writes it: lower case, the node id in
    /// decimal without sign or leading zeros, so each role has one spelling.
    pub fn from_san_uri(uri: &str) -> Result<Role, TlsError> {
        let unknown = || TlsError::UnknownRole { uri: quote(uri) };
        match uri.strip_prefix(ROLE_URI_PREFIX).ok_or_else(unknown)? {
            "executor" => Ok(Role::Executor),
            "admin" => Ok(Role::Admin),
            rest => rest
                .strip_prefix("manager:")
                .and_then(parse_node_id)
                .map(|node_id| Role::Manager { node_id })
                .ok_or_else(unknown),
        }
    }

    /// The role of a certificate: its one Leasehold role URI among the subject alternative names
    /// (other URIs, such as a SPIFFE id, are ignored). None, two or more, or one that does not
    /// parse are refused.
    ///
    /// This reads the certificate only; it does not check who issued it. Call it on a certificate
    /// the TLS handshake has already verified against the CA (a peer's), or on one's own.
    /// The subject of a certificate as RFC 4514 writes it (`CN=alice,O=ops`), in printable ASCII
    /// (anything else `?`), for the audit log (P17.4); empty when it cannot be parsed.
    pub fn subject_of_certificate(certificate: &CertificateDer<'_>) -> String {
        X509Certificate::from_der(certificate.as_ref())
            .map(|(_, parsed)| printable_ascii(&parsed.subject().to_string()))
            .unwrap_or_default()
    }

    pub fn of_certificate(certificate: &CertificateDer<'_>) -> Result<Role, TlsError> {
        Self::and_scope_of_certificate(certificate).map(|(role, _)| role)
    }

    /// [`Role::of_certificate`] with the namespaces the certificate is limited to (P18.2): one
    /// unlimited role URI, or one or more `urn:leasehold:executor:<namespace>` (or
    /// `admin:<namespace>`) of one role and nothing else. A mix is refused, so a certificate
    /// never means more than its issuer could have read off it.
    pub fn and_scope_of_certificate(
        certificate: &CertificateDer<'_>,
    ) -> Result<(Role, NamespaceScope), TlsError> {
        let (rest, parsed) = X509Certificate::from_der(certificate.as_ref()).map_err(|e| {
            TlsError::BadCertificate {
                reason: e.to_string(),
            }
        })?;
        if !rest.is_empty() {
            return Err(TlsError::BadCertificate {
                reason: format!("{} bytes after the certificate", rest.len()),
            });
        }
        // An error here is a duplicated or malformed extension: refused, never read as "no SAN".
        let names = parsed
            .subject_alternative_name()
            .map_err(|e| TlsError::BadCertificate {
                reason: format!("subject alternative names: {e}"),
            })?;
        let role_uris: Vec<&str> = names
            .iter()
            .flat_map(|extension| extension.value.general_names.iter())
            .filter_map(|name| match name {
                GeneralName::URI(uri) => Some(*uri),
                _ => None,
            })
            .filter(|uri| is_role_uri(uri))
            .collect();
        let several = || TlsError::SeveralRoles {
            uris: role_uris.iter().map(|uri| quote(uri)).collect(),
        };
        match role_uris.as_slice() {
            [] => Err(TlsError::NoRole),
            [uri] => parse_role_uri(uri),
            uris if uris.len() > MAX_SCOPED_NAMESPACES => Err(several()),
            [first, others @ ..] => {
                let (role, _) = parse_role_uri(first)?;
                let mut namespaces = Vec::with_capacity(others.len() + 1);
                for uri in role_uris.iter() {
                    match parse_scoped_role_uri(uri)? {
                        (kind, Some(namespace)) if kind == role => namespaces.push(namespace),
                        _ => return Err(several()),
                    }
                }
                let scope = NamespaceScope::only(namespaces).map_err(|_| several())?;
                Ok((role, scope))
            }
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Manager { node_id } => write!(f, "manager {node_id}"),
            Role::Executor => f.write_str("executor"),
            Role::Admin => f.write_str("admin"),
        }
    }
}

/// One role URI of a certificate, with the namespace it is limited to.
fn parse_role_uri(uri: &str) -> Result<(Role, NamespaceScope), TlsError> {
    let (role, namespace) = parse_scoped_role_uri(uri)?;
    let scope = match namespace {
        None => NamespaceScope::All,
        Some(namespace) => NamespaceScope::Only(Arc::from([namespace])),
    };
    Ok((role, scope))
}

/// `urn:leasehold:executor:<namespace>` and `urn:leasehold:admin:<namespace>` (P18.2), each
/// namespace in its one spelling ([`crate::wire::check_namespace_name`]); any other role URI as
/// [`Role::from_san_uri`] reads it, unlimited.
fn parse_scoped_role_uri(uri: &str) -> Result<(Role, Option<String>), TlsError> {
    let unknown = || TlsError::UnknownRole { uri: quote(uri) };
    let rest = uri.strip_prefix(ROLE_URI_PREFIX).ok_or_else(unknown)?;
    let scoped = |role: Role, namespace: &str| {
        crate::wire::check_namespace_name(namespace)
            .map(|()| (role, Some(namespace.to_owned())))
            .map_err(|_| unknown())
    };
    if let Some(namespace) = rest.strip_prefix("executor:") {
        return scoped(Role::Executor, namespace);
    }
    if let Some(namespace) = rest.strip_prefix("admin:") {
        return scoped(Role::Admin, namespace);
    }
    Role::from_san_uri(uri).map(|role| (role, None))
}

/// A URI that claims to be a Leasehold role, whatever its case.
fn is_role_uri(uri: &str) -> bool {
    uri.get(..ROLE_URI_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(ROLE_URI_PREFIX))
}

/// A node id in its one spelling: decimal digits, no sign, no leading zero (except `0` itself).
fn parse_node_id(text: &str) -> Option<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

/// `text` escaped and shortened for an error message (it may come from a certificate).
fn quote(text: &str) -> String {
    if text.chars().count() <= MAX_QUOTED_URI_CHARS {
        format!("{text:?}")
    } else {
        let prefix: String = text.chars().take(MAX_QUOTED_URI_CHARS).collect();
        format!("{prefix:?}...")
    }
}

/// The crypto provider of every configuration here: aws-lc-rs, the one reqwest already links.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A process's TLS identity, built once at start from [`TlsFiles`] and handed to the one server
/// builder and the one client builder.
#[derive(Clone)]
pub struct TlsConfig {
    /// Where it was loaded from, for messages.
    files: TlsFiles,
    /// The role this process's own certificate proves; a process with no role could not be
    /// accepted by any peer, so loading refuses it.
    role: Role,
    /// The namespaces its certificate is limited to (P18.2).
    scope: NamespaceScope,
    server: Arc<ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

/// Names the files and the role only: the configurations hold the private key.
impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("role", &self.role)
            .field("scope", &self.scope)
            .field("cert_file", &self.files.cert_file)
            .field("key_file", &self.files.key_file)
            .field("trusted_ca_file", &self.files.trusted_ca_file)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Reads and checks the three files, and builds both configurations. Everything that can be
    /// wrong with them is found here, at start, rather than at the first handshake: unreadable or
    /// empty files, a key that is not the certificate's, a certificate not issued by the CA (or
    /// expired, or without client-authentication use), a certificate without exactly one role.
    pub fn load(files: &TlsFiles) -> Result<TlsConfig, TlsError> {
        let provider = crypto_provider();
        let roots = read_roots(&files.trusted_ca_file)?;

        let chain = read_certificates(&files.cert_file)?;
        let key = read_private_key(&files.key_file)?;
        let Some((own, intermediates)) = chain.split_first() else {
            // `read_certificates` refuses an empty file; kept so an empty chain can never pass.
            return Err(invalid(&files.cert_file, "no certificate"));
        };
        let (role, scope) = Role::and_scope_of_certificate(own).map_err(|e| TlsError::Invalid {
            path: files.cert_file.clone(),
            problem: e.to_string(),
        })?;
        let verifier = client_verifier(files, &roots, &provider, own, intermediates)?;

        let key_mismatch = |e: rustls::Error| TlsError::Invalid {
            path: files.key_file.clone(),
            problem: format!(
                "not usable with the certificate in {}: {e}",
                files.cert_file.display()
            ),
        };
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Provider(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(key_mismatch)?;
        server.alpn_protocols = SERVER_ALPN.iter().map(|p| p.to_vec()).collect();

        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Provider(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(key_mismatch)?;
        client.alpn_protocols = CLIENT_ALPN.iter().map(|p| p.to_vec()).collect();

        Ok(TlsConfig {
            files: files.clone(),
            role,
            scope,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The role this process's own certificate proves.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The namespaces this process's certificate is limited to (P18.2).
    pub fn scope(&self) -> &NamespaceScope {
        &self.scope
    }

    /// The files this was loaded from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// For every listener: requires a client certificate chained to the CA, offers ALPN `h2` and
    /// `http/1.1`. The role of the verified peer is [`Role::of_certificate`] of the first of the
    /// connection's `peer_certificates()`.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// For every outgoing call: presents this process's certificate, trusts only the CA, verifies
    /// the server's name (a DNS name or IP address subject alternative name). For reqwest 0.13's
    /// `ClientBuilder::tls_backend_preconfigured` (or [`TlsConfig::reqwest_builder`]).
    pub fn client_config(&self) -> rustls::ClientConfig {
        rustls::ClientConfig::clone(&self.client)
    }

    /// A reqwest client builder with [`TlsConfig::client_config`], that follows no redirects
    /// (P13.6) and refuses `http://` URLs (under TLS every URL is `https://`, P13.2). Timeouts and
    /// the rest are the caller's.
    pub fn reqwest_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .https_only(true)
            .tls_backend_preconfigured(self.client_config())
    }
}

/// The trusted CA file's certificates as roots, each one usable as a CA.
fn read_roots(trusted_ca_file: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let ca_certificates = read_certificates(trusted_ca_file)?;
    let mut roots = RootCertStore::empty();
    for certificate in ca_certificates {
        roots.add(certificate).map_err(|e| TlsError::Invalid {
            path: trusted_ca_file.to_path_buf(),
            problem: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// The verifier of client certificates against `roots`, once it accepts this process's own
/// certificate (`own`, with its `intermediates`).
fn client_verifier(
    files: &TlsFiles,
    roots: &Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
    own: &CertificateDer<'static>,
    intermediates: &[CertificateDer<'static>],
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| TlsError::Invalid {
            path: files.trusted_ca_file.clone(),
            problem: format!("cannot verify client certificates with it: {e}"),
        })?;
    // Every process is also a client of its peers, so its own certificate must pass what a
    // peer's server will check; refusing now names the file instead of failing every call.
    verifier
        .verify_client_cert(own, intermediates, UnixTime::now())
        .map_err(|e| TlsError::Invalid {
            path: files.cert_file.clone(),
            problem: format!(
                "not accepted by the CA in {}: {e}",
                files.trusted_ca_file.display()
            ),
        })?;
    Ok(verifier)
}

fn invalid(path: &Path, problem: &str) -> TlsError {
    TlsError::Invalid {
        path: path.to_owned(),
        problem: problem.to_owned(),
    }
}

/// Reads at most [`MAX_PEM_FILE_BYTES`] of `path`; a larger file is refused, not cut.
fn read_bounded(path: &Path) -> Result<Vec<u8>, TlsError> {
    let read_error = |source| TlsError::Read {
        path: path.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    File::open(path)
        .map_err(read_error)?
        .take(MAX_PEM_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(invalid(
            path,
            &format!("larger than {MAX_PEM_FILE_BYTES} bytes; not a PEM certificate or key"),
        ));
    }
    Ok(bytes)
}

/// Every `CERTIFICATE` block of a PEM file, in order; at least one.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_bounded(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, &format!("bad PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(invalid(path, "no PEM CERTIFICATE block"));
    }
    Ok(certificates)
}

/// The first private key block of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_bounded(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => invalid(path, "no PEM private key block"),
        other => invalid(path, &format!("bad PEM: {other}")),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, SanType,
    };
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    use super::*;

    /// A CA made in the test.
    struct TestCa {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn test_ca(name: &str) -> TestCa {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate and key issued by `ca`, with these URI and DNS names, for server and client
    /// use. Returns (certificate PEM, key PEM).
    fn issue(ca: &TestCa, uris: &[&str], dns: &[&str]) -> (String, String) {
        let names: Vec<String> = dns.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*uri).try_into().unwrap()));
        }
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    /// Writes a certificate, its key and a CA file into `dir` under `name`.
    fn write_files(dir: &Path, name: &str, (cert, key): &(String, String), ca: &str) -> TlsFiles {
        let files = TlsFiles {
            cert_file: dir.join(format!("{name}.pem")),
            key_file: dir.join(format!("{name}-key.pem")),
            trusted_ca_file: dir.join(format!("{name}-ca.pem")),
        };
        std::fs::write(&files.cert_file, cert).unwrap();
        std::fs::write(&files.key_file, key).unwrap();
        std::fs::write(&files.trusted_ca_file, ca).unwrap();
        files
    }

    fn load(dir: &Path, ca: &TestCa, role: Role) -> TlsConfig {
        let pair = issue(ca, &[&role.san_uri()], &["localhost"]);
        let name = role.san_uri().replace(':', "-");
        TlsConfig::load(&write_files(dir, &name, &pair, &ca.pem)).unwrap()
    }

    #[test]
    fn roles_round_trip_through_their_uri() {
        for role in [
            Role::Manager { node_id: 1 },
            Role::Manager { node_id: 0 },
            Role::Manager { node_id: u64::MAX },
            Role::Executor,
            Role::Admin,
        ] {
            assert_eq!(Role::from_san_uri(&role.san_uri()).unwrap(), role);
        }
        assert_eq!(
            Role::Manager { node_id: 3 }.san_uri(),
            "urn:leasehold:manager:3"
        );
    }

    #[test]
    fn p13_1_each_role_has_one_spelling() {
        for uri in [
            "urn:leasehold:manager:",
            "urn:leasehold:manager:01",
            "urn:leasehold:manager:+1",
            "urn:leasehold:manager:-1",
            "urn:leasehold:manager:1 ",
            "urn:leasehold:manager:18446744073709551616",
            "urn:leasehold:manager",
            "urn:leasehold:Admin",
            "URN:LEASEHOLD:admin",
            "urn:leasehold:executor:ex-4",
            "urn:leasehold:root",
            "urn:other:admin",
        ] {
            assert!(
                matches!(Role::from_san_uri(uri), Err(TlsError::UnknownRole { .. })),
                "{uri}"
            );
        }
    }

    #[test]
    fn p13_1_a_certificate_proves_its_one_role() {
        let ca = test_ca("test CA");
        for role in [Role::Manager { node_id: 7 }, Role::Executor, Role::Admin] {
            let (cert, _) = issue(&ca, &[&role.san_uri()], &["localhost"]);
            assert_eq!(Role::of_certificate(&der(&cert)).unwrap(), role);
        }
        // Other URIs are not roles and do not count.
        let (cert, _) = issue(
            &ca,
            &["spiffe://cluster/ns/x", "urn:leasehold:admin"],
            &["localhost"],
        );
        assert_eq!(Role::of_certificate(&der(&cert)).unwrap(), Role::Admin);
    }

    #[test]
    fn p13_1_no_role_several_roles_or_a_bad_role_is_refused() {
        let ca = test_ca("test CA");
        let role_of = |uris: &[&str]| {
            let (cert, _) = issue(&ca, uris, &["localhost"]);
            Role::of_certificate(&der(&cert))
        };
        assert!(matches!(role_of(&[]), Err(TlsError::NoRole)));
        assert!(matches!(
            role_of(&["spiffe://cluster/x"]),
            Err(TlsError::NoRole)
        ));
        let two = role_of(&["urn:leasehold:executor", "urn:leasehold:admin"]).unwrap_err();
        assert!(matches!(two, TlsError::SeveralRoles { .. }), "{two}");
        assert!(two.to_string().contains("\"urn:leasehold:admin\""), "{two}");
        // The same role twice is still two role URIs: one certificate, one role.
        assert!(matches!(
            role_of(&["urn:leasehold:admin", "urn:leasehold:admin"]),
            Err(TlsError::SeveralRoles { .. })
        ));
        // A second role in other case is counted, not ignored.
        assert!(matches!(
            role_of(&["urn:leasehold:executor", "URN:Leasehold:admin"]),
            Err(TlsError::SeveralRoles { .. })
        ));
        assert!(matches!(
            role_of(&["urn:leasehold:manager:x"]),
            Err(TlsError::UnknownRole { .. })
        ));
        assert!(matches!(
            Role::of_certificate(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])),
            Err(TlsError::BadCertificate { .. })
        ));
    }

    #[test]
    fn p18_2_a_certificate_may_be_limited_to_namespaces_of_one_role() {
        let ca = test_ca("test CA");
        let of = |uris: &[&str]| {
            let (cert, _) = issue(&ca, uris, &["localhost"]);
            Role::and_scope_of_certificate(&der(&cert))
        };
        let only = |names: &[&str]| NamespaceScope::only(names.iter().copied()).unwrap();
        assert_eq!(
            of(&["urn:leasehold:executor"]).unwrap(),
            (Role::Executor, NamespaceScope::All)
        );
        assert_eq!(
            of(&["urn:leasehold:executor:kv"]).unwrap(),
            (Role::Executor, only(&["kv"]))
        );
        assert_eq!(
            of(&[
                "urn:leasehold:executor:orders",
                "spiffe://cluster/ns/x",
                "urn:leasehold:executor:kv",
            ])
            .unwrap(),
            (Role::Executor, only(&["kv", "orders"]))
        );
        assert_eq!(
            of(&["urn:leasehold:admin:kv"]).unwrap(),
            (Role::Admin, only(&["kv"]))
        );
        // A limited role never stands beside another role, limited or not.
        for mixed in [
            &["urn:leasehold:executor:kv", "urn:leasehold:admin:kv"][..],
            &["urn:leasehold:executor", "urn:leasehold:executor:kv"],
            &["urn:leasehold:executor:kv", "urn:leasehold:executor"],
            &["urn:leasehold:manager:1", "urn:leasehold:executor:kv"],
        ] {
            assert!(
                matches!(of(mixed), Err(TlsError::SeveralRoles { .. })),
                "{mixed:?}"
            );
        }
        // The namespace in its one spelling; managers are never limited.
        for bad in [
            "urn:leasehold:executor:",
            "urn:leasehold:executor:Orders",
            "urn:leasehold:executor:-kv",
            "urn:leasehold:admin:kv:x",
            "urn:leasehold:manager:1:kv",
        ] {
            assert!(
                matches!(of(&[bad]), Err(TlsError::UnknownRole { .. })),
                "{bad}"
            );
        }
        // The kind alone, for what reads only the role.
        let (cert, _) = issue(&ca, &["urn:leasehold:executor:kv"], &["localhost"]);
        assert_eq!(Role::of_certificate(&der(&cert)).unwrap(), Role::Executor);
    }

    #[test]
    fn p18_2_a_scope_allows_its_namespaces_and_travels_as_a_header() {
        let scope = NamespaceScope::only(["orders", "kv", "kv"]).unwrap();
        assert!(scope.allows("kv") && scope.allows("orders"));
        assert!(!scope.allows("default") && !scope.allows("k"));
        assert!(scope.is_limited());
        assert_eq!(scope.header_value().as_deref(), Some("kv,orders"));
        assert_eq!(
            NamespaceScope::from_header_value("kv,orders").unwrap(),
            scope
        );
        assert_eq!(scope.to_string(), "namespaces kv, orders");
        assert!(NamespaceScope::All.allows("anything"));
        assert_eq!(NamespaceScope::All.header_value(), None);
        for bad in ["", "kv,", "Kv", "kv,,orders"] {
            assert!(NamespaceScope::from_header_value(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Role::Executor.scoped_san_uri("kv").as_deref(),
            Some("urn:leasehold:executor:kv")
        );
        assert_eq!(Role::Manager { node_id: 1 }.scoped_san_uri("kv"), None);
    }

    #[test]
    fn role_errors_quote_and_bound_what_the_certificate_says() {
        let long = format!("urn:leasehold:{}\nforged log line", "x".repeat(500));
        let message = Role::from_san_uri(&long).unwrap_err().to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.len() < 300, "{message}");
    }

    #[test]
    fn load_reads_the_three_files_and_the_role() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let config = load(dir.path(), &ca, Role::Manager { node_id: 2 });
        assert_eq!(config.role(), Role::Manager { node_id: 2 });
        assert_eq!(
            config.server_config().alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert!(config.reqwest_builder().build().is_ok());
        // Debug names the files, never the key.
        let debug = format!("{config:?}");
        assert!(
            debug.contains("manager 2") || debug.contains("Manager"),
            "{debug}"
        );
        let key = std::fs::read_to_string(&config.files().key_file).unwrap();
        let key_body = key.lines().nth(1).unwrap();
        assert!(!debug.contains(key_body), "{debug}");
    }

    #[test]
    fn load_refuses_bad_files_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let other_ca = test_ca("other CA");
        let admin = issue(&ca, &["urn:leasehold:admin"], &["localhost"]);
        let good = write_files(dir.path(), "good", &admin, &ca.pem);
        let message = |files: &TlsFiles| TlsConfig::load(files).unwrap_err().to_string();

        let missing = TlsFiles {
            key_file: dir.path().join("absent.pem"),
            ..good.clone()
        };
        let text = message(&missing);
        assert!(text.contains("absent.pem: cannot read"), "{text}");

        // Another certificate's key.
        let other = issue(&ca, &["urn:leasehold:admin"], &["localhost"]);
        let wrong_key = write_files(
            dir.path(),
            "wrong-key",
            &(admin.0.clone(), other.1),
            &ca.pem,
        );
        let text = message(&wrong_key);
        assert!(
            text.starts_with(&wrong_key.key_file.display().to_string()),
            "{text}"
        );

        // Issued by another CA.
        let foreign = issue(&other_ca, &["urn:leasehold:admin"], &["localhost"]);
        let foreign = write_files(dir.path(), "foreign", &foreign, &ca.pem);
        let text = message(&foreign);
        assert!(
            text.starts_with(&foreign.cert_file.display().to_string()),
            "{text}"
        );
        assert!(text.contains("not accepted by the CA"), "{text}");

        // No role.
        let roleless = issue(&ca, &[], &["localhost"]);
        let roleless = write_files(dir.path(), "roleless", &roleless, &ca.pem);
        let text = message(&roleless);
        assert!(text.contains("no leasehold role"), "{text}");

        // Not PEM, or PEM of the wrong kind.
        std::fs::write(dir.path().join("junk.pem"), "hello\n").unwrap();
        let junk_ca = TlsFiles {
            trusted_ca_file: dir.path().join("junk.pem"),
            ..good.clone()
        };
        assert!(message(&junk_ca).contains("no PEM CERTIFICATE block"));
        let key_as_cert = TlsFiles {
            key_file: good.cert_file.clone(),
            ..good.clone()
        };
        assert!(message(&key_as_cert).contains("no PEM private key block"));
        for text in [message(&junk_ca), message(&key_as_cert)] {
            assert_eq!(text.lines().count(), 1, "{text}");
        }
    }

    /// A client configuration that trusts only `ca`, left for the test to say which certificate,
    /// if any, the client presents.
    fn client_trusting(
        ca: &TestCa,
    ) -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert> {
        let mut roots = RootCertStore::empty();
        roots.add(der(&ca.pem)).unwrap();
        rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
    }

    /// Server and client halves of one handshake over an in-memory stream. The server's result
    /// is the role of the client's certificate.
    async fn handshake(
        server: Arc<ServerConfig>,
        client: rustls::ClientConfig,
        server_name: &str,
    ) -> (Result<Role, String>, Result<(), String>) {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let server_side = async move {
            let mut stream = TlsAcceptor::from(server)
                .accept(server_io)
                .await
                .map_err(|e| e.to_string())?;
            let mut ping = [0u8; 4];
            stream
                .read_exact(&mut ping)
                .await
                .map_err(|e| e.to_string())?;
            let role = {
                let (_, connection) = stream.get_ref();
                let peer = connection
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .ok_or("no peer certificate")?;
                Role::of_certificate(peer).map_err(|e| e.to_string())?
            };
            // Answered, so the client keeps the connection open until the server is done with it.
            stream.write_all(b"pong").await.map_err(|e| e.to_string())?;
            stream.flush().await.map_err(|e| e.to_string())?;
            Ok(role)
        };
        let name = ServerName::try_from(server_name.to_owned()).unwrap();
        let client_side = async move {
            let mut stream = TlsConnector::from(Arc::new(client))
                .connect(name, client_io)
                .await
                .map_err(|e| e.to_string())?;
            stream.write_all(b"ping").await.map_err(|e| e.to_string())?;
            stream.flush().await.map_err(|e| e.to_string())?;
            let mut pong = [0u8; 4];
            stream
                .read_exact(&mut pong)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        };
        tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(server_side, client_side)
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn p13_2_a_client_certificate_from_the_ca_is_accepted_with_its_role() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let server = load(dir.path(), &ca, Role::Manager { node_id: 1 });
        let client = load(dir.path(), &ca, Role::Executor);
        let (server_result, client_result) =
            handshake(server.server_config(), client.client_config(), "localhost").await;
        assert_eq!(client_result, Ok(()));
        assert_eq!(server_result, Ok(Role::Executor));
    }

    #[tokio::test]
    async fn p13_2_a_client_certificate_from_another_ca_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let other_ca = test_ca("other CA");
        let server = load(dir.path(), &ca, Role::Manager { node_id: 1 });
        // Trusts the right CA for the server, but presents a certificate of another CA.
        let (cert, key) = issue(&other_ca, &["urn:leasehold:admin"], &["localhost"]);
        let client = client_trusting(&ca)
            .with_client_auth_cert(
                vec![der(&cert)],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap();
        let (server_result, _) = handshake(server.server_config(), client, "localhost").await;
        let error = server_result.unwrap_err();
        assert!(error.contains("UnknownIssuer"), "{error}");
    }

    #[tokio::test]
    async fn p13_2_a_client_without_a_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let server = load(dir.path(), &ca, Role::Manager { node_id: 1 });
        let client = client_trusting(&ca).with_no_client_auth();
        let (server_result, _) = handshake(server.server_config(), client, "localhost").await;
        let error = server_result.unwrap_err();
        assert!(error.contains("no certificates"), "{error}");
    }

    #[tokio::test]
    async fn p13_2_the_client_refuses_a_server_whose_name_does_not_match() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let server = load(dir.path(), &ca, Role::Manager { node_id: 1 });
        let client = load(dir.path(), &ca, Role::Manager { node_id: 2 });
        let (server_result, client_result) = handshake(
            server.server_config(),
            client.client_config(),
            "manager-9.example",
        )
        .await;
        let error = client_result.unwrap_err();
        assert!(error.contains("not valid for name"), "{error}");
        assert!(server_result.is_err());
    }

    #[tokio::test]
    async fn p13_2_the_client_refuses_a_server_of_another_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let other_dir = tempfile::tempdir().unwrap();
        let other_ca = test_ca("other CA");
        let impostor = load(other_dir.path(), &other_ca, Role::Manager { node_id: 1 });
        let client = load(dir.path(), &ca, Role::Admin);
        let (_, client_result) = handshake(
            impostor.server_config(),
            client.client_config(),
            "localhost",
        )
        .await;
        let error = client_result.unwrap_err();
        assert!(error.contains("UnknownIssuer"), "{error}");
    }

    /// During a CA rotation the trusted file holds the old and the new CA, and certificates of
    /// either are accepted both ways (docs/SECURITY.md, rotation).
    #[tokio::test]
    async fn a_trusted_ca_file_may_hold_two_cas_during_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let old_ca = test_ca("old CA");
        let new_ca = test_ca("new CA");
        let both = format!("{}{}", old_ca.pem, new_ca.pem);
        let old_pair = issue(&old_ca, &["urn:leasehold:manager:1"], &["localhost"]);
        let new_pair = issue(&new_ca, &["urn:leasehold:manager:2"], &["localhost"]);
        let old = TlsConfig::load(&write_files(dir.path(), "old", &old_pair, &both)).unwrap();
        let new = TlsConfig::load(&write_files(dir.path(), "new", &new_pair, &both)).unwrap();
        let (server_result, client_result) =
            handshake(old.server_config(), new.client_config(), "localhost").await;
        assert_eq!(client_result, Ok(()));
        assert_eq!(server_result, Ok(Role::Manager { node_id: 2 }));
        let (server_result, client_result) =
            handshake(new.server_config(), old.client_config(), "localhost").await;
        assert_eq!(client_result, Ok(()));
        assert_eq!(server_result, Ok(Role::Manager { node_id: 1 }));
    }

    /// The reqwest client built from the configuration does a real HTTPS request (so the
    /// preconfigured rustls type is the one reqwest knows), verifies an IP address name and does
    /// not follow a redirect.
    #[tokio::test]
    async fn p13_6_reqwest_builder_speaks_tls_and_follows_no_redirect() {
        let dir = tempfile::tempdir().unwrap();
        let ca = test_ca("test CA");
        let server = load(dir.path(), &ca, Role::Executor);
        let client = load(dir.path(), &ca, Role::Manager { node_id: 1 });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(server.server_config());
        let served = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut stream = acceptor.accept(tcp).await.unwrap();
            let role = {
                let (_, connection) = stream.get_ref();
                Role::of_certificate(&connection.peer_certificates().unwrap()[0]).unwrap()
            };
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = stream.read(&mut buffer).await.unwrap();
                assert!(n > 0, "request ended early");
                request.extend_from_slice(&buffer[..n]);
            }
            stream
                .write_all(
                    b"HTTP/1.1 302 Found\r\nlocation: https://127.0.0.1:1/elsewhere\r\n\
                      content-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await
                .unwrap();
            stream.shutdown().await.unwrap();
            role
        });
        let http = client.reqwest_builder().build().unwrap();
        let response = http
            .get(format!("https://{address}/v1/cluster"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 302);
        assert_eq!(served.await.unwrap(), Role::Manager { node_id: 1 });
        // Under TLS a plaintext URL is a mistake, refused before anything is sent.
        assert!(http.get(format!("http://{address}/")).send().await.is_err());
    }
}
