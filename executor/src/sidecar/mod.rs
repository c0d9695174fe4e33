//! The executor as a sidecar (PROTOCOL §16): the local API a service in any language on the same
//! machine asks what it may admit (`--local-listen`), and the rule that keeps P5.2 through that
//! service (P16.2).
//!
//! - `service_copy`: what the service may be admitting, as the sidecar knows it. Pure.
//! - `link`: `ServiceLink`, that core under a lock with the admission log of the service, and the
//!   waits the revoke handler and the graceful stop make on it.
//! - `service_prepare`: which shards the service is asked to prepare for, and which it prepared
//!   (P17.1). Pure.
//! - `app_push`: `--app-url`, the same answers pushed to the service instead.
//! - `local_guard`: the layer in front of every local route that refuses pages in a browser.
//! - `local_api`: the routes (`/v1/local/permits`, `/v1/local/admit`, `/v1/local/prepared`,
//!   `/v1/local/stop`) and the listener address rule ([`LocalListen`]).

mod app_push;
pub(crate) mod link;
mod local_api;
mod local_guard;
pub mod service_copy;
pub mod service_prepare;

pub(crate) use app_push::push_to_app;
pub use app_push::{check_app_url, APP_PUSH_TIMEOUT};
pub use link::REVOKE_HOLD;
pub use local_api::LocalListen;
pub(crate) use local_api::{bind_local, router, LocalListener};
