//! What the scenarios with replicas share (PROTOCOL §19, B11 with `--replicas`, B13): giving
//! the default namespace its replicas, and waiting until every shard has its warm copies.

use std::collections::BTreeSet;

use leasehold_api::wire::{SetNamespaceRequest, ShardView, DEFAULT_NAMESPACE};

use super::*;

/// How long a fresh cluster may take to reach the cluster version that allows replicas: the
/// leader raises it within a probe round or two of formation.
const VERSION_BOUND: Duration = Duration::from_secs(60);

/// Gives the default namespace `replicas` replicas per shard and `restore_delay_ms` (`None`: the
/// default, two leases), once the cluster's version allows it (schema 13, P14.2).
pub(crate) async fn replicate(
    admin: &Client,
    replicas: u32,
    restore_delay_ms: Option<u64>,
) -> Result<()> {
    let request = SetNamespaceRequest {
        replicas: Some(replicas),
        replica_restore_delay_ms: restore_delay_ms.map(Some),
        ..SetNamespaceRequest::default()
    };
    poll_every(
        "the default namespace to take its replicas",
        VERSION_BOUND,
        POLL_INTERVAL,
        || async {
            admin
                .set_namespace(DEFAULT_NAMESPACE, &request)
                .await
                .map(drop)
                .map_err(|error| error.to_string())
        },
    )
    .await?;
    Ok(())
}

/// What [`wait_warm`] waits for of each shard's secondaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warmth {
    /// `replicas - 1` ready secondaries on running executors, none lost.
    Complete,
    /// No secondary still warming: those held are ready, those lost wait out the restore delay
    /// (P19.4; after an executor left for good under a name no one takes again).
    NoneWarming,
}

/// The default namespace's shards as the leader has them.
pub(crate) async fn shard_views(admin: &Client) -> Result<Vec<ShardView>, String> {
    admin
        .shards_in(DEFAULT_NAMESPACE, true)
        .await
        .map_err(|error| format!("the shards: {error}"))
}

/// The ids of the executors registered at `addresses`.
pub(crate) async fn ids_at(
    cluster: &ManagerCluster,
    leader: u64,
    addresses: &BTreeSet<String>,
) -> Result<BTreeSet<String>, String> {
    Ok(executors_view(cluster, leader)
        .await?
        .into_iter()
        .filter(|executor| addresses.contains(&executor.address))
        .map(|executor| executor.executor_id)
        .collect())
}

/// Whether `shard` has a live primary among `live`, no handoff, and secondaries as `warmth` asks.
pub(crate) fn warm(
    shard: &ShardView,
    live: &BTreeSet<String>,
    replicas: u32,
    warmth: Warmth,
) -> bool {
    let served = shard
        .owner
        .as_ref()
        .is_some_and(|owner| live.contains(owner))
        && shard.handoff.is_none();
    let held = shard
        .secondaries
        .iter()
        .filter(|secondary| secondary.lost_for_ms.is_none());
    let ready = held
        .clone()
        .filter(|secondary| secondary.ready && live.contains(&secondary.executor_id))
        .count();
    let warming = held.count() - ready;
    let wanted = replicas.saturating_sub(1) as usize;
    served
        && match warmth {
            Warmth::Complete => ready == wanted && shard.secondaries.len() == wanted,
            Warmth::NoneWarming => warming == 0,
        }
}

/// Waits until every shard of the default namespace is [`warm`] over the executors at
/// `addresses`.
pub(crate) async fn wait_warm(
    cluster: &ManagerCluster,
    leader: u64,
    admin: &Client,
    addresses: &BTreeSet<String>,
    replicas: u32,
    warmth: Warmth,
) -> Result<()> {
    poll_every(
        "every shard with its ready secondaries",
        SETTLE_BOUND,
        POLL_INTERVAL,
        || async {
            let live = ids_at(cluster, leader, addresses).await?;
            let shards = shard_views(admin).await?;
            match shards
                .iter()
                .find(|shard| !warm(shard, &live, replicas, warmth))
            {
                None => Ok(()),
                Some(cold) => Err(format!("not warm yet: {cold:?}")),
            }
        },
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use leasehold_api::wire::SecondaryView;

    use super::*;

    fn shard(owner: &str, secondaries: &[(&str, bool, Option<u64>)]) -> ShardView {
        ShardView {
            shard: 0,
            owner: Some(owner.to_owned()),
            epoch: 1,
            handoff: None,
            load: None,
            hot: false,
            pinned_to: None,
            secondaries: secondaries
                .iter()
                .map(|(executor, ready, lost_for_ms)| SecondaryView {
                    executor_id: (*executor).to_owned(),
                    ready: *ready,
                    lost_for_ms: *lost_for_ms,
                })
                .collect(),
        }
    }

    /// P19.3, P19.4: complete is one ready secondary per extra replica on a live executor;
    /// none warming lets a lost one wait out its delay but not one still warming.
    #[test]
    fn warmth_is_read_from_the_secondaries() {
        let live: BTreeSet<String> = ["a", "b", "c"].map(str::to_owned).into();
        let ready = shard("a", &[("b", true, None)]);
        assert!(warm(&ready, &live, 2, Warmth::Complete));
        let warming = shard("a", &[("b", false, None)]);
        assert!(!warm(&warming, &live, 2, Warmth::Complete));
        assert!(!warm(&warming, &live, 2, Warmth::NoneWarming));
        let lost = shard("a", &[("d", false, Some(10))]);
        assert!(!warm(&lost, &live, 2, Warmth::Complete));
        assert!(warm(&lost, &live, 2, Warmth::NoneWarming));
        let gone_owner = shard("d", &[("b", true, None)]);
        assert!(!warm(&gone_owner, &live, 2, Warmth::NoneWarming));
    }
}
