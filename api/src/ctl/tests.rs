//! The CLI's arguments, exit codes and output, without a cluster.

use super::*;
use crate::wire::{HandoffView, Member, ShardEpoch};

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
        },
        ShardView {
            shard: 2,
            owner: None,
            epoch: 0,
            handoff: None,
            load: None,
            hot: false,
        },
    ];
    assert_eq!(
        render_shards(&shards),
        "SHARD  OWNER  EPOCH  STATE      HANDOFF_TO  LOAD     HOT\n\
         0      ex-4   2      serving    -           41.7     yes\n\
         1      ex-4   1      releasing  ex-9        0.00312  no\n\
         2      -      0      unowned    -           -        no\n"
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
