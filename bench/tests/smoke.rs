//! The short version of the benchmarks, run by `cargo test --workspace` (and so by CI): the load
//! generator runs end to end against a real three-manager cluster and, when the etcd binary is
//! installed, a three-member etcd cluster, and prints well-formed tables. It asserts nothing
//! about performance (that is docs/BENCHMARKS.md's job), only that the output is sane. It runs
//! twice: in plaintext, and under mutual TLS (`--tls`, §13) with a shorter soak. scripts/test
//! runs it beside the other multi-process tests, which skip `the_short_benchmark_` there.
//!
//! The managers are the ones `cargo build --workspace --bins` put next to this test's loadgen
//! binary (scripts/test builds them first).

use std::path::PathBuf;
use std::process::Command;

fn loadgen() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_leasehold-loadgen"))
}

/// Data rows (header rows excluded) of the tables whose first cell is `label`, split into cells.
fn rows<'a>(output: &'a str, label: &str) -> Vec<Vec<&'a str>> {
    let lines: Vec<&str> = output.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(at, line)| {
            let is_header = lines
                .get(at + 1)
                .is_some_and(|next| next.starts_with("| ---"));
            line.starts_with(&format!("| {label} |")) && !is_header
        })
        .map(|(_, line)| {
            line.trim_matches('|')
                .split(" | ")
                .map(str::trim)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The number a cell starts with ("12.5 ms", "3.0×", "1.2 MiB").
fn number(cell: &str) -> f64 {
    let digits: String = cell
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} does not start with a number"))
}

fn etcd_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("etcd").is_file()))
}

#[test]
fn the_short_benchmark_runs_both_systems_and_prints_sane_tables() {
    run_smoke(Transport::Plaintext, "2m");
}

/// Under `--tls` the load generator makes a CA and certificates, runs both systems TLS-only with
/// client certificates required, and checks every cluster it starts refuses plaintext and TLS
/// clients without a certificate; the fleet registers, renews and takes pushes over TLS. Any
/// of that failing fails the run, and every row must say it ran under TLS. The soak only has to
/// show it works under TLS, so it is short (the whole run is about 25 s).
#[test]
fn the_short_benchmark_runs_both_systems_under_mutual_tls() {
    run_smoke(Transport::MutualTls, "10s");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plaintext,
    MutualTls,
}

impl Transport {
    /// A system as the load generator's rows name it under this transport.
    fn tagged(self, system: &str) -> String {
        match self {
            Transport::Plaintext => system.to_owned(),
            Transport::MutualTls => format!("{system}, mutual TLS"),
        }
    }
}

fn run_smoke(transport: Transport, soak: &str) {
    let loadgen = loadgen();
    let Some(bin_dir) = loadgen.parent() else {
        panic!("{} has no directory", loadgen.display());
    };
    assert!(
        bin_dir.join("leasehold-manager").is_file(),
        "leasehold-manager not found in {}: build the workspace's binaries first \
         (cargo build --workspace --bins; scripts/test does)",
        bin_dir.display()
    );
    // CI sets LEASEHOLD_REQUIRE_ETCD=1: there a missing etcd half is a failure, not a skip.
    let require_etcd = std::env::var("LEASEHOLD_REQUIRE_ETCD").is_ok_and(|v| v == "1");
    let skip_reason = if !cfg!(feature = "etcd") {
        Some(
            "leasehold-bench was built without its `etcd` feature (it needs protoc; \
             scripts/test enables it when protoc is on PATH)",
        )
    } else if !etcd_installed() {
        Some("etcd is not installed (no `etcd` on PATH; CI installs etcd-server)")
    } else {
        None
    };
    let with_etcd = skip_reason.is_none();
    if let Some(reason) = skip_reason {
        assert!(!require_etcd, "LEASEHOLD_REQUIRE_ETCD=1, but {reason}");
        eprintln!("SKIPPED (etcd half): {reason}; running the Leasehold half only.");
    }
    let mut command = Command::new(&loadgen);
    if transport == Transport::MutualTls {
        command.arg("--tls");
    }
    let output = command
        .args(["smoke", "--soak", soak])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", loadgen.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "leasehold-loadgen smoke ({transport:?}) failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // One open-loop step per system: | smoke | system | executors | offered/s | achieved/s |
    // ok | errors | p50 | p99 |
    let steps = rows(&stdout, "smoke");
    let systems: Vec<&str> = steps.iter().map(|r| r[1]).collect();
    let mut expected = vec!["leasehold"];
    if with_etcd {
        expected.extend(["etcd-put", "etcd-keepalive"]);
    }
    let expected: Vec<String> = expected.into_iter().map(|s| transport.tagged(s)).collect();
    assert_eq!(systems, expected, "{stdout}");
    for step in &steps {
        assert_eq!(step.len(), 9, "{step:?}");
        let ok = number(step[5]);
        let (p50, p99) = (number(step[7]), number(step[8]));
        assert!(ok > 0.0, "no renewal succeeded: {step:?}");
        assert!(p50 > 0.0 && p50 <= p99, "quantiles out of order: {step:?}");
    }

    // The soak: samples of every manager's (and etcd member's) data directory, then one summary
    // row per system against its snapshot size.
    let soak = rows(&stdout, "B6");
    let (samples, summaries): (Vec<_>, Vec<_>) = soak.iter().partition(|row| row.len() == 6);
    assert!(samples.len() >= 2, "expected soak samples: {stdout}");
    for sample in &samples {
        for column in if with_etcd { &[2, 4][..] } else { &[2][..] } {
            let sizes: Vec<&str> = sample[*column].split(" / ").collect();
            assert_eq!(sizes.len(), 3, "one size per member: {sample:?}");
            assert!(sizes.iter().all(|s| number(s) > 0.0), "{sample:?}");
        }
    }
    let systems: Vec<&str> = summaries.iter().map(|row| row[1]).collect();
    assert_eq!(systems.len(), if with_etcd { 2 } else { 1 }, "{stdout}");
    assert_eq!(systems[0], transport.tagged("Leasehold"), "{stdout}");
    if with_etcd {
        let etcd = transport.tagged("etcd (a) put with lease, compacted every 5 min");
        assert_eq!(systems[1], etcd, "{stdout}");
    }
    for summary in &summaries {
        assert_eq!(summary.len(), 12, "{summary:?}");
        assert!(number(summary[9]) > 0.0, "snapshot size: {summary:?}");
        assert!(number(summary[10]) > 0.0, "ratio: {summary:?}");
    }
}
