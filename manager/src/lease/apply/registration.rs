//! Registrations (P4.4, P13.4, P15.1, P17.3, P18.1, P18.3): one or many in an entry, a retried
//! one granted again, a new one numbered by the log.

use super::*;

impl LeaseState {
    /// `Register`: the registration, then the numbers the log covers forgotten
    /// ([`Self::forget_numbers_the_log_covers`]).
    pub(super) fn apply_register_one(
        &mut self,
        log_index: u64,
        now_ms: u64,
        fields: RegistrationFields<'_>,
    ) -> Outcome {
        let numbered_before = self.next_executor_number;
        let result = self.apply_register(log_index, now_ms, fields);
        self.forget_numbers_the_log_covers(log_index, numbered_before);
        match result {
            RegisterResult::Registered {
                grant,
                already_registered,
            } => Outcome::Registered {
                grant,
                already_registered,
            },
            RegisterResult::Refused { reason } => refused(reason),
        }
    }

    /// `RegisterMany`: each registration in order under the one entry, then the numbers the
    /// log covers forgotten.
    pub(super) fn apply_register_many(
        &mut self,
        log_index: u64,
        now_ms: u64,
        registrations: &[Registration],
    ) -> Outcome {
        let numbered_before = self.next_executor_number;
        let results = registrations
            .iter()
            .map(|registration| self.apply_register(log_index, now_ms, registration.into()))
            .collect();
        self.forget_numbers_the_log_covers(log_index, numbered_before);
        Outcome::RegisteredMany { results }
    }

    /// `Register`: idempotent per incarnation (P4.4, P7.2). The same incarnation while its
    /// executor is present gets the same id and its current grant, and nothing changes (not the
    /// lease: a retry is not a renewal, so a lapsed executor's retry gets a zero ttl and must
    /// renew; nor the address, name or capacity of the retry). Otherwise a new executor is minted
    /// with an empty set;
    /// the leader's next plan gives it shards (P5.4). An incarnation whose executor was removed
    /// gets a new executor: the old one's shards have moved on and its id answers 404.
    ///
    /// The executor joins `namespace` (P18.1), which must exist and have room below its
    /// `max_executors`; the same incarnation in another namespace is a conflict, not a retry.
    pub(super) fn apply_register(
        &mut self,
        log_index: u64,
        now_ms: u64,
        registration: RegistrationFields<'_>,
    ) -> RegisterResult {
        if let Err(reason) = check_registration(&registration) {
            return RegisterResult::Refused { reason };
        }
        let namespace = registration.namespace;
        let Some(space) = self.namespaces.get(namespace) else {
            return RegisterResult::Refused {
                reason: RefusalReason::UnknownNamespace {
                    namespace: namespace.to_owned(),
                },
            };
        };
        let config = space.config;
        let generation = space.generation;
        let executor_count = space.executor_count();
        let room = space
            .max_executors
            .is_none_or(|max| executor_count < max as usize);
        if let Some(existing) = self.executor_by_incarnation(registration.incarnation) {
            let grant = match self.grant_again(existing, &registration, now_ms) {
                Ok(grant) => grant,
                Err(reason) => return RegisterResult::Refused { reason },
            };
            // A retried register changes nothing else, but what it tells counts (P6.1).
            self.longest_lease_told_ms = self.longest_lease_told_ms.max(grant.lease_ttl_ms);
            return RegisterResult::Registered {
                grant,
                already_registered: true,
            };
        }
        if (generation > 0 || space.reshard.is_some()) && !registration.follows_generations {
            return RegisterResult::Refused {
                reason: RefusalReason::Conflict {
                    detail: format!(
                        "namespace {namespace} has resharded (generation {generation}) or is \
                         resharding: it takes only executors that follow a change of layout \
                         (follows_generations, P20.3); upgrade this executor"
                    ),
                },
            };
        }
        if !room {
            return RegisterResult::Refused {
                reason: RefusalReason::Conflict {
                    detail: format!(
                        "namespace {namespace} holds its most executors ({executor_count}): \
                         deregister one, or raise its bound (P18.1)"
                    ),
                },
            };
        }
        let grant = self.register_new(log_index, now_ms, &registration, (config, generation));
        RegisterResult::Registered {
            grant,
            already_registered: false,
        }
    }

    /// A registration retried by the executor already registered with its incarnation: the
    /// same grant again, to the holder of its credential in its namespace only.
    pub(super) fn grant_again(
        &self,
        existing: &Executor,
        registration: &RegistrationFields<'_>,
        now_ms: u64,
    ) -> Result<Grant, RefusalReason> {
        let RegistrationFields {
            incarnation,
            namespace,
            credential_sha256,
            ..
        } = *registration;
        if existing.namespace != namespace {
            return Err(RefusalReason::Conflict {
                detail: format!(
                    "incarnation {incarnation} is registered in namespace {}, not \
                     {namespace}: a new registration needs a new incarnation (P18.1)",
                    existing.namespace
                ),
            });
        }
        // P13.4: only the holder of the credential gets the grant again. Hashes, so equal
        // length; the values are public to every replica, so no timing to protect here.
        if existing.credential_sha256 != credential_sha256 {
            return Err(RefusalReason::CredentialMismatch {
                executor_id: existing.id.clone(),
            });
        }
        Ok(self.grant_of(existing, now_ms))
    }

    /// A new executor in the registration's namespace, whose `config` and generation it takes, with a lease
    /// from `now_ms` and no shards yet.
    pub(super) fn register_new(
        &mut self,
        log_index: u64,
        now_ms: u64,
        registration: &RegistrationFields<'_>,
        (config, generation): (ClusterConfig, u64),
    ) -> Grant {
        let namespace = registration.namespace;
        let executor_id = self.mint_executor_id(log_index);
        let lease_expiry_ms = now_ms.saturating_add(config.lease_duration_ms);
        let executor = Executor {
            id: executor_id.clone(),
            incarnation: registration.incarnation.to_owned(),
            name: registration.name.map(str::to_owned),
            address: registration.address.to_owned(),
            lease_expiry_ms,
            lease_ttl_told_ms: lease_expiry_ms.saturating_sub(now_ms),
            lease_reserved_until_ms: 0,
            registered_revision: log_index,
            owned_shards: imbl::OrdSet::new(),
            draining: false,
            credential_sha256: registration.credential_sha256,
            capacity: registration.capacity,
            app_version: registration.app_version.map(str::to_owned),
            labels: registration.labels.clone(),
            namespace: namespace.to_owned(),
            follows_generations: registration.follows_generations,
        };
        let mut grant = Grant {
            executor_id: executor_id.clone(),
            lease_ttl_ms: executor.lease_ttl_told_ms,
            revision: log_index,
            shard_count: config.shard_count,
            generation,
            shards: Vec::new(),
            secondaries: Vec::new(),
        };
        self.longest_lease_told_ms = self.longest_lease_told_ms.max(grant.lease_ttl_ms);
        self.by_incarnation
            .insert(executor.incarnation.clone(), executor_id.clone());
        if let Some(space) = self.namespaces.get_mut(namespace) {
            space.members.insert(executor_id.clone());
            if let Some(name) = registration.name {
                space.restore_secondaries(name, &executor_id, now_ms, log_index);
            }
        }
        self.executors.insert(executor_id.clone(), executor);
        self.touch_assignment(log_index, namespace);
        // The secondaries it took back under its name (P19.4).
        grant.secondaries = self.secondaries_of(&executor_id);
        grant
    }

    /// A new executor's id: the entry's index for its first, the numbers after it for the next
    /// ones of the same entry, and never a number minted before (the next entry's index may be
    /// one an earlier `RegisterMany` took).
    pub(super) fn mint_executor_id(&mut self, log_index: u64) -> ExecutorId {
        let number = self.next_executor_number.max(log_index);
        self.next_executor_number = number.saturating_add(1);
        format!("ex-{number}")
    }

    /// After an entry that minted (`next_executor_number` moved from `numbered_before`): numbers
    /// up to the next entry's index are the log's own to mint, so the state remembers only
    /// numbers minted past it (0 otherwise, as in 0.1.0). An entry that minted nothing leaves
    /// it alone, so one whose registrations were all refused changes nothing (P5.1).
    pub(super) fn forget_numbers_the_log_covers(&mut self, log_index: u64, numbered_before: u64) {
        if self.next_executor_number != numbered_before
            && self.next_executor_number <= log_index.saturating_add(1)
        {
            self.next_executor_number = 0;
        }
    }
}
