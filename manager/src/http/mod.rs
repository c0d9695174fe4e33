//! The manager's HTTP server: public API under `/v1`, Raft RPC under `/raft`, health and metrics,
//! and the read-only web console under `/ui/`.
//!
//! Routing of requests (PROTOCOL §9): writes are served by the leader; a write that reaches a
//! follower is forwarded to the leader in one hop and answered as the leader answered; reads are
//! local unless `?consistent=true`. Every reply names the leader in `X-Leasehold-Leader`.

mod admission;
mod authorize;
mod backup;
mod cluster;
mod credentials;
mod drain;
mod error;
mod executors;
mod forward;
mod health;
mod heavy_reads;
mod inspect;
mod namespaces;
pub mod openapi;
mod operator;
mod params;
mod plan;
mod raft_rpc;
pub mod registration_limit;
mod safe_to_stop;
mod ui;
pub mod vouch;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRef};
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use leasehold_api::http::{limit_body, request_timeout, BodyLimit};
use leasehold_api::origin::HostPolicy;
use watch::WatchHub;

use self::admission::ExecutorWrite;
use tower_http::catch_panic::CatchPanicLayer;

pub use error::HttpError;
pub use leasehold_api::http::{ApiJson, ApiQuery};

use crate::node::ManagerNode;
use crate::service::executors::Executors;
use crate::service::members::Members;
use crate::service::operator::Operator;
use crate::service::views::Views;
use crate::service::Services;

/// Marks a request forwarded by a follower, so it is never forwarded twice.
pub const FORWARDED_HEADER: &str = "x-leasehold-forwarded-by";
/// On a request forwarded under TLS: the role (its certificate URI) of the caller the follower
/// authorized. The leader believes it only from the manager `FORWARDED_HEADER` names, proved by
/// that manager's certificate (P13.3, `authorize::effective_role`).
pub const FORWARDED_ROLE_HEADER: &str = "x-leasehold-forwarded-role";
/// Beside `FORWARDED_ROLE_HEADER`: the subject of the caller's certificate, for the audit log
/// (P17.4), believed under the same rule.
pub const FORWARDED_SUBJECT_HEADER: &str = "x-leasehold-forwarded-subject";
/// Beside `FORWARDED_ROLE_HEADER`: the namespaces the caller's certificate is limited to,
/// comma-separated (P18.2), absent for an unlimited one; believed under the same rule.
pub const FORWARDED_SCOPE_HEADER: &str = "x-leasehold-forwarded-scope";
/// Largest public API request body, but for the routes that list shards.
pub const MAX_API_BODY_BYTES: usize = 1 << 20;
/// Largest Raft RPC body: an append batch or one snapshot chunk, with room to spare.
pub const MAX_RAFT_BODY_BYTES: usize = 64 << 20;
/// Bound on one forwarded request, including the leader's commit.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one executor-facing or inspection request, above the forward bound so a follower
/// answers a slow forward itself (`504 timeout`, outcome unknown) rather than being cut off.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on an administrative request: adding a member waits for it to catch up, a snapshot for
/// it to be built (each itself bounded below this).
pub const ADMIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(150);

/// The router's state: the narrow handles its handlers and layers are given, cut from the node
/// once when the router is built. A handler names the handles it uses (`State<Views>`,
/// `State<Executors>`, …), never the node; the service layer (`crate::service`) is what the
/// handlers of executors, operators and reads call.
///
/// axum clones the router's state for every request it routes, so the handles are shared: a
/// clone is one reference count, not one per handle (a renewal's clones of them all were a
/// tenth of the leader's CPU at 7 000 renewals/s).
#[derive(Clone)]
pub struct Handles(Arc<HandleSet>);

/// What [`Handles`] shares.
pub struct HandleSet {
    executors: Executors,
    operator: Operator,
    views: Views,
    members: Members,
    health: health::Health,
    raft: raft_rpc::RaftEndpoint,
    vouchers: Arc<vouch::Vouchers>,
    tls: executors::ListenerTls,
    gate: authorize::Gate,
    forwarding: forward::Forwarding,
    admission: admission::AdmissionReads,
}

impl Handles {
    pub fn of(node: &ManagerNode) -> Self {
        let Services {
            executors,
            operator,
            views,
            members,
        } = Services::of(node);
        // The forwards this router's listener has in flight, each vouched for until answered
        // (P13.3): issued by `forward`, confirmed to the leader by `vouch`.
        let vouchers = Arc::new(vouch::Vouchers::default());
        Self(Arc::new(HandleSet {
            executors,
            operator,
            views: views.clone(),
            members,
            health: health::Health {
                leadership: node.leadership.clone(),
                state: node.state.clone(),
                metrics: node.metrics.clone(),
                views,
            },
            raft: raft_rpc::RaftEndpoint {
                leadership: node.leadership.clone(),
                identity: node.identity.clone(),
                leader_contact: node.leader_contact.clone(),
            },
            vouchers: vouchers.clone(),
            tls: executors::ListenerTls(node.settings.tls.is_some()),
            gate: authorize::Gate {
                leadership: node.leadership.clone(),
                state: node.state.clone(),
                http: node.http.clone(),
                member_versions: node.member_versions.clone(),
                settings: node.settings.clone(),
                rejoin: node.rejoin_hold(),
            },
            forwarding: forward::Forwarding {
                leadership: node.leadership.clone(),
                state: node.state.clone(),
                http: node.http.clone(),
                vouchers,
            },
            admission: admission::AdmissionReads {
                leadership: node.leadership.clone(),
                state: node.state.clone(),
            },
        }))
    }
}

impl std::fmt::Debug for HandleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleSet").finish_non_exhaustive()
    }
}

impl std::ops::Deref for Handles {
    type Target = HandleSet;

    fn deref(&self) -> &HandleSet {
        &self.0
    }
}

/// `FromRef` for each handle a handler takes by type.
macro_rules! handles_by_type {
    ($($field:ident: $handle:ty),* $(,)?) => {
        $(impl FromRef<Handles> for $handle {
            fn from_ref(handles: &Handles) -> Self {
                handles.$field.clone()
            }
        })*
    };
}

handles_by_type!(
    executors: Executors,
    operator: Operator,
    views: Views,
    members: Members,
    health: health::Health,
    raft: raft_rpc::RaftEndpoint,
    vouchers: Arc<vouch::Vouchers>,
    tls: executors::ListenerTls,
);

/// The manager's router. `host_policy` says which `Host` its listener answers (P13.6,
/// `leasehold_api::origin`); `registration` bounds registrations (P13.6, P15.1,
/// `registration_limit`).
pub fn router(
    node: &ManagerNode,
    host_policy: HostPolicy,
    registration: registration_limit::RegistrationSettings,
) -> Router {
    let handles = Handles::of(node);
    let public = register_route(&handles, registration)
        .merge(leader_routes(&handles))
        .merge(read_routes(&handles))
        .merge(local_routes())
        .merge(ui::router())
        .route_layer(middleware::from_fn_with_state(
            BodyLimit {
                max_bytes: MAX_API_BODY_BYTES,
            },
            limit_body,
        ))
        .merge(executor_write_routes(&handles));
    public
        .merge(raft_routes())
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed)
        // Outside every route's own layers: who may call what is decided before a body is read
        // or a request forwarded (P13.3).
        .layer(middleware::from_fn_with_state(
            handles.gate.clone(),
            authorize::authorize,
        ))
        .layer(middleware::from_fn_with_state(
            handles.forwarding.clone(),
            forward::name_the_leader,
        ))
        // Before the role: a page in the operator's browser is refused whatever it holds.
        .layer(middleware::from_fn_with_state(
            host_policy,
            leasehold_api::origin::check_host_and_origin,
        ))
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
        .with_state(handles)
}

/// The router of `--health-listen`: `/livez` and `/readyz` and nothing else, in plaintext, for
/// probes that present no client certificate (Kubernetes' kubelet) when the API listener requires
/// one (P13.2). They tell whether this replica lives and can serve, nothing more (no detail, not
/// even with `?verbose`: that stays behind TLS); every other path is `404`.
pub fn health_router(node: &ManagerNode) -> Router {
    let health = Router::new()
        .route("/livez", get(health::bare_livez))
        .route("/readyz", get(health::bare_readyz));
    bounded(health, REQUEST_TIMEOUT)
        .fallback(leasehold_api::http::not_found)
        .method_not_allowed_fallback(leasehold_api::http::method_not_allowed)
        .layer(CatchPanicLayer::custom(leasehold_api::http::panic_response))
        .layer(middleware::from_fn(leasehold_api::http::request_id))
        .with_state(Handles::of(node))
}

/// `routes`, each request bounded by `limit`.
fn bounded(routes: Router<Handles>, limit: Duration) -> Router<Handles> {
    routes.route_layer(middleware::from_fn_with_state(limit, request_timeout))
}

/// `routes`, answered by the leader: a follower forwards them.
fn on_the_leader(handles: &Handles, routes: Router<Handles>) -> Router<Handles> {
    routes.route_layer(middleware::from_fn_with_state(
        handles.forwarding.clone(),
        forward::route_to_leader,
    ))
}

/// An executor's own writes are admitted (credential, known id) before their body is read or
/// forwarded; renewal claims and loads and releases list shards, and one executor may hold
/// every shard, so their bound comes from the cluster's shard count, not the other bodies'.
/// A drain is an executor's own write too (P17.2), or an operator's.
fn executor_write_routes(handles: &Handles) -> Router<Handles> {
    let executor_write = |path, handler, write| {
        bounded(
            on_the_leader(handles, Router::new().route(path, handler)),
            REQUEST_TIMEOUT,
        )
        .route_layer(DefaultBodyLimit::disable())
        .route_layer(middleware::from_fn_with_state(
            (handles.admission.clone(), write),
            admission::admit_executor_write,
        ))
    };
    executor_write(
        "/v1/executors/{executor_id}/renew",
        post(executors::renew),
        ExecutorWrite::Renew,
    )
    .merge(executor_write(
        "/v1/executors/{executor_id}/release",
        post(executors::release),
        ExecutorWrite::Release,
    ))
    .merge(executor_write(
        "/v1/executors/{executor_id}",
        axum::routing::delete(executors::deregister),
        ExecutorWrite::Deregister,
    ))
    .merge(executor_write(
        "/v1/executors/{executor_id}/drain",
        post(drain::drain),
        ExecutorWrite::Drain,
    ))
}

/// A registration is limited per caller where it arrives, before its body is read or it is
/// forwarded; its capacity is checked by the handler, on the leader (P13.6, P15.1).
fn register_route(
    handles: &Handles,
    registration: registration_limit::RegistrationSettings,
) -> Router<Handles> {
    bounded(
        on_the_leader(
            handles,
            Router::new().route("/v1/executors", post(executors::register)),
        ),
        REQUEST_TIMEOUT,
    )
    .route_layer(axum::Extension(registration))
    .route_layer(middleware::from_fn_with_state(
        registration_limit::RegistrationGate::new(registration.limits),
        registration_limit::limit_registrations,
    ))
}

/// Writes and administration only the leader performs.
fn leader_routes(handles: &Handles) -> Router<Handles> {
    let writes = Router::new()
        .route(
            "/v1/executors/{executor_id}/drain",
            axum::routing::delete(drain::undrain),
        )
        // P17.4: the operator controls.
        .route(
            "/v1/cluster/maintenance",
            axum::routing::put(operator::set_maintenance),
        )
        .route("/v1/shards/{shard}/move", post(operator::move_shard))
        .route(
            "/v1/shards/{shard}/pin",
            axum::routing::put(operator::pin).delete(operator::unpin),
        )
        // P18.1: namespaces are created, changed and deleted by operator actions.
        .route("/v1/namespaces", post(namespaces::create))
        .route(
            "/v1/namespaces/{name}",
            axum::routing::patch(namespaces::set).delete(namespaces::delete),
        )
        // P20.1: a reshard is an operator action too.
        .route("/v1/namespaces/{name}/reshard", post(namespaces::reshard));
    let admin = Router::new()
        .route("/v1/cluster/nodes", post(cluster::add_node))
        .route(
            "/v1/cluster/nodes/{node_id}",
            axum::routing::delete(cluster::remove_node),
        );
    // P17.4: the leader knows every lease on a clock in office, how far each voter is, and
    // what its planner goes by.
    let operator_reads = Router::new()
        .route("/v1/plan", get(plan::preview))
        .route(
            "/v1/executors/{executor_id}/safe-to-stop",
            get(safe_to_stop::executor),
        )
        .route(
            "/v1/cluster/nodes/{node_id}/safe-to-stop",
            get(safe_to_stop::member),
        );
    bounded(on_the_leader(handles, writes), REQUEST_TIMEOUT)
        .merge(bounded(
            on_the_leader(handles, admin),
            ADMIN_REQUEST_TIMEOUT,
        ))
        .merge(bounded(
            on_the_leader(handles, operator_reads),
            REQUEST_TIMEOUT,
        ))
}

/// Reads of the state: answered here, or by the leader for `?consistent=true`.
fn read_routes(handles: &Handles) -> Router<Handles> {
    let reads = Router::new()
        .route("/v1/cluster", get(cluster::info))
        .route("/v1/state", get(inspect::state))
        .route("/v1/executors", get(inspect::executors))
        .route("/v1/executors/{executor_id}", get(inspect::executor))
        .route("/v1/shards", get(inspect::shards))
        .route("/v1/routing", get(inspect::routing))
        .route("/v1/cluster/maintenance", get(operator::maintenance))
        .route("/v1/namespaces", get(namespaces::list))
        .route("/v1/namespaces/{name}", get(namespaces::show))
        .route("/v1/audit", get(operator::audit))
        .route("/v1/backup", get(backup::backup))
        .route_layer(middleware::from_fn_with_state(
            handles.forwarding.clone(),
            forward::consistent_reads,
        ))
        // Outside the read barrier: a heavy read waits for its permit first (P13.6).
        .route_layer(middleware::from_fn_with_state(
            heavy_reads::HeavyReads::default(),
            heavy_reads::bound_heavy_reads,
        ));
    bounded(reads, REQUEST_TIMEOUT)
}

/// What this node answers of itself: health, metrics, the API document, the blocking watch and
/// its own administration.
fn local_routes() -> Router<Handles> {
    let local = Router::new()
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(openapi::serve));
    // A blocking query holds its request for up to its own bounded wait.
    // The watch's bound and shared answer belong to the route, not the node.
    let watch = Router::new()
        .route("/v1/watch", get(watch::watch))
        .route_layer(axum::Extension(Arc::new(WatchHub::default())));
    let admin = Router::new()
        .route("/v1/cluster/init", post(cluster::init))
        .route("/v1/cluster/snapshot", post(cluster::snapshot));
    bounded(local, REQUEST_TIMEOUT)
        .merge(bounded(
            watch,
            leasehold_api::wire::MAX_WATCH_WAIT + REQUEST_TIMEOUT,
        ))
        .merge(bounded(admin, ADMIN_REQUEST_TIMEOUT))
}

/// Raft's RPCs between managers.
fn raft_routes() -> Router<Handles> {
    let raft = Router::new()
        .route("/raft/append", post(raft_rpc::append))
        .route("/raft/vote", post(raft_rpc::vote))
        .route("/raft/snapshot", post(raft_rpc::snapshot))
        .route("/raft/identity", get(raft_rpc::identity))
        .route("/raft/forwarded/{token}", get(vouch::voucher));
    // The body is read inside this bound (P13.6): no sender waits longer for one message.
    bounded(raft, crate::raft::SNAPSHOT_CHUNK_TIMEOUT)
        .layer(DefaultBodyLimit::max(MAX_RAFT_BODY_BYTES))
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").finish_non_exhaustive()
    }
}
