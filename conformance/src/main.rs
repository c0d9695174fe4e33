//! `leasehold-conformance`: runs any executor, in any language, against a real cluster it starts
//! itself, through scripted faults, and checks I1 and I2 on the executor's admission logs
//! (PROTOCOL P16.3; the script is in `kit.rs`, the template's placeholders in `template.rs`).
//!
//! ```text
//! leasehold-conformance --executor-cmd 'my-executor --managers {managers} --listen {listen} \
//!     --advertise {advertise} --name {name} --event-log {event_log}' [--runs N] [--seed S]
//! ```
//!
//! Its last line is `CONFORMANCE verdict=pass|fail runs=N violations=V intervals=I`; it exits 0
//! only on pass, 1 on fail and 2 when its own arguments are refused.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use leasehold_conformance::kit::{self, RunConfig, RunError, RunReport};
use leasehold_conformance::template::Template;
use tempfile::TempDir;

#[derive(Debug, Parser)]
#[command(
    name = "leasehold-conformance",
    version,
    about = "Run an executor, in any language, through scripted faults against a real cluster and check I1 and I2 on its admission logs (PROTOCOL P16.3)"
)]
struct Args {
    /// The command that starts one executor, run with `sh -c` in its own process group. Its
    /// placeholders: {managers} (comma-separated URLs), {listen} (host:port to bind),
    /// {advertise} (its URL), {name}, {event_log} (where its admission log must go, in the
    /// format of PROTOCOL §9) and {local} (`unix:/path`, a socket for a sidecar's
    /// `--local-listen` and its service's way to it).
    #[arg(long)]
    executor_cmd: Template,

    /// How many runs of the whole script, each on a fresh cluster.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,

    /// Seed of the faults' randomness (delays, duplicates); each run derives its own.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Where runs keep their managers' data and the executors' logs; a fresh temporary
    /// directory when absent (kept when a run fails).
    #[arg(long)]
    work_dir: Option<PathBuf>,

    /// The `leasehold-manager` binary; by default the one beside this binary, else on PATH.
    #[arg(long)]
    manager_bin: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let manager_binary = args.manager_bin.unwrap_or_else(kit::default_manager_binary);
    if !kit::runnable(&manager_binary) {
        eprintln!(
            "leasehold-conformance: cannot run the manager binary {} (--manager-bin)",
            manager_binary.display()
        );
        return ExitCode::from(2);
    }
    let Some((work_dir, temporary)) = choose_work_dir(args.work_dir) else {
        return ExitCode::from(2);
    };
    // The report is the program's output; a closed stdout is not worth failing the verdict for.
    let mut out = std::io::stdout().lock();
    let mut tally = Tally::default();
    for run in 1..=args.runs {
        let config = RunConfig {
            template: args.executor_cmd.clone(),
            manager_binary: manager_binary.clone(),
            dir: work_dir.join(format!("run-{run}")),
            seed: args.seed.wrapping_add(u64::from(run)),
        };
        match kit::run(&config).await {
            Ok(report) => tally.add_report(&mut out, run, &report),
            Err(error) => {
                let _ = writeln!(out, "run {run}: {error}");
                tally.failed = true;
                if matches!(error, RunError::Kit(_)) {
                    break;
                }
            }
        }
    }
    tally.finish(&mut out, args.runs, temporary)
}

/// The directory the runs work in, and the temporary directory to drop or keep when none was
/// given; `None` once the reason a temporary one could not be made is printed.
fn choose_work_dir(given: Option<PathBuf>) -> Option<(PathBuf, Option<TempDir>)> {
    match given {
        Some(dir) => Some((dir, None)),
        None => match tempfile::Builder::new()
            .prefix("leasehold-conformance-")
            .tempdir()
        {
            Ok(dir) => Some((dir.path().to_path_buf(), Some(dir))),
            Err(error) => {
                eprintln!("leasehold-conformance: cannot make a work directory: {error}");
                None
            }
        },
    }
}

/// What the runs so far add up to.
#[derive(Debug, Default)]
struct Tally {
    violations: usize,
    intervals: usize,
    failed: bool,
}

impl Tally {
    /// Counts one finished run and writes its summary, violations and unfinished error.
    fn add_report(&mut self, out: &mut impl Write, run: u32, report: &RunReport) {
        self.violations += report.check.violations.len() + report.findings.len();
        self.intervals += report.check.intervals;
        let mut summary = format!(
            "run {run}: {} intervals over {} shards, {} generations, {} secondary intervals, {} \
             handoffs, {} violations",
            report.check.intervals,
            report.check.shards,
            report.check.generations,
            report.check.secondary_intervals,
            report.check.handoffs,
            report.check.violations.len() + report.findings.len()
        );
        for (step, took) in &report.steps {
            summary.push_str(&format!("\n  {step}: {} ms", took.as_millis()));
        }
        let _ = writeln!(out, "{summary}");
        for violation in &report.check.violations {
            let _ = writeln!(out, "  VIOLATION {violation}");
        }
        for finding in &report.findings {
            let _ = writeln!(out, "  VIOLATION {finding}");
        }
        if let Some(error) = &report.unfinished {
            let _ = writeln!(out, "  the script did not finish: {error}");
        }
        self.failed |= !report.check.violations.is_empty()
            || !report.findings.is_empty()
            || report.unfinished.is_some();
    }

    /// Keeps a failed run's temporary directory, writes the verdict line and picks the exit code.
    fn finish(self, out: &mut impl Write, runs: u32, temporary: Option<TempDir>) -> ExitCode {
        if self.failed {
            if let Some(dir) = temporary {
                let kept = dir.keep();
                let _ = writeln!(out, "the runs' logs are kept in {}", kept.display());
            }
        }
        let verdict = if self.failed { "fail" } else { "pass" };
        let _ = writeln!(
            out,
            "CONFORMANCE verdict={verdict} runs={runs} violations={} intervals={}",
            self.violations, self.intervals
        );
        if self.failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}
