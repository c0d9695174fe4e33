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
        },
        ShardView {
            shard: 2,
            owner: None,
            epoch: 0,
            handoff: None,
            load: None,
            hot: false,
            pinned_to: Some("ex-9".into()),
        },
    ];
    assert_eq!(
        render_shards(&shards),
        "SHARD  OWNER  EPOCH  STATE      HANDOFF_TO  LOAD     HOT  PINNED\n\
         0      ex-4   2      serving    -           41.7     yes  -\n\
         1      ex-4   1      releasing  ex-9        0.00312  no   -\n\
         2      -      0      unowned    -           -        no   ex-9\n"
    );
}

#[test]
fn executor_details_collapse_shards_into_ranges() {
    let executor = ExecutorView {
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
    assert_eq!(
        render_verdict("executor ex-7", &verdict(true)),
        "executor ex-7: safe to stop: because"
    );
    assert_eq!(
        render_verdict("manager 2", &verdict(false)),
        "manager 2: not safe to stop: because"
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
    };
    let state = StateView {
        revision: 9,
        shard_count: 4,
        lease_duration_ms: 4_000,
        executors: Vec::new(),
        shards: vec![view.clone()],
        maintenance: true,
    };
    assert_eq!(
        render_shard(&view, Some(&state)),
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

fn record(revision: u64, at_ms: u64, action: &str) -> AuditRecordView {
    AuditRecordView {
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
    ];
    assert_eq!(
        render_audit(&records),
        "REVISION  TIME                      ACTOR                  ACTION          SUBJECT\n\
         5         1970-01-01T00:00:00.000Z  admin CN=alice         maintenance_on  -\n\
         7         2023-11-14T22:13:20.123Z  admin CN=alice         move            shard 3, executor ex-2\n\
         8         2023-11-14T22:13:21.005Z  ex-1                   drain           executor ex-1\n\
         12        2000-02-29T00:00:00.000Z  anonymous (plaintext)  member_add      manager 4 (http://m4:7004)\n"
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
