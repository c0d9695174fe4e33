//! `leaseholdctl snapshot save|restore|inspect`: backup files on the local disk.
//!
//! Save writes atomically (temporary file in the target directory, fsync, rename, fsync of the
//! directory), so a crash leaves either no file or a whole one. Restore checks the whole file
//! before it creates anything, refuses a data directory that already holds something, and then
//! places the verified file in the empty directory, where the manager imports it on its first
//! start (and checks it again, in full).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::exit::CtlError;
use crate::backup::{parse_backup, BackupHeader, RESTORE_FILE_NAME};

/// What `snapshot restore` did, for `-o json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestorePrepared {
    pub header: BackupHeader,
    pub data_dir: PathBuf,
    /// The file the manager imports on its first start.
    pub prepared_file: PathBuf,
}

/// Checks a backup held in memory; `path` names it in errors.
pub fn verify(path: &Path, file: &[u8]) -> Result<BackupHeader, CtlError> {
    parse_backup(file)
        .map(|(header, _)| header)
        .map_err(|reason| CtlError::BadBackup {
            path: path.to_owned(),
            reason,
        })
}

/// Reads and checks a backup file.
pub fn read_verified(path: &Path) -> Result<(BackupHeader, Vec<u8>), CtlError> {
    let file = fs::read(path).map_err(|e| CtlError::io("reading", path, e))?;
    let header = verify(path, &file)?;
    Ok((header, file))
}

/// Writes `bytes` to `path` atomically: temporary sibling, fsync, rename, fsync of the directory.
/// An existing file at `path` is replaced only once the new one is complete.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CtlError> {
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| CtlError::BadInput(format!("{} is not a file path", path.display())))?;
    let temp = dir.join(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, path)?;
        File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&temp);
        CtlError::io("writing", path, e)
    })
}

/// Verifies `backup`, then prepares the empty (or absent) `data_dir` so a manager started on it
/// imports the backup on its first start. Nothing is created or changed unless every check passes.
pub fn prepare_restore(backup: &Path, data_dir: &Path) -> Result<RestorePrepared, CtlError> {
    let (header, file) = read_verified(backup)?;
    match fs::read_dir(data_dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CtlError::BadInput(format!(
                    "data directory {} is not empty: restore only into a new, empty directory \
                     (a restored cluster is a fresh cluster)",
                    data_dir.display()
                )));
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(CtlError::io("reading", data_dir, error)),
    }
    fs::create_dir_all(data_dir).map_err(|e| CtlError::io("creating", data_dir, e))?;
    let prepared_file = data_dir.join(RESTORE_FILE_NAME);
    write_atomically(&prepared_file, &file)?;
    Ok(RestorePrepared {
        header,
        data_dir: data_dir.to_owned(),
        prepared_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{encode_backup, BackupSource};

    fn backup_bytes() -> Vec<u8> {
        encode_backup(
            BackupSource {
                state_schema_version: 2,
                revision: 7,
                shard_count: 4,
                created_at_unix_ms: 1,
                source_node_id: 1,
            },
            br#"{"revision":7}"#,
            None,
        )
    }

    #[test]
    fn save_replaces_atomically_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("backup.lhb");
        write_atomically(&path, b"old").unwrap();
        write_atomically(&path, &backup_bytes()).unwrap();
        assert_eq!(fs::read(&path).unwrap(), backup_bytes());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("backup.lhb")]);
    }

    #[test]
    fn restore_prepares_an_absent_or_empty_directory() {
        let dir = tempfile::tempdir().unwrap();
        let backup = dir.path().join("b");
        fs::write(&backup, backup_bytes()).unwrap();
        let data_dir = dir.path().join("data/m1");
        let prepared = prepare_restore(&backup, &data_dir).unwrap();
        assert_eq!(prepared.header.revision, 7);
        assert_eq!(prepared.prepared_file, data_dir.join(RESTORE_FILE_NAME));
        assert_eq!(fs::read(&prepared.prepared_file).unwrap(), backup_bytes());
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        prepare_restore(&backup, &empty).unwrap();
    }

    #[test]
    fn restore_refuses_a_used_directory_and_a_bad_file_touching_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let backup = dir.path().join("b");
        fs::write(&backup, backup_bytes()).unwrap();
        let used = dir.path().join("used");
        fs::create_dir(&used).unwrap();
        fs::write(used.join("db"), b"x").unwrap();
        let error = prepare_restore(&backup, &used).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("not empty"), "{error}");
        assert!(!used.join(RESTORE_FILE_NAME).exists());

        let mut corrupt = backup_bytes();
        let last = corrupt.len() - 2;
        corrupt[last] ^= 0x01;
        fs::write(&backup, corrupt).unwrap();
        let fresh = dir.path().join("fresh");
        let error = prepare_restore(&backup, &fresh).unwrap_err();
        assert!(matches!(error, CtlError::BadBackup { .. }), "{error}");
        assert!(!fresh.exists(), "nothing is created for a bad file");
    }
}
