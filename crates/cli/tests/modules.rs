//! Inside a crate, too, modules import one way down (docs/design.md §2): this test reads the
//! source of every crate of the workspace (but the UCX bindings, `crates/ucx`, whose modules
//! mirror the C library's), collects every edge `use crate::X` / `crate::X::` / `super::X` (at
//! the top level) from one top-level module to another, and fails naming the circle of each
//! crate whose edges form one. For `tessera-control` it also checks the order its
//! crate documentation gives (the line `Modules, bottom up: a, b, ...` of src/lib.rs): every
//! module is listed, and each imports only modules listed before it.
//!
//! The crate root (lib.rs, main.rs) declares the modules and is left out: an edge to it or from
//! it is no circle between modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of a crate and the other top-level modules it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level modules of the crate whose sources are in `src`: each file `X.rs` and each
/// directory `X/` beside the root, with every source file that belongs to it.
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut found: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("reading src") {
        let path = entry.expect("a directory entry").path();
        let stem = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        if path.is_dir() {
            let mut files = Vec::new();
            let mut stack = vec![path.clone()];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(&dir).expect("reading a module directory") {
                    let p = e.expect("a directory entry").path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        files.push(p);
                    }
                }
            }
            found.entry(stem).or_default().extend(files);
        } else if path.extension().is_some_and(|x| x == "rs") && stem != "lib" && stem != "main" {
            found.entry(stem).or_default().push(path);
        }
    }
    found
}

/// The names a source text reaches through `crate::` (and, from a top-level module's own file,
/// `super::`), each path's first segment, groups `crate::{a, b::c}` opened. Comments are skipped.
fn first_segments(text: &str, through_super: bool) -> BTreeSet<String> {
    let code: String =
        text.lines().map(|l| l.split_once("//").map_or(l, |(code, _)| code)).collect::<Vec<_>>().join("\n");
    let mut names = BTreeSet::new();
    let prefixes: &[&str] = if through_super { &["crate::", "super::"] } else { &["crate::"] };
    for prefix in prefixes {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(prefix) {
            // Not the tail of a longer name (`tessera_crate::`).
            let before = rest[..at].chars().next_back();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // The group's items at its top level: `a`, `b::{c, d}` give `a` and `b`.
                let (mut depth, mut item, mut start) = (0usize, String::new(), true);
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            names.insert(std::mem::take(&mut item));
                            start = true;
                        }
                        c if depth == 0 && start && (c.is_alphanumeric() || c == '_') => item.push(c),
                        c if depth == 0 && !item.is_empty() && !c.is_whitespace() => start = false,
                        _ => {}
                    }
                }
                names.insert(item);
                names.remove("");
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The edges between the top-level modules of the crate in `src`.
fn module_graph(src: &Path) -> Graph {
    let modules = modules(src);
    let names: BTreeSet<&String> = modules.keys().collect();
    let mut graph = Graph::new();
    for (module, files) in &modules {
        let edges = graph.entry(module.clone()).or_default();
        for file in files {
            let text = std::fs::read_to_string(file).expect("reading a source file");
            // `super::` in a top-level module's own file is the crate root, whose modules are
            // its siblings; deeper down it is the module itself.
            let top = file.parent() == Some(src);
            for name in first_segments(&text, top) {
                if names.contains(&name) && name != *module {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

/// A circle of `graph`, as the modules along it with the first repeated at the end, if any.
fn circle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(graph: &Graph, at: &str, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|m| m == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_owned());
            return Some(found);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_owned());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

#[test]
fn the_finder_names_a_circle_and_passes_a_chain() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (from, to) in edges {
            g.entry((*from).to_owned()).or_default().insert((*to).to_owned());
            g.entry((*to).to_owned()).or_default();
        }
        g
    };
    assert_eq!(circle(&graph(&[("run", "plan"), ("plan", "system"), ("run", "system")])), None);
    assert_eq!(
        circle(&graph(&[("controller", "run"), ("run", "plan"), ("plan", "controller")])),
        Some(vec!["controller".into(), "run".into(), "plan".into(), "controller".into()])
    );
    let text = "use crate::{plan::{self, bind}, Unit};\n// use crate::farm::x;\nlet a = crate::stop::X; super::api::y";
    assert_eq!(first_segments(text, false), ["Unit", "plan", "stop"].map(String::from).into());
    assert_eq!(first_segments(text, true), ["Unit", "api", "plan", "stop"].map(String::from).into());
}

/// The crates whose modules are checked: every directory of `crates/` with a `src/`, but the
/// UCX bindings.
const EXEMPT: &[&str] = &["ucx"];

fn workspace_crates() -> Vec<String> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names: Vec<String> = std::fs::read_dir(&crates)
        .expect("reading crates/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| p.file_name().expect("a crate directory").to_string_lossy().into_owned())
        .filter(|n| !EXEMPT.contains(&n.as_str()))
        .collect();
    names.sort();
    names
}

#[test]
fn no_circle_between_the_modules_of_any_crate() {
    let names = workspace_crates();
    for name in ["control", "cli", "runtime", "evb"] {
        assert!(names.iter().any(|n| n == name), "crates/{name} is among the crates checked");
    }
    let mut circles = Vec::new();
    for name in &names {
        let graph = module_graph(&crate_src(name));
        if let Some(found) = circle(&graph) {
            circles
                .push(format!("crates/{name}/src: the modules {} import each other in a circle", found.join(" -> ")));
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

#[test]
fn control_modules_import_only_modules_below_them_in_the_order_its_docs_give() {
    let src = crate_src("control");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("reading control's lib.rs");
    let line = lib
        .lines()
        .find_map(|l| l.strip_prefix("//! Modules, bottom up: "))
        .expect("control's lib.rs says its module order in a line `//! Modules, bottom up: a, b, ...`");
    let order: Vec<String> =
        line.trim_end_matches('.').split(',').map(|m| m.trim().trim_matches('`').to_owned()).collect();
    let graph = module_graph(&src);
    let listed: BTreeSet<&String> = order.iter().collect();
    let modules: BTreeSet<&String> = graph.keys().collect();
    assert_eq!(listed, modules, "control's lib.rs lists its modules in order: every one, and no other");
    let mut wrong = Vec::new();
    for (i, module) in order.iter().enumerate() {
        for used in &graph[module] {
            if !order[..i].contains(used) {
                wrong.push(format!("{module} uses {used}, which is not below it"));
            }
        }
    }
    assert!(wrong.is_empty(), "control's module order (lib.rs) is broken: {}", wrong.join("; "));
}
