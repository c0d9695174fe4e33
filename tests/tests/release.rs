//! The release a user installs without building (`scripts/release`), checked as that user
//! would: the binaries this suite runs (`target/debug`, built by `scripts/test` with the
//! checkout's commit) are packed with `--binaries`; `sha256sum -c SHA256SUMS` passes; the
//! unpacked binaries print the release and the checkout's commit; the bash completion knows
//! leaseholdctl's commands. A release build takes too long for the suite, and packing is the
//! same step for either build.
//!
//! Also: the script refuses binaries that name another commit, rather than packing them under
//! this checkout's version.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use leasehold_api::RELEASE;
use leasehold_tests::bin_dir;

const PROGRAMS: [&str; 3] = ["leasehold-manager", "leasehold-executor", "leaseholdctl"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

/// `scripts/release`, or a failed test saying it is missing.
fn release_script() -> PathBuf {
    let script = repo_root().join("scripts/release");
    let mode = std::fs::metadata(&script)
        .unwrap_or_else(|e| panic!("scripts/release is missing ({}): {e}", script.display()))
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "scripts/release is not executable");
    script
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The commit the binaries should name: the checkout's, as `scripts/test` recorded it.
fn checkout_commit() -> String {
    let output = run(&mut Command::new(repo_root().join("scripts/commit-id")));
    assert!(
        output.status.success(),
        "scripts/commit-id: {}",
        text(&output.stderr)
    );
    let commit = text(&output.stdout).trim().to_owned();
    assert!(
        !commit.is_empty(),
        "scripts/commit-id printed nothing: not a git checkout?"
    );
    commit
}

#[test]
fn the_release_tarball_verifies_unpacks_and_names_its_commit() {
    let script = release_script();
    let out = tempfile::tempdir().unwrap();
    let packed = run(Command::new(&script)
        .arg("--binaries")
        .arg(bin_dir())
        .arg("--out")
        .arg(out.path()));
    assert!(
        packed.status.success(),
        "scripts/release --binaries {} failed ({}): {}{}",
        bin_dir().display(),
        packed.status,
        text(&packed.stdout),
        text(&packed.stderr)
    );

    // What a user runs after downloading the two files.
    let verified = run(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(out.path()));
    assert!(
        verified.status.success(),
        "sha256sum -c SHA256SUMS: {}{}",
        text(&verified.stdout),
        text(&verified.stderr)
    );
    let sums = std::fs::read_to_string(out.path().join("SHA256SUMS")).unwrap();
    let tarballs: Vec<&str> = sums
        .lines()
        .filter_map(|line| line.split_once("  ").map(|(_, name)| name))
        .collect();
    assert_eq!(tarballs.len(), 1, "SHA256SUMS lists one tarball: {sums}");
    let tarball = tarballs[0];
    let name = tarball
        .strip_suffix(".tar.gz")
        .unwrap_or_else(|| panic!("{tarball} is not a .tar.gz"));
    assert!(
        name.starts_with(&format!("leasehold-{RELEASE}")),
        "{name} names the release {RELEASE}"
    );

    let unpacked = tempfile::tempdir().unwrap();
    let untar = run(Command::new("tar")
        .arg("-xzf")
        .arg(out.path().join(tarball))
        .arg("-C")
        .arg(unpacked.path()));
    assert!(
        untar.status.success(),
        "tar -xzf {tarball}: {}",
        text(&untar.stderr)
    );
    let top = unpacked.path().join(name);

    let commit = checkout_commit();
    for program in PROGRAMS {
        let version = run(Command::new(top.join("bin").join(program)).arg("--version"));
        assert!(
            version.status.success(),
            "{program} --version: {}",
            text(&version.stderr)
        );
        assert_eq!(
            text(&version.stdout).trim_end(),
            format!("{program} {RELEASE} (commit {commit})"),
            "the unpacked {program} names the release and the commit"
        );
    }

    let bash = std::fs::read_to_string(top.join("completions/leaseholdctl.bash")).unwrap();
    assert!(
        bash.contains("namespace"),
        "the bash completion offers `namespace`: {bash}"
    );
    for completion in ["_leaseholdctl", "leaseholdctl.fish"] {
        let script = std::fs::read_to_string(top.join("completions").join(completion)).unwrap();
        assert!(
            script.contains("namespace"),
            "{completion} offers `namespace`"
        );
    }
    for doc in [
        "README.md",
        "CHANGELOG.md",
        "docs/PROTOCOL.md",
        "docs/OPERATIONS.md",
    ] {
        assert!(top.join(doc).is_file(), "the release holds {doc}");
    }
}

#[test]
fn scripts_release_refuses_binaries_built_from_another_commit() {
    let script = release_script();
    let stale = tempfile::tempdir().unwrap();
    for program in PROGRAMS {
        let path = stale.path().join(program);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho '{program} {RELEASE} (commit 000000000000)'\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = tempfile::tempdir().unwrap();
    let packed = run(Command::new(&script)
        .arg("--binaries")
        .arg(stale.path())
        .arg("--out")
        .arg(out.path()));
    let stderr = text(&packed.stderr);
    assert!(
        !packed.status.success(),
        "packed binaries of another commit: {stderr}"
    );
    assert!(
        stderr.contains("commit 000000000000") && stderr.contains(&checkout_commit()),
        "the refusal names both commits: {stderr}"
    );
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "nothing written to --out"
    );
}
