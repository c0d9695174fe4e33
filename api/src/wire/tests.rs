//! The wire types and their checks: shapes, strictness, limits, runs.

use super::*;

#[test]
fn i6_shard_lists_in_any_order_are_checked_for_range_and_duplicates() {
    use ShardListError::{Duplicate, OutOfRange};
    let cases: &[(&[u32], Result<(), ShardListError>)] = &[
        (&[], Ok(())),
        (&[0, 1, 7], Ok(())),
        (&[7, 0, 3], Ok(())),
        (&[3, 3], Err(Duplicate { shard: 3 })),
        (&[1, 2, 2, 5], Err(Duplicate { shard: 2 })),
        (&[5, 2, 7, 2], Err(Duplicate { shard: 2 })),
        (&[6, 1, 6], Err(Duplicate { shard: 6 })),
        (
            &[0, 8],
            Err(OutOfRange {
                shard: 8,
                shard_count: 8,
            }),
        ),
        (
            &[9, 1, 1],
            Err(OutOfRange {
                shard: 9,
                shard_count: 8,
            }),
        ),
    ];
    for (shards, expected) in cases {
        assert_eq!(
            &check_shard_list(shards.iter().copied(), 8),
            expected,
            "{shards:?}"
        );
    }
}
use serde_json::json;

/// P15.1, I6: a capacity is a positive weight up to `MAX_CAPACITY`.
#[test]
fn p15_1_capacities_outside_one_to_the_maximum_are_refused() {
    for good in [1, 2, DEFAULT_CAPACITY, MAX_CAPACITY] {
        assert_eq!(check_capacity(good), Ok(()), "{good}");
    }
    for bad in [0, MAX_CAPACITY + 1, u32::MAX] {
        let error = check_capacity(bad).unwrap_err();
        assert_eq!(error, CapacityError { capacity: bad });
        assert!(error.to_string().contains("P15.1"), "{error}");
    }
}

fn loads(entries: &[(u32, f64)]) -> Vec<ShardLoad> {
    entries
        .iter()
        .map(|&(shard, load)| ShardLoad { shard, load })
        .collect()
}

/// P15.1, I6: a renewal's loads name each shard once, below the shard count, with a finite
/// load in `0..=MAX_SHARD_LOAD`, and list no more entries than there are shards.
#[test]
fn p15_1_i6_shard_loads_are_checked_for_shards_values_and_length() {
    for good in [
        vec![],
        loads(&[(0, 0.0), (7, MAX_SHARD_LOAD)]),
        loads(&[(5, 1.5), (2, -0.0), (3, 1e-300)]),
        loads(&(0..8).map(|shard| (shard, 1.0)).collect::<Vec<_>>()),
    ] {
        assert_eq!(check_shard_loads(&good, 8), Ok(()), "{good:?}");
    }
    let out_of_range = |shard, load| ShardLoadError::OutOfRange { shard, load };
    let cases: Vec<(Vec<ShardLoad>, ShardLoadError)> = vec![
        (
            loads(&[(8, 1.0)]),
            ShardListError::OutOfRange {
                shard: 8,
                shard_count: 8,
            }
            .into(),
        ),
        (
            loads(&[(3, 1.0), (1, 2.0), (3, 1.0)]),
            ShardListError::Duplicate { shard: 3 }.into(),
        ),
        (loads(&[(1, -1.0)]), out_of_range(1, -1.0)),
        (
            loads(&[(1, 1.0), (2, MAX_SHARD_LOAD * 2.0)]),
            out_of_range(2, MAX_SHARD_LOAD * 2.0),
        ),
        (loads(&[(4, f64::INFINITY)]), out_of_range(4, f64::INFINITY)),
        (
            loads(&(0..9).map(|shard| (shard % 8, 1.0)).collect::<Vec<_>>()),
            ShardLoadError::TooMany {
                count: 9,
                shard_count: 8,
            },
        ),
    ];
    for (bad, expected) in cases {
        assert_eq!(check_shard_loads(&bad, 8), Err(expected), "{bad:?}");
    }
    // NaN is unequal to itself, so it is matched rather than compared.
    assert!(matches!(
        check_shard_loads(&loads(&[(0, 1.0), (6, f64::NAN)]), 8),
        Err(ShardLoadError::OutOfRange { shard: 6, load }) if load.is_nan()
    ));
}

/// P15.1 through "Versions": `loads` is optional, absent unless set, and strict inside.
#[test]
fn renew_request_loads_are_optional_and_strict() {
    let without: RenewRequest =
        serde_json::from_value(json!({"claims": [], "revision": 3})).unwrap();
    assert_eq!(without.loads, None, "absent: the executor reports no loads");
    assert_eq!(
        serde_json::to_value(&without).unwrap(),
        json!({"claims": [], "revision": 3}),
        "an executor not reporting sends what 0.1.0 sent"
    );
    let with = RenewRequest {
        loads: Some(loads(&[(1, 2.5)])),
        ..without
    };
    let value = serde_json::to_value(&with).unwrap();
    assert_eq!(value["loads"], json!([{"shard": 1, "load": 2.5}]));
    assert_eq!(serde_json::from_value::<RenewRequest>(value).unwrap(), with);
    for bad in [
        json!({"claims": [], "revision": 1, "loads": [{"shard": 1, "load": "NaN"}]}),
        json!({"claims": [], "revision": 1, "loads": [{"shard": 1}]}),
        json!({"claims": [], "revision": 1, "loads": [{"shard": -1, "load": 1}]}),
        json!({"claims": [], "revision": 1, "loads": [{"shard": 1, "load": 1, "unit": "rps"}]}),
        json!({"claims": [], "revision": 1, "loads": {"1": 1.0}}),
    ] {
        assert!(
            serde_json::from_value::<RenewRequest>(bad.clone()).is_err(),
            "accepted {bad}"
        );
    }
    // JSON has no literal for a number beyond f64: a huge one is a decode error, not inf.
    assert!(serde_json::from_str::<RenewRequest>(
        r#"{"claims": [], "revision": 1, "loads": [{"shard": 1, "load": 1e400}]}"#
    )
    .is_err());
}

/// A reply of a server of 0.1.0 (schema 2) has no capacity: every executor counts as 1.
#[test]
fn executor_view_capacity_defaults_to_one() {
    let view: ExecutorView = serde_json::from_value(json!({
        "executor_id": "ex-1", "incarnation": "i", "address": "http://a:1",
        "lease_remaining_ms": 1, "registered_revision": 1, "shards": [],
    }))
    .unwrap();
    assert_eq!(view.capacity, DEFAULT_CAPACITY);
}

#[test]
fn register_request_omits_absent_name() {
    let req = RegisterRequest {
        follows_generations: false,
        namespace: None,
        incarnation: "inc-1".into(),
        address: "http://127.0.0.1:9000".into(),
        name: None,
        credential: None,
        capacity: None,
        app_version: None,
        labels: Default::default(),
    };
    let value = serde_json::to_value(&req).unwrap();
    assert_eq!(
        value,
        json!({"incarnation": "inc-1", "address": "http://127.0.0.1:9000"})
    );
    let back: RegisterRequest = serde_json::from_value(value).unwrap();
    assert_eq!(back, req);
}

#[test]
fn register_request_with_name_round_trips() {
    let req = RegisterRequest {
        follows_generations: false,
        namespace: None,
        incarnation: "inc-1".into(),
        address: "http://127.0.0.1:9000".into(),
        name: Some("worker-a".into()),
        credential: Some(Credential::from_random([7; 32])),
        capacity: Some(3),
        app_version: None,
        labels: Default::default(),
    };
    let text = serde_json::to_string(&req).unwrap();
    assert_eq!(serde_json::from_str::<RegisterRequest>(&text).unwrap(), req);
}

/// P13.4: the secret never shows in a `Debug` (logs format requests with it); its shape is
/// checked; the manager keeps its SHA-256.
#[test]
fn a_credential_is_redacted_checked_and_hashed() {
    let credential = Credential::from_random([0xab; 32]);
    assert_eq!(credential.expose().len(), 64);
    let request = RegisterRequest {
        follows_generations: false,
        namespace: None,
        incarnation: "i".into(),
        address: "http://a:1".into(),
        name: None,
        credential: Some(credential.clone()),
        capacity: None,
        app_version: None,
        labels: Default::default(),
    };
    let debug = format!("{request:?}");
    assert!(!debug.contains(credential.expose()), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
    assert!(Credential::parse(credential.expose()).is_ok());
    assert!(Credential::parse(&"a".repeat(MIN_CREDENTIAL_BYTES - 1)).is_err());
    assert!(Credential::parse(&"a".repeat(MAX_CREDENTIAL_BYTES + 1)).is_err());
    assert!(Credential::parse(&format!("{}!", "a".repeat(40))).is_err());
    let decoded: Credential = serde_json::from_value(json!("short")).unwrap();
    assert!(
        decoded.validate().is_err(),
        "serde alone does not check the shape"
    );
    assert_ne!(
        credential.sha256(),
        Credential::from_random([0xac; 32]).sha256()
    );
}

/// I6: every request type refuses a field it does not know.
#[test]
fn request_types_reject_unknown_fields() {
    fn rejects<T: serde::de::DeserializeOwned + std::fmt::Debug>(value: serde_json::Value) {
        let err = serde_json::from_value::<T>(value.clone())
            .expect_err(&format!("accepted unknown field: {value}"));
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
    rejects::<RegisterRequest>(json!({"incarnation": "i", "address": "a", "extra": 1}));
    rejects::<RenewRequest>(json!({"claims": [], "revision": 1, "lease_ttl_ms": 5}));
    rejects::<RenewRequest>(
        json!({"claims": [{"shard": 1, "epoch": 1, "owner": "x"}], "revision": 1}),
    );
    rejects::<ReleaseRequest>(json!({"shards": [1], "revoke_revision": 3, "x": true}));
    rejects::<AssignmentPush>(
        json!({"executor_id": "ex-1", "revision": 1, "shard_count": 4, "shards": [], "lease_ttl_ms": 1}),
    );
    rejects::<RevokePush>(json!({"executor_id": "ex-1", "revision": 1, "shards": [], "epoch": 1}));
    rejects::<AddNodeRequest>(json!({"node_id": 4, "address": "http://h:1", "voter": true}));
}

/// I6: wrong types and out-of-range numbers are decode errors, not silent coercions.
#[test]
fn request_types_reject_wrong_types() {
    assert!(
        serde_json::from_value::<RenewRequest>(json!({"claims": [], "revision": "7"})).is_err()
    );
    assert!(serde_json::from_value::<RenewRequest>(json!({"claims": {}, "revision": 7})).is_err());
    assert!(serde_json::from_value::<RenewRequest>(json!({"claims": [], "revision": -1})).is_err());
    assert!(
        serde_json::from_value::<RegisterRequest>(json!({"incarnation": 5, "address": "a"}))
            .is_err()
    );
    for capacity in [json!("2"), json!(-1), json!(1.5), json!(4_294_967_296u64)] {
        assert!(
            serde_json::from_value::<RegisterRequest>(
                json!({"incarnation": "i", "address": "a", "capacity": capacity})
            )
            .is_err(),
            "capacity {capacity}"
        );
    }
    assert!(serde_json::from_value::<ReleaseRequest>(
        json!({"shards": [4294967296u64], "revoke_revision": 1})
    )
    .is_err());
    assert!(serde_json::from_value::<ReleaseRequest>(
        json!({"shards": [1.5], "revoke_revision": 1})
    )
    .is_err());
    assert!(
        serde_json::from_value::<AddNodeRequest>(json!({"node_id": null, "address": "a"})).is_err()
    );
}

#[test]
fn request_types_reject_missing_fields() {
    assert!(serde_json::from_value::<RegisterRequest>(json!({"incarnation": "i"})).is_err());
    assert!(serde_json::from_value::<RenewRequest>(json!({"claims": []})).is_err());
    assert!(serde_json::from_value::<ReleaseRequest>(json!({"shards": [1]})).is_err());
}

#[test]
fn base_urls_are_plain_http_origins() {
    for good in [
        "http://127.0.0.1:9000",
        "https://exec-1.internal:443/",
        "http://[::1]:1",
    ] {
        assert_eq!(validate_base_url(good), Ok(()), "{good}");
    }
    let too_long = format!("http://{}.example", "a".repeat(MAX_ADDRESS_BYTES));
    for bad in [
        "",
        "not a url",
        "127.0.0.1:9000",
        "ftp://127.0.0.1:9000",
        "http://127.0.0.1:9000/push",
        "http://127.0.0.1:9000/?x=1",
        "http://127.0.0.1:9000/#f",
        "http://user:pw@127.0.0.1:9000",
        "unix:/var/run/x.sock",
        too_long.as_str(),
    ] {
        assert!(validate_base_url(bad).is_err(), "accepted {bad:?}");
    }
}

/// One base-URL rule: what an advertised address may not be, no endpoint or owner address
/// may be either; only a path prefix is left to the normalised form, without the slash.
#[test]
fn the_base_url_rule_is_one_for_addresses_endpoints_and_owners() {
    assert_eq!(
        normalize_base_url("https://m1.example:443/").as_deref(),
        Ok("https://m1.example")
    );
    assert_eq!(
        normalize_base_url("http://h:1/prefix/").as_deref(),
        Ok("http://h:1/prefix")
    );
    for bad in [
        "",
        "not a url",
        "ftp://127.0.0.1:9000",
        "http://127.0.0.1:9000/?x=1",
        "http://127.0.0.1:9000/#f",
        "http://user:pw@127.0.0.1:9000",
        "unix:/var/run/x.sock",
    ] {
        assert!(normalize_base_url(bad).is_err(), "accepted {bad:?}");
        assert!(validate_base_url(bad).is_err(), "accepted {bad:?}");
    }
}

fn entries(pairs: &[(u32, u64)]) -> Vec<ShardEpoch> {
    pairs
        .iter()
        .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
        .collect()
}

fn run(first: u32, count: u32, epoch: u64) -> ShardRun {
    ShardRun {
        first,
        count,
        epoch,
    }
}

/// "Versions": a run is `[first, count, epoch]`, one per stretch of consecutive shards at
/// one epoch, and expands back to the same list.
#[test]
fn shard_runs_are_stretches_of_one_epoch_and_expand_back() {
    let all: Vec<ShardEpoch> = (0..1024)
        .map(|shard| ShardEpoch { shard, epoch: 1 })
        .collect();
    assert_eq!(shard_runs(&all), vec![run(0, 1024, 1)]);
    assert_eq!(
        serde_json::to_value(shard_runs(&all)).unwrap(),
        json!([[0, 1024, 1]])
    );
    // A gap, an epoch change inside a stretch, a lone shard.
    let mixed = entries(&[(2, 5), (3, 5), (4, 6), (5, 6), (9, 6), (u32::MAX, 1)]);
    let runs = shard_runs(&mixed);
    assert_eq!(
        runs,
        vec![
            run(2, 2, 5),
            run(4, 2, 6),
            run(9, 1, 6),
            run(u32::MAX, 1, 1)
        ]
    );
    assert_eq!(expand_shard_runs(&runs[..3], 10).unwrap(), mixed[..5]);
    // A list out of order has the runs of its set.
    let mut shuffled = mixed[..5].to_vec();
    shuffled.reverse();
    assert_eq!(shard_runs(&shuffled), runs[..3]);
    assert_eq!(shard_runs(&[]), vec![]);
    assert_eq!(expand_shard_runs(&[], 10).unwrap(), vec![]);
    let decoded: Vec<ShardRun> = serde_json::from_value(json!([[4, 2, 6]])).unwrap();
    assert_eq!(decoded, vec![run(4, 2, 6)]);
}

/// I6: runs that are empty, overlapping, out of order or past the shard count are refused,
/// and none of them allocates more than the shard count.
#[test]
fn malformed_shard_runs_are_refused() {
    let cases = [
        (vec![run(3, 0, 1)], ShardRunError::EmptyRun { first: 3 }),
        (
            vec![run(0, 4, 1), run(3, 2, 1)],
            ShardRunError::RunOutOfOrder { first: 3 },
        ),
        (
            vec![run(5, 1, 1), run(2, 1, 1)],
            ShardRunError::RunOutOfOrder { first: 2 },
        ),
        (
            vec![run(6, 3, 1)],
            ShardListError::OutOfRange {
                shard: 8,
                shard_count: 8,
            }
            .into(),
        ),
        (
            vec![run(u32::MAX, u32::MAX, 1)],
            ShardListError::OutOfRange {
                shard: u32::MAX,
                shard_count: 8,
            }
            .into(),
        ),
        // Each run fits by itself; the total would be 2^32 shards.
        (
            vec![run(0, u32::MAX, 1), run(0, u32::MAX, 1)],
            ShardListError::OutOfRange {
                shard: u32::MAX - 1,
                shard_count: 8,
            }
            .into(),
        ),
    ];
    for (runs, expected) in cases {
        assert_eq!(expand_shard_runs(&runs, 8), Err(expected), "{runs:?}");
    }
    for bad in [json!([[1, 2]]), json!([[1, 2, 3, 4]]), json!([[-1, 2, 3]])] {
        assert!(
            serde_json::from_value::<Vec<ShardRun>>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

/// "Versions": a renewal's claims come from either form, checked the same way, and a
/// request carrying both is refused; the grant goes back in the form the claims came in.
#[test]
fn renewal_claims_and_grants_in_either_form() {
    let held = entries(&[(0, 2), (1, 2), (2, 2), (5, 3)]);
    let full = RenewRequest {
        claims: held.clone(),
        claim_runs: None,
        revision: 7,
        loads: None,
        accept_unchanged: false,
        ready: Vec::new(),
    };
    let compact = full.with_claims_as_runs();
    let value = serde_json::to_value(&compact).unwrap();
    assert_eq!(
        value,
        json!({"claims": [], "claim_runs": [[0, 3, 2], [5, 1, 3]], "revision": 7})
    );
    let decoded: RenewRequest = serde_json::from_value(value).unwrap();
    assert_eq!(decoded.checked_claims(8).unwrap().as_ref(), held.as_slice());
    assert_eq!(full.checked_claims(8).unwrap().as_ref(), held.as_slice());
    assert_eq!(
        full.checked_claims(5),
        Err(ShardListError::OutOfRange {
            shard: 5,
            shard_count: 5
        }
        .into())
    );
    let both = RenewRequest {
        claims: held.clone(),
        ..compact.clone()
    };
    assert_eq!(both.checked_claims(8), Err(ShardRunError::BothForms));

    let grant = Grant {
        generation: 0,
        executor_id: "ex-1".into(),
        lease_ttl_ms: 60_000,
        revision: 42,
        shard_count: 8,
        shards: held.clone(),
        shard_runs: None,
        unchanged: false,
        secondaries: Vec::new(),
    };
    let compact_grant = grant.clone().into_shard_runs();
    assert_eq!(
        serde_json::to_value(&compact_grant).unwrap()["shard_runs"],
        json!([[0, 3, 2], [5, 1, 3]])
    );
    assert_eq!(compact_grant.shards, vec![]);
    assert_eq!(compact_grant.clone().expand_shard_runs().unwrap(), grant);
    assert_eq!(grant.clone().expand_shard_runs().unwrap(), grant);
    let both = Grant {
        shards: held,
        ..compact_grant.clone()
    };
    assert_eq!(both.expand_shard_runs(), Err(ShardRunError::BothForms));
    let past_the_end = Grant {
        shard_count: 4,
        ..compact_grant
    };
    assert!(past_the_end.expand_shard_runs().is_err());
}

/// "Versions": a renewal that takes "unchanged" says so on the wire (and one that does not, or an
/// earlier release's, sends nothing new); an unchanged grant carries no set and expands to the
/// renewal's claims, ascending, checked against its shard count; one listing a set too is refused.
#[test]
fn unchanged_grants_stand_for_the_claims() {
    let asking = RenewRequest {
        claims: entries(&[(5, 3), (0, 2)]),
        claim_runs: None,
        revision: 7,
        loads: None,
        accept_unchanged: true,
        ready: Vec::new(),
    };
    let value = serde_json::to_value(&asking).unwrap();
    assert_eq!(value["accept_unchanged"], true);
    assert_eq!(
        serde_json::from_value::<RenewRequest>(value).unwrap(),
        asking
    );
    let earlier = json!({"claims": [], "revision": 7});
    assert!(
        !serde_json::from_value::<RenewRequest>(earlier)
            .unwrap()
            .accept_unchanged
    );
    let not_asking = RenewRequest {
        accept_unchanged: false,
        ..asking.clone()
    };
    assert_eq!(
        serde_json::to_value(&not_asking)
            .unwrap()
            .get("accept_unchanged"),
        None
    );

    let grant = Grant {
        generation: 0,
        executor_id: "ex-1".into(),
        lease_ttl_ms: 60_000,
        revision: 42,
        shard_count: 8,
        shards: entries(&[(0, 2), (5, 3)]),
        shard_runs: None,
        unchanged: false,
        secondaries: Vec::new(),
    };
    let unchanged = grant.clone().into_unchanged();
    assert_eq!(
        serde_json::to_value(&unchanged).unwrap(),
        json!({"executor_id": "ex-1", "lease_ttl_ms": 60000, "revision": 42, "shard_count": 8,
               "shards": [], "unchanged": true})
    );
    assert_eq!(
        unchanged.clone().expand_unchanged(&asking).unwrap(),
        grant,
        "the claims, ascending"
    );
    assert_eq!(
        grant.clone().expand_unchanged(&asking).unwrap(),
        grant,
        "a full grant stays"
    );
    let both = Grant {
        shards: entries(&[(1, 1)]),
        ..unchanged.clone()
    };
    assert_eq!(
        both.expand_unchanged(&asking),
        Err(ShardRunError::BothForms)
    );
    let runs_too = Grant {
        shard_runs: Some(vec![]),
        ..unchanged.clone()
    };
    assert_eq!(
        runs_too.expand_unchanged(&asking),
        Err(ShardRunError::BothForms)
    );
    let past_the_end = Grant {
        shard_count: 4,
        ..unchanged
    };
    assert!(past_the_end.expand_unchanged(&asking).is_err());
}

#[test]
fn grant_has_the_documented_shape() {
    let grant = Grant {
        generation: 0,
        executor_id: "ex-1".into(),
        lease_ttl_ms: 60_000,
        revision: 42,
        shard_count: 8,
        shards: vec![ShardEpoch { shard: 3, epoch: 2 }],
        shard_runs: None,
        unchanged: false,
        secondaries: Vec::new(),
    };
    let value = serde_json::to_value(&grant).unwrap();
    assert_eq!(
        value,
        json!({
            "executor_id": "ex-1",
            "lease_ttl_ms": 60000,
            "revision": 42,
            "shard_count": 8,
            "shards": [{"shard": 3, "epoch": 2}],
        })
    );
    assert_eq!(serde_json::from_value::<Grant>(value).unwrap(), grant);
}

#[test]
fn reply_types_tolerate_new_fields() {
    let grant: Grant = serde_json::from_value(json!({
        "executor_id": "ex-1", "lease_ttl_ms": 1, "revision": 1, "shard_count": 1,
        "shards": [], "added_in_a_later_version": true,
    }))
    .unwrap();
    assert_eq!(grant.executor_id, "ex-1");
}

#[test]
fn cluster_info_round_trips_with_and_without_optionals() {
    let full = ClusterInfo {
        node_id: 1,
        leader_id: Some(2),
        leader_address: Some("http://127.0.0.1:7002".into()),
        term: 3,
        voters: vec![Member {
            node_id: 1,
            address: "http://127.0.0.1:7001".into(),
            release: Some("0.2.0".into()),
            newest_schema: Some(3),
        }],
        learners: vec![],
        last_log_index: Some(10),
        committed_index: Some(9),
        applied_index: Some(9),
        snapshot: Some(SnapshotInfo {
            last_log_index: Some(5),
            snapshot_id: "1-5-0".into(),
        }),
        release: Some("0.2.0".into()),
        cluster_version: Some(3),
        schemas: Some(SchemaRange {
            oldest: 2,
            newest: 3,
        }),
    };
    let text = serde_json::to_string(&full).unwrap();
    assert_eq!(serde_json::from_str::<ClusterInfo>(&text).unwrap(), full);

    let sparse: ClusterInfo = serde_json::from_value(json!({
        "node_id": 1, "term": 0, "voters": [], "learners": [],
    }))
    .unwrap();
    assert_eq!(sparse.leader_id, None);
    assert_eq!(sparse.snapshot, None);
    assert_eq!(sparse.release, None, "a 0.1.0 manager reports no release");
    // What a 0.1.0 reply means (P14.3): release 0.1.0, schema 2, cluster version 2.
    assert_eq!(sparse.reported_release(), FIRST_RELEASE);
    assert_eq!(
        sparse.reported_schemas(),
        SchemaRange {
            oldest: 2,
            newest: 2
        }
    );
    assert_eq!(sparse.reported_cluster_version(), 2);
}

#[test]
fn revoke_reply_round_trips() {
    let reply = RevokeReply {
        revision: 9,
        released: vec![],
        ignored: true,
    };
    let value = serde_json::to_value(&reply).unwrap();
    assert_eq!(
        value,
        json!({"revision": 9, "released": [], "ignored": true})
    );
    assert_eq!(serde_json::from_value::<RevokeReply>(value).unwrap(), reply);
}

/// P16.1 with P17.1: an answer with nothing to prepare is the previous release's body exactly, so
/// a service written against it sees no change; the previous release's body still parses.
#[test]
fn local_permits_carry_preparing_only_when_there_is_some() {
    let previous_release = json!({
        "revision": 118, "state": "admitting", "lease_ttl_ms": 2870,
        "lease_expires_monotonic_ns": 61_309_572_662_350_u64, "shard_count": 48,
        "executor_id": "ex-4", "shards": [{"shard": 3, "epoch": 7}],
    });
    let permits: LocalPermits = serde_json::from_value(previous_release.clone()).unwrap();
    assert!(permits.preparing.is_empty());
    assert_eq!(serde_json::to_value(&permits).unwrap(), previous_release);
    let preparing = LocalPermits {
        preparing: vec![ShardEpoch { shard: 5, epoch: 2 }],
        ..permits
    };
    let value = serde_json::to_value(&preparing).unwrap();
    assert_eq!(value["preparing"], json!([{"shard": 5, "epoch": 2}]));
    assert_eq!(
        serde_json::from_value::<LocalPermits>(value).unwrap(),
        preparing
    );
}

/// P19.5: a permit for the primary and an answer without secondaries are the previous release's
/// bodies exactly; a secondary's permit says so, and the secondaries list their readiness.
#[test]
fn local_bodies_name_a_role_only_for_a_secondary() {
    let primary = LocalPermit {
        shard: 3,
        epoch: 7,
        lease_ttl_ms: 1_000,
        role: Role::Primary,
    };
    let previous_release = json!({"shard": 3, "epoch": 7, "lease_ttl_ms": 1_000});
    assert_eq!(serde_json::to_value(primary).unwrap(), previous_release);
    assert_eq!(
        serde_json::from_value::<LocalPermit>(previous_release).unwrap(),
        primary
    );
    let secondary = LocalPermit {
        role: Role::Secondary,
        ..primary
    };
    assert_eq!(
        serde_json::to_value(secondary).unwrap()["role"],
        json!("secondary")
    );
    let permits: LocalPermits = serde_json::from_value(json!({
        "revision": 118, "state": "admitting", "lease_ttl_ms": 2870,
        "lease_expires_monotonic_ns": null, "shard_count": 48, "executor_id": "ex-4",
        "shards": [],
        "secondaries": [{"shard": 5, "epoch": 2, "ready": true}, {"shard": 9, "epoch": 4}],
    }))
    .unwrap();
    assert_eq!(
        permits.secondaries,
        [
            LocalSecondary {
                shard: 5,
                epoch: 2,
                ready: true
            },
            LocalSecondary {
                shard: 9,
                epoch: 4,
                ready: false
            }
        ]
    );
    let value = serde_json::to_value(&permits).unwrap();
    assert_eq!(
        value["secondaries"],
        json!([{"shard": 5, "epoch": 2, "ready": true}, {"shard": 9, "epoch": 4}])
    );
}
