//! The conformance kit (PROTOCOL P16.3) judged on executors whose answer is known: it passes the
//! Rust executor, the sidecar with the Python example beside it, and an executor written in
//! Python from docs/PROTOCOL.md alone (conformance/fixtures/python_executor.py); it fails that
//! executor broken on purpose, once for each MUST of PROTOCOL Appendix A the kit has a step for
//! (`--break` of the fixture): the lease anchored at a reply's receipt (P3.2), no fence on a
//! lapse (P3.6), deregistering before admission stops (P3.7), pushes applied out of revision
//! order, revokes that leave the applied revision, stale grants that drop nothing, pushes for
//! another executor taken and grants that disown a set never adopted (P4.1), renewals that claim
//! nothing and renewals' sets not adopted (P4.2), `unknown_executor` retried like any failure
//! (P4.4), revokes answered before their shards stop (P5.2), registering before the push
//! listener answers (P8.1), secondaries admitted as the primary (P19.5, the kit's replicated
//! namespace), and a parent still admitted after a split handed its child on (P20.3, I1 per key,
//! the kit's resharding step). The Rust executor and the Python one must also show their
//! secondaries in their admission logs as secondary lines, and say them ready in their renewals
//! (P19.3), so that the kit's replicated step has something to judge, and every layout of the
//! resharding step in their logs; so must the sidecar's log of what it told the service beside it
//! (the service maps keys by the answer it applied, and the sidecar holds each shard in the
//! layout it told it in).
//!
//! Each case runs `leasehold-conformance` as a user would and reads its last line. The kit starts
//! its own managers, so these tests do not take the one-cluster lock. Needs the binaries (`cargo
//! build --workspace --bins`) and `python3` for all but the first; without `python3` those say so
//! and skip, unless `LEASEHOLD_REQUIRE_PYTHON=1` (set by `.ci/run`).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use leasehold_tests::python::{example_script, python_or_skip};
use leasehold_tests::{binary, log_tail};

/// The verdict line's fields, and everything the kit printed (for a failure's message).
struct Verdict {
    pass: bool,
    violations: u64,
    intervals: u64,
    /// Secondaries' intervals, from the run's summary line (`N secondary intervals`).
    secondary_intervals: u64,
    /// The layouts the primaries' intervals were of, from the run's summary line (`N
    /// generations`).
    generations: u64,
    exit_ok: bool,
    output: String,
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance/fixtures")
        .join(name)
}

/// Runs the kit on `template` with `seed`.
fn run_kit(template: &str, seed: u64) -> Verdict {
    let work = tempfile::tempdir().unwrap();
    let output = Command::new(binary("leasehold-conformance"))
        .args(["--executor-cmd", template])
        .args(["--seed", &seed.to_string()])
        .arg("--work-dir")
        .arg(work.path())
        .arg("--manager-bin")
        .arg(binary("leasehold-manager"))
        .output()
        .expect("run leasehold-conformance");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut text = format!("{stdout}\n--- stderr ---\n{stderr}");
    if !output.status.success() {
        text.push('\n');
        text.push_str(&executor_logs(work.path()));
    }
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    let field = |name: &str| -> String {
        last.split_whitespace()
            .find_map(|word| word.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in the last line {last:?}:\n{text}"))
            .to_owned()
    };
    assert!(
        last.starts_with("CONFORMANCE "),
        "last line {last:?}:\n{text}"
    );
    assert_eq!(field("runs"), "1");
    let summary_count = |what: &str| -> u64 {
        stdout
            .lines()
            .find_map(|line| {
                let (before, _) = line.strip_prefix("run 1: ")?.split_once(what)?;
                before.rsplit(' ').next()?.parse().ok()
            })
            .unwrap_or(0)
    };
    let secondary_intervals = summary_count(" secondary intervals");
    let generations = summary_count(" generations,");
    Verdict {
        pass: field("verdict") == "pass",
        violations: field("violations").parse().unwrap(),
        intervals: field("intervals").parse().unwrap(),
        secondary_intervals,
        generations,
        exit_ok: output.status.success(),
        output: text,
    }
}

/// The tail of each executor's own log in the kit's work directory (removed with it), so that a
/// failing run shows what the executors did.
fn executor_logs(work: &Path) -> String {
    const TAIL_LINES: usize = 200;
    let Ok(entries) = std::fs::read_dir(work) else {
        return String::new();
    };
    let mut logs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    logs.sort();
    logs.iter()
        .map(|log| log_tail(&log.display().to_string(), log, TAIL_LINES))
        .collect()
}

fn assert_passes(what: &str, verdict: &Verdict) {
    assert!(
        verdict.pass && verdict.exit_ok && verdict.violations == 0,
        "{what} must pass the kit:\n{}",
        verdict.output
    );
    assert!(verdict.intervals > 0, "{what}: nothing was admitted");
    eprintln!(
        "{what}: pass, {} intervals, {} secondary intervals",
        verdict.intervals, verdict.secondary_intervals
    );
}

/// [`assert_passes`], and the kit's replicated step saw the executor's secondaries: logged as
/// secondary lines, and said ready in its renewals (the kit prints `said N secondaries ready`
/// for each executor whose renewal it judged), so that step judged something.
fn assert_passes_with_secondaries(what: &str, verdict: &Verdict) {
    assert_passes(what, verdict);
    assert!(
        verdict.secondary_intervals > 0,
        "{what}: no secondary's interval in the admission logs:\n{}",
        verdict.output
    );
    let said_ready = verdict
        .output
        .lines()
        .filter_map(|line| {
            let (_, after) = line.split_once(" said ")?;
            after
                .strip_suffix(" secondaries ready")?
                .parse::<u64>()
                .ok()
        })
        .filter(|&count| count > 0)
        .count();
    assert!(
        said_ready > 0,
        "{what}: no renewal the kit judged said a secondary ready:\n{}",
        verdict.output
    );
}

/// [`assert_passes_with_secondaries`], and the admission logs show the kit's three layouts
/// (P20.3): the first, the split's and the merge's.
fn assert_passes_with_reshards(what: &str, verdict: &Verdict) {
    assert_passes_with_secondaries(what, verdict);
    assert_eq!(
        verdict.generations, 3,
        "{what}: the admission logs do not show the three layouts:\n{}",
        verdict.output
    );
}

/// The kit failed `what` on violations (I1, I2, or a rule a step judged), not on anything else,
/// and one of its `VIOLATION` lines contains `expected` (e.g. `I1` or `P4.1 stale grant`).
fn assert_fails_on_violations(what: &str, verdict: &Verdict, expected: &str) {
    assert!(
        !verdict.pass && !verdict.exit_ok,
        "{what} must fail the kit:\n{}",
        verdict.output
    );
    assert!(
        verdict.violations > 0,
        "{what} must fail on violations, not on anything else:\n{}",
        verdict.output
    );
    let shown = verdict
        .output
        .lines()
        .filter(|line| line.trim_start().starts_with("VIOLATION"))
        .filter(|line| line.contains(expected))
        .count();
    assert!(
        shown > 0,
        "{what} must fail with a violation naming {expected:?}:\n{}",
        verdict.output
    );
    eprintln!(
        "{what}: fail, {} violations, {shown} naming {expected:?}",
        verdict.violations
    );
}

/// The kit fails the Python executor broken by `--break variant` with a violation naming
/// `expected`.
fn assert_broken_variant_fails(test: &str, variant: &str, expected: &str, seed: u64) {
    if let Some(verdict) = run_python_executor(test, &format!("--break {variant}"), seed) {
        assert_fails_on_violations(&format!("--break {variant}"), &verdict, expected);
    }
}

/// The kit's verdict on the Python executor of the fixtures, run with `extra` flags; `None`
/// when there is no `python3` (`test` then says it skipped).
fn run_python_executor(test: &str, extra: &str, seed: u64) -> Option<Verdict> {
    let python = python_or_skip(test)?;
    let template = format!(
        "exec {} {} --managers {{managers}} --listen {{listen}} --advertise {{advertise}} \
         --name {{name}} --event-log {{event_log}} {extra}",
        python.display(),
        fixture("python_executor.py").display()
    );
    Some(run_kit(&template, seed))
}

/// The Python executor's layout rules (P20.3) without managers
/// (`conformance/fixtures/python_executor_layouts.py`): a split stops the parents in the old
/// layout and starts the children in the new in one receipt; a set of the generation applied with
/// another count, or of an older generation at a newer revision, is refused; an overtaken revoke
/// may name an older layout's shards. `--break keeps-parent` must fail it.
#[test]
fn p20_3_the_python_executor_switches_layouts_in_one_receipt() {
    let test = "p20_3_the_python_executor_switches_layouts_in_one_receipt";
    let Some(python) = python_or_skip(test) else {
        return;
    };
    let script = fixture("python_executor_layouts.py");
    let run = |extra: &[&str]| {
        let output = Command::new(&python)
            .arg(&script)
            .args(extra)
            .output()
            .expect("run python_executor_layouts.py");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    };
    let (ok, text) = run(&[]);
    assert!(ok, "the Python executor's layouts: {text}");
    let (ok, text) = run(&["--break", "keeps-parent"]);
    assert!(
        !ok && text.contains("P20.3 one receipt"),
        "--break keeps-parent must admit its parents after the split: {text}"
    );
}

/// The kit's runs, in a module of their own: scripts/test runs them beside the other multi-process
/// tests, and skips `conformance_kit::` there.
mod conformance_kit {
    use super::*;

    #[test]
    fn p16_3_the_rust_executor_passes() {
        let template = format!(
            "exec {} --managers {{managers}} --listen {{listen}} --advertise {{advertise}} \
             --name {{name}} --event-log {{event_log}} --request-timeout 2s \
             --secondaries-ready-when-held",
            binary("leasehold-executor").display()
        );
        assert_passes_with_reshards("the Rust executor", &run_kit(&template, 1));
    }

    #[test]
    fn p16_3_the_sidecar_with_the_python_example_passes() {
        let Some(python) = python_or_skip("p16_3_the_sidecar_with_the_python_example_passes")
        else {
            return;
        };
        let store = tempfile::tempdir().unwrap();
        // The sidecar and the service in one process group: the kit's signals reach both.
        let template = format!(
            "{} --managers {{managers}} --listen {{listen}} --advertise {{advertise}} --name {{name}} \
             --event-log {{event_log}} --request-timeout 2s --local-listen {{local}} \
             & exec {} {} --sidecar {{local}} --listen 127.0.0.1:0 --store-dir {}",
            binary("leasehold-executor").display(),
            python.display(),
            example_script().display(),
            store.path().display()
        );
        let what = "the sidecar with the Python example";
        let verdict = run_kit(&template, 2);
        assert_passes(what, &verdict);
        assert_eq!(
            verdict.generations, 3,
            "{what}: the admission log does not show the three layouts:\n{}",
            verdict.output
        );
    }

    #[test]
    fn p16_3_an_executor_written_from_the_protocol_alone_passes() {
        let test = "p16_3_an_executor_written_from_the_protocol_alone_passes";
        if let Some(verdict) = run_python_executor(test, "", 3) {
            assert_passes_with_reshards("the Python executor", &verdict);
        }
    }

    #[test]
    fn p3_2_an_executor_anchoring_its_lease_at_receipt_fails() {
        let test = "p3_2_an_executor_anchoring_its_lease_at_receipt_fails";
        assert_broken_variant_fails(test, "anchor-at-receipt", "I1", 4);
    }

    #[test]
    fn p3_6_an_executor_that_does_not_fence_itself_on_a_lapse_fails() {
        let test = "p3_6_an_executor_that_does_not_fence_itself_on_a_lapse_fails";
        assert_broken_variant_fails(test, "no-self-fence", "I1", 6);
    }

    #[test]
    fn p3_7_an_executor_deregistering_before_it_stops_admitting_fails() {
        let test = "p3_7_an_executor_deregistering_before_it_stops_admitting_fails";
        assert_broken_variant_fails(test, "deregister-before-stop", "I1", 7);
    }

    #[test]
    fn p4_1_an_executor_applying_sets_out_of_revision_order_fails() {
        let test = "p4_1_an_executor_applying_sets_out_of_revision_order_fails";
        assert_broken_variant_fails(test, "apply-out-of-order", "I1", 5);
    }

    #[test]
    fn p4_1_an_executor_whose_revokes_leave_its_revision_fails() {
        let test = "p4_1_an_executor_whose_revokes_leave_its_revision_fails";
        assert_broken_variant_fails(test, "revoke-keeps-revision", "I1", 8);
    }

    #[test]
    fn p4_1_an_executor_keeping_shards_a_stale_grant_left_out_fails() {
        let test = "p4_1_an_executor_keeping_shards_a_stale_grant_left_out_fails";
        assert_broken_variant_fails(test, "keep-shards-on-stale-grant", "P4.1 stale grant", 9);
    }

    #[test]
    fn p4_1_an_executor_taking_a_push_for_another_executor_fails() {
        let test = "p4_1_an_executor_taking_a_push_for_another_executor_fails";
        assert_broken_variant_fails(test, "accept-foreign-push", "P4.1 push for another", 10);
    }

    #[test]
    fn p4_1_an_executor_never_adopting_a_grant_that_disowns_its_set_fails() {
        let test = "p4_1_an_executor_never_adopting_a_grant_that_disowns_its_set_fails";
        assert_broken_variant_fails(test, "no-disowned-sets", "P4.1 disowned sets", 16);
    }

    #[test]
    fn p4_2_an_executor_whose_renewals_claim_nothing_fails() {
        let test = "p4_2_an_executor_whose_renewals_claim_nothing_fails";
        assert_broken_variant_fails(test, "no-claims", "P4.2 claims", 13);
    }

    #[test]
    fn p4_2_an_executor_not_adopting_its_renewals_sets_fails() {
        let test = "p4_2_an_executor_not_adopting_its_renewals_sets_fails";
        assert_broken_variant_fails(
            test,
            "ignore-renewal-set",
            "P4.2 a set told by a renewal's reply",
            14,
        );
    }

    #[test]
    fn p4_4_an_executor_retrying_unknown_executor_like_any_failure_fails() {
        let test = "p4_4_an_executor_retrying_unknown_executor_like_any_failure_fails";
        assert_broken_variant_fails(test, "ignore-unknown-executor", "P4.4 unknown_executor", 15);
    }

    #[test]
    fn p8_1_an_executor_registering_before_its_push_listener_answers_fails() {
        let test = "p8_1_an_executor_registering_before_its_push_listener_answers_fails";
        assert_broken_variant_fails(
            test,
            "register-before-bind",
            "P8.1 bind before registering",
            12,
        );
    }

    #[test]
    fn p19_5_an_executor_admitting_its_secondaries_as_the_primary_fails() {
        let test = "p19_5_an_executor_admitting_its_secondaries_as_the_primary_fails";
        assert_broken_variant_fails(
            test,
            "secondary-as-primary",
            "P19.5 a secondary admitted as the primary",
            17,
        );
    }

    #[test]
    fn p20_3_an_executor_admitting_a_parent_after_a_split_fails() {
        let test = "p20_3_an_executor_admitting_a_parent_after_a_split_fails";
        assert_broken_variant_fails(test, "keeps-parent", "I1", 18);
    }

    #[test]
    fn p5_2_an_executor_answering_a_revoke_before_it_stops_fails() {
        let test = "p5_2_an_executor_answering_a_revoke_before_it_stops_fails";
        assert_broken_variant_fails(test, "release-before-stop", "I1", 11);
    }
}
