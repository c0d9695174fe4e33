//! What the service beside a sidecar may be admitting (PROTOCOL P16.1, P16.2), as the sidecar
//! knows it: a pure core, with time and tokens passed in.
//!
//! Whoever receives an answer (or an admit permit) may admit its shards from then until it has
//! applied a later answer without them or the copy it was given runs out on its own clock. The
//! sidecar never sees anything applied; it sees only acknowledgements and its own clock. So each
//! shard keeps one *hold* per recipient that may still admit it, and stays *told* while any hold
//! remains. A hold ends at the first of:
//! - an acknowledgement, by the same recipient, of the answer that dropped the shard or of one
//!   given to it later; and
//! - the end of the copy last given to that recipient for it (`until`): a poller anchors its copy
//!   at its own send instant, which is no later than the sidecar's answer, so the copy ends no
//!   later than the answer's instant plus the `lease_ttl_ms` it carried.
//!
//! Recipients are told apart by tokens (P16.1): every answer to a poll carries a fresh random
//! token, and a poll that echoes one, with the `applied=` revision and `state=` of the answer it
//! came with, acknowledges that answer and continues its recipient's *chain*. A token is known
//! only to whoever received its answer, so one poller's acknowledgement never ends another's
//! hold: a poll without a token, or with one this sidecar does not know, starts a chain of its
//! own. The last [`RECENT_ANSWERS`] answers' tokens are kept; a chain none of whose tokens is
//! kept any more can never be acknowledged, so its holds join the one that only time ends.
//! Admit permits, which are never acknowledged, are held there too; answers pushed to
//! `--app-url` have a hold of their own, which the push's `2xx` acknowledges.
//!
//! Each start and stop is an [`AdmissionEvent`], the sidecar's admission log (§9) of the
//! service: a start when a shard is first told at an epoch, stamped at the answer (no later than
//! the service began), a stop when its last hold ended, stamped at that end (the
//! acknowledgement, or the copy's `until`: no earlier than admission ended).
//!
//! Layouts (PROTOCOL §20): the service maps keys by the shard count of the answer it applied,
//! so what it may admit is numbered in that answer's layout. Each told shard keeps the layout it
//! was told in, and an answer in a newer layout drops every shard of an older one for its
//! recipient (the answer does not list it), which the recipient's acknowledgement ends as any
//! drop. Until then a parent told before a split holds the keys of both its children, and the
//! questions asked of the copy (what a renewal claims, whether a revoke's shard is released) are
//! asked in the sidecar's own layout: a shard of it is told while a told shard of any layout
//! shares a key with it.
//!
//! Secondaries (PROTOCOL §19): answers list the sidecar's secondaries, which admit nothing, and
//! an admit permit asked for as a secondary (`role=secondary`) is held apart from the primary's
//! shards, by time only, and logged with its role. Nothing of the primary's handoff waits for it
//! (a revoke, a renewal's claims, the graceful stop: the managers hand a primary on, never a
//! secondary's reads), and a permit is never longer than the lease (P19.1).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use leasehold_api::wire::{LocalPermits, LocalSecondary, LocalState, Role, ShardEpoch};
use tokio::time::Instant;

use crate::admission::{AdmissionChange, AdmissionEvent, AdmissionReason, Assignment};
use crate::assignment::Layout;

/// How many answers' tokens are kept for their acknowledgements (P16.1). A service polls one
/// request at a time and echoes the token of the answer it applied on its very next poll, so
/// only other pollers' answers in between can push its token out, and answers to polls that
/// acknowledged nothing go first; a token pushed out is not an acknowledgement, and the poll
/// carrying it is answered at once with a new token.
pub const RECENT_ANSWERS: usize = 64;

/// An answer the service was given, as its acknowledgement names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The answer's `revision`.
    pub revision: u64,
    /// The answer's `state`.
    pub state: LocalState,
}

/// A poll's acknowledgement: `applied=`, `state=` and `token=` of the answer its poller applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// `applied=` and `state=`.
    pub answered: Answered,
    /// `token=`, parsed.
    pub token: u128,
}

/// A recipient's chain of answers: whoever holds the token of one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Chain(u64);

/// Why an acknowledgement counted for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotAcknowledged {
    /// The token is not that of any of the last [`RECENT_ANSWERS`] answers.
    #[error(
        "the token names no answer this sidecar gave among its last {RECENT_ANSWERS} (never \
         given, or too old)"
    )]
    UnknownToken,
    /// The token is an answer's, but `applied=` or `state=` is not that answer's.
    #[error("applied= and state= are not those of the answer the token came with")]
    Mismatched,
}

/// Whose hold a shard's is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Holder {
    /// A poller's chain, while one of its tokens is kept.
    Chain(Chain),
    /// The service pushed to at `--app-url`.
    Pushed,
    /// Ended only by time: admit permits, and chains that can no longer be acknowledged.
    Anyone,
}

/// One recipient's hold on a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    /// The copy (or permit) given to this recipient ends no later than this.
    until: Instant,
    /// The first answer to this recipient without the shard since it was last given, by its
    /// number: acknowledging it (or a later answer to the same recipient) ends the hold.
    dropped_by: Option<(u64, LocalState)>,
}

/// Where a told shard is numbered: the generation of the layout it was told in, and its number
/// there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ToldAt {
    generation: u64,
    shard: u32,
}

/// One shard the service may be admitting.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Told {
    executor_id: String,
    epoch: u64,
    /// The layout the shard was told in: the keys it covers (§20).
    layout: Layout,
    /// The role it was told in: a primary's shards and a secondary's permits are told apart.
    role: Role,
    holds: BTreeMap<Holder, Hold>,
    /// The latest end of a hold already ended: the stop is stamped no earlier.
    ended: Option<Instant>,
}

/// An answer whose token may still be echoed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Given {
    token: u128,
    number: u64,
    chain: Chain,
    answered: Answered,
    /// When the copy this answer gave its poller runs out, counted from the poll's arrival: the
    /// poller counts it from its send, which is no later (P16.1), so this is the end as near as
    /// the sidecar can see it. `None` when the answer gave no lease. A long poll is answered by
    /// half the time left on it ([`ServiceCopy::poller_copy_end`]).
    copy_end: Option<Instant>,
    /// Given to a poll whose acknowledgement counted: kept before the answers to polls that
    /// acknowledged nothing (first polls, and requests that are not the service's).
    continued: bool,
}

/// What the service beside the sidecar was told, and what it acknowledged.
#[derive(Debug, Clone, Default)]
pub struct ServiceCopy {
    /// The primary's shards: what revokes, renewal claims and the graceful stop wait for.
    told: BTreeMap<ToldAt, Told>,
    /// Secondary permits (P19.5), ended by time only.
    told_secondary: BTreeMap<ToldAt, Told>,
    /// The last [`RECENT_ANSWERS`] answers to polls, oldest first.
    recent: VecDeque<Given>,
    /// Answers given so far (pushes included): each answer's number is the count before it.
    answers: u64,
}

/// The state the service is told for the sidecar's `view` at `now`.
pub fn local_state(view: &Assignment, now: Instant) -> LocalState {
    if view.stopping {
        LocalState::Stopping
    } else if view.executor_id.is_none() {
        LocalState::Registering
    } else if view.admission == crate::AdmissionState::Admitting
        && !view.lease_remaining(now).is_zero()
    {
        LocalState::Admitting
    } else {
        LocalState::Fenced
    }
}

/// The answer the service is given for `view` at `now`, as its acknowledgement names it.
pub fn answered(view: &Assignment, now: Instant) -> Answered {
    Answered {
        revision: view.revision,
        state: local_state(view, now),
    }
}

/// Whole milliseconds, rounded down: the service's copy must not outlast the sidecar's.
fn floor_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Why a told shard stopped, from the state of the answer that dropped it.
fn stop_reason(state: LocalState) -> AdmissionReason {
    match state {
        LocalState::Admitting => AdmissionReason::Unassigned,
        LocalState::Fenced => AdmissionReason::LeaseLapsed,
        LocalState::Registering => AdmissionReason::UnknownExecutor,
        LocalState::Stopping => AdmissionReason::Shutdown,
    }
}

/// Who an answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipient {
    /// A poll, with its new token, continuing the chain its acknowledgement named (if it counted).
    Poller {
        /// The token the answer carries.
        token: u128,
        /// The chain of the answer the poll acknowledged; `None` starts a new one.
        chain: Option<Chain>,
        /// When the poll arrived: no earlier than its send, where the poller anchors the copy.
        arrived: Instant,
    },
    /// The service pushed to at `--app-url`.
    Pushed,
}

/// A pushed answer, as its `2xx` acknowledges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushedAnswer(u64);

impl ServiceCopy {
    /// The answer for the sidecar's `view` at `now` to `to`, and the admission starts (and
    /// stops, for a shard told at another epoch) it makes. A poller's answer carries its token.
    pub fn answer(
        &mut self,
        view: &Assignment,
        now: Instant,
        to: Recipient,
    ) -> (LocalPermits, PushedAnswer, Vec<AdmissionEvent>) {
        let state = local_state(view, now);
        let admitting = state == LocalState::Admitting;
        let lease_ttl_ms = if admitting {
            floor_ms(view.lease_remaining(now))
        } else {
            0
        };
        let shards: Vec<ShardEpoch> = if admitting {
            view.shards.clone()
        } else {
            Vec::new()
        };
        let number = self.answers;
        self.answers += 1;
        let answered = Answered {
            revision: view.revision,
            state,
        };
        let (holder, token) = self.holder_of(to, number, answered, lease_ttl_ms, now);
        let until = now + Duration::from_millis(lease_ttl_ms);
        let mut events = Vec::new();
        let executor_id = view.executor_id.clone().unwrap_or_default();
        let layout = view.layout();
        for held in &shards {
            let told_as = Telling {
                holder,
                role: Role::Primary,
                executor_id: &executor_id,
                layout,
            };
            self.tell(told_as, held.shard, held.epoch, until, now, &mut events);
        }
        self.mark_dropped(holder, layout.generation, &shards, number, state);
        let permits = LocalPermits {
            revision: view.revision,
            state,
            lease_ttl_ms,
            // The shell converts the copy's end to CLOCK_MONOTONIC (`ServiceLink::answer`).
            lease_expires_monotonic_ns: None,
            shard_count: view.shard_count,
            generation: view.generation,
            executor_id: view.executor_id.clone(),
            shards,
            // The shell adds what the service is asked to prepare (`ServiceLink::answer`).
            preparing: Vec::new(),
            secondaries: if state == LocalState::Stopping {
                Vec::new()
            } else {
                view.secondaries
                    .iter()
                    .map(|secondary| LocalSecondary {
                        shard: secondary.shard,
                        epoch: secondary.epoch,
                        ready: secondary.ready,
                    })
                    .collect()
            },
            token,
        };
        (permits, PushedAnswer(number), events)
    }

    /// Whose hold answer `number` makes, and the token it carries (a poller's answer is
    /// remembered, continuing its chain or starting one).
    fn holder_of(
        &mut self,
        to: Recipient,
        number: u64,
        answered: Answered,
        lease_ttl_ms: u64,
        now: Instant,
    ) -> (Holder, Option<String>) {
        match to {
            Recipient::Poller {
                token,
                chain,
                arrived,
            } => {
                self.remember(Given {
                    token,
                    number,
                    chain: chain.unwrap_or(Chain(number)),
                    answered,
                    copy_end: (lease_ttl_ms > 0)
                        .then(|| arrived.min(now) + Duration::from_millis(lease_ttl_ms)),
                    continued: chain.is_some(),
                });
                let chain = chain.unwrap_or(Chain(number));
                (Holder::Chain(chain), Some(format!("{token:032x}")))
            }
            Recipient::Pushed => (Holder::Pushed, None),
        }
    }

    /// Marks `holder`'s hold of every told shard not among `shards` (of the layout of
    /// `generation`) as dropped by answer `number` (in `state`), unless an earlier answer already
    /// dropped it. A shard of another layout is never among them.
    fn mark_dropped(
        &mut self,
        holder: Holder,
        generation: u64,
        shards: &[ShardEpoch],
        number: u64,
        state: LocalState,
    ) {
        for (at, told) in &mut self.told {
            let given = at.generation == generation
                && shards
                    .binary_search_by_key(&at.shard, |held| held.shard)
                    .is_ok();
            if given {
                continue;
            }
            if let Some(hold) = told.holds.get_mut(&holder) {
                if hold.dropped_by.is_none() {
                    hold.dropped_by = Some((number, state));
                }
            }
        }
    }

    /// Keeps `given`'s token, and past the bound forgets the oldest answer (but `given`) to a
    /// poll that acknowledged nothing, or else the oldest: a chain none of whose tokens is kept can no
    /// longer be acknowledged, so its holds are left to time.
    fn remember(&mut self, given: Given) {
        self.recent.push_back(given);
        while self.recent.len() > RECENT_ANSWERS {
            // Never the answer just given, which its poller has not had a chance to echo.
            let oldest = self
                .recent
                .iter()
                .take(self.recent.len() - 1)
                .position(|given| !given.continued)
                .unwrap_or(0);
            let Some(forgotten) = self.recent.remove(oldest) else {
                break;
            };
            let chain = forgotten.chain;
            if self.recent.iter().any(|kept| kept.chain == chain) {
                continue;
            }
            for told in self.told.values_mut() {
                if let Some(hold) = told.holds.remove(&Holder::Chain(chain)) {
                    let anyone = told.holds.entry(Holder::Anyone).or_insert(Hold {
                        until: hold.until,
                        dropped_by: None,
                    });
                    anyone.until = anyone.until.max(hold.until);
                }
            }
        }
    }

    /// An admit permit for `shard` of `layout` at `epoch` in `role`, valid until `until`:
    /// whoever asked may start work for it until then. A permit is never acknowledged; only its
    /// end ends it.
    #[allow(clippy::too_many_arguments)]
    pub fn permit(
        &mut self,
        executor_id: &str,
        layout: Layout,
        shard: u32,
        epoch: u64,
        role: Role,
        until: Instant,
        now: Instant,
    ) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        let told_as = Telling {
            holder: Holder::Anyone,
            role,
            executor_id,
            layout,
        };
        self.tell(told_as, shard, epoch, until, now, &mut events);
        events
    }

    /// The shard is `told_as.holder`'s at `epoch`, in its role and layout, until at least
    /// `until`.
    fn tell(
        &mut self,
        told_as: Telling<'_>,
        shard: u32,
        epoch: u64,
        until: Instant,
        now: Instant,
        events: &mut Vec<AdmissionEvent>,
    ) {
        let Telling {
            holder,
            role,
            executor_id,
            layout,
        } = told_as;
        let fresh = Hold {
            until,
            dropped_by: None,
        };
        let all_told = match role {
            Role::Primary => &mut self.told,
            Role::Secondary => &mut self.told_secondary,
        };
        let at = ToldAt {
            generation: layout.generation,
            shard,
        };
        let mut holds = BTreeMap::new();
        if let Some(told) = all_told.get_mut(&at) {
            if told.epoch == epoch {
                let hold = told.holds.entry(holder).or_insert(fresh);
                hold.until = hold.until.max(until);
                hold.dropped_by = None;
                return;
            }
            // Told again at another epoch: the sidecar was given the shard anew (the same
            // executor at a new epoch, or a new registration), so the interval of the old epoch
            // ends here and the new one starts. The same keys stay this executor's: whoever else
            // was told the old epoch still holds them, now under the new interval.
            if let Some(old) = all_told.remove(&at) {
                events.push(event(
                    shard,
                    &old,
                    AdmissionChange::Stop,
                    now,
                    AdmissionReason::Unassigned,
                ));
                holds = old.holds;
            }
        }
        let hold = holds.entry(holder).or_insert(fresh);
        *hold = Hold {
            until: hold.until.max(until),
            dropped_by: None,
        };
        let told = Told {
            executor_id: executor_id.to_owned(),
            epoch,
            layout,
            role,
            holds,
            ended: None,
        };
        events.push(event(
            shard,
            &told,
            AdmissionChange::Start,
            now,
            AdmissionReason::Assigned,
        ));
        all_told.insert(at, told);
    }

    /// A poll's acknowledgement at `now`: when its token is that of a kept answer with the same
    /// revision and state, that answer's recipient stopped every shard that answer (or an
    /// earlier one to it) dropped. Answers the chain the poll continues, and the stops.
    pub fn acknowledge(
        &mut self,
        ack: Ack,
        now: Instant,
    ) -> Result<(Chain, Vec<AdmissionEvent>), NotAcknowledged> {
        let given = self
            .recent
            .iter()
            .find(|given| given.token == ack.token)
            .copied()
            .ok_or(NotAcknowledged::UnknownToken)?;
        if given.answered != ack.answered {
            return Err(NotAcknowledged::Mismatched);
        }
        let events = self.end_holds(Holder::Chain(given.chain), given.number, now);
        Ok((given.chain, events))
    }

    /// The service pushed to acknowledged `pushed` (its `2xx`) at `now`.
    pub fn acknowledge_push(&mut self, pushed: PushedAnswer, now: Instant) -> Vec<AdmissionEvent> {
        self.end_holds(Holder::Pushed, pushed.0, now)
    }

    /// Ends `holder`'s holds that an answer numbered `applied` or earlier dropped.
    fn end_holds(&mut self, holder: Holder, applied: u64, now: Instant) -> Vec<AdmissionEvent> {
        self.close(|holds| {
            let dropped = holds
                .get(&holder)
                .and_then(|hold| hold.dropped_by)
                .filter(|&(number, _)| number <= applied)?;
            holds.remove(&holder);
            Some((now, stop_reason(dropped.1)))
        })
    }

    /// Ends every hold whose copy ran out by `now`, stamped at its end.
    pub fn expire(&mut self, now: Instant) -> Vec<AdmissionEvent> {
        self.close(|holds| {
            let mut ended = None;
            holds.retain(|_, hold| {
                if hold.until <= now {
                    ended = ended.max(Some(hold.until));
                    false
                } else {
                    true
                }
            });
            ended.map(|at| (at, AdmissionReason::LeaseLapsed))
        })
    }

    /// The sidecar exits and tells the service nothing more: each shard still told ends when
    /// the last copy (or permit) given for it runs out, the latest the service may admit it,
    /// which is when its stop is stamped (no earlier than admission ended, however far ahead).
    pub fn end_at_exit(&mut self) -> Vec<AdmissionEvent> {
        self.close(|holds| {
            let last_end = holds.values().map(|hold| hold.until).max();
            holds.clear();
            last_end.map(|at| (at, AdmissionReason::LeaseLapsed))
        })
    }

    /// Runs `ends` on each shard's holds, in each role (it removes those that ended, and answers
    /// when and why the last it removed ended); a shard left without holds stops, stamped at the
    /// latest end.
    fn close(
        &mut self,
        ends: impl Fn(&mut BTreeMap<Holder, Hold>) -> Option<(Instant, AdmissionReason)>,
    ) -> Vec<AdmissionEvent> {
        let mut events = Vec::new();
        for all_told in [&mut self.told, &mut self.told_secondary] {
            all_told.retain(|at, told| {
                let Some((end, reason)) = ends(&mut told.holds) else {
                    return true;
                };
                let end = told.ended.map_or(end, |ended| ended.max(end));
                told.ended = Some(end);
                if !told.holds.is_empty() {
                    return true;
                }
                events.push(event(at.shard, told, AdmissionChange::Stop, end, reason));
                false
            });
        }
        events
    }

    /// When the next hold runs out, if anything is told, in either role.
    pub fn next_end(&self) -> Option<Instant> {
        self.told
            .values()
            .chain(self.told_secondary.values())
            .flat_map(|told| told.holds.values())
            .map(|hold| hold.until)
            .min()
    }

    /// When the copy held for shards still given runs out (the latest `until` of a hold not
    /// dropped since).
    pub fn copy_end(&self) -> Option<Instant> {
        self.told
            .values()
            .flat_map(|told| told.holds.values())
            .filter(|hold| hold.dropped_by.is_none())
            .map(|hold| hold.until)
            .max()
    }

    /// When the copy a poller holds runs out, counted from the arrival of the poll its last
    /// answer went to (P16.1: it counts from that poll's send, which is no later). The poller of
    /// `chain` holds that chain's last answer; a poll that continues no kept chain is taken to
    /// hold the last answer given to any poll. `None` when that answer gave no lease.
    ///
    /// Not the end a revoke waits for: a hold's `until` counts from the answer, no earlier than
    /// `lease_expires_monotonic_ns`, which the poller may keep to instead.
    pub fn poller_copy_end(&self, chain: Option<Chain>) -> Option<Instant> {
        let last_to_chain =
            chain.and_then(|chain| self.recent.iter().rev().find(|given| given.chain == chain));
        last_to_chain
            .or_else(|| self.recent.back())
            .and_then(|given| given.copy_end)
    }

    /// The shards of `layout` the service may still be admitting as the primary, with their
    /// epochs, ascending (a secondary's permits are not among them: no handoff waits for those).
    /// A shard told in another layout counts as every shard of `layout` it shares a key with,
    /// at its own epoch (the higher, where two meet).
    pub fn told(&self, layout: Layout) -> Vec<ShardEpoch> {
        in_layout(&self.told, layout)
    }

    /// Whether the service may still be admitting any key of `shard` of `layout` as the
    /// primary.
    pub fn is_told(&self, shard: u32, layout: Layout) -> bool {
        self.told(layout)
            .binary_search_by_key(&shard, |told| told.shard)
            .is_ok()
    }

    /// Whether the service may be admitting anything as the primary.
    pub fn is_empty(&self) -> bool {
        self.told.is_empty()
    }

    /// The shards of `layout` the service may still be admitting as a secondary (its permits'
    /// windows have not all ended), with their epochs, ascending.
    pub fn told_secondary(&self, layout: Layout) -> Vec<ShardEpoch> {
        in_layout(&self.told_secondary, layout)
    }
}

/// The shards of `layout` that share a key with some shard of `all_told`, each at the highest
/// epoch it was told at. A layout not known yet (no count) takes each shard's own.
fn in_layout(all_told: &BTreeMap<ToldAt, Told>, layout: Layout) -> Vec<ShardEpoch> {
    let mut shards: BTreeMap<u32, u64> = BTreeMap::new();
    for (at, told) in all_told {
        let layout = if layout.shard_count == 0 {
            told.layout
        } else {
            layout
        };
        for shard in layout.shards_sharing_keys_with(at.shard, told.layout) {
            let epoch = shards.entry(shard).or_insert(told.epoch);
            *epoch = (*epoch).max(told.epoch);
        }
    }
    shards
        .into_iter()
        .map(|(shard, epoch)| ShardEpoch { shard, epoch })
        .collect()
}

/// Who is told, in which role and layout.
#[derive(Debug, Clone, Copy)]
struct Telling<'a> {
    holder: Holder,
    role: Role,
    executor_id: &'a str,
    layout: Layout,
}

fn event(
    shard: u32,
    told: &Told,
    change: AdmissionChange,
    at: Instant,
    reason: AdmissionReason,
) -> AdmissionEvent {
    AdmissionEvent {
        executor_id: told.executor_id.clone(),
        shard,
        epoch: told.epoch,
        role: told.role,
        change,
        at,
        reason,
        layout: told.layout,
    }
}

#[cfg(test)]
#[path = "service_copy_tests.rs"]
mod tests;
