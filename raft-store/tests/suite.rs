//! openraft's own storage conformance suite against this store, with and without group commit.
//! `Suite::test_all` builds its own runtimes, so these are plain `#[test]`s.

mod common;

use common::{KvConfig, KvState, LogStore, Machine};
use leasehold_raft_store::LogStoreConfig;
use openraft::testing::{StoreBuilder, Suite};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};
use tempfile::TempDir;

struct SledBuilder {
    group_commit: bool,
}

impl StoreBuilder<KvConfig, LogStore, Machine, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, Machine), StorageError<u64>> {
        fn fail(e: impl std::error::Error + 'static) -> StorageError<u64> {
            StorageIOError::new(ErrorSubject::Store, ErrorVerb::Write, AnyError::new(&e)).into()
        }
        let dir = TempDir::new().map_err(fail)?;
        let db = sled::open(dir.path()).map_err(fail)?;
        let config = LogStoreConfig {
            group_commit: self.group_commit,
            ..LogStoreConfig::default()
        };
        let (log_store, state_machine) =
            leasehold_raft_store::open::<KvConfig, KvState>(&db, dir.path(), config)
                .map_err(fail)?;
        Ok((dir, log_store, state_machine))
    }
}

#[test]
fn openraft_suite_passes_with_group_commit() {
    if let Err(error) = Suite::test_all(SledBuilder { group_commit: true }) {
        panic!("openraft storage suite failed: {error}");
    }
}

#[test]
fn openraft_suite_passes_without_group_commit() {
    if let Err(error) = Suite::test_all(SledBuilder {
        group_commit: false,
    }) {
        panic!("openraft storage suite failed: {error}");
    }
}
