//! The manager's map in docs/ARCHITECTURE.md ("The manager, folder by folder") against the tree:
//! every folder of `manager/src` and every file in it is named there, and nothing is named that
//! is not there; each top-level module uses only the layers the map puts below it. The folders
//! the map marks pure are held to what makes them cores the simulator
//! and production share: no tokio, sled, network, file or clock reads, no locks, and no use of a
//! folder that is not pure itself (time comes in as a leader-stamped `now_ms`).

// A test crate: a failed expectation is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAP_HEADING: &str = "## The manager, folder by folder";
const LAYERS_LINE: &str = "Layers, from the top: ";
const SOURCE_ROOT: &str = "manager/src/";

/// What a pure folder's code may not name: the runtime, storage, the network, files, threads,
/// the environment, the clock and locks.
const FORBIDDEN_NAMES: &[&str] = &[
    "tokio",
    "sled",
    "reqwest",
    "axum",
    "hyper",
    "Instant",
    "SystemTime",
    "Mutex",
    "RwLock",
];
const FORBIDDEN_PATHS: &[&str] = &["std::fs", "std::net", "std::thread", "std::env", "std::io"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// One row of the map: a folder (`manager/src/leader/core/`), its kind and its files.
#[derive(Debug)]
struct Row {
    folder: String,
    kind: String,
    files: BTreeSet<String>,
}

/// The names in backticks of one table cell.
fn quoted(cell: &str) -> BTreeSet<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The map's section of docs/ARCHITECTURE.md.
fn map_section() -> String {
    let doc = std::fs::read_to_string(workspace().join("docs/ARCHITECTURE.md")).unwrap();
    let section = doc
        .split_once(MAP_HEADING)
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has no section {MAP_HEADING:?}"))
        .1;
    section.split("\n## ").next().unwrap().to_owned()
}

fn map() -> Vec<Row> {
    map_section()
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 4, "a map row has four cells: {line}");
            Row {
                folder: cells[0].trim_matches('`').to_owned(),
                kind: cells[1].to_owned(),
                files: quoted(cells[3]),
            }
        })
        .collect()
}

/// Test code is not mapped: `tests/` folders and `tests.rs` files.
fn is_test(name: &str) -> bool {
    name == "tests" || name == "tests.rs"
}

/// Every folder of `manager/src` with the files directly in it (a folder holding only tests is
/// not one).
fn tree() -> BTreeMap<String, BTreeSet<String>> {
    let mut folders = BTreeMap::new();
    let mut pending = vec![SOURCE_ROOT.to_owned()];
    while let Some(folder) = pending.pop() {
        let mut files = BTreeSet::new();
        for entry in std::fs::read_dir(workspace().join(&folder)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            if is_test(&name) {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                pending.push(format!("{folder}{name}/"));
            } else {
                files.insert(name);
            }
        }
        if !files.is_empty() {
            folders.insert(folder, files);
        }
    }
    folders
}

#[test]
fn the_architecture_map_names_every_folder_and_file_of_the_manager() {
    let mapped: BTreeMap<String, BTreeSet<String>> = map()
        .into_iter()
        .map(|row| (row.folder, row.files))
        .collect();
    let tree = tree();
    for (folder, files) in &tree {
        let named = mapped.get(folder).unwrap_or_else(|| {
            panic!("docs/ARCHITECTURE.md's map has no row for {folder} (files: {files:?})")
        });
        let missing: Vec<_> = files.difference(named).collect();
        let gone: Vec<_> = named.difference(files).collect();
        assert!(
            missing.is_empty() && gone.is_empty(),
            "the map's row for {folder}: not named {missing:?}; named but not there {gone:?}"
        );
    }
    let extra: Vec<_> = mapped.keys().filter(|f| !tree.contains_key(*f)).collect();
    assert!(
        extra.is_empty(),
        "the map names folders that do not exist: {extra:?}"
    );
}

/// `manager/src/leader/core/` → `leader::core`.
fn module_path(folder: &str) -> String {
    folder
        .trim_start_matches(SOURCE_ROOT)
        .trim_end_matches('/')
        .replace('/', "::")
}

/// The code of a source file without its comments and without its `#[cfg(test)]` module.
fn code_of(source: &str) -> String {
    let production = source.split("#[cfg(test)]").next().unwrap();
    production
        .lines()
        .map(|line| line.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What in `code` breaks the rule of a pure folder, `pure_modules` being the crate's pure
/// modules (`lease`, `leader::core`, …).
fn impurities(code: &str, pure_modules: &BTreeSet<String>) -> Vec<String> {
    let mut found = Vec::new();
    let identifiers: BTreeSet<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    for name in FORBIDDEN_NAMES {
        if identifiers.contains(name) {
            found.push(format!("names `{name}`"));
        }
    }
    for path in FORBIDDEN_PATHS {
        if code.contains(path) {
            found.push(format!("uses `{path}`"));
        }
    }
    for (at, _) in code.match_indices("crate::") {
        let path: String = code[at + "crate::".len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let pure = pure_modules
            .iter()
            .any(|module| path == *module || path.starts_with(&format!("{module}::")));
        if !pure {
            found.push(format!("uses `crate::{path}`, which is not a pure folder"));
        }
    }
    found
}

#[test]
fn the_pure_folders_read_no_clock_and_do_no_io() {
    let pure_folders: Vec<String> = map()
        .into_iter()
        .filter(|row| row.kind == "pure")
        .map(|row| row.folder)
        .collect();
    assert!(
        pure_folders.contains(&"manager/src/leader/core/".to_owned()),
        "the map marks the leader's core pure: {pure_folders:?}"
    );
    let pure_modules: BTreeSet<String> = pure_folders.iter().map(|f| module_path(f)).collect();
    let tree = tree();
    let mut broken = Vec::new();
    for folder in &pure_folders {
        for file in tree.get(folder).into_iter().flatten() {
            let source = std::fs::read_to_string(workspace().join(folder).join(file)).unwrap();
            for impurity in impurities(&code_of(&source), &pure_modules) {
                broken.push(format!("{folder}{file} {impurity}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "pure folders that are not:\n{}",
        broken.join("\n")
    );
}

/// The rule itself: each thing it forbids is found, what it allows is not.
#[test]
fn the_purity_rule_finds_what_it_forbids() {
    let pure: BTreeSet<String> = ["lease".to_owned(), "leader::core".to_owned()].into();
    for code in [
        "let now = std::time::Instant::now();",
        "tokio::spawn(async {});",
        "let file = std::fs::read(path);",
        "use crate::handles::clock::LeaderClock;",
        "let guard = state.lock(); let m: Mutex<u8>;",
    ] {
        assert!(
            !impurities(code, &pure).is_empty(),
            "{code:?} should break the rule"
        );
    }
    let allowed =
        "use crate::lease::LeaseState; use crate::leader::core::term::TermSteps; let n = now_ms;";
    assert_eq!(impurities(allowed, &pure), Vec::<String>::new());
    assert!(
        code_of("fn f() {} // tokio shell\n#[cfg(test)]\nmod tests { tokio }").trim()
            == "fn f() {}"
    );
}

/// The top-level modules in the map's order of layers, the top first.
fn layers() -> Vec<String> {
    let section = map_section();
    let line = section
        .lines()
        .find_map(|line| line.strip_prefix(LAYERS_LINE))
        .unwrap_or_else(|| panic!("the map states no line {LAYERS_LINE:?}"));
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The crate's top-level modules `code` names (`crate::x::…` and `crate::{x, y}`).
fn modules_used(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                used.insert(name);
            }
        } else {
            used.insert(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    used.retain(|name| !name.is_empty());
    used
}

#[test]
fn each_layer_uses_only_the_layers_below_it() {
    let layers = layers();
    let rank = |module: &str| layers.iter().position(|layer| layer == module);
    let mut broken = Vec::new();
    for (folder, files) in tree() {
        let module = folder.trim_start_matches(SOURCE_ROOT);
        for file in files.iter().filter(|file| file.ends_with(".rs")) {
            // A folder's files are its top-level module's; at the root, a file is its own
            // module (`node.rs`), and the crate root and `main` stand above every layer.
            let top = match module.split('/').next().filter(|top| !top.is_empty()) {
                Some(top) => top.to_owned(),
                None if file == "lib.rs" || file == "main.rs" => continue,
                None => file.trim_end_matches(".rs").to_owned(),
            };
            let own = rank(&top).unwrap_or_else(|| panic!("{top} is in no layer of the map"));
            let source = std::fs::read_to_string(workspace().join(&folder).join(file)).unwrap();
            for used in modules_used(&code_of(&source)) {
                match rank(&used) {
                    Some(other) if other >= own => {}
                    Some(_) => broken.push(format!("{folder}{file} uses `{used}`, a layer above")),
                    None => broken.push(format!("{folder}{file} uses `{used}`, in no layer")),
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "layers used upwards:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_layer_rule_finds_a_use_upwards() {
    assert_eq!(
        modules_used("use crate::{http, leader::core}; let x = crate::lease::LeaseState::new();"),
        ["http", "lease", "leader"].map(str::to_owned).into()
    );
}
