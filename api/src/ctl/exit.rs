//! `leaseholdctl` errors and the exit code each one maps to. Scripts branch on the code, so the
//! mapping is part of the CLI's contract (documented in `--help` and docs/OPERATIONS.md).

use std::path::PathBuf;

use super::table::printable;
use crate::backup::BackupError;
use crate::client::ClientError;
use crate::problem::ErrorCode;

/// Exit codes. 0 is success; 2 is also what clap exits with on a usage error.
pub mod code {
    /// Anything not listed below (server error, undecodable reply, local I/O failure).
    pub const OTHER: u8 = 1;
    /// Bad input: usage error, malformed argument, request refused as invalid, bad backup file,
    /// non-empty restore directory.
    pub const BAD_INPUT: u8 = 2;
    /// The cluster has no leader (election under way or quorum lost) for a command that needs one.
    pub const NO_LEADER: u8 = 3;
    /// The executor, shard, member or namespace named does not exist.
    pub const NOT_FOUND: u8 = 4;
    /// No manager could be reached (every endpoint refused or timed out).
    pub const UNREACHABLE: u8 = 5;
    /// What was asked is under way but did not finish within the time given (`--wait-timeout`).
    pub const IN_PROGRESS: u8 = 6;
    /// `safe-to-stop`: stopping it now is not safe (the reason is printed).
    pub const NOT_SAFE: u8 = 7;
}

/// The exit codes as `--help` shows them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  other error (server error, undecodable reply, local I/O failure)
  2  bad input (usage, invalid argument or request, bad backup file, non-empty data dir)
  3  no leader (election under way or quorum lost)
  4  not found (executor, shard, member or namespace)
  5  unreachable (no manager answered)
  6  in progress (did not finish within --wait-timeout; it goes on)
  7  not safe to stop (safe-to-stop; the reason is printed)";

#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{path}: {reason}")]
    BadBackup { path: PathBuf, reason: BackupError },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Some of the work was done and printed, but part of the cluster did not answer.
    #[error("{0}")]
    PartlyUnreachable(String),
    /// Under way, not finished within the time given.
    #[error("{0}")]
    InProgress(String),
    /// `safe-to-stop` answered that stopping it now is not safe.
    #[error("{0}")]
    NotSafe(String),
}

impl CtlError {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CtlError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    /// The one line `leaseholdctl` prints on standard error for this error, escaped by
    /// [`printable`]: a message may quote an executor's name or a server's reply, and reaches
    /// the terminal like any output.
    pub fn message_line(&self) -> String {
        format!("leaseholdctl: {}", printable(&self.to_string()))
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Client(error) => client_exit_code(error),
            CtlError::BadInput(_) | CtlError::BadBackup { .. } => code::BAD_INPUT,
            CtlError::NotFound(_) => code::NOT_FOUND,
            CtlError::PartlyUnreachable(_) => code::UNREACHABLE,
            CtlError::InProgress(_) => code::IN_PROGRESS,
            CtlError::NotSafe(_) => code::NOT_SAFE,
            CtlError::Io { .. } => code::OTHER,
        }
    }
}

/// The exit code for a client error, looking through retries to the last attempt's failure.
pub fn client_exit_code(error: &ClientError) -> u8 {
    match error {
        ClientError::PatienceExhausted { last } => client_exit_code(last),
        ClientError::InvalidEndpoint(_)
        | ClientError::InvalidConfig(_)
        | ClientError::InvalidRequest(_) => code::BAD_INPUT,
        ClientError::Transport(_) => code::UNREACHABLE,
        ClientError::Problem(problem) => match problem.code {
            ErrorCode::NoLeader | ErrorCode::NotLeader => code::NO_LEADER,
            ErrorCode::NotFound | ErrorCode::UnknownExecutor => code::NOT_FOUND,
            ErrorCode::InvalidRequest
            | ErrorCode::PayloadTooLarge
            | ErrorCode::UnsupportedMediaType
            | ErrorCode::MethodNotAllowed
            | ErrorCode::RequestTimeout => code::BAD_INPUT,
            ErrorCode::ShardingNotReady
            | ErrorCode::Conflict
            | ErrorCode::Timeout
            | ErrorCode::Internal
            | ErrorCode::Unavailable
            | ErrorCode::Unauthenticated
            | ErrorCode::Forbidden
            | ErrorCode::RateLimited
            | ErrorCode::InsufficientStorage => code::OTHER,
        },
        ClientError::Unexpected { .. } | ClientError::Decode(_) => code::OTHER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problem;

    fn problem(code: ErrorCode) -> ClientError {
        ClientError::Problem(Problem::new(code, "x"))
    }

    #[test]
    fn each_failure_class_has_its_own_code() {
        assert_eq!(client_exit_code(&problem(ErrorCode::NoLeader)), 3);
        assert_eq!(client_exit_code(&problem(ErrorCode::NotLeader)), 3);
        assert_eq!(client_exit_code(&problem(ErrorCode::UnknownExecutor)), 4);
        assert_eq!(client_exit_code(&problem(ErrorCode::NotFound)), 4);
        assert_eq!(client_exit_code(&problem(ErrorCode::InvalidRequest)), 2);
        assert_eq!(client_exit_code(&problem(ErrorCode::Internal)), 1);
        assert_eq!(client_exit_code(&problem(ErrorCode::Conflict)), 1);
        assert_eq!(
            client_exit_code(&ClientError::Transport("refused".into())),
            5
        );
        assert_eq!(
            client_exit_code(&ClientError::InvalidEndpoint("x".into())),
            2
        );
        assert_eq!(client_exit_code(&ClientError::Decode("x".into())), 1);
    }

    #[test]
    fn retries_are_looked_through() {
        let exhausted = |last: ClientError| ClientError::PatienceExhausted {
            last: Box::new(last),
        };
        assert_eq!(
            client_exit_code(&exhausted(problem(ErrorCode::NoLeader))),
            3
        );
        assert_eq!(
            client_exit_code(&exhausted(ClientError::Transport("x".into()))),
            5
        );
    }

    #[test]
    fn every_problem_code_maps_to_a_documented_exit_code() {
        for error_code in ErrorCode::ALL {
            let exit = client_exit_code(&problem(error_code));
            assert!((1..=5).contains(&exit), "{error_code}: {exit}");
            assert!(EXIT_CODES_HELP.contains(&format!("  {exit}  ")));
        }
    }

    #[test]
    fn local_errors_map_too() {
        assert_eq!(CtlError::BadInput("x".into()).exit_code(), 2);
        assert_eq!(CtlError::NotFound("x".into()).exit_code(), 4);
        assert_eq!(CtlError::PartlyUnreachable("x".into()).exit_code(), 5);
        assert_eq!(CtlError::InProgress("x".into()).exit_code(), 6);
        assert_eq!(CtlError::NotSafe("x".into()).exit_code(), 7);
        assert!(EXIT_CODES_HELP.contains("  7  not safe to stop"));
        assert_eq!(
            CtlError::BadBackup {
                path: "f".into(),
                reason: BackupError::BadMagic
            }
            .exit_code(),
            2
        );
        assert_eq!(
            CtlError::io("reading", "f", std::io::Error::other("x")).exit_code(),
            1
        );
    }

    /// An error quoting a server's reply or an executor's id is printed on one line, escaped as
    /// output is (issue 55, finding 10).
    #[test]
    fn errors_are_printed_escaped_on_one_line() {
        let quoted = CtlError::Client(ClientError::Unexpected {
            status: 502,
            body: "bad\ngateway\u{202e}\u{200b}".into(),
        });
        assert_eq!(
            quoted.message_line(),
            r"leaseholdctl: unexpected reply 502: bad\ngateway\u{202e}\u{200b}"
        );
        assert_eq!(
            CtlError::NotFound("executor ex-1\u{2028}ex-2 not found".into()).message_line(),
            r"leaseholdctl: executor ex-1\u{2028}ex-2 not found"
        );
    }
}
