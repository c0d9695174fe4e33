//! What an executor and the managers send each other: registration, grants, renewals with their
//! loads, releases, pushes and revokes, and the executor's health.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::labels::Labels;
use super::limits::{check_shard_list, ShardListError, ShardRunError};
use super::shards::{expand_shard_runs, shard_runs, ShardEpoch, ShardRun};

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
    /// The application version this executor runs (PROTOCOL P17.3): letters, digits, '.', '-',
    /// '+' and '_', ordered as semantic versions (docs/PROTOCOL.md, P17.3): while the executors
    /// run more than one version, shards move only to the newest. Sent only to managers stating
    /// cluster version 12 or later; absent from
    /// executors of earlier releases and from those started without `--app-version`. A retried
    /// registration (same incarnation) keeps the version of the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9._+-]+$")
    )]
    pub app_version: Option<String>,
    /// The executor's labels (PROTOCOL P18.3): at most 16 `key: value` pairs, Kubernetes
    /// label-shaped; `zone` is the failure domain the planner spreads shards over in proportion
    /// to capacity. Sent only to managers stating cluster version 12 or later; absent when there
    /// are none. A retried registration (same incarnation) keeps the labels of the first.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    #[cfg_attr(feature = "utoipa", schema(value_type = std::collections::BTreeMap<String, String>))]
    pub labels: Labels,
    /// The namespace it registers into (PROTOCOL P18.1), which must exist (`404` otherwise);
    /// absent: `default`. Sent only to managers stating cluster version 12 or later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 63,
            pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
        )
    )]
    pub namespace: Option<String>,
    /// The executor follows a change of layout (PROTOCOL P20.3): it maps keys by the shard count
    /// of the newest set it applied, switching admission from a parent shard to its children
    /// (or back) in one step. A namespace reshards only while every executor in it says so, and
    /// one that has resharded takes only such executors. Sent only to managers stating cluster
    /// version 14 or later; absent means false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follows_generations: bool,
}

/// The state schema that introduced executor credentials (PROTOCOL P13.4, P14.3).
pub const CREDENTIALS_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;
/// The state schema that introduced executor capacities and load reports (PROTOCOL P15.1,
/// P14.3): `RegisterRequest::capacity` and `RenewRequest::loads` are sent only to managers
/// stating this cluster version or later.
pub const CAPACITY_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;
/// The cluster version from which renewals may carry their claims as runs and get their set back
/// so (`RenewRequest::claim_runs`, `Grant::shard_runs`): a wire form only, brought by the
/// release that brought capacities, so every manager stating it reads the runs.
pub const COMPACT_SHARDS_SCHEMA: u32 = CAPACITY_SCHEMA;
/// The cluster version from which a renewal may take "unchanged" for an answer
/// (`RenewRequest::accept_unchanged`, `Grant::unchanged`): a wire form only, brought by the
/// release that brought labels, so every manager stating it reads the field.
pub const UNCHANGED_SET_SCHEMA: u32 = super::labels::LABELS_SCHEMA;

/// The state schema that introduced registrations group-committed into one entry
/// (`RegisterMany`, PROTOCOL P14.3): a replicated command only, nothing on the wire. The leader
/// batches registrations from this cluster version on.
pub const GROUP_REGISTRATION_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

/// The state schema that introduced lease reservations and reaping by the leader's judgment
/// (`ReserveLeases`, `ReapLapsed`, the executors' `lease_reserved_until_ms`; PROTOCOL P6.6,
/// P6.7): a replicated change only, nothing on the wire. A leader answers renewals from its
/// memory (P6.5) only from this cluster version on, when every member keeps those rules.
pub const LEASE_RESERVATION_SCHEMA: u32 = super::cluster::SECOND_RELEASE_SCHEMA;

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
    /// Needed to map keys to shards (`crate::shard_for_key`). It changes only with
    /// `generation` (PROTOCOL P20.3).
    pub shard_count: u32,
    /// The namespace's generation (PROTOCOL P20.1): raised by each split or merge, with
    /// `shard_count`. An executor that stated `follows_generations` maps keys by the shard count
    /// of the newest set it applied; absent (0) until the namespace first reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    /// The full set the manager records for this executor (P4.2). Empty in the compact form,
    /// where `shard_runs` carries the set.
    pub shards: Vec<ShardEpoch>,
    /// The same set as runs, in reply to a renewal that sent `claim_runs` (and only then, so a
    /// client that never asks never sees it); `shards` is then empty. Clients of this crate
    /// expand it ([`Grant::expand_shard_runs`]) before handing the grant on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(value_type = Option<Vec<Vec<u64>>>))]
    pub shard_runs: Option<Vec<ShardRun>>,
    /// The set at `revision` is exactly the claims of the renewal this answers, so neither
    /// `shards` (empty) nor `shard_runs` (absent) lists it. Only in reply to a renewal that set
    /// `accept_unchanged`; clients of this crate put those claims in
    /// `shards` ([`Grant::expand_unchanged`]) before handing the grant on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unchanged: bool,
    /// The shards this executor holds a secondary of (PROTOCOL P19.1), each at the shard's
    /// current epoch, ascending: it keeps a warm copy and admits only secondary work for them.
    /// Always listed whole, whatever form `shards` takes; absent in a namespace of one replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<ShardEpoch>,
}

impl Grant {
    /// This grant answering "unchanged" in place of its set: the reply to a renewal that set
    /// `accept_unchanged` and claimed exactly the set this grant lists.
    pub fn into_unchanged(mut self) -> Self {
        self.shards = Vec::new();
        self.shard_runs = None;
        self.unchanged = true;
        self
    }

    /// This grant with an "unchanged" answer expanded into `shards`: the claims of `renewal`, the
    /// renewal it answers (in whichever form it sent them, checked against this grant's shard
    /// count), ascending. A grant that says unchanged and lists a set too is refused, since the
    /// two could disagree.
    pub fn expand_unchanged(mut self, renewal: &RenewRequest) -> Result<Self, ShardRunError> {
        if self.unchanged {
            if !self.shards.is_empty() || self.shard_runs.is_some() {
                return Err(ShardRunError::BothForms);
            }
            let mut shards = renewal.checked_claims(self.shard_count)?.into_owned();
            shards.sort_unstable_by_key(|claim| claim.shard);
            self.shards = shards;
            self.unchanged = false;
        }
        Ok(self)
    }

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
    /// The executor takes "unchanged" for an answer ([`Grant::unchanged`]): when its claims are
    /// exactly the set the grant would list, the grant says so instead of listing it. Sent only
    /// to managers stating cluster version [`UNCHANGED_SET_SCHEMA`] or later (docs/PROTOCOL.md,
    /// "Versions").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_unchanged: bool,
    /// The secondaries the executor says are ready (PROTOCOL P19.3), each at the epoch its set
    /// showed: its whole list, so one left out is no longer ready. Each below the shard count
    /// and listed once. Sent only to managers stating cluster version 13 or later, and only by an
    /// executor that holds secondaries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready: Vec<ShardEpoch>,
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
            accept_unchanged: self.accept_unchanged,
            ready: self.ready.clone(),
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

    /// The secondaries it says are ready, checked against `shard_count` (I6): each below it and
    /// listed once.
    pub fn checked_ready(&self, shard_count: u32) -> Result<&[ShardEpoch], ShardListError> {
        check_shard_list(self.ready.iter().map(|entry| entry.shard), shard_count)?;
        Ok(&self.ready)
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
    /// The namespace's generation, as a grant carries it (PROTOCOL P20.3); absent (0) until the
    /// namespace first reshards.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
    /// The complete set; a push never carries a lease (P3.3).
    pub shards: Vec<ShardEpoch>,
    /// The executor's secondaries (PROTOCOL P19.1), whole, as a grant lists them; absent in a
    /// namespace of one replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondaries: Vec<ShardEpoch>,
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
    /// The generation whose layout `shards` are numbered in (PROTOCOL P20.3); absent (0) until
    /// the namespace first reshards. An executor refuses a revoke newer than its set in another
    /// layout: a shard of a new layout may be another shard, or part of one, in the old.
    #[serde(default, skip_serializing_if = "super::is_first_generation")]
    pub generation: u64,
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

/// `POST /v1/prepare` on the executor (PROTOCOL P17.1): these shards are about to be handed to
/// it, each at `epoch`; it may warm up (load a cache, replay a log) before the leader revokes
/// them from their holders. It admits nothing because of it: the shards are its only once a set
/// grants them (P3.3). A plan that changes in between may give them elsewhere after all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PreparePush {
    /// The executor the shards are for (see [`AssignmentPush::executor_id`]).
    pub executor_id: String,
    /// The revision the plan was made on.
    pub revision: u64,
    /// The shards, each with the epoch it will be granted at.
    pub shards: Vec<ShardEpoch>,
    /// How long the leader waits for the answer (its `--prepare-timeout`): the executor answers
    /// by then with the shards prepared so far.
    pub wait_ms: u64,
}

/// Executor's answer to a prepare push, sent once every shard is prepared, or when its own
/// bound passed for those that are not (the leader goes on without them either way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PrepareReply {
    /// The shards whose preparation completed.
    pub prepared: Vec<u32>,
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
