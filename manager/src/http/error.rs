//! The one HTTP error type is [`leasehold_api::http::HttpError`]: every error leaves as
//! `application/problem+json` (RFC 9457) with a `code` and `retryable` (PROTOCOL §9), mapped the
//! same way in the manager and the executor. Internal details are logged, never sent. How a
//! refused Raft write and a refused command are answered is the service layer's
//! (`service::refusals`), since services answer with these problems.

pub use leasehold_api::http::HttpError;
