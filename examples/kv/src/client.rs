//! The service's client: `put` and `get` by key, sent straight to the key's owner by the routing
//! client ([`leasehold_api::routing`]), which follows the managers' table and, on a `421`,
//! refreshes it once and retries once.

use leasehold_api::problem::Problem;
use leasehold_api::routing::{
    ReadFrom, RoutedReply, RoutedRequest, RoutingClient, RoutingConfig, RoutingError,
};
use reqwest::Method;

use crate::wire::{GetReply, KvProblem, PutReply, PutRequest, Refusal};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The service refused the request (`421` after the routing client's retry, `409
    /// stale_epoch`): nothing was written.
    #[error("refused ({reason:?}): {}", problem.problem.detail)]
    Refused {
        /// Which refusal.
        reason: Refusal,
        /// The whole answer.
        problem: Box<KvProblem>,
    },
    /// Routing failed: no owner, no table, unreachable, or no complete reply.
    #[error(transparent)]
    Routing(#[from] RoutingError),
    /// Any other answer (`400`, `503`, `504`, ...).
    #[error("{status}: {detail}")]
    Failed {
        /// The HTTP status.
        status: u16,
        /// The problem's detail, or the start of the body.
        detail: String,
    },
    /// A success whose body is not what the service sends.
    #[error("cannot decode the reply: {0}")]
    Decode(String),
    /// A key the client cannot send: empty, or `.`/`..`, which URL parsers remove from a path
    /// even when percent-encoded.
    #[error("key {0:?} cannot be sent as a path segment (empty, \".\" or \"..\")")]
    InvalidKey(String),
}

impl KvError {
    /// Whether the request certainly changed nothing: refused before or by the store, never
    /// sent, or answered with an error the service gives only before it writes. An unknown
    /// outcome (no complete reply, `504 timeout`, `500`) may have been applied.
    pub fn definitely_not_applied(&self) -> bool {
        match self {
            KvError::Refused { .. } => true,
            KvError::Routing(error) => error.definitely_not_applied(),
            // 4xx are refusals before the write; 503 is a store transaction that did not run.
            KvError::Failed { status, .. } => (400..500).contains(status) || *status == 503,
            KvError::Decode(_) => false,
            KvError::InvalidKey(_) => true,
        }
    }
}

/// A client for the key-value service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct KvClient {
    routing: RoutingClient,
}

impl KvClient {
    /// A client over a routing client already connected to the managers.
    pub fn new(routing: RoutingClient) -> Self {
        Self { routing }
    }

    /// Connects a routing client to the managers at `endpoints` ([`RoutingClient::connect`]).
    pub async fn connect(endpoints: Vec<String>, config: RoutingConfig) -> Result<Self, KvError> {
        Ok(Self::new(RoutingClient::connect(endpoints, config).await?))
    }

    /// The routing client (its table and counters).
    pub fn routing(&self) -> &RoutingClient {
        &self.routing
    }

    /// `PUT /kv/{key}`: acknowledged once committed, with the epoch it was stored at.
    pub async fn put(&self, key: &str, value: &str) -> Result<PutReply, KvError> {
        let body = serde_json::to_vec(&PutRequest {
            value: value.to_owned(),
        })
        .map_err(|error| KvError::Decode(error.to_string()))?;
        let reply = self.send_to_owner(&Method::PUT, key, Some(&body)).await?;
        match reply.status {
            200 => decode(&reply.body),
            status => Err(refusal(status, &reply.body)),
        }
    }

    /// `GET /kv/{key}` from the owner: the value and the epoch it was written at, or `None` if
    /// never written.
    pub async fn get(&self, key: &str) -> Result<Option<GetReply>, KvError> {
        self.get_from(key, ReadFrom::Primary).await
    }

    /// `GET /kv/{key}` from the replica `read_from` picks (PROTOCOL P19.5): a secondary's answer
    /// says so (`role`) and how fresh its copy was (`copy`); `None` if the replica that answered
    /// holds no value for the key (from a secondary: none as of its copy).
    pub async fn get_from(
        &self,
        key: &str,
        read_from: ReadFrom,
    ) -> Result<Option<GetReply>, KvError> {
        let path = format!("/kv/{}{}", path_segment(key)?, read_query(read_from));
        let request = RoutedRequest {
            method: &Method::GET,
            path: &path,
            body: None,
        };
        let reply = self
            .routing
            .send_to(key.as_bytes(), read_from, request)
            .await?;
        match reply.status {
            200 => decode(&reply.body).map(Some),
            404 => Ok(None),
            status => Err(refusal(status, &reply.body)),
        }
    }

    /// `method` on `/kv/{key}`, sent to the executor that owns `key`.
    async fn send_to_owner(
        &self,
        method: &Method,
        key: &str,
        body: Option<&[u8]>,
    ) -> Result<RoutedReply, KvError> {
        let path = format!("/kv/{}", path_segment(key)?);
        let request = RoutedRequest {
            method,
            path: &path,
            body,
        };
        Ok(self.routing.send(key.as_bytes(), request).await?)
    }
}

/// The service's `read=` for a read preference. A preference that may end at either role asks
/// for `any`: the routing client falls back to the other role with the same request (after a
/// `421`, or when the key has no replica of the preferred one), and whichever answers serves in
/// the role it holds. A primary read sends no query, as before replicas.
fn read_query(read_from: ReadFrom) -> &'static str {
    match read_from {
        ReadFrom::Primary => "",
        ReadFrom::Secondary => "?read=secondary",
        ReadFrom::PrimaryPreferred | ReadFrom::SecondaryPreferred => "?read=any",
    }
}

fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, KvError> {
    serde_json::from_slice(body).map_err(|error| KvError::Decode(error.to_string()))
}

/// An error answer: one of the service's refusals, or any other problem.
fn refusal(status: u16, body: &[u8]) -> KvError {
    if let Ok(problem) = serde_json::from_slice::<KvProblem>(body) {
        return KvError::Refused {
            reason: problem.reason,
            problem: Box::new(problem),
        };
    }
    let detail = serde_json::from_slice::<Problem>(body).map_or_else(
        |_| String::from_utf8_lossy(body).chars().take(256).collect(),
        |problem| problem.detail,
    );
    KvError::Failed { status, detail }
}

/// Percent-encodes a key as one path segment: unreserved characters (RFC 3986) as they are,
/// every other byte as `%XX`, so any other key reaches the service as it was given.
fn path_segment(key: &str) -> Result<String, KvError> {
    if key.is_empty() || key == "." || key == ".." {
        return Err(KvError::InvalidKey(key.to_owned()));
    }
    Ok(leasehold_api::client::percent_encode(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_percent_encoded_path_segment() {
        assert_eq!(path_segment("user-42").unwrap(), "user-42");
        assert_eq!(path_segment("a/b c?é").unwrap(), "a%2Fb%20c%3F%C3%A9");
        assert_eq!(path_segment("a.b").unwrap(), "a.b");
        for bad in ["", ".", ".."] {
            assert!(
                matches!(path_segment(bad), Err(KvError::InvalidKey(_))),
                "{bad:?}"
            );
        }
    }

    /// Only the preferences that may end at either role ask for either; a primary read is the
    /// request it always was.
    #[test]
    fn each_read_preference_asks_for_the_roles_it_may_reach() {
        assert_eq!(read_query(ReadFrom::Primary), "");
        assert_eq!(read_query(ReadFrom::Secondary), "?read=secondary");
        assert_eq!(read_query(ReadFrom::PrimaryPreferred), "?read=any");
        assert_eq!(read_query(ReadFrom::SecondaryPreferred), "?read=any");
    }

    #[test]
    fn only_unknown_outcomes_may_have_been_applied() {
        let failed = |status| KvError::Failed {
            status,
            detail: String::new(),
        };
        assert!(failed(400).definitely_not_applied());
        assert!(failed(503).definitely_not_applied());
        assert!(!failed(504).definitely_not_applied());
        assert!(!failed(500).definitely_not_applied());
        let body = br#"{"type":"https://leasehold.dev/problems/conflict","title":"Conflict","status":409,"detail":"stale","code":"conflict","retryable":false,"reason":"stale_epoch","shard":1,"epoch":1,"store_epoch":2}"#;
        let error = refusal(409, body);
        assert!(
            matches!(&error, KvError::Refused { reason: Refusal::StaleEpoch, problem } if problem.store_epoch == Some(2)),
            "{error:?}"
        );
        assert!(error.definitely_not_applied());
    }
}
