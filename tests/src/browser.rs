//! Headless Chromium driven over the DevTools protocol (CDP), for tests of the web console.
//!
//! [`Browser::launch`] starts Chromium on a fresh profile in its own process group (killed whole
//! when dropped), waits for it to write its DevTools port (`--remote-debugging-port=0`, so no
//! port can be taken by someone else in between), finds the page target in `/json/list` and
//! connects to it over a WebSocket. [`Browser::evaluate`] runs JavaScript in the page and returns
//! its value; [`Browser::screenshot_png`] captures it. Every wait is bounded.
//!
//! The background-networking flags matter on a closed network: without them Chromium's own
//! update and sync connections fail and it refuses the page's connections too.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Overrides where Chromium is looked for.
pub const CHROMIUM_ENV: &str = "LEASEHOLD_CHROMIUM";
/// Bound on Chromium starting and its page target appearing.
const LAUNCH_BOUND: Duration = Duration::from_secs(30);
/// Bound on one DevTools call (a screenshot of a long page included).
const CALL_BOUND: Duration = Duration::from_secs(30);

/// The Chromium binary: `$LEASEHOLD_CHROMIUM`, Debian's `/usr/bin/chromium`, or `chromium` /
/// `chromium-browser` on the `PATH`.
pub fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(CHROMIUM_ENV) {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let debian = PathBuf::from("/usr/bin/chromium");
    if debian.is_file() {
        return Some(debian);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .flat_map(|dir| [dir.join("chromium"), dir.join("chromium-browser")])
        .find(|candidate| candidate.is_file())
}

/// The Chromium process group, killed when dropped.
#[derive(Debug)]
struct ProcessGroup(Child);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // Its own group (process_group(0)): the renderer and helper processes go with it.
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// One headless Chromium showing one page.
#[derive(Debug)]
pub struct Browser {
    page: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    log_path: PathBuf,
    // Dropped after the socket, in this order: the processes, then their profile directory.
    process: ProcessGroup,
    _profile: TempDir,
}

impl Browser {
    /// Starts `program` showing `url` in a `width` × `height` window; its stderr goes to
    /// `log_dir/chromium.log`.
    pub async fn launch(
        program: &Path,
        url: &str,
        (width, height): (u32, u32),
        log_dir: &Path,
    ) -> Result<Self, String> {
        let profile = TempDir::new().map_err(|e| format!("profile dir: {e}"))?;
        let log_path = log_dir.join("chromium.log");
        let log = std::fs::File::create(&log_path).map_err(|e| format!("chromium log: {e}"))?;
        let child = Command::new(program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                &format!("--user-data-dir={}", profile.path().display()),
                &format!("--window-size={width},{height}"),
                url,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("start {}: {e}", program.display()))?;
        let process = ProcessGroup(child);
        let deadline = Instant::now() + LAUNCH_BOUND;
        let port = devtools_port(profile.path(), deadline).await?;
        let socket_url = page_socket(port, url, deadline).await?;
        let (page, _) = tokio::time::timeout_at(
            deadline.into(),
            tokio_tungstenite::connect_async(socket_url.as_str()),
        )
        .await
        .map_err(|_| "connecting to the page target timed out".to_string())?
        .map_err(|e| format!("connect {socket_url}: {e}"))?;
        Ok(Self {
            page,
            next_id: 1,
            log_path,
            process,
            _profile: profile,
        })
    }

    /// Chromium's stderr so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether Chromium is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.process.0.try_wait(), Ok(None))
    }

    /// Sends one DevTools command and returns its `result`, within [`CALL_BOUND`].
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({ "id": id, "method": method, "params": params });
        let deadline = Instant::now() + CALL_BOUND;
        tokio::time::timeout_at(deadline.into(), async {
            self.page
                .send(Message::text(request.to_string()))
                .await
                .map_err(|e| format!("{method}: send: {e}"))?;
            // Events in between (none are enabled, but some arrive anyway) are skipped.
            loop {
                let message = self
                    .page
                    .next()
                    .await
                    .ok_or_else(|| format!("{method}: the page connection closed"))?
                    .map_err(|e| format!("{method}: receive: {e}"))?;
                let Message::Text(text) = message else {
                    continue;
                };
                let reply: Value = serde_json::from_str(text.as_str())
                    .map_err(|e| format!("{method}: bad reply: {e}"))?;
                if reply["id"].as_u64() != Some(id) {
                    continue;
                }
                if let Some(error) = reply.get("error") {
                    return Err(format!("{method}: {error}"));
                }
                return Ok(reply["result"].clone());
            }
        })
        .await
        .map_err(|_| format!("{method}: no answer within {CALL_BOUND:?}"))?
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value as JSON;
    /// a thrown exception is an error.
    pub async fn evaluate(&mut self, expression: &str) -> Result<Value, String> {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await?;
        if let Some(details) = result.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or_else(|| details["text"].as_str())
                .unwrap_or("exception");
            return Err(format!("evaluating {expression:?}: {text}"));
        }
        Ok(result["result"]
            .get("value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// Makes the page's viewport `width` × `height` CSS pixels (a narrow window, say).
    pub async fn set_viewport(&mut self, width: u32, height: u32) -> Result<(), String> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await
        .map(drop)
    }

    /// Presses and releases `key` (a DOM key name such as `Tab` or `ArrowRight`, with its
    /// Windows virtual key code), as a keyboard would, to the focused element.
    pub async fn press_key(&mut self, key: &str, key_code: u32) -> Result<(), String> {
        // Headless windows are never focused; without this the page sees no focus changes.
        self.call(
            "Emulation.setFocusEmulationEnabled",
            json!({ "enabled": true }),
        )
        .await?;
        for kind in ["rawKeyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({ "type": kind, "key": key, "code": key, "windowsVirtualKeyCode": key_code }),
            )
            .await?;
        }
        Ok(())
    }

    /// Moves the mouse pointer to (`x`, `y`) CSS pixels of the viewport.
    pub async fn move_mouse(&mut self, x: f64, y: f64) -> Result<(), String> {
        self.call(
            "Input.dispatchMouseEvent",
            json!({ "type": "mouseMoved", "x": x, "y": y }),
        )
        .await
        .map(drop)
    }

    /// Clicks the left mouse button at (`x`, `y`) CSS pixels of the viewport, as a person would:
    /// the pointer moves there, presses and releases.
    pub async fn click(&mut self, x: f64, y: f64) -> Result<(), String> {
        self.move_mouse(x, y).await?;
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            )
            .await?;
        }
        Ok(())
    }

    /// Waits until the page has drawn two more frames (after a resize, say).
    pub async fn next_frames(&mut self) -> Result<(), String> {
        self.evaluate(
            "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))",
        )
        .await
        .map(drop)
    }

    /// A PNG of the viewport (for the whole page, first make the viewport as tall as it).
    pub async fn screenshot_png(&mut self) -> Result<Vec<u8>, String> {
        let result = self
            .call("Page.captureScreenshot", json!({ "format": "png" }))
            .await?;
        let data = result["data"]
            .as_str()
            .ok_or_else(|| format!("screenshot without data: {result}"))?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("screenshot data: {e}"))
    }
}

/// The port Chromium writes to `DevToolsActivePort` in its profile once it listens.
async fn devtools_port(profile: &Path, deadline: Instant) -> Result<u16, String> {
    let file = profile.join("DevToolsActivePort");
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if let Some(port) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
                return Ok(port);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "Chromium wrote no {} within {LAUNCH_BOUND:?}",
        file.display()
    ))
}

/// The WebSocket URL of the page target showing `url`, from `/json/list`.
async fn page_socket(port: u16, url: &str, deadline: Instant) -> Result<String, String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    let list = format!("http://127.0.0.1:{port}/json/list");
    let mut last = String::from("never asked");
    while Instant::now() < deadline {
        match http.get(&list).send().await {
            Ok(reply) => match reply.json::<Vec<Value>>().await {
                Ok(targets) => {
                    let page = targets.iter().find(|t| {
                        t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url))
                    });
                    match page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
                        Some(socket) => return Ok(socket.to_string()),
                        None => last = format!("targets: {targets:?}"),
                    }
                }
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "no page target for {url} within {LAUNCH_BOUND:?}: {last}"
    ))
}
