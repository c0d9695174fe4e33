//! JSON bodies of the HTTP surface (PROTOCOL §9).
//!
//! Request types (bodies a peer sends *to* us) reject unknown fields so a misspelt field is a
//! `400 invalid_request` instead of a silently ignored claim (I6). Reply types accept unknown
//! fields so a newer server can add information without breaking older clients.
//!
//! Beside the types stand the checks every side applies alike, one definition each: the text
//! and size limits, the base-URL rule, shard lists against a shard count, capacities and loads.
//! A check that needs what only the receiver knows (the cluster's shard count) takes it as an
//! argument.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest register `incarnation`: an idempotency key, not a payload.
pub const MAX_INCARNATION_BYTES: usize = 128;
/// Longest register `name`.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest advertised base URL (register `address`, add-node `address`). The largest of the
/// text limits: the state machine bounds every text field it stores by it
/// ([`MAX_TEXT_FIELD_BYTES`]), so a request the edge accepts is never refused after its commit.
pub const MAX_ADDRESS_BYTES: usize = 1024;
/// The bound the state machine applies to every text field it stores (incarnation, name,
/// address): the largest edge limit, so the edge's checks are the ones that refuse.
pub const MAX_TEXT_FIELD_BYTES: usize = MAX_ADDRESS_BYTES;
const _: () = assert!(MAX_INCARNATION_BYTES <= MAX_TEXT_FIELD_BYTES);
const _: () = assert!(MAX_NAME_BYTES <= MAX_TEXT_FIELD_BYTES);
/// Most shards a cluster can have (`shard_count` is `1..=MAX_SHARD_COUNT`). 2^20 admits the
/// one-million-shard cluster of docs/BENCHMARKS.md (B5).
pub const MAX_SHARD_COUNT: u32 = 1 << 20;
/// Largest body that lists the shards of a cluster of `shard_count` one entry each (renewal
/// claims, a release, a full-set push, a revoke): one executor may hold every shard, and one
/// entry is at most ~50 bytes of JSON (`{"shard":1048575,"epoch":18446744073709551615},`), so 64
/// bytes per shard, and 4 KiB for whitespace and the rest of the body. A receiver that knows its
/// cluster's shard count bounds by it (P13.6: a stranger's body costs no more than the largest
/// legal one); one that does not yet, by [`MAX_SHARD_LIST_BODY_BYTES`].
pub const fn shard_list_body_bytes(shard_count: u32) -> usize {
    shard_count as usize * 64 + 4096
}
/// Largest renewal body of a cluster of `shard_count`: its claims and its loads (PROTOCOL
/// P15.1) may each list every shard, and a load entry is no longer than a claim
/// (`{"shard":1048575,"load":1.2345678901234567e11},` is 47 bytes), so twice one list.
pub const fn renew_body_bytes(shard_count: u32) -> usize {
    2 * shard_list_body_bytes(shard_count)
}
/// [`shard_list_body_bytes`] of the largest cluster. Other bodies stay far smaller.
pub const MAX_SHARD_LIST_BODY_BYTES: usize = shard_list_body_bytes(MAX_SHARD_COUNT);
/// [`renew_body_bytes`] of the largest cluster: the largest body any manager route takes.
pub const MAX_RENEW_BODY_BYTES: usize = renew_body_bytes(MAX_SHARD_COUNT);

/// Why a list of shards is malformed (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardListError {
    /// `shard >= shard_count`.
    #[error("shard {shard} is out of range (shard count {shard_count})")]
    OutOfRange {
        /// The offending shard.
        shard: u32,
        /// The cluster's shard count.
        shard_count: u32,
    },
    /// One shard listed twice is ambiguous (two epochs for one shard).
    #[error("shard {shard} is listed twice")]
    Duplicate {
        /// The shard listed twice.
        shard: u32,
    },
}

/// Why a shard list in runs ([`ShardRun`]) is malformed (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardRunError {
    /// A run reaching past the shard count.
    #[error(transparent)]
    List(#[from] ShardListError),
    /// A run of no shards says nothing and is refused rather than skipped.
    #[error("the run starting at shard {first} is empty (a run's count is at least 1)")]
    EmptyRun {
        /// Where the empty run starts.
        first: u32,
    },
    /// Runs are ascending and disjoint, so each shard is listed once.
    #[error("the run starting at shard {first} overlaps or comes before the run preceding it (runs are ascending and disjoint)")]
    RunOutOfOrder {
        /// Where the misplaced run starts.
        first: u32,
    },
    /// A list given both as entries and as runs: the two could disagree.
    #[error("the shards are given both as a list and as runs; send one of the two")]
    BothForms,
}

/// Checks that every shard of a list (claims, a release, a delivered set, a revoke) is below
/// `shard_count` and listed once. Lists are normally ascending (grants and pushes list shards
/// so, and executors claim what they hold in that order), and then the duplicate check is one
/// comparison per shard; a list in any other order is checked with a set.
pub fn check_shard_list<I>(shards: I, shard_count: u32) -> Result<(), ShardListError>
where
    I: IntoIterator<Item = u32>,
    I::IntoIter: Clone,
{
    let shards = shards.into_iter();
    let mut ascending = true;
    let mut previous: Option<u32> = None;
    for shard in shards.clone() {
        if shard >= shard_count {
            return Err(ShardListError::OutOfRange { shard, shard_count });
        }
        ascending &= previous.is_none_or(|previous| previous < shard);
        previous = Some(shard);
    }
    if ascending {
        return Ok(());
    }
    let mut seen = std::collections::BTreeSet::new();
    match shards.into_iter().find(|&shard| !seen.insert(shard)) {
        Some(shard) => Err(ShardListError::Duplicate { shard }),
        None => Ok(()),
    }
}

/// The base-URL rule, one definition for every side (an advertised address, a client's
/// endpoints, an owner's address in a routing table): `http` or `https`, a host, no credentials,
/// query or fragment; a path is a prefix the caller appends `/v1/...` to. Returned without a
/// trailing slash, so two spellings of one base compare equal. The error says what is wrong.
pub fn normalize_base_url(raw: &str) -> Result<String, String> {
    parse_base_url(raw).map(|url| url.as_str().trim_end_matches('/').to_owned())
}

/// Checks an advertised base URL (a register or add-node `address`): the rule of
/// [`normalize_base_url`], with no path beyond `/` (peers append `/v1/...` to the address as it
/// is), and at most [`MAX_ADDRESS_BYTES`]. The error says what is wrong, for a `400` detail.
pub fn validate_base_url(address: &str) -> Result<(), String> {
    if address.len() > MAX_ADDRESS_BYTES {
        return Err(format!("address is longer than {MAX_ADDRESS_BYTES} bytes"));
    }
    let parsed = parse_base_url(address).map_err(|why| format!("address {address:?}: {why}"))?;
    if !matches!(parsed.path(), "" | "/") {
        return Err(format!(
            "address {address:?} must be a base URL: no credentials, path, query or fragment"
        ));
    }
    Ok(())
}

fn parse_base_url(raw: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(raw).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the scheme must be http or https".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it names no host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("it must not carry credentials".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("it must not carry a query or fragment".to_owned());
    }
    Ok(url)
}

/// One shard together with its ownership generation (P2.1), the fencing token downstream storage
/// can compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
// Part of request bodies (renew claims, assignment pushes), so it is as strict as they are.
#[serde(deny_unknown_fields)]
pub struct ShardEpoch {
    /// Shard number, `0..shard_count`.
    pub shard: u32,
    /// Advanced when and only when the shard gets a new owner.
    pub epoch: u64,
}

/// Consecutive shards sharing one epoch: shards `first..first + count`, each at `epoch`. The
/// compact form of a shard list on the wire (`RenewRequest::claim_runs`, `Grant::shard_runs`):
/// an executor's set is a few blocks of shards, mostly minted in the same rebalance, so its runs
/// are far fewer than its shards. Encoded as a JSON array `[first, count, epoch]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, u32, u64)", into = "(u32, u32, u64)")]
pub struct ShardRun {
    /// The run's lowest shard.
    pub first: u32,
    /// How many consecutive shards it spans; at least 1.
    pub count: u32,
    /// The epoch of every shard in it.
    pub epoch: u64,
}

impl From<(u32, u32, u64)> for ShardRun {
    fn from((first, count, epoch): (u32, u32, u64)) -> Self {
        Self {
            first,
            count,
            epoch,
        }
    }
}

impl From<ShardRun> for (u32, u32, u64) {
    fn from(run: ShardRun) -> Self {
        (run.first, run.count, run.epoch)
    }
}

/// `shards` as runs ([`ShardRun`]): each maximal stretch of consecutive shards at one epoch is
/// one run. Sets are listed ascending (grants, pushes and an executor's claims are); a list in
/// another order is sorted first, since the runs of a set are ascending by rule.
pub fn shard_runs(shards: &[ShardEpoch]) -> Vec<ShardRun> {
    let sorted;
    let shards = if shards.is_sorted_by_key(|entry| entry.shard) {
        shards
    } else {
        let mut copy = shards.to_vec();
        copy.sort_unstable();
        sorted = copy;
        &sorted
    };
    let mut runs: Vec<ShardRun> = Vec::new();
    for entry in shards {
        match runs.last_mut() {
            Some(run)
                if run.epoch == entry.epoch
                    && u64::from(run.first) + u64::from(run.count) == u64::from(entry.shard) =>
            {
                run.count += 1;
            }
            _ => runs.push(ShardRun {
                first: entry.shard,
                count: 1,
                epoch: entry.epoch,
            }),
        }
    }
    runs
}

/// The shard list `runs` stand for, ascending, after checking them (I6): every run non-empty,
/// inside `0..shard_count`, after the one before it and not overlapping it. Nothing is allocated
/// before the runs are known to fit, so the list is at most `shard_count` long whatever they say.
pub fn expand_shard_runs(
    runs: &[ShardRun],
    shard_count: u32,
) -> Result<Vec<ShardEpoch>, ShardRunError> {
    let mut lowest_free: u64 = 0;
    for run in runs {
        if run.count == 0 {
            return Err(ShardRunError::EmptyRun { first: run.first });
        }
        if u64::from(run.first) < lowest_free {
            return Err(ShardRunError::RunOutOfOrder { first: run.first });
        }
        let end = u64::from(run.first) + u64::from(run.count);
        if end > u64::from(shard_count) {
            let shard = u32::try_from(end - 1).unwrap_or(u32::MAX).max(shard_count);
            return Err(ShardListError::OutOfRange { shard, shard_count }.into());
        }
        lowest_free = end;
    }
    // Disjoint and inside `0..shard_count`, so the total is at most `shard_count`.
    let total: u64 = runs.iter().map(|run| u64::from(run.count)).sum();
    let mut shards = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for run in runs {
        shards.extend((run.first..run.first + run.count).map(|shard| ShardEpoch {
            shard,
            epoch: run.epoch,
        }));
    }
    Ok(shards)
}

/// `POST /v1/executors`: register an executor (P4.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// Random id picked at process start; the idempotency key that makes a retried
    /// registration return the same executor (P4.4, P7.2).
    #[cfg_attr(feature = "utoipa", schema(min_length = 1, max_length = 128))]
    pub incarnation: String,
    /// Advertised base URL the manager pushes assignments and revokes to (P8.1): `http(s)`,
    /// a host, no path, query or fragment (see [`validate_base_url`]).
    #[cfg_attr(
        feature = "utoipa",
        schema(min_length = 1, max_length = 1024, pattern = r"^https?://[^/?#@]+/?$")
    )]
    pub address: String,
    /// Human-friendly label for operators; carries no meaning for the protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(max_length = 256))]
    pub name: Option<String>,
    /// The executor's secret (PROTOCOL P13.4): every later renew and deregister of this
    /// executor must present it as `Authorization: Bearer <credential>`. The manager keeps only
    /// its SHA-256. Sent only to managers stating cluster version [`CREDENTIALS_SCHEMA`] or
    /// later (docs/PROTOCOL.md, "Versions"); absent from executors of 0.1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(value_type = Option<String>, min_length = 32, max_length = 128, pattern = r"^[A-Za-z0-9_-]+$")
    )]
    pub credential: Option<Credential>,
    /// The executor's capacity (PROTOCOL P15.1): a positive weight, `1..=`[`MAX_CAPACITY`]; the
    /// planner gives executors shares in proportion to it. Absent means
    /// [`DEFAULT_CAPACITY`]. Sent only to managers stating cluster version [`CAPACITY_SCHEMA`]
    /// or later (docs/PROTOCOL.md, "Versions"); absent from executors of earlier releases. A
    /// retried registration (same incarnation) keeps the capacity of the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 1000000))]
    pub capacity: Option<u32>,
}

/// The state schema that introduced executor credentials (PROTOCOL P13.4, P14.3).
pub const CREDENTIALS_SCHEMA: u32 = 3;
/// The state schema that introduced executor capacities and load reports (PROTOCOL P15.1,
/// P14.3): `RegisterRequest::capacity` and `RenewRequest::loads` are sent only to managers
/// stating this cluster version or later.
pub const CAPACITY_SCHEMA: u32 = 4;
/// The cluster version from which renewals may carry their claims as runs and get their set back
/// so (`RenewRequest::claim_runs`, `Grant::shard_runs`): a wire form only, brought by the
/// release that brought schema 4, so every manager stating it reads the runs.
pub const COMPACT_SHARDS_SCHEMA: u32 = CAPACITY_SCHEMA;

/// The capacity of an executor that states none (every executor of an earlier release): all
/// executors equal, as P5.4 spreads them.
pub const DEFAULT_CAPACITY: u32 = 1;
/// Largest capacity accepted. A capacity is a relative weight, so a million to one between the
/// largest and the smallest executor is beyond any real fleet; and at most 2^20 shards times a
/// million stays below 2^53, so a planner's sums and products of capacities and shard counts
/// are exact in `u64` and in `f64`.
pub const MAX_CAPACITY: u32 = 1_000_000;

/// Why a capacity is refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("capacity {capacity} is outside 1..={MAX_CAPACITY} (PROTOCOL P15.1)")]
pub struct CapacityError {
    /// The refused capacity.
    pub capacity: u32,
}

/// Checks a capacity (P15.1): positive and at most [`MAX_CAPACITY`]. The manager's edge and its
/// state machine both refuse with it, and the executor at start.
pub fn check_capacity(capacity: u32) -> Result<(), CapacityError> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(CapacityError { capacity });
    }
    Ok(())
}
/// Shortest credential accepted: 32 hex digits are 128 bits (P13.4's floor).
pub const MIN_CREDENTIAL_BYTES: usize = 32;
/// Longest credential accepted.
pub const MAX_CREDENTIAL_BYTES: usize = 128;

/// An executor's secret (PROTOCOL P13.4): 32 to 128 characters of `A-Z a-z 0-9 _ -` (hex or
/// unpadded base64url), at least 128 bits of randomness when made by [`Credential::from_random`].
/// `Debug` never shows it; only [`Credential::expose`] does, for the `Authorization` header.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Credential(String);

impl Credential {
    /// A credential from 32 random bytes (256 bits), hex-encoded.
    pub fn from_random(bytes: [u8; 32]) -> Self {
        Self(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Checks the shape of a credential received on the wire.
    pub fn parse(text: &str) -> Result<Self, String> {
        if !(MIN_CREDENTIAL_BYTES..=MAX_CREDENTIAL_BYTES).contains(&text.len()) {
            return Err(format!(
                "a credential is {MIN_CREDENTIAL_BYTES} to {MAX_CREDENTIAL_BYTES} characters, not {}",
                text.len()
            ));
        }
        if !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err("a credential is made of A-Z, a-z, 0-9, '_' and '-' only".to_owned());
        }
        Ok(Self(text.to_owned()))
    }

    /// Checks a credential decoded from JSON (serde does not run [`Credential::parse`]).
    pub fn validate(&self) -> Result<(), String> {
        Self::parse(&self.0).map(|_| ())
    }

    /// The secret itself, for the `Authorization: Bearer` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the manager stores and compares (P13.4): SHA-256 of the credential's bytes.
    pub fn sha256(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        Sha256::digest(self.0.as_bytes()).into()
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// Reply to register and renew: a grant, the only message that moves the lease clock (P3.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Grant {
    /// Manager-minted id; opaque to the executor.
    pub executor_id: String,
    /// Lease remaining, never an absolute time (P3.1); the executor anchors it at the instant
    /// it sent the request (P3.2).
    pub lease_ttl_ms: u64,
    /// Raft log index the set was read from; orders this set against pushes (P4.1).
    pub revision: u64,
    /// Needed to map keys to shards (`crate::shard_for_key`).
    pub shard_count: u32,
    /// The full set the manager records for this executor (P4.2). Empty in the compact form,
    /// where `shard_runs` carries the set.
    pub shards: Vec<ShardEpoch>,
    /// The same set as runs, in reply to a renewal that sent `claim_runs` (and only then, so a
    /// client that never asks never sees it); `shards` is then empty. Clients of this crate
    /// expand it ([`Grant::expand_shard_runs`]) before handing the grant on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Vec<Vec<u64>>>))]
    pub shard_runs: Option<Vec<ShardRun>>,
}

impl Grant {
    /// This grant with its set as runs in `shard_runs` instead of `shards`: the reply to a
    /// renewal that sent `claim_runs`.
    pub fn into_shard_runs(mut self) -> Self {
        self.shard_runs = Some(shard_runs(&self.shards));
        self.shards = Vec::new();
        self
    }

    /// This grant with a `shard_runs` set expanded into `shards`, checked against its own shard
    /// count; a grant that lists both is refused, since the two could disagree.
    pub fn expand_shard_runs(mut self) -> Result<Self, ShardRunError> {
        if let Some(runs) = self.shard_runs.take() {
            if !self.shards.is_empty() {
                return Err(ShardRunError::BothForms);
            }
            self.shards = expand_shard_runs(&runs, self.shard_count)?;
        }
        Ok(self)
    }
}

/// `POST /v1/executors/{id}/renew`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// What the executor believes it holds, so the manager can spot lost pushes (P4.2) and
    /// count a dropped claim as a revoke acknowledgement (P5.2). Empty when `claim_runs` is
    /// present.
    pub claims: Vec<ShardEpoch>,
    /// The claims as runs ([`ShardRun`], `[first, count, epoch]`, ascending and disjoint) instead
    /// of `claims`, which must then be empty; the grant in reply then carries its set as
    /// `shard_runs` too. Sent only to managers stating cluster version [`COMPACT_SHARDS_SCHEMA`]
    /// or later (docs/PROTOCOL.md, "Versions").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Vec<Vec<u64>>>))]
    pub claim_runs: Option<Vec<ShardRun>>,
    /// Revision of the last set the executor applied (P4.1).
    pub revision: u64,
    /// The executor's load per held shard (PROTOCOL P15.1), checked by [`check_shard_loads`]:
    /// present means it reports loads, and a held shard it does not list has load 0; absent
    /// means it reports none. Soft state on the leader, never replicated. Sent only to managers
    /// stating cluster version [`CAPACITY_SCHEMA`] or later (docs/PROTOCOL.md, "Versions").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loads: Option<Vec<ShardLoad>>,
}

impl RenewRequest {
    /// This request with its claims as `claim_runs` instead of `claims`: what a client sends a
    /// manager stating cluster version [`COMPACT_SHARDS_SCHEMA`] or later. The claims are read,
    /// not copied.
    pub fn with_claims_as_runs(&self) -> Self {
        Self {
            claims: Vec::new(),
            claim_runs: Some(shard_runs(&self.claims)),
            revision: self.revision,
            loads: self.loads.clone(),
        }
    }

    /// The claims, from whichever form the request used, checked against `shard_count` (I6):
    /// each below it and listed once; `claims` and `claim_runs` together are refused.
    pub fn checked_claims(
        &self,
        shard_count: u32,
    ) -> Result<std::borrow::Cow<'_, [ShardEpoch]>, ShardRunError> {
        match &self.claim_runs {
            None => {
                check_shard_list(self.claims.iter().map(|claim| claim.shard), shard_count)?;
                Ok(std::borrow::Cow::Borrowed(&self.claims))
            }
            Some(_) if !self.claims.is_empty() => Err(ShardRunError::BothForms),
            Some(runs) => Ok(std::borrow::Cow::Owned(expand_shard_runs(
                runs,
                shard_count,
            )?)),
        }
    }
}

/// One shard's load as its executor reports it (PROTOCOL P15.1): a non-negative number in units
/// the service chooses (requests per second, bytes per second), at most [`MAX_SHARD_LOAD`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
// Part of a request body (renew), so it is as strict as one.
#[serde(deny_unknown_fields)]
pub struct ShardLoad {
    /// Shard number, `0..shard_count`, held by the reporting executor.
    pub shard: u32,
    /// The shard's load, `0..=1e12`.
    #[cfg_attr(feature = "utoipa", schema(minimum = 0, maximum = 1e12))]
    pub load: f64,
}

/// Largest load one shard may report. Units are the service's own, so the bound only has to
/// keep arithmetic sound: 10^12 (a terabyte per second, a trillion requests per second) is
/// beyond any one shard, and a leader summing the loads of all 2^20 shards stays near 10^18,
/// far from `f64`'s overflow, so no sum or mean of reported loads is ever infinite.
pub const MAX_SHARD_LOAD: f64 = 1e12;

/// Why a renewal's `loads` are refused (I6); its message is a `400` detail.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShardLoadError {
    /// More entries than shards: some shard is listed twice, or does not exist.
    #[error("{count} loads listed, more than the {shard_count} shards")]
    TooMany {
        /// Entries listed.
        count: usize,
        /// The cluster's shard count.
        shard_count: u32,
    },
    /// A shard out of range or listed twice.
    #[error("loads: {0}")]
    Shard(#[from] ShardListError),
    /// Not a finite number in `0..=MAX_SHARD_LOAD`.
    #[error("the load of shard {shard} is {load}, outside 0..={MAX_SHARD_LOAD}")]
    OutOfRange {
        /// The shard.
        shard: u32,
        /// Its refused load.
        load: f64,
    },
}

/// Checks a renewal's `loads` (P15.1, I6): at most one entry per shard, every shard below
/// `shard_count` and listed once, every load finite, non-negative and at most
/// [`MAX_SHARD_LOAD`]. JSON cannot carry NaN or infinities, but a caller in Rust can.
pub fn check_shard_loads(loads: &[ShardLoad], shard_count: u32) -> Result<(), ShardLoadError> {
    if loads.len() > usize::try_from(shard_count).unwrap_or(usize::MAX) {
        return Err(ShardLoadError::TooMany {
            count: loads.len(),
            shard_count,
        });
    }
    check_shard_list(loads.iter().map(|entry| entry.shard), shard_count)?;
    match loads
        .iter()
        .find(|entry| !(0.0..=MAX_SHARD_LOAD).contains(&entry.load))
    {
        Some(entry) => Err(ShardLoadError::OutOfRange {
            shard: entry.shard,
            load: entry.load,
        }),
        None => Ok(()),
    }
}

/// `POST /v1/executors/{id}/release`: acknowledge a revoke out of band.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// Shards the executor no longer admits work for.
    pub shards: Vec<u32>,
    /// Revision of the revoke being answered: an acknowledgement names the handoff it answers,
    /// so one for a handoff that is no longer current is ignored (P5.2).
    pub revoke_revision: u64,
}

/// `PUT /v1/assignment` on the executor: full replacement of its set (P4.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AssignmentPush {
    /// The executor this push is for. An executor refuses a push naming another (a new process
    /// reusing a dead executor's address must not take its shards while that lease runs, I1).
    pub executor_id: String,
    /// Applied only if at least the last revision applied (P4.1).
    pub revision: u64,
    /// Repeated so a push alone is enough to route keys.
    pub shard_count: u32,
    /// The complete set; a push never carries a lease (P3.3).
    pub shards: Vec<ShardEpoch>,
}

/// `POST /v1/revoke` on the executor: stop admitting these shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RevokePush {
    /// The executor this revoke is for (see [`AssignmentPush::executor_id`]).
    pub executor_id: String,
    /// Revision the revoke was committed at. It applies unless the executor applied a set read
    /// after it (P4.1); then only the shards that set took away are reported released.
    pub revision: u64,
    /// Shards to stop admitting.
    pub shards: Vec<u32>,
}

/// Executor's answer to a [`RevokePush`], sent only after admission really stopped (§9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RevokeReply {
    /// Echo of the revoke's revision, so the acknowledgement names its handoff (P5.2).
    pub revision: u64,
    /// Shards that no longer admit work; the only ones the manager may hand on.
    pub released: Vec<u32>,
    /// True when a set read after the revoke gave back every shard it names, so nothing was
    /// released: answered as ignored, never as done (P5.2).
    pub ignored: bool,
}

/// `GET /v1/health` on the executor: lets the manager check an address still belongs to the
/// executor (and process incarnation) it thinks it does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ExecutorHealth {
    /// The id this process registered under.
    pub executor_id: String,
    /// Distinguishes a restarted process on the same address.
    pub incarnation: String,
}

/// A Raft voter or learner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Member {
    /// Raft node id.
    pub node_id: u64,
    /// Advertised base URL of that manager.
    pub address: String,
    /// The member's release, as the answering replica last heard it (`0.1.0` for a member of
    /// 0.1.0, which does not report it); absent while it has not answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The newest state schema the member can apply (PROTOCOL P14.3); absent while it has not
    /// answered. The cluster version rises only when every member's is at least the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_schema: Option<u32>,
}

/// The state schemas a replica reads (PROTOCOL P14.1): it opens data directories, snapshots and
/// backups of every schema from `oldest` to `newest`, and can apply commands of `newest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SchemaRange {
    pub oldest: u32,
    pub newest: u32,
}

/// Latest snapshot a replica holds (P2.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SnapshotInfo {
    /// Last log index the snapshot covers; `None` for a snapshot of an empty log.
    pub last_log_index: Option<u64>,
    /// Opaque id, to tell two snapshots at the same index apart.
    pub snapshot_id: String,
}

/// `GET /v1/cluster`: one replica's view of the Raft group, for operators and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ClusterInfo {
    /// The replica that answered.
    pub node_id: u64,
    /// `None` while an election is under way.
    pub leader_id: Option<u64>,
    /// Where clients should send writes.
    pub leader_address: Option<String>,
    /// Current Raft term.
    pub term: u64,
    /// Members that vote.
    pub voters: Vec<Member>,
    /// Members that replicate but do not vote yet.
    pub learners: Vec<Member>,
    /// `None` on an empty log.
    pub last_log_index: Option<u64>,
    /// `None` before anything committed.
    pub committed_index: Option<u64>,
    /// `None` before anything applied.
    pub applied_index: Option<u64>,
    /// `None` before the first snapshot.
    pub snapshot: Option<SnapshotInfo>,
    /// The answering replica's release ([`crate::RELEASE`]); absent from managers of 0.1.0,
    /// which did not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The committed cluster version (PROTOCOL P14.3): the state schema every voter can apply,
    /// raised by the leader when the last voter is upgraded. Commands and request fields of a
    /// newer schema are used only once it is reached. Absent from managers of 0.1.0 (schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_version: Option<u32>,
    /// The schemas the answering replica reads; absent from managers of 0.1.0 (2 to 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemas: Option<SchemaRange>,
}

/// The only release whose managers report neither their release nor their schemas: a reply
/// without them is from it.
pub const FIRST_RELEASE: &str = "0.1.0";
/// Release 0.1.0's state schema (it had no cluster version: its clusters are at this one).
pub const FIRST_RELEASE_SCHEMA: u32 = 2;

impl ClusterInfo {
    /// The answering replica's release; [`FIRST_RELEASE`] for a replica that does not say.
    pub fn reported_release(&self) -> &str {
        self.release.as_deref().unwrap_or(FIRST_RELEASE)
    }

    /// The schemas the answering replica reads; 0.1.0's for a replica that does not say.
    pub fn reported_schemas(&self) -> SchemaRange {
        self.schemas.unwrap_or(SchemaRange {
            oldest: FIRST_RELEASE_SCHEMA,
            newest: FIRST_RELEASE_SCHEMA,
        })
    }

    /// The committed cluster version; 0.1.0's schema for a replica that does not say.
    pub fn reported_cluster_version(&self) -> u32 {
        self.cluster_version.unwrap_or(FIRST_RELEASE_SCHEMA)
    }
}

/// `POST /v1/cluster/nodes`: add a manager as learner, then promote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AddNodeRequest {
    /// Raft node id of the new manager.
    pub node_id: u64,
    /// Its advertised base URL (see [`validate_base_url`]).
    #[cfg_attr(
        feature = "utoipa",
        schema(min_length = 1, max_length = 1024, pattern = r"^https?://[^/?#@]+/?$")
    )]
    pub address: String,
}

// ---- Inspection views (`GET /v1/state`, `/v1/executors`, `/v1/shards`, `/v1/routing`) ----
// Replies, so unknown fields are tolerated: a newer server may add some.

/// One executor as the manager records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ExecutorView {
    pub executor_id: String,
    pub incarnation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub address: String,
    /// Time left on the lease by the answering manager's clock (P3.1: time remaining, never an
    /// absolute time). Zero once lapsed.
    pub lease_remaining_ms: u64,
    /// The log index at which it registered.
    pub registered_revision: u64,
    /// The set the executor is told it holds (owned shards not being released).
    pub shards: Vec<ShardEpoch>,
    /// Marked draining by an operator: it gets no new shards and its shards are being moved to
    /// others through the normal handoff. Absent from older servers, hence the default.
    #[serde(default)]
    pub draining: bool,
    /// Its capacity (PROTOCOL P15.1), the weight the planner gives it. Absent from servers
    /// before schema 4, where every executor counts as [`DEFAULT_CAPACITY`].
    #[serde(default = "default_capacity")]
    pub capacity: u32,
    /// The load it carries (PROTOCOL P15.1): the sum of the smoothed loads its shards were
    /// reported with. Only the leader knows loads, so only a reply the leader served (or a
    /// `?consistent=true` read) has it; absent while nothing is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// `load ÷ capacity`, what placement balances (P15.2); present with `load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilisation: Option<f64>,
}

/// Serde's default for a capacity a reply leaves out.
fn default_capacity() -> u32 {
    DEFAULT_CAPACITY
}

/// A shard being handed from its owner to another executor (P5.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HandoffView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Revision of the revoke the old owner must acknowledge.
    pub revoke_revision: u64,
    /// Time until the old owner's last grant that included the shard expires (then the handoff
    /// completes without an acknowledgement).
    pub completes_by_expiry_in_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ShardView {
    pub shard: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub epoch: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffView>,
    /// Its smoothed load as last reported by its holder (PROTOCOL P15.1); only in replies the
    /// leader served, and only once some holder reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// Its own load exceeds the fair share of the smallest executor (P15.4): it is placed where
    /// it fits best and not moved back and forth. Only in replies the leader served.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hot: bool,
}

/// `GET /v1/state`: everything, read at one revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct StateView {
    pub revision: u64,
    /// Zero before the cluster's configuration is written.
    pub shard_count: u32,
    pub lease_duration_ms: u64,
    pub executors: Vec<ExecutorView>,
    pub shards: Vec<ShardView>,
}

/// Where to send work for one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Route {
    pub shard: u32,
    /// Absent while the shard is unowned or between owners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub epoch: u64,
}

/// `GET /v1/routing`: the whole table; `?key=K` answers with one [`Route`] plus the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RoutingTable {
    pub revision: u64,
    pub shard_count: u32,
    pub routes: Vec<Route>,
}

/// Consecutive shards routed alike: shards `first..first + count`, each at `epoch`, sent to
/// `owners[owner]` of their [`RoutingRuns`], or to nobody (`null`) while unowned or being handed
/// off. Encoded as a JSON array `[first, count, owner, epoch]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "(u32, u32, Option<u32>, u64)",
    into = "(u32, u32, Option<u32>, u64)"
)]
pub struct RouteRun {
    /// The run's lowest shard.
    pub first: u32,
    /// How many consecutive shards it spans; at least 1.
    pub count: u32,
    /// Index of the owner in [`RoutingRuns::owners`]; `None` for no route.
    pub owner: Option<u32>,
    /// The epoch of every shard in it.
    pub epoch: u64,
}

impl From<(u32, u32, Option<u32>, u64)> for RouteRun {
    fn from((first, count, owner, epoch): (u32, u32, Option<u32>, u64)) -> Self {
        Self {
            first,
            count,
            owner,
            epoch,
        }
    }
}

impl From<RouteRun> for (u32, u32, Option<u32>, u64) {
    fn from(run: RouteRun) -> Self {
        (run.first, run.count, run.owner, run.epoch)
    }
}

/// An executor some [`RouteRun`] sends work to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RouteOwner {
    pub executor_id: String,
    pub address: String,
}

/// The routing table as runs (`GET /v1/routing?form=runs`, `GET /v1/watch?view=routing`): the
/// same routes as [`RoutingTable`], each owner named once and each stretch of consecutive shards
/// with one owner and one epoch sent as one [`RouteRun`]. A fleet's shards are placed in blocks,
/// so a million-shard table is a few runs per executor (about a megabyte) instead of a route per
/// shard (about 75 MB). Asked for only of managers stating cluster version
/// [`COMPACT_SHARDS_SCHEMA`] or later (docs/PROTOCOL.md, "Versions").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RoutingRuns {
    pub revision: u64,
    pub shard_count: u32,
    /// Every executor a run routes to, once.
    pub owners: Vec<RouteOwner>,
    /// Ascending, disjoint, together covering `0..shard_count`.
    #[cfg_attr(feature = "utoipa", schema(value_type = Vec<Vec<u64>>))]
    pub runs: Vec<RouteRun>,
}

impl RoutingRuns {
    /// The runs of `routes`, given in shard order as `(shard, epoch, owner)` with the owner as
    /// `(executor_id, address)`: each maximal stretch of consecutive shards with one owner and
    /// one epoch becomes one run.
    pub fn collect<'a>(
        revision: u64,
        shard_count: u32,
        routes: impl IntoIterator<Item = (u32, u64, Option<(&'a str, &'a str)>)>,
    ) -> Self {
        let mut owner_index: HashMap<&'a str, u32> = HashMap::new();
        let mut owners: Vec<RouteOwner> = Vec::new();
        let mut runs: Vec<RouteRun> = Vec::new();
        // Consecutive shards mostly have one owner: its index is looked up once per stretch.
        let mut last_owner: Option<(&'a str, u32)> = None;
        for (shard, epoch, owner) in routes {
            let owner = owner.map(|(executor_id, address)| match last_owner {
                Some((last_id, index)) if last_id == executor_id => index,
                _ => {
                    let index = *owner_index.entry(executor_id).or_insert_with(|| {
                        owners.push(RouteOwner {
                            executor_id: executor_id.to_owned(),
                            address: address.to_owned(),
                        });
                        // At most one owner per shard, and shards are u32.
                        u32::try_from(owners.len() - 1).unwrap_or(u32::MAX)
                    });
                    last_owner = Some((executor_id, index));
                    index
                }
            });
            match runs.last_mut() {
                Some(run)
                    if run.owner == owner
                        && run.epoch == epoch
                        && u64::from(run.first) + u64::from(run.count) == u64::from(shard) =>
                {
                    run.count += 1;
                }
                _ => runs.push(RouteRun {
                    first: shard,
                    count: 1,
                    owner,
                    epoch,
                }),
            }
        }
        Self {
            revision,
            shard_count,
            owners,
            runs,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct KeyRoute {
    pub key: String,
    pub revision: u64,
    #[serde(flatten)]
    pub route: Route,
}

/// Reply to `POST /v1/executors/{id}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReleaseReply {
    /// Shards whose handoff this acknowledgement completed.
    pub completed: Vec<u32>,
    /// Shards whose handoff was not current (already done, cancelled, or never revoked): nothing
    /// changed for them.
    pub ignored: Vec<u32>,
}

/// `GET /v1/routing`: the whole table, or with `?key=K` the key's route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum RoutingAnswer {
    /// `?key=K`.
    Key(KeyRoute),
    /// No key.
    Table(RoutingTable),
    /// No key, `?form=runs`.
    Runs(RoutingRuns),
}

/// Reply to `POST /v1/cluster/init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct InitReply {
    /// The cluster is formed.
    pub initialized: bool,
    /// This call formed it (false: it was formed already).
    pub formed_now: bool,
}

/// Reply to `POST /v1/cluster/snapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SnapshotReply {
    /// Last log index the node's snapshot covers now.
    pub snapshot_index: Option<u64>,
    /// Log purged up to here (inclusive), if ever.
    pub purged_index: Option<u64>,
}

/// `GET /livez`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Liveness {
    /// Always `ok`: the process answers.
    pub status: String,
}

/// `GET /readyz`: `200` when every check passes, `503` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// Every check passed.
    pub ready: bool,
    /// Each check, with `?verbose`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<ReadinessCheck>>,
}

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ReadinessCheck {
    /// What is checked (`leader`, `applied`, `running`, `lease_config`).
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was observed.
    pub detail: String,
}

/// Why an executor left the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DepartureReason {
    /// It deregistered (graceful stop, P3.7).
    Deregistered,
    /// Its lease lapsed and the leader reaped it (P3.8).
    Reaped,
}

/// A recently removed executor (the manager keeps a bounded record of them, P7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DepartedExecutor {
    pub executor_id: String,
    pub incarnation: String,
    pub reason: DepartureReason,
    /// The revision (log index) at which it was removed.
    pub removed_revision: u64,
}

/// Longest `wait` one `GET /v1/watch` may ask for; the manager refuses a longer one (400) rather
/// than shorten it silently.
pub const MAX_WATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// `GET /v1/watch?revision=N&wait=30s`: a blocking query. Answers as soon as the state's revision
/// is above `N`, or with the unchanged state when the wait runs out (then `state.revision <= N`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WatchReply {
    /// The whole state at its current revision.
    pub state: StateView,
    /// Executors removed after revision `N`, ascending by id, so a watcher can tell a deregister
    /// from an expiry.
    pub departed: Vec<DepartedExecutor>,
}

/// What `GET /v1/watch` answers: the state (the default), or with `view=routing` only the
/// routing table, as runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum WatchAnswer {
    State(WatchReply),
    Routing(RoutingRuns),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i6_shard_lists_in_any_order_are_checked_for_range_and_duplicates() {
        use ShardListError::{Duplicate, OutOfRange};
        let cases: &[(&[u32], Result<(), ShardListError>)] = &[
            (&[], Ok(())),
            (&[0, 1, 7], Ok(())),
            (&[7, 0, 3], Ok(())),
            (&[3, 3], Err(Duplicate { shard: 3 })),
            (&[1, 2, 2, 5], Err(Duplicate { shard: 2 })),
            (&[5, 2, 7, 2], Err(Duplicate { shard: 2 })),
            (&[6, 1, 6], Err(Duplicate { shard: 6 })),
            (
                &[0, 8],
                Err(OutOfRange {
                    shard: 8,
                    shard_count: 8,
                }),
            ),
            (
                &[9, 1, 1],
                Err(OutOfRange {
                    shard: 9,
                    shard_count: 8,
                }),
            ),
        ];
        for (shards, expected) in cases {
            assert_eq!(
                &check_shard_list(shards.iter().copied(), 8),
                expected,
                "{shards:?}"
            );
        }
    }
    use serde_json::json;

    /// P15.1, I6: a capacity is a positive weight up to `MAX_CAPACITY`.
    #[test]
    fn p15_1_capacities_outside_one_to_the_maximum_are_refused() {
        for good in [1, 2, DEFAULT_CAPACITY, MAX_CAPACITY] {
            assert_eq!(check_capacity(good), Ok(()), "{good}");
        }
        for bad in [0, MAX_CAPACITY + 1, u32::MAX] {
            let error = check_capacity(bad).unwrap_err();
            assert_eq!(error, CapacityError { capacity: bad });
            assert!(error.to_string().contains("P15.1"), "{error}");
        }
    }

    fn loads(entries: &[(u32, f64)]) -> Vec<ShardLoad> {
        entries
            .iter()
            .map(|&(shard, load)| ShardLoad { shard, load })
            .collect()
    }

    /// P15.1, I6: a renewal's loads name each shard once, below the shard count, with a finite
    /// load in `0..=MAX_SHARD_LOAD`, and list no more entries than there are shards.
    #[test]
    fn p15_1_i6_shard_loads_are_checked_for_shards_values_and_length() {
        for good in [
            vec![],
            loads(&[(0, 0.0), (7, MAX_SHARD_LOAD)]),
            loads(&[(5, 1.5), (2, -0.0), (3, 1e-300)]),
            loads(&(0..8).map(|shard| (shard, 1.0)).collect::<Vec<_>>()),
        ] {
            assert_eq!(check_shard_loads(&good, 8), Ok(()), "{good:?}");
        }
        let out_of_range = |shard, load| ShardLoadError::OutOfRange { shard, load };
        let cases: Vec<(Vec<ShardLoad>, ShardLoadError)> = vec![
            (
                loads(&[(8, 1.0)]),
                ShardListError::OutOfRange {
                    shard: 8,
                    shard_count: 8,
                }
                .into(),
            ),
            (
                loads(&[(3, 1.0), (1, 2.0), (3, 1.0)]),
                ShardListError::Duplicate { shard: 3 }.into(),
            ),
            (loads(&[(1, -1.0)]), out_of_range(1, -1.0)),
            (
                loads(&[(1, 1.0), (2, MAX_SHARD_LOAD * 2.0)]),
                out_of_range(2, MAX_SHARD_LOAD * 2.0),
            ),
            (loads(&[(4, f64::INFINITY)]), out_of_range(4, f64::INFINITY)),
            (
                loads(&(0..9).map(|shard| (shard % 8, 1.0)).collect::<Vec<_>>()),
                ShardLoadError::TooMany {
                    count: 9,
                    shard_count: 8,
                },
            ),
        ];
        for (bad, expected) in cases {
            assert_eq!(check_shard_loads(&bad, 8), Err(expected), "{bad:?}");
        }
        // NaN is unequal to itself, so it is matched rather than compared.
        assert!(matches!(
            check_shard_loads(&loads(&[(0, 1.0), (6, f64::NAN)]), 8),
            Err(ShardLoadError::OutOfRange { shard: 6, load }) if load.is_nan()
        ));
    }

    /// P15.1 through "Versions": `loads` is optional, absent unless set, and strict inside.
    #[test]
    fn renew_request_loads_are_optional_and_strict() {
        let without: RenewRequest =
            serde_json::from_value(json!({"claims": [], "revision": 3})).unwrap();
        assert_eq!(without.loads, None, "absent: the executor reports no loads");
        assert_eq!(
            serde_json::to_value(&without).unwrap(),
            json!({"claims": [], "revision": 3}),
            "an executor not reporting sends what 0.1.0 sent"
        );
        let with = RenewRequest {
            loads: Some(loads(&[(1, 2.5)])),
            ..without
        };
        let value = serde_json::to_value(&with).unwrap();
        assert_eq!(value["loads"], json!([{"shard": 1, "load": 2.5}]));
        assert_eq!(serde_json::from_value::<RenewRequest>(value).unwrap(), with);
        for bad in [
            json!({"claims": [], "revision": 1, "loads": [{"shard": 1, "load": "NaN"}]}),
            json!({"claims": [], "revision": 1, "loads": [{"shard": 1}]}),
            json!({"claims": [], "revision": 1, "loads": [{"shard": -1, "load": 1}]}),
            json!({"claims": [], "revision": 1, "loads": [{"shard": 1, "load": 1, "unit": "rps"}]}),
            json!({"claims": [], "revision": 1, "loads": {"1": 1.0}}),
        ] {
            assert!(
                serde_json::from_value::<RenewRequest>(bad.clone()).is_err(),
                "accepted {bad}"
            );
        }
        // JSON has no literal for a number beyond f64: a huge one is a decode error, not inf.
        assert!(serde_json::from_str::<RenewRequest>(
            r#"{"claims": [], "revision": 1, "loads": [{"shard": 1, "load": 1e400}]}"#
        )
        .is_err());
    }

    /// A reply of a server before schema 4 has no capacity: every executor counts as 1.
    #[test]
    fn executor_view_capacity_defaults_to_one() {
        let view: ExecutorView = serde_json::from_value(json!({
            "executor_id": "ex-1", "incarnation": "i", "address": "http://a:1",
            "lease_remaining_ms": 1, "registered_revision": 1, "shards": [],
        }))
        .unwrap();
        assert_eq!(view.capacity, DEFAULT_CAPACITY);
    }

    #[test]
    fn register_request_omits_absent_name() {
        let req = RegisterRequest {
            incarnation: "inc-1".into(),
            address: "http://127.0.0.1:9000".into(),
            name: None,
            credential: None,
            capacity: None,
        };
        let value = serde_json::to_value(&req).unwrap();
        assert_eq!(
            value,
            json!({"incarnation": "inc-1", "address": "http://127.0.0.1:9000"})
        );
        let back: RegisterRequest = serde_json::from_value(value).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn register_request_with_name_round_trips() {
        let req = RegisterRequest {
            incarnation: "inc-1".into(),
            address: "http://127.0.0.1:9000".into(),
            name: Some("worker-a".into()),
            credential: Some(Credential::from_random([7; 32])),
            capacity: Some(3),
        };
        let text = serde_json::to_string(&req).unwrap();
        assert_eq!(serde_json::from_str::<RegisterRequest>(&text).unwrap(), req);
    }

    /// P13.4: the secret never shows in a `Debug` (logs format requests with it); its shape is
    /// checked; the manager keeps its SHA-256.
    #[test]
    fn a_credential_is_redacted_checked_and_hashed() {
        let credential = Credential::from_random([0xab; 32]);
        assert_eq!(credential.expose().len(), 64);
        let request = RegisterRequest {
            incarnation: "i".into(),
            address: "http://a:1".into(),
            name: None,
            credential: Some(credential.clone()),
            capacity: None,
        };
        let debug = format!("{request:?}");
        assert!(!debug.contains(credential.expose()), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        assert!(Credential::parse(credential.expose()).is_ok());
        assert!(Credential::parse(&"a".repeat(MIN_CREDENTIAL_BYTES - 1)).is_err());
        assert!(Credential::parse(&"a".repeat(MAX_CREDENTIAL_BYTES + 1)).is_err());
        assert!(Credential::parse(&format!("{}!", "a".repeat(40))).is_err());
        let decoded: Credential = serde_json::from_value(json!("short")).unwrap();
        assert!(
            decoded.validate().is_err(),
            "serde alone does not check the shape"
        );
        assert_ne!(
            credential.sha256(),
            Credential::from_random([0xac; 32]).sha256()
        );
    }

    /// I6: every request type refuses a field it does not know.
    #[test]
    fn request_types_reject_unknown_fields() {
        fn rejects<T: serde::de::DeserializeOwned + fmt::Debug>(value: serde_json::Value) {
            let err = serde_json::from_value::<T>(value.clone())
                .expect_err(&format!("accepted unknown field: {value}"));
            assert!(err.to_string().contains("unknown field"), "{err}");
        }
        rejects::<RegisterRequest>(json!({"incarnation": "i", "address": "a", "extra": 1}));
        rejects::<RenewRequest>(json!({"claims": [], "revision": 1, "lease_ttl_ms": 5}));
        rejects::<RenewRequest>(
            json!({"claims": [{"shard": 1, "epoch": 1, "owner": "x"}], "revision": 1}),
        );
        rejects::<ReleaseRequest>(json!({"shards": [1], "revoke_revision": 3, "x": true}));
        rejects::<AssignmentPush>(
            json!({"executor_id": "ex-1", "revision": 1, "shard_count": 4, "shards": [], "lease_ttl_ms": 1}),
        );
        rejects::<RevokePush>(
            json!({"executor_id": "ex-1", "revision": 1, "shards": [], "epoch": 1}),
        );
        rejects::<AddNodeRequest>(json!({"node_id": 4, "address": "http://h:1", "voter": true}));
    }

    /// I6: wrong types and out-of-range numbers are decode errors, not silent coercions.
    #[test]
    fn request_types_reject_wrong_types() {
        assert!(
            serde_json::from_value::<RenewRequest>(json!({"claims": [], "revision": "7"})).is_err()
        );
        assert!(
            serde_json::from_value::<RenewRequest>(json!({"claims": {}, "revision": 7})).is_err()
        );
        assert!(
            serde_json::from_value::<RenewRequest>(json!({"claims": [], "revision": -1})).is_err()
        );
        assert!(serde_json::from_value::<RegisterRequest>(
            json!({"incarnation": 5, "address": "a"})
        )
        .is_err());
        for capacity in [json!("2"), json!(-1), json!(1.5), json!(4_294_967_296u64)] {
            assert!(
                serde_json::from_value::<RegisterRequest>(
                    json!({"incarnation": "i", "address": "a", "capacity": capacity})
                )
                .is_err(),
                "capacity {capacity}"
            );
        }
        assert!(serde_json::from_value::<ReleaseRequest>(
            json!({"shards": [4294967296u64], "revoke_revision": 1})
        )
        .is_err());
        assert!(serde_json::from_value::<ReleaseRequest>(
            json!({"shards": [1.5], "revoke_revision": 1})
        )
        .is_err());
        assert!(
            serde_json::from_value::<AddNodeRequest>(json!({"node_id": null, "address": "a"}))
                .is_err()
        );
    }

    #[test]
    fn request_types_reject_missing_fields() {
        assert!(serde_json::from_value::<RegisterRequest>(json!({"incarnation": "i"})).is_err());
        assert!(serde_json::from_value::<RenewRequest>(json!({"claims": []})).is_err());
        assert!(serde_json::from_value::<ReleaseRequest>(json!({"shards": [1]})).is_err());
    }

    #[test]
    fn base_urls_are_plain_http_origins() {
        for good in [
            "http://127.0.0.1:9000",
            "https://exec-1.internal:443/",
            "http://[::1]:1",
        ] {
            assert_eq!(validate_base_url(good), Ok(()), "{good}");
        }
        let too_long = format!("http://{}.example", "a".repeat(MAX_ADDRESS_BYTES));
        for bad in [
            "",
            "not a url",
            "127.0.0.1:9000",
            "ftp://127.0.0.1:9000",
            "http://127.0.0.1:9000/push",
            "http://127.0.0.1:9000/?x=1",
            "http://127.0.0.1:9000/#f",
            "http://user:pw@127.0.0.1:9000",
            "unix:/var/run/x.sock",
            too_long.as_str(),
        ] {
            assert!(validate_base_url(bad).is_err(), "accepted {bad:?}");
        }
    }

    /// One base-URL rule: what an advertised address may not be, no endpoint or owner address
    /// may be either; only a path prefix is left to the normalised form, without the slash.
    #[test]
    fn the_base_url_rule_is_one_for_addresses_endpoints_and_owners() {
        assert_eq!(
            normalize_base_url("https://m1.example:443/").as_deref(),
            Ok("https://m1.example")
        );
        assert_eq!(
            normalize_base_url("http://h:1/prefix/").as_deref(),
            Ok("http://h:1/prefix")
        );
        for bad in [
            "",
            "not a url",
            "ftp://127.0.0.1:9000",
            "http://127.0.0.1:9000/?x=1",
            "http://127.0.0.1:9000/#f",
            "http://user:pw@127.0.0.1:9000",
            "unix:/var/run/x.sock",
        ] {
            assert!(normalize_base_url(bad).is_err(), "accepted {bad:?}");
            assert!(validate_base_url(bad).is_err(), "accepted {bad:?}");
        }
    }

    fn entries(pairs: &[(u32, u64)]) -> Vec<ShardEpoch> {
        pairs
            .iter()
            .map(|&(shard, epoch)| ShardEpoch { shard, epoch })
            .collect()
    }

    fn run(first: u32, count: u32, epoch: u64) -> ShardRun {
        ShardRun {
            first,
            count,
            epoch,
        }
    }

    /// "Versions": a run is `[first, count, epoch]`, one per stretch of consecutive shards at
    /// one epoch, and expands back to the same list.
    #[test]
    fn shard_runs_are_stretches_of_one_epoch_and_expand_back() {
        let all: Vec<ShardEpoch> = (0..1024)
            .map(|shard| ShardEpoch { shard, epoch: 1 })
            .collect();
        assert_eq!(shard_runs(&all), vec![run(0, 1024, 1)]);
        assert_eq!(
            serde_json::to_value(shard_runs(&all)).unwrap(),
            json!([[0, 1024, 1]])
        );
        // A gap, an epoch change inside a stretch, a lone shard.
        let mixed = entries(&[(2, 5), (3, 5), (4, 6), (5, 6), (9, 6), (u32::MAX, 1)]);
        let runs = shard_runs(&mixed);
        assert_eq!(
            runs,
            vec![
                run(2, 2, 5),
                run(4, 2, 6),
                run(9, 1, 6),
                run(u32::MAX, 1, 1)
            ]
        );
        assert_eq!(expand_shard_runs(&runs[..3], 10).unwrap(), mixed[..5]);
        // A list out of order has the runs of its set.
        let mut shuffled = mixed[..5].to_vec();
        shuffled.reverse();
        assert_eq!(shard_runs(&shuffled), runs[..3]);
        assert_eq!(shard_runs(&[]), vec![]);
        assert_eq!(expand_shard_runs(&[], 10).unwrap(), vec![]);
        let decoded: Vec<ShardRun> = serde_json::from_value(json!([[4, 2, 6]])).unwrap();
        assert_eq!(decoded, vec![run(4, 2, 6)]);
    }

    /// I6: runs that are empty, overlapping, out of order or past the shard count are refused,
    /// and none of them allocates more than the shard count.
    #[test]
    fn malformed_shard_runs_are_refused() {
        let cases = [
            (vec![run(3, 0, 1)], ShardRunError::EmptyRun { first: 3 }),
            (
                vec![run(0, 4, 1), run(3, 2, 1)],
                ShardRunError::RunOutOfOrder { first: 3 },
            ),
            (
                vec![run(5, 1, 1), run(2, 1, 1)],
                ShardRunError::RunOutOfOrder { first: 2 },
            ),
            (
                vec![run(6, 3, 1)],
                ShardListError::OutOfRange {
                    shard: 8,
                    shard_count: 8,
                }
                .into(),
            ),
            (
                vec![run(u32::MAX, u32::MAX, 1)],
                ShardListError::OutOfRange {
                    shard: u32::MAX,
                    shard_count: 8,
                }
                .into(),
            ),
            // Each run fits by itself; the total would be 2^32 shards.
            (
                vec![run(0, u32::MAX, 1), run(0, u32::MAX, 1)],
                ShardListError::OutOfRange {
                    shard: u32::MAX - 1,
                    shard_count: 8,
                }
                .into(),
            ),
        ];
        for (runs, expected) in cases {
            assert_eq!(expand_shard_runs(&runs, 8), Err(expected), "{runs:?}");
        }
        for bad in [json!([[1, 2]]), json!([[1, 2, 3, 4]]), json!([[-1, 2, 3]])] {
            assert!(
                serde_json::from_value::<Vec<ShardRun>>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    /// "Versions": a renewal's claims come from either form, checked the same way, and a
    /// request carrying both is refused; the grant goes back in the form the claims came in.
    #[test]
    fn renewal_claims_and_grants_in_either_form() {
        let held = entries(&[(0, 2), (1, 2), (2, 2), (5, 3)]);
        let full = RenewRequest {
            claims: held.clone(),
            claim_runs: None,
            revision: 7,
            loads: None,
        };
        let compact = full.with_claims_as_runs();
        let value = serde_json::to_value(&compact).unwrap();
        assert_eq!(
            value,
            json!({"claims": [], "claim_runs": [[0, 3, 2], [5, 1, 3]], "revision": 7})
        );
        let decoded: RenewRequest = serde_json::from_value(value).unwrap();
        assert_eq!(decoded.checked_claims(8).unwrap().as_ref(), held.as_slice());
        assert_eq!(full.checked_claims(8).unwrap().as_ref(), held.as_slice());
        assert_eq!(
            full.checked_claims(5),
            Err(ShardListError::OutOfRange {
                shard: 5,
                shard_count: 5
            }
            .into())
        );
        let both = RenewRequest {
            claims: held.clone(),
            ..compact.clone()
        };
        assert_eq!(both.checked_claims(8), Err(ShardRunError::BothForms));

        let grant = Grant {
            executor_id: "ex-1".into(),
            lease_ttl_ms: 60_000,
            revision: 42,
            shard_count: 8,
            shards: held.clone(),
            shard_runs: None,
        };
        let compact_grant = grant.clone().into_shard_runs();
        assert_eq!(
            serde_json::to_value(&compact_grant).unwrap()["shard_runs"],
            json!([[0, 3, 2], [5, 1, 3]])
        );
        assert_eq!(compact_grant.shards, vec![]);
        assert_eq!(compact_grant.clone().expand_shard_runs().unwrap(), grant);
        assert_eq!(grant.clone().expand_shard_runs().unwrap(), grant);
        let both = Grant {
            shards: held,
            ..compact_grant.clone()
        };
        assert_eq!(both.expand_shard_runs(), Err(ShardRunError::BothForms));
        let past_the_end = Grant {
            shard_count: 4,
            ..compact_grant
        };
        assert!(past_the_end.expand_shard_runs().is_err());
    }

    #[test]
    fn grant_has_the_documented_shape() {
        let grant = Grant {
            executor_id: "ex-1".into(),
            lease_ttl_ms: 60_000,
            revision: 42,
            shard_count: 8,
            shards: vec![ShardEpoch { shard: 3, epoch: 2 }],
            shard_runs: None,
        };
        let value = serde_json::to_value(&grant).unwrap();
        assert_eq!(
            value,
            json!({
                "executor_id": "ex-1",
                "lease_ttl_ms": 60000,
                "revision": 42,
                "shard_count": 8,
                "shards": [{"shard": 3, "epoch": 2}],
            })
        );
        assert_eq!(serde_json::from_value::<Grant>(value).unwrap(), grant);
    }

    #[test]
    fn reply_types_tolerate_new_fields() {
        let grant: Grant = serde_json::from_value(json!({
            "executor_id": "ex-1", "lease_ttl_ms": 1, "revision": 1, "shard_count": 1,
            "shards": [], "added_in_a_later_version": true,
        }))
        .unwrap();
        assert_eq!(grant.executor_id, "ex-1");
    }

    #[test]
    fn cluster_info_round_trips_with_and_without_optionals() {
        let full = ClusterInfo {
            node_id: 1,
            leader_id: Some(2),
            leader_address: Some("http://127.0.0.1:7002".into()),
            term: 3,
            voters: vec![Member {
                node_id: 1,
                address: "http://127.0.0.1:7001".into(),
                release: Some("0.2.0".into()),
                newest_schema: Some(3),
            }],
            learners: vec![],
            last_log_index: Some(10),
            committed_index: Some(9),
            applied_index: Some(9),
            snapshot: Some(SnapshotInfo {
                last_log_index: Some(5),
                snapshot_id: "1-5-0".into(),
            }),
            release: Some("0.2.0".into()),
            cluster_version: Some(3),
            schemas: Some(SchemaRange {
                oldest: 2,
                newest: 3,
            }),
        };
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(serde_json::from_str::<ClusterInfo>(&text).unwrap(), full);

        let sparse: ClusterInfo = serde_json::from_value(json!({
            "node_id": 1, "term": 0, "voters": [], "learners": [],
        }))
        .unwrap();
        assert_eq!(sparse.leader_id, None);
        assert_eq!(sparse.snapshot, None);
        assert_eq!(sparse.release, None, "a 0.1.0 manager reports no release");
        // What a 0.1.0 reply means (P14.3): release 0.1.0, schema 2, cluster version 2.
        assert_eq!(sparse.reported_release(), FIRST_RELEASE);
        assert_eq!(
            sparse.reported_schemas(),
            SchemaRange {
                oldest: 2,
                newest: 2
            }
        );
        assert_eq!(sparse.reported_cluster_version(), 2);
    }

    #[test]
    fn revoke_reply_round_trips() {
        let reply = RevokeReply {
            revision: 9,
            released: vec![],
            ignored: true,
        };
        let value = serde_json::to_value(&reply).unwrap();
        assert_eq!(
            value,
            json!({"revision": 9, "released": [], "ignored": true})
        );
        assert_eq!(serde_json::from_value::<RevokeReply>(value).unwrap(), reply);
    }
}
