//! `--tls`: both systems under mutual TLS, on certificates made at start.
//!
//! - Leasehold as PROTOCOL §13 has it: every manager serves TLS with its `manager-<id>`
//!   certificate and requires a client certificate of the CA (the harness's
//!   `ClusterConfig::tls_dir`); the simulated executors present the `executor` certificate, and
//!   their push listener speaks TLS and takes pushes from manager certificates only.
//! - etcd with TLS on both its client and its peer listeners, each requiring a client
//!   certificate of the same CA (`--client-cert-auth`, `--peer-client-cert-auth`): member `i`
//!   uses `manager-<i>`'s certificate, whose key usages are serverAuth and clientAuth, as an etcd
//!   member needs, and the clients present the `executor` certificate.
//!
//! The certificates are `leaseholdctl certs init`'s ([`leasehold_api::ctl::certs::init`]), in
//! `tls/` under the work directory. Every cluster started under TLS is checked to refuse what
//! mutual TLS must refuse ([`check_refuses_unauthenticated`]), so a run that says TLS cannot
//! quietly have run without it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use leasehold_api::ctl::certs::{self, InitOptions};
use leasehold_api::tls::{TlsConfig, TlsFiles};

/// Managers `certs init` issues for: the three of every cluster, and B5's joiner (id 4).
const MANAGER_CERTIFICATES: u64 = 4;

/// Bound on each request of [`check_refuses_unauthenticated`].
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The certificates of one run, and the simulated executors' identity loaded from them.
#[derive(Debug)]
pub struct Certs {
    dir: PathBuf,
    executor: TlsConfig,
}

impl Certs {
    /// Issues a CA and every role's certificate into `dir` (which must not hold them already).
    pub fn make(dir: &Path) -> Result<Self> {
        certs::init(&InitOptions {
            dir: dir.to_path_buf(),
            managers: MANAGER_CERTIFICATES,
            hosts: Vec::new(),
            force: false,
        })
        .with_context(|| format!("certificates for --tls in {}", dir.display()))?;
        let executor = TlsConfig::load(&leasehold_harness::tls_files(dir, "executor"))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            executor,
        })
    }

    /// The `certs init` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The files of `name` (`manager-1`, `executor`, `admin`).
    pub fn files(&self, name: &str) -> TlsFiles {
        leasehold_harness::tls_files(&self.dir, name)
    }

    /// The simulated executors' identity: their client and their push listener.
    pub fn executor(&self) -> &TlsConfig {
        &self.executor
    }
}

/// How the systems of one run are reached: plaintext, or mutual TLS on [`Certs`].
#[derive(Debug, Clone)]
pub enum Security {
    Plaintext,
    Tls(Arc<Certs>),
}

impl Security {
    pub fn certs(&self) -> Option<&Certs> {
        match self {
            Security::Plaintext => None,
            Security::Tls(certs) => Some(certs),
        }
    }

    /// The simulated executors' TLS identity, under TLS.
    pub fn executor_tls(&self) -> Option<&TlsConfig> {
        self.certs().map(Certs::executor)
    }

    pub fn scheme(&self) -> &'static str {
        match self {
            Security::Plaintext => "http",
            Security::Tls(_) => "https",
        }
    }

    /// For table rows: `plaintext` or `mutual TLS`.
    pub fn label(&self) -> &'static str {
        match self {
            Security::Plaintext => "plaintext",
            Security::Tls(_) => "mutual TLS",
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Security::Tls(_))
    }

    /// `system` as a row names it: as it is in plaintext, `<system>, mutual TLS` under TLS.
    pub fn tagged(&self, system: &str) -> String {
        match self {
            Security::Plaintext => system.to_owned(),
            Security::Tls(_) => format!("{system}, {}", self.label()),
        }
    }
}

/// Checks that the TLS server at `base_url` (`https://host:port`) answers `path` neither in
/// plaintext nor over TLS to a client without a certificate, while the same request over TLS
/// with the executor's certificate succeeds: the listener is TLS-only and requires client
/// certificates. `path` is one any role may read.
pub async fn check_refuses_unauthenticated(
    certs: &Certs,
    base_url: &str,
    path: &str,
) -> Result<()> {
    let Some(authority) = base_url.strip_prefix("https://") else {
        bail!("{base_url}: under --tls every URL is https://");
    };
    let plaintext = reqwest::Client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .build()?;
    let plain_url = format!("http://{authority}{path}");
    if let Ok(reply) = plaintext.get(&plain_url).send().await {
        if reply.status().is_success() {
            bail!(
                "{plain_url} answered {} in plaintext: TLS is off",
                reply.status()
            );
        }
    }
    let ca = std::fs::read(&certs.files("executor").trusted_ca_file)?;
    let anonymous = reqwest::Client::builder()
        .no_proxy()
        .timeout(PROBE_TIMEOUT)
        .tls_certs_only([reqwest::Certificate::from_pem(&ca)?])
        .build()?;
    let url = format!("{base_url}{path}");
    if let Ok(reply) = anonymous.get(&url).send().await {
        if reply.status().is_success() {
            bail!(
                "{url} answered {} over TLS without a client certificate: client \
                 certificates are not required",
                reply.status()
            );
        }
    }
    let authenticated = leasehold_api::client::http_client_builder(Some(certs.executor()))
        .timeout(PROBE_TIMEOUT)
        .build()?;
    let reply = authenticated
        .get(&url)
        .send()
        .await
        .with_context(|| format!("{url} over TLS with the executor certificate"))?;
    if !reply.status().is_success() {
        bail!(
            "{url} answered {} over TLS with the executor certificate",
            reply.status()
        );
    }
    Ok(())
}
