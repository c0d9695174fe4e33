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
//!    Throughout, the page's own counters show one watch request at a time, not a storm, and the
//!    members asked for at most about once a second.
//! 2. One manager with 65 536 shards and two executors: every cell is rendered, the map matches
//!    the API and the page answers a trivial evaluation promptly. The first render time is
//!    printed.
//!
//! Screenshots are written to the test's temporary directory; with `LEASEHOLD_SAVE_SCREENSHOTS=1`
//! also to `docs/img/` (`console.png` at 1280 × 900, `console-narrow.png` at 420 px wide).
//!
//! Chromium is Debian's `chromium` package. Without it this test says why and passes, unless
//! `LEASEHOLD_REQUIRE_CHROMIUM=1` (set by `.ci/run`) makes a missing browser a failure.

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold_api::wire::{ExecutorView, ShardView};
use leasehold_tests::browser::{self, Browser};
use leasehold_tests::executor::ExecutorProcess;
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

    // The map is the page's only tab stop; Tab lands on its first cell.
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
}

fn options() -> ClusterOptions {
    ClusterOptions {
        lease: format!("{LEASE_MS}ms"),
        shard_count: SHARDS,
        ..ClusterOptions::default()
    }
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
    {
        let browser = tokio::sync::Mutex::new(&mut browser);
        poll_until("the disconnected banner", BANNER_BOUND, || async {
            let page = read_page(&mut **browser.lock().await).await?;
            page.banner
                .then_some(())
                .ok_or_else(|| "no banner".to_string())
        })
        .await;
    }
    cluster.manager(page_node).start();
    cluster.wait_for_leader(LEADER_BOUND).await;
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
    assert!(browser.is_running(), "{}", browser.log());
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
    eprintln!("65 536 shards: slowest trivial evaluation {slowest:?}");
    assert!(slowest < RESPONSIVE_BOUND);

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
