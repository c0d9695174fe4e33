//! The replicated namespace (PROTOCOL §19, script step 13): the namespace given two replicas per
//! shard, so each executor holds secondaries beside its primaries; a drain moves primaries in it;
//! and the kit judges what an executor did with the secondaries it was given: never admitted as
//! the primary (P19.1, P19.5), and said ready only as what its set showed (P19.3).

use leasehold_api::wire::{SetNamespaceRequest, ShardView, DEFAULT_NAMESPACE, REPLICAS_SCHEMA};

use super::*;

/// Replicas per shard in the step: one primary and one secondary, the fewest that give every
/// executor secondaries to hold.
const KIT_REPLICAS: u32 = 2;
/// Renewals of each executor the readiness check reads before it judges the readiness wrong: a
/// renewal may leave before a push that changed its secondaries lands.
const READY_ATTEMPTS: usize = 3;
/// How many secondaries admitted as the primary a finding lists before it only counts the rest.
const SHOWN_ADMISSIONS: usize = 8;

/// Every secondary the managers were seen to give an executor while another executor was the
/// shard's primary: `(secondary's executor, shard, epoch)` → the primary's executor. The epoch
/// is the primary's (P19.1), and a new primary always has a new epoch (I2), so no executor is
/// ever the primary of a shard at an epoch at which the managers held it as a secondary.
type GivenSecondaries = BTreeMap<(String, u32, u64), String>;

impl Run<'_> {
    /// Script step 13: the namespace given [`KIT_REPLICAS`] replicas per shard once the cluster
    /// version allows it; once every shard has a primary and a secondary on the running
    /// executors, x0 is drained (its primaries move, P19.3, and I1 and I2 are checked over the
    /// primaries' intervals at the end, as for every step); then the renewals' `ready` is judged
    /// and every log is read for a secondary admitted as the primary.
    pub(super) async fn replicated_phase(&mut self, all: &[usize]) -> Result<(), RunError> {
        Self::step("two replicas per shard");
        self.wait_for_cluster_version(REPLICAS_SCHEMA).await?;
        self.give_replicas(KIT_REPLICAS).await?;
        let mut given = self.replicas_placed(all, all, "two replicas given").await?;

        Self::step("a drain in the replicated namespace");
        let x0 = self.executor_id(0).await?;
        self.admin.drain(&x0).await.map_err(kit_error)?;
        given.extend(
            self.replicas_placed(&[1, 2], all, "x0 drained in the replicated namespace")
                .await?,
        );

        Self::step("renewals say ready only for their secondaries");
        let started = Instant::now();
        given.extend(self.readiness_step(all).await?);
        self.steps
            .push(("renewals judged for ready".into(), started.elapsed()));
        self.judge_secondaries_admitted_as_primary(&given)?;
        Ok(())
    }

    /// Waits until the committed cluster version is `version` or later (P14.3: the leader raises
    /// it within a probe round or two of the managers' start, long past by now).
    pub(super) async fn wait_for_cluster_version(&self, version: u32) -> Result<(), RunError> {
        let waited_by = Instant::now() + SETTLE_BOUND;
        loop {
            let stated = self
                .admin
                .cluster_info()
                .await
                .ok()
                .map(|info| info.reported_cluster_version());
            if stated.is_some_and(|stated| stated >= version) {
                return Ok(());
            }
            if Instant::now() >= waited_by {
                return Err(RunError::Kit(format!(
                    "the managers' cluster version did not reach {version} within \
                     {SETTLE_BOUND:?} (last read: {stated:?})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `PATCH /v1/namespaces/default` with `replicas`, retried within [`SETTLE_BOUND`]: a leader
    /// elected since the version was read may not state it yet (`409`).
    async fn give_replicas(&self, replicas: u32) -> Result<(), RunError> {
        let request = SetNamespaceRequest {
            replicas: Some(replicas),
            ..SetNamespaceRequest::default()
        };
        let waited_by = Instant::now() + SETTLE_BOUND;
        loop {
            match self.admin.set_namespace(DEFAULT_NAMESPACE, &request).await {
                Ok(view) if view.replicas.unwrap_or(1) == replicas => return Ok(()),
                Ok(view) if Instant::now() >= waited_by => {
                    return Err(RunError::Kit(format!(
                        "the namespace was set to {replicas} replicas but shows {:?}",
                        view.replicas
                    )))
                }
                Err(error) if Instant::now() >= waited_by => {
                    return Err(RunError::Kit(format!(
                        "the namespace could not be given {replicas} replicas: {error}"
                    )))
                }
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// [`Run::settle`] on `owners`, then waits until every shard has its primary on one of
    /// `owners`, no handoff, and a secondary on another running executor of `holders`; returns
    /// the secondaries the managers gave, as the last shard views showed them.
    async fn replicas_placed(
        &mut self,
        owners: &[usize],
        holders: &[usize],
        what: &str,
    ) -> Result<GivenSecondaries, RunError> {
        self.settle(owners, &format!("{what}: primaries settled"))
            .await?;
        let started = Instant::now();
        let owner_ids = self.executor_ids(owners).await?;
        let holder_ids = self.executor_ids(holders).await?;
        let bound = self.settle_bound();
        let mut last = String::new();
        while started.elapsed() < bound {
            match self.admin.shards(true).await {
                Ok(shards) => match placed(&shards, &owner_ids, &holder_ids) {
                    Ok(()) => {
                        self.steps
                            .push((format!("{what}: secondaries placed"), started.elapsed()));
                        return Ok(given_secondaries(&shards));
                    }
                    Err(detail) => last = detail,
                },
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(RunError::Executor(format!(
            "{what}: timed out after {bound:?} waiting for every shard to have its primary on \
             one of {} and a secondary on another of {} ({last})",
            self.names(owners).join(", "),
            self.names(holders).join(", ")
        )))
    }

    /// The executor ids of `slots`' processes.
    async fn executor_ids(&mut self, slots: &[usize]) -> Result<BTreeSet<String>, RunError> {
        let mut ids = BTreeSet::new();
        for &slot in slots {
            ids.insert(self.executor_id(slot).await?);
        }
        Ok(ids)
    }

    /// P19.3: a renewal's `ready` names only secondaries the executor holds, each at the epoch
    /// its set shows. Each executor's renewals are read at its call proxy while the managers'
    /// secondaries for it stand still (read before and after); a renewal that names anything
    /// else is wrong, and an executor each of whose [`READY_ATTEMPTS`] judged renewals was wrong
    /// is a finding (one right renewal clears it: a push may still be landing when one leaves).
    /// Returns the secondaries the managers gave meanwhile.
    async fn readiness_step(&mut self, slots: &[usize]) -> Result<GivenSecondaries, RunError> {
        let mut ids = BTreeMap::new();
        for &slot in slots {
            ids.insert(slot, self.executor_id(slot).await?);
        }
        let mut given = GivenSecondaries::new();
        let mut wrong: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let mut said: BTreeMap<usize, usize> = BTreeMap::new();
        let mut pending: BTreeSet<usize> = slots.iter().copied().collect();
        for _ in 0..READY_ATTEMPTS * 2 {
            if pending.is_empty() {
                break;
            }
            let before = self.admin.shards(true).await.map_err(kit_error)?;
            let bodies = self.next_renewals(&ids, &pending).await?;
            let after = self.admin.shards(true).await.map_err(kit_error)?;
            given.extend(given_secondaries(&after));
            for (slot, body) in bodies {
                let id = &ids[&slot];
                let expected = secondaries_of(&after, id);
                if secondaries_of(&before, id) != expected {
                    continue;
                }
                match judge_ready(&body, &expected) {
                    Ok(count) => {
                        said.insert(slot, count);
                        pending.remove(&slot);
                    }
                    Err(detail) => {
                        let judged = wrong.entry(slot).or_default();
                        judged.push(detail);
                        if judged.len() >= READY_ATTEMPTS {
                            pending.remove(&slot);
                        }
                    }
                }
            }
        }
        let unjudged: Vec<String> = pending
            .iter()
            .filter(|slot| !wrong.contains_key(slot))
            .map(|&slot| self.process(slot).name.clone())
            .collect();
        for (slot, count) in &said {
            let name = self.process(*slot).name.clone();
            eprintln!("conformance: readiness: {name} said {count} secondaries ready");
        }
        for (slot, judged) in wrong {
            if said.contains_key(&slot) {
                continue;
            }
            let name = self.process(slot).name.clone();
            self.findings.push(format!(
                "P19.3 readiness: {name} ({}) said ready what it does not hold as a secondary at \
                 that epoch, in each of {} renewals sent while the managers' secondaries for it \
                 stood still: {}; a renewal's ready lists only secondaries, each at the epoch \
                 its set shows",
                ids[&slot],
                judged.len(),
                judged.join("; ")
            ));
        }
        if !unjudged.is_empty() {
            return Err(RunError::Kit(format!(
                "the readiness step found no renewal of {} sent while the managers' secondaries \
                 for it stood still, in {} renewals",
                unjudged.join(", "),
                READY_ATTEMPTS * 2
            )));
        }
        Ok(given)
    }

    /// The body of the next renewal each of `pending` sends, read at its call proxy.
    async fn next_renewals(
        &mut self,
        ids: &BTreeMap<usize, String>,
        pending: &BTreeSet<usize>,
    ) -> Result<BTreeMap<usize, Vec<u8>>, RunError> {
        for &slot in pending {
            let path = format!("/v1/executors/{}/renew", ids[&slot]);
            self.process(slot).call_proxy.capture_next("POST", &path);
        }
        let bodies = self.captured_renewals(pending).await;
        for &slot in pending {
            self.process(slot).call_proxy.stop_capturing();
        }
        bodies
    }

    /// [`Run::next_renewals`]'s wait for the renewals its proxies were told to keep.
    async fn captured_renewals(
        &mut self,
        pending: &BTreeSet<usize>,
    ) -> Result<BTreeMap<usize, Vec<u8>>, RunError> {
        let waited_by = Instant::now() + KIT_LEASE * 2;
        let mut bodies = BTreeMap::new();
        while bodies.len() < pending.len() {
            for &slot in pending {
                if let Some(body) = self.process(slot).call_proxy.captured_body() {
                    bodies.insert(slot, body);
                }
            }
            if bodies.len() == pending.len() {
                break;
            }
            if Instant::now() >= waited_by {
                let silent: Vec<String> = pending
                    .iter()
                    .filter(|slot| !bodies.contains_key(slot))
                    .map(|&slot| self.process(slot).name.clone())
                    .collect();
                return Err(RunError::Executor(format!(
                    "{} sent no renewal within {:?} (P3.5: a renewal once a third of the lease \
                     has passed)",
                    silent.join(", "),
                    KIT_LEASE * 2
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(bodies)
    }

    /// P19.1, P19.5: every admission log the run's processes wrote, read for a primary's
    /// interval at a `(shard, epoch)` the managers gave its executor as a secondary while another
    /// executor was the primary. Such an interval also overlaps the real primary's (I1), which
    /// the check of the logs reports; this names the rule.
    fn judge_secondaries_admitted_as_primary(
        &mut self,
        given: &GivenSecondaries,
    ) -> Result<(), RunError> {
        let mut admitted = Vec::new();
        for process in &self.processes {
            let intervals = process.intervals().map_err(|detail| {
                RunError::Executor(format!(
                    "an admission log is not in the format of §9: {detail}"
                ))
            })?;
            for (interval, primary) in admitted_as_primary(given, &intervals) {
                admitted.push(format!(
                    "{} ({}) shard {} at epoch {}, whose primary was {primary}",
                    process.name, interval.executor_id, interval.shard, interval.epoch
                ));
            }
        }
        if admitted.is_empty() {
            return Ok(());
        }
        let count = admitted.len();
        let mut shown: Vec<String> = admitted.into_iter().take(SHOWN_ADMISSIONS).collect();
        if count > SHOWN_ADMISSIONS {
            shown.push(format!("and {} more", count - SHOWN_ADMISSIONS));
        }
        self.findings.push(format!(
            "P19.5 a secondary admitted as the primary: {count} admission intervals without \
             \"role\":\"secondary\" at a shard and epoch the managers gave the executor as a \
             secondary: {}; a secondary admits only secondary work, and its admission log lines \
             say \"role\":\"secondary\"",
            shown.join("; ")
        ));
        Ok(())
    }
}

/// Whether every shard in `shards` has its primary on one of `owners`, no handoff under way, and
/// a secondary not lost on one of `holders` other than its primary; the first shard that has not,
/// otherwise.
fn placed(
    shards: &[ShardView],
    owners: &BTreeSet<String>,
    holders: &BTreeSet<String>,
) -> Result<(), String> {
    if shards.len() != KIT_SHARDS as usize {
        return Err(format!("{} shards", shards.len()));
    }
    for shard in shards {
        let Some(owner) = shard.owner.as_ref().filter(|owner| owners.contains(*owner)) else {
            return Err(format!(
                "shard {}'s primary is {:?}, not one of the owners",
                shard.shard, shard.owner
            ));
        };
        if shard.handoff.is_some() {
            return Err(format!("shard {} is in a handoff", shard.shard));
        }
        let held = shard.secondaries.iter().any(|secondary| {
            secondary.lost_for_ms.is_none()
                && &secondary.executor_id != owner
                && holders.contains(&secondary.executor_id)
        });
        if !held {
            return Err(format!(
                "shard {} has no secondary on a running executor",
                shard.shard
            ));
        }
    }
    Ok(())
}

/// The secondaries `shards` show held (not lost) by an executor other than the shard's primary.
fn given_secondaries(shards: &[ShardView]) -> GivenSecondaries {
    let mut given = GivenSecondaries::new();
    for shard in shards {
        let Some(owner) = &shard.owner else {
            continue;
        };
        for secondary in &shard.secondaries {
            if secondary.lost_for_ms.is_none() && &secondary.executor_id != owner {
                given.insert(
                    (secondary.executor_id.clone(), shard.shard, shard.epoch),
                    owner.clone(),
                );
            }
        }
    }
    given
}

/// The `(shard, epoch)` of every secondary `shards` show `executor_id` holding (not lost): what
/// its set lists among its secondaries once the managers' last push reached it.
fn secondaries_of(shards: &[ShardView], executor_id: &str) -> BTreeSet<(u32, u64)> {
    shards
        .iter()
        .filter(|shard| {
            shard
                .secondaries
                .iter()
                .any(|s| s.executor_id == executor_id && s.lost_for_ms.is_none())
        })
        .map(|shard| (shard.shard, shard.epoch))
        .collect()
}

/// The renewal body's `ready` judged against `secondaries`, the executor's: how many it names
/// when each is among them at its epoch (none when `ready` is absent: saying readiness is the
/// executor's choice), else what it named that it does not hold so.
fn judge_ready(body: &[u8], secondaries: &BTreeSet<(u32, u64)>) -> Result<usize, String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Err(format!(
            "a renewal that is not JSON: {}",
            String::from_utf8_lossy(body)
        ));
    };
    if value.get("ready").is_none() {
        return Ok(0);
    }
    let Some(ready) = listed_set(&value, "ready", "ready_runs") else {
        return Err(format!(
            "a ready that is not [{{shard, epoch}}]: {}",
            value["ready"]
        ));
    };
    let outside: BTreeSet<(u32, u64)> = ready.difference(secondaries).copied().collect();
    if outside.is_empty() {
        Ok(ready.len())
    } else {
        Err(format!(
            "ready {} against its secondaries {}",
            show_set(&outside),
            show_set(secondaries)
        ))
    }
}

/// The primary's intervals in `intervals` at a `(shard, epoch)` `given` holds as its executor's
/// secondary, each with the shard's primary at that epoch.
fn admitted_as_primary<'a>(
    given: &'a GivenSecondaries,
    intervals: &'a [AdmissionInterval],
) -> impl Iterator<Item = (&'a AdmissionInterval, &'a String)> {
    intervals.iter().filter_map(move |interval| {
        if !interval.role.is_primary() {
            return None;
        }
        let key = (interval.executor_id.clone(), interval.shard, interval.epoch);
        given.get(&key).map(|primary| (interval, primary))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::wire::{HandoffView, Role, SecondaryView};

    fn shard(shard: u32, owner: &str, epoch: u64, secondaries: &[&str]) -> ShardView {
        ShardView {
            shard,
            owner: Some(owner.to_owned()),
            epoch,
            handoff: None,
            load: None,
            hot: false,
            pinned_to: None,
            secondaries: secondaries
                .iter()
                .map(|id| SecondaryView {
                    executor_id: (*id).to_owned(),
                    ready: true,
                    lost_for_ms: None,
                })
                .collect(),
        }
    }

    fn ids(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn all_shards(make: impl Fn(u32) -> ShardView) -> Vec<ShardView> {
        (0..KIT_SHARDS).map(make).collect()
    }

    #[test]
    fn p19_placed_needs_every_primary_on_an_owner_and_a_live_secondary_on_another_holder() {
        let holders = ids(&["ex-1", "ex-2", "ex-3"]);
        let owners = ids(&["ex-2", "ex-3"]);
        let good = all_shards(|s| shard(s, "ex-2", 4, &["ex-1"]));
        assert_eq!(placed(&good, &owners, &holders), Ok(()));
        // A primary still on the drained executor.
        let on_drained =
            all_shards(|s| shard(s, if s == 3 { "ex-1" } else { "ex-2" }, 4, &["ex-3"]));
        assert!(placed(&on_drained, &owners, &holders)
            .unwrap_err()
            .contains("shard 3's primary"));
        // No secondary yet, one lost, and one on an executor that is not running.
        let bare = all_shards(|s| shard(s, "ex-2", 4, &[]));
        assert!(placed(&bare, &owners, &holders).is_err());
        let mut lost = good.clone();
        lost[5].secondaries[0].lost_for_ms = Some(10);
        assert!(placed(&lost, &owners, &holders)
            .unwrap_err()
            .contains("shard 5"));
        let elsewhere = all_shards(|s| shard(s, "ex-2", 4, &["ex-9"]));
        assert!(placed(&elsewhere, &owners, &holders).is_err());
        let mut moving = good.clone();
        moving[7].handoff = Some(HandoffView {
            to: Some("ex-3".into()),
            revoke_revision: 1,
            completes_by_expiry_in_ms: 0,
        });
        assert!(placed(&moving, &owners, &holders)
            .unwrap_err()
            .contains("handoff"));
        assert!(placed(&good[..3], &owners, &holders).is_err());
    }

    #[test]
    fn p19_5_a_primary_interval_at_a_given_secondary_is_found_and_a_secondary_one_is_not() {
        let views = vec![
            shard(0, "ex-1", 4, &["ex-2"]),
            shard(1, "ex-2", 6, &["ex-1"]),
        ];
        let given = given_secondaries(&views);
        assert_eq!(
            given.get(&("ex-2".to_owned(), 0, 4)),
            Some(&"ex-1".to_owned())
        );
        assert_eq!(secondaries_of(&views, "ex-1"), BTreeSet::from([(1, 6)]));
        let interval = |executor: &str, shard, epoch, role| AdmissionInterval {
            generation: 0,
            shard_count: None,
            executor_id: executor.to_owned(),
            shard,
            epoch,
            role,
            start_ns: 10,
            end_ns: None,
        };
        let intervals = vec![
            // Right: the secondary's own lines, and the primary's.
            interval("ex-2", 0, 4, Role::Secondary),
            interval("ex-1", 0, 4, Role::Primary),
            // Promoted later at a new epoch: its own primary interval.
            interval("ex-2", 0, 5, Role::Primary),
            // Wrong: the secondary of shard 1 admitted as the primary at its primary's epoch.
            interval("ex-1", 1, 6, Role::Primary),
        ];
        let found: Vec<(u32, u64, String)> = admitted_as_primary(&given, &intervals)
            .map(|(interval, primary)| (interval.shard, interval.epoch, primary.clone()))
            .collect();
        assert_eq!(found, vec![(1, 6, "ex-2".to_owned())]);
    }

    #[test]
    fn p19_3_ready_is_judged_against_the_secondaries_at_their_epochs() {
        let held = BTreeSet::from([(3, 7), (5, 2)]);
        let renewal = |ready: &str| format!(r#"{{"claims":[],"revision":9{ready}}}"#);
        assert_eq!(judge_ready(renewal("").as_bytes(), &held), Ok(0));
        assert_eq!(
            judge_ready(
                renewal(r#","ready":[{"shard":3,"epoch":7},{"shard":5,"epoch":2}]"#).as_bytes(),
                &held
            ),
            Ok(2)
        );
        assert_eq!(
            judge_ready(
                renewal(r#","ready":[{"shard":3,"epoch":7}]"#).as_bytes(),
                &held
            ),
            Ok(1)
        );
        // At an epoch its set no longer shows, and a shard it holds in no role as a secondary.
        let stale = judge_ready(
            renewal(r#","ready":[{"shard":3,"epoch":6}]"#).as_bytes(),
            &held,
        );
        assert!(stale.unwrap_err().contains("ready 3@6"));
        let primary = judge_ready(
            renewal(r#","ready":[{"shard":4,"epoch":1}]"#).as_bytes(),
            &held,
        );
        assert!(primary.unwrap_err().contains("ready 4@1"));
        assert!(judge_ready(renewal(r#","ready":7"#).as_bytes(), &held).is_err());
        assert!(judge_ready(b"not json", &held).is_err());
    }
}
