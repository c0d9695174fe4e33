//! Proof that a forwarded request was forwarded (PROTOCOL P13.3).
//!
//! A follower forwards a caller's request to the leader with the caller's role, subject and
//! namespace limit in headers. A manager certificate alone must not make those headers true: a
//! stolen one (or one of a node that was never a member) could otherwise act as an admin. So the
//! follower keeps, for as long as the forward is in flight, a voucher naming what it forwarded,
//! under an unguessable token sent beside the headers; the leader believes the headers only after
//! asking the forwarding member, at the address the membership gives for it and over a
//! connection that member's certificate answers, whether it issued that voucher for exactly this
//! request (`GET /raft/forwarded/{token}`). A caller holding a member's certificate but not its
//! process gets no voucher, and a manager never originates an admin action.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_api::problem::ErrorCode;
use leasehold_api::tls::Role;
use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};

use super::HttpError;

/// On a forwarded request: the token of the forwarding member's voucher for it.
pub const FORWARDED_VOUCHER_HEADER: &str = "x-leasehold-forwarded-voucher";
/// At most this many forwards in flight per member: a forward past it is refused (`503`,
/// retryable), never sent without a voucher.
pub const MAX_VOUCHERS_IN_FLIGHT: usize = 4_096;
/// Bound on the leader's question to the forwarding member; a forward answered in time is far
/// quicker, and a member that cannot answer within it vouches for nothing.
pub const VOUCHER_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a member forwarded: the request line and the caller's identity as it sent them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Voucher {
    pub method: String,
    pub path_and_query: String,
    pub role: String,
    pub subject: String,
    pub scope: Option<String>,
}

/// The vouchers of the forwards this member has in flight.
#[derive(Debug, Default)]
pub struct Vouchers {
    in_flight: Mutex<HashMap<String, Voucher>>,
}

/// A voucher held while its forward is in flight; dropping it withdraws the voucher.
#[derive(Debug)]
pub struct Issued<'a> {
    vouchers: &'a Vouchers,
    pub token: String,
}

impl Drop for Issued<'_> {
    fn drop(&mut self) {
        self.vouchers.lock().remove(&self.token);
    }
}

/// Too many forwards in flight to vouch for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_VOUCHERS_IN_FLIGHT} forwarded requests are in flight on this manager; retry")]
pub struct TooManyInFlight;

impl Vouchers {
    /// Vouches for `voucher` until the returned guard is dropped.
    pub fn issue(&self, voucher: Voucher) -> Result<Issued<'_>, TooManyInFlight> {
        let mut in_flight = self.lock();
        if in_flight.len() >= MAX_VOUCHERS_IN_FLIGHT {
            return Err(TooManyInFlight);
        }
        let token = format!("{:032x}", rand::random::<u128>());
        in_flight.insert(token.clone(), voucher);
        Ok(Issued {
            vouchers: self,
            token,
        })
    }

    pub fn get(&self, token: &str) -> Option<Voucher> {
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Voucher>> {
        // A panic while holding the lock leaves the map whole (one insert or remove).
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `GET /raft/forwarded/{token}`: the voucher this member holds under `token` (members only, as
/// every `/raft/` route), `404` when it holds none.
pub async fn voucher(
    State(vouchers): State<std::sync::Arc<Vouchers>>,
    Path(token): Path<String>,
) -> Response {
    match vouchers.get(&token) {
        Some(voucher) => Json(voucher).into_response(),
        None => HttpError::new(
            ErrorCode::NotFound,
            "this manager has no forward in flight under that voucher".to_owned(),
        )
        .into_response(),
    }
}

/// Asks member `by`, at `address`, for the voucher `token`, and compares it with `claimed` (what
/// the request in hand says). `Ok` only if the member answered under its own certificate (under
/// TLS) with exactly that voucher.
pub async fn confirm(
    http: &reqwest::Client,
    by: u64,
    address: &str,
    token: &str,
    claimed: &Voucher,
) -> Result<(), String> {
    let well_formed = token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit());
    if !well_formed {
        return Err(format!("{FORWARDED_VOUCHER_HEADER} is not a voucher token"));
    }
    let url = format!("{}/raft/forwarded/{token}", address.trim_end_matches('/'));
    let reply = http
        .get(url)
        .timeout(VOUCHER_CHECK_TIMEOUT)
        .send()
        .await
        .map_err(|error| format!("manager {by} did not answer for its voucher: {error}"))?;
    let answered_as = reply
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .and_then(|der| Role::of_certificate(&CertificateDer::from(der.to_vec())).ok());
    if answered_as != Some(Role::Manager { node_id: by }) {
        return Err(format!(
            "the voucher was answered at manager {by}'s address by {answered_as:?}, not by it"
        ));
    }
    if !reply.status().is_success() {
        return Err(format!(
            "manager {by} forwarded no such request (it answered {})",
            reply.status()
        ));
    }
    let vouched: Voucher = reply
        .json()
        .await
        .map_err(|error| format!("manager {by}'s voucher is unreadable: {error}"))?;
    if &vouched == claimed {
        Ok(())
    } else {
        Err(format!(
            "manager {by} forwarded another request under that voucher ({} {})",
            vouched.method, vouched.path_and_query
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voucher(path: &str) -> Voucher {
        Voucher {
            method: "DELETE".into(),
            path_and_query: path.into(),
            role: "urn:leasehold:admin".into(),
            subject: "CN=alice".into(),
            scope: None,
        }
    }

    #[test]
    fn p13_3_a_voucher_lives_as_long_as_its_forward() {
        let vouchers = Vouchers::default();
        let issued = vouchers.issue(voucher("/v1/cluster/nodes/3")).unwrap();
        assert_eq!(issued.token.len(), 32);
        assert_eq!(
            vouchers.get(&issued.token),
            Some(voucher("/v1/cluster/nodes/3"))
        );
        let other = vouchers.issue(voucher("/v1/backup")).unwrap();
        assert_ne!(
            issued.token, other.token,
            "tokens are unguessable, so distinct"
        );
        let token = issued.token.clone();
        drop(issued);
        assert_eq!(
            vouchers.get(&token),
            None,
            "withdrawn once the forward ends"
        );
        assert!(vouchers.get(&other.token).is_some());
    }

    #[test]
    fn p13_3_vouchers_in_flight_are_bounded() {
        let vouchers = Vouchers::default();
        let held: Vec<_> = (0..MAX_VOUCHERS_IN_FLIGHT)
            .map(|_| vouchers.issue(voucher("/v1/backup")).unwrap())
            .collect();
        assert_eq!(
            vouchers.issue(voucher("/v1/backup")).unwrap_err(),
            TooManyInFlight
        );
        drop(held);
        assert!(vouchers.issue(voucher("/v1/backup")).is_ok());
    }
}
