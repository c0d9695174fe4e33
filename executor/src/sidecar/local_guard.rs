//! Who the local API answers (PROTOCOL P16.1, docs/SECURITY.md): the service beside the sidecar,
//! never a page in a browser on the same machine. One layer in front of every local route,
//! reads included, since `GET /v1/local/permits` is the service's acknowledgement and
//! `GET /v1/local/admit` tells a shard.
//!
//! A request is refused `403 forbidden`, before anything is read or recorded, when
//! - its `Sec-Fetch-Site` is present and is neither `same-origin` nor `none`: a browser sends it
//!   with every request a page makes, an image's or a form's included, and `none` only for what
//!   the user typed; no service sends `cross-site` or `same-site`;
//! - it carries an `Origin` that is not the listener's own (`http://` and the request's `Host`):
//!   a browser names the page's origin on every cross-origin request but a navigation, and no
//!   page is served here, so no legitimate request names another;
//! - on a loopback listener, its `Host` is not a loopback address or `localhost` (DNS
//!   rebinding), or it is a write from another origin, as every listener refuses (P13.6,
//!   `leasehold_api::origin`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderName, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasehold_api::http::HttpError;
use leasehold_api::origin::HostPolicy;
use leasehold_api::problem::ErrorCode;
use tokio::time::Instant;

/// `Sec-Fetch-Site` (Fetch Metadata): where the request comes from, as the browser says.
const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// How often a refusal is logged as a warning: a page can send thousands a second, and the
/// sidecar's log must not fill with them; those in between are logged at debug.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What guards a local listener: the `Host` policy of a loopback one; a unix socket has none (a
/// browser cannot reach it), but the other checks still apply.
#[derive(Debug, Clone)]
pub(crate) struct LocalGuard {
    host_policy: Option<HostPolicy>,
    /// When a refusal was last logged as a warning.
    warned: Arc<Mutex<Option<Instant>>>,
}

impl LocalGuard {
    pub(crate) fn new(host_policy: Option<HostPolicy>) -> Self {
        Self {
            host_policy,
            warned: Arc::default(),
        }
    }

    /// Whether this refusal is logged as a warning (the first, then one per [`WARN_EVERY`]).
    fn warn_now(&self) -> bool {
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if warned.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            return false;
        }
        *warned = Some(now);
        true
    }
}

/// The decision, from the method and the headers.
pub(crate) fn check(
    guard: &LocalGuard,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), HttpError> {
    if let Some(policy) = &guard.host_policy {
        leasehold_api::origin::check(policy, method, headers)?;
    }
    if let Some(site) = headers.get(SEC_FETCH_SITE) {
        let site = site.to_str().unwrap_or("");
        let from_the_user_or_here =
            site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none");
        if !from_the_user_or_here {
            return Err(forbidden(format!(
                "a {method} with Sec-Fetch-Site {site:?}, from a page in a browser: refused \
                 (the local API answers only the service beside the sidecar, PROTOCOL P16.1)"
            )));
        }
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let host = headers.get(HOST).and_then(|host| host.to_str().ok());
        let own = origin
            .to_str()
            .ok()
            .and_then(|origin| origin.strip_prefix("http://"))
            .zip(host)
            .is_some_and(|(origin, host)| origin.eq_ignore_ascii_case(host));
        if !own {
            return Err(forbidden(format!(
                "a {method} from origin {origin:?}, not this listener's: refused (the local API \
                 answers only the service beside the sidecar, PROTOCOL P16.1)"
            )));
        }
    }
    Ok(())
}

fn forbidden(detail: String) -> HttpError {
    HttpError::new(ErrorCode::Forbidden, detail)
}

/// The layer (`from_fn_with_state(guard, refuse_pages)`), outside every local route.
pub(crate) async fn refuse_pages(
    State(guard): State<LocalGuard>,
    request: Request,
    next: Next,
) -> Response {
    match check(&guard, request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let (method, path, detail) = (
                request.method(),
                request.uri().path(),
                &refusal.problem().detail,
            );
            if guard.warn_now() {
                tracing::warn!(%method, path, "local API refused: {detail} (the next minute's refusals are logged at debug)");
            } else {
                tracing::debug!(%method, path, "local API refused: {detail}");
            }
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert((*name).clone(), HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    fn refused(guard: &LocalGuard, method: Method, pairs: &[(&HeaderName, &str)]) -> bool {
        match check(guard, &method, &headers(pairs)) {
            Ok(()) => false,
            Err(refusal) => {
                assert_eq!(refusal.code(), ErrorCode::Forbidden);
                true
            }
        }
    }

    /// A page can send thousands of requests a second: the first refusal is a warning, the
    /// rest of the minute's are not, and the next minute's first is one again.
    #[tokio::test(start_paused = true)]
    async fn refusals_warn_once_a_minute() {
        let guard = LocalGuard::new(None);
        assert!(guard.warn_now(), "the first refusal");
        assert!(!guard.warn_now(), "the next, at once");
        tokio::time::advance(WARN_EVERY - Duration::from_millis(1)).await;
        assert!(!guard.warn_now(), "the last of the minute");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(guard.warn_now(), "a minute after the first");
        assert!(!guard.warn_now(), "and again not at once");
    }

    /// P16.1: pages are refused by Fetch Metadata and by Origin on reads and writes alike; the
    /// service (no such headers), a same-origin request and what the user typed pass.
    #[test]
    fn p16_1_pages_are_refused_on_every_method() {
        for guard in [
            LocalGuard::new(None),
            LocalGuard::new(Some(HostPolicy::loopback("http://127.0.0.1:7201"))),
        ] {
            let host = (&HOST, "127.0.0.1:7201");
            for method in [Method::GET, Method::POST, Method::HEAD] {
                for site in ["cross-site", "same-site", "CROSS-SITE", "nonsense", ""] {
                    assert!(
                        refused(&guard, method.clone(), &[host, (&SEC_FETCH_SITE, site)]),
                        "{method} Sec-Fetch-Site {site:?}"
                    );
                }
                for origin in [
                    "http://evil.example",
                    "null",
                    "http://127.0.0.1:7202",
                    "https://127.0.0.1:7201",
                    "http://127.0.0.1:7201.evil.example",
                ] {
                    assert!(
                        refused(&guard, method.clone(), &[host, (&ORIGIN, origin)]),
                        "{method} Origin {origin:?}"
                    );
                }
                assert!(
                    refused(
                        &guard,
                        method.clone(),
                        &[(&ORIGIN, "http://127.0.0.1:7201")]
                    ),
                    "{method}: an Origin with no Host to be the listener's"
                );
                assert!(!refused(&guard, method.clone(), &[host]), "{method}");
                for site in ["same-origin", "none"] {
                    assert!(
                        !refused(&guard, method.clone(), &[host, (&SEC_FETCH_SITE, site)]),
                        "{method} Sec-Fetch-Site {site}"
                    );
                }
                assert!(
                    !refused(
                        &guard,
                        method.clone(),
                        &[host, (&ORIGIN, "http://127.0.0.1:7201")]
                    ),
                    "{method} from the listener's own origin"
                );
            }
        }
    }
}
