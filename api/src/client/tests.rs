//! The client's pure parts: endpoints, configuration, path segments, error codes, the leader hint.

use super::*;

#[derive(Debug, thiserror::Error)]
#[error("outer")]
struct Outer(#[source] Inner);

#[derive(Debug, thiserror::Error)]
#[error("inner\nsecond line")]
struct Inner;

#[derive(Debug, thiserror::Error)]
#[error("wrapped: {0}")]
struct Repeats(#[source] Inner2);

#[derive(Debug, thiserror::Error)]
#[error("the cause")]
struct Inner2;

#[test]
fn an_error_and_its_causes_print_as_one_line() {
    assert_eq!(error_chain(&Outer(Inner)), "outer: inner second line");
}

#[test]
fn a_cause_already_in_its_wrapper_message_is_not_repeated() {
    assert_eq!(error_chain(&Repeats(Inner2)), "wrapped: the cause");
}

#[test]
fn endpoints_are_validated_and_normalised() {
    assert_eq!(
        normalize_endpoint("http://127.0.0.1:7001/").unwrap(),
        "http://127.0.0.1:7001"
    );
    assert_eq!(
        normalize_endpoint("http://127.0.0.1:7001").unwrap(),
        "http://127.0.0.1:7001"
    );
    assert_eq!(
        normalize_endpoint("https://m1.example:443/").unwrap(),
        "https://m1.example"
    );
    assert_eq!(
        normalize_endpoint("http://h:1/prefix/").unwrap(),
        "http://h:1/prefix"
    );
    for bad in [
        "",
        "127.0.0.1:7001",
        "ftp://h:1",
        "http://",
        "http://h:1/?q=1",
        "http://h:1/#f",
        "not a url",
    ] {
        assert!(
            matches!(
                normalize_endpoint(bad),
                Err(ClientError::InvalidEndpoint(_))
            ),
            "accepted {bad:?}"
        );
    }
}

#[test]
fn new_rejects_empty_and_bad_endpoint_lists() {
    assert!(matches!(
        Client::new(vec![]),
        Err(ClientError::InvalidEndpoint(_))
    ));
    assert!(matches!(
        Client::new(vec!["http://127.0.0.1:1".into(), "mailto:x@y".into()]),
        Err(ClientError::InvalidEndpoint(_))
    ));
    let client = Client::new(vec!["http://127.0.0.1:1/".into()]).unwrap();
    assert_eq!(client.endpoints(), ["http://127.0.0.1:1"]);
    assert_eq!(client.config(), &ClientConfig::default());
}

#[test]
fn new_rejects_zero_durations() {
    let zero_interval = ClientConfig {
        retry_interval: Duration::ZERO,
        ..ClientConfig::default()
    };
    assert!(matches!(
        Client::with_config(vec!["http://h:1".into()], zero_interval),
        Err(ClientError::InvalidConfig(_))
    ));
    let zero_timeout = ClientConfig {
        request_timeout: Duration::ZERO,
        ..ClientConfig::default()
    };
    assert!(matches!(
        Client::with_config(vec!["http://h:1".into()], zero_timeout),
        Err(ClientError::InvalidConfig(_))
    ));
}

#[test]
fn defaults_match_protocol_section_11() {
    let config = ClientConfig::default();
    assert_eq!(config.patience, Duration::from_secs(8));
    assert_eq!(config.retry_interval, Duration::from_millis(250));
    assert_eq!(config.request_timeout, Duration::from_secs(5));
}

#[test]
fn path_segments_are_encoded_or_refused() {
    assert_eq!(path_segment("ex-1_a.b~c").unwrap(), "ex-1_a.b~c");
    assert_eq!(path_segment("ex:1%?#").unwrap(), "ex%3A1%25%3F%23");
    assert_eq!(path_segment("é").unwrap(), "%C3%A9");
    for bad in ["", ".", "..", "a/b", "a b", "a\tb", "a\nb", "a\u{7f}"] {
        assert!(
            matches!(path_segment(bad), Err(ClientError::InvalidRequest(_))),
            "accepted {bad:?}"
        );
    }
}

#[test]
fn values_are_percent_encoded() {
    assert_eq!(percent_encode("user-42"), "user-42");
    assert_eq!(percent_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    assert_eq!(
        with_consistency("/v1/routing?key=a", true),
        "/v1/routing?key=a&consistent=true"
    );
    assert_eq!(
        with_consistency("/v1/state", true),
        "/v1/state?consistent=true"
    );
    assert_eq!(with_consistency("/v1/state", false), "/v1/state");
}

#[test]
fn inspection_paths_are_validated() {
    assert!(validate_path("/v1/state").is_ok());
    assert!(validate_path("/v1/routing?key=abc").is_ok());
    for bad in ["v1/state", "//evil.example/x", "/v1/a b", "http://h/v1"] {
        assert!(validate_path(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn code_looks_through_patience_exhausted() {
    let refused = ClientError::Problem(Problem::new(ErrorCode::NoLeader, "electing"));
    assert_eq!(refused.code(), Some(ErrorCode::NoLeader));
    let exhausted = ClientError::PatienceExhausted {
        last: Box::new(refused),
    };
    assert_eq!(exhausted.code(), Some(ErrorCode::NoLeader));
    assert_eq!(exhausted.problem().map(|p| p.status), Some(503));
    assert_eq!(ClientError::Transport("x".into()).code(), None);
    assert_eq!(
        ClientError::InvalidRequest("x".into()).code(),
        Some(ErrorCode::InvalidRequest)
    );
}

#[test]
fn mark_failed_rotates_endpoints_and_drops_a_failed_leader() {
    let client = Client::new(vec!["http://a:1".into(), "http://b:1".into()]).unwrap();
    assert_eq!(client.target(), "http://a:1");
    client.mark_failed("http://a:1");
    assert_eq!(client.target(), "http://b:1");
    // A second report of the same failure must not skip b.
    client.mark_failed("http://a:1");
    assert_eq!(client.target(), "http://b:1");

    client.record_leader("http://c:1/");
    assert_eq!(client.target(), "http://c:1");
    assert_eq!(client.leader_hint().as_deref(), Some("http://c:1"));
    client.mark_failed("http://c:1");
    assert_eq!(client.leader_hint(), None);
    assert_eq!(client.target(), "http://b:1");

    client.record_leader("not a url");
    assert_eq!(client.leader_hint(), None, "unusable hints are ignored");
}

#[test]
fn clones_share_the_leader_hint() {
    let client = Client::new(vec!["http://a:1".into()]).unwrap();
    let clone = client.clone();
    client.record_leader("http://b:2");
    assert_eq!(clone.leader_hint().as_deref(), Some("http://b:2"));
}
