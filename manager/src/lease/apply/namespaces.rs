//! Creating, changing and deleting namespaces (P18.1, P18.4).

use super::*;

impl LeaseState {
    /// Creates a namespace (P18.1): a repeat with the same settings succeeds and changes nothing
    /// (a retried request), other settings for a name in use are a conflict. Its shards start at
    /// the epoch its name's shards last reached, so no epoch repeats for a name (I2).
    pub(super) fn apply_create_namespace(
        &mut self,
        log_index: u64,
        name: &str,
        config: ClusterConfig,
        max_executors: Option<u32>,
        (placement, replication): (&PlacementOverrides, &ReplicaSettings),
    ) -> Outcome {
        if let Err(error) = check_namespace_name(name) {
            return invalid(error.to_string());
        }
        if let Err(error) = check_namespace_settings(config.lease_duration_ms, max_executors) {
            return invalid(error.to_string());
        }
        if let Err(error) = placement.check() {
            return invalid(error.to_string());
        }
        if let Err(error) = check_replica_settings(replication) {
            return invalid(error.to_string());
        }
        if let Some(existing) = self.namespaces.get(name) {
            if existing.config == config
                && existing.max_executors == max_executors
                && existing.placement == *placement
                && existing.replication == *replication
            {
                return Outcome::NamespaceCreated {
                    name: name.to_owned(),
                    already_exists: true,
                };
            }
            return refused(RefusalReason::Conflict {
                detail: format!("namespace {name} exists with other settings"),
            });
        }
        if config.shard_count == 0 || config.shard_count > MAX_SHARD_COUNT {
            return invalid(format!(
                "shard count {} is outside 1..={MAX_SHARD_COUNT}",
                config.shard_count
            ));
        }
        if self.namespaces.len() >= MAX_NAMESPACES {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "the cluster holds its most namespaces ({MAX_NAMESPACES}): delete one first"
                ),
            });
        }
        let total_shards: u64 = self
            .namespaces
            .values()
            .map(Namespace::reserved_shard_count)
            .sum();
        if total_shards.saturating_add(u64::from(config.shard_count)) > MAX_TOTAL_SHARDS {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "the namespaces hold {total_shards} shards; {} more would pass the cluster's \
                     {MAX_TOTAL_SHARDS}",
                    config.shard_count
                ),
            });
        }
        let epoch = self.retired_epochs.remove(name).unwrap_or(0);
        self.namespaces.insert(
            name.to_owned(),
            Namespace::new(
                config,
                max_executors,
                placement.clone(),
                *replication,
                log_index,
                epoch,
            ),
        );
        self.touch_assignment(log_index, name);
        Outcome::NamespaceCreated {
            name: name.to_owned(),
            already_exists: false,
        }
    }

    /// Changes a namespace's lease duration (grants from now on; expiries already told stand,
    /// P3.4), executor bound (a lower bound refuses registrations and removes no one), placement
    /// settings (P18.4: a plan made under the old ones is stale, so the next is made under the
    /// new) and replica settings (P19.1: the next plans place or drop secondaries to match). `default`'s lease is the managers' `--lease-duration`, so it cannot
    /// change here.
    pub(super) fn apply_set_namespace(
        &mut self,
        log_index: u64,
        name: &str,
        lease_duration_ms: u64,
        max_executors: Option<u32>,
        (placement, replication): (&PlacementOverrides, &ReplicaSettings),
    ) -> Outcome {
        if let Err(error) = check_namespace_settings(lease_duration_ms, max_executors) {
            return invalid(error.to_string());
        }
        if let Err(error) = placement.check() {
            return invalid(error.to_string());
        }
        if let Err(error) = check_replica_settings(replication) {
            return invalid(error.to_string());
        }
        let Some(space) = self.namespaces.get(name) else {
            return refused(RefusalReason::UnknownNamespace {
                namespace: name.to_owned(),
            });
        };
        if name == DEFAULT_NAMESPACE && space.config.lease_duration_ms != lease_duration_ms {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "the {DEFAULT_NAMESPACE} namespace's lease is the managers' --lease-duration"
                ),
            });
        }
        // Replica settings change what the plans place, as placement settings do.
        let placement_changed = space.placement != *placement || space.replication != *replication;
        let changed = space.config.lease_duration_ms != lease_duration_ms
            || space.max_executors != max_executors
            || placement_changed;
        if changed {
            if let Some(space) = self.namespaces.get_mut(name) {
                space.config.lease_duration_ms = lease_duration_ms;
                space.max_executors = max_executors;
                space.placement = placement.clone();
                space.replication = *replication;
            }
            if placement_changed {
                self.touch_assignment(log_index, name);
            } else {
                self.touch(log_index);
            }
        }
        Outcome::NamespaceSet {
            name: name.to_owned(),
            changed,
        }
    }

    /// Deletes a namespace (P18.1): refused for `default` and while any of its shards has an
    /// owner (its executors are drained first, so no executor admits anything of it). Executors
    /// still registered in it hold nothing; they are removed with it (tombstoned as
    /// deregistered, so their next renewal is told they are gone). The highest epoch its shards
    /// reached is kept for its name (I2). A repeat finds the name retired and succeeds.
    pub(super) fn apply_delete_namespace(
        &mut self,
        log_index: u64,
        now_ms: u64,
        name: &str,
    ) -> Outcome {
        let Some(space) = self.namespaces.get(name) else {
            if self.retired_epochs.contains_key(name) {
                return Outcome::NamespaceDeleted {
                    name: name.to_owned(),
                    already_gone: true,
                    removed: Vec::new(),
                };
            }
            return refused(RefusalReason::UnknownNamespace {
                namespace: name.to_owned(),
            });
        };
        if name == DEFAULT_NAMESPACE {
            return refused(RefusalReason::Conflict {
                detail: format!("the {DEFAULT_NAMESPACE} namespace cannot be deleted"),
            });
        }
        let owned = space
            .shards
            .iter()
            .filter(|shard| shard.owner.is_some())
            .count();
        if owned > 0 {
            return refused(RefusalReason::Conflict {
                detail: format!(
                    "namespace {name} has {owned} shards with an owner: drain its executors \
                     first (P18.1)"
                ),
            });
        }
        let highest_epoch = space.highest_epoch();
        let members: Vec<ExecutorId> = self
            .executors
            .values()
            .filter(|executor| executor.namespace == name)
            .map(|executor| executor.id.clone())
            .collect();
        let mut effects = EffectsBuilder::default();
        for executor_id in &members {
            self.remove_executor(
                executor_id,
                TombstoneReason::Deregistered,
                log_index,
                now_ms,
                &mut effects,
            );
        }
        self.touch_assignment(log_index, name);
        self.namespaces.remove(name);
        self.retired_epochs.insert(name.to_owned(), highest_epoch);
        Outcome::NamespaceDeleted {
            name: name.to_owned(),
            already_gone: false,
            removed: members,
        }
    }
}
