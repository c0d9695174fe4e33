//! How the answers are printed as tables and `field: value` lines (`-o table`).

use super::*;

pub(super) fn yes_no(flag: bool) -> String {
    if flag { "yes" } else { "no" }.to_owned()
}

pub(super) fn render_cluster_status(statuses: &[MemberStatus]) -> String {
    let mut table = Table::new(&[
        "ID",
        "ADDRESS",
        "ROLE",
        "STATE",
        "LEADER",
        "TERM",
        "LAST_LOG",
        "COMMITTED",
        "APPLIED",
        "LAG",
        "RELEASE",
        "SCHEMAS",
        "CLUSTER_VERSION",
    ]);
    for status in statuses {
        let role = if status.voter { "voter" } else { "learner" };
        let row = match &status.info {
            Some(info) => {
                let state = match info.leader_id {
                    Some(leader) if leader == info.node_id => "leader",
                    Some(_) => "follower",
                    None => "candidate",
                };
                vec![
                    status.node_id.to_string(),
                    status.address.clone(),
                    role.to_owned(),
                    state.to_owned(),
                    opt(info.leader_id),
                    info.term.to_string(),
                    opt(info.last_log_index),
                    opt(info.committed_index),
                    opt(info.applied_index),
                    opt(status.lag),
                    info.reported_release().to_owned(),
                    match info.reported_schemas() {
                        SchemaRange { oldest, newest } if oldest == newest => oldest.to_string(),
                        SchemaRange { oldest, newest } => format!("{oldest}-{newest}"),
                    },
                    // As this member applied it (P14.3): a lagging member shows the raise late.
                    info.reported_cluster_version().to_string(),
                ]
            }
            None => vec![
                status.node_id.to_string(),
                status.address.clone(),
                role.to_owned(),
                "unreachable".to_owned(),
            ],
        };
        table.push(row);
    }
    table.render()
}

pub(super) fn render_members(info: &ClusterInfo) -> String {
    let mut table = Table::new(&["ID", "ADDRESS", "ROLE", "LEADER"]);
    let mut members: Vec<(&crate::wire::Member, &str)> = info
        .voters
        .iter()
        .map(|m| (m, "voter"))
        .chain(info.learners.iter().map(|m| (m, "learner")))
        .collect();
    members.sort_by_key(|(m, _)| m.node_id);
    for (member, role) in members {
        table.push(vec![
            member.node_id.to_string(),
            member.address.clone(),
            role.to_owned(),
            yes_no(info.leader_id == Some(member.node_id)),
        ]);
    }
    table.render()
}

pub(super) fn render_plan(plan: &PlanPreview) -> String {
    let rollout = match &plan.rollout_to {
        Some(version) => format!(
            "rollout to application version {version} under way: only shards that must move do, \
             onto it; balance and joiners wait (P17.3)\n"
        ),
        None => String::new(),
    };
    if plan.moves.is_empty() {
        return format!("{rollout}nothing would move (revision {})\n", plan.revision);
    }
    let mut table = Table::new(&["SHARD", "FROM", "TO", "REASON"]);
    for step in &plan.moves {
        table.push(vec![
            step.shard.to_string(),
            opt(step.from.as_deref()),
            step.to.clone(),
            step.reason.clone(),
        ]);
    }
    let more = if plan.capped {
        ", cut at the cap: more follow in the next plans"
    } else {
        ""
    };
    format!(
        "{}{rollout}{} moves planned on revision {}{more}\n",
        table.render(),
        plan.moves.len(),
        plan.revision
    )
}

/// `cluster maintenance`: whether it is on, and for `on`/`off` whether that changed anything.
pub(super) fn render_maintenance(view: &MaintenanceView, asked: Option<Switch>) -> String {
    let state = if view.on { "on" } else { "off" };
    let note = match asked {
        Some(_) if view.changed => format!(" (turned {state} now)"),
        Some(_) => format!(" (unchanged: it was {state} already)"),
        None if view.on => " (placement frozen: no balancing, no shards for joiners, drains \
                             wait; shards nobody holds are still placed)"
            .to_owned(),
        None => String::new(),
    };
    format!("maintenance: {state}{note}\n")
}

/// `audit`: one row per operator action, oldest first, as the log keeps them.
pub(super) fn render_audit(records: &[AuditRecordView]) -> String {
    if records.is_empty() {
        return "no operator actions recorded\n".to_owned();
    }
    let mut table = Table::new(&["REVISION", "TIME", "ACTOR", "ACTION", "SUBJECT"]);
    for record in records {
        table.push(vec![
            record.revision.to_string(),
            utc_millis(record.at_ms),
            record.actor.clone(),
            record.action.clone(),
            audit_subject(record),
        ]);
    }
    let mut text = table.render();
    if records.len() >= MAX_AUDIT_RECORDS {
        text.push_str(&format!(
            "{} records, the most the log keeps: older ones are gone\n",
            records.len()
        ));
    }
    text
}

/// What an audit record names: its namespace (with the shard count a reshard asked for), shard,
/// executor and manager (with its address), whichever it has; [`NONE`] for an action on the
/// whole cluster (maintenance).
pub(super) fn audit_subject(record: &AuditRecordView) -> String {
    let mut parts = Vec::new();
    if let Some(namespace) = &record.namespace {
        parts.push(match record.shard_count {
            Some(shard_count) => format!("namespace {namespace} to {shard_count} shards"),
            None => format!("namespace {namespace}"),
        });
    }
    if let Some(shard) = record.shard {
        parts.push(format!("shard {shard}"));
    }
    if let Some(executor_id) = &record.executor_id {
        parts.push(format!("executor {executor_id}"));
    }
    if let Some(node_id) = record.node_id {
        parts.push(match &record.address {
            Some(address) => format!("manager {node_id} ({address})"),
            None => format!("manager {node_id}"),
        });
    }
    if parts.is_empty() {
        NONE.to_owned()
    } else {
        parts.join(", ")
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC to the millisecond
/// (`2023-11-14T22:13:20.123Z`). A time past what RFC 3339 can write (the year 9999) is shown
/// as the number it is.
pub(super) fn utc_millis(at_ms: u64) -> String {
    /// 10000-01-01T00:00:00Z: humantime refuses to format from here on.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    match UNIX_EPOCH.checked_add(Duration::from_millis(at_ms)) {
        Some(at) if at_ms < YEAR_10000_MS => humantime::format_rfc3339_millis(at).to_string(),
        _ => format!("{at_ms} ms after the epoch"),
    }
}

pub(super) fn render_executors(executors: &[ExecutorView]) -> String {
    let mut table = Table::new(&[
        "EXECUTOR",
        "NAME",
        "ADDRESS",
        "LEASE",
        "SHARDS",
        "CAPACITY",
        "VERSION",
        "ZONE",
        "LOAD",
        "UTILISATION",
        "DRAINING",
        "REGISTERED",
    ]);
    for e in executors {
        table.push(vec![
            e.executor_id.clone(),
            opt(e.name.as_deref()),
            e.address.clone(),
            human_ms(e.lease_remaining_ms),
            e.shards.len().to_string(),
            e.capacity.to_string(),
            opt(e.app_version.as_deref()),
            opt(crate::wire::zone_of(&e.labels)),
            human_load(e.load),
            human_load(e.utilisation),
            yes_no(e.draining),
            e.registered_revision.to_string(),
        ]);
    }
    let mut text = table.render();
    if let Some(newest) = rollout_among(executors) {
        let version = printable(newest);
        let waiting: Vec<&str> = executors
            .iter()
            .filter(|e| {
                e.shards.is_empty()
                    && !e.draining
                    && e.lease_remaining_ms > 0
                    && crate::wire::compare_stated_app_versions(
                        e.app_version.as_deref(),
                        Some(newest),
                    )
                    .is_eq()
            })
            .map(|e| e.executor_id.as_str())
            .collect();
        text.push_str(&format!(
            "rollout to application version {version} under way (P17.3): executors of {version} \
             take shards only as executors of older versions stop or drain, and balance and \
             joiners wait until every executor taking shards runs {version}.\n"
        ));
        if !waiting.is_empty() {
            text.push_str(&format!(
                "{} of {version} hold no shards, by design, until an older executor stops or \
                 drains: a deploy should not wait for them to.\n",
                printable(&waiting.join(", "))
            ));
        }
    }
    text
}

/// One executor as `field: value` lines. Its namespace is named only outside `default`, as the
/// wire does, so the lines an executor of `default` shows are those it showed before namespaces.
pub(crate) fn render_executor(e: &ExecutorView) -> String {
    let mut pairs = vec![
        ("executor", e.executor_id.clone()),
        ("name", opt(e.name.as_deref())),
    ];
    if !is_default_namespace(&e.namespace) {
        pairs.push(("namespace", e.namespace.clone()));
    }
    pairs.extend([
        ("address", e.address.clone()),
        ("incarnation", e.incarnation.clone()),
        ("lease remaining", human_ms(e.lease_remaining_ms)),
        ("draining", yes_no(e.draining)),
        ("capacity", e.capacity.to_string()),
        ("app version", opt(e.app_version.as_deref())),
        ("labels", render_labels(&e.labels)),
        ("load", human_load(e.load)),
        ("utilisation", human_load(e.utilisation)),
        ("registered", format!("revision {}", e.registered_revision)),
        ("shard count", e.shards.len().to_string()),
        ("shards", shard_ranges(e.shards.iter().map(|s| s.shard))),
    ]);
    fields(&pairs)
}

pub(super) fn render_namespaces(namespaces: &[NamespaceView]) -> String {
    let mut table = Table::new(&["NAME", "SHARDS", "LEASE", "EXECUTORS", "OWNED", "MAX"]);
    for n in namespaces {
        table.push(vec![
            n.name.clone(),
            n.shard_count.to_string(),
            human_ms(n.lease_duration_ms),
            n.executors.to_string(),
            n.owned_shards.to_string(),
            opt(n.max_executors),
        ]);
    }
    table.render()
}

pub(super) fn render_namespace(n: &NamespaceView) -> String {
    let created = if n.created_revision == 0 {
        "with the cluster".to_owned()
    } else {
        format!("revision {}", n.created_revision)
    };
    let mut rows = vec![
        ("namespace", n.name.clone()),
        ("shard count", n.shard_count.to_string()),
        ("lease duration", human_ms(n.lease_duration_ms)),
        ("max executors", opt(n.max_executors)),
        ("executors", n.executors.to_string()),
        ("owned shards", n.owned_shards.to_string()),
        ("created", created),
        ("placement", placement::render_placement(&n.placement)),
        ("replicas", replicas::render_replicas(&n.replica_settings())),
    ];
    // A namespace that never resharded reads as it always did (P20.1).
    if n.generation > 0 || n.reshard.is_some() {
        rows.push(("generation", n.generation.to_string()));
    }
    if let Some(progress) = &n.reshard {
        let line = render_reshard_progress(progress);
        rows.push(("reshard", line.trim_end().to_owned()));
    }
    fields(&rows)
}

/// What a reshard under way waits on, in words (P20.2).
pub(super) fn reshard_waiting_text(kind: ReshardKind) -> &'static str {
    match kind {
        ReshardKind::Split => "handoff(s) in flight",
        ReshardKind::Merge => "pair(s) of shards not yet on one executor",
    }
}

/// One line on a reshard under way.
pub(super) fn render_reshard_progress(progress: &ReshardProgress) -> String {
    format!(
        "{} to {} shards (asked at revision {}): waiting on {} {}\n",
        progress.kind.as_str(),
        progress.shard_count,
        progress.requested_revision,
        progress.waiting_on,
        reshard_waiting_text(progress.kind),
    )
}

/// `namespace reshard`'s answer (P20.1).
pub(super) fn render_reshard(reply: &ReshardReply) -> String {
    let name = printable(&reply.name);
    match &reply.reshard {
        Some(progress) => format!(
            "namespace {name}: {} shards at generation {}; {}",
            reply.shard_count,
            reply.generation,
            render_reshard_progress(progress)
        ),
        None => format!(
            "namespace {name}: {} shards at generation {}; no reshard under way\n",
            reply.shard_count, reply.generation
        ),
    }
}

pub(super) fn render_namespace_deleted(deleted: &NamespaceDeleted) -> String {
    let name = printable(&deleted.name);
    let mut text = if deleted.already_gone {
        format!("namespace {name} was deleted already\n")
    } else {
        format!("namespace {name} deleted\n")
    };
    if !deleted.removed_executors.is_empty() {
        let removed: Vec<_> = deleted
            .removed_executors
            .iter()
            .map(|id| printable(id))
            .collect();
        text.push_str(&format!(
            "removed with it, holding nothing: {}\n",
            removed.join(", ")
        ));
    }
    text
}

/// `key=value` pairs, comma-separated, `-` for none (P18.3).
pub(super) fn render_labels(labels: &crate::wire::Labels) -> String {
    if labels.is_empty() {
        return "-".to_owned();
    }
    labels
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn shard_state(view: &ShardView) -> &'static str {
    match (&view.owner, &view.handoff) {
        (None, _) => "unowned",
        (Some(_), None) => "serving",
        (Some(_), Some(_)) => "releasing",
    }
}

pub(super) fn render_shards(shards: &[ShardView]) -> String {
    let mut table = Table::new(&[
        "SHARD",
        "OWNER",
        "EPOCH",
        "STATE",
        "HANDOFF_TO",
        "LOAD",
        "HOT",
        "PINNED",
    ]);
    for s in shards {
        table.push(vec![
            s.shard.to_string(),
            opt(s.owner.as_deref()),
            s.epoch.to_string(),
            shard_state(s).to_owned(),
            s.handoff
                .as_ref()
                .map_or_else(|| NONE.to_owned(), |h| opt(h.to.as_deref())),
            human_load(s.load),
            yes_no(s.hot),
            opt(s.pinned_to.as_deref()),
        ]);
    }
    let mut text = table.render();
    text.push_str(&shards_summary(shards));
    text
}

/// The line under `shard list`'s table: what a thousand rows do not show at a glance. Owners
/// come in id order (`ex-9` before `ex-10`); releasing shards count with their owner still.
pub(super) fn shards_summary(shards: &[ShardView]) -> String {
    let mut per_owner: std::collections::BTreeMap<(usize, &str), usize> = Default::default();
    for owner in shards.iter().filter_map(|s| s.owner.as_deref()) {
        *per_owner.entry((owner.len(), owner)).or_default() += 1;
    }
    let owners = if per_owner.is_empty() {
        "none".to_owned()
    } else {
        per_owner
            .iter()
            .map(|((_, owner), count)| format!("{} {count}", printable(owner)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let count = |wanted: &str| shards.iter().filter(|s| shard_state(s) == wanted).count();
    format!(
        "total: {} shards; per owner: {owners}; unowned: {}; in handoff: {}\n",
        shards.len(),
        count("unowned"),
        count("releasing")
    )
}

/// One shard as `field: value` lines; with the executors read beside it, its route too (a
/// move's or pin's answer is the shard alone).
pub(super) fn render_shard(view: &ShardView, executors: Option<&[ExecutorView]>) -> String {
    let mut pairs = vec![
        ("shard", view.shard.to_string()),
        ("owner", opt(view.owner.as_deref())),
        ("epoch", view.epoch.to_string()),
        ("state", shard_state(view).to_owned()),
    ];
    if let Some(executors) = executors {
        let address = view
            .owner
            .as_ref()
            .filter(|_| view.handoff.is_none())
            .and_then(|owner| executors.iter().find(|e| &e.executor_id == owner))
            .map(|e| e.address.clone());
        pairs.push(("route", opt(address)));
    }
    pairs.extend([
        ("load", human_load(view.load)),
        ("hot", yes_no(view.hot)),
        ("pinned to", opt(view.pinned_to.as_deref())),
    ]);
    if let Some(handoff) = &view.handoff {
        pairs.push(("handoff to", opt(handoff.to.as_deref())));
        pairs.push(("revoke revision", handoff.revoke_revision.to_string()));
        pairs.push((
            "completes by expiry in",
            human_ms(handoff.completes_by_expiry_in_ms),
        ));
    }
    if !view.secondaries.is_empty() {
        pairs.push(("secondaries", render_secondaries(&view.secondaries)));
    }
    fields(&pairs)
}

/// A shard's secondaries (PROTOCOL §19) on one line: each executor, ready, warming (placed, not
/// yet ready) or lost (its executor left, waiting for one of its name).
fn render_secondaries(secondaries: &[crate::wire::SecondaryView]) -> String {
    secondaries
        .iter()
        .map(|secondary| {
            let state = match secondary.lost_for_ms {
                Some(lost_ms) => format!("lost {} ago", human_ms(lost_ms)),
                None if secondary.ready => "ready".to_owned(),
                None => "warming".to_owned(),
            };
            format!("{} ({state})", printable(&secondary.executor_id))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn render_state_summary(state: &StateView) -> String {
    let count = |wanted: &str| {
        state
            .shards
            .iter()
            .filter(|s| shard_state(s) == wanted)
            .count()
            .to_string()
    };
    fields(&[
        ("revision", state.revision.to_string()),
        ("shard count", state.shard_count.to_string()),
        ("lease duration", human_ms(state.lease_duration_ms)),
        ("executors", state.executors.len().to_string()),
        (
            "draining",
            state
                .executors
                .iter()
                .filter(|e| e.draining)
                .count()
                .to_string(),
        ),
        ("shards serving", count("serving")),
        ("shards releasing", count("releasing")),
        ("shards unowned", count("unowned")),
    ])
}

pub(super) fn render_backup_header(
    header: &crate::backup::BackupHeader,
    saved_to: Option<&PathBuf>,
) -> String {
    let mut pairs = Vec::new();
    if let Some(path) = saved_to {
        pairs.push(("saved", path.display().to_string()));
    }
    pairs.extend([
        ("revision", header.revision.to_string()),
        ("shard count", header.shard_count.to_string()),
        ("state schema", header.state_schema_version.to_string()),
        ("format", header.format_version.to_string()),
        // People read the time; `-o json` keeps the number for scripts.
        ("created at", utc_millis(header.created_at_unix_ms)),
        ("source node", header.source_node_id.to_string()),
        ("payload bytes", header.payload_length.to_string()),
        ("sha256", header.payload_sha256.clone()),
    ]);
    fields(&pairs)
}
