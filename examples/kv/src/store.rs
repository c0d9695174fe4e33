//! The shard store: one SQLite file per shard in a shared directory, and the epoch rule that
//! fences it (docs/FENCING.md).
//!
//! The directory stands in for shared storage: every process of the service opens the same
//! files, so a shard's new owner reads its data where the previous owner left it. SQLite's file
//! locks make each transaction atomic against every other process on this machine; a real
//! deployment would put the shards in a database or object store with a conditional write of its
//! own, and keep exactly the same rule.
//!
//! **The rule.** Each file keeps, beside its data, the highest epoch it has accepted for its shard
//! (the `fence` table). A write carries the epoch of the permit it was admitted under and, in the
//! same transaction as the write itself, is compared with the stored epoch: lower is refused and
//! changes nothing; equal or higher is applied, and a higher one becomes the stored epoch. An
//! owner that was deposed while its write was in flight (paused, partitioned, slow) therefore
//! cannot overwrite what its successor wrote: the successor raised the stored epoch before it
//! served the shard ([`ShardStore::raise_epoch`]). Reads compare too, so a deposed owner does not
//! serve data it no longer owns.
//!
//! **The change position.** Every accepted write also takes the shard's next position (`seq`),
//! in the same transaction, and the fence row keeps the highest one given (the high-water mark).
//! A secondary's warm copy ([`crate::copies`]) fetches only what changed since the position it
//! has applied ([`ShardStore::changes_since`]). Writes are serialised by the file's write lock,
//! so positions are given in commit order: a reader that sees position N sees every change up to
//! N, with no gap a later commit could fill. Keys are only ever upserted (the service has no
//! delete), so the newest row of each key changed since N is the whole delta.
//!
//! Everything here is synchronous (rusqlite); the service calls it on tokio's blocking pool.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// How long a transaction waits for another process's lock on the same shard file before it
/// fails (`SQLITE_BUSY`). Transactions here are a few statements, so a wait this long means a
/// process holding the lock is stalled (paused or killed mid-write: SQLite releases a dead
/// process's locks), and the request is answered `503` instead of waiting without bound.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema of every shard file as the first release of this example wrote it. `fence` has
/// exactly one row, naming the shard the file belongs to (checked on open, so a file copied or
/// renamed to another shard's name is refused) and the highest epoch accepted. `kv.epoch` is the
/// epoch each value was written at, which readers get back, so a history check can tell which
/// owner wrote what. The change positions are added by [`migrate`], to new files and to files
/// written before they existed alike, so both take one path.
const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS fence (
        shard INTEGER PRIMARY KEY NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 0)
    );
    CREATE TABLE IF NOT EXISTS kv (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 0)
    );
";

/// The position columns [`migrate`] adds: each row's position (`kv.seq`), and the highest one
/// given (`fence.seq`, the high-water mark).
const POSITION_COLUMNS: &str = "
    ALTER TABLE kv ADD COLUMN seq INTEGER NOT NULL DEFAULT 0 CHECK (seq >= 0);
    ALTER TABLE fence ADD COLUMN seq INTEGER NOT NULL DEFAULT 0 CHECK (seq >= 0);
";

/// The delta of a copy is read by position.
const POSITION_INDEX: &str = "CREATE INDEX IF NOT EXISTS kv_by_seq ON kv (seq);";

/// Why a store operation failed (not a refusal by the epoch rule: those are outcomes).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store directory cannot be created or used.
    #[error("store directory {}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A shard file cannot be opened or given its schema.
    #[error("shard file {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// A shard file's fence names another shard: it was copied or renamed.
    #[error("shard file {} belongs to shard {found}, not {expected}", path.display())]
    WrongShard {
        /// The file.
        path: PathBuf,
        /// The shard its name says.
        expected: u32,
        /// The shard its fence row says.
        found: i64,
    },
    /// An epoch does not fit SQLite's signed 64-bit integers (no real epoch comes near).
    #[error("epoch {0} is out of the store's range")]
    EpochOutOfRange(u64),
    /// The stored epoch is negative or otherwise not one this code wrote.
    #[error("shard {shard}: stored epoch {stored} is not valid")]
    CorruptEpoch {
        /// The shard.
        shard: u32,
        /// What the file holds.
        stored: i64,
    },
    /// A stored position is negative: not one this code wrote.
    #[error("shard {shard}: stored position {stored} is not valid")]
    CorruptPosition {
        /// The shard.
        shard: u32,
        /// What the file holds.
        stored: i64,
    },
    /// Another process held the shard's lock for longer than [`BUSY_TIMEOUT`], or SQLite failed.
    #[error("shard {shard}: {source}")]
    Sqlite {
        /// The shard.
        shard: u32,
        /// Why.
        source: rusqlite::Error,
    },
}

impl StoreError {
    /// Whether the failure is another process holding the shard's lock (retrying later can
    /// succeed), as opposed to a broken file or directory.
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite {
                source: rusqlite::Error::SqliteFailure(error, _),
                ..
            } if matches!(error.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

/// What raising a shard's stored epoch did ([`ShardStore::raise_epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// The stored epoch was below ours and is ours now: writes of every earlier owner are
    /// refused from here on.
    Raised {
        /// The stored epoch before.
        from: u64,
    },
    /// The stored epoch already was ours (raised before, or written at it).
    AlreadyCurrent,
    /// The store has accepted a newer epoch than ours: another owner came after us, and this
    /// process must not serve the shard.
    Superseded {
        /// The newer epoch the store holds.
        store_epoch: u64,
    },
}

/// What a conditional write did ([`ShardStore::put`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Applied and committed at the write's epoch.
    Written,
    /// Refused by the epoch rule: the store has accepted a newer owner's epoch. Nothing changed.
    StaleEpoch {
        /// The stored epoch that refused the write.
        store_epoch: u64,
    },
}

/// A value as stored: the value and the epoch it was written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The value.
    pub value: String,
    /// The epoch of the owner that wrote it.
    pub written_epoch: u64,
}

/// One key as it changed: its newest value, the epoch it was written at and its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The epoch of the owner that wrote it.
    pub epoch: u64,
    /// The position the write took.
    pub seq: u64,
}

/// What changed in a shard after a position, read in one transaction
/// ([`ShardStore::changes_since`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePage {
    /// The highest epoch the store had accepted for the shard.
    pub store_epoch: u64,
    /// The highest position the store had given: a copy that applied every change up to it
    /// held exactly what the store held.
    pub high_water: u64,
    /// The changes after the position asked for, ascending by position, at most the limit
    /// asked for: fewer than `high_water` reaches when the limit cut them.
    pub changes: Vec<Change>,
}

/// What a fenced read found ([`ShardStore::get`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The key's value.
    Found(Stored),
    /// The key was never written.
    Missing,
    /// The store has accepted a newer owner's epoch: this reader is deposed and must not serve.
    StaleEpoch {
        /// The newer epoch the store holds.
        store_epoch: u64,
    },
}

/// The shard files under one directory. Shared by every request of a process; each shard's
/// connection is opened on first use and kept until [`ShardStore::forget`].
#[derive(Debug)]
pub struct ShardStore {
    dir: PathBuf,
    /// One connection per shard: a connection serves one transaction at a time, and a process
    /// holds at most the shards it owns (plus those it owned recently), so this map is bounded
    /// by the shard count.
    connections: Mutex<BTreeMap<u32, Arc<Mutex<Connection>>>>,
}

impl ShardStore {
    /// The store in `dir`, created if missing. Shard files are created on first use.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Directory {
            path: dir.clone(),
            source,
        })?;
        Ok(Self {
            dir,
            connections: Mutex::new(BTreeMap::new()),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `shard`: `shard-00007.sqlite3`, so a listing sorts by shard.
    pub fn path_of(&self, shard: u32) -> PathBuf {
        self.dir.join(format!("shard-{shard:05}.sqlite3"))
    }

    /// Raises the stored epoch of `shard` to `epoch` in one transaction, never lowering it. The
    /// new owner of a shard calls this before it serves the shard, so that a write of an earlier
    /// owner still in flight (admitted before that owner was deposed, arriving late) is refused
    /// even if the new owner has not written anything yet.
    pub fn raise_epoch(&self, shard: u32, epoch: u64) -> Result<Raise, StoreError> {
        let wanted = to_sql(epoch)?;
        self.with_connection(shard, |connection| {
            // IMMEDIATE takes the write lock before the read, so no other process can change the
            // fence between our compare and our set.
            let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let stored = read_fence(&tx, shard)?;
            let outcome = if stored > epoch {
                Raise::Superseded {
                    store_epoch: stored,
                }
            } else if stored == epoch {
                Raise::AlreadyCurrent
            } else {
                tx.execute(
                    "UPDATE fence SET epoch = ?1 WHERE shard = ?2",
                    params![wanted, i64::from(shard)],
                )?;
                Raise::Raised { from: stored }
            };
            tx.commit()?;
            Ok(outcome)
        })
    }

    /// Writes `key = value` for `shard` if `epoch` is not below the stored epoch, in one
    /// transaction with the compare: the epoch rule. A higher epoch than stored becomes the
    /// stored one (its owner's raise may not have happened yet; a write is as good a proof of
    /// ownership as a raise).
    pub fn put(
        &self,
        shard: u32,
        epoch: u64,
        key: &str,
        value: &str,
    ) -> Result<WriteOutcome, StoreError> {
        let write_epoch = to_sql(epoch)?;
        self.with_connection(shard, |connection| {
            let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let stored = read_fence(&tx, shard)?;
            if epoch < stored {
                // Dropping the transaction rolls it back: nothing was written.
                return Ok(WriteOutcome::StaleEpoch {
                    store_epoch: stored,
                });
            }
            // The fence's epoch rises with a higher write, and its high-water mark by one: the
            // position this write takes, given under the write lock, so in commit order.
            let seq: i64 = tx.query_row(
                "UPDATE fence SET epoch = max(epoch, ?1), seq = seq + 1 WHERE shard = ?2
                 RETURNING seq",
                params![write_epoch, i64::from(shard)],
                |row| row.get(0),
            )?;
            tx.execute(
                "INSERT INTO kv (key, value, epoch, seq) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (key) DO UPDATE
                 SET value = excluded.value, epoch = excluded.epoch, seq = excluded.seq",
                params![key, value, write_epoch, seq],
            )?;
            tx.commit()?;
            Ok(WriteOutcome::Written)
        })
    }

    /// Reads `key` of `shard` for an owner at `epoch`: refused if the store has accepted a newer
    /// epoch (the reader is deposed). The fence and the value are read in one transaction, so
    /// the value is one the fence allowed.
    pub fn get(&self, shard: u32, epoch: u64, key: &str) -> Result<ReadOutcome, StoreError> {
        self.with_connection(shard, |connection| {
            let tx = connection.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let stored = read_fence(&tx, shard)?;
            if epoch < stored {
                return Ok(ReadOutcome::StaleEpoch {
                    store_epoch: stored,
                });
            }
            let row: Option<(String, i64)> = tx
                .query_row(
                    "SELECT value, epoch FROM kv WHERE key = ?1",
                    params![key],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            tx.commit()?;
            match row {
                None => Ok(ReadOutcome::Missing),
                Some((value, written)) => Ok(ReadOutcome::Found(Stored {
                    value,
                    written_epoch: from_sql(shard, written)?,
                })),
            }
        })
    }

    /// Every change of `shard` after position `after`, at most `limit` of them, ascending, with
    /// the stored epoch and the high-water mark, all read in one transaction so they agree: the
    /// delta a secondary's copy applies ([`crate::copies::ShardCopy::apply`]). Not fenced: a
    /// secondary holds no epoch of its own to compare (its permits carry the primary's, P19.1),
    /// and it only reads.
    pub fn changes_since(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
    ) -> Result<ChangePage, StoreError> {
        let after_sql = to_sql_position(after);
        let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
        self.with_connection(shard, |connection| {
            let tx = connection.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let store_epoch = read_fence(&tx, shard)?;
            let high_water = read_high_water(&tx, shard)?;
            let rows: Vec<(String, String, i64, i64)> = {
                let mut statement = tx.prepare_cached(
                    "SELECT key, value, epoch, seq FROM kv WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                )?;
                let rows = statement
                    .query_map(params![after_sql, limit_sql], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })?
                    .collect::<Result<_, _>>()?;
                rows
            };
            tx.commit()?;
            let changes = rows
                .into_iter()
                .map(|(key, value, epoch, seq)| {
                    Ok(Change {
                        key,
                        value,
                        epoch: from_sql(shard, epoch)?,
                        seq: position_from_sql(shard, seq)?,
                    })
                })
                .collect::<Result<_, StoreError>>()?;
            Ok(ChangePage {
                store_epoch,
                high_water,
                changes,
            })
        })
    }

    /// The highest position `shard` has given (0 for a shard never written): for inspection
    /// and tests.
    pub fn high_water(&self, shard: u32) -> Result<u64, StoreError> {
        self.with_connection(shard, |connection| read_high_water(connection, shard))
    }

    /// The stored epoch of `shard` (0 for a shard never served): for inspection and tests.
    pub fn fence_epoch(&self, shard: u32) -> Result<u64, StoreError> {
        self.with_connection(shard, |connection| read_fence(connection, shard))
    }

    /// Closes the connection of a shard this process no longer holds (a later use reopens it).
    pub fn forget(&self, shard: u32) {
        self.connections().remove(&shard);
    }

    fn connections(&self) -> MutexGuard<'_, BTreeMap<u32, Arc<Mutex<Connection>>>> {
        // The map only caches connections; one left half-updated by a panic is still valid.
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `operation` on the shard's connection, opening it first if needed.
    fn with_connection<T>(
        &self,
        shard: u32,
        operation: impl FnOnce(&mut Connection) -> Result<T, StoreOpError>,
    ) -> Result<T, StoreError> {
        let connection = {
            let mut connections = self.connections();
            match connections.get(&shard) {
                Some(connection) => Arc::clone(connection),
                None => {
                    let connection = Arc::new(Mutex::new(self.open_shard(shard)?));
                    connections.insert(shard, Arc::clone(&connection));
                    connection
                }
            }
        };
        // A panic inside a transaction drops it, which rolls it back: the connection is sound.
        let mut connection = connection.lock().unwrap_or_else(PoisonError::into_inner);
        operation(&mut connection).map_err(|error| match error {
            StoreOpError::Sqlite(source) => StoreError::Sqlite { shard, source },
            StoreOpError::Store(error) => error,
        })
    }

    fn open_shard(&self, shard: u32) -> Result<Connection, StoreError> {
        let path = self.path_of(shard);
        let opened = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        let mut connection = Connection::open(&path).map_err(opened)?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(opened)?;
        // The default rollback journal, not WAL: WAL needs shared memory between the processes,
        // which shared storage does not give. FULL sync: a write is acknowledged only once it is
        // on disk, since "acknowledged" is what the history check holds us to.
        connection
            .execute_batch("PRAGMA journal_mode = DELETE; PRAGMA synchronous = FULL;")
            .map_err(opened)?;
        connection.execute_batch(SCHEMA).map_err(opened)?;
        connection
            .execute(
                "INSERT OR IGNORE INTO fence (shard, epoch) VALUES (?1, 0)",
                params![i64::from(shard)],
            )
            .map_err(opened)?;
        let mut statement = connection
            .prepare("SELECT shard FROM fence")
            .map_err(opened)?;
        let shards: Vec<i64> = statement
            .query_map([], |row| row.get(0))
            .and_then(Iterator::collect)
            .map_err(opened)?;
        drop(statement);
        if let Some(&found) = shards.iter().find(|&&found| found != i64::from(shard)) {
            return Err(StoreError::WrongShard {
                path,
                expected: shard,
                found,
            });
        }
        migrate(&mut connection).map_err(opened)?;
        Ok(connection)
    }
}

/// Gives a file without change positions (written before they existed, or just created) its
/// position columns, numbering the rows it already holds, and the index the deltas are read by.
/// In one `IMMEDIATE` transaction that checks again under the write lock, so two processes
/// opening the same old file at once migrate it once.
///
/// The rows are numbered in the order of the epochs they were written at (then of insertion),
/// the order a copy applies them in: a copy refuses a change at an epoch below one it applied
/// ([`crate::copies::ShardCopy::apply`]), so numbering by insertion alone would have it refuse an
/// old key written before a newer key was last updated at a higher epoch.
fn migrate(connection: &mut Connection) -> Result<(), rusqlite::Error> {
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let has_positions: bool = tx.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('kv') WHERE name = 'seq'",
        [],
        |row| row.get(0),
    )?;
    if !has_positions {
        tx.execute_batch(POSITION_COLUMNS)?;
        let rowids: Vec<i64> = {
            let mut statement = tx.prepare("SELECT rowid FROM kv ORDER BY epoch, rowid")?;
            let rowids = statement
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            rowids
        };
        let mut numbered: i64 = 0;
        {
            let mut update = tx.prepare("UPDATE kv SET seq = ?1 WHERE rowid = ?2")?;
            for rowid in rowids {
                numbered += 1;
                update.execute(params![numbered, rowid])?;
            }
        }
        tx.execute("UPDATE fence SET seq = ?1", params![numbered])?;
    }
    tx.execute_batch(POSITION_INDEX)?;
    tx.commit()
}
/// An error inside a transaction: SQLite's, or one of ours (a bad stored value).
#[derive(Debug)]
enum StoreOpError {
    Sqlite(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for StoreOpError {
    fn from(error: rusqlite::Error) -> Self {
        StoreOpError::Sqlite(error)
    }
}

impl From<StoreError> for StoreOpError {
    fn from(error: StoreError) -> Self {
        StoreOpError::Store(error)
    }
}

fn read_fence(connection: &Connection, shard: u32) -> Result<u64, StoreOpError> {
    let stored: i64 = connection.query_row(
        "SELECT epoch FROM fence WHERE shard = ?1",
        params![i64::from(shard)],
        |row| row.get(0),
    )?;
    Ok(from_sql(shard, stored)?)
}

fn read_high_water(connection: &Connection, shard: u32) -> Result<u64, StoreOpError> {
    let stored: i64 = connection.query_row(
        "SELECT seq FROM fence WHERE shard = ?1",
        params![i64::from(shard)],
        |row| row.get(0),
    )?;
    Ok(position_from_sql(shard, stored)?)
}

/// A position to compare with: every stored one is at most `i64::MAX`, so a larger one asks for
/// nothing and is clamped rather than refused.
fn to_sql_position(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

fn position_from_sql(shard: u32, stored: i64) -> Result<u64, StoreError> {
    u64::try_from(stored).map_err(|_| StoreError::CorruptPosition { shard, stored })
}

fn to_sql(epoch: u64) -> Result<i64, StoreError> {
    i64::try_from(epoch).map_err(|_| StoreError::EpochOutOfRange(epoch))
}

fn from_sql(shard: u32, stored: i64) -> Result<u64, StoreError> {
    u64::try_from(stored).map_err(|_| StoreError::CorruptEpoch { shard, stored })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, ShardStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = ShardStore::open(dir.path().join("shards")).unwrap();
        (dir, store)
    }

    fn found(value: &str, written_epoch: u64) -> ReadOutcome {
        ReadOutcome::Found(Stored {
            value: value.into(),
            written_epoch,
        })
    }

    /// The epoch rule: a write with an epoch below the stored one is refused and changes
    /// nothing; the stored value and its epoch stay the newer owner's.
    #[test]
    fn a_write_below_the_stored_epoch_is_refused_and_changes_nothing() {
        let (_dir, store) = store();
        assert_eq!(
            store.put(3, 2, "k", "new owner").unwrap(),
            WriteOutcome::Written
        );
        assert_eq!(
            store.put(3, 1, "k", "deposed owner").unwrap(),
            WriteOutcome::StaleEpoch { store_epoch: 2 }
        );
        assert_eq!(
            store.put(3, 1, "other", "deposed owner").unwrap(),
            WriteOutcome::StaleEpoch { store_epoch: 2 }
        );
        assert_eq!(store.get(3, 2, "k").unwrap(), found("new owner", 2));
        assert_eq!(store.get(3, 2, "other").unwrap(), ReadOutcome::Missing);
        assert_eq!(store.fence_epoch(3).unwrap(), 2);
    }

    #[test]
    fn writes_at_the_stored_epoch_or_above_are_applied_and_a_higher_one_raises_it() {
        let (_dir, store) = store();
        assert_eq!(store.fence_epoch(0).unwrap(), 0);
        assert_eq!(store.put(0, 1, "k", "a").unwrap(), WriteOutcome::Written);
        assert_eq!(store.put(0, 1, "k", "b").unwrap(), WriteOutcome::Written);
        assert_eq!(store.fence_epoch(0).unwrap(), 1);
        assert_eq!(store.put(0, 4, "k", "c").unwrap(), WriteOutcome::Written);
        assert_eq!(store.fence_epoch(0).unwrap(), 4);
        assert_eq!(store.get(0, 4, "k").unwrap(), found("c", 4));
    }

    /// The raise on arrival: after the new owner raised the stored epoch, a write of the old
    /// owner is refused although the new owner has written nothing.
    #[test]
    fn a_raise_fences_the_previous_owner_before_the_new_one_writes() {
        let (_dir, store) = store();
        assert_eq!(
            store.put(5, 1, "k", "old owner").unwrap(),
            WriteOutcome::Written
        );
        assert_eq!(store.raise_epoch(5, 2).unwrap(), Raise::Raised { from: 1 });
        assert_eq!(
            store.put(5, 1, "k", "old owner, late").unwrap(),
            WriteOutcome::StaleEpoch { store_epoch: 2 }
        );
        assert_eq!(
            store.get(5, 1, "k").unwrap(),
            ReadOutcome::StaleEpoch { store_epoch: 2 },
            "a deposed owner's read is refused too"
        );
        assert_eq!(
            store.get(5, 2, "k").unwrap(),
            found("old owner", 1),
            "the new owner reads what the old one left"
        );
    }

    #[test]
    fn a_raise_never_lowers_the_stored_epoch() {
        let (_dir, store) = store();
        assert_eq!(store.raise_epoch(1, 3).unwrap(), Raise::Raised { from: 0 });
        assert_eq!(store.raise_epoch(1, 3).unwrap(), Raise::AlreadyCurrent);
        assert_eq!(
            store.raise_epoch(1, 2).unwrap(),
            Raise::Superseded { store_epoch: 3 }
        );
        assert_eq!(store.fence_epoch(1).unwrap(), 3);
    }

    /// Shared storage: a second store on the same directory (another process) sees the first
    /// one's fence and data, and its stale write is refused by the same files.
    #[test]
    fn two_stores_on_one_directory_share_fence_and_data() {
        let (dir, first) = store();
        let second = ShardStore::open(dir.path().join("shards")).unwrap();
        assert_eq!(first.put(9, 1, "k", "v1").unwrap(), WriteOutcome::Written);
        assert_eq!(second.raise_epoch(9, 2).unwrap(), Raise::Raised { from: 1 });
        assert_eq!(
            first.put(9, 1, "k", "late").unwrap(),
            WriteOutcome::StaleEpoch { store_epoch: 2 }
        );
        assert_eq!(second.get(9, 2, "k").unwrap(), found("v1", 1));
    }

    #[test]
    fn a_file_of_another_shard_is_refused() {
        let (_dir, store) = store();
        store.fence_epoch(1).unwrap();
        store.forget(1);
        std::fs::rename(store.path_of(1), store.path_of(2)).unwrap();
        let error = store.fence_epoch(2).unwrap_err();
        assert!(
            matches!(
                error,
                StoreError::WrongShard {
                    expected: 2,
                    found: 1,
                    ..
                }
            ),
            "{error}"
        );
    }

    fn change(key: &str, value: &str, epoch: u64, seq: u64) -> Change {
        Change {
            key: key.into(),
            value: value.into(),
            epoch,
            seq,
        }
    }

    /// The change position: each accepted write takes the next one in its own transaction (an
    /// update of a key moves the key to its new position), a refused write takes none, and the
    /// delta after a position is the newest row of each key changed since, in order, cut at the
    /// limit, beside the high-water mark and the stored epoch. Fails if `put` stops advancing
    /// the position or writing it with the row.
    #[test]
    fn each_write_takes_the_next_position_and_a_delta_reads_what_changed_since() {
        let (_dir, store) = store();
        assert_eq!(store.high_water(4).unwrap(), 0);
        assert_eq!(store.put(4, 1, "a", "a1").unwrap(), WriteOutcome::Written);
        assert_eq!(store.put(4, 1, "b", "b1").unwrap(), WriteOutcome::Written);
        assert_eq!(store.put(4, 2, "a", "a2").unwrap(), WriteOutcome::Written);
        assert_eq!(
            store.put(4, 1, "c", "stale").unwrap(),
            WriteOutcome::StaleEpoch { store_epoch: 2 }
        );
        assert_eq!(
            store.high_water(4).unwrap(),
            3,
            "the refused write took none"
        );
        let all = store.changes_since(4, 0, 100).unwrap();
        assert_eq!(
            all,
            ChangePage {
                store_epoch: 2,
                high_water: 3,
                changes: vec![change("b", "b1", 1, 2), change("a", "a2", 2, 3)],
            }
        );
        let after = store.changes_since(4, 2, 100).unwrap();
        assert_eq!(after.changes, vec![change("a", "a2", 2, 3)]);
        let cut = store.changes_since(4, 0, 1).unwrap();
        assert_eq!(
            (cut.changes, cut.high_water),
            (vec![change("b", "b1", 1, 2)], 3),
            "cut at the limit, the high-water mark says more is there"
        );
        assert!(store.changes_since(4, 3, 100).unwrap().changes.is_empty());
        assert!(store
            .changes_since(4, u64::MAX, 100)
            .unwrap()
            .changes
            .is_empty());
        // A raise moves the epoch, not the position: nothing was written.
        assert_eq!(store.raise_epoch(4, 5).unwrap(), Raise::Raised { from: 2 });
        let raised = store.changes_since(4, 3, 100).unwrap();
        assert_eq!((raised.store_epoch, raised.high_water), (5, 3));
    }

    /// A shard file written before change positions existed opens: its rows are numbered in
    /// the order of their epochs (then of insertion), its high-water mark is their count, and
    /// the next write takes the one after. Opening it again (another process) changes nothing.
    /// Fails without the migration (no `seq` column) or with rows numbered by insertion only.
    #[test]
    fn a_file_without_positions_is_migrated_on_open_in_epoch_order() {
        let (_dir, store) = store();
        let path = store.path_of(6);
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch(SCHEMA).unwrap();
            old.execute_batch(
                "INSERT INTO fence (shard, epoch) VALUES (6, 3);
                 INSERT INTO kv (key, value, epoch) VALUES ('first', 'f', 3);
                 INSERT INTO kv (key, value, epoch) VALUES ('second', 's', 1);
                 INSERT INTO kv (key, value, epoch) VALUES ('third', 't', 2);",
            )
            .unwrap();
        }
        let page = store.changes_since(6, 0, 100).unwrap();
        assert_eq!(
            page,
            ChangePage {
                store_epoch: 3,
                high_water: 3,
                changes: vec![
                    change("second", "s", 1, 1),
                    change("third", "t", 2, 2),
                    change("first", "f", 3, 3),
                ],
            }
        );
        assert_eq!(
            store.put(6, 3, "fourth", "4").unwrap(),
            WriteOutcome::Written
        );
        store.forget(6);
        let again = ShardStore::open(store.dir()).unwrap();
        let page = again.changes_since(6, 2, 100).unwrap();
        assert_eq!(
            page.changes,
            vec![change("first", "f", 3, 3), change("fourth", "4", 3, 4)],
            "a second open numbers nothing again"
        );
        assert_eq!(
            again.get(6, 3, "second").unwrap(),
            found("s", 1),
            "the data survives the migration"
        );
    }

    #[test]
    fn epochs_beyond_sqlite_integers_are_refused() {
        let (_dir, store) = store();
        assert!(matches!(
            store.put(0, u64::MAX, "k", "v"),
            Err(StoreError::EpochOutOfRange(u64::MAX))
        ));
    }
}
