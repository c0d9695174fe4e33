//! The Python example service (examples/python/kv.py) beside a `leasehold-executor` sidecar
//! (PROTOCOL §16), for the multi-process tests.
//!
//! Python 3 is not part of the Rust toolchain: without `python3` the tests that need it say so
//! and skip ([`python_or_skip`]), unless `LEASEHOLD_REQUIRE_PYTHON=1` (set by `.ci/run`, which
//! installs it) makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold_harness::ChildProcess;
use nix::sys::signal::Signal;
use serde_json::Value;

use crate::{free_port, must};

/// Makes a missing `python3` a failure instead of a skip.
pub const REQUIRE_PYTHON_ENV: &str = "LEASEHOLD_REQUIRE_PYTHON";

/// `python3`, or `None` after saying why the test is skipped.
pub fn python_or_skip(test: &str) -> Option<PathBuf> {
    let found = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if found {
        return Some(PathBuf::from("python3"));
    }
    let required = std::env::var(REQUIRE_PYTHON_ENV).is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{REQUIRE_PYTHON_ENV}=1 but python3 is not installed (apt-get install python3)"
    );
    eprintln!(
        "SKIPPED {test}: python3 is not installed (the Python example needs it; CI installs it)"
    );
    None
}

/// The example's script in the workspace.
pub fn example_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python/kv.py")
}

/// One `examples/python/kv.py` process.
#[derive(Debug)]
pub struct PythonService {
    pub name: String,
    /// Its own HTTP listener (`PUT`/`GET /kv/{key}`, `GET /stats`).
    pub port: u16,
    log_path: PathBuf,
    process: ChildProcess,
    http: reqwest::Client,
}

impl PythonService {
    /// Starts the example against the sidecar's local API at `sidecar` (a URL or `unix:/path`),
    /// on `store_dir`, with `extra` flags (its hidden test flags); its log in `dir`.
    pub fn start(
        python: &Path,
        dir: &Path,
        name: &str,
        sidecar: &str,
        store_dir: &Path,
        extra: &[&str],
    ) -> Self {
        let port = free_port();
        let log_path = dir.join(format!("python-{name}.log"));
        let mut command = Command::new(python);
        command
            .arg("-u")
            .arg(example_script())
            .args(["--sidecar", sidecar])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--store-dir")
            .arg(store_dir)
            .args(extra);
        let process = must(ChildProcess::spawn(&mut command, &log_path));
        Self {
            name: name.to_owned(),
            port,
            log_path,
            process,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("http client"),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `PUT /kv/{key}`: the status and the body.
    pub async fn put(&self, key: &str, value: &str) -> Result<(u16, Value), String> {
        let reply = self
            .http
            .put(format!("{}/kv/{key}", self.url()))
            .json(&serde_json::json!({ "value": value }))
            .send()
            .await
            .map_err(|e| format!("PUT {key} to {}: {e}", self.name))?;
        Self::read(reply).await
    }

    /// `GET /kv/{key}`: the status and the body.
    pub async fn get(&self, key: &str) -> Result<(u16, Value), String> {
        let reply = self
            .http
            .get(format!("{}/kv/{key}", self.url()))
            .send()
            .await
            .map_err(|e| format!("GET {key} from {}: {e}", self.name))?;
        Self::read(reply).await
    }

    /// `GET /stats`.
    pub async fn stats(&self) -> Result<Value, String> {
        self.get_body("/stats").await
    }

    /// `GET /permits`: the lease copy the service admits on, with its end on CLOCK_MONOTONIC.
    pub async fn permits(&self) -> Result<Value, String> {
        self.get_body("/permits").await
    }

    /// The body of `GET <path>`, whatever its status.
    async fn get_body(&self, path: &str) -> Result<Value, String> {
        let reply = self
            .http
            .get(format!("{}{path}", self.url()))
            .send()
            .await
            .map_err(|e| format!("GET {path} from {}: {e}", self.name))?;
        Ok(Self::read(reply).await?.1)
    }

    async fn read(reply: reqwest::Response) -> Result<(u16, Value), String> {
        let status = reply.status().as_u16();
        let text = reply.text().await.map_err(|e| e.to_string())?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, body))
    }

    pub fn signal(&self, signal: Signal) {
        self.process.signal(signal);
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    pub async fn wait_exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        must(self.process.wait_exit(&self.name, bound).await)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}
