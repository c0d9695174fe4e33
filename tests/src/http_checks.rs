//! Helpers for tests of the HTTP surfaces: raw requests with full control over method, headers
//! and body, problem+json assertions, and a Prometheus text parser.

use std::collections::BTreeMap;

use leasehold_api::problem::{ErrorCode, PROBLEM_CONTENT_TYPE, REQUEST_ID_HEADER};
use serde_json::Value;

/// One raw request.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: reqwest::Method,
    pub path: String,
    pub content_type: Option<&'static str>,
    pub body: Vec<u8>,
    pub request_id: Option<String>,
}

impl RawRequest {
    pub fn new(method: reqwest::Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            content_type: None,
            body: Vec::new(),
            request_id: None,
        }
    }

    pub fn json(mut self, body: impl Into<String>) -> Self {
        self.content_type = Some("application/json");
        self.body = body.into().into_bytes();
        self
    }

    pub fn body(mut self, content_type: Option<&'static str>, body: Vec<u8>) -> Self {
        self.content_type = content_type;
        self.body = body;
        self
    }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct RawReply {
    pub status: u16,
    pub content_type: Option<String>,
    pub request_id: Option<String>,
    /// The `Connection` header.
    pub connection: Option<String>,
    pub body: Vec<u8>,
}

impl RawReply {
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| {
            format!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }

    /// Checks the reply is a problem+json document with `code` and the status that goes with
    /// it; the message names `what` on failure.
    pub fn expect_problem(&self, what: &str, code: ErrorCode) {
        assert_eq!(
            self.status,
            code.status(),
            "{what}: status; body {}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.content_type.as_deref(),
            Some(PROBLEM_CONTENT_TYPE),
            "{what}: content type"
        );
        let problem = self.json().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(problem["code"], code.as_str(), "{what}: code in {problem}");
        assert_eq!(problem["status"], code.status(), "{what}: status member");
        assert!(problem["detail"].is_string(), "{what}: detail in {problem}");
        assert!(
            self.request_id.as_deref().is_some_and(|id| !id.is_empty()),
            "{what}: X-Request-Id missing"
        );
        if code == ErrorCode::PayloadTooLarge {
            // The limit drains what the client sends and closes (`limit_body`), so the client
            // reads the answer rather than a reset.
            assert_eq!(
                self.connection.as_deref(),
                Some("close"),
                "{what}: Connection"
            );
        }
    }
}

/// Bodies above this are sent over a plain socket ([`send_large`]).
const LARGE_BODY_BYTES: usize = 64 << 10;

/// Sends `request` to `base` and collects the reply.
pub async fn send(http: &reqwest::Client, base: &str, request: &RawRequest) -> RawReply {
    if request.body.len() > LARGE_BODY_BYTES {
        return send_large(base, request).await;
    }
    let mut builder = http
        .request(request.method.clone(), format!("{base}{}", request.path))
        .body(request.body.clone());
    if let Some(content_type) = request.content_type {
        builder = builder.header(reqwest::header::CONTENT_TYPE, content_type);
    }
    if let Some(id) = &request.request_id {
        builder = builder.header(REQUEST_ID_HEADER, id);
    }
    let reply = builder
        .send()
        .await
        .unwrap_or_else(|e| panic!("{} {}: {e}", request.method, request.path));
    let header = |name: &str| {
        reply
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let status = reply.status().as_u16();
    let content_type = header("content-type");
    let request_id = header(REQUEST_ID_HEADER);
    let connection = header("connection");
    let body = reply.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    RawReply {
        status,
        content_type,
        request_id,
        connection,
        body,
    }
}

/// Sends a large body over its own connection while reading the reply at the same time. A
/// server refusing a body by its `Content-Length` answers `413` before reading it and then closes
/// the connection; an HTTP client library that is still writing the body sees only the reset,
/// not the answer, so the answer is read here from the socket directly.
async fn send_large(base: &str, request: &RawRequest) -> RawReply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .unwrap_or_else(|e| panic!("connect {authority}: {e}"));
    let (mut reader, mut writer) = stream.into_split();
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        request.method,
        request.path,
        request.body.len()
    );
    if let Some(content_type) = request.content_type {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    if let Some(id) = &request.request_id {
        head.push_str(&format!("{REQUEST_ID_HEADER}: {id}\r\n"));
    }
    head.push_str("\r\n");
    let body = request.body.clone();
    let writing = tokio::spawn(async move {
        // The server may stop reading at any point; a failed write is expected then.
        if writer.write_all(head.as_bytes()).await.is_ok() {
            let _ = writer.write_all(&body).await;
        }
        // Handed back rather than dropped: dropping it would half-close the connection, which a
        // server may take for a client that went away before its answer.
        writer
    });
    let mut raw = Vec::new();
    let _ = reader.read_to_end(&mut raw).await;
    writing.abort();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "{} {}: no HTTP reply head in {:?}",
                request.method,
                request.path,
                String::from_utf8_lossy(&raw)
            )
        });
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    };
    RawReply {
        status,
        content_type: header("content-type"),
        request_id: header(REQUEST_ID_HEADER),
        connection: header("connection"),
        body: raw[split + 4..].to_vec(),
    }
}

/// Parses Prometheus text exposition into `series → value`, the series written as the exporter
/// writes it (`name{label="value",...}`, labels in the order given at the call site).
/// `GET {base}/metrics`, parsed (see [`parse_prometheus`]).
pub async fn scrape(http: &reqwest::Client, base: &str) -> Result<BTreeMap<String, f64>, String> {
    let url = format!("{base}/metrics");
    let reply = http
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let text = reply.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    Ok(parse_prometheus(&text))
}

pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sum of `series` over several scrapes (absent counts as zero): a counter counted by whichever
/// manager led when the event happened adds up across the replicas.
pub fn summed(scrapes: &[BTreeMap<String, f64>], series: &str) -> f64 {
    scrapes.iter().filter_map(|m| m.get(series)).sum()
}
