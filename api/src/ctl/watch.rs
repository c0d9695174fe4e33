//! `leaseholdctl watch`: the changes between two successive states, as events.
//!
//! The manager answers a blocking query (`GET /v1/watch?revision=N`) with the whole state once
//! it moved past `N`; the events are derived here by comparing it with the previous one. Lease
//! renewals move the revision too but are not events: only membership, drains and ownership are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::table::{printable, NONE};
use crate::wire::{DepartedExecutor, DepartureReason, ExecutorView, ShardView, StateView};

/// One change, stamped with the revision of the state it was first seen in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    ExecutorRegistered {
        revision: u64,
        executor_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        address: String,
    },
    /// Gone from the state; `reason` is `None` when the manager no longer remembers why.
    ExecutorDeparted {
        revision: u64,
        executor_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<DepartureReason>,
    },
    DrainChanged {
        revision: u64,
        executor_id: String,
        draining: bool,
    },
    /// A new owner (or none) at a new epoch.
    ShardMoved {
        revision: u64,
        shard: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
        epoch: u64,
    },
    /// The owner was asked to release the shard for `to` (P5.2); `ShardMoved` follows.
    HandoffStarted {
        revision: u64,
        shard: u32,
        from: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    },
    /// A pending handoff now goes to another target.
    HandoffRetargeted {
        revision: u64,
        shard: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    },
    /// A pending handoff was called off; the owner keeps the shard at the same epoch.
    HandoffCancelled {
        revision: u64,
        shard: u32,
        owner: String,
    },
}

fn or_none(value: Option<&str>) -> &str {
    value.unwrap_or(NONE)
}

impl WatchEvent {
    /// One line for people: `rev 42  shard 7 moved ex-3 -> ex-9 (epoch 4)`.
    pub fn to_line(&self) -> String {
        let (revision, text) = match self {
            WatchEvent::ExecutorRegistered {
                revision,
                executor_id,
                name,
                address,
            } => (
                revision,
                format!(
                    "executor {executor_id} registered (name {}, address {address})",
                    or_none(name.as_deref())
                ),
            ),
            WatchEvent::ExecutorDeparted {
                revision,
                executor_id,
                reason,
            } => (
                revision,
                match reason {
                    Some(DepartureReason::Reaped) => {
                        format!("executor {executor_id} expired (lease lapsed, reaped)")
                    }
                    Some(DepartureReason::Deregistered) => {
                        format!("executor {executor_id} deregistered")
                    }
                    None => format!("executor {executor_id} removed"),
                },
            ),
            WatchEvent::DrainChanged {
                revision,
                executor_id,
                draining,
            } => (
                revision,
                if *draining {
                    format!("executor {executor_id} draining")
                } else {
                    format!("executor {executor_id} drain cancelled")
                },
            ),
            WatchEvent::ShardMoved {
                revision,
                shard,
                from,
                to,
                epoch,
            } => (
                revision,
                format!(
                    "shard {shard} moved {} -> {} (epoch {epoch})",
                    or_none(from.as_deref()),
                    or_none(to.as_deref())
                ),
            ),
            WatchEvent::HandoffStarted {
                revision,
                shard,
                from,
                to,
            } => (
                revision,
                format!(
                    "shard {shard} releasing {from} -> {}",
                    or_none(to.as_deref())
                ),
            ),
            WatchEvent::HandoffRetargeted {
                revision,
                shard,
                to,
            } => (
                revision,
                format!(
                    "shard {shard} handoff retargeted to {}",
                    or_none(to.as_deref())
                ),
            ),
            WatchEvent::HandoffCancelled {
                revision,
                shard,
                owner,
            } => (
                revision,
                format!("shard {shard} handoff cancelled, stays with {owner}"),
            ),
        };
        format!("rev {revision}  {}", printable(&text))
    }
}

fn by_id(state: &StateView) -> BTreeMap<&str, &ExecutorView> {
    state
        .executors
        .iter()
        .map(|executor| (executor.executor_id.as_str(), executor))
        .collect()
}

/// The events that turn `before` into `after`, in a stable order: executors that joined, drain
/// changes, shards (ascending), executors that left.
pub fn diff(
    before: &StateView,
    after: &StateView,
    departed: &[DepartedExecutor],
) -> Vec<WatchEvent> {
    let revision = after.revision;
    let old = by_id(before);
    let new = by_id(after);
    let mut events = Vec::new();
    for (id, executor) in &new {
        match old.get(id) {
            None => events.push(WatchEvent::ExecutorRegistered {
                revision,
                executor_id: (*id).to_owned(),
                name: executor.name.clone(),
                address: executor.address.clone(),
            }),
            Some(previous) if previous.draining != executor.draining => {
                events.push(WatchEvent::DrainChanged {
                    revision,
                    executor_id: (*id).to_owned(),
                    draining: executor.draining,
                })
            }
            Some(_) => {}
        }
    }
    let old_shards: BTreeMap<u32, &ShardView> = before
        .shards
        .iter()
        .map(|shard| (shard.shard, shard))
        .collect();
    for shard in &after.shards {
        let Some(previous) = old_shards.get(&shard.shard) else {
            continue;
        };
        events.extend(shard_change(revision, previous, shard));
    }
    for id in old.keys().filter(|id| !new.contains_key(*id)) {
        events.push(WatchEvent::ExecutorDeparted {
            revision,
            executor_id: (*id).to_owned(),
            reason: departed
                .iter()
                .find(|d| d.executor_id == *id)
                .map(|d| d.reason),
        });
    }
    events
}

fn shard_change(revision: u64, before: &ShardView, after: &ShardView) -> Option<WatchEvent> {
    let shard = after.shard;
    if before.owner != after.owner || before.epoch != after.epoch {
        return Some(WatchEvent::ShardMoved {
            revision,
            shard,
            from: before.owner.clone(),
            to: after.owner.clone(),
            epoch: after.epoch,
        });
    }
    let target = |view: &ShardView| view.handoff.as_ref().map(|h| h.to.clone());
    match (target(before), target(after), &after.owner) {
        (None, Some(to), Some(owner)) => Some(WatchEvent::HandoffStarted {
            revision,
            shard,
            from: owner.clone(),
            to,
        }),
        (Some(_), None, Some(owner)) => Some(WatchEvent::HandoffCancelled {
            revision,
            shard,
            owner: owner.clone(),
        }),
        (Some(old_to), Some(new_to), _) if old_to != new_to => {
            Some(WatchEvent::HandoffRetargeted {
                revision,
                shard,
                to: new_to,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{HandoffView, ShardEpoch};

    fn executor(id: &str, draining: bool) -> ExecutorView {
        ExecutorView {
            namespace: crate::wire::DEFAULT_NAMESPACE.into(),
            executor_id: id.into(),
            incarnation: format!("inc-{id}"),
            name: Some(format!("name-{id}")),
            address: format!("http://{id}.test"),
            lease_remaining_ms: 1_000,
            registered_revision: 1,
            shards: vec![ShardEpoch { shard: 0, epoch: 1 }],
            draining,
            capacity: crate::wire::DEFAULT_CAPACITY,
            load: None,
            utilisation: None,
            app_version: None,
            labels: Default::default(),
        }
    }

    fn shard(id: u32, owner: Option<&str>, epoch: u64, to: Option<Option<&str>>) -> ShardView {
        ShardView {
            shard: id,
            owner: owner.map(str::to_owned),
            epoch,
            handoff: to.map(|to| HandoffView {
                to: to.map(str::to_owned),
                revoke_revision: 5,
                completes_by_expiry_in_ms: 100,
            }),
            load: None,
            hot: false,
            pinned_to: None,
            secondaries: Vec::new(),
        }
    }

    fn state(revision: u64, executors: Vec<ExecutorView>, shards: Vec<ShardView>) -> StateView {
        StateView {
            generation: 0,
            revision,
            shard_count: shards.len() as u32,
            lease_duration_ms: 4_000,
            executors,
            shards,
            maintenance: false,
            lease_remaining_is_bound: false,
        }
    }

    #[test]
    fn a_renewal_alone_is_no_event() {
        let before = state(
            5,
            vec![executor("ex-1", false)],
            vec![shard(0, Some("ex-1"), 1, None)],
        );
        let mut after = before.clone();
        after.revision = 9;
        after.executors[0].lease_remaining_ms = 4_000;
        assert_eq!(diff(&before, &after, &[]), vec![]);
    }

    #[test]
    fn every_kind_of_change_is_reported_in_a_stable_order() {
        let before = state(
            5,
            vec![
                executor("ex-1", false),
                executor("ex-2", false),
                executor("ex-3", false),
            ],
            vec![
                shard(0, Some("ex-1"), 1, None),
                shard(1, Some("ex-1"), 1, None),
                shard(2, Some("ex-2"), 3, Some(Some("ex-1"))),
                shard(3, Some("ex-2"), 1, Some(Some("ex-1"))),
                shard(4, Some("ex-3"), 2, None),
            ],
        );
        let after = state(
            9,
            vec![
                executor("ex-1", true),
                executor("ex-2", false),
                executor("ex-9", false),
            ],
            vec![
                shard(0, Some("ex-1"), 1, Some(Some("ex-2"))),
                shard(1, Some("ex-2"), 2, None),
                shard(2, Some("ex-2"), 3, None),
                shard(3, Some("ex-2"), 1, Some(Some("ex-9"))),
                shard(4, None, 2, None),
            ],
        );
        let departed = [DepartedExecutor {
            executor_id: "ex-3".into(),
            incarnation: "inc-ex-3".into(),
            reason: DepartureReason::Reaped,
            removed_revision: 8,
        }];
        let lines: Vec<String> = diff(&before, &after, &departed)
            .iter()
            .map(WatchEvent::to_line)
            .collect();
        assert_eq!(
            lines,
            vec![
                "rev 9  executor ex-1 draining",
                "rev 9  executor ex-9 registered (name name-ex-9, address http://ex-9.test)",
                "rev 9  shard 0 releasing ex-1 -> ex-2",
                "rev 9  shard 1 moved ex-1 -> ex-2 (epoch 2)",
                "rev 9  shard 2 handoff cancelled, stays with ex-2",
                "rev 9  shard 3 handoff retargeted to ex-9",
                "rev 9  shard 4 moved ex-3 -> - (epoch 2)",
                "rev 9  executor ex-3 expired (lease lapsed, reaped)",
            ]
        );
    }

    #[test]
    fn events_serialise_as_tagged_json_lines() {
        let event = WatchEvent::ShardMoved {
            revision: 9,
            shard: 1,
            from: Some("ex-1".into()),
            to: None,
            epoch: 2,
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"event":"shard_moved","revision":9,"shard":1,"from":"ex-1","epoch":2}"#
        );
        let departed = WatchEvent::ExecutorDeparted {
            revision: 3,
            executor_id: "ex-2".into(),
            reason: Some(DepartureReason::Deregistered),
        };
        assert_eq!(
            serde_json::to_string(&departed).unwrap(),
            r#"{"event":"executor_departed","revision":3,"executor_id":"ex-2","reason":"deregistered"}"#
        );
        assert_eq!(
            WatchEvent::ExecutorDeparted {
                revision: 3,
                executor_id: "ex-2".into(),
                reason: None
            }
            .to_line(),
            "rev 3  executor ex-2 removed"
        );
    }

    /// Issue 55, finding 10: a name with a right-to-left mark or a line separator in it does not
    /// reach the terminal as it is.
    #[test]
    fn lines_escape_what_executors_chose() {
        let registered = WatchEvent::ExecutorRegistered {
            revision: 4,
            executor_id: "ex-1\u{200b}".into(),
            name: Some("api\u{200f}\u{2028}rev 5  executor ex-2 drained".into()),
            address: "http://h\u{feff}:1".into(),
        };
        assert_eq!(
            registered.to_line(),
            r"rev 4  executor ex-1\u{200b} registered (name api\u{200f}\u{2028}rev 5  executor ex-2 drained, address http://h\u{feff}:1)"
        );
    }
}
