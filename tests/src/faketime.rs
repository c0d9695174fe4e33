//! A process whose wall clock is off (PROTOCOL P6.4): libfaketime, preloaded into the process,
//! offsets what `clock_gettime(CLOCK_REALTIME)` and friends tell it; the monotonic clock, which
//! the executors' admission logs and every lease timer run on, is left alone
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`). Only the process's own reading changes: the kernel (file
//! times, other processes) keeps the true time, which is how [`log_clock_offset_ms`] sees the
//! offset a manager really runs with.
//!
//! The library is Debian's `libfaketime` package (pulled in by `faketime`). Without it a test
//! skips ([`Faketime::or_skip`]) unless `LEASEHOLD_REQUIRE_FAKETIME=1` makes that a failure.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_harness::Manager;

/// Names the libfaketime library to preload, where it is not in one of the usual places.
pub const LIBFAKETIME_ENV: &str = "LEASEHOLD_LIBFAKETIME";
/// Set to `1` to fail, not skip, a test that needs libfaketime where it is missing.
pub const REQUIRE_FAKETIME_ENV: &str = "LEASEHOLD_REQUIRE_FAKETIME";

/// The library: `libfaketimeMT`, the build for threaded programs (it serialises its own cached
/// state behind a mutex; the manager is a multi-threaded tokio program).
const LIBRARY: &str = "libfaketimeMT.so.1";

/// libfaketime, found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Faketime {
    pub library: PathBuf,
}

impl Faketime {
    /// [`LIBFAKETIME_ENV`] if set (it must exist), else the multiarch directory Debian installs
    /// it in, or `/usr/lib/faketime` and `/usr/local/lib/faketime` (a build from source); the
    /// error says why none will do.
    pub fn find() -> Result<Self, String> {
        if let Some(path) = std::env::var_os(LIBFAKETIME_ENV) {
            let library = PathBuf::from(path);
            return if library.is_file() {
                Ok(Self { library })
            } else {
                Err(format!(
                    "{LIBFAKETIME_ENV}={} is not a file",
                    library.display()
                ))
            };
        }
        let multiarch = format!("/usr/lib/{}-linux-gnu/faketime", std::env::consts::ARCH);
        let candidates = [
            multiarch.as_str(),
            "/usr/lib/faketime",
            "/usr/local/lib/faketime",
        ]
        .map(|dir| Path::new(dir).join(LIBRARY));
        candidates
            .iter()
            .find(|path| path.is_file())
            .map(|library| Self {
                library: library.clone(),
            })
            .ok_or_else(|| {
                format!(
                    "libfaketime is not installed (no {}; apt-get install faketime, or set \
                     {LIBFAKETIME_ENV} to its {LIBRARY})",
                    candidates
                        .iter()
                        .map(|path| path.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }

    /// [`Faketime::find`], or `None` after saying why the test skips
    /// ([`crate::skip_unless_required`] with [`REQUIRE_FAKETIME_ENV`]).
    #[track_caller]
    pub fn or_skip() -> Option<Self> {
        match Self::find() {
            Ok(faketime) => Some(faketime),
            Err(why) => {
                crate::skip_unless_required(REQUIRE_FAKETIME_ENV, &why);
                None
            }
        }
    }

    /// The environment that runs a process with its wall clock `ahead` of the true time (whole
    /// seconds) and its monotonic clock true.
    pub fn env_ahead(&self, ahead: Duration) -> [(&'static str, String); 3] {
        [
            ("LD_PRELOAD", self.library.display().to_string()),
            // A relative offset in seconds: the clock runs at the true rate from there.
            ("FAKETIME", format!("+{}", ahead.as_secs())),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
        ]
    }

    /// Runs `manager`, from its next start on, with its wall clock `ahead` of the true time.
    pub fn run_ahead(&self, manager: &mut Manager, ahead: Duration) {
        for (key, value) in self.env_ahead(ahead) {
            manager.set_env(key, &value);
        }
    }
}

/// How far ahead of the true time (negative: behind) the process that wrote the log at `path`
/// stamps its lines, in milliseconds: the last line's leading RFC 3339 timestamp (the managers'
/// text log format) less the file's modification time, which the kernel sets from the true clock
/// when that line is written. Accurate to the gap between stamping and writing the last line.
pub fn log_clock_offset_ms(path: &Path) -> Result<i64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let written = std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let stamped = text
        .lines()
        .rev()
        .find_map(|line| parse_utc_stamp(line.split_whitespace().next()?))
        .ok_or_else(|| format!("{}: no line starts with a time", path.display()))?;
    let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(match stamped.duration_since(written) {
        Ok(ahead) => millis(ahead),
        Err(behind) => -millis(behind.duration()),
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (UTC, as tracing stamps its lines) as a time; `None` for
/// anything else.
pub fn parse_utc_stamp(text: &str) -> Option<SystemTime> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut date = date.splitn(3, '-');
    let year: i64 = date.next()?.parse().ok()?;
    let month: i64 = date.next()?.parse().ok()?;
    let day: i64 = date.next()?.parse().ok()?;
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.splitn(3, ':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock.next()?.parse().ok()?;
    let in_range = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..=60).contains(&second);
    if !in_range || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{fraction:0<9}").parse().ok()?;
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second;
    let seconds = u64::try_from(seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(seconds, nanos)
    }

    #[test]
    fn tracing_stamps_parse_as_utc() {
        assert_eq!(parse_utc_stamp("1970-01-01T00:00:00Z"), Some(at(0, 0)));
        assert_eq!(
            parse_utc_stamp("2026-12-03T16:49:20.480526Z"),
            Some(at(1_796_316_560, 480_526_000))
        );
        assert_eq!(
            parse_utc_stamp("2000-02-29T23:59:59.5Z"),
            Some(at(951_868_799, 500_000_000))
        );
        for not_a_stamp in [
            "INFO",
            "2026-12-03T16:49:20",
            "2026-13-03T16:49:20Z",
            "2026-12-03T16:49:20.1234567890Z",
            "2026-12-03 16:49:20Z",
            "1969-12-31T23:59:59Z",
        ] {
            assert_eq!(parse_utc_stamp(not_a_stamp), None, "{not_a_stamp}");
        }
    }

    #[test]
    fn a_log_stamped_ahead_of_its_writes_shows_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manager.log");
        let stamped = at(1_796_316_560, 480_526_000);
        let hour = Duration::from_secs(3_600);
        let write = |text: &str, written: SystemTime| {
            std::fs::write(&path, text).unwrap();
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(written).unwrap();
        };
        write(
            "2026-12-03T14:00:00.000001Z  INFO first\n\
             2026-12-03T16:49:20.480526Z  INFO last\n  a continuation line\n",
            stamped - hour,
        );
        assert_eq!(
            log_clock_offset_ms(&path),
            Ok(3_600_000),
            "the last stamped line counts"
        );
        write("2026-12-03T16:49:20.480526Z  INFO last\n", stamped + hour);
        assert_eq!(log_clock_offset_ms(&path), Ok(-3_600_000));
        write("no stamps here\n", stamped);
        assert!(log_clock_offset_ms(&path).is_err());
    }
}
