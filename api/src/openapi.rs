//! OpenAPI support shared by the manager's and the executor's documents (feature `utoipa`).
//!
//! The servers derive their documents from their handlers (`#[utoipa::path]`) and the wire types
//! here (`ToSchema`). Error answers are the same problem+json everywhere, and some can come from
//! any operation (a bad query, a timeout, a body that is too large), so instead of repeating them
//! on every handler, [`document_problems`] adds to each operation the problem responses it can
//! give, with the codes each status carries, and gives every error response the problem+json
//! body. A handler's annotation lists only the statuses particular to it.

use std::collections::BTreeSet;

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::Type;
use utoipa::openapi::{
    ContentBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder,
};

use crate::problem::{ErrorCode, PROBLEM_CONTENT_TYPE, REQUEST_ID_HEADER};

/// Operations on paths `.0` accepts can answer the codes `.1`.
pub type CodesOnPaths<'a> = (fn(&str) -> bool, &'a [ErrorCode]);

/// Which problem codes an operation can answer, beyond those its annotation lists.
#[derive(Debug, Clone, Copy)]
pub struct ProblemCodes<'a> {
    /// Every operation (e.g. `invalid_request` for a bad query, `timeout`, `internal`).
    pub everywhere: &'a [ErrorCode],
    /// Operations with a request body (`payload_too_large`, `unsupported_media_type`).
    pub with_body: &'a [ErrorCode],
    /// Operations whose path matches `predicate` get `codes` too (e.g. leader-served routes get
    /// `not_leader` and `no_leader`).
    pub by_path: &'a [CodesOnPaths<'a>],
}

/// Adds the problem responses of `codes` to every operation of `doc`, a problem+json body to every
/// 4xx/5xx response, and the `X-Request-Id` header to every response.
pub fn document_problems(doc: &mut OpenApi, codes: ProblemCodes<'_>) {
    for (path, item) in doc.paths.paths.iter_mut() {
        for operation in operations(item) {
            let mut wanted: BTreeSet<ErrorCode> = codes.everywhere.iter().copied().collect();
            if operation.request_body.is_some() {
                wanted.extend(codes.with_body.iter().copied());
            }
            for (applies, extra) in codes.by_path {
                if applies(path) {
                    wanted.extend(extra.iter().copied());
                }
            }
            let responses = &mut operation.responses.responses;
            for code in &wanted {
                let status = code.status().to_string();
                responses.entry(status).or_insert_with(|| {
                    let codes_here: Vec<ErrorCode> = wanted
                        .iter()
                        .copied()
                        .filter(|c| c.status() == code.status())
                        .collect();
                    RefOr::T(problem_response(&describe(&codes_here)))
                });
            }
            for (status, response) in responses.iter_mut() {
                if let RefOr::T(response) = response {
                    if is_error_status(status) && response.content.is_empty() {
                        response
                            .content
                            .insert(PROBLEM_CONTENT_TYPE.to_string(), problem_content());
                    }
                    response
                        .headers
                        .entry(canonical_request_id_header())
                        .or_insert_with(|| {
                            HeaderBuilder::new()
                                .schema(ObjectBuilder::new().schema_type(Type::String))
                                .description(Some(
                                    "The request's id: the one sent when well formed, else a \
                                     generated one; it names the request in the server's logs.",
                                ))
                                .build()
                        });
                }
            }
        }
    }
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
        item.head.as_mut(),
        item.options.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

fn canonical_request_id_header() -> String {
    // HTTP header names are case-insensitive; documents conventionally capitalise them.
    REQUEST_ID_HEADER
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-")
}

fn is_error_status(status: &str) -> bool {
    status.starts_with('4') || status.starts_with('5')
}

fn describe(codes: &[ErrorCode]) -> String {
    let names: Vec<String> = codes.iter().map(|c| format!("`{}`", c.as_str())).collect();
    format!("Problem ({}).", names.join(", "))
}

fn problem_content() -> utoipa::openapi::Content {
    ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("Problem")))
        .build()
}

/// A problem+json response with `description`.
pub fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(PROBLEM_CONTENT_TYPE, problem_content())
        .build()
}

/// The document as served and checked in under `docs/openapi/`: pretty JSON with a final
/// newline, so the drift tests compare bytes and a regenerated file diffs cleanly, in its
/// published form ([`publish`]).
pub fn to_pretty_json(doc: &OpenApi) -> String {
    let mut value = serde_json::to_value(doc).unwrap_or_default();
    publish(&mut value);
    // Back through the typed document, which writes its fields in the specification's order
    // (`openapi`, `info`, `paths`, …) where a JSON value would sort them; unless that loses
    // anything (utoipa reads back less than it writes: a schema of any type, an extension it
    // does not know), when the published value is written as it is, its keys sorted.
    let typed = serde_json::from_value::<OpenApi>(value.clone())
        .ok()
        .filter(|typed| serde_json::to_value(typed).ok().as_ref() == Some(&value));
    let mut text = match typed {
        Some(typed) => serde_json::to_string_pretty(&typed),
        None => serde_json::to_string_pretty(&value),
    }
    .unwrap_or_default();
    text.push('\n');
    text
}

/// What the Rust source says in its own terms, put in the document's: the descriptions come
/// from doc comments, whose links (`` [`NAME`] ``) name Rust items a reader in another language
/// cannot look up, so each becomes the value or the schema it stands for. A link not listed here
/// is left as it is, and the documents' tests refuse it ([`rust_artefact`]).
const RUST_LINKS: &[(&str, &str)] = &[
    ("[`MAX_SHARD_LOAD`]", "1e12"),
    ("`1..=`[`MAX_CAPACITY`]", "1 to 1 000 000"),
    ("[`MAX_CAPACITY`]", "1 000 000"),
    ("[`DEFAULT_CAPACITY`]", "1"),
    ("[`CREDENTIALS_SCHEMA`]", "12"),
    ("[`CAPACITY_SCHEMA`]", "12"),
    ("[`COMPACT_SHARDS_SCHEMA`]", "12"),
    ("[`LEADER_HEADER`]", "the `X-Leasehold-Leader` header"),
    ("[`crate::RELEASE`]", "its version, e.g. `0.2.0`"),
    (
        " (see [`validate_base_url`])",
        ", with at most a trailing `/`",
    ),
    (
        " (see [`AssignmentPush::executor_id`])",
        ": the id it was told at registration",
    ),
    (", checked by [`check_shard_loads`]", ""),
    (" ([`Grant::expand_shard_runs`])", " into `shards`"),
    (" ([`Grant::expand_unchanged`])", ""),
    ("[`Grant::unchanged`]", "the grant's `unchanged`"),
    ("[`UNCHANGED_SET_SCHEMA`]", "12"),
    ("[`RevokePush`]", "revoke"),
    ("[`ShardRun`]", "`ShardRun`"),
    ("[`RouteRun`]", "`RouteRun`"),
    ("[`RoutingTable`]", "`RoutingTable`"),
    ("[`RoutingRuns`]", "`RoutingRuns`"),
    ("[`RoutingRuns::owners`]", "the table's `owners`"),
    ("[`Route`]", "`Route`"),
];

/// Puts `doc` (an OpenAPI document as JSON) in its published form: no Rust link in a
/// description ([`RUST_LINKS`]), and unsigned integers described by JSON Schema's own bounds
/// (`minimum`, `maximum`) instead of utoipa's non-standard formats (`u-int32`, …), which
/// generators for other languages do not know.
pub fn publish(doc: &mut serde_json::Value) {
    match doc {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::String(text)) = map.get_mut("description") {
                for (link, words) in RUST_LINKS {
                    if text.contains(link) {
                        *text = text.replace(link, words);
                    }
                }
            }
            let unsigned_max = match map.get("format").and_then(|f| f.as_str()) {
                Some("u-int8") => Some(Some(u64::from(u8::MAX))),
                Some("u-int16") => Some(Some(u64::from(u16::MAX))),
                Some("u-int32") => Some(Some(u64::from(u32::MAX))),
                Some("u-int64") => Some(None),
                _ => None,
            };
            if let Some(max) = unsigned_max {
                map.remove("format");
                map.entry("minimum").or_insert(serde_json::json!(0));
                if let Some(max) = max {
                    map.entry("maximum").or_insert(serde_json::json!(max));
                }
            }
            map.values_mut().for_each(publish);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(publish),
        _ => {}
    }
}

/// Whether a published document (as JSON text) is free of what only a Rust reader understands:
/// `None` when it is, else the first offending excerpt.
pub fn rust_artefact(published: &str) -> Option<String> {
    ["[`", "\"u-int"].iter().find_map(|needle| {
        published.find(needle).map(|at| {
            let start = published[..at]
                .char_indices()
                .rev()
                .nth(60)
                .map_or(0, |(i, _)| i);
            let end = published[at..]
                .char_indices()
                .nth(60)
                .map_or(published.len(), |(i, _)| at + i);
            published[start..end].to_owned()
        })
    })
}

/// Compares `generated` with the checked-in document at `path`; with `UPDATE_OPENAPI=1` in the
/// environment, writes it instead. Returns a message saying how to regenerate on drift.
pub fn check_or_update(generated: &str, path: &std::path::Path) -> Result<(), String> {
    if std::env::var_os("UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        return std::fs::write(path, generated).map_err(|e| format!("{}: {e}", path.display()));
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    if checked_in == generated {
        Ok(())
    } else {
        Err(format!(
            "{} differs from the document the code generates. If the API change is intended, \
             regenerate it with `UPDATE_OPENAPI=1 cargo test --workspace openapi` and commit the file.",
            path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType};
    use utoipa::openapi::{ComponentsBuilder, OpenApiBuilder};

    use super::*;

    fn published(doc: &OpenApi) -> serde_json::Value {
        serde_json::from_str(&to_pretty_json(doc)).unwrap()
    }

    /// A document utoipa cannot read back whole (a schema of any type) is still published
    /// whole and in its published form, only with its keys sorted.
    /// The schema numbers the published documents spell out are the constants' own.
    #[test]
    fn the_published_schema_numbers_are_the_constants() {
        use crate::wire::{
            CAPACITY_SCHEMA, COMPACT_SHARDS_SCHEMA, CREDENTIALS_SCHEMA, UNCHANGED_SET_SCHEMA,
        };
        for (link, value) in [
            ("[`CREDENTIALS_SCHEMA`]", CREDENTIALS_SCHEMA),
            ("[`CAPACITY_SCHEMA`]", CAPACITY_SCHEMA),
            ("[`COMPACT_SHARDS_SCHEMA`]", COMPACT_SHARDS_SCHEMA),
            ("[`UNCHANGED_SET_SCHEMA`]", UNCHANGED_SET_SCHEMA),
        ] {
            let published = RUST_LINKS.iter().find(|(from, _)| *from == link);
            assert_eq!(
                published.map(|(_, to)| *to),
                Some(value.to_string().as_str())
            );
        }
    }

    #[test]
    fn a_document_utoipa_cannot_read_back_is_published_whole() {
        let doc = OpenApiBuilder::new()
            .components(Some(
                ComponentsBuilder::new()
                    .schema(
                        "Anything",
                        ObjectBuilder::new().schema_type(SchemaType::AnyValue),
                    )
                    .schema(
                        "Count",
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                                utoipa::openapi::KnownFormat::UInt32,
                            )))
                            .description(Some("At most [`MAX_CAPACITY`].")),
                    )
                    .build(),
            ))
            .build();
        let value = published(&doc);
        let schemas = &value["components"]["schemas"];
        assert!(schemas.get("Anything").is_some(), "{value}");
        assert_eq!(schemas["Count"]["description"], "At most 1 000 000.");
        assert_eq!(schemas["Count"]["maximum"], u32::MAX);
        assert!(schemas["Count"].get("format").is_none());
        assert_eq!(rust_artefact(&to_pretty_json(&doc)), None);
    }

    /// A document utoipa reads back whole keeps the specification's order: `openapi` first.
    #[test]
    fn a_document_read_back_whole_keeps_the_specifications_order() {
        let doc = OpenApiBuilder::new().build();
        assert!(to_pretty_json(&doc).starts_with("{\n  \"openapi\""));
    }
}
