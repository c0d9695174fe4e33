//! Reads whose answer grows with the cluster (PROTOCOL P13.6): the whole state, the shard and
//! executor lists, the routing table and the backup. At a million shards one answer is tens of
//! megabytes, built whole before it is sent; forty slow readers once held forty of them at
//! once. So a replica builds and sends at most [`MAX_HEAVY_READS`] at a time: each holds a
//! permit from before its answer is built until the last byte of it has been handed to the
//! connection, and a read that finds none free within [`HEAVY_READ_QUEUE_WAIT`] is answered
//! `503 unavailable` (retryable, `Retry-After`). The answer goes out in pieces, so the permit
//! ends when the reader has taken it, and a reader that stops taking it is cut off by the
//! listener's send timeout (`leasehold_api::serve`), which ends the permit too. Memory for
//! these answers is then bounded by [`MAX_HEAVY_READS`] times the largest, whatever readers do.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use leasehold_api::problem::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::HttpError;

/// Heavy reads one replica builds and sends at once.
pub const MAX_HEAVY_READS: usize = 4;

/// Longest a heavy read waits for a permit before it is answered `503`.
pub const HEAVY_READ_QUEUE_WAIT: Duration = Duration::from_secs(5);

/// The pieces an answer is handed to the connection in: small enough that what the reader has
/// not taken stays in our hands (and counted under the permit), not in the connection's buffer.
const PIECE_BYTES: usize = 64 << 10;

/// The permits of one replica's heavy reads; clones share them.
#[derive(Debug, Clone)]
pub struct HeavyReads(Arc<Semaphore>);

impl Default for HeavyReads {
    fn default() -> Self {
        Self::new(MAX_HEAVY_READS)
    }
}

impl HeavyReads {
    pub fn new(permits: usize) -> Self {
        Self(Arc::new(Semaphore::new(permits.max(1))))
    }

    /// Permits free now.
    #[cfg(test)]
    fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// Whether `uri` asks for an answer that grows with the cluster: a route of one key does not.
pub fn is_heavy(uri: &Uri) -> bool {
    match uri.path().trim_end_matches('/') {
        "/v1/state" | "/v1/shards" | "/v1/executors" | "/v1/backup" => true,
        "/v1/routing" => !uri
            .query()
            .unwrap_or_default()
            .split('&')
            .any(|pair| pair.starts_with("key=")),
        _ => false,
    }
}

/// The layer in front of the read routes.
pub async fn bound_heavy_reads(
    State(reads): State<HeavyReads>,
    request: Request,
    next: Next,
) -> Response {
    if !is_heavy(request.uri()) {
        return next.run(request).await;
    }
    let waited = tokio::time::timeout(HEAVY_READ_QUEUE_WAIT, reads.0.clone().acquire_owned());
    let permit = match waited.await {
        Ok(Ok(permit)) => permit,
        _ => {
            tracing::warn!(
                path = request.uri().path(),
                max = MAX_HEAVY_READS,
                "a heavy read found every permit taken: 503 (P13.6)"
            );
            let mut refused = HttpError::new(
                ErrorCode::Unavailable,
                format!(
                    "{MAX_HEAVY_READS} reads of the whole state, shard, executor or routing \
                     lists or the backup are being answered on this replica; retry (PROTOCOL \
                     P13.6)"
                ),
            )
            .into_response();
            refused
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return refused;
        }
    };
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, in_pieces_holding(body, permit))
}

/// `body` in pieces of at most [`PIECE_BYTES`], holding `permit` until the last is taken (or
/// the body is dropped, when its connection ends).
fn in_pieces_holding(body: Body, permit: OwnedSemaphorePermit) -> Body {
    let pieces = body.into_data_stream().flat_map(move |chunk| {
        let _held = &permit;
        let pieces: Vec<Result<Bytes, axum::Error>> = match chunk {
            Ok(bytes) => (0..bytes.len())
                .step_by(PIECE_BYTES)
                .map(|at| Ok(bytes.slice(at..bytes.len().min(at + PIECE_BYTES))))
                .collect(),
            Err(error) => vec![Err(error)],
        };
        futures_util::stream::iter(pieces)
    });
    Body::from_stream(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p13_6_which_reads_are_heavy() {
        let heavy = |uri: &str| is_heavy(&uri.parse::<Uri>().unwrap());
        assert!(heavy("/v1/state"));
        assert!(heavy("/v1/state?namespace=kv&consistent=true"));
        assert!(heavy("/v1/shards"));
        assert!(heavy("/v1/executors?namespace=kv"));
        assert!(heavy("/v1/backup"));
        assert!(heavy("/v1/routing"));
        assert!(heavy("/v1/routing?form=runs&namespace=kv"));
        assert!(!heavy("/v1/routing?key=user-1"));
        assert!(!heavy("/v1/routing?namespace=kv&key=user-1"));
        assert!(!heavy("/v1/executors/ex-3"));
        assert!(!heavy("/v1/cluster"));
        assert!(!heavy("/v1/audit"));
    }

    /// P13.6: a heavy read holds its permit until its answer's last piece is taken, and no more
    /// than the permits are answered at once; past the wait, `503` with `Retry-After`.
    #[tokio::test(start_paused = true)]
    async fn p13_6_heavy_reads_hold_a_permit_until_their_answer_is_taken() {
        use axum::routing::get;
        use tower::ServiceExt;
        let reads = HeavyReads::new(1);
        let router = axum::Router::new()
            .route(
                "/v1/state",
                get(|| async { vec![b'x'; 3 * PIECE_BYTES + 1] }),
            )
            .layer(axum::middleware::from_fn_with_state(
                reads.clone(),
                bound_heavy_reads,
            ));
        let get_state = || {
            Request::builder()
                .uri("/v1/state")
                .body(Body::empty())
                .unwrap()
        };
        let first = router.clone().oneshot(get_state()).await.unwrap();
        assert_eq!(reads.available(), 0, "held while its answer is not taken");
        let refused = router.clone().oneshot(get_state()).await.unwrap();
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.headers()[RETRY_AFTER], "1");
        let mut pieces = first.into_body().into_data_stream();
        let mut taken = Vec::new();
        while let Some(piece) = pieces.next().await {
            let piece = piece.unwrap();
            assert!(piece.len() <= PIECE_BYTES);
            taken.push(piece.len());
        }
        assert_eq!(taken.iter().sum::<usize>(), 3 * PIECE_BYTES + 1);
        drop(pieces);
        assert_eq!(reads.available(), 1, "given back once the answer is taken");
        let second = router.clone().oneshot(get_state()).await.unwrap();
        assert_eq!(second.status(), 200);
        drop(second);
        assert_eq!(reads.available(), 1, "given back when an answer is dropped");
    }
}
