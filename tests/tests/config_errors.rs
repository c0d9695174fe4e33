//! A configuration the binaries refuse: one line on stderr that names what is wrong and the flag,
//! exit status 2, and no backtrace even with `RUST_BACKTRACE=1` (set on many machines). A
//! failure while running (here: a port in use) is one line too, with exit status 1.

use std::process::Command;

use leasehold_tests::{binary, free_port};

/// Runs `program args` with backtraces asked for; returns (exit code, stderr).
fn run(program: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(binary(program))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LOG", "off")
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_one_line(program: &str, stderr: &str, expected: &[&str]) {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{program}: expected one line, got:\n{stderr}"
    );
    assert!(
        lines[0].starts_with(&format!("{program}: ")),
        "{program}: the line names the program: {stderr}"
    );
    for part in expected {
        assert!(
            lines[0].contains(part),
            "{program}: {part:?} not in {stderr:?}"
        );
    }
    for sign in ["backtrace", "panicked", "Stack"] {
        assert!(!stderr.contains(sign), "{program}: {sign:?} in {stderr}");
    }
}

#[test]
fn a_refused_configuration_is_one_line_and_exit_status_2() {
    let data_dir = tempfile::tempdir().expect("tempdir");
    let data = data_dir.path().to_str().expect("utf-8 path");
    let listen = format!("127.0.0.1:{}", free_port());
    let own = format!("1=http://{listen}");
    let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
        (
            "leasehold-manager",
            vec![
                "--id",
                "1",
                "--listen",
                &listen,
                "--data-dir",
                data,
                "--initial-cluster",
                "2=http://127.0.0.1:1",
            ],
            vec!["--initial-cluster", "this node (1)"],
        ),
        (
            "leasehold-manager",
            vec![
                "--id",
                "1",
                "--listen",
                &listen,
                "--data-dir",
                data,
                "--initial-cluster",
                &own,
                "--heartbeat",
                "1s",
            ],
            vec!["--heartbeat", "at most a third of --election-timeout"],
        ),
        (
            "leasehold-manager",
            vec![
                "--id",
                "1",
                "--listen",
                &listen,
                "--data-dir",
                data,
                "--initial-cluster",
                &own,
                "--advertise",
                "http://h/path",
            ],
            vec!["--advertise", "base URL"],
        ),
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--advertise",
                "http://h/path",
            ],
            vec!["--advertise", "base URL"],
        ),
        (
            "leasehold-executor",
            vec!["--managers", "not-a-url", "--listen", "127.0.0.1:0"],
            vec!["manager endpoints", "not-a-url"],
        ),
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--shutdown-grace",
                "0s",
            ],
            vec!["--shutdown-grace", "positive"],
        ),
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "not-an-address",
            ],
            vec!["not-an-address"],
        ),
        // P15.1: a capacity is a positive weight, at most `MAX_CAPACITY`.
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--capacity",
                "0",
            ],
            vec!["--capacity", "capacity 0"],
        ),
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--capacity",
                "1000001",
            ],
            vec!["--capacity", "capacity 1000001"],
        ),
        // P16.1: the sidecar serves and pushes to this machine only.
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--local-listen",
                "0.0.0.0:7201",
            ],
            vec!["--local-listen", "not a loopback address"],
        ),
        (
            "leasehold-executor",
            vec![
                "--managers",
                "http://127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
                "--app-url",
                "http://10.1.2.3:7301/",
            ],
            vec!["--app-url", "not a loopback address"],
        ),
    ];
    for (program, args, expected) in cases {
        let (code, stderr) = run(program, &args);
        assert_eq!(code, Some(2), "{program} {args:?}: {stderr}");
        assert_one_line(program, &stderr, &expected);
    }
    // Nothing was started: the refused manager wrote no data.
    assert_eq!(
        std::fs::read_dir(data_dir.path())
            .expect("read data dir")
            .count(),
        0,
        "a refused configuration created files"
    );
}

#[test]
fn a_failure_while_starting_is_one_line_and_exit_status_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = taken.local_addr().expect("addr").to_string();
    let data_dir = tempfile::tempdir().expect("tempdir");
    let data = data_dir.path().join("m1");
    let own = format!("1=http://{listen}");
    let (code, stderr) = run(
        "leasehold-manager",
        &[
            "--id",
            "1",
            "--listen",
            &listen,
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--initial-cluster",
            &own,
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_one_line("leasehold-manager", &stderr, &["cannot listen on", &listen]);
}
