//! The crates are layered one way down (docs/design.md §2): each uses only the Tessera crates
//! its row of [`ALLOWED`] lists. This test reads the workspace's dependencies with
//! `cargo metadata` and names every edge the table does not allow, so that a crate that gains a
//! forbidden dependency fails here, not in a review.
//!
//! Normal dependencies are checked against the table. Dev-dependencies (tests, benches,
//! examples) may use any crate, as long as that crate does not itself depend, through normal
//! dependencies, on the crate whose tests use it: no circle, even through tests.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Every workspace crate and the Tessera crates it may use (normal dependencies), bottom up: the
/// table of docs/design.md §2.
const ALLOWED: &[(&str, &[&str])] = &[
    ("tessera-formats", &[]),
    ("tessera-ucx", &[]),
    ("tessera-evb", &["tessera-formats"]),
    ("tessera-config", &["tessera-formats"]),
    ("tessera-rundir", &["tessera-formats"]),
    ("tessera-sim", &["tessera-evb", "tessera-formats"]),
    ("tessera-inspect", &["tessera-formats"]),
    ("tessera-emu", &["tessera-config", "tessera-formats"]),
    ("tessera-fu", &["tessera-config", "tessera-formats", "tessera-rundir"]),
    ("tessera-deploy", &["tessera-config", "tessera-formats"]),
    ("tessera-runtime", &["tessera-config", "tessera-evb", "tessera-formats", "tessera-rundir", "tessera-ucx"]),
    (
        "tessera-control",
        &[
            "tessera-config",
            "tessera-emu",
            "tessera-evb",
            "tessera-formats",
            "tessera-fu",
            "tessera-rundir",
            "tessera-runtime",
        ],
    ),
    (
        "tessera-bench",
        &[
            "tessera-config",
            "tessera-control",
            "tessera-emu",
            "tessera-evb",
            "tessera-formats",
            "tessera-fu",
            "tessera-rundir",
            "tessera-runtime",
            "tessera-sim",
            "tessera-ucx",
        ],
    ),
    ("tessera-pipestream", &["tessera-bench", "tessera-config", "tessera-control", "tessera-formats", "tessera-ucx"]),
    (
        "tessera",
        &[
            "tessera-bench",
            "tessera-config",
            "tessera-control",
            "tessera-deploy",
            "tessera-emu",
            "tessera-evb",
            "tessera-formats",
            "tessera-fu",
            "tessera-inspect",
            "tessera-pipestream",
            "tessera-rundir",
            "tessera-runtime",
            "tessera-sim",
        ],
    ),
];

/// Each workspace crate's Tessera dependencies of one kind (`None` normal, `Some("dev")`).
type Edges = BTreeMap<String, BTreeSet<String>>;

/// The workspace's Tessera dependencies as `cargo metadata` gives them: (normal, dev).
fn workspace_edges() -> (Edges, Edges) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let (mut normal, mut dev) = (Edges::new(), Edges::new());
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a package name").to_owned();
        normal.entry(name.clone()).or_default();
        dev.entry(name.clone()).or_default();
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let dep_name = dep["name"].as_str().expect("a dependency name");
            if !dep_name.starts_with("tessera") {
                continue;
            }
            match dep["kind"].as_str() {
                None => normal.get_mut(&name).expect("inserted").insert(dep_name.to_owned()),
                Some("dev") => dev.get_mut(&name).expect("inserted").insert(dep_name.to_owned()),
                // A build-dependency on a Tessera crate is a normal edge for the picture.
                Some(_) => normal.get_mut(&name).expect("inserted").insert(dep_name.to_owned()),
            };
        }
    }
    (normal, dev)
}

/// The crates `from` depends on through normal dependencies, directly or not.
fn reachable(normal: &Edges, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(krate) = todo.pop() {
        for dep in normal.get(&krate).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn every_crate_uses_only_the_crates_below_it_that_the_table_allows() {
    let (normal, _) = workspace_edges();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut forbidden = Vec::new();
    for (krate, deps) in &normal {
        let Some(may_use) = allowed.get(krate.as_str()) else {
            forbidden.push(format!("{krate} is not in the layering table: give it a row (and docs/design.md §2)"));
            continue;
        };
        for dep in deps.iter().filter(|dep| !may_use.contains(&dep.as_str())) {
            forbidden.push(format!("{krate} -> {dep} is not allowed by the layering (docs/design.md §2)"));
        }
    }
    for krate in allowed.keys().filter(|krate| !normal.contains_key(**krate)) {
        forbidden.push(format!("{krate} is in the layering table but not in the workspace"));
    }
    assert!(forbidden.is_empty(), "{}", forbidden.join("\n"));
}

#[test]
fn the_table_itself_has_no_circle_and_is_written_bottom_up() {
    // A row may only name crates of rows above it: the table is then an order, and no circle
    // can hide in it.
    for (i, (krate, deps)) in ALLOWED.iter().enumerate() {
        for dep in *deps {
            assert!(
                ALLOWED[..i].iter().any(|(below, _)| below == dep),
                "{krate} -> {dep}: {dep} must come before {krate} in the table"
            );
        }
    }
}

#[test]
fn no_test_closes_a_circle_through_a_dev_dependency() {
    let (normal, dev) = workspace_edges();
    let mut circles = Vec::new();
    for (krate, deps) in &dev {
        for dep in deps {
            if reachable(&normal, dep).contains(krate) {
                circles.push(format!("{krate} -(dev)-> {dep}, which depends on {krate}"));
            }
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

#[test]
fn runtime_and_config_stay_free_of_the_crates_the_issue_names() {
    // The picture's two promises, said outright: these would also fail the table above.
    let (normal, _) = workspace_edges();
    let runtime = reachable(&normal, "tessera-runtime");
    for banned in ["tessera-fu", "tessera-emu"] {
        assert!(!runtime.contains(banned), "tessera-runtime reaches {banned}: {runtime:?}");
    }
    let config = reachable(&normal, "tessera-config");
    assert_eq!(config, BTreeSet::from(["tessera-formats".to_owned()]), "tessera-config reaches more than formats");
}
