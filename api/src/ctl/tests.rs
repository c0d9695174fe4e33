//! The CLI's arguments, exit codes and output, without a cluster.

use super::*;
use crate::wire::{AuditRecordView, HandoffView, MaintenanceView, Member, ShardEpoch};

#[test]
fn the_cli_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn help_documents_the_exit_codes() {
    let help = Cli::command().render_long_help().to_string();
    for line in [
        "3  no leader",
        "4  not found",
        "5  unreachable",
        "2  bad input",
        "7  not safe to stop",
    ] {
        assert!(help.contains(line), "{help}");
    }
}

#[test]
fn endpoints_are_a_comma_list_and_output_a_choice() {
    let cli = Cli::try_parse_from([
        "leaseholdctl",
        "--endpoints",
        "http://a:1,http://b:2",
        "executor",
        "list",
        "-o",
        "json",
    ])
    .unwrap();
    assert_eq!(cli.endpoints, ["http://a:1", "http://b:2"]);
    assert_eq!(cli.output, OutputFormat::Json);
    let bad = Cli::try_parse_from(["leaseholdctl", "-o", "yaml", "shard", "list"]).unwrap_err();
    assert_eq!(bad.exit_code(), 2);
}

fn info(node_id: u64, leader: Option<u64>) -> ClusterInfo {
    ClusterInfo {
        node_id,
        leader_id: leader,
        leader_address: None,
        term: 3,
        voters: vec![
            Member {
                node_id: 1,
                address: "http://m1:1".into(),
                release: None,
                newest_schema: None,
            },
            Member {
                node_id: 2,
                address: "http://m2:1".into(),
                release: None,
                newest_schema: None,
            },
        ],
        learners: vec![Member {
            node_id: 3,
            address: "http://m3:1".into(),
            release: None,
            newest_schema: None,
        }],
        last_log_index: Some(20),
        committed_index: Some(20),
        applied_index: Some(18),
        snapshot: None,
        release: Some("0.2.0".into()),
        cluster_version: Some(3),
        schemas: Some(SchemaRange {
            oldest: 2,
            newest: 3,
        }),
    }
}

#[test]
fn cluster_status_table_shows_roles_states_and_unreachable_members() {
    let statuses = vec![
        MemberStatus {
            node_id: 1,
            address: "http://m1:1".into(),
            voter: true,
            info: Some(info(1, Some(1))),
            lag: Some(2),
            error: None,
        },
        MemberStatus {
            node_id: 2,
            address: "http://m2:1".into(),
            voter: true,
            info: None,
            lag: None,
            error: Some("refused".into()),
        },
    ];
    assert_eq!(
        render_cluster_status(&statuses),
        "ID  ADDRESS      ROLE   STATE        LEADER  TERM  LAST_LOG  COMMITTED  APPLIED  LAG  RELEASE  SCHEMAS  CLUSTER_VERSION\n\
         1   http://m1:1  voter  leader       1       3     20        20         18       2    0.2.0    2-3      3\n\
         2   http://m2:1  voter  unreachable  -       -     -         -          -        -    -        -        -\n"
    );
}

#[test]
fn member_table_lists_voters_and_learners_by_id() {
    assert_eq!(
        render_members(&info(2, Some(2))),
        "ID  ADDRESS      ROLE     LEADER\n\
         1   http://m1:1  voter    no\n\
         2   http://m2:1  voter    yes\n\
         3   http://m3:1  learner  no\n"
    );
}

#[test]
fn shard_tables_name_the_state() {
    let shards = vec![
        ShardView {
            shard: 0,
            owner: Some("ex-4".into()),
            epoch: 2,
            handoff: None,
            load: Some(41.666),
            hot: true,
            pinned_to: None,
            secondaries: Vec::new(),
        },
        ShardView {
            shard: 1,
            owner: Some("ex-4".into()),
            epoch: 1,
            handoff: Some(HandoffView {
                to: Some("ex-9".into()),
                revoke_revision: 30,
                completes_by_expiry_in_ms: 2_500,
            }),
            load: Some(0.0031249),
            hot: false,
            pinned_to: None,
            secondaries: Vec::new(),
        },
        ShardView {
            shard: 2,
            owner: None,
            epoch: 0,
            handoff: None,
            load: None,
            hot: false,
            pinned_to: Some("ex-9".into()),
            secondaries: Vec::new(),
        },
    ];
    assert_eq!(
        render_shards(&shards),
        "SHARD  OWNER  EPOCH  STATE      HANDOFF_TO  LOAD     HOT  PINNED\n\
         0      ex-4   2      serving    -           41.7     yes  -\n\
         1      ex-4   1      releasing  ex-9        0.00312  no   -\n\
         2      -      0      unowned    -           -        no   ex-9\n\
         total: 3 shards; per owner: ex-4 2; unowned: 1; in handoff: 1\n"
    );
}

/// `shard list`'s summary counts per owner in id order (`ex-9` before `ex-10`), a releasing
/// shard with its owner and as in handoff, and says when no shard has an owner.
#[test]
fn shard_list_ends_with_a_summary_line() {
    let shard = |shard: u32, owner: Option<&str>, releasing: bool| ShardView {
        shard,
        owner: owner.map(str::to_owned),
        epoch: 1,
        handoff: releasing.then_some(HandoffView {
            to: None,
            revoke_revision: 3,
            completes_by_expiry_in_ms: 1_000,
        }),
        load: None,
        hot: false,
        pinned_to: None,
        secondaries: Vec::new(),
    };
    let shards = [
        shard(0, Some("ex-10"), false),
        shard(1, Some("ex-9"), true),
        shard(2, Some("ex-10"), false),
        shard(3, None, false),
        shard(4, Some("ex-9"), false),
        shard(5, Some("ex-10"), false),
    ];
    assert_eq!(
        shards_summary(&shards),
        "total: 6 shards; per owner: ex-9 2, ex-10 3; unowned: 1; in handoff: 1\n"
    );
    let rendered = render_shards(&shards);
    assert_eq!(rendered.lines().count(), 1 + shards.len() + 1, "{rendered}");
    assert!(rendered.ends_with(&shards_summary(&shards)), "{rendered}");
    assert_eq!(
        shards_summary(&[shard(0, None, false), shard(1, None, false)]),
        "total: 2 shards; per owner: none; unowned: 2; in handoff: 0\n"
    );
}

fn named_executor(id: &str, name: Option<&str>) -> ExecutorView {
    ExecutorView {
        name: name.map(str::to_owned),
        ..executor_of(id, None, &[])
    }
}

/// Executor commands take a name as kubectl does: an id (`ex-N`) is used as it is; a name must
/// be that of exactly one executor; none is not found (exit 4) and lists the executors there
/// are, several is bad input (exit 2) naming their ids.
#[test]
fn an_executor_name_resolves_to_the_one_executor_so_named() {
    let executors = [
        named_executor("ex-4", Some("executor-1")),
        named_executor("ex-5", Some("executor-3")),
        named_executor("ex-6", None),
        named_executor("ex-7", Some("twin")),
        named_executor("ex-8", Some("twin")),
    ];
    assert_eq!(executor_id_named("executor-3", &executors).unwrap(), "ex-5");
    assert_eq!(executor_id_named("executor-1", &executors).unwrap(), "ex-4");
    // An id is taken as it is, registered or not (the managers answer for an unknown one).
    assert_eq!(executor_id_named("ex-6", &executors).unwrap(), "ex-6");
    assert_eq!(executor_id_named("ex-3", &executors).unwrap(), "ex-3");
    assert!(is_executor_id("ex-12"));
    for not_an_id in ["ex-", "ex-3a", "EX-3", "executor-3", "ex--3", ""] {
        assert!(!is_executor_id(not_an_id), "{not_an_id:?}");
    }

    let missing = executor_id_named("executor-9", &executors).unwrap_err();
    assert_eq!(missing.exit_code(), 4);
    assert_eq!(
        missing.to_string(),
        "no executor is named executor-9, and it is not an executor id (ex-N); registered: \
         executor-1 (ex-4), executor-3 (ex-5), ex-6 (no name), twin (ex-7), twin (ex-8)"
    );
    let none_registered = executor_id_named("executor-3", &[]).unwrap_err();
    assert_eq!(none_registered.exit_code(), 4);
    assert!(
        none_registered
            .to_string()
            .ends_with("no executor is registered"),
        "{none_registered}"
    );
    let ambiguous = executor_id_named("twin", &executors).unwrap_err();
    assert_eq!(ambiguous.exit_code(), 2);
    assert_eq!(
        ambiguous.to_string(),
        "2 executors are named twin (ex-7, ex-8): give the id of the one you mean"
    );
    // A name is matched exactly, not as a prefix or ignoring case.
    for near in ["executor", "Executor-3", "executor-3 "] {
        assert_eq!(
            executor_id_named(near, &executors).unwrap_err().exit_code(),
            4,
            "{near:?}"
        );
    }

    // What no executor can be named is bad input, not a name nobody has.
    for impossible in [String::new(), "x".repeat(MAX_NAME_BYTES + 1)] {
        let error = executor_id_named(&impossible, &executors).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{error}");
        assert!(
            error.to_string().contains("neither an executor id"),
            "{error}"
        );
    }
    assert_eq!(
        executor_id_named(&"x".repeat(MAX_NAME_BYTES), &executors)
            .unwrap_err()
            .exit_code(),
        4
    );

    // Against thousands of executors, a typo lists a few and counts the rest.
    let many: Vec<ExecutorView> = (0..25)
        .map(|n| named_executor(&format!("ex-{n}"), Some(&format!("e{n}"))))
        .collect();
    let message = executor_id_named("typo", &many).unwrap_err().to_string();
    assert!(message.ends_with("e9 (ex-9), and 15 more"), "{message}");
}

/// The executor commands resolve a name through the API (one listing, then the call with the
/// id) and send an id without a listing first.
#[tokio::test]
async fn executor_commands_take_a_name_and_send_its_id() {
    let fake = FakeManager::start().await;
    for (args, requests) in [
        (
            &["executor", "drain", "orders-1"][..],
            &["GET /v1/executors", "POST /v1/executors/ex-1/drain"][..],
        ),
        (
            &["executor", "drain", "ex-1"],
            &["POST /v1/executors/ex-1/drain"],
        ),
        (
            &["executor", "show", "orders-1"],
            &["GET /v1/executors", "GET /v1/executors/ex-1"],
        ),
        (
            &["-n", "orders", "executor", "safe-to-stop", "orders-1"],
            &[
                "GET /v1/executors?namespace=orders",
                "GET /v1/executors/ex-1",
                "GET /v1/executors/ex-1/safe-to-stop",
                "GET /v1/executors?namespace=orders",
            ],
        ),
    ] {
        let printed = fake
            .ctl(args)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(printed.contains("ex-1"), "{args:?}: {printed}");
        assert_eq!(fake.requests(), requests, "{args:?}");
    }
    let drained = fake.ctl(&["executor", "drain", "orders-1"]).await.unwrap();
    assert!(drained.contains("draining:         yes\n"), "{drained}");
    fake.requests();

    // A name nobody has is not found, and nothing but the listing was sent.
    let error = fake
        .ctl(&["executor", "drain", "executor-3"])
        .await
        .unwrap_err();
    assert_eq!(error.exit_code(), 4, "{error}");
    assert_eq!(
        error.to_string(),
        "no executor is named executor-3, and it is not an executor id (ex-N); registered: \
         orders-1 (ex-1)"
    );
    assert_eq!(fake.requests(), ["GET /v1/executors"]);
    let error = fake
        .ctl(&["executor", "drain", &"x".repeat(MAX_NAME_BYTES + 1)])
        .await
        .unwrap_err();
    assert_eq!(error.exit_code(), 2, "{error}");
    assert_eq!(fake.requests(), Vec::<String>::new(), "nothing asked");
}

#[test]
fn executor_details_collapse_shards_into_ranges() {
    let executor = ExecutorView {
        namespace: DEFAULT_NAMESPACE.into(),
        executor_id: "ex-4".into(),
        incarnation: "inc".into(),
        name: None,
        address: "http://e:1".into(),
        lease_remaining_ms: 3_200,
        registered_revision: 4,
        shards: [0, 1, 2, 5]
            .map(|shard| ShardEpoch { shard, epoch: 1 })
            .to_vec(),
        draining: true,
        capacity: 2,
        load: Some(1250.4),
        utilisation: Some(625.2),
        app_version: Some("2.1.0".into()),
        labels: [("rack", "r7"), ("zone", "eu-1a")]
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .into(),
    };
    assert_eq!(
        render_executor(&executor),
        "executor:         ex-4\n\
         name:             -\n\
         address:          http://e:1\n\
         incarnation:      inc\n\
         lease remaining:  3.2s\n\
         draining:         yes\n\
         capacity:         2\n\
         app version:      2.1.0\n\
         labels:           rack=r7,zone=eu-1a\n\
         load:             1250\n\
         utilisation:      625\n\
         registered:       revision 4\n\
         shard count:      4\n\
         shards:           0-2,5\n"
    );
}

/// Every command's `--help` lists its own flags first and the options every command takes under
/// a heading of their own after them: `namespace create` had its 7 flags shuffled among the 9
/// global ones.
#[test]
fn each_commands_help_lists_its_own_flags_before_the_global_ones() {
    fn leaf_commands(
        command: &clap::Command,
        path: Vec<String>,
        leaves: &mut Vec<(Vec<String>, Vec<String>)>,
    ) {
        if command.has_subcommands() {
            for sub in command.get_subcommands() {
                let mut sub_path = path.clone();
                sub_path.push(sub.get_name().to_owned());
                leaf_commands(sub, sub_path, leaves);
            }
        } else {
            let own_flags = command
                .get_arguments()
                .filter_map(|arg| arg.get_long())
                .map(|long| format!("--{long}"))
                .collect();
            leaves.push((path, own_flags));
        }
    }
    let root = Cli::command();
    let global_flags: Vec<String> = root
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .filter_map(|arg| arg.get_long())
        .map(|long| format!("--{long}"))
        .collect();
    assert!(global_flags.len() >= 9, "{global_flags:?}");
    let mut leaves = Vec::new();
    leaf_commands(&root, Vec::new(), &mut leaves);
    let heading = format!("\n{GLOBAL_OPTIONS_HEADING}:\n");
    let flag_at = |text: &str, flag: &str| {
        text.lines()
            .any(|line| line.trim_start().split([' ', ',']).any(|word| word == flag))
    };
    for (path, own_flags) in &leaves {
        let mut args = vec!["leaseholdctl".to_owned()];
        args.extend(path.iter().cloned());
        args.push("--help".to_owned());
        let help = Cli::try_parse_from(&args).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}");
        let help = help.to_string();
        let (own, global) = help
            .split_once(&heading)
            .unwrap_or_else(|| panic!("{args:?}: no {GLOBAL_OPTIONS_HEADING:?} heading:\n{help}"));
        for flag in own_flags {
            assert!(
                flag_at(own, flag),
                "{args:?}: {flag} is not before the global options:\n{help}"
            );
        }
        // `certs issue` takes `-n` repeated: a flag of its own in place of the global one.
        for flag in global_flags.iter().filter(|flag| !own_flags.contains(flag)) {
            assert!(
                flag_at(global, flag),
                "{args:?}: {flag} is not under {GLOBAL_OPTIONS_HEADING:?}:\n{help}"
            );
            assert!(
                !flag_at(own, flag),
                "{args:?}: {flag} is among the command's own flags:\n{help}"
            );
        }
    }
    let namespace_create = leaves
        .iter()
        .find(|(path, _)| path == &["namespace", "create"])
        .expect("namespace create");
    assert_eq!(namespace_create.1.len(), 11, "{namespace_create:?}");
}

/// `snapshot save` and `snapshot inspect` print when the backup was made as RFC 3339 in UTC;
/// `-o json` prints the header itself, with the number.
#[test]
fn a_backups_creation_time_is_printed_in_utc() {
    let header = crate::backup::BackupHeader {
        format_version: 1,
        state_schema_version: 12,
        revision: 7,
        shard_count: 64,
        created_at_unix_ms: 1_796_527_923_019,
        source_node_id: 2,
        payload_length: 100,
        payload_sha256: "ab".repeat(32),
        seal: None,
    };
    let text = render_backup_header(&header, None);
    assert!(
        text.lines()
            .any(|line| line.starts_with("created at")
                && line.ends_with(" 2026-12-06T03:32:03.019Z")),
        "{text}"
    );
    assert!(!text.contains("1796527923019"), "{text}");
    let json = serde_json::to_value(&header).unwrap();
    assert_eq!(json["created_at_unix_ms"], 1_796_527_923_019_u64);
}

/// P17.4: `safe-to-stop` parses for executors and members, and prints the verdict with its
/// reason; a verdict of not safe is exit code 7.
#[test]
fn safe_to_stop_prints_the_verdict_and_exits_7_when_not_safe() {
    for args in [
        ["leaseholdctl", "executor", "safe-to-stop", "ex-7"],
        ["leaseholdctl", "member", "safe-to-stop", "2"],
    ] {
        Cli::try_parse_from(args).unwrap();
    }
    let bad = Cli::try_parse_from(["leaseholdctl", "member", "safe-to-stop", "two"]).unwrap_err();
    assert_eq!(bad.exit_code(), 2);
    let verdict = |safe| SafeToStop {
        safe,
        reason: "because".into(),
    };
    // One line each, ended (it had no newline: the shell's prompt followed it).
    assert_eq!(
        render_verdict("executor ex-7", &verdict(true)),
        "executor ex-7: safe to stop: because\n"
    );
    assert_eq!(
        render_verdict("manager 2", &verdict(false)),
        "manager 2: not safe to stop: because\n"
    );
    // The reason may quote an executor's name (issue 55, finding 10).
    assert_eq!(
        render_verdict(
            "executor ex-7",
            &SafeToStop {
                safe: false,
                reason: "ex-7\u{200e} holds shard 3\n".into(),
            }
        ),
        "executor ex-7: not safe to stop: ex-7\\u{200e} holds shard 3\\n\n"
    );
    let mut printed = Vec::new();
    let mut out = Out {
        format: OutputFormat::Table,
        writer: &mut printed,
    };
    let unsafe_stop = show_verdict("manager 2", &verdict(false), &mut out).unwrap_err();
    assert_eq!(unsafe_stop.exit_code(), 7);
    assert!(show_verdict("manager 2", &verdict(true), &mut out).is_ok());
}

/// An executor of `version` holding `shards`, live and not draining.
fn executor_of(id: &str, version: Option<&str>, shards: &[u32]) -> ExecutorView {
    ExecutorView {
        namespace: DEFAULT_NAMESPACE.into(),
        executor_id: id.into(),
        incarnation: "inc".into(),
        name: None,
        address: format!("http://{id}:1"),
        lease_remaining_ms: 3_000,
        registered_revision: 4,
        shards: shards
            .iter()
            .map(|&shard| ShardEpoch { shard, epoch: 1 })
            .collect(),
        draining: false,
        capacity: 1,
        load: None,
        utilisation: None,
        app_version: version.map(str::to_owned),
        labels: Default::default(),
    }
}

/// P17.3: while the executors that take shards run more than one version, `executor list` says
/// that a rollout is under way and names the executors of the newest version that hold nothing
/// and wait, by design, for an older one to stop; `safe-to-stop` says so of the executor asked
/// about. A deploy script waiting for the joiner to hold shards before stopping an old executor
/// waited 36–40 s for nothing.
#[test]
fn p17_3_executor_list_and_safe_to_stop_say_that_a_joiner_of_a_newer_version_waits() {
    let old = executor_of("ex-1", Some("1.4"), &[0, 1]);
    let other_old = executor_of("ex-2", Some("1.4.0"), &[2, 3]);
    let joiner = executor_of("ex-3", Some("2.0"), &[]);
    let fleet = vec![old.clone(), other_old.clone(), joiner.clone()];
    let listed = render_executors(&fleet);
    assert!(
        listed.contains(
            "rollout to application version 2.0 under way (P17.3): executors of 2.0 take shards \
             only as executors of older versions stop or drain"
        ),
        "{listed}"
    );
    assert!(
        listed.contains("ex-3 of 2.0 hold no shards, by design, until an older executor stops"),
        "{listed}"
    );
    let stop_old = rollout_line(&old, &fleet).expect("a rollout is under way");
    assert!(
        stop_old.starts_with(
            "rollout to application version 2.0 under way (P17.3): the executors of 2.0 take \
             shards only as executors of older versions, like this one, stop or drain"
        ),
        "{stop_old}"
    );
    assert!(stop_old.ends_with('\n'));
    let stop_joiner = rollout_line(&joiner, &fleet).expect("a rollout is under way");
    assert!(
        stop_joiner.contains("this executor, of 2.0, takes shards only as executors of older"),
        "{stop_joiner}"
    );

    // One version (1.4 and 1.4.0 are one), or the joiner draining or lapsed: no rollout, and
    // nothing said.
    let agreed = vec![old.clone(), other_old.clone()];
    assert!(!render_executors(&agreed).contains("rollout"));
    assert_eq!(rollout_line(&old, &agreed), None);
    let draining = ExecutorView {
        draining: true,
        ..joiner.clone()
    };
    let lapsed = ExecutorView {
        lease_remaining_ms: 0,
        ..joiner.clone()
    };
    for gone in [draining, lapsed] {
        let fleet = vec![old.clone(), other_old.clone(), gone];
        assert_eq!(rollout_line(&old, &fleet), None);
        assert!(!render_executors(&fleet).contains("rollout"));
    }
    // An executor that states no version is older than any that does.
    let unstated = executor_of("ex-4", None, &[4]);
    let fleet = vec![unstated.clone(), joiner];
    assert!(rollout_line(&unstated, &fleet).is_some_and(|line| line.contains("like this one")));
    // A rollout whose newer executors all hold shards names no one waiting.
    let served = vec![old, executor_of("ex-5", Some("2.0"), &[5])];
    let listed = render_executors(&served);
    assert!(
        listed.contains("rollout to application version 2.0"),
        "{listed}"
    );
    assert!(!listed.contains("hold no shards"), "{listed}");
}

/// P6.6: a follower's `/v1/state` shows each lease's bound, the reservation, about twice the
/// lease: `lease list` says what the figure is then, and nothing when the leader answered.
#[test]
fn p6_6_lease_list_says_a_follower_s_figure_is_the_reservation() {
    let mut state = StateView {
        generation: 0,
        revision: 9,
        shard_count: 4,
        lease_duration_ms: 4_000,
        executors: vec![executor_of("ex-1", None, &[0])],
        shards: Vec::new(),
        maintenance: false,
        lease_remaining_is_bound: false,
    };
    let from_leader = render_leases(&state);
    assert!(!from_leader.contains("REMAINING is"), "{from_leader}");
    state.lease_remaining_is_bound = true;
    let from_follower = render_leases(&state);
    assert!(
        from_follower.contains(
            "REMAINING is what a follower knows: the longest each lease may run as the log \
             records it"
        ),
        "{from_follower}"
    );
    assert!(from_follower.contains("The leader's answer (--consistent) is exact.\n"));
    // On the wire the field is left out when false, and read as false when absent.
    let json = serde_json::to_value(StateView {
        lease_remaining_is_bound: false,
        ..state.clone()
    })
    .unwrap();
    assert!(json.get("lease_remaining_is_bound").is_none(), "{json}");
    let mut older = serde_json::to_value(&state).unwrap();
    assert_eq!(older["lease_remaining_is_bound"], true);
    older
        .as_object_mut()
        .unwrap()
        .remove("lease_remaining_is_bound");
    let read: StateView = serde_json::from_value(older).unwrap();
    assert!(!read.lease_remaining_is_bound);
}

/// P17.4: `leaseholdctl plan` shows each move with its owner now, or says nothing would move.
#[test]
fn plan_table_lists_each_move_with_its_reason() {
    let empty = PlanPreview {
        revision: 42,
        moves: Vec::new(),
        capped: false,
        rollout_to: None,
    };
    assert_eq!(render_plan(&empty), "nothing would move (revision 42)\n");
    let waiting = PlanPreview {
        rollout_to: Some("2.0".into()),
        ..empty.clone()
    };
    assert!(
        render_plan(&waiting).starts_with("rollout to application version 2.0 under way"),
        "P17.3: {}",
        render_plan(&waiting)
    );
    let plan = PlanPreview {
        revision: 43,
        moves: vec![
            crate::wire::PlannedMove {
                shard: 3,
                from: Some("ex-1".into()),
                to: "ex-2".into(),
                reason: "drain".into(),
            },
            crate::wire::PlannedMove {
                shard: 7,
                from: None,
                to: "ex-2".into(),
                reason: "departure".into(),
            },
        ],
        capped: true,
        rollout_to: None,
    };
    let shown = render_plan(&plan);
    let lines: Vec<Vec<&str>> = shown
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["SHARD", "FROM", "TO", "REASON"], "{shown}");
    assert_eq!(lines[1], ["3", "ex-1", "ex-2", "drain"], "{shown}");
    assert_eq!(lines[2], ["7", "-", "ex-2", "departure"], "{shown}");
    assert!(
        shown.ends_with(
            "2 moves planned on revision 43, cut at the cap: more follow in the next plans\n"
        ),
        "{shown}"
    );
}

/// P17.4: the operator controls parse as documented; a bad switch or a move without `--to` is a
/// usage error (exit 2).
#[test]
fn p17_4_operator_commands_parse() {
    let parse = |args: &[&str]| {
        let mut argv = vec!["leaseholdctl"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|cli| cli.command)
    };
    assert!(matches!(
        parse(&["cluster", "maintenance"]).unwrap(),
        Noun::Cluster {
            verb: ClusterVerb::Maintenance { switch: None }
        }
    ));
    assert!(matches!(
        parse(&["cluster", "maintenance", "on"]).unwrap(),
        Noun::Cluster {
            verb: ClusterVerb::Maintenance {
                switch: Some(Switch::On)
            }
        }
    ));
    assert!(matches!(
        parse(&["cluster", "maintenance", "off"]).unwrap(),
        Noun::Cluster {
            verb: ClusterVerb::Maintenance {
                switch: Some(Switch::Off)
            }
        }
    ));
    match parse(&["shard", "move", "3", "--to", "ex-2"]).unwrap() {
        Noun::Shard {
            verb: ShardVerb::Move { shard: 3, to },
        } => assert_eq!(to, "ex-2"),
        other => panic!("{other:?}"),
    }
    match parse(&["-o", "json", "shard", "pin", "3", "ex-2"]).unwrap() {
        Noun::Shard {
            verb:
                ShardVerb::Pin {
                    shard: 3,
                    executor_id,
                },
        } => assert_eq!(executor_id, "ex-2"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&["shard", "unpin", "3"]).unwrap(),
        Noun::Shard {
            verb: ShardVerb::Unpin { shard: 3 }
        }
    ));
    assert!(matches!(parse(&["audit"]).unwrap(), Noun::Audit));
    for bad in [
        &["cluster", "maintenance", "maybe"][..],
        &["shard", "move", "3"],
        &["shard", "move", "3", "ex-2"],
        &["shard", "move", "three", "--to", "ex-2"],
        &["shard", "pin", "3"],
        &["shard", "unpin"],
        &["audit", "extra"],
    ] {
        let error = parse(bad).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{bad:?}: {error}");
    }
}

/// P17.4: shell completion (from clap) offers the new commands.
#[test]
fn p17_4_completion_offers_the_operator_commands() {
    let mut script = Vec::new();
    clap_complete::generate(
        clap_complete::Shell::Bash,
        &mut Cli::command(),
        "leaseholdctl",
        &mut script,
    );
    let script = String::from_utf8(script).unwrap();
    for word in ["maintenance", "move", "pin", "unpin", "audit", "--to"] {
        assert!(script.contains(word), "{word}");
    }
}

/// P17.4: `cluster maintenance` says whether it is on and, when turned, whether that changed
/// anything.
#[test]
fn p17_4_maintenance_is_shown_and_its_change_named() {
    let view = |on, changed| MaintenanceView { on, changed };
    assert_eq!(
        render_maintenance(&view(false, false), None),
        "maintenance: off\n"
    );
    assert!(render_maintenance(&view(true, false), None)
        .starts_with("maintenance: on (placement frozen: no balancing, no shards for joiners"));
    assert_eq!(
        render_maintenance(&view(true, true), Some(Switch::On)),
        "maintenance: on (turned on now)\n"
    );
    assert_eq!(
        render_maintenance(&view(false, false), Some(Switch::Off)),
        "maintenance: off (unchanged: it was off already)\n"
    );
}

/// P17.4: `shard show` names the pin; a move's or pin's answer is the shard without a route.
#[test]
fn p17_4_shard_details_name_the_pin() {
    let view = ShardView {
        shard: 3,
        owner: Some("ex-1".into()),
        epoch: 4,
        handoff: None,
        load: None,
        hot: false,
        pinned_to: Some("ex-2".into()),
        secondaries: Vec::new(),
    };
    let state = StateView {
        generation: 0,
        revision: 9,
        shard_count: 4,
        lease_duration_ms: 4_000,
        executors: Vec::new(),
        shards: vec![view.clone()],
        maintenance: true,
        lease_remaining_is_bound: false,
    };
    assert_eq!(
        render_shard(&view, Some(&state.executors)),
        "shard:      3\n\
         owner:      ex-1\n\
         epoch:      4\n\
         state:      serving\n\
         route:      -\n\
         load:       -\n\
         hot:        no\n\
         pinned to:  ex-2\n"
    );
    let unpinned = ShardView {
        pinned_to: None,
        ..view
    };
    assert_eq!(
        render_shard(&unpinned, None),
        "shard:      3\n\
         owner:      ex-1\n\
         epoch:      4\n\
         state:      serving\n\
         load:       -\n\
         hot:        no\n\
         pinned to:  -\n"
    );
}

/// P19.1: a shard's secondaries show on one line, each ready, warming or lost; a shard without
/// any shows no such line.
#[test]
fn p19_1_shard_details_name_the_secondaries() {
    let secondary = |executor_id: &str, ready, lost_for_ms| crate::wire::SecondaryView {
        executor_id: executor_id.into(),
        ready,
        lost_for_ms,
    };
    let view = ShardView {
        shard: 3,
        owner: Some("ex-1".into()),
        epoch: 4,
        handoff: None,
        load: None,
        hot: false,
        pinned_to: None,
        secondaries: vec![
            secondary("ex-2", true, None),
            secondary("ex-3", false, None),
            secondary("ex-4", false, Some(30_000)),
        ],
    };
    let shown = render_shard(&view, None);
    assert!(
        shown.ends_with("secondaries:  ex-2 (ready), ex-3 (warming), ex-4 (lost 30.0s ago)\n"),
        "{shown}"
    );
    let single = ShardView {
        secondaries: Vec::new(),
        ..view
    };
    assert!(!render_shard(&single, None).contains("secondaries"));
}

fn record(revision: u64, at_ms: u64, action: &str) -> AuditRecordView {
    AuditRecordView {
        shard_count: None,
        revision,
        at_ms,
        actor: "admin CN=alice".into(),
        action: action.into(),
        namespace: None,
        executor_id: None,
        shard: None,
        node_id: None,
        address: None,
    }
}

/// P17.4: `audit` prints one row per record, oldest first, with its time in UTC to the
/// millisecond and one subject column.
#[test]
fn p17_4_audit_table_names_time_actor_action_and_subject() {
    assert_eq!(render_audit(&[]), "no operator actions recorded\n");
    let records = vec![
        record(5, 0, "maintenance_on"),
        AuditRecordView {
            executor_id: Some("ex-2".into()),
            shard: Some(3),
            ..record(7, 1_700_000_000_123, "move")
        },
        AuditRecordView {
            executor_id: Some("ex-1".into()),
            actor: "ex-1".into(),
            ..record(8, 1_700_000_001_005, "drain")
        },
        AuditRecordView {
            node_id: Some(4),
            address: Some("http://m4:7004".into()),
            actor: "anonymous (plaintext)".into(),
            ..record(12, 951_782_400_000, "member_add")
        },
        AuditRecordView {
            namespace: Some("kv".into()),
            shard_count: Some(128),
            ..record(13, 951_782_400_001, "namespace_reshard")
        },
        AuditRecordView {
            namespace: Some("kv".into()),
            shard: Some(5),
            executor_id: Some("ex-3".into()),
            ..record(14, 951_782_400_002, "pin")
        },
    ];
    assert_eq!(
        render_audit(&records),
        "REVISION  TIME                      ACTOR                  ACTION             SUBJECT\n\
         5         1970-01-01T00:00:00.000Z  admin CN=alice         maintenance_on     -\n\
         7         2023-11-14T22:13:20.123Z  admin CN=alice         move               shard 3, executor ex-2\n\
         8         2023-11-14T22:13:21.005Z  ex-1                   drain              executor ex-1\n\
         12        2000-02-29T00:00:00.000Z  anonymous (plaintext)  member_add         manager 4 (http://m4:7004)\n\
         13        2000-02-29T00:00:00.001Z  admin CN=alice         namespace_reshard  namespace kv to 128 shards\n\
         14        2000-02-29T00:00:00.002Z  admin CN=alice         pin                namespace kv, shard 5, executor ex-3\n"
    );
    // A full log says older records are gone.
    let full: Vec<AuditRecordView> = (0..MAX_AUDIT_RECORDS as u64)
        .map(|n| record(n + 1, n, "pin"))
        .collect();
    assert!(render_audit(&full)
        .ends_with("1024 records, the most the log keeps: older ones are gone\n"));
}

/// P17.4: times are UTC to the millisecond; one RFC 3339 cannot write is shown as its number,
/// not a panic.
#[test]
fn p17_4_audit_times_are_utc_rfc3339_to_the_millisecond() {
    assert_eq!(utc_millis(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(utc_millis(1_700_000_000_999), "2023-11-14T22:13:20.999Z");
    assert_eq!(utc_millis(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    assert_eq!(
        utc_millis(253_402_300_800_000),
        "253402300800000 ms after the epoch"
    );
    assert_eq!(
        utc_millis(u64::MAX),
        format!("{} ms after the epoch", u64::MAX)
    );
}

/// P17.4: `-o json` prints the wire types as they come.
#[test]
fn p17_4_json_output_is_the_wire_type() {
    let mut printed = Vec::new();
    let mut out = Out {
        format: OutputFormat::Json,
        writer: &mut printed,
    };
    let records = vec![AuditRecordView {
        shard: Some(3),
        ..record(7, 1_700_000_000_123, "unpin")
    }];
    out.show(&records, |r| render_audit(r)).unwrap();
    let parsed: Vec<AuditRecordView> = serde_json::from_slice(&printed).unwrap();
    assert_eq!(parsed, records);
}

fn namespace_view(name: &str, max_executors: Option<u32>, created_revision: u64) -> NamespaceView {
    NamespaceView {
        name: name.into(),
        shard_count: 16,
        lease_duration_ms: 60_000,
        max_executors,
        executors: 3,
        owned_shards: 12,
        created_revision,
        placement: Default::default(),
        ..NamespaceView::default()
    }
}

/// P18.1: `namespace list` is one row per namespace with its settings and use; an absent bound
/// prints as `-`, and `show` prints the same as `field: value` lines.
#[test]
fn p18_1_namespace_list_and_show_render_the_settings() {
    let namespaces = vec![
        NamespaceView {
            lease_duration_ms: 4_000,
            shard_count: 1024,
            ..namespace_view("default", None, 0)
        },
        namespace_view("orders", Some(5), 41),
    ];
    assert_eq!(
        render_namespaces(&namespaces),
        "NAME     SHARDS  LEASE  EXECUTORS  OWNED  MAX\n\
         default  1024    4.0s   3          12     -\n\
         orders   16      1m00s  3          12     5\n"
    );
    assert_eq!(
        render_namespaces(&[]),
        "NAME  SHARDS  LEASE  EXECUTORS  OWNED  MAX\n"
    );
    assert_eq!(
        render_namespace(&namespaces[1]),
        "namespace:       orders\n\
         shard count:     16\n\
         lease duration:  1m00s\n\
         max executors:   5\n\
         executors:       3\n\
         owned shards:    12\n\
         created:         revision 41\n\
         placement:       the managers' flags\n\
         replicas:        1 (no secondaries)\n"
    );
    let shown = render_namespace(&namespaces[0]);
    assert!(shown.contains("max executors:   -\n"), "{shown}");
    assert!(
        shown.contains("created:         with the cluster\n"),
        "{shown}"
    );
    // P19.1: its replicas, with the settings it left at their defaults said as such.
    let replicated = NamespaceView {
        replicas: Some(2),
        replica_restore_delay_ms: Some(30_000),
        ..namespace_view("orders", None, 41)
    };
    assert!(
        render_namespace(&replicated).ends_with(
            "replicas:        2 (secondary weight 0.5, restore delay 30s, min active 1)\n"
        ),
        "{}",
        render_namespace(&replicated)
    );
    // P18.4: its own placement settings, the rest following the managers' flags.
    let placed = NamespaceView {
        placement: crate::wire::NamespacePlacement {
            balance_tolerance_percent: Some(20),
            prefer: Some("zone=a".into()),
            ..Default::default()
        },
        ..namespace_view("orders", None, 41)
    };
    assert!(
        render_namespace(&placed).contains(
            "placement:       balance tolerance 20%, prefer zone=a (the rest: the managers' flags)\n"
        ),
        "{}",
        render_namespace(&placed)
    );
}

/// P18.1: `-o json` prints the namespace wire types as they come.
#[test]
fn p18_1_namespace_json_output_is_the_wire_type() {
    let namespaces = vec![
        namespace_view("default", None, 0),
        namespace_view("kv", Some(2), 9),
    ];
    let mut printed = Vec::new();
    let mut out = Out {
        format: OutputFormat::Json,
        writer: &mut printed,
    };
    out.show(&namespaces, |n| render_namespaces(n)).unwrap();
    let parsed: Vec<NamespaceView> = serde_json::from_slice(&printed).unwrap();
    assert_eq!(parsed, namespaces);

    let deleted = NamespaceDeleted {
        name: "kv".into(),
        already_gone: false,
        removed_executors: vec!["ex-3".into()],
    };
    let mut printed = Vec::new();
    let mut out = Out {
        format: OutputFormat::Json,
        writer: &mut printed,
    };
    out.show(&deleted, render_namespace_deleted).unwrap();
    let parsed: NamespaceDeleted = serde_json::from_slice(&printed).unwrap();
    assert_eq!(parsed, deleted);
}

/// P18.1: a deletion says whether it was a repeat and which idle executors went with it.
#[test]
fn p18_1_namespace_deletion_names_what_went_with_it() {
    let deleted = |already_gone, removed: &[&str]| NamespaceDeleted {
        name: "kv".into(),
        already_gone,
        removed_executors: removed.iter().map(|id| (*id).to_owned()).collect(),
    };
    assert_eq!(
        render_namespace_deleted(&deleted(false, &[])),
        "namespace kv deleted\n"
    );
    assert_eq!(
        render_namespace_deleted(&deleted(true, &[])),
        "namespace kv was deleted already\n"
    );
    assert_eq!(
        render_namespace_deleted(&deleted(false, &["ex-3", "ex-9\n"])),
        "namespace kv deleted\nremoved with it, holding nothing: ex-3, ex-9\\n\n"
    );
}

/// P18.1: an executor outside `default` names its namespace; one of `default` shows the lines
/// it showed before namespaces.
#[test]
fn p18_1_executor_details_name_a_namespace_other_than_default() {
    let executor = ExecutorView {
        namespace: "orders".into(),
        executor_id: "ex-4".into(),
        incarnation: "inc".into(),
        name: Some("w1".into()),
        address: "http://e:1".into(),
        lease_remaining_ms: 3_200,
        registered_revision: 4,
        shards: Vec::new(),
        draining: false,
        capacity: 1,
        load: None,
        utilisation: None,
        app_version: None,
        labels: Default::default(),
    };
    let shown = render_executor(&executor);
    assert!(
        shown.starts_with(
            "executor:         ex-4\nname:             w1\nnamespace:        orders\naddress:"
        ),
        "{shown}"
    );
    let in_default = ExecutorView {
        namespace: DEFAULT_NAMESPACE.into(),
        ..executor
    };
    assert!(!render_executor(&in_default).contains("namespace"));
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    let mut argv = vec!["leaseholdctl"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv)
}

/// P18.1: the namespace commands parse as documented; a lease is humantime into milliseconds.
#[test]
fn p18_1_namespace_commands_parse() {
    match parse(&["namespace", "create", "orders", "--shards", "64"])
        .unwrap()
        .command
    {
        Noun::Namespace {
            verb:
                NamespaceVerb::Create {
                    name,
                    shards: 64,
                    lease_ms: None,
                    max_executors: None,
                    placement,
                    replicas,
                },
        } => {
            assert_eq!(replicas, Default::default());
            assert_eq!(name, "orders");
            assert!(placement.settings().is_empty());
        }
        other => panic!("{other:?}"),
    }
    let argv = [
        "namespace",
        "create",
        "kv-2",
        "--shards",
        "1048576",
        "--lease",
        "1m 30s",
        "--max-executors",
        "7",
        "--load-placement",
        "false",
        "--balance-tolerance",
        "15%",
        "--max-balance-moves",
        "9",
        "--prefer",
        "zone=a",
    ];
    match parse(&argv).unwrap().command {
        Noun::Namespace {
            verb:
                NamespaceVerb::Create {
                    name,
                    shards: 1_048_576,
                    lease_ms: Some(90_000),
                    max_executors: Some(7),
                    placement,
                    ..
                },
        } => {
            assert_eq!(name, "kv-2");
            assert_eq!(
                placement.settings(),
                crate::wire::NamespacePlacement {
                    load_placement: Some(false),
                    balance_tolerance_percent: Some(15),
                    max_balance_moves_per_minute: Some(9),
                    prefer: Some("zone=a".into()),
                }
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(&["namespace", "list"]).unwrap().command,
        Noun::Namespace {
            verb: NamespaceVerb::List
        }
    ));
    assert!(matches!(
        parse(&["-o", "json", "namespace", "show", "default"])
            .unwrap()
            .command,
        Noun::Namespace {
            verb: NamespaceVerb::Show { .. }
        }
    ));
    for (args, lease, bound, unbound) in [
        (&["--lease", "250ms"][..], Some(250), None, false),
        (&["--max-executors", "3"], None, Some(3), false),
        (&["--no-max-executors"], None, None, true),
        (
            &["--lease", "24h", "--no-max-executors"],
            Some(86_400_000),
            None,
            true,
        ),
    ] {
        let mut argv = vec!["namespace", "set", "orders"];
        argv.extend_from_slice(args);
        match parse(&argv).unwrap().command {
            Noun::Namespace {
                verb:
                    NamespaceVerb::Set {
                        lease_ms,
                        max_executors,
                        no_max_executors,
                        ..
                    },
            } => assert_eq!(
                (lease_ms, max_executors, no_max_executors),
                (lease, bound, unbound)
            ),
            other => panic!("{other:?}"),
        }
    }
    // P18.4: placement flags alone are a change; `default` returns one to the managers' flag.
    let argv = [
        "namespace",
        "set",
        "orders",
        "--prefer",
        "default",
        "--balance-tolerance",
        "20",
    ];
    match parse(&argv).unwrap().command {
        Noun::Namespace {
            verb: NamespaceVerb::Set {
                name, placement, ..
            },
        } => {
            let request =
                set_request(&name, None, None, false, &placement, &Default::default()).unwrap();
            assert_eq!(request.placement.prefer, Some(None));
            assert_eq!(request.placement.balance_tolerance_percent, Some(Some(20)));
            assert_eq!(request.placement.load_placement, None);
            assert_eq!(
                serde_json::to_value(&request).unwrap(),
                serde_json::json!({"placement": {"balance_tolerance_percent": 20, "prefer": null}})
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(&["namespace", "set", "orders", "--prefer", "zone"]).is_err());
    match parse(&["namespace", "delete", "orders"]).unwrap().command {
        Noun::Namespace {
            verb: NamespaceVerb::Delete { name },
        } => assert_eq!(name, "orders"),
        other => panic!("{other:?}"),
    }
    // `-n` is global: before or after the command.
    assert_eq!(
        parse(&["-n", "orders", "shard", "list"])
            .unwrap()
            .namespace
            .as_deref(),
        Some("orders")
    );
    assert_eq!(
        parse(&["route", "k", "--namespace", "orders"])
            .unwrap()
            .namespace
            .as_deref(),
        Some("orders")
    );
    assert_eq!(parse(&["shard", "list"]).unwrap().namespace, None);
}

/// P18.1: a malformed name (here or in `-n`), shard count, lease or bound is a usage error
/// (exit 2) before any request.
#[test]
fn p18_1_bad_namespace_input_is_refused_at_parse() {
    for bad_name in ["Orders", "-a", "a-", "kv_store", "k.v", "", &"a".repeat(64)] {
        for argv in [
            vec!["namespace", "create", bad_name, "--shards", "4"],
            vec!["namespace", "show", bad_name],
            vec!["namespace", "set", bad_name, "--max-executors", "2"],
            vec!["namespace", "delete", bad_name],
            vec!["-n", bad_name, "shard", "list"],
        ] {
            let error = parse(&argv).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{argv:?}: {error}");
        }
    }
    let error = parse(&["namespace", "show", "Orders"])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("lowercase letters, digits and '-'"),
        "{error}"
    );
    for argv in [
        &["namespace", "create", "kv"][..],
        &["namespace", "create", "kv", "--shards", "0"],
        &["namespace", "create", "kv", "--shards", "1048577"],
        &["namespace", "create", "kv", "--shards", "-1"],
        &[
            "namespace",
            "create",
            "kv",
            "--shards",
            "4",
            "--lease",
            "0s",
        ],
        &[
            "namespace",
            "create",
            "kv",
            "--shards",
            "4",
            "--lease",
            "25h",
        ],
        &[
            "namespace",
            "create",
            "kv",
            "--shards",
            "4",
            "--lease",
            "1500us",
        ],
        &[
            "namespace",
            "create",
            "kv",
            "--shards",
            "4",
            "--lease",
            "soon",
        ],
        &[
            "namespace",
            "create",
            "kv",
            "--shards",
            "4",
            "--max-executors",
            "0",
        ],
        &["namespace", "set", "kv", "--max-executors", "0"],
        &["namespace", "show"],
        &["namespace", "delete", "a", "b"],
    ] {
        let error = parse(argv).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{argv:?}: {error}");
    }
    let error = parse(&[
        "namespace",
        "create",
        "kv",
        "--shards",
        "4",
        "--lease",
        "25h",
    ])
    .unwrap_err()
    .to_string();
    assert!(error.contains("from 1ms to 1day"), "{error}");
}

/// P18.1: `namespace set` with nothing to change, or contradicting itself, is a usage error:
/// sent, it would succeed and change nothing.
#[test]
fn p18_1_namespace_set_needs_one_change() {
    let error = parse(&["namespace", "set", "orders"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    let message = error.to_string();
    assert!(
        message.contains("--lease") && message.contains("--no-max-executors"),
        "{message}"
    );
    let error = parse(&[
        "namespace",
        "set",
        "orders",
        "--max-executors",
        "2",
        "--no-max-executors",
    ])
    .unwrap_err();
    assert_eq!(error.exit_code(), 2, "{error}");

    // The same rules where the request is built, for a `Cli` made without the parser.
    let nothing = set_request(
        "orders",
        None,
        None,
        false,
        &Default::default(),
        &Default::default(),
    )
    .unwrap_err();
    assert_eq!(nothing.exit_code(), 2);
    assert!(
        nothing.to_string().contains("nothing to change"),
        "{nothing}"
    );
    assert_eq!(
        set_request(
            "orders",
            None,
            Some(2),
            true,
            &Default::default(),
            &Default::default()
        )
        .unwrap_err()
        .exit_code(),
        2
    );
    assert_eq!(
        set_request(
            "orders",
            None,
            None,
            true,
            &Default::default(),
            &Default::default()
        )
        .unwrap(),
        SetNamespaceRequest {
            lease_duration_ms: None,
            max_executors: Some(None),
            ..SetNamespaceRequest::default()
        }
    );
    assert_eq!(
        set_request(
            "orders",
            Some(500),
            Some(4),
            false,
            &Default::default(),
            &Default::default()
        )
        .unwrap(),
        SetNamespaceRequest {
            lease_duration_ms: Some(500),
            max_executors: Some(Some(4)),
            ..SetNamespaceRequest::default()
        }
    );
}

/// P18.1: `default` always exists, cannot be deleted, and has the managers' lease: asking
/// otherwise is bad input, refused without a request.
#[tokio::test]
async fn p18_1_default_cannot_be_created_deleted_or_given_a_lease() {
    assert_eq!(
        create_request(
            "default",
            4,
            None,
            None,
            &Default::default(),
            &Default::default()
        )
        .unwrap_err()
        .exit_code(),
        2
    );
    assert_eq!(
        create_request(
            "kv",
            4,
            Some(1_000),
            Some(2),
            &Default::default(),
            &Default::default()
        )
        .unwrap(),
        CreateNamespaceRequest {
            name: "kv".into(),
            shard_count: 4,
            lease_duration_ms: Some(1_000),
            max_executors: Some(2),
            ..CreateNamespaceRequest::default()
        }
    );
    assert_eq!(
        set_request(
            "default",
            Some(1_000),
            None,
            false,
            &Default::default(),
            &Default::default()
        )
        .unwrap_err()
        .exit_code(),
        2
    );
    assert!(set_request(
        "default",
        None,
        Some(9),
        false,
        &Default::default(),
        &Default::default()
    )
    .is_ok());

    let fake = FakeManager::start().await;
    for argv in [
        &["namespace", "create", "default", "--shards", "4"][..],
        &["namespace", "delete", "default"],
        &["namespace", "set", "default", "--lease", "10s"],
    ] {
        let error = fake.ctl(argv).await.unwrap_err();
        assert_eq!(error.exit_code(), 2, "{argv:?}: {error}");
    }
    assert_eq!(fake.requests(), Vec::<String>::new());
}

/// A manager on 127.0.0.1 that answers the reads and namespace calls with fixed replies and
/// notes each request as `METHOD path?query body`, so a test sees which call a command made.
struct FakeManager {
    url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeManager {
    async fn start() -> Self {
        use axum::http::{Method, StatusCode, Uri};
        use axum::response::IntoResponse;

        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let noted = seen.clone();
        let router = axum::Router::new().fallback(move |method: Method, uri: Uri, body: String| {
            let noted = noted.clone();
            async move {
                let line = format!("{method} {uri} {body}");
                noted.lock().unwrap().push(line.trim_end().to_owned());
                let reply = match (method.as_str(), uri.path()) {
                    ("GET", "/v1/shards") => serde_json::to_value(vec![
                        ShardView {
                            shard: 0,
                            owner: Some("ex-1".into()),
                            epoch: 3,
                            handoff: None,
                            load: None,
                            hot: false,
                            pinned_to: None,
                            secondaries: Vec::new(),
                        },
                        ShardView {
                            shard: 1,
                            owner: None,
                            epoch: 0,
                            handoff: None,
                            load: None,
                            hot: false,
                            pinned_to: None,
                            secondaries: Vec::new(),
                        },
                    ]),
                    ("GET", "/v1/executors") => serde_json::to_value(vec![ExecutorView {
                        namespace: "orders".into(),
                        executor_id: "ex-1".into(),
                        incarnation: "inc".into(),
                        name: Some("orders-1".into()),
                        address: "http://e1:9".into(),
                        lease_remaining_ms: 1_000,
                        registered_revision: 2,
                        shards: vec![ShardEpoch { shard: 0, epoch: 3 }],
                        draining: false,
                        capacity: 1,
                        load: None,
                        utilisation: None,
                        app_version: None,
                        labels: Default::default(),
                    }]),
                    ("GET", "/v1/executors/ex-1") => serde_json::to_value(ExecutorView {
                        namespace: "orders".into(),
                        ..executor_of("ex-1", None, &[0])
                    }),
                    ("POST", "/v1/executors/ex-1/drain") => serde_json::to_value(ExecutorView {
                        namespace: "orders".into(),
                        draining: true,
                        ..executor_of("ex-1", None, &[0])
                    }),
                    ("GET", "/v1/executors/ex-1/safe-to-stop") => {
                        serde_json::to_value(SafeToStop {
                            safe: true,
                            reason: "it holds no shards".into(),
                        })
                    }
                    ("GET", "/v1/routing") => serde_json::to_value(fake_key_route(
                        uri.query().unwrap_or("").contains("key=replicated"),
                    )),
                    ("GET", "/v1/plan") => serde_json::to_value(PlanPreview {
                        revision: 5,
                        moves: Vec::new(),
                        capped: false,
                        rollout_to: None,
                    }),
                    ("GET", "/v1/namespaces") => {
                        serde_json::to_value(vec![namespace_view("orders", None, 7)])
                    }
                    ("GET", "/v1/state") => serde_json::to_value(StateView {
                        generation: 0,
                        revision: 5,
                        shard_count: 2,
                        lease_duration_ms: 1_000,
                        executors: Vec::new(),
                        shards: Vec::new(),
                        maintenance: false,
                        lease_remaining_is_bound: false,
                    }),
                    ("DELETE", _) => serde_json::to_value(NamespaceDeleted {
                        name: "orders".into(),
                        already_gone: false,
                        removed_executors: Vec::new(),
                    }),
                    (_, path) if path.starts_with("/v1/namespaces") => {
                        serde_json::to_value(namespace_view("orders", Some(2), 7))
                    }
                    _ => return StatusCode::NOT_FOUND.into_response(),
                };
                axum::Json(reply.unwrap()).into_response()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { url, seen }
    }

    /// Runs `leaseholdctl ARGS` against this manager; what it printed, or its error.
    async fn ctl(&self, args: &[&str]) -> Result<String, CtlError> {
        let mut argv = vec!["leaseholdctl", "--endpoints", &self.url, "--patience", "2s"];
        argv.extend_from_slice(args);
        let mut printed = Vec::new();
        run(Cli::try_parse_from(argv).unwrap(), &mut printed).await?;
        Ok(String::from_utf8(printed).unwrap())
    }

    /// The requests seen since the last call.
    fn requests(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// The fake manager's route of a key: `user-42` on `ex-1`, or with `replicated` (P19.5) the key
/// `replicated` with two ready secondaries.
fn fake_key_route(replicated: bool) -> KeyRoute {
    let secondary = |id: &str, address: &str| crate::wire::SecondaryRoute {
        executor_id: id.into(),
        address: address.into(),
    };
    KeyRoute {
        generation: 0,
        shard_count: None,
        key: if replicated { "replicated" } else { "user-42" }.into(),
        revision: 5,
        route: crate::wire::Route {
            shard: 0,
            executor_id: Some("ex-1".into()),
            address: Some("http://e1:9".into()),
            epoch: 3,
            secondaries: if replicated {
                vec![
                    secondary("ex-3", "http://e3:9"),
                    secondary("ex-2", "http://e2:9"),
                ]
            } else {
                Vec::new()
            },
        },
    }
}

/// P19.5: `route KEY` prints the key's ready secondaries, ready longest first, a row each
/// under a `ROLE` column added last; a key without them prints the table it always did; `-o
/// json` prints the wire's route, secondaries and all.
#[tokio::test]
async fn p19_5_route_prints_a_keys_secondaries_when_it_has_any() {
    let fake = FakeManager::start().await;
    let plain = fake.ctl(&["route", "user-42"]).await.unwrap();
    assert_eq!(
        plain,
        "KEY      SHARD  EXECUTOR  ADDRESS      EPOCH  REVISION\n\
         user-42  0      ex-1      http://e1:9  3      5\n"
    );
    let replicated = fake.ctl(&["route", "replicated"]).await.unwrap();
    let rows: Vec<Vec<&str>> = replicated
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["KEY", "SHARD", "EXECUTOR", "ADDRESS", "EPOCH", "REVISION", "ROLE"],
            [
                "replicated",
                "0",
                "ex-1",
                "http://e1:9",
                "3",
                "5",
                "primary"
            ],
            [
                "replicated",
                "0",
                "ex-3",
                "http://e3:9",
                "3",
                "5",
                "secondary"
            ],
            [
                "replicated",
                "0",
                "ex-2",
                "http://e2:9",
                "3",
                "5",
                "secondary"
            ],
        ]
    );
    let json = fake
        .ctl(&["-o", "json", "route", "replicated"])
        .await
        .unwrap();
    let parsed: KeyRoute = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed, fake_key_route(true));
}

/// P18.1: `-n NAME` sends the listing, shard and route reads to that namespace; no `-n` and
/// `-n default` send exactly the requests the CLI sent before namespaces.
#[tokio::test]
async fn p18_1_dash_n_selects_the_namespaced_reads() {
    let fake = FakeManager::start().await;
    for (args, requests) in [
        (
            &["-n", "orders", "shard", "list"][..],
            &["GET /v1/shards?namespace=orders"][..],
        ),
        (&["shard", "list"], &["GET /v1/shards"]),
        (&["-n", "default", "shard", "list"], &["GET /v1/shards"]),
        (
            &["--consistent", "executor", "list", "--namespace", "orders"],
            &["GET /v1/executors?namespace=orders&consistent=true"],
        ),
        (&["executor", "list"], &["GET /v1/executors"]),
        (
            &["-n", "orders", "route", "user-42"],
            &["GET /v1/routing?namespace=orders&key=user-42"],
        ),
        (&["route", "user-42"], &["GET /v1/routing?key=user-42"]),
        (
            &["-n", "orders", "plan"],
            &["GET /v1/plan?namespace=orders"],
        ),
        (&["plan"], &["GET /v1/plan"]),
        (
            &["-n", "orders", "state"],
            &["GET /v1/state?namespace=orders"],
        ),
        (&["state"], &["GET /v1/state"]),
        (
            &["-n", "orders", "shard", "show", "0"],
            &[
                "GET /v1/shards?namespace=orders",
                "GET /v1/executors?namespace=orders",
            ],
        ),
    ] {
        fake.ctl(args)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(fake.requests(), requests, "{args:?}");
    }

    // `watch` follows the namespace's state (this manager serves no watch: the first ends it).
    fake.ctl(&["-n", "orders", "watch", "--wait", "1s"])
        .await
        .unwrap_err();
    assert_eq!(
        fake.requests(),
        ["GET /v1/watch?namespace=orders&revision=0&wait=1ms"]
    );

    // A namespaced shard shows its route from the namespace's executors.
    let shown = fake
        .ctl(&["-n", "orders", "shard", "show", "0"])
        .await
        .unwrap();
    assert!(shown.contains("route:      http://e1:9\n"), "{shown}");
    let missing = fake
        .ctl(&["-n", "orders", "shard", "show", "7"])
        .await
        .unwrap_err();
    assert_eq!(missing.exit_code(), 4);
    assert_eq!(
        missing.to_string(),
        "shard 7 does not exist in namespace orders (shard count 2)"
    );
    let routed = fake
        .ctl(&["-n", "orders", "route", "user-42"])
        .await
        .unwrap();
    assert_eq!(
        routed
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["user-42", "0", "ex-1", "http://e1:9", "3", "5"]
    );
}

/// P18.1: a command that reads no namespace but `default` refuses `-n` naming another (bad
/// input, nothing sent) instead of answering from `default` as if it were the one asked for.
#[tokio::test]
async fn p18_1_dash_n_is_refused_where_no_namespace_is_read() {
    let fake = FakeManager::start().await;
    for args in [
        &["shard", "pin", "3", "ex-1"][..],
        &["shard", "move", "3", "--to", "ex-1"],
        &["shard", "unpin", "3"],
        &["executor", "show", "ex-1"],
        &["executor", "drain", "ex-1"],
        &["lease", "list"],
        &["audit"],
        &["member", "list"],
        &["namespace", "show", "orders"],
    ] {
        let mut argv = vec!["-n", "orders"];
        argv.extend_from_slice(args);
        let error = fake.ctl(&argv).await.unwrap_err();
        assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        let message = error.to_string();
        assert!(
            message.contains("does not take -n/--namespace orders"),
            "{args:?}: {message}"
        );
    }
    assert_eq!(fake.requests(), Vec::<String>::new());
    let error = fake.ctl(&["-n", "orders", "audit"]).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "`audit` does not take -n/--namespace orders: only `shard list`, `shard show`, `route`, \
         `executor list`, `executor safe-to-stop`, `plan`, `state` and `watch` read one \
         namespace"
    );
    // `-n default` is what no `-n` means, anywhere.
    fake.ctl(&["-n", "default", "namespace", "list"])
        .await
        .unwrap();
    assert_eq!(fake.requests(), ["GET /v1/namespaces"]);
}

/// P18.1: `executor safe-to-stop` takes `-n` (it was refused, exit 2) and checks that the
/// executor is in that namespace: another is not found (exit 4), and only the executor was read.
/// Its output is one ended line per statement.
#[tokio::test]
async fn p18_1_safe_to_stop_takes_dash_n_and_checks_the_executor_s_namespace() {
    let fake = FakeManager::start().await;
    let shown = fake
        .ctl(&["-n", "orders", "executor", "safe-to-stop", "ex-1"])
        .await
        .unwrap();
    assert_eq!(shown, "executor ex-1: safe to stop: it holds no shards\n");
    assert_eq!(
        fake.requests(),
        [
            "GET /v1/executors/ex-1",
            "GET /v1/executors/ex-1/safe-to-stop",
            "GET /v1/executors?namespace=orders",
        ]
    );
    for other in ["kv", "default"] {
        let error = fake
            .ctl(&["-n", other, "executor", "safe-to-stop", "ex-1"])
            .await
            .unwrap_err();
        assert_eq!(error.exit_code(), 4, "{error}");
        assert_eq!(
            error.to_string(),
            format!("executor ex-1 is not in namespace {other} (it is in namespace orders)")
        );
        assert_eq!(
            fake.requests(),
            ["GET /v1/executors/ex-1"],
            "nothing else asked"
        );
    }
    // Without -n it is asked wherever the executor is.
    fake.ctl(&["executor", "safe-to-stop", "ex-1"])
        .await
        .unwrap();
    assert_eq!(fake.requests().len(), 3);
}

/// P18.1: each namespace command makes its one call with the wire body, and prints the reply.
#[tokio::test]
async fn p18_1_namespace_commands_send_the_wire_requests() {
    let fake = FakeManager::start().await;
    let created = fake
        .ctl(&[
            "namespace",
            "create",
            "orders",
            "--shards",
            "16",
            "--lease",
            "60s",
        ])
        .await
        .unwrap();
    assert_eq!(
        fake.requests(),
        [r#"POST /v1/namespaces {"name":"orders","shard_count":16,"lease_duration_ms":60000}"#]
    );
    assert!(
        created.starts_with("namespace:       orders\n"),
        "{created}"
    );
    fake.ctl(&[
        "namespace",
        "create",
        "orders",
        "--shards",
        "16",
        "--max-executors",
        "2",
    ])
    .await
    .unwrap();
    assert_eq!(
        fake.requests(),
        [r#"POST /v1/namespaces {"name":"orders","shard_count":16,"max_executors":2}"#]
    );

    let listed = fake.ctl(&["namespace", "list"]).await.unwrap();
    assert_eq!(fake.requests(), ["GET /v1/namespaces"]);
    assert!(
        listed.starts_with("NAME    SHARDS  LEASE  EXECUTORS  OWNED  MAX\n"),
        "{listed}"
    );
    let shown = fake
        .ctl(&["-o", "json", "namespace", "show", "orders"])
        .await
        .unwrap();
    assert_eq!(fake.requests(), ["GET /v1/namespaces/orders"]);
    let shown: NamespaceView = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown, namespace_view("orders", Some(2), 7));

    fake.ctl(&["namespace", "set", "orders", "--no-max-executors"])
        .await
        .unwrap();
    assert_eq!(
        fake.requests(),
        [r#"PATCH /v1/namespaces/orders {"max_executors":null}"#]
    );
    fake.ctl(&[
        "namespace",
        "set",
        "orders",
        "--lease",
        "2s",
        "--max-executors",
        "4",
    ])
    .await
    .unwrap();
    assert_eq!(
        fake.requests(),
        [r#"PATCH /v1/namespaces/orders {"lease_duration_ms":2000,"max_executors":4}"#]
    );

    let deleted = fake.ctl(&["namespace", "delete", "orders"]).await.unwrap();
    assert_eq!(fake.requests(), ["DELETE /v1/namespaces/orders"]);
    assert_eq!(deleted, "namespace orders deleted\n");
}

/// P20.1: `namespace show` names the generation once the namespace resharded, and the reshard
/// under way with what it waits on; `namespace reshard` says both.
#[test]
fn p20_1_namespace_show_and_reshard_say_the_generation_and_the_reshard_under_way() {
    let view = NamespaceView {
        name: "kv".into(),
        shard_count: 8,
        lease_duration_ms: 60_000,
        generation: 1,
        reshard: Some(ReshardProgress {
            kind: ReshardKind::Merge,
            shard_count: 4,
            requested_revision: 77,
            waiting_on: 3,
        }),
        ..NamespaceView::default()
    };
    let shown = render_namespace(&view);
    assert!(shown.contains("generation:      1\n"), "{shown}");
    assert!(
        shown.contains(
            "reshard:         merge to 4 shards (asked at revision 77): waiting on 3 pair(s) of \
             shards not yet on one executor\n"
        ),
        "{shown}"
    );
    let reply = ReshardReply {
        name: "kv".into(),
        shard_count: 8,
        generation: 1,
        reshard: view.reshard,
    };
    assert_eq!(
        render_reshard(&reply),
        "namespace kv: 8 shards at generation 1; merge to 4 shards (asked at revision 77): \
         waiting on 3 pair(s) of shards not yet on one executor\n"
    );
    let done = ReshardReply {
        reshard: None,
        ..reply
    };
    assert_eq!(
        render_reshard(&done),
        "namespace kv: 8 shards at generation 1; no reshard under way\n"
    );
}
