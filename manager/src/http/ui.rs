//! The read-only web console, `GET /ui/` (`/` and `/ui` redirect there): the members of the Raft
//! group, the executors with their leases, capacities and utilisation, a map of every shard
//! coloured by owner (handoffs and unowned shards marked) or, on request, by load (hot shards
//! marked), and a feed of the changes the page has seen. It shows maintenance mode while it is on
//! and each shard's pin (PROTOCOL P17.4), and on request the next plan and the audit log
//! (`GET /v1/audit`, which under TLS answers only an admin's browser; the page shows the refusal).
//! It shows one namespace at a time (PROTOCOL P18.1): a selector in the header lists them
//! (`GET /v1/namespaces`), every namespaced read names the one chosen (`?namespace=`), and the
//! choice is kept in the page's address (`/ui/#namespace=orders`); a namespace that does not
//! exist falls back to `default` with a notice.
//!
//! Every manager serves it; the page reads only from the manager that served it, so it works on
//! an isolated network and never needs the leader. It follows the state with the blocking query
//! `GET /v1/watch` (one request at a time, PROTOCOL §9) and derives the feed by diffing successive
//! states. Membership comes from [`members`], which asks every member for its own
//! `GET /v1/cluster` (the same view `leaseholdctl cluster status` prints), because a page may only
//! talk to its own origin. Loads are soft state only the leader has (PROTOCOL §15), so while the
//! map is coloured by load the page polls `GET /v1/shards?consistent=true` and
//! `GET /v1/executors?consistent=true`, which a follower forwards to the leader; that is the one
//! thing the page needs a leader for, and without one it says that no load is known.
//!
//! The HTML, CSS and JavaScript under `ui/` are compiled into the binary; nothing is loaded from
//! anywhere else. The page is sent with a strict `Content-Security-Policy` (scripts, styles and
//! requests from this origin only; no inline script or style), and every asset with
//! `Cache-Control: no-cache`, so a restarted manager of another release serves its own.

use std::time::Duration;

use axum::extract::State;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::HeaderValue;
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use leasehold_api::ctl::MemberStatus;
use leasehold_api::http::request_timeout;
use leasehold_api::wire::{ClusterInfo, Member};
use serde::Serialize;

use super::{Handles, REQUEST_TIMEOUT};
use crate::service::members::Members;

/// Where the console lives; `/` and `/ui` redirect here.
pub const CONSOLE_PATH: &str = "/ui/";

const INDEX_HTML: &str = include_str!("ui/index.html");
const CONSOLE_CSS: &str = include_str!("ui/console.css");
const CONSOLE_JS: &str = include_str!("ui/console.js");
const FAVICON_SVG: &str = include_str!("ui/favicon.svg");

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Only this origin's own files and API; no inline script or style, no framing, no forms.
const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'self'; script-src 'self'; \
style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

/// Bound on asking one member for its `/v1/cluster`. Members are asked at once, so the reply
/// takes at most about this long; a member that does not answer in time is shown unreachable.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(1);

/// The console's routes. They need no leader, take no body and read nothing consistently.
pub fn router() -> Router<Handles> {
    assets()
        .route("/ui/members", get(members))
        .route_layer(middleware::from_fn_with_state(
            REQUEST_TIMEOUT,
            request_timeout,
        ))
}

/// The redirects and the embedded files, which need no state.
fn assets<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(to_console))
        .route("/ui", get(to_console))
        .route(CONSOLE_PATH, get(index))
        .route("/ui/console.css", get(|| asset(CSS, CONSOLE_CSS)))
        .route("/ui/console.js", get(|| asset(JAVASCRIPT, CONSOLE_JS)))
        .route("/ui/favicon.svg", get(|| asset(SVG, FAVICON_SVG)))
        // Anything else under /ui/ is answered like every unknown route: 404 problem+json.
        .route("/ui/{*rest}", any(leasehold_api::http::not_found))
}

async fn to_console() -> Redirect {
    Redirect::temporary(CONSOLE_PATH)
}

async fn index() -> Response {
    let mut response = asset(HTML, INDEX_HTML).await;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE),
    );
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// One embedded file, with its media type (text is UTF-8: the files are Rust string literals).
async fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `GET /ui/members`: every member's own view of the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct MembersReply {
    /// The member that answered (and served the page).
    node_id: u64,
    /// Its release. Members of other releases report theirs in their own `/v1/cluster` once
    /// they do (PROTOCOL P14.3); the page shows what each reports.
    release: &'static str,
    /// Every voter and learner, ascending by node id, with its own view or why it gave none
    /// (as `leaseholdctl cluster status` has them).
    members: Vec<MemberStatus>,
}

/// Asks every member of this node's membership for its `/v1/cluster` at once (this node answers
/// from memory), each within [`MEMBER_TIMEOUT`].
async fn members(State(members): State<Members>) -> Json<MembersReply> {
    let own = members.cluster_info().await;
    let listed: Vec<(Member, bool)> = own
        .voters
        .iter()
        .map(|m| (m.clone(), true))
        .chain(own.learners.iter().map(|m| (m.clone(), false)))
        .collect();
    // Spawned first and awaited afterwards, so the slowest member bounds the wait, not the sum.
    let probes: Vec<_> = listed
        .iter()
        .map(|(member, _)| {
            (member.node_id != members.leadership.id).then(|| {
                let http = members.http.clone();
                let url = format!("{}/v1/cluster", member.address.trim_end_matches('/'));
                tokio::spawn(async move { ask_member(&http, &url).await })
            })
        })
        .collect();
    let mut statuses = Vec::with_capacity(listed.len());
    for ((member, voter), probe) in listed.into_iter().zip(probes) {
        let answer = match probe {
            None => Ok(own.clone()),
            Some(handle) => match handle.await {
                Ok(answer) => answer,
                Err(error) => Err(format!("probe failed: {error}")),
            },
        };
        let (info, error) = match answer {
            Ok(info) => (Some(info), None),
            Err(error) => (None, Some(error)),
        };
        statuses.push(MemberStatus {
            node_id: member.node_id,
            address: member.address,
            voter,
            info,
            lag: None,
            error,
        });
    }
    Json(MembersReply {
        node_id: members.leadership.id,
        release: leasehold_api::RELEASE,
        members: MemberStatus::sorted_with_lag(statuses),
    })
}

async fn ask_member(http: &reqwest::Client, url: &str) -> Result<ClusterInfo, String> {
    let reply = http
        .get(url)
        .timeout(MEMBER_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("unreachable: {e}"))?;
    if !reply.status().is_success() {
        return Err(format!("answered {}", reply.status()));
    }
    reply
        .json::<ClusterInfo>()
        .await
        .map_err(|e| format!("unreadable answer: {e}"))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::header::LOCATION;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = assets::<()>().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, headers, String::from_utf8(body.to_vec()).unwrap())
    }

    fn header<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> &'a str {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn the_root_and_ui_without_a_slash_redirect_to_the_console() {
        for path in ["/", "/ui"] {
            let (status, headers, _) = get(path).await;
            assert!(status.is_redirection(), "{path}: {status}");
            assert_eq!(header(&headers, "location"), CONSOLE_PATH, "{path}");
            assert!(headers.contains_key(LOCATION));
        }
    }

    #[tokio::test]
    async fn the_console_page_is_html_under_a_strict_policy_and_loads_its_own_script_and_style() {
        let (status, headers, body) = get("/ui/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
        assert_eq!(header(&headers, "cache-control"), "no-cache");
        let policy = header(&headers, "content-security-policy");
        assert!(policy.starts_with("default-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        assert!(body.contains(r#"<script src="console.js" defer></script>"#));
        assert!(body.contains(r#"<link rel="stylesheet" href="console.css">"#));
        // Nothing inline, nothing from elsewhere: the policy would refuse it.
        assert!(!body.contains("style="), "no inline style attributes");
        assert!(!body.contains("<style"), "no inline style elements");
        assert_eq!(body.matches("<script").count(), 1, "one external script");
        for text in [&body, CONSOLE_CSS, CONSOLE_JS] {
            assert!(!text.contains("http://") && !text.contains("https://"));
            assert!(!text.contains("@import") && !text.contains("url("));
        }
    }

    #[tokio::test]
    async fn the_assets_have_their_content_types() {
        for (path, content_type, text) in [
            (
                "/ui/console.js",
                "text/javascript; charset=utf-8",
                CONSOLE_JS,
            ),
            ("/ui/console.css", "text/css; charset=utf-8", CONSOLE_CSS),
            ("/ui/favicon.svg", "image/svg+xml", FAVICON_SVG),
        ] {
            let (status, headers, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(header(&headers, "content-type"), content_type, "{path}");
            assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
            assert_eq!(body, text, "{path}");
        }
    }

    #[tokio::test]
    async fn an_unknown_console_path_is_a_problem_404_like_every_unknown_route() {
        for path in ["/ui/nope", "/ui/console.js/x", "/ui/members/1"] {
            let (status, headers, body) = get(path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
            assert_eq!(
                header(&headers, "content-type"),
                leasehold_api::PROBLEM_CONTENT_TYPE
            );
            let problem: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(problem["code"], "not_found", "{path}");
        }
    }

    fn status(node_id: u64, answer: Option<(Option<u64>, u64, u64)>) -> MemberStatus {
        MemberStatus {
            node_id,
            address: format!("http://127.0.0.1:700{node_id}"),
            voter: true,
            info: answer.map(|(leader_id, last_log, applied)| ClusterInfo {
                node_id,
                leader_id,
                leader_address: None,
                term: 3,
                voters: Vec::new(),
                learners: Vec::new(),
                last_log_index: Some(last_log),
                committed_index: Some(applied),
                applied_index: Some(applied),
                snapshot: None,
                release: None,
                cluster_version: None,
                schemas: None,
            }),
            lag: None,
            error: answer.is_none().then(|| "unreachable".to_string()),
        }
    }

    #[test]
    fn lag_is_what_each_member_has_still_to_apply_of_the_leaders_log() {
        let statuses = MemberStatus::sorted_with_lag(vec![
            status(3, None),
            status(2, Some((Some(1), 40, 37))),
            status(1, Some((Some(1), 42, 42))),
        ]);
        let lags: Vec<_> = statuses.iter().map(|s| (s.node_id, s.lag)).collect();
        assert_eq!(lags, [(1, Some(0)), (2, Some(5)), (3, None)]);
        // Without a member that names itself leader, there is nothing to measure against.
        let statuses = MemberStatus::sorted_with_lag(vec![status(2, Some((None, 40, 37)))]);
        assert_eq!(statuses[0].lag, None);
    }
}
