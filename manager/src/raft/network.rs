//! Raft RPC between managers: bincode bodies (the raft-store envelope) over HTTP POST to
//! `/raft/{append,vote,snapshot}`, on one shared reqwest client. AppendEntries bodies carry log
//! entries and are written at the oldest schema that can express them ([`versions`]).
//!
//! HTTP/1.1 on kept-alive connections by measurement (docs/BENCHMARKS.md, "The Raft transport"):
//! openraft 0.9 replicates one AppendEntries at a time per follower, so HTTP/2 has nothing to
//! multiplex and costs 1.6× per exchange, and a framed stream would save ~40 µs of ~75 µs.
//!
//! A connection that could not be made maps to openraft's `Unreachable` (openraft backs off);
//! every RPC is bounded by openraft's per-RPC deadline; both directions carry storage identities
//! (see [`super::identity`]).

use std::sync::Arc;

use leasehold_api::tls::Role;
use leasehold_raft_store::{codec, StoreError};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use rustls_pki_types::CertificateDer;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::identity::{Identity, NODE_ID_HEADER, STORAGE_ID_HEADER, TARGET_NODE_ID_HEADER};
use super::{versions, NodeId, TypeConfig};

pub const RAFT_CONTENT_TYPE: &str = "application/octet-stream";

/// Creates one connection per target; all share the HTTP client and its connection pool.
#[derive(Debug, Clone)]
pub struct HttpNetworkFactory {
    client: reqwest::Client,
    identity: Arc<Identity>,
}

impl HttpNetworkFactory {
    pub fn new(client: reqwest::Client, identity: Arc<Identity>) -> Self {
        Self { client, identity }
    }
}

impl RaftNetworkFactory<TypeConfig> for HttpNetworkFactory {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpConnection {
        HttpConnection {
            client: self.client.clone(),
            identity: self.identity.clone(),
            target,
            base_url: node.addr.trim_end_matches('/').to_string(),
        }
    }
}

#[derive(Debug)]
pub struct HttpConnection {
    client: reqwest::Client,
    identity: Arc<Identity>,
    target: NodeId,
    base_url: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl HttpConnection {
    async fn call<Resp, E>(
        &self,
        endpoint: &str,
        body: Result<Vec<u8>, StoreError>,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + Serialize + DeserializeOwned,
    {
        let network =
            |message: String| RPCError::Network(NetworkError::new(&TransportError(message)));
        let body = body.map_err(|e| network(e.to_string()))?;
        let response = self
            .client
            .post(format!("{}/raft/{endpoint}", self.base_url))
            .timeout(option.hard_ttl())
            .header(reqwest::header::CONTENT_TYPE, RAFT_CONTENT_TYPE)
            .header(NODE_ID_HEADER, self.identity.node_id().to_string())
            .header(STORAGE_ID_HEADER, self.identity.storage_id())
            .header(TARGET_NODE_ID_HEADER, self.target.to_string())
            .body(body)
            .send()
            .await
            .map_err(|error| {
                if error.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&error))
                } else {
                    network(format!("{endpoint} to node {}: {error}", self.target))
                }
            })?;

        self.refuse_unless_the_target(&response)
            .map_err(RPCError::Unreachable)?;

        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| {
            network(format!(
                "reading {endpoint} reply from node {}: {e}",
                self.target
            ))
        })?;
        if !status.is_success() {
            return Err(network(format!(
                "{endpoint} to node {} answered {status}: {}",
                self.target,
                String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
            )));
        }
        let reply: Result<Resp, RaftError<NodeId, E>> =
            codec::decode("raft reply", &bytes).map_err(|e| network(e.to_string()))?;
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// Refuses a reply that did not come from the target manager as this start of its data
    /// directory: another certificate (under TLS), another node id, or a replaced data directory.
    /// Such a reply must not be pinned or counted, not as a vote, not as an acknowledgement.
    fn refuse_unless_the_target(&self, response: &reqwest::Response) -> Result<(), Unreachable> {
        // Under TLS the certificate decides who answered (P13.3): it must be the manager this
        // message was meant for. The headers below are then a second, weaker check.
        if let Some(tls_info) = response.extensions().get::<reqwest::tls::TlsInfo>() {
            let role = tls_info
                .peer_certificate()
                .map(|der| Role::of_certificate(&CertificateDer::from(der.to_vec())));
            if !matches!(role, Some(Ok(Role::Manager { node_id })) if node_id == self.target) {
                let error = TransportError(format!(
                    "{} answered with a certificate that is not manager {}'s: {role:?}",
                    self.base_url, self.target
                ));
                tracing::error!(target_node = self.target, %error, "refusing raft reply");
                return Err(Unreachable::new(&error));
            }
        }
        let answered_as = response
            .headers()
            .get(NODE_ID_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<NodeId>().ok());
        if answered_as != Some(self.target) {
            // Another node (or no manager) answers at this address: its reply is not the target's
            // and must not be pinned or counted.
            let error = TransportError(format!(
                "{} answered as node {answered_as:?}, not node {}",
                self.base_url, self.target
            ));
            tracing::error!(target_node = self.target, %error, "refusing raft reply");
            return Err(Unreachable::new(&error));
        }

        let presented = response
            .headers()
            .get(STORAGE_ID_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if let Err(error) = self.identity.verify_peer(self.target, &presented) {
            // A reply from a replaced data directory must not count: not as a vote, not as an ack.
            tracing::error!(target_node = self.target, %error, "refusing raft reply");
            return Err(Unreachable::new(&error));
        }
        Ok(())
    }
}

impl RaftNetwork<TypeConfig> for HttpConnection {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        // Written at the oldest schema that can express the entries, so 0.1.0 followers read it.
        self.call("append", versions::encode_append(&request), &option)
            .await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call("snapshot", codec::encode("raft request", &request), &option)
            .await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call("vote", codec::encode("raft request", &request), &option)
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::HeaderMap;
    use axum::routing::post;
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;

    /// A server at the target's address that answers as `node_id`, and the headers it was sent.
    async fn impostor(node_id: NodeId) -> (String, tokio::sync::mpsc::Receiver<HeaderMap>) {
        let (seen_tx, seen_rx) = tokio::sync::mpsc::channel(4);
        let reply = codec::encode(
            "raft reply",
            &Ok::<_, RaftError<NodeId>>(VoteResponse::new(
                Vote::new(1, node_id),
                Some(LogId::new(CommittedLeaderId::new(1, node_id), 1)),
                true,
            )),
        )
        .unwrap();
        let app = axum::Router::new().route(
            "/raft/vote",
            post(move |headers: HeaderMap| {
                let seen_tx = seen_tx.clone();
                let reply = reply.clone();
                async move {
                    let _ = seen_tx.send(headers).await;
                    (
                        [
                            (NODE_ID_HEADER, node_id.to_string()),
                            (STORAGE_ID_HEADER, "impostor-storage".to_string()),
                        ],
                        reply,
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (address, seen_rx)
    }

    async fn vote_to(
        target: NodeId,
        address: &str,
        identity: Arc<Identity>,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        let mut factory = HttpNetworkFactory::new(reqwest::Client::new(), identity);
        let mut connection = factory.new_client(target, &BasicNode::new(address)).await;
        connection
            .vote(
                VoteRequest::new(Vote::new(2, 1), None),
                RPCOption::new(Duration::from_secs(5)),
            )
            .await
    }

    /// A reply from another node at the target's address is neither counted nor pinned (the
    /// fault suite saw a manager's Raft core fail after its RPCs to a peer reached another
    /// manager through a port taken over by a proxy).
    #[tokio::test]
    async fn a_reply_from_another_node_at_the_address_is_unreachable_and_not_pinned() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let identity = Arc::new(Identity::open(&db, 1).unwrap());
        let (address, mut seen) = impostor(3).await;

        let result = vote_to(2, &address, identity.clone()).await;
        assert!(
            matches!(result, Err(RPCError::Unreachable(_))),
            "{result:?}"
        );
        assert!(identity.pins().is_empty(), "{:?}", identity.pins());
        let headers = seen.recv().await.unwrap();
        assert_eq!(headers[TARGET_NODE_ID_HEADER], "2");

        // The same server, asked as the node it is, answers normally.
        let result = vote_to(3, &address, identity.clone()).await;
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            identity.pins().get(&3).map(String::as_str),
            Some("impostor-storage")
        );
    }
}
