//! Who may call what (PROTOCOL P13.3), checked in one layer in front of every route, before a
//! body is read, anything is applied, or a request is forwarded to the leader.
//!
//! With TLS every caller is one of `manager` (with its node id), `executor` or `admin`, proved by
//! the client certificate the handshake verified against the cluster's CA (P13.1). Without TLS
//! roles are not checked (P13.5: plaintext is loopback-only unless `--insecure`); executor
//! credentials are checked either way (P13.4, `credentials`).

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasehold_api::problem::ErrorCode;
use leasehold_api::serve::PeerRole;
use leasehold_api::tls::{printable_ascii, NamespaceScope, Role};
use leasehold_api::wire::{FIRST_RELEASE, NAMESPACES_SCHEMA};

use super::vouch;
use super::{
    HttpError, FORWARDED_HEADER, FORWARDED_ROLE_HEADER, FORWARDED_SCOPE_HEADER,
    FORWARDED_SUBJECT_HEADER,
};
use crate::handles::leadership::Leadership;
use crate::handles::member_versions::MemberVersion;
use crate::handles::member_versions::MemberVersions;
use crate::node::{ClusterSettings, RejoinHold};
use crate::raft::identity::NODE_ID_HEADER;
use crate::raft::LeaseStateHandle;
pub use crate::service::operator::Actor;
use axum::http::HeaderMap;
use std::sync::Arc;

/// What deciding who may call what uses: the applied state and membership, the peers' versions,
/// the client that asks a forwarding member to vouch, the settings the node was started with,
/// and whether it still holds Raft back while rejoining.
#[derive(Clone)]
pub struct Gate {
    pub leadership: Leadership,
    pub state: LeaseStateHandle,
    pub http: reqwest::Client,
    pub member_versions: Arc<MemberVersions>,
    pub settings: Arc<ClusterSettings>,
    pub rejoin: Arc<RejoinHold>,
}

/// A role without its node id: what a route asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    Manager,
    Executor,
    Admin,
}

impl RoleKind {
    fn of(role: &Role) -> Self {
        match role {
            Role::Manager { .. } => RoleKind::Manager,
            Role::Executor => RoleKind::Executor,
            Role::Admin => RoleKind::Admin,
        }
    }
}

/// What a route requires of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Health checks: anyone who can connect, certificate or not.
    Anyone,
    /// Reads: any certificate of the cluster.
    AnyRole,
    /// One of these roles.
    OneOf(&'static [RoleKind]),
    /// Raft RPCs: a manager whose certificate names the node the message claims to come from,
    /// and which is a member (or, before formation, listed in `--initial-cluster`).
    RaftPeer,
    /// Membership of one manager: an admin, or the manager whose certificate names that node,
    /// for itself only ([`own_membership_allowed`]): to join (`POST /v1/cluster/nodes`, the node
    /// named in the body, which the handler checks with [`manager_join`]) or to remove itself to
    /// rejoin after its data directory was lost (`DELETE /v1/cluster/nodes/{id}`, named here).
    AdminOrOwnManager(Option<u64>),
}

const ADMIN: &[RoleKind] = &[RoleKind::Admin];
const EXECUTOR: &[RoleKind] = &[RoleKind::Executor];
const EXECUTOR_OR_ADMIN: &[RoleKind] = &[RoleKind::Executor, RoleKind::Admin];

/// The requirement of `method path` (P13.3). Pure, so the table is tested on its own; a path
/// no route serves asks for any role, and the router answers it 404 or 405.
pub fn requirement(method: &Method, path: &str) -> Requirement {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match (method, segments.as_slice()) {
        (_, ["livez"] | ["readyz"]) => Requirement::Anyone,
        (_, ["raft", ..]) => Requirement::RaftPeer,
        (&Method::POST, ["v1", "executors"]) => Requirement::OneOf(EXECUTOR_OR_ADMIN),
        (&Method::POST, ["v1", "executors", _, "renew" | "release"]) => {
            Requirement::OneOf(EXECUTOR)
        }
        // The executor's own (with its credential), or an operator's.
        (&Method::DELETE, ["v1", "executors", _]) => Requirement::OneOf(EXECUTOR_OR_ADMIN),
        // An executor drains itself, with its credential (P17.2, `admission`); only an operator
        // takes a drain back.
        (&Method::POST, ["v1", "executors", _, "drain"]) => Requirement::OneOf(EXECUTOR_OR_ADMIN),
        (_, ["v1", "executors", _, "drain"]) => Requirement::OneOf(ADMIN),
        // A manager joins as itself, or removes itself to rejoin (`--join`, `--rejoin`).
        (&Method::POST, ["v1", "cluster", "nodes"]) => Requirement::AdminOrOwnManager(None),
        (&Method::DELETE, ["v1", "cluster", "nodes", node_id]) => match node_id.parse() {
            Ok(node_id) => Requirement::AdminOrOwnManager(Some(node_id)),
            Err(_) => Requirement::OneOf(ADMIN),
        },
        (_, ["v1", "cluster", "init" | "nodes" | "snapshot", ..]) if method != Method::GET => {
            Requirement::OneOf(ADMIN)
        }
        // Every method: a HEAD is answered from the backup GET builds (its size and revision).
        (_, ["v1", "backup"]) => Requirement::OneOf(ADMIN),
        // Operator controls (P17.4): who did what is the operators' business only.
        (_, ["v1", "cluster", "maintenance"]) if method != Method::GET => Requirement::OneOf(ADMIN),
        (_, ["v1", "shards", _, "move" | "pin"]) | (_, ["v1", "audit"]) => {
            Requirement::OneOf(ADMIN)
        }
        // Namespaces (P18.1): reading them is anyone's, changing them an operator's.
        (_, ["v1", "namespaces", ..]) if method != Method::GET => Requirement::OneOf(ADMIN),
        _ => Requirement::AnyRole,
    }
}

/// The caller's role, for handlers that treat an operator differently (an admin's deregister
/// needs no executor credential). Present only with TLS.
#[derive(Debug, Clone)]
pub struct CallerRole(pub Role);

/// The namespaces the caller may change (P18.2): its certificate's limit, or, for a request a
/// follower forwarded, the limit of the caller that follower authorized. Every request that
/// passes the layer carries one ([`NamespaceScope::All`] on a plaintext listener, where nobody
/// is proved). Reads are not limited by it.
#[derive(Debug, Clone, Default)]
pub struct CallerScope(pub NamespaceScope);

impl CallerScope {
    /// `403 forbidden` unless the caller may act in `namespace`.
    pub fn check(&self, namespace: &str) -> Result<(), HttpError> {
        if self.0.allows(namespace) {
            return Ok(());
        }
        Err(HttpError::new(
            ErrorCode::Forbidden,
            format!(
                "the certificate is limited to {}; {namespace:?} is not one of them \
                 (PROTOCOL P18.2)",
                self.0
            ),
        ))
    }
}

/// Whether `method path` changes something of one namespace only, which a certificate limited
/// to namespaces may ask for (the handler then checks the namespace, [`CallerScope::check`]).
/// Everything else a route requires a role for concerns the whole cluster (its membership,
/// snapshots, backups, maintenance, the audit log of every namespace), and a limited certificate
/// is refused it.
pub fn acts_in_one_namespace(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    matches!(
        (method, segments.as_slice()),
        (&Method::POST, ["v1", "executors"])
            | (_, ["v1", "executors", _, ..])
            | (_, ["v1", "namespaces", ..])
            | (_, ["v1", "shards", _, "move" | "pin"])
    )
}

/// The subject of the caller's certificate (printable ASCII), or of the certificate of the caller
/// a follower forwarded for. Present only with TLS.
#[derive(Debug, Clone)]
pub struct CallerSubject(pub String);

fn forbidden(detail: String) -> Response {
    HttpError::new(ErrorCode::Forbidden, detail).into_response()
}

fn unauthenticated(detail: &str) -> Response {
    HttpError::new(ErrorCode::Unauthenticated, detail.to_owned()).into_response()
}

/// The layer: on a TLS listener, refuses a caller whose certificate does not carry what the
/// route requires (401 without a certificate, 403 with the wrong role), and hands the role on.
pub async fn authorize(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    // With or without TLS: a rejoining node takes no Raft message for its old membership.
    if gate.rejoin.is_held() && held_while_rejoining(request.uri().path()) {
        return HttpError::new(
            ErrorCode::Unavailable,
            format!(
                "node {} is rejoining (--rejoin): it takes Raft messages once its old membership \
                 is removed",
                gate.leadership.id
            ),
        )
        .into_response();
    }
    if gate.settings.tls.is_none() {
        request
            .extensions_mut()
            .insert(Actor(Actor::ANONYMOUS.to_owned()));
        request.extensions_mut().insert(CallerScope::default());
        return next.run(request).await;
    }
    let required = requirement(request.method(), request.uri().path());
    if required == Requirement::Anyone {
        // Health checks change nothing, and are answered before any certificate is read.
        request.extensions_mut().insert(CallerScope::default());
        return next.run(request).await;
    }
    let (peer, role) = match caller_role(&request) {
        Ok(roles) => roles,
        Err(refused) => return *refused,
    };
    if let (Role::Manager { node_id }, true) =
        (peer, request.headers().contains_key(FORWARDED_ROLE_HEADER))
    {
        let claim = forwarded_claim(&request);
        if let Err(detail) = forwarded_by_member(&gate, node_id, claim).await {
            tracing::warn!(path = request.uri().path(), %peer, "refused: {detail}");
            return forbidden(detail);
        }
    }
    let scope = match caller_scope(&gate, &required, &request, &role) {
        Ok(scope) => scope,
        Err(refused) => return *refused,
    };
    if let Err(detail) = role_allowed(&gate, required, &role, &request) {
        tracing::warn!(path = request.uri().path(), %role, "refused: {detail}");
        return forbidden(detail);
    }
    let subject = subject_of(&request);
    let limit = scope.is_limited().then(|| scope.to_string());
    let actor = leasehold_api::wire::actor_of(&role.to_string(), limit.as_deref(), &subject);
    request.extensions_mut().insert(CallerRole(role));
    request.extensions_mut().insert(CallerScope(scope));
    request.extensions_mut().insert(CallerSubject(subject));
    request.extensions_mut().insert(Actor(actor));
    next.run(request).await
}

/// The role of a TLS listener's caller: its certificate's (`peer`), and the role it acts as,
/// which a manager's certificate may forward (P13.3, [`effective_role`]); the refusal to send
/// when there is none or it cannot be believed.
fn caller_role(request: &Request) -> Result<(Role, Role), Box<Response>> {
    let peer = match request.extensions().get::<PeerRole>().map(PeerRole::role) {
        Some(Ok(role)) => role,
        Some(Err(error)) => {
            return Err(Box::new(forbidden(format!(
                "the client certificate carries no role: {error}"
            ))))
        }
        None => {
            return Err(Box::new(unauthenticated(
                "a client certificate of the cluster's CA is required (P13.3)",
            )))
        }
    };
    let role = effective_role(peer, request.headers()).map_err(|detail| {
        tracing::warn!(path = request.uri().path(), %peer, "refused: {detail}");
        Box::new(forbidden(detail))
    })?;
    Ok((peer, role))
}

/// The namespaces the caller may change, checked against what the route touches when they are
/// limited; the refusal to send otherwise.
fn caller_scope(
    gate: &Gate,
    required: &Requirement,
    request: &Request,
    role: &Role,
) -> Result<NamespaceScope, Box<Response>> {
    let peer_scope = request
        .extensions()
        .get::<PeerRole>()
        .and_then(|peer| peer.scope().ok().cloned())
        .unwrap_or_default();
    // Believed as the forwarded role is: `effective_role` accepted the forwarding manager.
    let scope = effective_scope(peer_scope, request.headers())
        .map_err(|detail| Box::new(forbidden(detail)))?;
    if scope.is_limited() {
        if let Err(detail) = limited_scope_allowed(gate, required, request) {
            tracing::warn!(path = request.uri().path(), %role, %scope, "refused: {detail}");
            return Err(Box::new(forbidden(detail)));
        }
    }
    Ok(scope)
}

/// Whether `role` may do what the route `required`.
fn role_allowed(
    gate: &Gate,
    required: Requirement,
    role: &Role,
    request: &Request,
) -> Result<(), String> {
    match required {
        Requirement::Anyone | Requirement::AnyRole => Ok(()),
        Requirement::OneOf(kinds) if kinds.contains(&RoleKind::of(role)) => Ok(()),
        Requirement::OneOf(kinds) => Err(format!(
            "this needs the {} role; the certificate is {role}",
            kinds
                .iter()
                .map(|kind| format!("{kind:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(" or ")
        )),
        Requirement::RaftPeer => raft_peer_allowed(gate, role, request),
        Requirement::AdminOrOwnManager(named) => own_membership_allowed(role, named),
    }
}

/// The caller's subject for the audit: the forwarded one on a forwarded request (believed as the
/// forwarded role is, which `effective_role` checked), else the certificate's.
fn subject_of(request: &Request) -> String {
    match request.headers().get(FORWARDED_ROLE_HEADER) {
        Some(_) => request
            .headers()
            .get(FORWARDED_SUBJECT_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(printable_ascii)
            .unwrap_or_default(),
        None => request
            .extensions()
            .get::<PeerRole>()
            .map(|peer| peer.subject().to_owned())
            .unwrap_or_default(),
    }
}

/// The namespaces the caller may change: the certificate's, or, on a request a manager forwarded
/// ([`effective_role`] believed its role), the ones it forwarded (none named: unlimited).
fn effective_scope(peer: NamespaceScope, headers: &HeaderMap) -> Result<NamespaceScope, String> {
    if !headers.contains_key(FORWARDED_ROLE_HEADER) {
        return Ok(peer);
    }
    match headers.get(FORWARDED_SCOPE_HEADER) {
        None => Ok(NamespaceScope::All),
        Some(value) => value
            .to_str()
            .map_err(|_| format!("{FORWARDED_SCOPE_HEADER} is not text"))
            .and_then(|value| {
                NamespaceScope::from_header_value(value)
                    .map_err(|e| format!("{FORWARDED_SCOPE_HEADER}: {e}"))
            }),
    }
}

/// Whether a certificate limited to namespaces may ask for this request at all (P18.2): reads
/// are anyone's, changes only of one namespace ([`acts_in_one_namespace`]), and only once every
/// manager honours the limit. Below cluster version 12 a manager of an earlier release may lead,
/// which would take the limited certificate for an unlimited one.
fn limited_scope_allowed(
    gate: &Gate,
    required: &Requirement,
    request: &Request,
) -> Result<(), String> {
    let cluster_version = gate.state.read(|applied| applied.state.cluster_version());
    limited_scope_honoured(cluster_version)?;
    if limited_scope_reaches(required, request.method(), request.uri().path()) {
        return Ok(());
    }
    Err(format!(
        "{} {} concerns the whole cluster; a certificate limited to namespaces acts only in \
         them (PROTOCOL P18.2)",
        request.method(),
        request.uri().path()
    ))
}

/// Whether a cluster at `cluster_version` honours certificates limited to namespaces (P18.2):
/// one whose replicas do not all know the limit could let such a certificate act anywhere.
fn limited_scope_honoured(cluster_version: u32) -> Result<(), String> {
    if cluster_version < NAMESPACES_SCHEMA {
        return Err(format!(
            "a certificate limited to namespaces is honoured from cluster version \
             {NAMESPACES_SCHEMA}; the cluster is at {cluster_version} (PROTOCOL P18.2)"
        ));
    }
    Ok(())
}

/// Whether a certificate limited to namespaces may make this request (P18.2): any read any
/// certificate may make, and a change of something in one namespace (which the handler then
/// checks is one of the certificate's); nothing else of the whole cluster.
fn limited_scope_reaches(required: &Requirement, method: &Method, path: &str) -> bool {
    let reads =
        matches!(required, Requirement::AnyRole) && matches!(*method, Method::GET | Method::HEAD);
    reads || acts_in_one_namespace(method, path)
}

/// The Raft messages a rejoining node refuses: all but `/raft/identity`, which the leader and
/// the node itself ask before the old membership is removed.
fn held_while_rejoining(path: &str) -> bool {
    path.starts_with("/raft/") && path.trim_end_matches('/') != "/raft/identity"
}

/// Whose request this is: the certificate's role, or, for a request a follower forwarded, the
/// role of the caller that follower authorized. Only a manager forwards, and only under its own
/// name: the forwarded role is believed from the manager whose certificate matches the
/// forwarded-by header, and refused from anyone else (an executor cannot claim to be an admin).
pub fn effective_role(peer: Role, headers: &HeaderMap) -> Result<Role, String> {
    let Some(forwarded_role) = headers.get(FORWARDED_ROLE_HEADER) else {
        return Ok(peer);
    };
    let Role::Manager { node_id } = peer else {
        return Err(format!(
            "only a manager forwards requests ({FORWARDED_ROLE_HEADER}); the certificate is {peer}"
        ));
    };
    let forwarded_by = headers
        .get(FORWARDED_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if forwarded_by != Some(node_id) {
        return Err(format!(
            "the certificate is manager {node_id}'s, the request says it was forwarded by {forwarded_by:?}"
        ));
    }
    forwarded_role
        .to_str()
        .map_err(|_| format!("{FORWARDED_ROLE_HEADER} is not text"))
        .and_then(|uri| Role::from_san_uri(uri).map_err(|e| e.to_string()))
}

/// A forwarded role ([`effective_role`] checked that the certificate is the forwarding
/// manager's) is believed only from a current member of the cluster, and only for a request that
/// member vouches it forwarded ([`vouch`]): asked at the address the membership gives for it.
/// A member of the first release, which forwards without vouchers, is believed on its
/// certificate alone while it runs that release ([`forwards_without_vouchers`]).
async fn forwarded_by_member(
    gate: &Gate,
    by: u64,
    claim: Result<(vouch::Voucher, Option<String>), String>,
) -> Result<(), String> {
    let (claimed, token) = claim?;
    if by == gate.leadership.id {
        return Err(format!(
            "the request says this node ({by}) forwarded it: a manager never forwards to itself"
        ));
    }
    let address = {
        let metrics = gate.leadership.metrics_snapshot();
        let member = metrics
            .membership_config
            .membership()
            .get_node(&by)
            .cloned();
        match member {
            Some(member) => member.addr,
            None => {
                return Err(format!(
                    "manager {by} is not a member of this cluster: only a member forwards a \
                     caller's request (PROTOCOL P13.3)"
                ))
            }
        }
    };
    match token {
        Some(token) => vouch::confirm(&gate.http, by, &address, &token, &claimed).await,
        None => unvouched_forward(by, gate.member_versions.get(by).as_ref()),
    }
}

/// A forward that carries no voucher, from member `by` (heard running `member`): believed only
/// while that member runs the first release, which forwards without vouchers.
fn unvouched_forward(by: u64, member: Option<&MemberVersion>) -> Result<(), String> {
    if forwards_without_vouchers(member) {
        return Ok(());
    }
    Err(format!(
        "the request carries no {} from manager {by}, which vouches for what it forwards \
         (PROTOCOL P13.3)",
        vouch::FORWARDED_VOUCHER_HEADER
    ))
}

/// What a forwarded request says was forwarded, and the voucher token it carries.
fn forwarded_claim(request: &Request) -> Result<(vouch::Voucher, Option<String>), String> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|value| value.to_str().map(str::to_owned))
            .transpose()
            .map_err(|_| format!("{name} is not text"))
    };
    let claimed = vouch::Voucher {
        method: request.method().to_string(),
        path_and_query: request.uri().path_and_query().map_or_else(
            || request.uri().path().to_owned(),
            |p| p.as_str().to_owned(),
        ),
        role: header(FORWARDED_ROLE_HEADER)?.unwrap_or_default(),
        subject: header(FORWARDED_SUBJECT_HEADER)?.unwrap_or_default(),
        scope: header(FORWARDED_SCOPE_HEADER)?,
    };
    Ok((claimed, header(vouch::FORWARDED_VOUCHER_HEADER)?))
}

/// Whether a member, as the last probe round heard it, runs the first release, whose followers
/// forwarded a caller's role without a voucher: during a rolling upgrade from it, its forwards
/// are believed on its certificate as they were then. Unheard, it is not believed.
pub fn forwards_without_vouchers(member: Option<&MemberVersion>) -> bool {
    member.is_some_and(|member| member.release == FIRST_RELEASE)
}

/// `POST /v1/cluster/nodes` and `DELETE /v1/cluster/nodes/{id}` (`named`: the id in the path,
/// `None` when the body names the node): an admin may change any member; a manager only its own
/// node, so a manager's request that names another node is refused here, before its body is
/// read. A join's body is checked by the handler ([`manager_join`]).
pub fn own_membership_allowed(role: &Role, named: Option<u64>) -> Result<(), String> {
    match (role, named) {
        (Role::Admin, _) | (Role::Manager { .. }, None) => Ok(()),
        (Role::Manager { node_id }, Some(named)) if *node_id == named => Ok(()),
        (Role::Manager { node_id }, Some(named)) => Err(format!(
            "a manager certificate may remove only its own node (to rejoin with a lost data \
             directory); the certificate is manager {node_id}'s and the request names node \
             {named}: removing another member needs the admin role"
        )),
        (role, _) => Err(format!(
            "this needs the admin role (or, for its own node only, that manager's certificate); \
             the certificate is {role}"
        )),
    }
}

/// What a manager's own `POST /v1/cluster/nodes` leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagerJoin {
    /// Not a member: added as a learner, promoted by the cluster once it has caught up (as
    /// every joiner is).
    AddLearner,
    /// A learner at this address already: no new entry; the join goes on where it was cut off
    /// (catch up, then the promotion of every joiner).
    AlreadyLearner,
    /// A voter at this address already: nothing changes.
    AlreadyVoter,
}

/// What a manager certificate may ask of `POST /v1/cluster/nodes` (`--join`): only to add the
/// node it names, at the address it gives, as a new member (a learner), or the same again.
/// `member` is the node's present entry, if it is one: its address, and whether it votes.
/// A refusal is `403`: adding another node, or changing a member's address, needs an admin.
pub fn manager_join(
    caller: u64,
    node_id: u64,
    address: &str,
    member: Option<(&str, bool)>,
) -> Result<ManagerJoin, String> {
    if caller != node_id {
        return Err(format!(
            "a manager certificate may ask to join only as itself; the certificate is manager \
             {caller}'s and the request adds node {node_id}: adding another node needs the \
             admin role"
        ));
    }
    let same = |known: &str| known.trim_end_matches('/') == address.trim_end_matches('/');
    match member {
        None => Ok(ManagerJoin::AddLearner),
        Some((known, voter)) if !same(known) => Err(format!(
            "node {node_id} is already a {} at {known}; a manager certificate may not change a \
             member (here to {address}): an admin removes it first",
            if voter { "voter" } else { "learner" }
        )),
        Some((_, true)) => Ok(ManagerJoin::AlreadyVoter),
        Some((_, false)) => Ok(ManagerJoin::AlreadyLearner),
    }
}

/// A Raft message must come from the manager its certificate names, and that manager must be
/// a member (before formation: in `--initial-cluster`). A node started with `--join` (it has
/// no `--initial-cluster`) knows no member until the cluster replicates one to it: until then
/// it takes Raft messages from any manager of the cluster's CA, which is how the leader probes
/// it and brings it up as a learner.
fn raft_peer_allowed(gate: &Gate, role: &Role, request: &Request) -> Result<(), String> {
    let Role::Manager { node_id } = role else {
        return Err(format!(
            "raft messages come from managers; the certificate is {role}"
        ));
    };
    let claimed = request
        .headers()
        .get(NODE_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    // `/raft/identity` is asked before a node knows who answers; it names no sender.
    if let Some(claimed) = claimed {
        if claimed != *node_id {
            return Err(format!(
                "the certificate is manager {node_id}'s, the message claims to be from node {claimed}"
            ));
        }
    }
    let metrics = gate.leadership.metrics_snapshot();
    let membership = metrics.membership_config.membership();
    let sender = RaftSender {
        node_id: *node_id,
        in_membership: membership.get_node(node_id).is_some(),
        in_initial_cluster: gate.settings.initial_cluster.contains_key(node_id),
        initial_cluster_known: !gate.settings.initial_cluster.is_empty(),
        membership_known: membership.nodes().next().is_some(),
    };
    raft_sender_allowed(&sender)
}

/// The manager a Raft message comes from, as this node's membership sees it, and what this node
/// knows of its cluster.
struct RaftSender {
    node_id: u64,
    in_membership: bool,
    in_initial_cluster: bool,
    /// Started with `--initial-cluster` (not `--join`).
    initial_cluster_known: bool,
    /// Has a membership (formed, or replicated to it).
    membership_known: bool,
}

/// A member's (or, before formation, an `--initial-cluster` node's) Raft messages are taken; a
/// node that knows no member yet (started with `--join`, not replicated to) takes any
/// manager's of the cluster's CA, which is how the leader brings it up as a learner.
fn raft_sender_allowed(sender: &RaftSender) -> Result<(), String> {
    let knows_no_member = !sender.initial_cluster_known && !sender.membership_known;
    if sender.in_membership || sender.in_initial_cluster || knows_no_member {
        Ok(())
    } else {
        Err(format!(
            "manager {} is not a member of this cluster",
            sender.node_id
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p18_2_a_limited_certificate_is_honoured_from_the_namespaces_schema_on() {
        assert!(limited_scope_honoured(NAMESPACES_SCHEMA - 1).is_err());
        assert!(limited_scope_honoured(NAMESPACES_SCHEMA).is_ok());
        assert!(limited_scope_honoured(NAMESPACES_SCHEMA + 1).is_ok());
    }

    #[test]
    fn p18_2_a_limited_certificate_reads_anything_and_changes_only_one_namespace() {
        let cases = [
            (Method::GET, "/v1/state", true),
            (Method::HEAD, "/v1/state", true),
            (Method::GET, "/v1/namespaces/orders", true),
            (Method::PATCH, "/v1/namespaces/kv", true),
            (Method::POST, "/v1/executors", true),
            (Method::POST, "/v1/shards/3/move", true),
            // Reads that are an admin's of the whole cluster, and changes of the whole cluster.
            (Method::GET, "/v1/backup", false),
            (Method::GET, "/v1/audit", false),
            (Method::PUT, "/v1/cluster/maintenance", false),
            (Method::POST, "/v1/cluster/snapshot", false),
        ];
        for (method, path, reaches) in cases {
            let required = requirement(&method, path);
            assert_eq!(
                limited_scope_reaches(&required, &method, path),
                reaches,
                "{method} {path} ({required:?})"
            );
        }
    }

    #[test]
    fn a_rejoining_node_holds_back_every_raft_message_but_its_identity() {
        for path in [
            "/raft/append",
            "/raft/vote",
            "/raft/snapshot",
            "/raft/forwarded/x",
        ] {
            assert!(held_while_rejoining(path), "{path}");
        }
        for path in ["/raft/identity", "/raft/identity/", "/v1/state", "/readyz"] {
            assert!(!held_while_rejoining(path), "{path}");
        }
    }

    #[test]
    fn p13_3_every_route_asks_for_its_role() {
        let cases = [
            (Method::GET, "/livez", Requirement::Anyone),
            (Method::GET, "/readyz", Requirement::Anyone),
            // P17.4: operator controls are the admin's; reading the mode is anyone's.
            (Method::GET, "/v1/cluster/maintenance", Requirement::AnyRole),
            (
                Method::PUT,
                "/v1/cluster/maintenance",
                Requirement::OneOf(ADMIN),
            ),
            (Method::POST, "/v1/shards/7/move", Requirement::OneOf(ADMIN)),
            (Method::PUT, "/v1/shards/7/pin", Requirement::OneOf(ADMIN)),
            (
                Method::DELETE,
                "/v1/shards/7/pin",
                Requirement::OneOf(ADMIN),
            ),
            (Method::GET, "/v1/audit", Requirement::OneOf(ADMIN)),
            (Method::GET, "/v1/namespaces", Requirement::AnyRole),
            (Method::GET, "/v1/namespaces/kv", Requirement::AnyRole),
            (Method::POST, "/v1/namespaces", Requirement::OneOf(ADMIN)),
            (
                Method::PATCH,
                "/v1/namespaces/kv",
                Requirement::OneOf(ADMIN),
            ),
            (
                Method::DELETE,
                "/v1/namespaces/kv",
                Requirement::OneOf(ADMIN),
            ),
            (Method::POST, "/raft/append", Requirement::RaftPeer),
            (Method::POST, "/raft/vote", Requirement::RaftPeer),
            (Method::POST, "/raft/snapshot", Requirement::RaftPeer),
            (Method::GET, "/raft/identity", Requirement::RaftPeer),
            (
                Method::GET,
                "/raft/forwarded/0123456789abcdef0123456789abcdef",
                Requirement::RaftPeer,
            ),
            (
                Method::POST,
                "/v1/executors",
                Requirement::OneOf(EXECUTOR_OR_ADMIN),
            ),
            (
                Method::POST,
                "/v1/executors/ex-3/renew",
                Requirement::OneOf(EXECUTOR),
            ),
            (
                Method::POST,
                "/v1/executors/ex-3/release",
                Requirement::OneOf(EXECUTOR),
            ),
            (
                Method::DELETE,
                "/v1/executors/ex-3",
                Requirement::OneOf(EXECUTOR_OR_ADMIN),
            ),
            (
                Method::POST,
                "/v1/executors/ex-3/drain",
                Requirement::OneOf(EXECUTOR_OR_ADMIN),
            ),
            (
                Method::DELETE,
                "/v1/executors/ex-3/drain",
                Requirement::OneOf(ADMIN),
            ),
            (
                Method::GET,
                "/v1/executors/ex-3/safe-to-stop",
                Requirement::AnyRole,
            ),
            (
                Method::GET,
                "/v1/cluster/nodes/2/safe-to-stop",
                Requirement::AnyRole,
            ),
            (Method::POST, "/v1/cluster/init", Requirement::OneOf(ADMIN)),
            (
                Method::POST,
                "/v1/cluster/nodes",
                Requirement::AdminOrOwnManager(None),
            ),
            (
                Method::DELETE,
                "/v1/cluster/nodes/2",
                Requirement::AdminOrOwnManager(Some(2)),
            ),
            (
                Method::DELETE,
                "/v1/cluster/nodes/two",
                Requirement::OneOf(ADMIN),
            ),
            (
                Method::POST,
                "/v1/cluster/snapshot",
                Requirement::OneOf(ADMIN),
            ),
            (Method::GET, "/v1/backup", Requirement::OneOf(ADMIN)),
            (Method::HEAD, "/v1/backup", Requirement::OneOf(ADMIN)),
            (Method::GET, "/v1/backup/", Requirement::OneOf(ADMIN)),
            (Method::GET, "/v1/cluster", Requirement::AnyRole),
            (Method::GET, "/v1/state", Requirement::AnyRole),
            (Method::GET, "/v1/executors", Requirement::AnyRole),
            (Method::GET, "/v1/executors/ex-3", Requirement::AnyRole),
            (Method::GET, "/v1/shards", Requirement::AnyRole),
            (Method::GET, "/v1/routing", Requirement::AnyRole),
            (Method::GET, "/v1/watch", Requirement::AnyRole),
            (Method::GET, "/metrics", Requirement::AnyRole),
            (Method::GET, "/ui/", Requirement::AnyRole),
        ];
        for (method, path, expected) in cases {
            assert_eq!(requirement(&method, path), expected, "{method} {path}");
        }
    }

    /// P13.3 (`--join`, `--rejoin`): on the membership routes an admin may name any node, a
    /// manager only its own (the body of a join is checked by the handler, below).
    #[test]
    fn p13_3_a_manager_may_change_only_its_own_membership() {
        let manager_4 = Role::Manager { node_id: 4 };
        let cases: [(&str, Role, Option<u64>, bool); 8] = [
            ("an admin adds any node", Role::Admin, None, true),
            ("an admin removes any node", Role::Admin, Some(2), true),
            (
                "a manager's join: its body is checked by the handler",
                manager_4,
                None,
                true,
            ),
            (
                "a manager removes itself to rejoin",
                manager_4,
                Some(4),
                true,
            ),
            (
                "a manager removes another member",
                manager_4,
                Some(2),
                false,
            ),
            (
                "a manager removes a voter that is not itself",
                manager_4,
                Some(1),
                false,
            ),
            ("an executor adds a node", Role::Executor, None, false),
            ("an executor removes a node", Role::Executor, Some(4), false),
        ];
        for (what, role, named, allowed) in cases {
            assert_eq!(
                own_membership_allowed(&role, named).is_ok(),
                allowed,
                "{what}"
            );
        }
    }

    /// P13.3 (`--join`): a manager certificate may add only the node it names, as a learner,
    /// and ask again for what it already has; adding another id, or changing a member's
    /// address (a voter's or a learner's), is refused.
    #[test]
    fn p13_3_a_manager_joins_only_as_itself_and_only_as_a_learner() {
        let at = "https://10.0.0.4:7000";
        /// What, the certificate's node, the node added, its entry, the outcome.
        type Case<'a> = (
            &'a str,
            u64,
            u64,
            Option<(&'a str, bool)>,
            Result<ManagerJoin, ()>,
        );
        let cases: [Case; 8] = [
            ("itself, new", 4, 4, None, Ok(ManagerJoin::AddLearner)),
            (
                "itself, a learner at the same address",
                4,
                4,
                Some((at, false)),
                Ok(ManagerJoin::AlreadyLearner),
            ),
            (
                "itself, a voter at the same address (a slash apart)",
                4,
                4,
                Some(("https://10.0.0.4:7000/", true)),
                Ok(ManagerJoin::AlreadyVoter),
            ),
            ("another id, new", 4, 5, None, Err(())),
            ("another id, a voter", 4, 1, Some((at, true)), Err(())),
            ("another id, a learner", 4, 5, Some((at, false)), Err(())),
            (
                "itself, a voter elsewhere: a change of voter",
                4,
                4,
                Some(("https://10.0.0.9:7000", true)),
                Err(()),
            ),
            (
                "itself, a learner elsewhere",
                4,
                4,
                Some(("https://10.0.0.9:7000", false)),
                Err(()),
            ),
        ];
        for (what, caller, node_id, member, expected) in cases {
            assert_eq!(
                manager_join(caller, node_id, at, member).map_err(|_| ()),
                expected,
                "{what}"
            );
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        headers
    }

    /// P18.2: what a certificate limited to namespaces may change: an executor's writes, a
    /// namespace, a shard's move or pin; never what concerns the whole cluster.
    #[test]
    fn p18_2_a_limited_certificate_acts_only_on_routes_of_one_namespace() {
        let cases = [
            (Method::POST, "/v1/executors", true),
            (Method::POST, "/v1/executors/ex-1/renew", true),
            (Method::POST, "/v1/executors/ex-1/release", true),
            (Method::DELETE, "/v1/executors/ex-1", true),
            (Method::POST, "/v1/executors/ex-1/drain", true),
            (Method::DELETE, "/v1/executors/ex-1/drain", true),
            (Method::POST, "/v1/namespaces", true),
            (Method::PATCH, "/v1/namespaces/kv", true),
            (Method::DELETE, "/v1/namespaces/kv/", true),
            (Method::POST, "/v1/shards/3/move", true),
            (Method::PUT, "/v1/shards/3/pin", true),
            (Method::POST, "/v1/cluster/init", false),
            (Method::POST, "/v1/cluster/nodes", false),
            (Method::DELETE, "/v1/cluster/nodes/2", false),
            (Method::POST, "/v1/cluster/snapshot", false),
            (Method::PUT, "/v1/cluster/maintenance", false),
            (Method::GET, "/v1/backup", false),
            (Method::GET, "/v1/audit", false),
            (Method::POST, "/raft/append", false),
        ];
        for (method, path, expected) in cases {
            assert_eq!(
                acts_in_one_namespace(&method, path),
                expected,
                "{method} {path}"
            );
        }
    }

    /// P18.2: a forwarded request carries its caller's limit; one forwarded without a limit is
    /// unlimited, and a malformed limit is refused rather than read as none.
    #[test]
    fn p18_2_a_forwarded_scope_is_the_callers() {
        let kv = NamespaceScope::only(["kv"]).unwrap();
        let forwarded = |scope: Option<&str>| {
            let mut pairs = vec![
                (FORWARDED_HEADER, "2"),
                (FORWARDED_ROLE_HEADER, "urn:leasehold:executor"),
            ];
            if let Some(scope) = scope {
                pairs.push((FORWARDED_SCOPE_HEADER, scope));
            }
            headers(&pairs)
        };
        assert_eq!(effective_scope(kv.clone(), &headers(&[])).unwrap(), kv);
        // A scope header alone, not forwarded, changes nothing.
        assert_eq!(
            effective_scope(kv.clone(), &headers(&[(FORWARDED_SCOPE_HEADER, "orders")])).unwrap(),
            kv
        );
        assert_eq!(
            effective_scope(NamespaceScope::All, &forwarded(Some("kv"))).unwrap(),
            kv
        );
        assert_eq!(
            effective_scope(NamespaceScope::All, &forwarded(None)).unwrap(),
            NamespaceScope::All
        );
        assert!(effective_scope(NamespaceScope::All, &forwarded(Some("KV,"))).is_err());
        let refused = CallerScope(kv).check("orders").unwrap_err();
        assert!(refused.to_string().contains("P18.2"), "{refused}");
        assert!(CallerScope(NamespaceScope::All).check("orders").is_ok());
    }

    /// P13.3: a forward without a voucher is believed only from a member heard running the first
    /// release (a rolling upgrade from it); from any later release, or a member not heard, never.
    /// P13.3: a Raft message is taken from a member, or before formation from a node of the
    /// initial cluster; from any manager of the CA only while this node knows no member at all.
    #[test]
    fn p13_3_raft_messages_come_from_members_unless_no_member_is_known_yet() {
        let sender =
            |in_membership, in_initial_cluster, initial_cluster_known, membership_known| {
                RaftSender {
                    node_id: 4,
                    in_membership,
                    in_initial_cluster,
                    initial_cluster_known,
                    membership_known,
                }
            };
        // A member, or before formation a node of the initial cluster.
        assert!(raft_sender_allowed(&sender(true, false, true, true)).is_ok());
        assert!(raft_sender_allowed(&sender(true, false, false, true)).is_ok());
        assert!(raft_sender_allowed(&sender(false, true, true, false)).is_ok());
        // Anyone else, whenever this node knows a member: from its initial cluster, its
        // membership, or both.
        for (initial_cluster_known, membership_known) in
            [(true, true), (true, false), (false, true)]
        {
            let stranger = raft_sender_allowed(&sender(
                false,
                false,
                initial_cluster_known,
                membership_known,
            ))
            .unwrap_err();
            assert!(stranger.contains("manager 4 is not a member"), "{stranger}");
        }
        // A node started with `--join` and not replicated to yet.
        assert!(raft_sender_allowed(&sender(false, false, false, false)).is_ok());
    }

    /// P13.3: the forward without a voucher is refused, naming the header, from a member of a
    /// later release or one not heard; taken from one running the first release.
    #[test]
    fn p13_3_an_unvouched_forward_is_refused_unless_from_the_first_release() {
        let at = |release: &str| MemberVersion {
            release: release.to_owned(),
            newest_schema: 2,
        };
        assert!(unvouched_forward(2, Some(&at(FIRST_RELEASE))).is_ok());
        for member in [Some(at(leasehold_api::RELEASE)), None] {
            let refused = unvouched_forward(2, member.as_ref()).unwrap_err();
            assert!(
                refused.contains(vouch::FORWARDED_VOUCHER_HEADER),
                "{refused}"
            );
        }
    }

    #[test]
    fn p13_3_only_a_first_release_member_forwards_without_a_voucher() {
        let at = |release: &str| MemberVersion {
            release: release.to_owned(),
            newest_schema: 2,
        };
        assert!(forwards_without_vouchers(Some(&at(FIRST_RELEASE))));
        assert!(!forwards_without_vouchers(Some(&at(
            leasehold_api::RELEASE
        ))));
        assert!(!forwards_without_vouchers(None));
    }

    #[test]
    fn p13_3_a_forwarded_role_is_believed_only_from_the_manager_that_forwarded() {
        let manager_2 = Role::Manager { node_id: 2 };
        let executor_uri = Role::Executor.san_uri();
        let admin_uri = Role::Admin.san_uri();
        let cases: [(&str, Role, HeaderMap, Result<Role, ()>); 7] = [
            (
                "not forwarded",
                Role::Executor,
                headers(&[]),
                Ok(Role::Executor),
            ),
            (
                "forwarded-by alone changes nothing",
                Role::Executor,
                headers(&[(FORWARDED_HEADER, "2")]),
                Ok(Role::Executor),
            ),
            (
                "a follower forwarding an executor's request",
                manager_2,
                headers(&[
                    (FORWARDED_HEADER, "2"),
                    (FORWARDED_ROLE_HEADER, &executor_uri),
                ]),
                Ok(Role::Executor),
            ),
            (
                "a follower forwarding an operator's request",
                manager_2,
                headers(&[(FORWARDED_HEADER, "2"), (FORWARDED_ROLE_HEADER, &admin_uri)]),
                Ok(Role::Admin),
            ),
            (
                "an executor claiming to forward an operator's request",
                Role::Executor,
                headers(&[(FORWARDED_HEADER, "2"), (FORWARDED_ROLE_HEADER, &admin_uri)]),
                Err(()),
            ),
            (
                "a manager forwarding under another manager's name",
                manager_2,
                headers(&[(FORWARDED_HEADER, "3"), (FORWARDED_ROLE_HEADER, &admin_uri)]),
                Err(()),
            ),
            (
                "a forwarded role that is no role",
                manager_2,
                headers(&[
                    (FORWARDED_HEADER, "2"),
                    (FORWARDED_ROLE_HEADER, "urn:other"),
                ]),
                Err(()),
            ),
        ];
        for (what, peer, headers, expected) in cases {
            assert_eq!(
                effective_role(peer, &headers).map_err(|_| ()),
                expected,
                "{what}"
            );
        }
    }
}
