//! What a call's failure says: the error every call returns, and an error with its causes on one
//! line.

use std::error::Error as StdError;

use crate::problem::{ErrorCode, Problem};

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// An endpoint is not an `http(s)://host[:port]` URL, or the list is empty.
    #[error("invalid endpoint: {0}")]
    InvalidEndpoint(String),
    /// A [`ClientConfig`] value cannot work (e.g. a zero timeout).
    #[error("invalid client configuration: {0}")]
    InvalidConfig(String),
    /// Refused client-side before anything was sent (e.g. an executor id containing '/').
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The server answered with a problem document.
    #[error("server refused: {0}")]
    Problem(Problem),
    /// The server answered with a status this call does not expect and no problem document.
    #[error("unexpected reply {status}: {body}")]
    Unexpected {
        /// HTTP status received.
        status: u16,
        /// Start of the body, for diagnosis.
        body: String,
    },
    /// The server could not be reached or the connection failed mid-call.
    #[error("transport: {0}")]
    Transport(String),
    /// A success reply whose body is not what the API promises.
    #[error("cannot decode reply: {0}")]
    Decode(String),
    /// Retries did not succeed within [`ClientConfig::patience`]; `last` is the final attempt's
    /// error.
    #[error("gave up after retrying for the configured patience; last error: {last}")]
    PatienceExhausted {
        /// Error of the last attempt.
        last: Box<ClientError>,
    },
}

impl ClientError {
    /// The problem code behind this error, looking through [`ClientError::PatienceExhausted`].
    /// Client-side request validation reports [`ErrorCode::InvalidRequest`] like the server
    /// would.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Problem(problem) => Some(problem.code),
            ClientError::InvalidRequest(_) => Some(ErrorCode::InvalidRequest),
            ClientError::PatienceExhausted { last } => last.code(),
            _ => None,
        }
    }

    /// The server's problem document, looking through [`ClientError::PatienceExhausted`].
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ClientError::Problem(problem) => Some(problem),
            ClientError::PatienceExhausted { last } => last.problem(),
            _ => None,
        }
    }

    /// Short label for logs and metrics.
    pub(super) fn label(&self) -> &'static str {
        match self {
            ClientError::Problem(problem) => problem.code.as_str(),
            ClientError::InvalidEndpoint(_) => "invalid_endpoint",
            ClientError::InvalidConfig(_) => "invalid_config",
            ClientError::InvalidRequest(_) => "invalid_request",
            ClientError::Unexpected { .. } => "unexpected_status",
            ClientError::Transport(_) => "transport",
            ClientError::Decode(_) => "decode",
            ClientError::PatienceExhausted { .. } => "patience_exhausted",
        }
    }
}

/// An error and its causes on one line, `error: cause: cause`: reqwest's top-level message is
/// terse ("error sending request") and the cause is in the chain, and the binaries report their
/// errors this way (`process`). A cause whose text its wrapper already ends with is not repeated,
/// and line breaks become spaces.
pub fn error_chain(error: &dyn StdError) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    // Bounded: real chains are a handful deep.
    for _ in 0..8 {
        let Some(cause) = source else { break };
        let cause_text = cause.to_string();
        if !message.ends_with(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message.replace('\n', " ")
}
