//! The dead-leader checks on a paused clock, against scripted surroundings; and the connection
//! probe against real sockets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;

const ME: NodeId = 2;
const LEADER: NodeId = 1;

fn settings() -> Settings {
    Settings::new(RaftTimings::default())
}

fn tip(term: u64, index: u64) -> LogTip {
    LogTip { term, index }
}

fn voters(ids: &[NodeId]) -> Vec<(NodeId, String)> {
    ids.iter()
        .map(|id| (*id, format!("http://127.0.0.1:{}", 7000 + id)))
        .collect()
}

/// Surroundings as a script sets them. Standing for election turns this node into a candidate
/// of the next term, as openraft does, unless `elect_keeps_view` is set.
struct Scripted {
    view: Mutex<View>,
    contact: LeaderContact,
    unreachable: Mutex<bool>,
    peers: Mutex<BTreeMap<NodeId, PeerReport>>,
    elect_keeps_view: bool,
    probes: AtomicUsize,
    elections: AtomicUsize,
}

impl Scripted {
    /// A follower (node 2) of leader 1 in term 3, with peer 3; its log ends at 3-10, the
    /// leader's address refuses connections, the peer does not answer.
    fn new() -> Self {
        Self {
            view: Mutex::new(View {
                me: ME,
                state: ServerState::Follower,
                term: 3,
                leader: Some(LEADER),
                voters: voters(&[1, 2, 3]),
                last_log: Some(tip(3, 10)),
            }),
            contact: LeaderContact::default(),
            unreachable: Mutex::new(true),
            peers: Mutex::new(BTreeMap::new()),
            elect_keeps_view: false,
            probes: AtomicUsize::new(0),
            elections: AtomicUsize::new(0),
        }
    }

    fn set_view(&self, change: impl FnOnce(&mut View)) {
        change(&mut self.view.lock().unwrap());
    }

    fn set_peer(&self, peer: NodeId, log: Option<LogTip>, lease_silence: Option<Duration>) {
        let report = PeerReport { log, lease_silence };
        self.peers.lock().unwrap().insert(peer, report);
    }

    fn elections(&self) -> usize {
        self.elections.load(Ordering::SeqCst)
    }
}

impl Surroundings for Scripted {
    fn view(&self) -> View {
        self.view.lock().unwrap().clone()
    }

    fn silence(&self) -> Duration {
        self.contact.since(Instant::now())
    }

    async fn leader_unreachable(&self, _address: &str) -> bool {
        self.probes.fetch_add(1, Ordering::SeqCst);
        *self.unreachable.lock().unwrap()
    }

    async fn peer_report(&self, peer: NodeId, _address: &str) -> Option<PeerReport> {
        self.peers.lock().unwrap().get(&peer).copied()
    }

    async fn elect(&self) {
        self.elections.fetch_add(1, Ordering::SeqCst);
        if !self.elect_keeps_view {
            self.set_view(|view| {
                view.state = ServerState::Candidate;
                view.term += 1;
                view.leader = None;
            });
        }
    }
}

/// Past the lease and its margin: the earliest instant this node stands when no other voter says
/// when it renewed its lease.
fn due() -> Duration {
    let settings = settings();
    settings.lease + settings.margin
}

#[test]
fn the_settings_follow_the_default_raft_timing() {
    assert_eq!(
        settings(),
        Settings {
            lease: Duration::from_secs(1),
            margin: Duration::from_millis(200),
            stagger: Duration::from_millis(200),
            check_every: Duration::from_millis(50),
            probe_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(200),
        }
    );
}

#[tokio::test(start_paused = true)]
async fn silence_is_counted_from_the_last_contact_and_from_start_up_before_any() {
    let contact = LeaderContact::default();
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(contact.since(Instant::now()), Duration::from_secs(3));
    contact.heard();
    tokio::time::advance(Duration::from_millis(40)).await;
    assert_eq!(contact.since(Instant::now()), Duration::from_millis(40));
}

#[tokio::test(start_paused = true)]
async fn a_follower_stands_once_the_lease_and_margin_have_passed_and_the_leader_refuses() {
    let around = Scripted::new();
    let mut detector = Detector::new(settings());
    tokio::time::advance(settings().lease - Duration::from_millis(1)).await;
    assert_eq!(detector.check(&around).await, Check::LeaseRunning);
    assert_eq!(
        around.probes.load(Ordering::SeqCst),
        0,
        "no probe inside the lease"
    );
    // Peer 3 does not answer: it may have been renewed up to the margin later than this node.
    tokio::time::advance(due() - settings().lease).await;
    assert_eq!(detector.check(&around).await, Check::PeerLeaseRunning(3));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(detector.check(&around).await, Check::Stood);
    assert_eq!(around.elections(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_voter_that_says_its_lease_is_over_is_asked_without_the_margin() {
    let around = Scripted::new();
    around.set_peer(3, Some(tip(3, 10)), Some(settings().lease));
    let mut detector = Detector::new(settings());
    tokio::time::advance(settings().lease).await;
    assert_eq!(detector.check(&around).await, Check::Stood);
}

#[tokio::test(start_paused = true)]
async fn a_voter_whose_lease_still_runs_holds_the_election_back() {
    let around = Scripted::new();
    let renewed_later = settings().lease - Duration::from_millis(1);
    around.set_peer(3, Some(tip(3, 10)), Some(renewed_later));
    let mut detector = Detector::new(settings());
    // Past this node's own lease and margin: the peer's word decides.
    tokio::time::advance(due() + Duration::from_secs(1)).await;
    assert_eq!(detector.check(&around).await, Check::PeerLeaseRunning(3));
    assert_eq!(around.elections(), 0);
    around.set_peer(3, Some(tip(3, 10)), Some(settings().lease));
    assert_eq!(detector.check(&around).await, Check::Stood);
}

#[tokio::test(start_paused = true)]
async fn contact_with_the_leader_keeps_the_lease_running() {
    let around = Scripted::new();
    let mut detector = Detector::new(settings());
    for _ in 0..30 {
        tokio::time::advance(Duration::from_millis(500)).await;
        around.contact.heard();
        assert_eq!(detector.check(&around).await, Check::LeaseRunning);
    }
    assert_eq!(around.elections(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_address_accepts_connections_is_left_to_openraft() {
    let around = Scripted::new();
    *around.unreachable.lock().unwrap() = false;
    let mut detector = Detector::new(settings());
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(detector.check(&around).await, Check::LeaderMayLive);
    assert_eq!(around.elections(), 0);
}

#[tokio::test(start_paused = true)]
async fn only_a_voter_following_another_node_stands() {
    type Change = fn(&mut View);
    let cases: [(&str, Change); 4] = [
        ("no leader known", |view| view.leader = None),
        ("this node leads", |view| {
            view.leader = Some(ME);
            view.state = ServerState::Leader;
        }),
        ("already a candidate", |view| {
            view.state = ServerState::Candidate
        }),
        ("a learner", |view| {
            view.state = ServerState::Learner;
            view.voters = voters(&[1, 3]);
        }),
    ];
    for (case, change) in cases {
        let around = Scripted::new();
        around.set_view(change);
        let mut detector = Detector::new(settings());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(detector.check(&around).await, Check::NotFollowing, "{case}");
        assert_eq!(around.probes.load(Ordering::SeqCst), 0, "{case}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_peer_with_a_more_complete_log_is_left_to_stand() {
    // Term first, then index, as openraft orders log ids: 4-2 is ahead of 3-10.
    for longer in [tip(3, 11), tip(4, 2)] {
        let around = Scripted::new();
        around.set_peer(3, Some(longer), None);
        let mut detector = Detector::new(settings());
        tokio::time::advance(due()).await;
        assert_eq!(detector.check(&around).await, Check::PeerLogLonger(3));
        assert_eq!(around.elections(), 0, "{longer:?}");
    }
    for shorter in [tip(3, 9), tip(2, 40)] {
        let around = Scripted::new();
        around.set_peer(3, Some(shorter), None);
        let mut detector = Detector::new(settings());
        tokio::time::advance(due()).await;
        assert_eq!(detector.check(&around).await, Check::Stood, "{shorter:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_logs_as_complete_the_lower_id_stands_first() {
    let around = Scripted::new();
    around.set_view(|view| view.me = 3);
    around.set_peer(2, Some(tip(3, 10)), None);
    let mut detector = Detector::new(settings());
    tokio::time::advance(due()).await;
    assert_eq!(detector.check(&around).await, Check::Staggered(2));
    tokio::time::advance(settings().stagger - Duration::from_millis(1)).await;
    assert_eq!(detector.check(&around).await, Check::Staggered(2));
    assert_eq!(around.elections(), 0);
    // Node 2 did not take over in that time (its view never showed this node a candidate).
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(detector.check(&around).await, Check::Stood);

    let lower = Scripted::new();
    lower.set_peer(3, Some(tip(3, 10)), None);
    let mut detector = Detector::new(settings());
    tokio::time::advance(due()).await;
    assert_eq!(
        detector.check(&lower).await,
        Check::Stood,
        "the lower id does not wait"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_a_lower_id_interrupted_by_the_leader_starts_over() {
    let around = Scripted::new();
    around.set_view(|view| view.me = 3);
    around.set_peer(2, Some(tip(3, 10)), None);
    let mut detector = Detector::new(settings());
    tokio::time::advance(due()).await;
    assert_eq!(detector.check(&around).await, Check::Staggered(2));
    around.contact.heard();
    assert_eq!(detector.check(&around).await, Check::LeaseRunning);
    tokio::time::advance(due()).await;
    assert_eq!(detector.check(&around).await, Check::Staggered(2));
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_does_not_say_its_log_does_not_hold_this_node_back() {
    let around = Scripted::new();
    around.set_view(|view| view.me = 3);
    around.set_peer(2, None, None);
    let mut detector = Detector::new(settings());
    tokio::time::advance(due()).await;
    assert_eq!(detector.check(&around).await, Check::Stood);
}

#[tokio::test(start_paused = true)]
async fn one_election_per_leader_and_term() {
    let around = Scripted {
        // Raft has not shown the candidacy yet when the next check runs.
        elect_keeps_view: true,
        ..Scripted::new()
    };
    let mut detector = Detector::new(settings());
    tokio::time::advance(due()).await;
    assert_eq!(detector.check(&around).await, Check::Stood);
    for _ in 0..10 {
        tokio::time::advance(settings().check_every).await;
        assert_eq!(detector.check(&around).await, Check::AlreadyStood);
    }
    assert_eq!(around.elections(), 1);
    // A leader of a later term that dies in turn is stood against again.
    around.set_view(|view| view.term = 5);
    assert_eq!(detector.check(&around).await, Check::Stood);
    assert_eq!(around.elections(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_loop_stands_once_after_the_lease() {
    let around = Arc::new(Scripted::new());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(Shared(around.clone()), settings(), stopped));
    let step = Duration::from_millis(10);
    let mut waited = Duration::ZERO;
    while waited < due() {
        assert_eq!(around.elections(), 0, "stood after {waited:?}");
        tokio::time::advance(step).await;
        waited += step;
    }
    // The next check, at most one interval later.
    tokio::time::advance(settings().check_every).await;
    tokio::task::yield_now().await;
    assert_eq!(around.elections(), 1);
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(around.elections(), 1);
    stop.send(true).unwrap();
    task.await.unwrap();
}

/// [`Scripted`] shared between the loop and the test.
struct Shared(Arc<Scripted>);

impl Surroundings for Shared {
    fn view(&self) -> View {
        self.0.view()
    }

    fn silence(&self) -> Duration {
        self.0.silence()
    }

    async fn leader_unreachable(&self, address: &str) -> bool {
        self.0.leader_unreachable(address).await
    }

    async fn peer_report(&self, peer: NodeId, address: &str) -> Option<PeerReport> {
        self.0.peer_report(peer, address).await
    }

    async fn elect(&self) {
        self.0.elect().await
    }
}

/// An address is unreachable when nothing listens there (refused) or nothing answers from
/// there (a connection that does not complete in time: a partition, a host gone); one that
/// accepts is not, and neither is a URL that names no address.
#[tokio::test]
async fn an_address_is_unreachable_when_it_refuses_or_does_not_answer() {
    let bound = Duration::from_millis(300);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = listener.local_addr().unwrap();
    assert!(!unreachable(&format!("http://{open}"), bound).await);
    assert!(!unreachable(&format!("https://{open}/some/path"), bound).await);
    // A port held bound but never listened on refuses every connection, and stays ours for the
    // test's life: a port freed instead could be taken by another test's listener meanwhile.
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = refusing.local_addr().unwrap();
    assert!(unreachable(&format!("http://{closed}"), bound).await);
    assert!(unreachable(&format!("https://{closed}"), bound).await);
    assert!(!unreachable("not a url", bound).await);
    // A listener that never accepts and whose queue is full: its kernel drops every further
    // SYN, as a partition does, so no connection completes.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let silent = socket.listen(1).unwrap();
    let silent_address = silent.local_addr().unwrap();
    let mut queued = Vec::new();
    for _ in 0..8 {
        let connect = TcpStream::connect(silent_address);
        if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_millis(100), connect).await {
            queued.push(stream);
        }
    }
    assert!(unreachable(&format!("http://{silent_address}"), bound).await);
}

/// The decision is pure around the probes: the same view, silence, instant and answers give the
/// same check, and the peers are weighed in the view's order whatever order their answers came
/// in (a longer log ahead of a running lease decides first).
#[test]
fn the_decision_after_the_probes_weighs_the_peers_in_the_views_order() {
    let view = View {
        me: ME,
        state: ServerState::Follower,
        term: 3,
        leader: Some(LEADER),
        voters: voters(&[1, 2, 3, 4]),
        last_log: Some(tip(3, 10)),
    };
    let now = Instant::now();
    let silence = due();
    let detector = Detector::new(settings());
    assert_eq!(
        detector.before_probes(&view, silence),
        Ok("http://127.0.0.1:7001")
    );
    assert_eq!(
        detector.peers_to_ask(&view),
        voters(&[3, 4]),
        "neither this node nor the leader is asked"
    );
    let longer = PeerReport {
        log: Some(tip(3, 11)),
        lease_silence: None,
    };
    let leased = PeerReport {
        log: Some(tip(3, 10)),
        lease_silence: Some(Duration::ZERO),
    };
    let probes = Probes::LeaderUnreachable(vec![(3, Some(longer)), (4, Some(leased))]);
    assert_eq!(
        Detector::new(settings()).after_probes(&view, silence, now, &probes),
        Check::PeerLogLonger(3)
    );
    let probes = Probes::LeaderUnreachable(vec![(3, Some(leased)), (4, Some(longer))]);
    assert_eq!(
        Detector::new(settings()).after_probes(&view, silence, now, &probes),
        Check::PeerLeaseRunning(3)
    );
    assert_eq!(
        Detector::new(settings()).after_probes(&view, silence, now, &Probes::LeaderMayLive),
        Check::LeaderMayLive
    );
}
