//! Operator actions (P17.4) and the cluster version (P14.3): each action and its audit record in
//! one entry.

use super::*;

/// Whether an operator action's outcome changed the state, so the audit log records it (P17.4).
pub(super) fn changed_anything(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::DrainingSet { changed, .. }
        | Outcome::MaintenanceSet { changed, .. }
        | Outcome::PinSet { changed, .. }
        | Outcome::NamespaceSet { changed, .. }
        | Outcome::ReshardRequested { changed, .. } => *changed,
        Outcome::NamespaceCreated { already_exists, .. } => !already_exists,
        Outcome::NamespaceDeleted { already_gone, .. } => !already_gone,
        Outcome::Deregistered { already_gone, .. } => !already_gone,
        Outcome::Rebalanced { .. } | Outcome::Recorded => true,
        _ => false,
    }
}

impl LeaseState {
    /// `Operator` (P17.4): the action, then, if it changed anything, its audit record in the
    /// same write, so the log has every effective operator action and nothing else.
    pub(super) fn apply_operator(
        &mut self,
        log_index: u64,
        now_ms: u64,
        actor: &str,
        action: &OperatorAction,
    ) -> Outcome {
        if actor.len() > MAX_ACTOR_BYTES {
            return invalid(format!("the actor is longer than {MAX_ACTOR_BYTES} bytes"));
        }
        let outcome = self.apply_operator_action(log_index, now_ms, action);
        if changed_anything(&outcome) {
            self.record_audit(AuditRecord {
                revision: log_index,
                at_ms: now_ms,
                actor: actor.to_owned(),
                action: action.clone(),
            });
        }
        outcome
    }

    /// The operator's action itself, applied as the same change any other caller's would be.
    pub(super) fn apply_operator_action(
        &mut self,
        log_index: u64,
        now_ms: u64,
        action: &OperatorAction,
    ) -> Outcome {
        match action {
            OperatorAction::SetDraining {
                executor_id,
                draining,
            } => self.apply_set_draining(log_index, executor_id, *draining),
            OperatorAction::Remove { executor_id } => {
                self.apply_deregister(log_index, now_ms, executor_id)
            }
            OperatorAction::SetMaintenance { on } => self.apply_set_maintenance(log_index, *on),
            OperatorAction::MoveShard {
                namespace,
                shard,
                to,
            } => self.apply_operator_move(log_index, now_ms, namespace, *shard, to),
            OperatorAction::Pin {
                namespace,
                shard,
                executor_id,
            } => self.apply_pin(log_index, namespace, *shard, executor_id.as_ref()),
            OperatorAction::CreateNamespace {
                name,
                shard_count,
                lease_duration_ms,
                max_executors,
                placement,
                replication,
            } => self.apply_create_namespace(
                log_index,
                name,
                ClusterConfig {
                    shard_count: *shard_count,
                    lease_duration_ms: *lease_duration_ms,
                },
                *max_executors,
                (placement, replication),
            ),
            OperatorAction::SetNamespace {
                name,
                lease_duration_ms,
                max_executors,
                placement,
                replication,
            } => self.apply_set_namespace(
                log_index,
                name,
                *lease_duration_ms,
                *max_executors,
                (placement, replication),
            ),
            OperatorAction::Reshard { name, shard_count } => {
                self.apply_request_reshard(log_index, name, *shard_count)
            }
            OperatorAction::DeleteNamespace { name } => {
                self.apply_delete_namespace(log_index, now_ms, name)
            }
            OperatorAction::Membership { .. } => {
                self.touch(log_index);
                Outcome::Recorded
            }
        }
    }

    pub(super) fn apply_set_maintenance(&mut self, log_index: u64, on: bool) -> Outcome {
        let changed = self.maintenance != on;
        if changed {
            self.maintenance = on;
            // Plans made before it, in every namespace, would do what maintenance forbids (P2.4).
            let names: Vec<String> = self.namespaces.keys().cloned().collect();
            for name in names {
                self.touch_assignment(log_index, &name);
            }
        }
        Outcome::MaintenanceSet { on, changed }
    }

    /// Appends an operator's record, pushing out the oldest past [`MAX_AUDIT_RECORDS`]: the
    /// oldest of a caller who is not an operator of the whole cluster first, so such callers
    /// cannot push the cluster operators' records out (P17.4).
    pub(super) fn record_audit(&mut self, record: AuditRecord) {
        self.audit.push_back(record);
        while self.audit.len() > MAX_AUDIT_RECORDS {
            let oldest_other = self
                .audit
                .iter()
                .position(|record| !is_cluster_operator(&record.actor))
                .unwrap_or(0);
            self.audit.remove(oldest_other);
        }
    }

    /// An operator's move (P17.4): a one-move plan made on the current state, so never stale,
    /// refused with the reason unless the target is of the shard's namespace (P18.2) and takes
    /// shards (live at `now_ms`, not draining), does not hold it already, and the shard is not
    /// pinned to another executor.
    pub(super) fn apply_operator_move(
        &mut self,
        log_index: u64,
        now_ms: u64,
        namespace: &str,
        shard: ShardId,
        to: &str,
    ) -> Outcome {
        let Some(space) = self.namespaces.get(namespace) else {
            return Outcome::NotFound;
        };
        let Some(entry) = space.shard(shard) else {
            return Outcome::NotFound;
        };
        let Some(target) = self.executors.get(to) else {
            return Outcome::NotFound;
        };
        let conflict = |detail: String| refused(RefusalReason::Conflict { detail });
        if target.namespace != namespace {
            return conflict(format!(
                "executor {to} is of namespace {}, not {namespace} (P18.2)",
                target.namespace
            ));
        }
        if target.lease_lapsed(now_ms) || target.draining {
            return conflict(format!(
                "executor {to} is {}: it takes no shards",
                if target.draining {
                    "draining"
                } else {
                    "not live"
                }
            ));
        }
        let releasing_to = entry.handoff.as_ref().and_then(|h| h.to.as_deref());
        if entry.owner.as_deref() == Some(to) && entry.handoff.is_none() || releasing_to == Some(to)
        {
            return conflict(format!("shard {shard} is with {to} already"));
        }
        if let Some(pinned) = space.pin(shard).filter(|pinned| *pinned != to) {
            return conflict(format!(
                "shard {shard} is pinned to {pinned}: unpin it first, or pin it to {to}"
            ));
        }
        let planned_at = self.assignment_revision;
        self.apply_rebalance(
            log_index,
            now_ms,
            planned_at,
            namespace,
            &[Move {
                shard,
                to: to.to_owned(),
            }],
        )
    }

    /// A pin (P17.4): to a registered executor of the shard's namespace (P18.2), or none. A
    /// change makes plans made before it stale, since they may move the shard elsewhere (P2.4).
    pub(super) fn apply_pin(
        &mut self,
        log_index: u64,
        namespace: &str,
        shard: ShardId,
        executor_id: Option<&String>,
    ) -> Outcome {
        let Some(space) = self.namespaces.get(namespace) else {
            return Outcome::NotFound;
        };
        if space.shard(shard).is_none() {
            return Outcome::NotFound;
        }
        if let Some(executor_id) = executor_id {
            match self.executors.get(executor_id) {
                None => return Outcome::NotFound,
                Some(executor) if executor.namespace != namespace => {
                    return refused(RefusalReason::Conflict {
                        detail: format!(
                            "executor {executor_id} is of namespace {}, not {namespace} (P18.2)",
                            executor.namespace
                        ),
                    })
                }
                Some(_) => {}
            }
            if let Some(partner) = space.merge_partner(shard) {
                if space
                    .pin(partner)
                    .is_some_and(|pinned| pinned != executor_id.as_str())
                {
                    return refused(RefusalReason::Conflict {
                        detail: format!(
                            "shard {shard} of {namespace} merges with shard {partner}, pinned to \
                             another executor, in the merge under way (P20.2)"
                        ),
                    });
                }
            }
        }
        let changed = space.pins.get(&shard) != executor_id;
        if changed {
            if let Some(space) = self.namespaces.get_mut(namespace) {
                match executor_id {
                    Some(executor_id) => {
                        space.pins.insert(shard, executor_id.clone());
                    }
                    None => {
                        space.pins.remove(&shard);
                    }
                }
            }
            self.touch_assignment(log_index, namespace);
        }
        Outcome::PinSet {
            shard,
            executor_id: executor_id.cloned(),
            changed,
        }
    }

    /// `SetClusterVersion`: raises, never lowers (P14.3), so replays and stale raises are no-ops.
    pub(super) fn apply_set_cluster_version(
        &mut self,
        log_index: u64,
        cluster_version: u32,
    ) -> Outcome {
        let previous = self.cluster_version;
        if cluster_version > previous {
            self.cluster_version = cluster_version;
            self.touch(log_index);
        }
        Outcome::ClusterVersionSet {
            previous,
            cluster_version: self.cluster_version,
        }
    }
}
