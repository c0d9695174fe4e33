//! The limits and checks every side applies alike: text and body sizes, shard lists against a
//! shard count, and the base-URL rule.

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
/// Longest lease a cluster or namespace may grant (`--lease-duration`, a namespace's lease): a
/// lease is a failure detector, and a day without one is no lease. Also keeps every millisecond
/// count far inside u64.
pub const MAX_LEASE_DURATION_MS: u64 = 24 * 60 * 60 * 1000;
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
