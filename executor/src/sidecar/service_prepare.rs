//! Warm handoffs through the service beside a sidecar (PROTOCOL P17.1 with P16.1): which shards
//! the service is asked to prepare for, and which it said it prepared. A pure core.
//!
//! The service opts in: it polls with `prepare=true`, or it is pushed to (`--app-url`, whose `2xx`
//! says it applied the whole answer, prepares included). Until it does, a prepare is answered at
//! once, as by an executor without hooks, so a service that knows nothing of prepares never
//! delays a handoff.
//!
//! A shard is *asked* while at least one prepare request waits for it; several may (a new
//! leader asks again), each counted, and the last to finish forgets the shard. The service is
//! told the shards asked and not yet prepared; it says which it prepared, at which epoch.

use std::collections::BTreeMap;

use leasehold_api::wire::ShardEpoch;

/// What the service was asked to prepare for, and what it prepared.
#[derive(Debug, Clone, Default)]
pub struct ServicePrepares {
    opted_in: bool,
    asked: BTreeMap<u32, Asked>,
    /// Bumped whenever the shards the service is told to prepare ([`Self::pending`]) change, so
    /// a poll or a push knows the service has not been told them yet.
    generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Asked {
    epoch: u64,
    prepared: bool,
    /// Prepare requests waiting for this shard.
    waiters: u32,
}

/// The service said it prepared a shard nobody is waiting for at that epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAsked;

impl ServicePrepares {
    /// The service prepares shards: from now on prepares wait for it.
    pub fn opt_in(&mut self) {
        self.opted_in = true;
    }

    /// Whether prepares wait for the service.
    pub fn opted_in(&self) -> bool {
        self.opted_in
    }

    /// A prepare request waits for `shards`. `false`, recording nothing, when the service does
    /// not prepare.
    pub fn ask(&mut self, shards: &[ShardEpoch]) -> bool {
        if !self.opted_in {
            return false;
        }
        let mut told_more = false;
        for wanted in shards {
            let asked = self.asked.entry(wanted.shard).or_insert(Asked {
                epoch: wanted.epoch,
                prepared: false,
                waiters: 0,
            });
            asked.waiters = asked.waiters.saturating_add(1);
            if asked.epoch != wanted.epoch {
                // The shard will arrive at another epoch than a request still waiting expected:
                // what the service prepared was for a plan that changed.
                asked.epoch = wanted.epoch;
                asked.prepared = false;
                told_more = true;
            } else if asked.waiters == 1 {
                told_more = true;
            }
        }
        if told_more {
            self.bump();
        }
        true
    }

    /// The service prepared `shard` for `epoch`.
    pub fn prepared(&mut self, shard: u32, epoch: u64) -> Result<(), NotAsked> {
        match self.asked.get_mut(&shard) {
            Some(asked) if asked.epoch == epoch => {
                if !asked.prepared {
                    asked.prepared = true;
                    self.bump();
                }
                Ok(())
            }
            _ => Err(NotAsked),
        }
    }

    /// The service applied an answer that told it to prepare `told` (a push it answered `2xx`).
    pub fn prepared_all(&mut self, told: &[ShardEpoch]) {
        for shard in told {
            // A shard no longer asked at that epoch was finished meanwhile: nothing to record.
            let _ = self.prepared(shard.shard, shard.epoch);
        }
    }

    /// The shards to tell the service to prepare: asked, and not yet prepared. Ascending.
    pub fn pending(&self) -> Vec<ShardEpoch> {
        self.asked
            .iter()
            .filter(|(_, asked)| !asked.prepared)
            .map(|(&shard, asked)| ShardEpoch {
                shard,
                epoch: asked.epoch,
            })
            .collect()
    }

    /// Which of `shards` the service prepared, at the epoch asked, in the order given.
    pub fn done(&self, shards: &[ShardEpoch]) -> Vec<u32> {
        shards
            .iter()
            .filter(|wanted| {
                self.asked
                    .get(&wanted.shard)
                    .is_some_and(|asked| asked.prepared && asked.epoch == wanted.epoch)
            })
            .map(|wanted| wanted.shard)
            .collect()
    }

    /// A prepare request for `shards` stopped waiting: a shard nobody waits for any more is
    /// forgotten.
    pub fn finish(&mut self, shards: &[ShardEpoch]) {
        let mut forgot_pending = false;
        for wanted in shards {
            if let Some(asked) = self.asked.get_mut(&wanted.shard) {
                asked.waiters = asked.waiters.saturating_sub(1);
                if asked.waiters == 0 {
                    forgot_pending |= !asked.prepared;
                    self.asked.remove(&wanted.shard);
                }
            }
        }
        if forgot_pending {
            self.bump();
        }
    }

    /// Changes whenever [`Self::pending`] does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(shard: u32, epoch: u64) -> ShardEpoch {
        ShardEpoch { shard, epoch }
    }

    #[test]
    fn p17_1_a_service_that_never_opted_in_is_asked_nothing() {
        let mut prepares = ServicePrepares::default();
        assert!(!prepares.ask(&[at(1, 3)]));
        assert!(prepares.pending().is_empty());
        assert_eq!(prepares.generation(), 0);
        assert_eq!(prepares.prepared(1, 3), Err(NotAsked));
    }

    #[test]
    fn p17_1_the_service_is_told_what_is_asked_until_it_prepared_it() {
        let mut prepares = ServicePrepares::default();
        prepares.opt_in();
        let asked = [at(1, 3), at(4, 9)];
        assert!(prepares.ask(&asked));
        assert_eq!(prepares.pending(), asked.to_vec());
        let told = prepares.generation();
        assert_eq!(prepares.prepared(4, 8), Err(NotAsked), "another epoch");
        assert_eq!(prepares.prepared(2, 1), Err(NotAsked), "not asked at all");
        assert_eq!(prepares.generation(), told, "a refusal changes nothing");
        assert_eq!(prepares.prepared(4, 9), Ok(()));
        assert_ne!(prepares.generation(), told);
        assert_eq!(prepares.pending(), vec![at(1, 3)]);
        assert_eq!(prepares.done(&asked), vec![4]);
        prepares.finish(&asked);
        assert!(prepares.pending().is_empty());
        assert!(
            prepares.done(&asked).is_empty(),
            "forgotten once nobody waits"
        );
        assert_eq!(prepares.prepared(1, 3), Err(NotAsked), "too late");
    }

    #[test]
    fn p17_1_a_shard_two_requests_wait_for_stays_until_both_finished() {
        let mut prepares = ServicePrepares::default();
        prepares.opt_in();
        prepares.ask(&[at(1, 3)]);
        let told = prepares.generation();
        prepares.ask(&[at(1, 3), at(2, 5)]);
        assert_ne!(prepares.generation(), told, "shard 2 is new");
        prepares.prepared(1, 3).unwrap();
        prepares.finish(&[at(1, 3)]);
        assert_eq!(
            prepares.done(&[at(1, 3)]),
            vec![1],
            "the second still waits"
        );
        prepares.finish(&[at(1, 3), at(2, 5)]);
        assert!(prepares.done(&[at(1, 3)]).is_empty());
        assert!(prepares.pending().is_empty());
    }

    #[test]
    fn p17_1_asked_at_a_new_epoch_what_was_prepared_is_asked_again() {
        let mut prepares = ServicePrepares::default();
        prepares.opt_in();
        prepares.ask(&[at(1, 3)]);
        prepares.prepared(1, 3).unwrap();
        let told = prepares.generation();
        prepares.ask(&[at(1, 4)]);
        assert_ne!(prepares.generation(), told);
        assert_eq!(prepares.pending(), vec![at(1, 4)]);
        assert!(prepares.done(&[at(1, 3)]).is_empty());
        prepares.prepared_all(&[at(1, 4), at(7, 1)]);
        assert_eq!(prepares.done(&[at(1, 4)]), vec![1]);
    }
}
