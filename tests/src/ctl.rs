//! Running the real `leaseholdctl` binary from tests, and reading its table output.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::binary;

/// Bound on one CLI run (its own patience is set lower by the callers that expect failures).
const CTL_RUN_BOUND: Duration = Duration::from_secs(60);

/// What one `leaseholdctl` run produced.
#[derive(Debug, Clone)]
pub struct CtlRun {
    /// Exit code; `None` if killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CtlRun {
    /// Panics with the whole run unless it exited 0.
    pub fn ok(self) -> Self {
        assert_eq!(self.code, Some(0), "leaseholdctl failed: {self:#?}");
        self
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("leaseholdctl output is not the expected JSON ({e}): {self:#?}")
        })
    }

    /// A listing that ends with a summary line under its table (`shard list`): the run with
    /// the table alone, and that line.
    pub fn split_summary(&self) -> (CtlRun, String) {
        let (table, summary) = self
            .stdout
            .trim_end()
            .rsplit_once('\n')
            .unwrap_or_else(|| panic!("a table and a summary line: {self:#?}"));
        let table = CtlRun {
            stdout: format!("{table}\n"),
            ..self.clone()
        };
        (table, summary.to_owned())
    }

    /// Table rows (header first), each split into its cells.
    pub fn rows(&self) -> Vec<Vec<String>> {
        self.stdout.lines().map(cells).collect()
    }
}

/// Splits one aligned table line into cells (columns are separated by two or more spaces;
/// cells never contain two spaces in a row).
pub fn cells(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `field: value` lines as pairs.
pub fn field_pairs(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect()
}

/// Runs `leaseholdctl --endpoints <endpoints> <args>` to completion.
pub async fn leaseholdctl(endpoints: &[String], args: &[&str]) -> CtlRun {
    leaseholdctl_in(None, endpoints, args).await
}

/// As [`leaseholdctl`], in `dir` (for relative paths).
pub async fn leaseholdctl_in(dir: Option<&Path>, endpoints: &[String], args: &[&str]) -> CtlRun {
    let mut command = tokio::process::Command::new(binary("leaseholdctl"));
    if !endpoints.is_empty() {
        command.arg("--endpoints").arg(endpoints.join(","));
    }
    command
        .args(args)
        .env_remove("LEASEHOLD_ENDPOINTS")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let output = tokio::time::timeout(CTL_RUN_BOUND, command.output())
        .await
        .unwrap_or_else(|_| panic!("leaseholdctl {args:?} did not finish within {CTL_RUN_BOUND:?}"))
        .unwrap_or_else(|e| panic!("running leaseholdctl: {e}"));
    CtlRun {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
