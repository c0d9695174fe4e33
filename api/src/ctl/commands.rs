//! What each command does: its requests to the managers and what it prints.

use super::*;

/// The body of `namespace create`. `default` is refused here: it always exists (P18.1), and
/// the managers' answer to creating it would read as a conflict, not a mistake.
pub(super) fn create_request(
    name: &str,
    shard_count: u32,
    lease_duration_ms: Option<u64>,
    max_executors: Option<u32>,
    placement: &placement::PlacementArgs,
    replicas: &replicas::ReplicaArgs,
) -> Result<CreateNamespaceRequest, CtlError> {
    if is_default_namespace(name) {
        return Err(CtlError::BadInput(format!(
            "namespace {DEFAULT_NAMESPACE} always exists; create one by another name"
        )));
    }
    let replica_fields = replicas.fields().map_err(CtlError::BadInput)?;
    Ok(CreateNamespaceRequest {
        name: name.to_owned(),
        shard_count,
        lease_duration_ms,
        max_executors,
        placement: placement.settings(),
        ..CreateNamespaceRequest::default()
    }
    .with_replica_fields(replica_fields))
}

/// The body of `namespace set`. An empty change is refused rather than sent: it would succeed
/// and change nothing, which hides a forgotten flag. `default`'s lease is the managers'
/// `--lease-duration` (P18.1), so it is refused here too.
pub(super) fn set_request(
    name: &str,
    lease_duration_ms: Option<u64>,
    max_executors: Option<u32>,
    no_max_executors: bool,
    placement: &placement::PlacementArgs,
    replicas: &replicas::ReplicaArgs,
) -> Result<SetNamespaceRequest, CtlError> {
    let max_executors = match (max_executors, no_max_executors) {
        (Some(_), true) => {
            return Err(CtlError::BadInput(
                "--max-executors and --no-max-executors contradict each other".to_owned(),
            ))
        }
        (Some(bound), false) => Some(Some(bound)),
        (None, true) => Some(None),
        (None, false) => None,
    };
    let placement = placement.change();
    let replicas = replicas.change();
    if lease_duration_ms.is_none()
        && max_executors.is_none()
        && placement.is_empty()
        && replicas.is_empty()
    {
        return Err(CtlError::BadInput(format!(
            "namespace set {name}: nothing to change: give --lease, --max-executors, \
             --no-max-executors, --load-placement, --balance-tolerance, --max-balance-moves, \
             --prefer, --replicas, --secondary-weight, --replica-restore-delay or --min-active"
        )));
    }
    if lease_duration_ms.is_some() && is_default_namespace(name) {
        return Err(CtlError::BadInput(format!(
            "namespace {DEFAULT_NAMESPACE}'s lease is the managers' --lease-duration; it is not \
             set here"
        )));
    }
    Ok(SetNamespaceRequest {
        lease_duration_ms,
        max_executors,
        placement,
        replicas: replicas.replicas,
        secondary_weight: replicas.secondary_weight,
        replica_restore_delay_ms: replicas.replica_restore_delay_ms,
        min_active: replicas.min_active,
    })
}

pub(super) async fn run_namespace(
    cli: &Cli,
    verb: &NamespaceVerb,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    // Requests are built before the client, so bad input never waits on the cluster.
    let view = match verb {
        NamespaceVerb::Create {
            name,
            shards,
            lease_ms,
            max_executors,
            placement,
            replicas,
        } => {
            let request = create_request(
                name,
                *shards,
                *lease_ms,
                *max_executors,
                placement,
                replicas,
            )?;
            let client = cli.client(cli.request_timeout)?;
            client.create_namespace(&request).await?
        }
        NamespaceVerb::List => {
            let client = cli.client(cli.request_timeout)?;
            let namespaces = client.namespaces().await?;
            return out.show(&namespaces, |n| render_namespaces(n));
        }
        NamespaceVerb::Show { name } => {
            let client = cli.client(cli.request_timeout)?;
            client.namespace(name).await?
        }
        NamespaceVerb::Set {
            name,
            lease_ms,
            max_executors,
            no_max_executors,
            placement,
            replicas,
        } => {
            let request = set_request(
                name,
                *lease_ms,
                *max_executors,
                *no_max_executors,
                placement,
                replicas,
            )?;
            let client = cli.client(cli.request_timeout)?;
            client.set_namespace(name, &request).await?
        }
        NamespaceVerb::Reshard {
            name,
            shards,
            wait,
            wait_timeout,
        } => {
            let client = cli.client(cli.request_timeout)?;
            let reply = client.reshard_namespace(name, *shards).await?;
            out.show(&reply, render_reshard)?;
            if !wait {
                return Ok(());
            }
            let view = wait_for_reshard(&client, name, *wait_timeout, out).await?;
            return out.show(&view, render_namespace);
        }
        NamespaceVerb::Delete { name } => {
            if is_default_namespace(name) {
                return Err(CtlError::BadInput(format!(
                    "namespace {DEFAULT_NAMESPACE} cannot be deleted (PROTOCOL P18.1)"
                )));
            }
            let client = cli.client(cli.request_timeout)?;
            let deleted = client.delete_namespace(name).await?;
            return out.show(&deleted, render_namespace_deleted);
        }
    };
    out.show(&view, render_namespace)
}

/// How often `namespace reshard --wait` reads the namespace.
const RESHARD_POLL: Duration = Duration::from_millis(500);

/// Reads namespace `name` until no reshard is under way in it, printing what it waits on each
/// time that changes, for at most `patience`.
async fn wait_for_reshard(
    client: &Client,
    name: &str,
    patience: Duration,
    out: &mut Out<'_>,
) -> Result<NamespaceView, CtlError> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut last_waiting_on = None;
    loop {
        let view = client.namespace(name).await?;
        let Some(progress) = view.reshard else {
            return Ok(view);
        };
        if last_waiting_on != Some(progress.waiting_on) {
            last_waiting_on = Some(progress.waiting_on);
            out.progress(&render_reshard_progress(&progress))?;
        }
        if tokio::time::Instant::now() + RESHARD_POLL > deadline {
            return Err(CtlError::InProgress(format!(
                "namespace {name}'s reshard is not done after {}: it still waits on {} {} \
                 (`leaseholdctl namespace show {name}` follows it)",
                humantime::format_duration(patience),
                progress.waiting_on,
                reshard_waiting_text(progress.kind),
            )));
        }
        tokio::time::sleep(RESHARD_POLL).await;
    }
}

pub(super) async fn run_snapshot(
    cli: &Cli,
    verb: &SnapshotVerb,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    match verb {
        SnapshotVerb::Inspect { file } => {
            let (header, _) = snapshot::read_verified(file)?;
            out.show(&header, |h| render_backup_header(h, None))
        }
        SnapshotVerb::Restore { file, data_dir } => {
            let prepared = snapshot::prepare_restore(file, data_dir)?;
            out.show(&prepared, |p| {
                let mut text = render_backup_header(&p.header, None);
                text.push_str(&format!(
                    "\nPrepared {}. Restore the same file into every member's empty data \
                     directory, then start the members with their usual flags (the same \
                     --initial-cluster and --shard-count {}); each imports it on first start.\n",
                    printable(&p.prepared_file.display().to_string()),
                    p.header.shard_count
                ));
                text
            })
        }
        SnapshotVerb::Save { file } => {
            let client = cli.client(cli.request_timeout)?;
            let bytes = client.backup().await?;
            let header = snapshot::verify(file, &bytes)?;
            snapshot::write_atomically(file, &bytes)?;
            out.show(&header, |h| render_backup_header(h, Some(file)))
        }
    }
}

/// Every member's status; members that did not answer make it a partial failure.
pub(super) async fn run_cluster_status(cli: &Cli, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let statuses = cluster_status(&client).await?;
    out.show(&statuses, |s| render_cluster_status(s))?;
    let silent: Vec<String> = statuses
        .iter()
        .filter(|s| s.info.is_none())
        .map(|s| s.node_id.to_string())
        .collect();
    if silent.is_empty() {
        Ok(())
    } else {
        Err(CtlError::PartlyUnreachable(format!(
            "members {} did not answer",
            silent.join(", ")
        )))
    }
}

pub(super) async fn run_member(
    cli: &Cli,
    verb: &MemberVerb,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let info: ClusterInfo = match verb {
        MemberVerb::SafeToStop { node_id } => {
            let verdict = client.member_safe_to_stop(*node_id).await?;
            return show_verdict(&format!("manager {node_id}"), &verdict, out);
        }
        MemberVerb::List => client.cluster_info().await?,
        MemberVerb::Add { node_id, address } => {
            client
                .add_node(&AddNodeRequest {
                    node_id: *node_id,
                    address: address.clone(),
                })
                .await?
        }
        MemberVerb::Remove { node_id } => client.remove_node(*node_id).await?,
    };
    out.show(&info, render_members)
}

/// Prints a `safe-to-stop` verdict (P17.4); a verdict of not safe is exit code 7.
pub(super) fn show_verdict(
    subject: &str,
    verdict: &SafeToStop,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    out.show(verdict, |verdict| render_verdict(subject, verdict))?;
    if verdict.safe {
        Ok(())
    } else {
        Err(CtlError::NotSafe(format!("{subject} is not safe to stop")))
    }
}

pub(super) fn render_verdict(subject: &str, verdict: &SafeToStop) -> String {
    let verdict_text = if verdict.safe {
        "safe to stop"
    } else {
        "not safe to stop"
    };
    format!(
        "{}: {verdict_text}: {}\n",
        printable(subject),
        printable(&verdict.reason)
    )
}

/// `executor safe-to-stop`'s line about a rollout under way in the executor's namespace (P17.3),
/// from `executor` and the namespace's executors: a joiner of the newest version waits, by
/// design, until an executor of an older one stops or drains, so a deploy that waits for it to
/// hold shards before stopping the old one waits for nothing. `None` without a rollout.
pub(super) fn rollout_line(executor: &ExecutorView, namespace: &[ExecutorView]) -> Option<String> {
    let newest = rollout_among(namespace)?;
    let version = printable(newest);
    let older =
        crate::wire::compare_stated_app_versions(executor.app_version.as_deref(), Some(newest))
            .is_lt();
    Some(if older {
        format!(
            "rollout to application version {version} under way (P17.3): the executors of \
             {version} take shards only as executors of older versions, like this one, stop or \
             drain; stopping it hands its shards to them. They hold none before that, by \
             design: do not wait for them to.\n"
        )
    } else {
        format!(
            "rollout to application version {version} under way (P17.3): this executor, of \
             {version}, takes shards only as executors of older versions stop or drain, and \
             holds none before that, by design: stop or drain an old one to move its shards \
             here.\n"
        )
    })
}

pub(super) async fn run_executor(
    cli: &Cli,
    verb: &ExecutorVerb,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    match verb {
        ExecutorVerb::List => {
            let executors = match cli.namespace_named() {
                None => client.executors(cli.consistent).await?,
                Some(namespace) => client.executors_in(namespace, cli.consistent).await?,
            };
            out.show(&executors, |e| render_executors(e))
        }
        ExecutorVerb::Show { executor_id } => {
            let executor_id = resolve_executor(cli, &client, executor_id).await?;
            let executor = client.executor(&executor_id, cli.consistent).await?;
            out.show(&executor, render_executor)
        }
        ExecutorVerb::Drain {
            executor_id,
            cancel: false,
        } => {
            let executor_id = resolve_executor(cli, &client, executor_id).await?;
            let executor = client.drain(&executor_id).await?;
            out.show(&executor, render_executor)
        }
        ExecutorVerb::Drain {
            executor_id,
            cancel: true,
        }
        | ExecutorVerb::Undrain { executor_id } => {
            let executor_id = resolve_executor(cli, &client, executor_id).await?;
            let executor = client.undrain(&executor_id).await?;
            out.show(&executor, render_executor)
        }
        ExecutorVerb::Remove {
            executor_id,
            wait,
            wait_timeout,
        } => {
            let executor_id = resolve_executor(cli, &client, executor_id).await?;
            let wait = wait.then_some(*wait_timeout);
            remove::remove_executor(&client, &executor_id, wait, out).await
        }
        ExecutorVerb::SafeToStop { executor_id } => {
            let executor_id = resolve_executor(cli, &client, executor_id).await?;
            executor_safe_to_stop(cli, &client, &executor_id, out).await
        }
    }
}

/// Whether `given` has the form of the ids the managers mint (`ex-<number>`). Such an argument
/// is sent as it is, without a listing first, even if some executor's name is the same text.
pub(super) fn is_executor_id(given: &str) -> bool {
    given
        .strip_prefix("ex-")
        .is_some_and(|number| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
}

/// How many of the registered executors a name that matches none of them lists, so that a
/// typo against thousands of executors stays a readable message.
const CANDIDATES_SHOWN: usize = 10;

/// The executor id `given` stands for: an id as it is; otherwise a name, which must be the name
/// of exactly one of `executors` (as kubectl resolves a name). None is not found (exit 4) and
/// lists the executors there are; more than one is bad input (exit 2) naming each.
pub(super) fn executor_id_named(
    given: &str,
    executors: &[ExecutorView],
) -> Result<String, CtlError> {
    if is_executor_id(given) {
        return Ok(given.to_owned());
    }
    check_executor_name(given)?;
    let named: Vec<&ExecutorView> = executors
        .iter()
        .filter(|e| e.name.as_deref() == Some(given))
        .collect();
    let labelled = |e: &ExecutorView| match e.name.as_deref() {
        Some(name) => format!("{name} ({})", e.executor_id),
        None => format!("{} (no name)", e.executor_id),
    };
    match named.as_slice() {
        [only] => Ok(only.executor_id.clone()),
        [] if executors.is_empty() => Err(CtlError::NotFound(format!(
            "no executor is named {given}, and it is not an executor id (ex-N): no executor is \
             registered"
        ))),
        [] => {
            let mut candidates: Vec<String> = executors
                .iter()
                .take(CANDIDATES_SHOWN)
                .map(labelled)
                .collect();
            if executors.len() > CANDIDATES_SHOWN {
                candidates.push(format!("and {} more", executors.len() - CANDIDATES_SHOWN));
            }
            Err(CtlError::NotFound(format!(
                "no executor is named {given}, and it is not an executor id (ex-N); registered: \
                 {}",
                candidates.join(", ")
            )))
        }
        several => {
            let ids: Vec<&str> = several.iter().map(|e| e.executor_id.as_str()).collect();
            Err(CtlError::BadInput(format!(
                "{} executors are named {given} ({}): give the id of the one you mean",
                several.len(),
                ids.join(", ")
            )))
        }
    }
}

/// Refuses what can be neither an id nor a name (the managers take names of at most
/// [`MAX_NAME_BYTES`]), before asking the cluster for a listing that could not match it.
fn check_executor_name(given: &str) -> Result<(), CtlError> {
    if given.is_empty() || given.len() > MAX_NAME_BYTES {
        return Err(CtlError::BadInput(format!(
            "{given:?} is neither an executor id (ex-N) nor an executor name (1 to \
             {MAX_NAME_BYTES} bytes)"
        )));
    }
    Ok(())
}

/// The executor id `given` stands for ([`executor_id_named`]), listing the executors only when
/// it is not an id already: in `-n`'s namespace when it names one, else in every namespace (an
/// executor's id is the cluster's, so its name is looked for cluster-wide).
async fn resolve_executor(cli: &Cli, client: &Client, given: &str) -> Result<String, CtlError> {
    if is_executor_id(given) {
        return Ok(given.to_owned());
    }
    check_executor_name(given)?;
    let executors = match cli.namespace_named() {
        Some(namespace) => client.executors_in(namespace, cli.consistent).await?,
        None => {
            let mut executors = client.executors(cli.consistent).await?;
            // Managers before namespaces have `default` only, and no `/v1/namespaces`.
            if client.cluster_version() >= NAMESPACES_SCHEMA {
                for namespace in client.namespaces().await? {
                    if !is_default_namespace(&namespace.name) && namespace.executors > 0 {
                        executors
                            .extend(client.executors_in(&namespace.name, cli.consistent).await?);
                    }
                }
            }
            executors
        }
    };
    executor_id_named(given, &executors)
}

/// `executor safe-to-stop`: the verdict, with a line about a rollout under way in the
/// executor's namespace; a verdict of not safe is exit code 7.
async fn executor_safe_to_stop(
    cli: &Cli,
    client: &Client,
    executor_id: &str,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    // Its namespace: the one -n names must be it, and its executors say whether a
    // rollout is under way there.
    let executor = client.executor(executor_id, cli.consistent).await?;
    if let Some(asked) = cli.namespace.as_deref() {
        let same = asked == executor.namespace
            || (is_default_namespace(asked) && is_default_namespace(&executor.namespace));
        if !same {
            return Err(CtlError::NotFound(format!(
                "executor {} is not in namespace {} (it is in namespace {})",
                printable(executor_id),
                printable(asked),
                printable(&executor.namespace)
            )));
        }
    }
    let verdict = client.executor_safe_to_stop(executor_id).await?;
    let namespace = if is_default_namespace(&executor.namespace) {
        client.executors(cli.consistent).await?
    } else {
        client
            .executors_in(&executor.namespace, cli.consistent)
            .await?
    };
    let subject = format!("executor {executor_id}");
    out.show(&verdict, |verdict| {
        let mut text = render_verdict(&subject, verdict);
        text.extend(rollout_line(&executor, &namespace));
        text
    })?;
    if verdict.safe {
        Ok(())
    } else {
        Err(CtlError::NotSafe(format!("{subject} is not safe to stop")))
    }
}

pub(super) async fn run_shard(
    cli: &Cli,
    verb: &ShardVerb,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    match verb {
        ShardVerb::List => {
            let shards = match cli.namespace_named() {
                None => client.shards(cli.consistent).await?,
                Some(namespace) => client.shards_in(namespace, cli.consistent).await?,
            };
            out.show(&shards, |s| render_shards(s))
        }
        ShardVerb::Show { shard } => {
            let Some(namespace) = cli.namespace_named() else {
                let state = client.state(cli.consistent).await?;
                let view = state
                    .shards
                    .iter()
                    .find(|s| s.shard == *shard)
                    .cloned()
                    .ok_or_else(|| {
                        CtlError::NotFound(format!(
                            "shard {shard} does not exist (shard count {})",
                            state.shard_count
                        ))
                    })?;
                return out.show(&view, |v| render_shard(v, Some(&state.executors)));
            };
            // No one read of a namespace holds both its shards and its executors: the route is
            // the owner's address as the second read found it.
            let shards = client.shards_in(namespace, cli.consistent).await?;
            let view = shards
                .iter()
                .find(|s| s.shard == *shard)
                .cloned()
                .ok_or_else(|| {
                    CtlError::NotFound(format!(
                        "shard {shard} does not exist in namespace {namespace} (shard count {})",
                        shards.len()
                    ))
                })?;
            let executors = client.executors_in(namespace, cli.consistent).await?;
            out.show(&view, |v| render_shard(v, Some(&executors)))
        }
        ShardVerb::Move { shard, to } => {
            let view = client.move_shard(*shard, to).await?;
            out.show(&view, |v| render_shard(v, None))
        }
        ShardVerb::Pin { shard, executor_id } => {
            let view = client.pin_shard(*shard, executor_id).await?;
            out.show(&view, |v| render_shard(v, None))
        }
        ShardVerb::Unpin { shard } => {
            let view = client.unpin_shard(*shard).await?;
            out.show(&view, |v| render_shard(v, None))
        }
    }
}

pub(super) async fn run_route(cli: &Cli, key: &str, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let route = match cli.namespace_named() {
        None => client.route_key(key, cli.consistent).await?,
        Some(namespace) => client.route_key_in(namespace, key, cli.consistent).await?,
    };
    out.show(&route, render_key_route)
}

/// `route KEY`: the key's primary, and when the shard has ready secondaries (PROTOCOL P19.5) a
/// row for each, ready longest first, under a `ROLE` column added last, so the columns of a
/// namespace of one replica are what they always were, in their places.
pub(super) fn render_key_route(r: &KeyRoute) -> String {
    let route = &r.route;
    let row = |executor_id: Option<&str>, address: Option<&str>| {
        vec![
            r.key.clone(),
            route.shard.to_string(),
            opt(executor_id),
            opt(address),
            route.epoch.to_string(),
            r.revision.to_string(),
        ]
    };
    let primary = row(route.executor_id.as_deref(), route.address.as_deref());
    if route.secondaries.is_empty() {
        let mut table = Table::new(&["KEY", "SHARD", "EXECUTOR", "ADDRESS", "EPOCH", "REVISION"]);
        table.push(primary);
        return table.render();
    }
    let mut table = Table::new(&[
        "KEY", "SHARD", "EXECUTOR", "ADDRESS", "EPOCH", "REVISION", "ROLE",
    ]);
    let with_role = |mut cells: Vec<String>, role: Role| {
        cells.push(role.as_str().to_owned());
        cells
    };
    table.push(with_role(primary, Role::Primary));
    for secondary in &route.secondaries {
        table.push(with_role(
            row(Some(&secondary.executor_id), Some(&secondary.address)),
            Role::Secondary,
        ));
    }
    table.render()
}

pub(super) async fn run_lease_list(cli: &Cli, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let state = client.state(cli.consistent).await?;
    out.show(&state.executors, |_| render_leases(&state))
}

/// `lease list`: each executor's lease as the answering manager knows it, and what the figure
/// is when a follower answered (the bound the log records, P6.6, not the lease).
pub(super) fn render_leases(state: &StateView) -> String {
    let mut table = Table::new(&[
        "EXECUTOR",
        "NAME",
        "REMAINING",
        "DURATION",
        "SHARDS",
        "DRAINING",
    ]);
    for e in &state.executors {
        table.push(vec![
            e.executor_id.clone(),
            opt(e.name.as_deref()),
            human_ms(e.lease_remaining_ms),
            human_ms(state.lease_duration_ms),
            e.shards.len().to_string(),
            yes_no(e.draining),
        ]);
    }
    let mut text = table.render();
    if state.lease_remaining_is_bound {
        text.push_str(
            "REMAINING is what a follower knows: the longest each lease may run as the log \
             records it, which with renewals answered from the leader's memory is the lease \
             reservation (P6.6, up to three leases ahead), not the lease itself. The leader's \
             answer (--consistent) is exact.\n",
        );
    }
    text
}

pub(super) async fn run_watch(
    client: &Client,
    namespace: Option<&str>,
    wait: Duration,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let watch = |revision: u64, wait: Duration| async move {
        match namespace {
            None => client.watch(revision, wait).await,
            Some(namespace) => client.watch_in(namespace, revision, wait).await,
        }
    };
    let mut current: StateView = watch(0, Duration::from_millis(1)).await?.state;
    // On stderr, so stdout carries only events (and stays valid JSON lines).
    eprintln!(
        "watching from revision {} (Ctrl-C to stop)",
        current.revision
    );
    loop {
        let reply = watch(current.revision, wait).await?;
        if reply.state.revision <= current.revision {
            continue;
        }
        for event in watch::diff(&current, &reply.state, &reply.departed) {
            match out.format {
                OutputFormat::Json => out.json(&event, false)?,
                OutputFormat::Table => {
                    let mut line = event.to_line();
                    line.push('\n');
                    out.text(&line)?;
                }
            }
        }
        current = reply.state;
    }
}

/// Asks every member (voters and learners, as the cluster knows them) for its own view.
pub(super) async fn cluster_status(client: &Client) -> Result<Vec<MemberStatus>, CtlError> {
    let view = client.cluster_info().await?;
    let members = view
        .voters
        .iter()
        .map(|m| (m, true))
        .chain(view.learners.iter().map(|m| (m, false)));
    let mut statuses = Vec::new();
    for (member, voter) in members {
        let (info, error) = match client.cluster_info_from(&member.address).await {
            Ok(info) => (Some(info), None),
            Err(error) => (None, Some(error.to_string())),
        };
        statuses.push(MemberStatus {
            node_id: member.node_id,
            address: member.address.clone(),
            voter,
            info,
            lag: None,
            error,
        });
    }
    Ok(MemberStatus::sorted_with_lag(statuses))
}

/// `completion SHELL`: the shell's completion script.
pub(super) fn run_completion(
    shell: clap_complete::Shell,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "leaseholdctl", &mut script);
    out.writer
        .write_all(&script)
        .map_err(|e| CtlError::io("writing", "standard output", e))
}

/// `certs init|issue`: a CA and the role certificates, or one more certificate.
pub(super) fn run_certs(verb: &CertsVerb, out: &mut Out<'_>) -> Result<(), CtlError> {
    match verb {
        CertsVerb::Init {
            dir,
            managers,
            hosts,
            force,
        } => {
            let report = certs::init(&certs::InitOptions {
                dir: dir.clone(),
                managers: *managers,
                hosts: hosts.clone(),
                force: *force,
            })?;
            out.show(&report, certs::render)
        }
        CertsVerb::Issue(options) => {
            let report = certs::issue(options)?;
            out.show(&report, certs::render_issue)
        }
    }
}

/// `cluster maintenance [on|off]`: whether it is on, after switching it if asked.
pub(super) async fn run_maintenance(
    cli: &Cli,
    switch: Option<Switch>,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let view = match switch {
        None => client.maintenance().await?,
        Some(switch) => client.set_maintenance(switch == Switch::On).await?,
    };
    out.show(&view, |view| render_maintenance(view, switch))
}

/// `state`: the state's summary, of `default` or of `-n`'s namespace.
pub(super) async fn run_state(cli: &Cli, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let state = match cli.namespace_named() {
        None => client.state(cli.consistent).await?,
        Some(namespace) => client.state_in(namespace, cli.consistent).await?,
    };
    out.show(&state, render_state_summary)
}

/// `plan`: the moves the leader would make now, in `default` or `-n`'s namespace.
pub(super) async fn run_plan(cli: &Cli, out: &mut Out<'_>) -> Result<(), CtlError> {
    let client = cli.client(cli.request_timeout)?;
    let plan = match cli.namespace_named() {
        None => client.plan().await?,
        Some(namespace) => client.plan_in(namespace).await?,
    };
    out.show(&plan, render_plan)
}

/// `watch --wait`: changes as they commit, each blocking query bounded by `wait`.
pub(super) async fn run_watch_for(
    cli: &Cli,
    wait: Duration,
    out: &mut Out<'_>,
) -> Result<(), CtlError> {
    if wait.is_zero() || wait > MAX_WATCH_WAIT {
        return Err(CtlError::BadInput(format!(
            "--wait must be between 1ms and {}s",
            MAX_WATCH_WAIT.as_secs()
        )));
    }
    // A blocking query may take the whole wait: the request bound must exceed it.
    let client = cli.client(wait + cli.request_timeout)?;
    run_watch(&client, cli.namespace_named(), wait, out).await
}
