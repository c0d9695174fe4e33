//! Raft as simulated: taking and losing office, proposals, the committed log every replica applies,
//! followers catching up and restarts from a snapshot.

use super::*;

impl World {
    pub(super) fn take_office(&mut self, manager: usize, offset_ms: i64) {
        // Raft: a new leader holds the whole committed log and applies it before it leads.
        self.catch_up(manager);
        let term = self.next_term;
        self.next_term += 1;
        let rate_ppm = self.manager_rate_ppm[manager];
        // P6.4: the clock takes office at its wall clock raised to what the state holds, and runs
        // on from there, as production's `take_office` anchors it.
        let wall_ms = self.leader_clock_ms(offset_ms, rate_ppm);
        let office = take_office(wall_ms, &self.replicas[manager]);
        let (took_office_ms, raised_ms) = (office.took_office_ms, office.raised_ms);
        let offset_ms = offset_ms + raised_ms as i64;
        let leader = Leader {
            term,
            manager,
            offset_ms,
            rate_ppm,
            // P15.1: a new leader knows no loads; it relearns them from the renewals.
            steps: TermSteps::new(
                took_office_ms,
                self.scenario.guard,
                self.placement_settings(),
                self.scenario.plan_cap,
            ),
            tick: 0,
            planner: DeliveryPlanner::default(),
            // P6.2: each executor is owed its full set once.
            pending_pushes: owed_pushes(&self.replicas[manager]).into_iter().collect(),
            last_renewal_applied_ms: None,
            tail: Vec::new(),
            commit_scheduled: false,
            round: None,
            round_in_flight: BTreeMap::new(),
            round_again: false,
            stalled_until_us: None,
            step_loads: BTreeMap::new(),
            memory: {
                let mut memory = MemoryLeases::default();
                memory.begin_term(term);
                memory
            },
            confirmation: LeadershipConfirmation::new(
                (0..MANAGERS).filter(|m| *m != manager).map(|m| m as u64),
            ),
            awaiting_confirmation: Vec::new(),
        };
        self.checker.new_term();
        self.leader = Some(leader);
        self.note(|| format!("term {term}: manager {manager} leads, clock offset {offset_ms} ms (raised {raised_ms} ms above its wall clock), took office at {took_office_ms}"));
        self.schedule(self.now_us, Event::LeaderStep { term });
        self.schedule(self.now_us, Event::DeliveryRound { term });
    }

    pub(super) fn catch_up(&mut self, manager: usize) {
        while self.applied[manager] < self.log.len() {
            let index = self.applied[manager];
            let command = self.log[index].clone();
            let _ = self.replicas[manager].apply(index as u64 + 1, &command);
            self.applied[manager] += 1;
        }
    }

    pub(super) fn propose(&mut self, command: Command, reply_to: ReplyTo) {
        let commits_held = self.commits_held();
        let Some(leader) = &mut self.leader else {
            return;
        };
        // Group commit: renewals arriving while a batch waits join the pending `Renew` entry.
        if let (Command::Renew { renewals, .. }, ReplyTo::Renew(replies)) = (&command, &reply_to) {
            if let Some(Proposal {
                command: Command::Renew {
                    renewals: batch, ..
                },
                reply_to: ReplyTo::Renew(batch_replies),
            }) = leader.tail.last_mut()
            {
                batch.extend(renewals.iter().cloned());
                batch_replies.extend(replies.iter().cloned());
                return;
            }
        }
        leader.tail.push(Proposal { command, reply_to });
        if !leader.commit_scheduled && leader.stalled_until_us.is_none() && !commits_held {
            leader.commit_scheduled = true;
            let term = leader.term;
            let at = self.now_us + self.scenario.commit_latency_us;
            self.schedule(at, Event::Commit { term });
        }
    }

    pub(super) fn commit(&mut self, term: u64) {
        let Some(leader) = &mut self.leader else {
            return;
        };
        if leader.term != term {
            return;
        }
        leader.commit_scheduled = false;
        let tail = std::mem::take(&mut leader.tail);
        let manager = leader.manager;
        for proposal in tail {
            self.commit_one(manager, proposal);
        }
    }

    /// Appends `command` to the committed log, applies it on `manager`'s replica and checks the
    /// commit; returns the outcome.
    pub(super) fn append_and_apply(&mut self, manager: usize, command: &Command) -> Outcome {
        self.catch_up(manager);
        self.log.push(command.clone());
        let index = self.log.len() as u64;
        let before = self.replicas[manager].clone();
        let outcome = self.replicas[manager].apply(index, command);
        self.applied[manager] += 1;
        self.coverage.commits += 1;
        self.observe_commit(&before, manager, command, &outcome);
        outcome
    }

    /// Commits one proposal of the leader's tail: applies it, signals the leader as production
    /// does, and answers whoever asked.
    pub(super) fn commit_one(&mut self, manager: usize, proposal: Proposal) {
        // Who each shard of a plan leaves, for the record of balance moves.
        let leaving: Vec<Option<String>> = match &proposal.command {
            Command::Rebalance {
                namespace, moves, ..
            } => {
                self.catch_up(manager);
                let space = self.replicas[manager].space(namespace);
                moves
                    .iter()
                    .map(|step| {
                        space
                            .and_then(|space| space.shard(step.shard))
                            .and_then(|shard| shard.owner.clone())
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let outcome = self.append_and_apply(manager, &proposal.command);
        let index = self.log.len() as u64;
        let now_ms = proposal.command.now_ms();
        self.note(|| {
            format!(
                "commit #{index}: {} -> {}",
                describe_command(&proposal.command),
                describe_outcome(&outcome)
            )
        });
        let signal = CommitSignal::of(&outcome);
        if let Some(leader) = self.leader.as_mut().filter(|l| l.manager == manager) {
            let term = leader.term;
            if signal.renewal_applied {
                leader.last_renewal_applied_ms =
                    Some(leader.last_renewal_applied_ms.unwrap_or(0).max(now_ms));
            }
            leader.pending_pushes.extend(signal.pushes.iter().cloned());
            if signal.replan {
                self.schedule(self.now_us, Event::LeaderStep { term });
            }
            if signal.deliver {
                self.schedule(self.now_us, Event::DeliveryRound { term });
            }
            self.placement_after_commit(manager, &proposal, &outcome, leaving);
        }
        self.answer(manager, proposal.reply_to, &outcome);
    }

    pub(super) fn lose_office(&mut self, keep_tail: bool, deposed_pushes_ms: u64) {
        self.lose_office_stranding(keep_tail, deposed_pushes_ms, None);
    }

    /// [`World::lose_office`], the executors in `stranded` (a third, drawn, when `None`) staying
    /// with the deposed leader on its side of the partition.
    pub(super) fn lose_office_stranding(
        &mut self,
        keep_tail: bool,
        deposed_pushes_ms: u64,
        stranded: Option<BTreeSet<Slot>>,
    ) {
        let Some(mut leader) = self.leader.take() else {
            return;
        };
        self.coverage.leader_changes += 1;
        let term = leader.term;
        let tail = std::mem::take(&mut leader.tail);
        self.note(|| {
            format!(
                "term {term} ends: {} uncommitted entries {}",
                tail.len(),
                if keep_tail { "kept" } else { "lost" }
            )
        });
        // Renewals waiting for a confirmation round hear that it failed (the read index errs
        // once the leader steps down), fall through to the log, whose proposal is refused
        // `not_leader`: the executor retries at once (P6.8, P7.1).
        let waiting: Vec<Renewer> = std::mem::take(&mut leader.awaiting_confirmation)
            .into_iter()
            .map(|(_, _, renewer)| renewer)
            .collect();
        for Renewer { slot, call, .. } in waiting {
            self.send_to_executor(slot, Message::CallFailed { call });
        }
        if keep_tail {
            // The next leader commits them; their answers are lost with the old connections.
            for proposal in tail {
                self.append_and_apply(leader.manager, &proposal.command);
            }
        }
        if deposed_pushes_ms > 0 {
            // A third of the executors, drawn, stay with it on its side of the partition.
            let stranded = stranded.unwrap_or_else(|| {
                (0..self.scenario.slots)
                    .filter(|_| self.rng.random_ratio(1, 3))
                    .collect()
            });
            self.deposed.push(Deposed {
                term,
                state: self.replicas[leader.manager].clone(),
                planner: std::mem::take(&mut leader.planner),
                offset_ms: leader.offset_ms,
                rate_ppm: leader.rate_ppm,
                until_us: self.now_us + deposed_pushes_ms * 1_000,
                leads_nothing_from_us: self.now_us + RAFT_LEASE_US,
                memory: std::mem::take(&mut leader.memory),
                confirmation: leader.confirmation,
                stranded,
                awaiting_confirmation: Vec::new(),
                held_calls: Vec::new(),
            });
            self.schedule(self.now_us, Event::DeposedRound { term });
        }
    }

    // ---- the leader loop -------------------------------------------------------------------

    /// A replica restarts from its snapshot: the state goes through the real codec and must
    /// come back equal, then the replica catches up from the log.
    pub(super) fn restart_from_snapshot(&mut self, manager: usize) {
        self.coverage.snapshot_restarts += 1;
        let state = &self.replicas[manager];
        let restored = state
            .encode_state()
            .and_then(|(schema, payload)| LeaseState::decode_state(schema, &payload));
        match restored {
            Ok(restored) if restored == *state => {
                self.replicas[manager] = restored;
                self.compared[manager] = None;
            }
            Ok(_) => self
                .checker
                .fail("a snapshot round trip changed the state".to_owned()),
            Err(error) => self
                .checker
                .fail(format!("snapshot round trip failed: {error}")),
        }
    }

    pub(super) fn follower_apply(&mut self) {
        let leader = self.leader.as_ref().map(|l| l.manager);
        for manager in 0..MANAGERS {
            if Some(manager) == leader {
                continue;
            }
            self.catch_up(manager);
            if let Some(leader) = leader {
                let at = (self.applied[manager], leader);
                if self.applied[manager] != self.applied[leader]
                    || self.compared[manager] == Some(at)
                {
                    continue;
                }
                self.compared[manager] = Some(at);
                if self.replicas[manager] != self.replicas[leader] {
                    self.checker.fail(format!(
                        "replica {manager} differs from the leader's at log index {} (P2.2)",
                        self.applied[manager]
                    ));
                }
            }
        }
        self.schedule_timer(self.now_us + FOLLOWER_APPLY_US, Event::FollowerApply);
    }
}
