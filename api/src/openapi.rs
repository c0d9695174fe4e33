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

/// The document as checked in under `docs/openapi/`: pretty JSON with a final newline, so the
/// drift tests compare bytes and a regenerated file diffs cleanly.
pub fn to_pretty_json(doc: &OpenApi) -> String {
    let mut text = serde_json::to_string_pretty(doc).unwrap_or_default();
    text.push('\n');
    text
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
