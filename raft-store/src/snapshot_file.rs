//! The snapshot in a file of its own beside sled's (PROTOCOL P2.5, P8.3).
//!
//! A snapshot of a million shards is tens of megabytes. Written as a sled value it goes through
//! sled's log, and the next flush that an append waits for carries it to disk: every append
//! behind a snapshot waited for the snapshot. In a file of its own it is written and made durable
//! beside the log, whose flushes carry only entries.
//!
//! Layout: `[MAGIC][meta record length: u32 LE][meta record][data]`. The meta record is a
//! checksummed envelope of openraft's snapshot metadata; the data is the snapshot data exactly as
//! it is sent to a follower, with an envelope and checksum of its own. A torn or flipped file is
//! reported when read, never restored.
//!
//! A snapshot replaces the previous one whole: it is written to [`PARTIAL_FILE`], synced, renamed
//! over [`SNAPSHOT_FILE`], and the directory synced, so after a crash the file is the old
//! snapshot or the new one. A partial file left by a crash is removed at open.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::StoreError;

/// The current snapshot, in the data directory.
pub const SNAPSHOT_FILE: &str = "raft-snapshot";
/// A snapshot being written; renamed to [`SNAPSHOT_FILE`] once durable.
pub(crate) const PARTIAL_FILE: &str = "raft-snapshot.partial";

/// The file's first bytes: what it is, and the layout's version, so a future layout is refused
/// instead of misread.
const MAGIC: &[u8; 8] = b"LHSNAP\x00\x01";
const LENGTH_LEN: usize = 4;

/// Bytes written between two syncs. A filesystem that orders data before its journal commits
/// (ext4's default) makes the log's next fsync wait for every dirty page of the snapshot file;
/// syncing a megabyte at a time keeps what any log flush may wait for to about a megabyte.
const SYNC_EVERY_BYTES: usize = 1 << 20;

/// A snapshot file's two parts, as stored.
pub(crate) struct FileSnapshot {
    pub(crate) meta_record: Vec<u8>,
    pub(crate) data: Vec<u8>,
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(SNAPSHOT_FILE)
}

fn file_error(path: &Path, source: io::Error) -> StoreError {
    StoreError::SnapshotFile {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `meta_record` and `data` as the directory's snapshot, durably, replacing the previous
/// one atomically. Blocking.
pub(crate) fn write(dir: &Path, meta_record: &[u8], data: &[u8]) -> Result<(), StoreError> {
    let partial = dir.join(PARTIAL_FILE);
    let fail = |source| file_error(&partial, source);
    let meta_len = u32::try_from(meta_record.len())
        .map_err(|_| fail(io::Error::other("snapshot metadata over 4 GiB")))?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&partial)
        .map_err(fail)?;
    file.write_all(MAGIC).map_err(fail)?;
    file.write_all(&meta_len.to_le_bytes()).map_err(fail)?;
    file.write_all(meta_record).map_err(fail)?;
    for chunk in data.chunks(SYNC_EVERY_BYTES) {
        file.write_all(chunk).map_err(fail)?;
        file.sync_data().map_err(fail)?;
    }
    file.sync_all().map_err(fail)?;
    drop(file);
    let target = path(dir);
    fs::rename(&partial, &target).map_err(|source| file_error(&target, source))?;
    sync_dir(dir)
}

/// Makes the directory's entries (a rename, a removal) durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| file_error(dir, source))
}

/// Reads the directory's snapshot file, or `None` when there is none. Blocking.
pub(crate) fn read(dir: &Path) -> Result<Option<FileSnapshot>, StoreError> {
    let target = path(dir);
    let mut bytes = Vec::new();
    match File::open(&target) {
        Ok(mut file) => file
            .read_to_end(&mut bytes)
            .map_err(|source| file_error(&target, source))?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(file_error(&target, source)),
    };
    split(&bytes).map(Some)
}

/// Reads only the file's meta record, or `None` when there is no file. Blocking.
pub(crate) fn read_meta_record(dir: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let target = path(dir);
    let mut file = match File::open(&target) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(file_error(&target, source)),
    };
    let mut head = [0u8; MAGIC.len() + LENGTH_LEN];
    let read = read_up_to(&mut file, &mut head).map_err(|source| file_error(&target, source))?;
    let meta_len = check_head(&head[..read])?;
    let mut meta_record = vec![0u8; meta_len];
    let read =
        read_up_to(&mut file, &mut meta_record).map_err(|source| file_error(&target, source))?;
    if read < meta_len {
        return Err(StoreError::Truncated {
            what: "snapshot file",
            len: head.len() + read,
        });
    }
    Ok(Some(meta_record))
}

/// Fills `buffer` as far as the file goes; returns how much it filled.
fn read_up_to(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            read => filled += read,
        }
    }
    Ok(filled)
}

/// Checks the magic and returns the meta record's length.
fn check_head(head: &[u8]) -> Result<usize, StoreError> {
    if head.len() < MAGIC.len() + LENGTH_LEN {
        return Err(StoreError::Truncated {
            what: "snapshot file",
            len: head.len(),
        });
    }
    let (magic, length) = head.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(StoreError::UnsupportedFormat {
            what: "snapshot file",
            found: magic[MAGIC.len() - 1],
            supported: MAGIC[MAGIC.len() - 1],
        });
    }
    let meta_len = u32::from_le_bytes([length[0], length[1], length[2], length[3]]);
    Ok(meta_len as usize)
}

fn split(bytes: &[u8]) -> Result<FileSnapshot, StoreError> {
    let head_len = MAGIC.len() + LENGTH_LEN;
    let meta_len = check_head(&bytes[..bytes.len().min(head_len)])?;
    let rest = &bytes[head_len..];
    if rest.len() < meta_len {
        return Err(StoreError::Truncated {
            what: "snapshot file",
            len: bytes.len(),
        });
    }
    let (meta_record, data) = rest.split_at(meta_len);
    Ok(FileSnapshot {
        meta_record: meta_record.to_vec(),
        data: data.to_vec(),
    })
}

/// Removes the snapshot file, if any, durably. Blocking.
pub(crate) fn remove(dir: &Path) -> Result<(), StoreError> {
    let target = path(dir);
    match fs::remove_file(&target) {
        Ok(()) => sync_dir(dir),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(file_error(&target, source)),
    }
}

/// Removes a partial file a crash left behind. Blocking.
pub(crate) fn remove_partial(dir: &Path) -> Result<(), StoreError> {
    let partial = dir.join(PARTIAL_FILE);
    match fs::remove_file(&partial) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(file_error(&partial, source)),
    }
}

/// The data's length in the directory's snapshot file, or `None` when there is none.
pub(crate) fn data_len(dir: &Path) -> Result<Option<u64>, StoreError> {
    let target = path(dir);
    let file_len = match fs::metadata(&target) {
        Ok(metadata) => metadata.len(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(file_error(&target, source)),
    };
    let Some(meta_record) = read_meta_record(dir)? else {
        return Ok(None);
    };
    let head_len = (MAGIC.len() + LENGTH_LEN + meta_record.len()) as u64;
    Ok(Some(file_len.saturating_sub(head_len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_snapshot_reads_back_and_replaces_the_previous_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        let data = vec![7u8; 3 * SYNC_EVERY_BYTES + 5];
        write(dir.path(), b"meta-1", &data).unwrap();
        write(dir.path(), b"meta-two", b"small").unwrap();
        let stored = read(dir.path()).unwrap().expect("a snapshot");
        assert_eq!(stored.meta_record, b"meta-two");
        assert_eq!(stored.data, b"small");
        assert_eq!(
            read_meta_record(dir.path()).unwrap().as_deref(),
            Some(&b"meta-two"[..])
        );
        assert_eq!(data_len(dir.path()).unwrap(), Some(5));
        assert!(!dir.path().join(PARTIAL_FILE).exists());
    }

    #[test]
    fn a_truncated_or_foreign_file_is_refused_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), b"meta", b"data").unwrap();
        let whole = fs::read(path(dir.path())).unwrap();
        // Cut inside the meta record.
        fs::write(path(dir.path()), &whole[..MAGIC.len() + LENGTH_LEN + 2]).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(StoreError::Truncated { .. })
        ));
        assert!(matches!(
            read_meta_record(dir.path()),
            Err(StoreError::Truncated { .. })
        ));
        // Cut inside the magic.
        fs::write(path(dir.path()), &whole[..3]).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(StoreError::Truncated { .. })
        ));
        // Another layout.
        let mut other = whole.clone();
        other[MAGIC.len() - 1] = 9;
        fs::write(path(dir.path()), &other).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(StoreError::UnsupportedFormat { found: 9, .. })
        ));
    }

    #[test]
    fn removal_leaves_no_file_and_tolerates_none() {
        let dir = tempfile::tempdir().unwrap();
        remove(dir.path()).unwrap();
        write(dir.path(), b"meta", b"data").unwrap();
        fs::write(dir.path().join(PARTIAL_FILE), b"torn").unwrap();
        remove_partial(dir.path()).unwrap();
        remove(dir.path()).unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        assert!(!dir.path().join(PARTIAL_FILE).exists());
    }
}
