//! The web console (`/ui/`, manager/src/http/ui.rs) in a real browser: headless Chromium driven
//! over the DevTools protocol ([`leasehold_tests::browser`]) against real manager and executor
//! processes. Everything is read from the page's DOM (`[data-shard]` cells with `data-owner`,
//! `[data-executor]` rows with `data-name`) and compared with the API.
//!
//! 1. Three managers, three executors, 64 shards. The page lists every executor by name and
//!    shows every shard with the owner `GET /v1/shards` names. Then, without a reload:
//!    - an executor is SIGKILLed: within lease + tick + 5 s no shard is shown as its, its row is
//!      gone, the feed says it was reaped, and the map matches the API again;
//!    - the leader (a manager the page is not served from) is killed: the page names a new
//!      leader, shows the old one unreachable and keeps following the state;
//!    - the page's own manager is killed: the "disconnected, retrying" banner shows; once the
//!      manager is back the banner goes and the map matches the API again.
//!
//!    Before that, the operator views (P17.4), changed through the page's own manager: the
//!    header's maintenance badge comes and goes, a pinned shard's details name its pin, and
//!    "audit log?" lists the operator actions newest first, as `GET /v1/audit` has them; the
//!    audit log's button is the tab stop after the map.
//!
//!    Throughout, the page's own counters show one watch request at a time, not a storm, and the
//!    members asked for at most about once a second.
//!
//!    Last, namespaces (PROTOCOL P18.1): `orders` is created with 12 shards and an executor of
//!    its own (labelled `zone=zone-o`). The header's selector lists both namespaces with their
//!    shard and executor counts; choosing `orders` shows its 12 shards, all its executor's, and
//!    only that executor, with its zone, and puts `#namespace=orders` in the address; a reload of
//!    that address opens on `orders`, an address edited in place is followed, and an address
//!    naming a namespace that does not exist shows `default` with a notice saying so.
//! 2. One manager with 65 536 shards and two executors: every cell is rendered, the map matches
//!    the API and the page answers a trivial evaluation promptly, also coloured by load (every
//!    cell then shows the leader's load of 0). The first render time is printed.
//! 3. Coloured by load (§15): three managers, two executors and `/v1/work` traffic on three
//!    shards, one of them hot. Switched to "load", the page served by a follower shows every
//!    cell's `data-load` and `data-hot` as the leader's `/v1/shards?consistent=true` has them,
//!    the busy shards brighter than every idle one (luminance of the computed colours), hot
//!    shards ringed, and each executor's capacity and utilisation as the leader's
//!    `/v1/executors?consistent=true`. Switched back, every cell has its owner's colour again and
//!    the load requests stop. With no leader to ask, the panel says no load is known.
//! 4. One manager, four executors: until the first state arrives (every watch request blocked)
//!    the executors table says it is waiting for it; each executor's colour, in the table and on
//!    the map, is the one its id hashes to, the same after a reload.
//!
//! Screenshots are written to the test's temporary directory; with `LEASEHOLD_SAVE_SCREENSHOTS=1`
//! also to `docs/img/` (`console.png` at 1280 × 900, `console-narrow.png` at 420 px wide,
//! `console-load.png` at 1280 × 900).
//!
//! Chromium is Debian's `chromium` package. Without it this test says why and passes, unless
//! `LEASEHOLD_REQUIRE_CHROMIUM=1` (set by `.ci/run`) makes a missing browser a failure.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use leasehold_api::ctl::table::human_load;
use leasehold_api::wire::{
    CreateNamespaceRequest, ExecutorView, ShardView, REPLICAS_SCHEMA, RESHARD_SCHEMA,
};
use leasehold_tests::browser::{self, Browser};
use leasehold_tests::executor::{ExecutorProcess, ExecutorSpec};
use leasehold_tests::{one_cluster_at_a_time, poll_until, Cluster, ClusterOptions};
use serde::Deserialize;

const SHARDS: u32 = 64;
const LEASE_MS: u64 = 4_000;
/// The leader's tick (P3.8: lease / 3).
const TICK_MS: u64 = LEASE_MS / 3;
const LEADER_BOUND: Duration = Duration::from_secs(20);
const SETTLE_BOUND: Duration = Duration::from_secs(30);
/// How soon the page must show a killed executor's shards gone (from the kill): lease + tick,
/// plus 5 s for the page to hear of it and redraw.
const REHOME_SHOWN_BOUND: Duration = Duration::from_millis(LEASE_MS + TICK_MS + 5_000);
const BANNER_BOUND: Duration = Duration::from_secs(10);
const WINDOW: (u32, u32) = (1280, 900);
const NARROW_WIDTH: u32 = 420;

const BIG_SHARDS: u32 = 65_536;
const BIG_RENDER_BOUND: Duration = Duration::from_secs(60);
/// A trivial evaluation must come back within this while the page follows 65 536 shards.
const RESPONSIVE_BOUND: Duration = Duration::from_secs(3);

/// The load test's lease. The leader takes in reported loads once a step (a third of the lease),
/// and the test compares the page with the leader only when the leader's loads were the same
/// before and after the page asked: a long step leaves most tries between two steps.
const LOAD_LEASE: &str = "15s";
/// Loads reach the leader: a renewal with traffic, a second one to confirm the jump (a change
/// by more than a factor of two is taken at once), and the step after, each a third of the
/// lease; generous for a loaded machine.
const LOADS_BOUND: Duration = Duration::from_secs(120);
/// One round of the page's load requests, from the moment it is due (console.js LOAD_GAP_MS
/// is 2 s).
const LOAD_ROUND_BOUND: Duration = Duration::from_secs(15);
/// Work requests for the hot shard per round of traffic; the two warm shards get one each, so
/// the hot one carries two thirds of the load, more than the fair share of either of the two
/// executors (P15.4).
const HOT_WEIGHT: usize = 4;
const WORK_INTERVAL: Duration = Duration::from_millis(50);

/// Chromium, or `None` after saying why the test is skipped.
fn chromium_or_skip() -> Option<PathBuf> {
    if let Some(path) = browser::chromium() {
        return Some(path);
    }
    let required = std::env::var("LEASEHOLD_REQUIRE_CHROMIUM").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "LEASEHOLD_REQUIRE_CHROMIUM=1 but chromium is not installed (apt-get install chromium, \
         or set {} to its path)",
        browser::CHROMIUM_ENV
    );
    eprintln!(
        "SKIPPED: chromium is not installed (apt-get install chromium, or set {} to its path; \
         .ci/run does)",
        browser::CHROMIUM_ENV
    );
    None
}

/// What the page shows, read from its DOM and its counters (`window.__console`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    executors: Vec<PageExecutor>,
    /// `[data-shard]` cells in document order: (shard, owner or "").
    owners: Vec<(u32, String)>,
    /// `data-leader-id` of the header's leader, "" when none.
    leader: String,
    /// (node id, state) per members row.
    members: Vec<(u64, String)>,
    revision: Option<u64>,
    /// The "disconnected, retrying" banner is shown.
    banner: bool,
    watch_requests: u64,
    members_requests: u64,
    feed: Vec<String>,
    /// Set by the test after the first load: still there means the page was never reloaded.
    marker: bool,
}

#[derive(Debug, Deserialize)]
struct PageExecutor {
    id: String,
    name: String,
    /// The visible text of its name cell.
    text: String,
}

const READ_PAGE: &str = r#"(() => ({
  executors: Array.from(document.querySelectorAll('[data-executor]'), (row) => ({
    id: row.dataset.executor, name: row.dataset.name, text: row.querySelector('td').textContent })),
  owners: Array.from(document.querySelectorAll('[data-shard]'), (cell) =>
    [Number(cell.dataset.shard), cell.dataset.owner]),
  leader: document.getElementById('leader').dataset.leaderId,
  members: Array.from(document.querySelectorAll('#members tr[data-node]'), (row) =>
    [Number(row.dataset.node), row.dataset.state]),
  revision: window.__console.revision,
  banner: !document.getElementById('banner').hidden,
  watchRequests: window.__console.watchRequests,
  membersRequests: window.__console.membersRequests,
  feed: Array.from(document.querySelectorAll('#changes li'), (li) => li.textContent),
  marker: window.__testMarker === true,
}))()"#;

async fn read_page(browser: &mut Browser) -> Result<Page, String> {
    let value = browser.evaluate(READ_PAGE).await?;
    serde_json::from_value(value).map_err(|e| format!("page view: {e}"))
}

async fn get<T: serde::de::DeserializeOwned>(
    cluster: &Cluster,
    id: u64,
    path: &str,
) -> Result<T, String> {
    let reply = cluster
        .http
        .get(format!("{}{path}", cluster.url(id)))
        .send()
        .await
        .map_err(|e| format!("{path} on {id}: {e}"))?;
    reply
        .json()
        .await
        .map_err(|e| format!("{path} on {id}: {e}"))
}

/// Every shard's owner ("" when unowned) as manager `id` has it, ascending.
async fn api_owners(cluster: &Cluster, id: u64) -> Result<Vec<(u32, String)>, String> {
    let shards: Vec<ShardView> = get(cluster, id, "/v1/shards").await?;
    Ok(shards
        .into_iter()
        .map(|s| (s.shard, s.owner.unwrap_or_default()))
        .collect())
}

/// The page's whole map equals the API's, cell for cell.
fn same_map(page: &Page, api: &[(u32, String)]) -> Result<(), String> {
    if page.owners == api {
        return Ok(());
    }
    let differing: Vec<_> = page
        .owners
        .iter()
        .zip(api)
        .filter(|(p, a)| p != a)
        .take(5)
        .collect();
    Err(format!(
        "page shows {} cells, the API {} shards; first differences (page, api): {differing:?}",
        page.owners.len(),
        api.len()
    ))
}

/// Saves a screenshot in `dir`, and when `for_docs` and LEASEHOLD_SAVE_SCREENSHOTS=1 in docs/img/.
fn save_screenshot(dir: &Path, name: &str, png: &[u8], for_docs: bool) {
    let path = dir.join(name);
    std::fs::write(&path, png).expect("write screenshot");
    eprintln!("screenshot: {}", path.display());
    if for_docs && std::env::var("LEASEHOLD_SAVE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ lives in the repository")
            .join("docs/img");
        std::fs::create_dir_all(&docs).expect("docs/img");
        std::fs::write(docs.join(name), png).expect("write docs screenshot");
        eprintln!("screenshot saved to {}", docs.join(name).display());
    }
}

/// The whole page at `width` CSS pixels: the viewport is made as tall as the page's content
/// (at least a few rows, at most ten windows), then captured.
async fn page_screenshot(browser: &mut Browser, width: u32) -> Vec<u8> {
    browser
        .set_viewport(width, WINDOW.1)
        .await
        .expect("viewport");
    browser.next_frames().await.expect("a frame");
    let height = browser
        .evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)")
        .await
        .expect("page height")
        .as_u64()
        .unwrap_or(u64::from(WINDOW.1))
        .clamp(200, 10 * u64::from(WINDOW.1));
    browser
        .set_viewport(width, height as u32)
        .await
        .expect("viewport");
    browser.next_frames().await.expect("a frame");
    browser.screenshot_png().await.expect("screenshot")
}

/// Runs `ask` in the page, then waits for the answer the page shows in element `output`
/// (empty, or "… asking the leader…", until it comes).
async fn answer_shown(browser: &mut Browser, ask: &str, output: &str) -> String {
    browser.evaluate(ask).await.expect("ask");
    let read = format!("document.getElementById('{output}').textContent");
    let browser = tokio::sync::Mutex::new(browser);
    poll_until(
        &format!("the answer in #{output}"),
        Duration::from_secs(15),
        || async {
            let shown = browser.lock().await.evaluate(&read).await?;
            let shown = shown.as_str().unwrap_or_default().to_owned();
            if shown.is_empty() || shown.ends_with("asking the leader…") {
                Err(format!("shown: {shown:?}"))
            } else {
                Ok(shown)
            }
        },
    )
    .await
}

/// Asks the page's safe-to-stop form about `subject` and returns the verdict it shows.
async fn ask_safe_to_stop(browser: &mut Browser, subject: &str) -> String {
    let ask = format!(
        "document.getElementById('stop-check-subject').value = {subject:?}; \
         document.getElementById('stop-check').requestSubmit(); true"
    );
    answer_shown(browser, &ask, "stop-check-verdict").await
}

/// P17.4: the console asks the leader whether an executor, then a manager, is safe to stop,
/// and shows the verdict with its reason: with three executors and three voters up, both are;
/// then the next plan, which for a settled cluster moves nothing.
async fn check_safe_to_stop(browser: &mut Browser, cluster: &Cluster, id: u64) {
    let registered: Vec<ExecutorView> = get(cluster, id, "/v1/executors").await.expect("executors");
    let executor = &registered.first().expect("an executor").executor_id;
    let shown = ask_safe_to_stop(browser, executor).await;
    assert!(
        shown.starts_with(&format!("executor {executor}: safe to stop: ")),
        "{shown}"
    );
    let shown = ask_safe_to_stop(browser, &format!("manager {id}")).await;
    assert!(
        shown.starts_with(&format!("manager {id}: safe to stop: ")),
        "{shown}"
    );
    let ask = "document.getElementById('plan-ask').click(); true";
    let shown = answer_shown(browser, ask, "plan-summary").await;
    assert!(
        shown.starts_with("nothing would move (revision "),
        "{shown}"
    );
}

/// A shard's owner and epoch show on keyboard focus (Tab reaches the map, the arrow keys move
/// along it) and on hover, in the cell's title and the detail line.
async fn check_shard_details(browser: &mut Browser, cluster: &Cluster, id: u64) {
    let shards: Vec<ShardView> = get(cluster, id, "/v1/shards").await.expect("shards");
    let executors: Vec<ExecutorView> = get(cluster, id, "/v1/executors").await.expect("executors");
    let expected = |shard: u32| {
        let view = &shards[shard as usize];
        let owner = view.owner.clone().unwrap_or_default();
        let name = executors
            .iter()
            .find(|e| e.executor_id == owner)
            .and_then(|e| e.name.clone())
            .unwrap_or_default();
        format!(
            "shard {shard} · epoch {} · owner {name} ({owner})",
            view.epoch
        )
    };
    const SHOWN: &str = "[document.activeElement.dataset.shard ?? null, \
        document.activeElement.title, document.getElementById('shard-detail').textContent]";

    // The page's tab stops are the namespace selector, the safe-to-stop form (its field and
    // button), the next-plan button, the map's colour toggle (its two buttons), then the map,
    // where Tab lands on the first cell.
    for stop in [
        "namespace",
        "stop-check-subject",
        "stop-check-ask",
        "plan-ask",
        "colour-owner",
        "colour-load",
    ] {
        browser.press_key("Tab", 9).await.expect("Tab");
        let focused = browser
            .evaluate("[document.activeElement.id, document.activeElement.outerHTML.slice(0, 200)]")
            .await
            .expect("focused element");
        assert_eq!(
            focused[0], stop,
            "the selector, the form and the colour toggle come before the map; focused: {}",
            focused[1]
        );
    }
    browser.press_key("Tab", 9).await.expect("Tab");
    browser
        .press_key("ArrowRight", 39)
        .await
        .expect("ArrowRight");
    let shown = browser.evaluate(SHOWN).await.expect("focused cell");
    assert_eq!(shown[0], "1", "ArrowRight moves to shard 1: {shown}");
    assert_eq!(shown[1], expected(1), "the focused cell's title");
    assert_eq!(shown[2], expected(1), "the detail line follows the focus");

    let center = browser
        .evaluate(
            "(() => { const r = document.querySelector('[data-shard=\"7\"]').getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; })()",
        )
        .await
        .expect("cell position");
    browser
        .move_mouse(
            center[0].as_f64().unwrap_or_default(),
            center[1].as_f64().unwrap_or_default(),
        )
        .await
        .expect("hover");
    let shown = browser
        .evaluate(
            "[document.querySelector('[data-shard=\"7\"]').title, \
             document.getElementById('shard-detail').textContent]",
        )
        .await
        .expect("hovered cell");
    assert_eq!(shown[0], expected(7), "the hovered cell's title");
    assert_eq!(shown[1], expected(7), "the detail line follows the pointer");

    // After the map (the focus is still on its cell), the audit log's button (P17.4).
    browser.press_key("Tab", 9).await.expect("Tab");
    let focused = browser
        .evaluate("[document.activeElement.id, document.activeElement.outerHTML.slice(0, 200)]")
        .await
        .expect("focused element");
    assert_eq!(focused[0], "audit-ask", "after the map: {}", focused[1]);
}

/// Sends `method path` with a JSON `body` to manager `id` and expects a 2xx.
async fn send_json(
    cluster: &Cluster,
    id: u64,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) {
    let mut request = cluster
        .http
        .request(method.clone(), format!("{}{path}", cluster.url(id)));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let reply = request.send().await.expect("send");
    let status = reply.status();
    let text = reply.text().await.unwrap_or_default();
    assert!(status.is_success(), "{method} {path}: {status} {text}");
}

/// Polls the page until `script` evaluates to `want`.
async fn wait_for_page(browser: &mut Browser, what: &str, script: &str, want: serde_json::Value) {
    let browser = tokio::sync::Mutex::new(browser);
    poll_until(what, SETTLE_BOUND, || async {
        let shown = browser.lock().await.evaluate(script).await?;
        (shown == want)
            .then_some(())
            .ok_or_else(|| format!("shown: {shown}"))
    })
    .await;
}

/// P17.4: the header shows a badge while maintenance mode is on, a shard's details name its
/// pin, and "audit log?" lists the operator actions newest first. Everything is changed through
/// the page's own manager (a follower, which forwards to the leader).
async fn check_operator_views(browser: &mut Browser, cluster: &Cluster, id: u64) {
    const BADGE: &str = "[document.getElementById('maintenance').dataset.on, \
        document.getElementById('maintenance').textContent, \
        getComputedStyle(document.getElementById('maintenance')).display !== 'none']";
    let put = reqwest::Method::PUT;
    send_json(
        cluster,
        id,
        put.clone(),
        "/v1/cluster/maintenance",
        Some(serde_json::json!({"on": true})),
    )
    .await;
    wait_for_page(
        browser,
        "the maintenance badge",
        BADGE,
        serde_json::json!(["true", "maintenance: placement frozen", true]),
    )
    .await;
    send_json(
        cluster,
        id,
        put.clone(),
        "/v1/cluster/maintenance",
        Some(serde_json::json!({"on": false})),
    )
    .await;
    wait_for_page(
        browser,
        "the badge to go",
        BADGE,
        serde_json::json!(["false", "", false]),
    )
    .await;

    // Pinned to the executor that owns it already, so nothing moves.
    let shards: Vec<ShardView> = get(cluster, id, "/v1/shards").await.expect("shards");
    let owner = shards[5].owner.clone().expect("shard 5 is owned");
    send_json(
        cluster,
        id,
        put,
        "/v1/shards/5/pin",
        Some(serde_json::json!({"executor_id": owner})),
    )
    .await;
    wait_for_page(
        browser,
        "shard 5 marked pinned",
        "document.querySelector('[data-shard=\"5\"]').dataset.pinned ?? null",
        serde_json::json!(owner),
    )
    .await;
    let detail = browser
        .evaluate(
            "document.querySelector('[data-shard=\"5\"]').dispatchEvent(new MouseEvent('mouseover', { bubbles: true })); \
             document.getElementById('shard-detail').textContent",
        )
        .await
        .expect("shard 5's details");
    let detail = detail.as_str().unwrap_or_default();
    assert!(
        detail.starts_with("shard 5 · ")
            && detail.contains(" · pinned to ")
            && detail.ends_with(&format!("({owner})")),
        "{detail}"
    );
    send_json(
        cluster,
        id,
        reqwest::Method::DELETE,
        "/v1/shards/5/pin",
        None,
    )
    .await;
    wait_for_page(
        browser,
        "shard 5 no longer pinned",
        "document.querySelector('[data-shard=\"5\"]').dataset.pinned ?? null",
        serde_json::Value::Null,
    )
    .await;

    // The audit log, newest first: the unpin, the pin, maintenance off and on.
    let records: Vec<serde_json::Value> = get(cluster, id, "/v1/audit").await.expect("audit");
    let ask = "document.getElementById('audit-ask').click(); true";
    let shown = answer_shown(browser, ask, "audit-summary").await;
    assert_eq!(
        shown,
        format!("{} operator actions, newest first", records.len()),
        "{records:?}"
    );
    let rows = browser
        .evaluate(
            "Array.from(document.querySelectorAll('#audit tbody tr'), (row) => row.dataset.action)",
        )
        .await
        .expect("audit rows");
    let rows: Vec<String> = serde_json::from_value(rows).expect("actions");
    assert_eq!(rows.len(), records.len(), "{rows:?}");
    assert_eq!(
        rows[..4],
        ["unpin", "pin", "maintenance_off", "maintenance_on"],
        "{rows:?}"
    );
}

fn options() -> ClusterOptions {
    ClusterOptions {
        lease: format!("{LEASE_MS}ms"),
        shard_count: SHARDS,
        ..ClusterOptions::default()
    }
}

/// Waits until the page shows the disconnected banner (`shown`) or has reconnected (not).
async fn wait_for_banner(browser: &mut Browser, shown: bool, bound: Duration) {
    let what = if shown {
        "the disconnected banner"
    } else {
        "the page to reconnect"
    };
    let browser = tokio::sync::Mutex::new(browser);
    poll_until(what, bound, || async {
        let page = read_page(&mut **browser.lock().await).await?;
        (page.banner == shown)
            .then_some(())
            .ok_or_else(|| format!("banner shown: {}", page.banner))
    })
    .await;
}

/// Waits until the page lists exactly `names` and its map equals manager `id`'s with every shard
/// owned and no handoff in flight.
async fn wait_settled(browser: &mut Browser, cluster: &Cluster, id: u64, names: &[&str]) -> Page {
    let expected: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    let browser = tokio::sync::Mutex::new(browser);
    poll_until(
        "the page to list every executor and match the settled map",
        SETTLE_BOUND,
        || async {
            let shards: Vec<ShardView> = get(cluster, id, "/v1/shards").await?;
            if shards
                .iter()
                .any(|s| s.owner.is_none() || s.handoff.is_some())
            {
                return Err("the API's map is not settled yet".to_string());
            }
            let api: Vec<(u32, String)> = shards
                .into_iter()
                .map(|s| (s.shard, s.owner.unwrap_or_default()))
                .collect();
            let page = read_page(&mut **browser.lock().await).await?;
            let shown: BTreeSet<String> = page.executors.iter().map(|e| e.name.clone()).collect();
            if shown != expected {
                return Err(format!("page lists {shown:?}"));
            }
            if let Some(e) = page.executors.iter().find(|e| e.text != e.name) {
                return Err(format!("row {} shows {:?}, not its name", e.id, e.text));
            }
            same_map(&page, &api)?;
            Ok(page)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_follows_executors_shards_and_managers_live() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(options());
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let names = ["orders-1", "orders-2", "orders-3"];
    let mut executors: Vec<ExecutorProcess> = names
        .iter()
        .map(|name| ExecutorProcess::start(&cluster, name))
        .collect();
    // The page is served by a follower, so the leader can be killed under it.
    let page_node = *cluster
        .managers
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    let url = format!("{}/ui/", cluster.url(page_node));
    let mut browser = Browser::launch(&chromium, &url, WINDOW, cluster.dir.path())
        .await
        .unwrap_or_else(|e| panic!("chromium: {e}"));
    let loaded_at = Instant::now();

    let page = wait_settled(&mut browser, &cluster, page_node, &names).await;
    assert_eq!(page.owners.len(), SHARDS as usize);
    assert!(!page.banner, "no banner while connected");
    browser
        .evaluate("window.__testMarker = true")
        .await
        .expect("set the marker");
    check_shard_details(&mut browser, &cluster, page_node).await;
    check_safe_to_stop(&mut browser, &cluster, page_node).await;
    check_operator_views(&mut browser, &cluster, page_node).await;

    // 1. An executor is SIGKILLed: its shards leave the page within lease + tick + 5 s.
    let registered: Vec<ExecutorView> = get(&cluster, page_node, "/v1/executors")
        .await
        .expect("executors");
    let victim = registered
        .iter()
        .find(|e| e.name.as_deref() == Some("orders-2"))
        .expect("orders-2 registered")
        .executor_id
        .clone();
    executors[1].kill();
    let killed_at = Instant::now();
    {
        let browser = &tokio::sync::Mutex::new(&mut browser);
        let (cluster, victim) = (&cluster, &victim);
        poll_until(
            "the page to show none of the killed executor's shards, matching the API",
            REHOME_SHOWN_BOUND,
            || async move {
                let page = read_page(&mut **browser.lock().await).await?;
                if let Some((shard, _)) = page.owners.iter().find(|(_, o)| o == victim) {
                    return Err(format!("shard {shard} still shown as {victim}'s"));
                }
                if page.executors.iter().any(|e| &e.id == victim) {
                    return Err(format!("{victim} still listed"));
                }
                same_map(&page, &api_owners(cluster, page_node).await?)
            },
        )
        .await;
    }
    eprintln!(
        "the page showed {victim}'s shards gone {:?} after the kill",
        killed_at.elapsed()
    );
    let page = read_page(&mut browser).await.expect("page");
    assert!(page.marker, "the page was not reloaded");
    assert!(
        page.feed
            .iter()
            .any(|line| line.contains("orders-2") && line.contains("reaped")),
        "the feed says orders-2 was reaped: {:#?}",
        page.feed
    );
    // A replacement joins while the managers are put through their paces below.
    executors.push(ExecutorProcess::start(&cluster, "orders-4"));

    // 2. The leader is killed: the page names the new one and keeps following.
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    if leader == page_node {
        // Leadership moved to the page's manager on its own; step 3 kills that one instead.
        eprintln!("the page's manager {page_node} leads now: the leader kill is step 3's");
    } else {
        let before = read_page(&mut browser).await.expect("page").revision;
        cluster.manager(leader).kill();
        let page = {
            let browser = tokio::sync::Mutex::new(&mut browser);
            poll_until(
                "the page to name a new leader and show the old one unreachable",
                LEADER_BOUND,
                || async {
                    let page = read_page(&mut **browser.lock().await).await?;
                    let named: Option<u64> = page.leader.parse().ok();
                    let old_state = page.members.iter().find(|(id, _)| *id == leader);
                    match (named, old_state) {
                        (Some(new), Some((_, state)))
                            if new != leader
                                && state == "unreachable"
                                && page.revision > before =>
                        {
                            Ok(page)
                        }
                        _ => Err(format!(
                            "leader {:?}, members {:?}, revision {:?} (before {before:?})",
                            page.leader, page.members, page.revision
                        )),
                    }
                },
            )
            .await
        };
        assert!(
            page.feed.iter().any(|line| line.contains("leader")),
            "the feed notes the leader change: {:#?}",
            page.feed
        );
        cluster.manager(leader).start();
    }

    // 3. The page's own manager is killed: the banner shows, and once it is back the page
    // follows the state again.
    cluster.wait_for_leader(LEADER_BOUND).await;
    cluster.manager(page_node).kill();
    wait_for_banner(&mut browser, true, BANNER_BOUND).await;
    cluster.manager(page_node).start();
    cluster.wait_for_leader(LEADER_BOUND).await;
    // The map may be what it was before the kill, so a settled map alone does not show that the
    // page reconnected: its next try comes after a backoff of up to 5 s.
    wait_for_banner(&mut browser, false, SETTLE_BOUND).await;
    let page = wait_settled(
        &mut browser,
        &cluster,
        page_node,
        &["orders-1", "orders-3", "orders-4"],
    )
    .await;
    assert!(!page.banner, "the banner is gone once reconnected");
    assert!(page.marker, "the page was not reloaded");
    assert!(
        page.feed.iter().any(|line| line.contains("reconnected")),
        "{:#?}",
        page.feed
    );
    // Every member answers again before the picture is taken.
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until("every member to answer the page", LEADER_BOUND, || async {
            let page = read_page(&mut **browser.lock().await).await?;
            (page.members.len() == 3
                && page
                    .members
                    .iter()
                    .all(|(_, s)| s == "leader" || s == "follower"))
            .then_some(())
            .ok_or_else(|| format!("members {:?}", page.members))
        })
        .await;
    }

    // No polling storm: one blocking watch at a time, members at most about once a second.
    let elapsed_s = loaded_at.elapsed().as_secs_f64();
    let page = read_page(&mut browser).await.expect("page");
    eprintln!(
        "in {elapsed_s:.1} s the page sent {} watch and {} members requests",
        page.watch_requests, page.members_requests
    );
    assert!(
        (page.watch_requests as f64) < elapsed_s * 5.0 + 10.0,
        "watch requests: {} in {elapsed_s:.1} s",
        page.watch_requests
    );
    assert!(
        (page.members_requests as f64) < elapsed_s * 1.1 + 5.0,
        "members requests: {} in {elapsed_s:.1} s",
        page.members_requests
    );

    let png = page_screenshot(&mut browser, WINDOW.0).await;
    save_screenshot(cluster.dir.path(), "console.png", &png, true);
    // A narrow window: one column, and the page itself does not scroll sideways (wide tables
    // scroll inside their panels).
    let png = page_screenshot(&mut browser, NARROW_WIDTH).await;
    let overflow = browser
        .evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        .await
        .expect("overflow");
    assert_eq!(
        overflow.as_i64(),
        Some(0),
        "at {NARROW_WIDTH} px the page does not scroll sideways"
    );
    save_screenshot(cluster.dir.path(), "console-narrow.png", &png, true);

    browser
        .set_viewport(WINDOW.0, WINDOW.1)
        .await
        .expect("viewport");
    let _orders_executor = check_namespaces(&mut browser, &mut cluster, page_node).await;
    let _replicated_executors = check_secondaries(&mut browser, &cluster, page_node).await;
    check_generation(&mut browser, &cluster, page_node).await;
    assert!(browser.is_running(), "{}", browser.log());
}

/// A namespace resharded before any executor joined it (PROTOCOL §20).
const RESHARDED: &str = "resharded";

/// P20.1: the selector says a namespace's generation once it resharded, and the page maps the
/// new count of shards. `resharded` is created with 2 shards and split to 4 before any executor
/// registers into it (nothing to wait on, so the leader carries it out at its next step).
async fn check_generation(browser: &mut Browser, cluster: &Cluster, page_node: u64) {
    let client = cluster.client();
    client
        .create_namespace(&CreateNamespaceRequest {
            name: RESHARDED.to_owned(),
            shard_count: 2,
            ..CreateNamespaceRequest::default()
        })
        .await
        .expect("resharded is created");
    poll_until("the cluster version to reach 14", SETTLE_BOUND, || async {
        match cluster.cluster_info(page_node).await?.cluster_version {
            Some(version) if version >= RESHARD_SCHEMA => Ok(()),
            other => Err(format!("cluster version {other:?}")),
        }
    })
    .await;
    client
        .reshard_namespace(RESHARDED, 4)
        .await
        .expect("the split is accepted");
    browser
        .evaluate(&format!("location.hash = '#namespace={RESHARDED}'; true"))
        .await
        .expect("show resharded");
    let option = format!("{RESHARDED} · 4 shards · 0 executors · generation 1");
    wait_for_namespace_page(
        browser,
        "the selector to say resharded's generation",
        |page| {
            let texts: Vec<&str> = page.options.iter().map(|(_, text)| text.as_str()).collect();
            let others = texts
                .iter()
                .filter(|text| !text.starts_with(RESHARDED))
                .all(|text| !text.contains("generation"));
            (texts.contains(&option.as_str()) && others && page.owners.len() == 4)
                .then_some(())
                .ok_or_else(|| format!("want {option}, 4 cells and no other generation"))
        },
    )
    .await;
}

/// The namespace of two replicas per shard the console shows secondaries of (PROTOCOL §19).
const REPLICATED: &str = "replicated";
const REPLICATED_SHARDS: u32 = 4;

/// P19.1, P19.5: a shard's detail line names its secondaries, each with its executor and whether
/// it is ready, as the API has them. `replicated` is created with two replicas per shard and two
/// executors that say each secondary ready as soon as they hold it; the page is switched to it
/// and a cell focused. Returns the executors, to keep them running to the end of the test.
async fn check_secondaries(
    browser: &mut Browser,
    cluster: &Cluster,
    page_node: u64,
) -> Vec<ExecutorProcess> {
    poll_until("the cluster version to reach 13", SETTLE_BOUND, || async {
        match cluster.cluster_info(page_node).await?.cluster_version {
            Some(version) if version >= REPLICAS_SCHEMA => Ok(()),
            other => Err(format!("cluster version {other:?}")),
        }
    })
    .await;
    cluster
        .client()
        .create_namespace(&CreateNamespaceRequest {
            name: REPLICATED.to_owned(),
            shard_count: REPLICATED_SHARDS,
            replicas: Some(2),
            ..CreateNamespaceRequest::default()
        })
        .await
        .expect("replicated is created with two replicas");
    let executors: Vec<ExecutorProcess> = ["rep-1", "rep-2"]
        .iter()
        .map(|name| {
            let mut spec = ExecutorSpec::local(cluster, name);
            spec.extra_args.extend(
                ["--namespace", REPLICATED, "--secondaries-ready-when-held"]
                    .iter()
                    .map(|arg| (*arg).to_owned()),
            );
            ExecutorProcess::start_spec(cluster.dir.path(), spec)
        })
        .collect();
    let path = format!("/v1/shards?namespace={REPLICATED}");
    let names: BTreeMap<String, String> = poll_until(
        "both of replicated's executors registered",
        SETTLE_BOUND,
        || async {
            let names: BTreeMap<String, String> = get::<Vec<ExecutorView>>(
                cluster,
                page_node,
                &format!("/v1/executors?namespace={REPLICATED}"),
            )
            .await?
            .into_iter()
            .filter_map(|executor| Some((executor.executor_id, executor.name?)))
            .collect();
            (names.len() == 2)
                .then_some(names)
                .ok_or_else(|| "not both registered".to_owned())
        },
    )
    .await;
    let with_name = |id: &str| format!("{} ({id})", names.get(id).map_or("?", String::as_str));
    browser
        .evaluate(&format!("location.hash = '#namespace={REPLICATED}'; true"))
        .await
        .expect("show replicated");
    // The selector says the namespace's replicas (P19.1), and only where there are more than one.
    let replicated_option =
        format!("{REPLICATED} · {REPLICATED_SHARDS} shards · 2 executors · 2 replicas");
    wait_for_namespace_page(
        browser,
        "the selector to say replicated's replicas",
        |page| {
            let texts: Vec<&str> = page.options.iter().map(|(_, text)| text.as_str()).collect();
            let plain = texts
                .iter()
                .filter(|text| !text.starts_with(REPLICATED))
                .all(|text| !text.contains("replica"));
            (texts.contains(&replicated_option.as_str()) && plain)
                .then_some(())
                .ok_or_else(|| format!("want {replicated_option} and no other replicas"))
        },
    )
    .await;
    // Shard 1 as the API has it now, settled (a primary, no handoff, one ready secondary), and
    // as the page's detail line says it once the pointer is over its cell.
    let browser = tokio::sync::Mutex::new(browser);
    poll_until(
        "the detail line to name shard 1's ready secondary as the API does",
        SETTLE_BOUND,
        || async {
            let shards: Vec<ShardView> = get(cluster, page_node, &path).await?;
            let shard = shards.get(1).ok_or("no shard 1")?;
            let (Some(owner), None, [secondary]) =
                (&shard.owner, &shard.handoff, &shard.secondaries[..])
            else {
                return Err(format!("shard 1 not settled: {shard:?}"));
            };
            if !secondary.ready {
                return Err(format!("shard 1's secondary not ready: {shard:?}"));
            }
            let want = format!(
                "shard 1 · epoch {} · owner {} · secondaries {} ready",
                shard.epoch,
                with_name(owner),
                with_name(&secondary.executor_id)
            );
            let shown = browser
                .lock()
                .await
                .evaluate(
                    "(() => { const cell = document.querySelector('[data-shard=\"1\"]'); \
                     if (!cell || window.__console.namespace !== 'replicated') return null; \
                     cell.dispatchEvent(new MouseEvent('mouseover', { bubbles: true })); \
                     return document.getElementById('shard-detail').textContent; })()",
                )
                .await?;
            (shown.as_str() == Some(want.as_str()))
                .then_some(())
                .ok_or_else(|| format!("shown {shown}, want {want}"))
        },
    )
    .await;
    executors
}

/// The namespace created for the console's selector, with its shard count (PROTOCOL P18.1).
const ORDERS: &str = "orders";
const ORDERS_SHARDS: u32 = 12;
/// The cluster version that takes namespaces (`leasehold_api::wire::NAMESPACES_SCHEMA`).
const NAMESPACES_SCHEMA: u32 = 10;

/// The namespace selector and what the page shows of the namespace chosen.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NamespacePage {
    /// The selector's label and value, and its options: (value, text).
    label: Option<String>,
    selected: String,
    options: Vec<(String, String)>,
    /// `[data-shard]` cells in document order: (shard, owner or "").
    owners: Vec<(u32, String)>,
    /// (`data-name`, visible text of the name cell) per executor row.
    executors: Vec<(String, String)>,
    /// The header's shard count.
    shard_count: String,
    /// The page's address from its path on.
    address: String,
    /// The notice about a namespace that could not be shown, when shown.
    notice: Option<String>,
    /// The namespace the page says it shows (`window.__console.namespace`).
    shown: String,
    /// Set by the test: gone after a reload.
    marker: bool,
}

const READ_NAMESPACE_PAGE: &str = r#"(() => {
  const select = document.getElementById('namespace');
  const notice = document.getElementById('namespace-note');
  const label = document.querySelector('label[for="namespace"]');
  return {
    label: label ? label.textContent : null,
    selected: select.value,
    options: Array.from(select.options, (option) => [option.value, option.textContent]),
    owners: Array.from(document.querySelectorAll('[data-shard]'), (cell) =>
      [Number(cell.dataset.shard), cell.dataset.owner]),
    executors: Array.from(document.querySelectorAll('[data-executor]'), (row) =>
      [row.dataset.name, row.querySelector('td').textContent]),
    shardCount: document.getElementById('shard-count').textContent,
    address: location.pathname + location.search + location.hash,
    notice: notice.hidden ? null : notice.textContent,
    shown: window.__console.namespace,
    marker: window.__testMarker === true,
  };
})()"#;

/// Polls the page until `check` accepts what it shows of namespaces.
async fn wait_for_namespace_page(
    browser: &mut Browser,
    what: &str,
    check: impl Fn(&NamespacePage) -> Result<(), String>,
) -> NamespacePage {
    let browser = tokio::sync::Mutex::new(browser);
    poll_until(what, SETTLE_BOUND, || async {
        let value = browser.lock().await.evaluate(READ_NAMESPACE_PAGE).await?;
        let page: NamespacePage =
            serde_json::from_value(value).map_err(|e| format!("namespace page: {e}"))?;
        check(&page).map_err(|e| format!("{e}; page: {page:?}"))?;
        Ok(page)
    })
    .await
}

/// P18.1: `orders` is created beside `default`, with an executor of its own; the page's selector
/// lists both, shows `orders` when chosen and keeps the choice in the address, which a reload
/// opens on; an address naming an unknown namespace shows `default` with a notice. Returns the
/// `orders` executor, to keep it running to the end of the test.
async fn check_namespaces(
    browser: &mut Browser,
    cluster: &mut Cluster,
    page_node: u64,
) -> ExecutorProcess {
    let started = Instant::now();
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    poll_until("the cluster version to reach 10", SETTLE_BOUND, || async {
        match cluster.cluster_info(leader).await?.cluster_version {
            Some(version) if version >= NAMESPACES_SCHEMA => Ok(()),
            other => Err(format!("cluster version {other:?}")),
        }
    })
    .await;
    cluster
        .client()
        .create_namespace(&CreateNamespaceRequest {
            name: ORDERS.to_owned(),
            shard_count: ORDERS_SHARDS,
            lease_duration_ms: None,
            max_executors: None,
            placement: Default::default(),
            ..CreateNamespaceRequest::default()
        })
        .await
        .expect("orders is created");
    let mut spec = ExecutorSpec::local(cluster, "in-orders");
    spec.extra_args.extend(
        ["--namespace", ORDERS, "--label", "zone=zone-o"]
            .iter()
            .map(|arg| (*arg).to_owned()),
    );
    let orders_executor = ExecutorProcess::start_spec(cluster.dir.path(), spec);
    let default_names: BTreeSet<String> =
        get::<Vec<ExecutorView>>(cluster, page_node, "/v1/executors")
            .await
            .expect("default's executors")
            .into_iter()
            .filter_map(|e| e.name)
            .collect();
    let default_option = format!(
        "default · {SHARDS} shards · {} executors",
        default_names.len()
    );

    // The selector lists both namespaces, with their shard counts and executors.
    let orders_option = format!("orders · {ORDERS_SHARDS} shards · 1 executor");
    wait_for_namespace_page(browser, "the selector to list orders", |page| {
        let want = [
            ("default".to_owned(), default_option.clone()),
            (ORDERS.to_owned(), orders_option.clone()),
        ];
        (page.label.as_deref() == Some("namespace")
            && page.selected == "default"
            && page.options == want)
            .then_some(())
            .ok_or_else(|| format!("want options {want:?}"))
    })
    .await;

    // Chosen: orders' 12 shards, all its own executor's, and only that executor, with its zone.
    browser
        .evaluate(
            "(() => { const select = document.getElementById('namespace'); \
             select.value = 'orders'; select.dispatchEvent(new Event('change')); return true; })()",
        )
        .await
        .expect("choose orders");
    let orders_shown = |marker: bool| {
        move |page: &NamespacePage| -> Result<(), String> {
            let owners: BTreeSet<&str> = page.owners.iter().map(|(_, o)| o.as_str()).collect();
            let shards: Vec<u32> = page.owners.iter().map(|(shard, _)| *shard).collect();
            let in_orders = matches!(
                &page.executors[..],
                [(name, text)] if name == "in-orders" && text.contains("zone=zone-o")
            );
            if page.selected != ORDERS || page.shown != ORDERS || page.shard_count != "12" {
                return Err("orders not shown".to_owned());
            }
            if shards != (0..ORDERS_SHARDS).collect::<Vec<_>>()
                || owners.len() != 1
                || owners.contains("")
            {
                return Err("not orders' 12 shards, all of one executor".to_owned());
            }
            if !in_orders {
                return Err("not orders' executor alone, with its zone".to_owned());
            }
            if page.address != "/ui/#namespace=orders"
                || page.notice.is_some()
                || page.marker != marker
            {
                return Err("address, notice or marker".to_owned());
            }
            Ok(())
        }
    };
    let page =
        wait_for_namespace_page(browser, "the page to show orders", orders_shown(true)).await;
    let api: Vec<ShardView> = get(cluster, page_node, "/v1/shards?namespace=orders")
        .await
        .expect("orders' shards");
    let api: Vec<(u32, String)> = api
        .into_iter()
        .map(|s| (s.shard, s.owner.unwrap_or_default()))
        .collect();
    assert_eq!(page.owners, api, "the page's map of orders is the API's");

    // The address opens the page on orders: a reload of it.
    browser
        .evaluate("setTimeout(() => location.reload(), 0); true")
        .await
        .expect("reload");
    wait_for_namespace_page(
        browser,
        "the reloaded page to show orders",
        orders_shown(false),
    )
    .await;

    // The address edited in place: the page follows it without a reload.
    browser
        .evaluate("window.__testMarker = true; location.hash = '#namespace=default'; true")
        .await
        .expect("edit the address");
    wait_for_namespace_page(
        browser,
        "the page to follow the address to default",
        |page| {
            (page.selected == "default"
                && page.shown == "default"
                && page.owners.len() == SHARDS as usize
                && page.address == "/ui/"
                && page.marker)
                .then_some(())
                .ok_or_else(|| "default not shown in place".to_owned())
        },
    )
    .await;

    // An address naming a namespace that does not exist: default, with a notice, and the address
    // no longer names it.
    browser
        .evaluate("setTimeout(() => location.assign('/ui/?namespace=nosuch'), 0); true")
        .await
        .expect("open an unknown namespace");
    let page = wait_for_namespace_page(browser, "the page to fall back to default", |page| {
        let names: BTreeSet<String> = page.executors.iter().map(|(n, _)| n.clone()).collect();
        if page.marker {
            return Err("not loaded yet".to_owned());
        }
        if page.notice.as_deref()
            != Some("Namespace “nosuch” does not exist (any more): showing default instead.")
        {
            return Err("no notice".to_owned());
        }
        (page.selected == "default"
            && page.shown == "default"
            && page.owners.len() == SHARDS as usize
            && names == default_names
            && page.address == "/ui/"
            && !page.options.iter().any(|(value, _)| value == "nosuch"))
        .then_some(())
        .ok_or_else(|| "default not shown".to_owned())
    })
    .await;
    let api = api_owners(cluster, page_node)
        .await
        .expect("default's shards");
    assert_eq!(page.owners, api, "the page's map of default is the API's");
    eprintln!(
        "namespaces: created, chosen, reloaded and fallen back in {:?}",
        started.elapsed()
    );
    orders_executor
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_renders_65536_shards_and_stays_responsive() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        size: 1,
        shard_count: BIG_SHARDS,
        // Longer than the other tests': two executors renew claims for 32 768 shards each.
        lease: "10s".to_string(),
        ..ClusterOptions::default()
    });
    let node = cluster.wait_for_leader(LEADER_BOUND).await;
    let _executors: Vec<ExecutorProcess> = ["bulk-1", "bulk-2"]
        .iter()
        .map(|name| ExecutorProcess::start(&cluster, name))
        .collect();
    let url = format!("{}/ui/", cluster.url(node));
    let mut browser = Browser::launch(&chromium, &url, WINDOW, cluster.dir.path())
        .await
        .unwrap_or_else(|e| panic!("chromium: {e}"));

    let (render_ms, first_frame_ms) = {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until("all 65 536 cells rendered", BIG_RENDER_BOUND, || async {
            let value = browser
                .lock()
                .await
                .evaluate(
                    "({ cells: document.querySelectorAll('[data-shard]').length, \
                     render: window.__console.renderMs, frame: window.__console.firstFrameMs })",
                )
                .await?;
            match (
                value["cells"].as_u64(),
                value["render"].as_u64(),
                value["frame"].as_u64(),
            ) {
                (Some(cells), Some(render), Some(frame)) if cells == u64::from(BIG_SHARDS) => {
                    Ok((render, frame))
                }
                _ => Err(format!("{value}")),
            }
        })
        .await
    };
    eprintln!(
        "65 536 shards: first state parsed and built in {render_ms} ms, first frame painted \
         {first_frame_ms} ms after parsing began"
    );

    // Responsive while it follows the cluster: trivial evaluations come straight back.
    let slowest = slowest_evaluation(&mut browser).await;
    eprintln!("65 536 shards: slowest trivial evaluation {slowest:?}");

    // Coloured by load (the leader's own page: a consistent read it answers itself), every cell
    // shows the leader's load, 0 without traffic, and the page stays responsive while it polls
    // the 65 536 loads.
    click_on(&mut browser, "#colour-load").await;
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until(
            "every cell to show the leader's load of 0",
            BIG_RENDER_BOUND,
            || async {
                let value = browser
                    .lock()
                    .await
                    .evaluate(
                        "({ zero: document.querySelectorAll('[data-load=\"0\"]').length, \
                         rounds: window.__console.loadRounds, \
                         note: document.getElementById('load-note').textContent })",
                    )
                    .await?;
                let note = value["note"].as_str().unwrap_or_default();
                (value["zero"].as_u64() == Some(u64::from(BIG_SHARDS))
                    && note.starts_with("Every shard’s load is 0"))
                .then_some(())
                .ok_or_else(|| format!("{value}"))
            },
        )
        .await;
    }
    let slowest = slowest_evaluation(&mut browser).await;
    eprintln!("65 536 shards coloured by load: slowest trivial evaluation {slowest:?}");
    let png = browser.screenshot_png().await.expect("screenshot");
    save_screenshot(cluster.dir.path(), "console-65536-load.png", &png, false);
    click_on(&mut browser, "#colour-owner").await;
    let loads_left = browser
        .evaluate(
            "document.querySelectorAll('#grid [data-load], #grid [data-hot], #grid .nl, \
             #grid [class^=\"heat-\"]').length",
        )
        .await
        .expect("cells");
    assert_eq!(
        loads_left, 0,
        "coloured by owner again, no cell shows a load"
    );

    // And the map is right: cell for cell what the API says, once both executors hold shards.
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        let cluster = &cluster;
        poll_until(
            "the 65 536-cell map to match the API",
            BIG_RENDER_BOUND,
            || async {
                let api = api_owners(cluster, node).await?;
                let owners: BTreeSet<&str> = api.iter().map(|(_, o)| o.as_str()).collect();
                if owners.len() != 2 || owners.contains("") {
                    return Err(format!("the API's owners: {owners:?}"));
                }
                let shown = browser
                    .lock()
                    .await
                    .evaluate(
                        "Array.from(document.querySelectorAll('[data-shard]'), \
                     (cell) => cell.dataset.shard + '=' + cell.dataset.owner).join(',')",
                    )
                    .await?;
                let expected = api
                    .iter()
                    .map(|(shard, owner)| format!("{shard}={owner}"))
                    .collect::<Vec<_>>()
                    .join(",");
                (shown.as_str() == Some(expected.as_str()))
                    .then_some(())
                    .ok_or_else(|| "the page's map differs from the API's".to_string())
            },
        )
        .await;
    }
    let png = browser.screenshot_png().await.expect("screenshot");
    save_screenshot(cluster.dir.path(), "console-65536.png", &png, false);
}

/// Ten trivial evaluations, 300 ms apart, each answered within [`RESPONSIVE_BOUND`]; the
/// slowest's time.
async fn slowest_evaluation(browser: &mut Browser) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let started = Instant::now();
        let value = tokio::time::timeout(RESPONSIVE_BOUND, browser.evaluate("1 + 1"))
            .await
            .expect("the page answers a trivial evaluation within the bound")
            .expect("evaluate");
        assert_eq!(value, 2);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    slowest
}

/// A key for `shard` of [`SHARDS`], by `leasehold_api::shard_for_key`.
fn key_for(shard: u32) -> String {
    let count = NonZeroU32::new(SHARDS).unwrap();
    (0..)
        .map(|n| format!("key-{n}"))
        .find(|key| leasehold_api::shard_for_key(key.as_bytes(), count) == shard)
        .unwrap()
}

/// Clicks the middle of the element `selector` names, scrolled into view first.
async fn click_on(browser: &mut Browser, selector: &str) {
    let centre = browser
        .evaluate(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); \
             e.scrollIntoView({{ block: 'center' }}); const r = e.getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ))
        .await
        .unwrap_or_else(|e| panic!("{selector}: {e}"));
    browser
        .click(
            centre[0].as_f64().unwrap_or_default(),
            centre[1].as_f64().unwrap_or_default(),
        )
        .await
        .unwrap_or_else(|e| panic!("click {selector}: {e}"));
}

/// What the leader knows of loads, read through manager `id` (`?consistent=true`): per shard
/// (shard, load, hot), per executor (id, capacity, utilisation).
#[derive(Debug, PartialEq)]
struct LeaderLoads {
    shards: Vec<(u32, Option<f64>, bool)>,
    executors: Vec<(String, u32, Option<f64>)>,
}

async fn leader_loads(cluster: &Cluster, id: u64) -> Result<LeaderLoads, String> {
    let shards: Vec<ShardView> = get(cluster, id, "/v1/shards?consistent=true").await?;
    let executors: Vec<ExecutorView> = get(cluster, id, "/v1/executors?consistent=true").await?;
    Ok(LeaderLoads {
        shards: shards.iter().map(|s| (s.shard, s.load, s.hot)).collect(),
        executors: executors
            .into_iter()
            .map(|e| (e.executor_id, e.capacity, e.utilisation))
            .collect(),
    })
}

/// The map and the executors table as the page shows them, with its load counters.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadPage {
    cells: Vec<LoadCell>,
    executors: Vec<LoadRow>,
    /// `aria-pressed` of the "owner" and "load" buttons.
    pressed: (String, String),
    /// The owner legend is shown.
    owner_legend: bool,
    /// The load legend's text, when shown.
    load_legend: Option<String>,
    /// The panel's line about loads, when shown.
    note: Option<String>,
    load_requests: u64,
}

#[derive(Debug, Deserialize)]
struct LoadCell {
    shard: u32,
    owner: String,
    /// `data-load`, absent when no load is shown.
    load: Option<String>,
    /// `data-hot="true"`.
    hot: bool,
    /// Computed `background-color` and `box-shadow`.
    colour: String,
    ring: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadRow {
    id: String,
    capacity: String,
    /// `data-utilisation` of its utilisation cell, and the cell's text.
    utilisation: Option<String>,
    utilisation_text: String,
    /// The computed colour of its owner swatch.
    swatch: String,
}

const READ_LOAD_PAGE: &str = r#"(() => {
  const shown = (id) => { const e = document.getElementById(id); return e.hidden ? null : e.textContent; };
  return {
    cells: Array.from(document.querySelectorAll('[data-shard]'), (cell) => {
      const style = getComputedStyle(cell);
      return { shard: Number(cell.dataset.shard), owner: cell.dataset.owner,
        load: cell.dataset.load ?? null, hot: cell.dataset.hot === 'true',
        colour: style.backgroundColor, ring: style.boxShadow };
    }),
    executors: Array.from(document.querySelectorAll('[data-executor]'), (row) => {
      const utilisation = row.querySelector('.utilisation');
      return { id: row.dataset.executor, capacity: row.querySelector('.capacity').textContent,
        utilisation: utilisation.dataset.utilisation ?? null,
        utilisationText: utilisation.textContent,
        swatch: getComputedStyle(row.querySelector('.sw')).backgroundColor };
    }),
    pressed: [document.getElementById('colour-owner').getAttribute('aria-pressed'),
      document.getElementById('colour-load').getAttribute('aria-pressed')],
    ownerLegend: !document.getElementById('legend').hidden,
    loadLegend: shown('load-legend'),
    note: shown('load-note'),
    loadRequests: window.__console.loadRequests,
  };
})()"#;

async fn read_load_page(browser: &mut Browser) -> Result<LoadPage, String> {
    let value = browser.evaluate(READ_LOAD_PAGE).await?;
    serde_json::from_value(value).map_err(|e| format!("page view: {e}"))
}

// The page's `data-load` and `data-utilisation` are the digits the leader's JSON had (both ends
// write a number's shortest round-trip form), so they are read with serde_json, as the API's
// reply is: its float parsing can differ from `str::parse` in the last bit.

/// Relative luminance (WCAG) of a computed CSS colour, `rgb(r, g, b)` or `rgba(r, g, b, a)`.
fn luminance(colour: &str) -> Result<f64, String> {
    let channels: Vec<f64> = colour
        .trim_start_matches("rgba(")
        .trim_start_matches("rgb(")
        .trim_end_matches(')')
        .split(',')
        .map(|part| part.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("colour {colour:?}: {e}"))?;
    let [r, g, b, ..] = channels[..] else {
        return Err(format!("colour {colour:?}"));
    };
    let linear = |c: f64| {
        let c = c / 255.0;
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    Ok(0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b))
}

/// The leader's loads and the page's view of them after a round of load requests that the page
/// started after the leader was first asked, when the leader's loads were the same when asked
/// again afterwards: then the page was shown exactly those. An error when they changed in
/// between (a step took in new reports), for the caller to try again.
async fn page_and_leader_loads(
    browser: &mut Browser,
    cluster: &Cluster,
    id: u64,
) -> Result<(LoadPage, LeaderLoads), String> {
    let before = leader_loads(cluster, id).await?;
    let started = browser
        .evaluate("window.__console.loadRequests")
        .await?
        .as_u64()
        .ok_or("no load request counter")?;
    // Rounds run one at a time, so once more have been applied than had started, one that
    // started after `before` was read has been applied.
    let deadline = Instant::now() + LOAD_ROUND_BOUND;
    loop {
        let rounds = browser
            .evaluate("window.__console.loadRounds")
            .await?
            .as_u64()
            .ok_or("no load round counter")?;
        if rounds > started {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no round of load requests applied within {LOAD_ROUND_BOUND:?} ({rounds} of {started})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = read_load_page(browser).await?;
    let after = leader_loads(cluster, id).await?;
    if before != after {
        return Err("the leader's loads changed while the page asked; again".to_string());
    }
    Ok((page, after))
}

/// The page shows the leader's loads: every cell's `data-load` and `data-hot` are the leader's,
/// cells are brighter the busier they are (the busy shards brighter than every other, the
/// busiest the brightest), hot cells ringed and no other, and every executor's capacity and
/// utilisation are the leader's.
fn check_load_colouring(
    page: &LoadPage,
    leader: &LeaderLoads,
    hot_shard: u32,
    warm: [u32; 2],
) -> Result<(), String> {
    // The traffic's picture first: until the leader shows it, there is nothing to compare.
    let load_of = |shard: u32| leader.shards.get(shard as usize).and_then(|s| s.1);
    if !leader.shards.get(hot_shard as usize).is_some_and(|s| s.2) {
        return Err(format!(
            "the leader does not show shard {hot_shard} hot yet"
        ));
    }
    if let Some(cold) = warm.iter().find(|&&s| !load_of(s).is_some_and(|l| l > 0.0)) {
        return Err(format!("the leader shows no load on shard {cold} yet"));
    }
    if page.cells.len() != leader.shards.len() {
        return Err(format!(
            "{} cells, {} shards",
            page.cells.len(),
            leader.shards.len()
        ));
    }
    let mut lit = Vec::with_capacity(page.cells.len());
    for (cell, &(shard, load, hot)) in page.cells.iter().zip(&leader.shards) {
        let shown = cell
            .load
            .as_deref()
            .map(serde_json::from_str::<f64>)
            .transpose()
            .map_err(|e| format!("shard {shard}: data-load {:?}: {e}", cell.load))?;
        if cell.shard != shard || shown != load || cell.hot != hot {
            return Err(format!(
                "shard {shard}: the page shows load {:?} hot {}, the leader {load:?} hot {hot}",
                cell.load, cell.hot
            ));
        }
        let ringed = cell.ring != "none";
        if ringed != hot {
            return Err(format!(
                "shard {shard} (hot {hot}) has box-shadow {:?}",
                cell.ring
            ));
        }
        lit.push((shard, load.unwrap_or(0.0), luminance(&cell.colour)?));
    }
    // The busy shards are the most intense cells, the hottest the most of all.
    let busy = [hot_shard, warm[0], warm[1]];
    let dimmest_busy = lit
        .iter()
        .filter(|(shard, ..)| busy.contains(shard))
        .map(|&(_, _, lum)| lum)
        .fold(f64::INFINITY, f64::min);
    if let Some(brighter) = lit
        .iter()
        .find(|(shard, _, lum)| !busy.contains(shard) && *lum >= dimmest_busy)
    {
        return Err(format!(
            "shard {} (load {}) is as bright as a busy shard: {brighter:?}",
            brighter.0, brighter.1
        ));
    }
    let brightest = lit.iter().map(|&(_, _, lum)| lum).fold(0.0, f64::max);
    if lit[hot_shard as usize].2 < brightest {
        return Err(format!(
            "the hot shard {hot_shard} is not the brightest: {:?}",
            lit[hot_shard as usize]
        ));
    }
    // The hot shard carries about four times a warm one's load: a visibly brighter step.
    if let Some(warm) = warm
        .iter()
        .find(|&&shard| lit[shard as usize].2 >= lit[hot_shard as usize].2)
    {
        return Err(format!(
            "the hot shard {:?} is no brighter than the warm one {:?}",
            lit[hot_shard as usize], lit[*warm as usize]
        ));
    }
    // And throughout: more load is never dimmer.
    let mut by_load = lit.clone();
    by_load.sort_by(|a, b| a.1.total_cmp(&b.1));
    if let Some(pair) = by_load
        .windows(2)
        .find(|pair| pair[1].1 > pair[0].1 && pair[1].2 < pair[0].2)
    {
        return Err(format!("more load, dimmer: {pair:?}"));
    }
    for (id, capacity, utilisation) in &leader.executors {
        let row = page
            .executors
            .iter()
            .find(|row| &row.id == id)
            .ok_or_else(|| format!("no row for {id}"))?;
        let shown = row
            .utilisation
            .as_deref()
            .map(serde_json::from_str::<f64>)
            .transpose()
            .map_err(|e| format!("{id}: data-utilisation: {e}"))?;
        if row.capacity != capacity.to_string()
            || shown != *utilisation
            || row.utilisation_text != human_load(*utilisation)
        {
            return Err(format!(
                "{id}: the page shows capacity {} utilisation {:?} ({}), the leader \
                 {capacity} {utilisation:?}",
                row.capacity, row.utilisation, row.utilisation_text
            ));
        }
    }
    Ok(())
}

/// Colours by owner exactly as before: no cell shows a load or a ring, every cell has its
/// owner's colour (its executor row's swatch) and the map is manager `id`'s.
async fn check_owner_colouring(
    browser: &mut Browser,
    cluster: &Cluster,
    id: u64,
) -> Result<LoadPage, String> {
    let page = read_load_page(browser).await?;
    if page.pressed != ("true".to_string(), "false".to_string())
        || !page.owner_legend
        || page.load_legend.is_some()
        || page.note.is_some()
    {
        return Err(format!(
            "pressed {:?}, owner legend {}, load legend {:?}, note {:?}",
            page.pressed, page.owner_legend, page.load_legend, page.note
        ));
    }
    let api = api_owners(cluster, id).await?;
    let shown: Vec<(u32, String)> = page
        .cells
        .iter()
        .map(|c| (c.shard, c.owner.clone()))
        .collect();
    if shown != api {
        return Err("the page's owners differ from the API's".to_string());
    }
    for cell in &page.cells {
        let swatch = page
            .executors
            .iter()
            .find(|row| row.id == cell.owner)
            .map(|row| row.swatch.as_str());
        if cell.load.is_some() || cell.hot || cell.ring != "none" || swatch != Some(&cell.colour) {
            return Err(format!(
                "shard {} shows load {:?}, hot {}, ring {:?}, colour {:?} (its owner's: {swatch:?})",
                cell.shard, cell.load, cell.hot, cell.ring, cell.colour
            ));
        }
    }
    Ok(page)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_colours_the_map_by_the_leaders_loads_on_request() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        lease: LOAD_LEASE.to_string(),
        shard_count: SHARDS,
        ..ClusterOptions::default()
    });
    let leader = cluster.wait_for_leader(LEADER_BOUND).await;
    let names = ["load-1", "load-2"];
    let executors: Vec<ExecutorProcess> = names
        .iter()
        .map(|name| ExecutorProcess::start(&cluster, name))
        .collect();
    // Served by a follower: its own state has no loads, so the page must ask the leader.
    let page_node = *cluster
        .managers
        .keys()
        .find(|&&id| id != leader)
        .expect("a follower");
    let url = format!("{}/ui/", cluster.url(page_node));
    let mut browser = Browser::launch(&chromium, &url, WINDOW, cluster.dir.path())
        .await
        .unwrap_or_else(|e| panic!("chromium: {e}"));
    wait_settled(&mut browser, &cluster, page_node, &names).await;
    let page = check_owner_colouring(&mut browser, &cluster, page_node)
        .await
        .expect("coloured by owner at first");
    for row in &page.executors {
        assert_eq!(row.capacity, "1", "{row:?}");
        // A follower's own state has no loads.
        assert_eq!(row.utilisation_text, "—", "{row:?}");
    }

    // Traffic on three shards: the hot one on load-1, two warm ones on load-2. Placement by load
    // has nothing to improve by moving them (moving a warm one over would only widen the gap),
    // so they stay put. Every request goes to both executors; only the owner admits it.
    let registered: Vec<ExecutorView> = get(&cluster, page_node, "/v1/executors")
        .await
        .expect("executors");
    let holds = |name: &str| -> Vec<u32> {
        registered
            .iter()
            .find(|e| e.name.as_deref() == Some(name))
            .map(|e| e.shards.iter().map(|s| s.shard).collect())
            .unwrap_or_default()
    };
    let hot_shard = holds("load-1")[0];
    let warm = [holds("load-2")[0], holds("load-2")[1]];
    let mut keys = vec![key_for(hot_shard); HOT_WEIGHT];
    keys.extend(warm.iter().map(|&shard| key_for(shard)));
    eprintln!("traffic: shard {hot_shard} ×{HOT_WEIGHT}, shards {warm:?} ×1");
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let urls: Vec<String> = executors.iter().map(ExecutorProcess::url).collect();
        let http = reqwest::Client::new();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for key in &keys {
                    for url in &urls {
                        let _ = http.get(format!("{url}/v1/work?key={key}")).send().await;
                    }
                }
                tokio::time::sleep(WORK_INTERVAL).await;
            }
        })
    };

    // Switched to load: every cell as the leader has it.
    let switched_at = Instant::now();
    let requests_before = read_load_page(&mut browser)
        .await
        .expect("page")
        .load_requests;
    click_on(&mut browser, "#colour-load").await;
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        let cluster = &cluster;
        // A try between two steps is what tells; a timeout reports the last such comparison.
        let last_compared = std::sync::Mutex::new("none yet".to_string());
        poll_until(
            "the page to colour every shard by the leader's load",
            LOADS_BOUND,
            || async {
                let mut browser = browser.lock().await;
                let (page, leader) = page_and_leader_loads(&mut browser, cluster, page_node)
                    .await
                    .map_err(|e| {
                        format!("{e}; last comparison: {}", last_compared.lock().unwrap())
                    })?;
                let compared = if page.pressed != ("false".to_string(), "true".to_string())
                    || page.owner_legend
                    || page.load_legend.is_none()
                {
                    Err(format!(
                        "pressed {:?}, owner legend {}, load legend {:?}",
                        page.pressed, page.owner_legend, page.load_legend
                    ))
                } else {
                    check_load_colouring(&page, &leader, hot_shard, warm)
                };
                if let Err(mismatch) = &compared {
                    mismatch.clone_into(&mut last_compared.lock().unwrap());
                }
                compared
            },
        )
        .await;
    }
    let page = read_load_page(&mut browser).await.expect("page");
    eprintln!(
        "coloured by load {:?} after the switch; load legend {:?}",
        switched_at.elapsed(),
        page.load_legend
    );
    assert_eq!(page.note, None, "loads are known: nothing to say");
    // One round at a time, every few seconds: no storm.
    let elapsed_s = switched_at.elapsed().as_secs_f64();
    let rounds = page.load_requests - requests_before;
    assert!(
        (rounds as f64) < elapsed_s / 1.5 + 2.0,
        "{rounds} rounds of load requests in {elapsed_s:.1} s"
    );

    // The hot cell's description says its load and that it is hot.
    let selector = format!("[data-shard=\"{hot_shard}\"]");
    let centre = browser
        .evaluate(&format!(
            "(() => {{ const r = document.querySelector({selector:?}).getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ))
        .await
        .expect("cell position");
    browser
        .move_mouse(
            centre[0].as_f64().unwrap_or_default(),
            centre[1].as_f64().unwrap_or_default(),
        )
        .await
        .expect("hover");
    let described = browser
        .evaluate(&format!(
            "[document.querySelector({selector:?}).title, \
             document.getElementById('shard-detail').textContent]"
        ))
        .await
        .expect("hovered cell");
    for text in [&described[0], &described[1]] {
        let text = text.as_str().unwrap_or_default();
        assert!(
            text.starts_with(&format!("shard {hot_shard} ·"))
                && text.contains(" · load ")
                && text.ends_with(" · hot"),
            "the hot cell's description: {text:?}"
        );
    }
    let png = page_screenshot(&mut browser, WINDOW.0).await;
    save_screenshot(cluster.dir.path(), "console-load.png", &png, true);
    browser
        .set_viewport(WINDOW.0, WINDOW.1)
        .await
        .expect("viewport");
    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();

    // Switched back: owner colours, exactly as before, and no more load requests.
    click_on(&mut browser, "#colour-owner").await;
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        let cluster = &cluster;
        poll_until(
            "the page to colour every shard by its owner again",
            SETTLE_BOUND,
            || async {
                check_owner_colouring(&mut **browser.lock().await, cluster, page_node).await
            },
        )
        .await;
    }
    let page = read_load_page(&mut browser).await.expect("page");
    assert!(
        page.executors.iter().all(|row| row.utilisation_text == "—"),
        "back to the follower's own state, which has no utilisation: {:?}",
        page.executors
    );
    let requests = page.load_requests;
    // Three times the gap between rounds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let page = read_load_page(&mut browser).await.expect("page");
    assert_eq!(
        page.load_requests, requests,
        "no load requests once coloured by owner"
    );

    // No leader to ask: the page says no load is known rather than colour by stale loads.
    click_on(&mut browser, "#colour-load").await;
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until("the page to show loads again", LOADS_BOUND, || async {
            let page = read_load_page(&mut **browser.lock().await).await?;
            page.cells
                .iter()
                .all(|cell| cell.load.is_some())
                .then_some(())
                .ok_or_else(|| format!("note {:?}", page.note))
        })
        .await;
    }
    let others: Vec<u64> = cluster
        .managers
        .keys()
        .copied()
        .filter(|&id| id != page_node)
        .collect();
    for id in others {
        cluster.manager(id).kill();
    }
    let page = {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until("the page to say no load is known", LEADER_BOUND, || async {
            let page = read_load_page(&mut **browser.lock().await).await?;
            let uncoloured = page
                .cells
                .iter()
                .all(|cell| cell.load.is_none() && !cell.hot);
            match &page.note {
                Some(note) if note.starts_with("No load known") && uncoloured => Ok(page),
                _ => Err(format!("note {:?}, uncoloured {uncoloured}", page.note)),
            }
        })
        .await
    };
    eprintln!("without a leader the page says: {:?}", page.note);
    assert!(
        page.executors.iter().all(|row| row.utilisation_text == "—"),
        "{:?}",
        page.executors
    );
    assert!(browser.is_running(), "{}", browser.log());
}

/// The palette slot the console gives executor `id`: FNV-1a (32-bit) of its UTF-8 bytes, mod
/// the palette's size, as console.js computes it.
fn palette_slot(id: &str, palette: u32) -> u32 {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash % palette
}

/// The palette slot (`oN`) of each executor's swatch in the table, and each shard cell's
/// (owner, slot), owned cells only.
#[derive(Debug, Deserialize, PartialEq)]
struct Colours {
    rows: Vec<(String, u32)>,
    cells: Vec<(String, u32)>,
}

const READ_COLOURS: &str = r#"(() => {
  const slot = (element) => Number((/\bo(\d+)\b/.exec(element.className) || [null, -1])[1]);
  return {
    rows: Array.from(document.querySelectorAll('[data-executor]'), (row) =>
      [row.dataset.executor, slot(row.querySelector('.sw'))]),
    cells: Array.from(document.querySelectorAll('[data-shard]'), (cell) => [cell.dataset.owner, slot(cell)])
      .filter(([owner]) => owner !== ''),
  };
})()"#;

async fn read_colours(browser: &mut Browser) -> Colours {
    let value = browser.evaluate(READ_COLOURS).await.expect("colours");
    serde_json::from_value(value).expect("colours")
}

/// Reloads the page and waits until the new one runs (the old one's marker gone).
async fn reload(browser: &mut Browser) {
    browser
        .evaluate("window.__testMarker = true")
        .await
        .expect("set the marker");
    browser
        .call("Page.reload", serde_json::json!({ "ignoreCache": true }))
        .await
        .expect("reload");
    let browser = tokio::sync::Mutex::new(browser);
    poll_until("the reloaded page to run", SETTLE_BOUND, || async {
        let ready = browser
            .lock()
            .await
            .evaluate("window.__testMarker !== true && window.__console !== undefined")
            .await?;
        (ready == serde_json::Value::Bool(true))
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
}

/// Two papercuts of the console's first moments:
/// - until the first state arrives, the executors table says it is waiting for it (it said "no
///   executors registered", which was false for a busy cluster): with every watch request
///   blocked, the page keeps saying so through its retries, and lists the executors once the
///   requests go through;
/// - an executor's colour comes from its id alone (FNV-1a of the id, mod the palette of
///   console.js), in the table and on the map, the same after a reload (they were dealt in
///   the order the page met executors, so they changed from one load to the next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_waits_for_its_first_answer_and_colours_each_executor_by_its_id() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let _serial = one_cluster_at_a_time().await;
    let mut cluster = Cluster::start(ClusterOptions {
        size: 1,
        ..options()
    });
    cluster.wait_for_leader(LEADER_BOUND).await;
    let names = ["paint-1", "paint-2", "paint-3", "paint-4"];
    let _executors: Vec<ExecutorProcess> = names
        .iter()
        .map(|name| ExecutorProcess::start(&cluster, name))
        .collect();
    let console_js = cluster
        .http
        .get(format!("{}/ui/console.js", cluster.url(1)))
        .send()
        .await
        .expect("console.js")
        .text()
        .await
        .expect("console.js");
    let palette: u32 = console_js
        .split_once("const PALETTE = ")
        .and_then(|(_, rest)| rest.split(';').next())
        .and_then(|size| size.parse().ok())
        .expect("console.js defines PALETTE");
    let url = format!("{}/ui/", cluster.url(1));
    let mut browser = Browser::launch(&chromium, &url, WINDOW, cluster.dir.path())
        .await
        .unwrap_or_else(|e| panic!("chromium: {e}"));
    wait_settled(&mut browser, &cluster, 1, &names).await;

    let first = read_colours(&mut browser).await;
    assert_eq!(first.rows.len(), names.len(), "{first:?}");
    assert_eq!(first.cells.len(), SHARDS as usize, "{first:?}");
    for (id, slot) in first.rows.iter().chain(&first.cells) {
        assert_eq!(
            *slot,
            palette_slot(id, palette),
            "{id}'s colour is not its id's: {first:?}"
        );
    }

    // The first answer withheld: every watch request fails, and is retried.
    browser
        .call("Network.enable", serde_json::json!({}))
        .await
        .expect("Network.enable");
    browser
        .call(
            "Network.setBlockedURLs",
            serde_json::json!({ "urls": ["*/v1/watch*"] }),
        )
        .await
        .expect("block the watch");
    reload(&mut browser).await;
    const EXECUTORS_TEXT: &str = "document.querySelector('#executors tbody').textContent";
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until("a second blocked watch request", SETTLE_BOUND, || async {
            let sent = browser
                .lock()
                .await
                .evaluate("window.__console.watchRequests")
                .await?;
            (sent.as_u64() >= Some(2))
                .then_some(())
                .ok_or_else(|| format!("{sent} sent"))
        })
        .await;
    }
    let waiting = browser.evaluate(EXECUTORS_TEXT).await.expect("table text");
    assert_eq!(
        waiting, "waiting for the first answer",
        "the executors table before any state arrived"
    );

    browser
        .call("Network.setBlockedURLs", serde_json::json!({ "urls": [] }))
        .await
        .expect("unblock the watch");
    wait_settled(&mut browser, &cluster, 1, &names).await;
    let reloaded = read_colours(&mut browser).await;
    let slots =
        |colours: &Colours| -> BTreeMap<String, u32> { colours.rows.iter().cloned().collect() };
    assert_eq!(
        slots(&reloaded),
        slots(&first),
        "each executor's colour after a reload"
    );
    for (id, slot) in &reloaded.cells {
        assert_eq!(*slot, palette_slot(id, palette), "{reloaded:?}");
    }
}
