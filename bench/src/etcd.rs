//! The etcd half of each benchmark: the same lease holders as [`crate::fleet::LeaseholdFleet`],
//! against a three-member etcd cluster ([`EtcdCluster`] starts its processes).
//!
//! - [`EtcdPutFleet`], shape (a): a lease per executor and each renewal a put of the executor's
//!   claims attached to it, a replicated write.
//! - [`EtcdKeepAliveFleet`], shape (b): each renewal one keepalive on the executor's long-lived
//!   keepalive stream; etcd answers these from the leader's memory without a log write.
//!
//! etcd's client is gRPC, and its build script compiles etcd's protos with `protoc`. So that the
//! workspace builds on a machine with only the Rust toolchain, the client is behind the `etcd`
//! feature (docs/BENCHMARKS.md): `scripts/bench-all` and CI build with it. Without it the types
//! below have no values, [`built`] is false, and every scenario runs its Leasehold half only.

#[cfg(feature = "etcd")]
pub use with_client::*;
#[cfg(not(feature = "etcd"))]
pub use without_client::*;

/// Why the etcd half is skipped in a build without the `etcd` feature.
pub const NOT_BUILT: &str = "this leasehold-loadgen was built without the `etcd` feature \
     (it needs protoc): cargo build --release -p leasehold-bench --features etcd";

/// Whether this build can talk to etcd.
pub const fn built() -> bool {
    cfg!(feature = "etcd")
}

#[cfg(feature = "etcd")]
mod with_client {
    use std::path::Path;
    use std::time::Duration;

    use anyhow::{anyhow, Context, Result};
    use etcd_client::{
        Certificate, ConnectOptions, Identity, LeaseKeepAliveStream, LeaseKeeper, PutOptions,
        TlsOptions,
    };

    use crate::fleet::{setup_all, RenewFailure, Renewer};
    use crate::procs::EtcdCluster;

    pub type EtcdClient = etcd_client::Client;

    impl EtcdCluster {
        /// Connects `connections` clients, each over every member (its own HTTP/2 connections).
        pub async fn clients(
            &self,
            connections: usize,
            request_timeout: Duration,
        ) -> Result<Vec<EtcdClient>> {
            let endpoints = self.client_urls();
            let mut clients = Vec::new();
            for _ in 0..connections.max(1) {
                let options = self.connect_options(Duration::from_secs(2), request_timeout)?;
                clients.push(etcd_client::Client::connect(&endpoints, Some(options)).await?);
            }
            Ok(clients)
        }

        /// Timeouts, and under TLS the CA to trust and the `executor` certificate to present.
        fn connect_options(
            &self,
            connect_timeout: Duration,
            request_timeout: Duration,
        ) -> Result<ConnectOptions> {
            let options = ConnectOptions::new()
                .with_connect_timeout(connect_timeout)
                .with_timeout(request_timeout);
            let Some(certs) = self.security().certs() else {
                return Ok(options);
            };
            let files = certs.files("executor");
            let read = |path: &Path| {
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))
            };
            let tls = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(read(&files.trusted_ca_file)?))
                .identity(Identity::from_pem(
                    read(&files.cert_file)?,
                    read(&files.key_file)?,
                ));
            Ok(options.with_tls(tls))
        }
    }

    /// Grants one lease of `ttl_s` seconds per holder.
    async fn grant_leases(clients: &[EtcdClient], count: usize, ttl_s: i64) -> Result<Vec<i64>> {
        setup_all(count, |index| {
            let mut client = clients[index % clients.len()].clone();
            async move { Ok(client.lease_grant(ttl_s, None).await?.id()) }
        })
        .await
    }

    fn etcd_failure(error: &etcd_client::Error) -> RenewFailure {
        let text = error.to_string();
        // A put or keepalive naming an expired lease: etcd's "requested lease not found".
        if text.contains("lease not found") {
            RenewFailure::Evicted
        } else {
            RenewFailure::Other(text.chars().take(160).collect())
        }
    }

    /// Bound on retries of one lease query after a member restart, and the pause between them.
    const LEASE_QUERY_ATTEMPTS: u32 = 20;
    const LEASE_QUERY_RETRY: Duration = Duration::from_millis(250);

    /// etcd shape (a): one lease per executor, each renewal a put of its claims attached to it.
    pub struct EtcdPutFleet {
        clients: Vec<EtcdClient>,
        leases: Vec<i64>,
        value: Vec<u8>,
    }

    impl EtcdPutFleet {
        pub async fn start(
            clients: Vec<EtcdClient>,
            count: usize,
            ttl_s: i64,
            value: Vec<u8>,
        ) -> Result<Self> {
            let leases = grant_leases(&clients, count, ttl_s).await?;
            Ok(Self {
                clients,
                leases,
                value,
            })
        }

        pub fn lease(&self, index: usize) -> Option<i64> {
            self.leases.get(index).copied()
        }
    }

    impl Renewer for EtcdPutFleet {
        fn size(&self) -> usize {
            self.leases.len()
        }

        async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
            let lease = self
                .lease(index)
                .ok_or_else(|| RenewFailure::Other(format!("no holder {index}")))?;
            let mut client = self.clients[index % self.clients.len()].clone();
            client
                .put(
                    format!("/leasehold-bench/executors/{index}"),
                    self.value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await
                .map_err(|e| etcd_failure(&e))?;
            Ok(0)
        }
    }

    #[derive(Debug)]
    struct KeepAliveStream {
        keeper: LeaseKeeper,
        stream: LeaseKeepAliveStream,
    }

    /// etcd shape (b): one lease per executor kept alive on its own long-lived stream.
    pub struct EtcdKeepAliveFleet {
        clients: Vec<EtcdClient>,
        leases: Vec<i64>,
        streams: Vec<tokio::sync::Mutex<Option<KeepAliveStream>>>,
    }

    impl EtcdKeepAliveFleet {
        pub async fn start(clients: Vec<EtcdClient>, count: usize, ttl_s: i64) -> Result<Self> {
            let leases = grant_leases(&clients, count, ttl_s).await?;
            let opened = setup_all(count, |index| {
                let mut client = clients[index % clients.len()].clone();
                let lease = leases[index];
                async move {
                    let (keeper, stream) = client.lease_keep_alive(lease).await?;
                    Ok(KeepAliveStream { keeper, stream })
                }
            })
            .await?;
            Ok(Self {
                clients,
                leases,
                streams: opened
                    .into_iter()
                    .map(|s| tokio::sync::Mutex::new(Some(s)))
                    .collect(),
            })
        }

        /// Number of leases whose time to live is over (expired or revoked).
        pub async fn expired_leases(&self) -> Result<usize> {
            let mut client = self.clients[0].clone();
            let mut expired = 0;
            for &lease in &self.leases {
                let mut attempts = 0;
                let ttl = loop {
                    match client.lease_time_to_live(lease, None).await {
                        Ok(response) => break response.ttl(),
                        // A member restarted a moment ago may still refuse on one of the channel's
                        // endpoints until it is reconnected.
                        Err(_) if attempts < LEASE_QUERY_ATTEMPTS => {
                            attempts += 1;
                            tokio::time::sleep(LEASE_QUERY_RETRY).await;
                        }
                        Err(error) => return Err(error.into()),
                    }
                };
                if ttl <= 0 {
                    expired += 1;
                }
            }
            Ok(expired)
        }
    }

    impl Renewer for EtcdKeepAliveFleet {
        fn size(&self) -> usize {
            self.leases.len()
        }

        async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
            let slot = self
                .streams
                .get(index)
                .ok_or_else(|| RenewFailure::Other(format!("no holder {index}")))?;
            let mut slot = slot.lock().await;
            // Taken out while in use: a renewal cancelled half-way (timeout) leaves no stream with an
            // unread reply behind, and the next renewal opens a fresh one.
            let mut open = match slot.take() {
                Some(open) => open,
                None => {
                    // The stream broke (its member died): open another, as etcd's own clients do.
                    let mut client = self.clients[index % self.clients.len()].clone();
                    let (keeper, stream) = client
                        .lease_keep_alive(self.leases[index])
                        .await
                        .map_err(|e| etcd_failure(&e))?;
                    KeepAliveStream { keeper, stream }
                }
            };
            let answer = async {
                open.keeper.keep_alive().await?;
                open.stream.message().await
            }
            .await;
            match answer {
                Ok(Some(reply)) if reply.ttl() > 0 => {
                    *slot = Some(open);
                    Ok(u64::try_from(reply.ttl()).unwrap_or(0) * 1000)
                }
                Ok(Some(_)) => Err(RenewFailure::Evicted),
                Ok(None) => Err(RenewFailure::Other("keepalive stream ended".to_owned())),
                Err(error) => Err(etcd_failure(&error)),
            }
        }
    }

    impl EtcdCluster {
        /// (member id, leader id) as member `index` reports them.
        pub(crate) async fn status_of(&self, index: usize) -> Result<(u64, u64), String> {
            let mut client = self
                .member_client(index, Duration::from_secs(2))
                .await
                .map_err(|e| format!("{e:#}"))?;
            let status = client.status().await.map_err(|e| e.to_string())?;
            let member_id = status
                .header()
                .map(|h| h.member_id())
                .ok_or_else(|| format!("member {index}: status without header"))?;
            Ok((member_id, status.leader()))
        }

        /// A client of member `index` alone.
        async fn member_client(&self, index: usize, timeout: Duration) -> Result<EtcdClient> {
            let url = self
                .client_urls()
                .get(index)
                .cloned()
                .ok_or_else(|| anyhow!("no etcd member {index}"))?;
            let options = self.connect_options(Duration::from_secs(1), timeout)?;
            etcd_client::Client::connect([url.as_str()], Some(options))
                .await
                .with_context(|| format!("connecting to {url}"))
        }

        /// The bytes `etcdctl snapshot save` would write, streamed from member `index`.
        pub async fn snapshot_bytes(&self, index: usize) -> Result<u64> {
            let mut client = self.member_client(index, Duration::from_secs(600)).await?;
            let mut stream = client.snapshot().await?;
            let mut bytes = 0u64;
            while let Some(chunk) = stream.message().await? {
                bytes += u64::try_from(chunk.blob().len())?;
            }
            Ok(bytes)
        }

        /// The raft index member `index` reports.
        pub async fn raft_index(&self, index: usize) -> Result<u64> {
            let mut client = self.member_client(index, Duration::from_secs(2)).await?;
            Ok(client.status().await?.raft_index())
        }
    }
}

#[cfg(not(feature = "etcd"))]
mod without_client {
    //! Without the client no etcd fleet can be made: these types have no values, so the code
    //! that would drive one type-checks and never runs.

    use std::time::Duration;

    use anyhow::{anyhow, Result};

    use crate::fleet::{RenewFailure, Renewer};
    use crate::procs::EtcdCluster;

    #[derive(Debug, Clone)]
    pub enum EtcdClient {}

    pub enum EtcdPutFleet {}

    impl EtcdPutFleet {
        pub async fn start(
            clients: Vec<EtcdClient>,
            _count: usize,
            _ttl_s: i64,
            _value: Vec<u8>,
        ) -> Result<Self> {
            match clients.into_iter().next() {
                Some(client) => match client {},
                None => Err(anyhow!(super::NOT_BUILT)),
            }
        }
    }

    impl Renewer for EtcdPutFleet {
        fn size(&self) -> usize {
            match *self {}
        }

        async fn renew(&self, _index: usize) -> Result<u64, RenewFailure> {
            match *self {}
        }
    }

    pub enum EtcdKeepAliveFleet {}

    impl EtcdKeepAliveFleet {
        pub async fn start(clients: Vec<EtcdClient>, _count: usize, _ttl_s: i64) -> Result<Self> {
            match clients.into_iter().next() {
                Some(client) => match client {},
                None => Err(anyhow!(super::NOT_BUILT)),
            }
        }

        pub async fn expired_leases(&self) -> Result<usize> {
            match *self {}
        }
    }

    impl Renewer for EtcdKeepAliveFleet {
        fn size(&self) -> usize {
            match *self {}
        }

        async fn renew(&self, _index: usize) -> Result<u64, RenewFailure> {
            match *self {}
        }
    }

    impl EtcdCluster {
        pub async fn clients(
            &self,
            _connections: usize,
            _request_timeout: Duration,
        ) -> Result<Vec<EtcdClient>> {
            Err(anyhow!(super::NOT_BUILT))
        }

        pub async fn snapshot_bytes(&self, _index: usize) -> Result<u64> {
            Err(anyhow!(super::NOT_BUILT))
        }

        pub async fn raft_index(&self, _index: usize) -> Result<u64> {
            Err(anyhow!(super::NOT_BUILT))
        }

        pub(crate) async fn status_of(&self, _index: usize) -> Result<(u64, u64), String> {
            Err(super::NOT_BUILT.to_owned())
        }
    }
}
