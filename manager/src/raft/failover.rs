//! An election as soon as a dead leader's lease has passed (docs/OPERATIONS.md "Raft timing").
//!
//! openraft 0.9 starts an election on a follower only once its leader lease
//! (`election_timeout_max`) *and* its own random election timeout have passed since it last heard
//! from the leader, and a voter refuses every candidate while its lease runs. Only the lease has
//! to pass before a candidate can win; the extra timeout only spreads candidates apart, and it
//! costs a whole timeout more when the first candidate is refused (a log behind, or two
//! candidates of one term, which openraft's vote order cannot compare).
//!
//! When the leader's address refuses connections, nothing listens there: its process is gone.
//! When no connection to it completes within [`Settings::connect_timeout`] (a host or a network
//! that drops what is sent to it: a partition, a host gone), it cannot lead this node either. A
//! leader that is stalled, overloaded or slow to answer still has its connections accepted by its
//! kernel, so a live process is never stood against for its slowness. Then, once the lease has passed here and at
//! the other voters (each says in `/raft/identity` how long ago it renewed its own; for one that
//! does not, this node's silence plus [`Settings::margin`] stands in), the voter with the most
//! complete log asks for votes at once, through `Raft::trigger().elect()`; voters whose log is as
//! complete but whose id is higher wait [`Settings::stagger`] so that two candidates of one term
//! do not refuse each other. One election per leader and term: whatever this does not decide (a
//! candidate refused, a leader that does not answer at all, a peer with a longer log) is left to
//! openraft's own timer, as without this module.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;
use openraft::ServerState;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{NodeId, RaftTimings};

/// A log's last entry: the order of openraft's `LogId` (term, then index), which decides votes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LogTip {
    pub term: u64,
    pub index: u64,
}

impl From<openraft::LogId<NodeId>> for LogTip {
    fn from(id: openraft::LogId<NodeId>) -> Self {
        Self {
            term: id.leader_id.term,
            index: id.index,
        }
    }
}

/// When this node last accepted a message from a leader: an AppendEntries (heartbeats included)
/// or a snapshot chunk whose term it did not refuse. openraft dates its leader lease from the
/// same messages. Start-up counts as contact, as openraft dates a restarted node's vote at
/// start-up, so a node that never heard from the leader waits one lease from its start.
#[derive(Debug)]
pub struct LeaderContact {
    last: Mutex<Instant>,
}

impl Default for LeaderContact {
    fn default() -> Self {
        Self {
            last: Mutex::new(Instant::now()),
        }
    }
}

impl LeaderContact {
    pub fn heard(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub fn since(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.last.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The timing of the checks, from the Raft timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// openraft's leader lease: `election_timeout_max`.
    pub lease: Duration,
    /// Past the lease before asking the votes of a voter that does not say when its own lease
    /// was renewed: it may have been up to one heartbeat round later than here (openraft's leader
    /// sends heartbeats on its tick, every 1.5 heartbeat intervals; a restarted voter dates its
    /// lease from its start).
    pub margin: Duration,
    /// How long a voter whose log is as complete as a lower id's leaves that one to stand.
    pub stagger: Duration,
    /// How often the conditions are checked.
    pub check_every: Duration,
    /// Bound on each peer's answer: a peer too busy to say its log is not counted.
    pub probe_timeout: Duration,
    /// Bound on the connection attempt to the leader: a refusal comes back at once, and a
    /// kernel that is up accepts within a round trip; one not done by then is not reachable.
    pub connect_timeout: Duration,
}

impl Settings {
    pub fn new(timings: RaftTimings) -> Self {
        let heartbeat = Duration::from_millis(timings.heartbeat_ms);
        Self {
            lease: Duration::from_millis(timings.election_timeout_max_ms),
            margin: 2 * heartbeat,
            // Four of the lower id's checks, each on its own phase, and its vote round trip.
            stagger: 2 * heartbeat,
            check_every: heartbeat / 2,
            probe_timeout: Duration::from_millis(timings.election_timeout_max_ms) / 2,
            connect_timeout: 2 * heartbeat,
        }
    }
}

/// What this node's Raft says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub me: NodeId,
    pub state: ServerState,
    pub term: u64,
    /// The leader this node follows (openraft names one only for a committed vote).
    pub leader: Option<NodeId>,
    /// Every voter with its advertised URL.
    pub voters: Vec<(NodeId, String)>,
    pub last_log: Option<LogTip>,
}

/// What a peer voter said about itself (`GET /raft/identity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerReport {
    /// Its log's last entry; `None` for an empty log, or from a release that does not say.
    pub log: Option<LogTip>,
    /// How long ago it last renewed a leader's lease ([`LeaderContact`]), while it follows one;
    /// `None` otherwise, or from a release that does not say.
    pub lease_silence: Option<Duration>,
}

/// The I/O the checks need; the manager's is [`NodeSurroundings`].
pub(crate) trait Surroundings {
    fn view(&self) -> View;
    /// Time since this node last heard from a leader ([`LeaderContact`]).
    fn silence(&self) -> Duration;
    /// True only when no connection to `address` can be made: refused (nothing listens there)
    /// or not completed in time (nothing answers from there).
    async fn leader_unreachable(&self, address: &str) -> bool;
    /// `None`: no answer in time, or another node answered at its address.
    async fn peer_report(&self, peer: NodeId, address: &str) -> Option<PeerReport>;
    /// Stands for election now.
    async fn elect(&self);
}

/// What one check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not a voter following another node's leadership (leading, standing, learning, or no
    /// leader known): openraft's business.
    NotFollowing,
    /// This node already stood once while following this leader in this term.
    AlreadyStood,
    /// The leader was heard from within its lease.
    LeaseRunning,
    /// The leader's address accepts connections (or cannot be asked): it may be alive.
    LeaderMayLive,
    /// A peer's log is more complete: it is the one that can win.
    PeerLogLonger(NodeId),
    /// A peer's lease may still run, so it would refuse this node's candidacy.
    PeerLeaseRunning(NodeId),
    /// A peer with as complete a log and a lower id stands first.
    Staggered(NodeId),
    /// Stood for election.
    Stood,
}

/// The state between checks: which leadership this node already stood against, and since when
/// it has been leaving a peer to stand first.
#[derive(Debug)]
pub(crate) struct Detector {
    settings: Settings,
    stood_against: Option<(NodeId, u64)>,
    staggered_since: Option<((NodeId, u64), Instant)>,
}

impl Detector {
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            settings,
            stood_against: None,
            staggered_since: None,
        }
    }

    /// One check: reads the view, the silence and the clock, asks the probes the decision needs
    /// (the leader's address, then every peer at once), decides, then acts on the decision (the
    /// silence gauge, and standing for election when it says so).
    pub(crate) async fn check<S: Surroundings>(&mut self, around: &S) -> Check {
        let view = around.view();
        let silence = around.silence();
        // Read with the view, before the probes: the stagger counts from what was seen then.
        let now = Instant::now();
        let found = match self.before_probes(&view, silence) {
            Err(found) => found,
            Ok(leader_address) => {
                let probes = if around.leader_unreachable(leader_address).await {
                    let peers = self.peers_to_ask(&view);
                    let reports = join_all(
                        peers
                            .iter()
                            .map(|(peer, address)| around.peer_report(*peer, address)),
                    )
                    .await;
                    Probes::LeaderUnreachable(
                        peers.iter().map(|(peer, _)| *peer).zip(reports).collect(),
                    )
                } else {
                    Probes::LeaderMayLive
                };
                self.after_probes(&view, silence, now, &probes)
            }
        };
        if !matches!(found, Check::Staggered(_)) {
            // A wait that was interrupted (the leader was heard from again) starts over.
            self.staggered_since = None;
        }
        // Only a follower waits for a leader; a stale reading would look like a silent one.
        let shown = if found == Check::NotFollowing {
            0.0
        } else {
            silence.as_secs_f64()
        };
        metrics::gauge!("leasehold_raft_leader_silence_seconds").set(shown);
        if found == Check::Stood {
            tracing::warn!(
                leader = view.leader,
                term = view.term,
                silent_ms = silence.as_millis() as u64,
                "the leader cannot be reached (its address refuses or does not answer \
                 connections) and its lease has passed: standing for election now"
            );
            metrics::counter!("leasehold_raft_dead_leader_elections_total").increment(1);
            around.elect().await;
        }
        found
    }

    /// The decision from the view and the silence alone (pure), or the leader's address when
    /// it takes the probes.
    fn before_probes<'v>(&self, view: &'v View, silence: Duration) -> Result<&'v str, Check> {
        let Some(leader) = view.leader else {
            return Err(Check::NotFollowing);
        };
        let is_voter = view.voters.iter().any(|(id, _)| *id == view.me);
        if view.state != ServerState::Follower || leader == view.me || !is_voter {
            return Err(Check::NotFollowing);
        }
        if self.stood_against == Some((leader, view.term)) {
            return Err(Check::AlreadyStood);
        }
        if silence < self.settings.lease {
            return Err(Check::LeaseRunning);
        }
        // A leader removed from the voters has no address here; openraft's timer handles it.
        match view.voters.iter().find(|(id, _)| *id == leader) {
            Some((_, address)) => Ok(address),
            None => Err(Check::LeaderMayLive),
        }
    }

    /// The voters asked for their reports once the leader cannot be reached: every one but
    /// this node and the leader, in the view's order.
    fn peers_to_ask(&self, view: &View) -> Vec<(NodeId, String)> {
        view.voters
            .iter()
            .filter(|(peer, _)| *peer != view.me && Some(*peer) != view.leader)
            .cloned()
            .collect()
    }

    /// The decision with the probes' answers, at `now` (pure but for the detector's own state:
    /// whom it stood against, and since when it leaves a peer to stand first).
    fn after_probes(
        &mut self,
        view: &View,
        silence: Duration,
        now: Instant,
        probes: &Probes,
    ) -> Check {
        let Some(leader) = view.leader else {
            return Check::NotFollowing;
        };
        let reports = match probes {
            Probes::LeaderMayLive => return Check::LeaderMayLive,
            Probes::LeaderUnreachable(reports) => reports,
        };
        let episode = (leader, view.term);
        let mut first = None;
        for (peer, report) in reports {
            let log = report.and_then(|r| r.log);
            // Votes go to the most complete log (Raft §5.4.1): a candidate behind a peer is
            // refused, and its term then blocks the peer's candidacy of the same term.
            if log.is_some() && log > view.last_log {
                return Check::PeerLogLonger(*peer);
            }
            if log.is_some() && log == view.last_log && *peer < view.me {
                first = first.or(Some(*peer));
            }
            // A voter refuses every candidate while its own lease runs. One that says when it
            // last renewed it is believed; for any other, this node's own silence stands in,
            // with the margin for a voter renewed up to a tick later.
            let lease_over = match report.and_then(|r| r.lease_silence) {
                Some(peer_silence) => peer_silence >= self.settings.lease,
                None => silence >= self.settings.lease + self.settings.margin,
            };
            if !lease_over {
                return Check::PeerLeaseRunning(*peer);
            }
        }
        if let Some(peer) = first {
            let since = match self.staggered_since {
                Some((seen, since)) if seen == episode => since,
                _ => {
                    self.staggered_since = Some((episode, now));
                    now
                }
            };
            if now.saturating_duration_since(since) < self.settings.stagger {
                return Check::Staggered(peer);
            }
        }
        self.stood_against = Some(episode);
        Check::Stood
    }
}

/// What the probes found, for [`Detector::after_probes`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probes {
    /// The leader's address accepts connections (or cannot be asked).
    LeaderMayLive,
    /// The leader cannot be reached; each peer's report, in the view's order.
    LeaderUnreachable(Vec<(NodeId, Option<PeerReport>)>),
}

/// True when no address `url` resolves to takes a connection: each refused it, could not be
/// routed to, or did not complete it within `connect_timeout`. False when one accepted, or
/// when `url` names no address (nothing was asked).
pub async fn unreachable(url: &str, connect_timeout: Duration) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return false;
    };
    // An IPv6 literal keeps its brackets in the URL, not in a socket address.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(Ok(addresses)) =
        tokio::time::timeout(connect_timeout, tokio::net::lookup_host((host, port))).await
    else {
        return false;
    };
    let addresses: Vec<_> = addresses.collect();
    if addresses.is_empty() {
        return false;
    }
    let attempts = addresses.into_iter().map(|address| async move {
        match tokio::time::timeout(connect_timeout, TcpStream::connect(address)).await {
            Ok(Ok(_)) => false,
            Err(_elapsed) => true,
            Ok(Err(error)) => matches!(
                error.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            ),
        }
    });
    join_all(attempts)
        .await
        .into_iter()
        .all(|unreachable| unreachable)
}

/// Checks every [`Settings::check_every`] until `shutdown`.
pub(crate) async fn run<S: Surroundings>(
    around: S,
    settings: Settings,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut detector = Detector::new(settings);
    let mut ticks = tokio::time::interval(settings.check_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => return,
        }
        let found = detector.check(&around).await;
        tracing::trace!(?found, "dead leader check");
    }
}

#[cfg(test)]
mod tests;
