//! Who a listener answers, by the request's `Host` and `Origin` headers (PROTOCOL P13.5, P13.6):
//! a web page the operator opens must not be able to use the operator's loopback listeners.
//!
//! - **DNS rebinding.** A page on `evil.example` whose name is made to resolve to `127.0.0.1`
//!   reads the loopback listener as its own origin; the browser still sends `Host:
//!   evil.example`. A plaintext listener on loopback therefore answers only a `Host` that names
//!   a loopback address, `localhost`, or the host it advertises ([`HostPolicy::loopback`]). A
//!   TLS listener needs the cluster's client certificate first, and a plaintext listener off
//!   loopback (`--insecure`) is reached by whatever names the operator gives it, as etcd's
//!   `--host-whitelist` defaults to any: neither checks the `Host`.
//! - **Cross-site requests.** A browser sends `Origin` with every cross-site request that may
//!   change something (a form, `fetch`, `sendBeacon`), including a body-less `POST` it sends
//!   without asking first. Every listener refuses a `POST`, `PUT`, `DELETE` or `PATCH` whose
//!   `Origin` is not the listener's own (`Host`). Clients that are not browsers (`leaseholdctl`,
//!   `curl`, executors, managers) send no `Origin`; every body must be JSON besides (`415`).
//!
//! A refusal is `403 forbidden`, before anything is read, forwarded or applied.

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::http::HttpError;
use crate::problem::ErrorCode;

/// Which `Host` a listener answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    /// `None`: any. Otherwise the names besides loopback addresses and `localhost`, lowercase,
    /// without a port.
    names: Option<Vec<String>>,
}

impl HostPolicy {
    /// Any `Host` (a TLS listener, or a plaintext one off loopback).
    pub fn any() -> Self {
        Self { names: None }
    }

    /// A plaintext listener on loopback: loopback addresses, `localhost`, and the host of the
    /// URL it advertises.
    pub fn loopback(advertised: &str) -> Self {
        let names = reqwest::Url::parse(advertised)
            .ok()
            .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
            .into_iter()
            .collect();
        Self { names: Some(names) }
    }

    /// The policy of a listener: [`HostPolicy::loopback`] when it speaks plaintext on a
    /// loopback address, [`HostPolicy::any`] otherwise.
    pub fn for_listener(tls: bool, listen: std::net::IpAddr, advertised: &str) -> Self {
        if !tls && listen.is_loopback() {
            Self::loopback(advertised)
        } else {
            Self::any()
        }
    }

    fn allows(&self, host: &str) -> bool {
        let Some(names) = &self.names else {
            return true;
        };
        let name = host_name(host).to_ascii_lowercase();
        let address = name.trim_start_matches('[').trim_end_matches(']');
        address
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
            || name == "localhost"
            || names.contains(&name)
    }
}

/// The host part of a `Host` value (`[::1]:7001` → `[::1]`, `localhost:7001` → `localhost`).
fn host_name(host: &str) -> &str {
    match host.rfind(':') {
        // An IPv6 literal's last colon is inside its brackets when it has no port.
        Some(colon) if !host[colon..].contains(']') => &host[..colon],
        _ => host,
    }
}

/// The decision, from the method and the headers.
pub fn check(policy: &HostPolicy, method: &Method, headers: &HeaderMap) -> Result<(), HttpError> {
    let host = headers.get(HOST).and_then(|value| value.to_str().ok());
    if let Some(host) = host {
        if !policy.allows(host) {
            return Err(forbidden(format!(
                "Host {host:?} is not a name of this listener (a DNS-rebound page?); use \
                 127.0.0.1, localhost or the advertised address"
            )));
        }
    }
    let changes_something = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !changes_something {
        return Ok(());
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let same_origin = origin
        .to_str()
        .ok()
        .and_then(|origin| reqwest::Url::parse(origin).ok())
        .zip(host)
        .is_some_and(|(origin, host)| {
            let origin_host = match (origin.host_str(), origin.port()) {
                (Some(name), Some(port)) => format!("{name}:{port}"),
                (Some(name), None) => name.to_owned(),
                (None, _) => return false,
            };
            origin_host.eq_ignore_ascii_case(host)
        });
    if same_origin {
        Ok(())
    } else {
        Err(forbidden(format!(
            "a {method} from origin {origin:?}, another site's page: refused (cross-site \
             requests change nothing here)"
        )))
    }
}

fn forbidden(detail: String) -> HttpError {
    HttpError::new(ErrorCode::Forbidden, detail)
}

/// The layer (`from_fn_with_state(policy, check_host_and_origin)`), outside every route.
pub async fn check_host_and_origin(
    State(policy): State<HostPolicy>,
    request: Request,
    next: Next,
) -> Response {
    match check(&policy, request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(method = %request.method(), path = request.uri().path(), "refused: {}", refusal.problem().detail);
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(axum::http::HeaderName, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    /// P13.5, P13.6: a loopback plaintext listener answers loopback names and its advertised
    /// host only; a rebound name is refused, on reads too.
    #[test]
    fn p13_6_a_loopback_listener_refuses_a_rebound_host() {
        let policy = HostPolicy::loopback("http://127.0.0.1:7001");
        for good in [
            "127.0.0.1:7001",
            "localhost:7001",
            "[::1]:7001",
            "127.0.0.2",
            "LOCALHOST",
        ] {
            assert!(
                check(&policy, &Method::GET, &headers(&[(HOST, good)])).is_ok(),
                "{good}"
            );
        }
        for rebound in [
            "evil.example:7001",
            "evil.example",
            "127.0.0.1.evil.example:7001",
        ] {
            let refused = check(&policy, &Method::GET, &headers(&[(HOST, rebound)])).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::Forbidden, "{rebound}");
        }
        let named = HostPolicy::loopback("http://manager-1.local:7001");
        assert!(check(
            &named,
            &Method::GET,
            &headers(&[(HOST, "manager-1.local:7001")])
        )
        .is_ok());
        assert!(check(
            &HostPolicy::any(),
            &Method::GET,
            &headers(&[(HOST, "evil.example")])
        )
        .is_ok());
    }

    /// P13.6: a state-changing request from another site's page is refused, a body-less POST
    /// included; the same origin (the web console) and clients that send no Origin pass.
    #[test]
    fn p13_6_cross_site_writes_are_refused() {
        let policy = HostPolicy::any();
        let host = (HOST, "127.0.0.1:7001");
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            let cross = headers(&[host.clone(), (ORIGIN, "http://evil.example")]);
            assert_eq!(
                check(&policy, &method, &cross).unwrap_err().code(),
                ErrorCode::Forbidden,
                "{method}"
            );
            let null = headers(&[host.clone(), (ORIGIN, "null")]);
            assert!(
                check(&policy, &method, &null).is_err(),
                "{method} from null"
            );
            let same = headers(&[host.clone(), (ORIGIN, "http://127.0.0.1:7001")]);
            assert!(
                check(&policy, &method, &same).is_ok(),
                "{method} same origin"
            );
            assert!(check(&policy, &method, &headers(std::slice::from_ref(&host))).is_ok());
        }
        let cross_read = headers(&[host, (ORIGIN, "http://evil.example")]);
        assert!(
            check(&policy, &Method::GET, &cross_read).is_ok(),
            "a read: the browser keeps the answer from the page (no CORS headers)"
        );
    }
}
