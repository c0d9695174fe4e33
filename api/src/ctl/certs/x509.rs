//! The certificates themselves: subject names, validity, the CA read back, distinguished names.

use super::*;

/// `127.0.0.1`, `localhost`, then each host once, in the order given; each must be an IP address
/// or a DNS name a client could verify.
pub(super) fn subject_names(hosts: &[String]) -> Result<Vec<String>, CtlError> {
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
pub(super) struct Validity {
    pub(super) not_before: OffsetDateTime,
    pub(super) cert_not_after: OffsetDateTime,
    pub(super) ca_not_after: OffsetDateTime,
}

impl Validity {
    pub(super) fn from(now: OffsetDateTime) -> Result<Validity, CtlError> {
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

    /// This validity for a certificate `ca` signs: it ends no later than the CA does, and a CA
    /// that has ended signs nothing.
    pub(super) fn under_ca(
        self,
        ca: &Ca,
        now: OffsetDateTime,
        dir: &Path,
    ) -> Result<Validity, CtlError> {
        if ca.not_after <= now {
            return Err(CtlError::BadInput(format!(
                "{}: the CA expired on {}; make a new one with `certs init`",
                dir.join(CA_CERT_FILE).display(),
                ca.not_after.date()
            )));
        }
        Ok(Validity {
            not_before: self.not_before,
            cert_not_after: self.cert_not_after.min(ca.not_after),
            ca_not_after: ca.not_after,
        })
    }
}

/// The CA `certs init` left in a directory, ready to sign.
pub(super) struct Ca {
    /// The key of `ca-key.pem`, with the name and key identifier of its certificate in `ca.pem`.
    pub(super) issuer: Issuer<'static, KeyPair>,
    pub(super) not_after: OffsetDateTime,
}

/// Reads `ca.pem` and `ca-key.pem` from `dir`: the key must belong to a CA certificate of
/// `ca.pem` (during a rotation it may hold several; the key's is the one used).
pub(super) fn read_ca(dir: &Path) -> Result<Ca, CtlError> {
    let cert_path = dir.join(CA_CERT_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    let cert_pem = read_ca_file(&cert_path)?;
    let key_pem = read_ca_file(&key_path)?;
    // rcgen's error names what is wrong, never the key's contents.
    let key = KeyPair::from_pem(&key_pem).map_err(|e| {
        CtlError::BadInput(format!(
            "{}: not a usable private key: {e}",
            key_path.display()
        ))
    })?;
    let bad_cert =
        |problem: String| CtlError::BadInput(format!("{}: {problem}", cert_path.display()));
    let certificates = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_cert(format!("bad PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(bad_cert("no PEM CERTIFICATE block".to_owned()));
    }
    for certificate in &certificates {
        let (_, parsed) = X509Certificate::from_der(certificate.as_ref())
            .map_err(|e| bad_cert(format!("not a readable X.509 certificate: {e}")))?;
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            continue;
        }
        if !parsed.is_ca() {
            return Err(bad_cert(format!(
                "the certificate of the key in {} is not a CA certificate",
                key_path.display()
            )));
        }
        let not_after = parsed.validity().not_after.to_datetime();
        let issuer = Issuer::from_ca_cert_der(certificate, key)
            .map_err(|e| bad_cert(format!("cannot sign with this CA certificate: {e}")))?;
        return Ok(Ca { issuer, not_after });
    }
    Err(CtlError::BadInput(format!(
        "{}: not the key of the CA certificate in {}; each must be the one `certs init` wrote",
        key_path.display(),
        cert_path.display()
    )))
}

/// The text of a CA file, at most [`MAX_PEM_FILE_BYTES`] of it.
pub(super) fn read_ca_file(path: &Path) -> Result<String, CtlError> {
    let mut text = String::new();
    let read = File::open(path)
        .and_then(|file| file.take(MAX_PEM_FILE_BYTES + 1).read_to_string(&mut text));
    match read {
        Ok(length) if length as u64 > MAX_PEM_FILE_BYTES => Err(CtlError::BadInput(format!(
            "{}: larger than {MAX_PEM_FILE_BYTES} bytes; not a PEM certificate or key",
            path.display()
        ))),
        Ok(_) => Ok(text),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(CtlError::BadInput(format!(
            "{}: no such file; `certs issue` signs with the CA `certs init --dir` made there",
            path.display()
        ))),
        Err(e) if e.kind() == ErrorKind::InvalidData => Err(CtlError::BadInput(format!(
            "{}: not a PEM file (not UTF-8)",
            path.display()
        ))),
        Err(e) => Err(CtlError::io("reading", path, e)),
    }
}

/// One PEM file to write.
pub(super) struct PemFile {
    pub(super) name: String,
    pub(super) contents: String,
    /// A private key: written 0600, never printed.
    pub(super) secret: bool,
    pub(super) what: &'static str,
    /// The role URIs of the certificate (the key's certificate), comma-separated.
    pub(super) role: Option<String>,
    /// The subject of the certificate (the key's certificate), RFC 4514.
    pub(super) subject: Option<String>,
}

/// Names the file only: `contents` may be a private key.
impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemFile")
            .field("name", &self.name)
            .field("secret", &self.secret)
            .field("role", &self.role)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

pub(super) fn issuing(what: String) -> impl Fn(rcgen::Error) -> CtlError {
    move |e| CtlError::BadInput(format!("cannot issue {what}: {e}"))
}

pub(super) fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Leasehold");
    name.push(DnType::CommonName, common_name);
    name
}

/// The subject of a role certificate (issue 55, finding 7): `CN=<stem> <key id>` ([`key_id`]),
/// `OU=`[`scope_label`], `O=Leasehold`, so no two certificates share one and each names who
/// holds it (the stem, `--name`) and what it may do. The common name comes first, as RFC 4514
/// writes a name (most specific first) and so that an audit record cut short keeps it.
pub(super) fn role_distinguished_name(
    role: Role,
    scope: &NamespaceScope,
    stem: &str,
    key: &KeyPair,
) -> DistinguishedName {
    // Stems are ASCII (`check_file_stem`, or a role's own), so a byte is a character.
    let stem_room = MAX_SUBJECT_ATTRIBUTE_CHARS - KEY_ID_HEX_DIGITS - 1;
    let stem = stem.get(..stem_room).unwrap_or(stem);
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("{stem} {}", key_id(key)));
    name.push(DnType::OrganizationalUnitName, scope_label(role, scope));
    name.push(DnType::OrganizationName, "Leasehold");
    name
}
