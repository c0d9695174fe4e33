//! Issuing the CA and the role certificates, and writing them with their modes.

use super::*;

/// The CA and every role's certificate and key, in the order they are written.
pub(super) fn issue_ca_and_roles(
    managers: u64,
    names: &[String],
    validity: &Validity,
) -> Result<Vec<PemFile>, CtlError> {
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
            subject: None,
        },
        PemFile {
            name: CA_KEY_FILE.to_owned(),
            contents: ca_key.serialize_pem(),
            secret: true,
            what: "CA private key",
            role: None,
            subject: None,
        },
    ];
    let issuer = Issuer::new(ca, ca_key);

    for role in roles(managers) {
        let stem = file_stem(role);
        files.extend(role_files(
            role,
            &NamespaceScope::All,
            &stem,
            names,
            validity,
            &issuer,
        )?);
    }
    Ok(files)
}

/// One role certificate signed by `issuer`, and its key: `<stem>.pem` and `<stem>-key.pem`. The
/// certificate carries [`role_uris`] of `role` and `scope` and is valid for `names`. `certs init`
/// and `certs issue` make every role certificate here, so all have one shape.
pub(super) fn role_files(
    role: Role,
    scope: &NamespaceScope,
    stem: &str,
    names: &[String],
    validity: &Validity,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<[PemFile; 2], CtlError> {
    let what = || format!("the {role} certificate");
    let uris = role_uris(role, scope)?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(issuing(what()))?;
    for uri in &uris {
        let uri = uri.clone().try_into().map_err(issuing(what()))?;
        params.subject_alt_names.push(SanType::URI(uri));
    }
    let key = KeyPair::generate().map_err(issuing(format!("the {role} key")))?;
    params.distinguished_name = role_distinguished_name(role, scope, stem, &key);
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
    let cert = params.signed_by(&key, issuer).map_err(issuing(what()))?;
    let uris = uris.join(",");
    let subject = Role::subject_of_certificate(cert.der());
    Ok([
        PemFile {
            name: cert_file_of(stem),
            contents: cert.pem(),
            secret: false,
            what: "certificate",
            role: Some(uris.clone()),
            subject: Some(subject.clone()),
        },
        PemFile {
            name: key_file_of(stem),
            contents: key.serialize_pem(),
            secret: true,
            what: "private key",
            role: Some(uris),
            subject: Some(subject),
        },
    ])
}

/// Writes `files` into `dir`: refuses, before writing anything, if any exists and not `force`.
pub(super) fn write_files(
    dir: &Path,
    files: &[PemFile],
    force: bool,
) -> Result<Vec<WrittenFile>, CtlError> {
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
            role: file.role.clone(),
            subject: file.subject.clone(),
            mode: format!("{mode:04o}"),
        });
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CtlError::io("syncing", dir, e))?;
    Ok(written)
}

pub(super) fn create_dir(dir: &Path) -> Result<(), CtlError> {
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
pub(super) fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
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
