//! `Executor::start` refusing what cannot work, over real sockets (P8.1).

use tokio::net::TcpListener;

use crate::{Executor, ExecutorConfig, StartError};

#[tokio::test]
async fn start_refuses_configurations_that_cannot_work() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let in_use = ExecutorConfig::new(
        vec!["http://127.0.0.1:1".into()],
        taken.local_addr().unwrap().to_string(),
    );
    assert!(matches!(
        Executor::start(in_use).await,
        Err(StartError::Bind { .. })
    ));
    let wildcard = ExecutorConfig::new(vec!["http://127.0.0.1:1".into()], "0.0.0.0:0");
    assert!(matches!(
        Executor::start(wildcard).await,
        Err(StartError::InvalidConfig(_))
    ));
    let no_managers = ExecutorConfig::new(vec![], "127.0.0.1:0");
    assert!(matches!(
        Executor::start(no_managers).await,
        Err(StartError::Managers(_))
    ));
    let bad_advertise = ExecutorConfig {
        advertise: Some("not a url".into()),
        ..ExecutorConfig::new(vec!["http://127.0.0.1:1".into()], "127.0.0.1:0")
    };
    assert!(matches!(
        Executor::start(bad_advertise).await,
        Err(StartError::InvalidConfig(_))
    ));
    let dir = tempfile::tempdir().unwrap();
    let unwritable = ExecutorConfig {
        event_log: Some(dir.path().join("missing").join("events.jsonl")),
        ..ExecutorConfig::new(vec!["http://127.0.0.1:1".into()], "127.0.0.1:0")
    };
    assert!(matches!(
        Executor::start(unwritable).await,
        Err(StartError::EventLog { .. })
    ));
}

/// P15.1: a capacity of 0 or above `MAX_CAPACITY` is refused before anything starts, naming the
/// flag, as a configuration error (the binary exits 2).
#[tokio::test]
async fn start_refuses_a_capacity_out_of_range() {
    for capacity in [0, leasehold_api::wire::MAX_CAPACITY + 1] {
        let config = ExecutorConfig {
            capacity,
            ..ExecutorConfig::new(vec!["http://127.0.0.1:1".into()], "127.0.0.1:0")
        };
        let error = Executor::start(config).await.unwrap_err();
        assert!(error.is_config_error(), "{capacity}: {error}");
        assert!(
            matches!(&error, StartError::InvalidConfig(detail) if detail.contains("--capacity")),
            "{capacity}: {error}"
        );
    }
}

/// P17.3: an application version outside its alphabet or length is refused before anything
/// starts, naming the flag, as a configuration error (the binary exits 2).
#[tokio::test]
async fn p17_3_start_refuses_a_malformed_app_version() {
    for app_version in ["", "2.0 beta", &"9".repeat(65)] {
        let config = ExecutorConfig {
            app_version: Some(app_version.to_owned()),
            ..ExecutorConfig::new(vec!["http://127.0.0.1:1".into()], "127.0.0.1:0")
        };
        let error = Executor::start(config).await.unwrap_err();
        assert!(error.is_config_error(), "{app_version:?}: {error}");
        assert!(
            matches!(&error, StartError::InvalidConfig(detail) if detail.contains("--app-version")),
            "{app_version:?}: {error}"
        );
    }
}

/// P17.1: `--local-prepare` without a service to prepare (no `--local-listen`, no `--app-url`) is
/// refused before anything starts.
#[tokio::test]
async fn p17_1_start_refuses_local_prepare_without_a_service() {
    let config = ExecutorConfig {
        local_prepare: true,
        ..ExecutorConfig::new(vec!["http://127.0.0.1:1".into()], "127.0.0.1:0")
    };
    let error = Executor::start(config).await.unwrap_err();
    assert!(error.is_config_error(), "{error}");
    assert!(
        matches!(&error, StartError::InvalidConfig(detail) if detail.contains("--local-prepare")),
        "{error}"
    );
}
