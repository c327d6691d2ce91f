//! The architecture as tests: which crate may depend on which (ARCHITECTURE.md, "Crates"),
//! no cycles between the modules inside a crate, and no source file over 600 lines of
//! code before its tests.
//!
//! The module graph is read from the source: every `crate::`, `super::` and `self::` path
//! (in `use` trees and inline), resolved to the deepest module it names. For each module,
//! the graph among its direct children must be acyclic: a child may use its parent's
//! items and the parent its children, but two siblings may not use each other, directly
//! or around a loop. Test code (after the first `#[cfg(test)]`, `tests.rs` files) is left
//! out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Each crate of the workspace and the workspace crates it may depend on.
const LAYERS: &[(&str, &str, &[&str])] = &[
    ("kp-contract", "crates/contract", &[]),
    (
        "kp-kubelet-config",
        "crates/kubelet-config",
        &["kp-contract"],
    ),
    ("kp-runtime", "crates/runtime", &["kp-contract"]),
    (
        "kp-node",
        "crates/node",
        &["kp-contract", "kp-kubelet-config", "kp-runtime"],
    ),
    (
        "kp-rollout",
        "crates/rollout",
        &["kp-contract", "kp-kubelet-config", "kp-runtime"],
    ),
    (
        "kubelet-pivot",
        ".",
        &[
            "kp-contract",
            "kp-kubelet-config",
            "kp-runtime",
            "kp-node",
            "kp-rollout",
        ],
    ),
    ("testkit", "testkit", &[]),
];

/// Crates whose own code may use clap (the command lines). kp-runtime has it only behind
/// its `clap` feature, for `LogFormat`'s `ValueEnum`.
const CLAP: &[&str] = &["kubelet-pivot", "kp-rollout"];

/// The names under `[dependencies]` (not dev- or build-dependencies) of a manifest.
fn dependencies(manifest: &Path) -> BTreeMap<String, String> {
    let text = fs::read_to_string(manifest).expect("read the manifest");
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((name, spec)) = line.split_once('=') {
            out.insert(name.trim().to_string(), spec.trim().to_string());
        }
    }
    out
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let ours: BTreeSet<&str> = LAYERS.iter().map(|(name, _, _)| *name).collect();
    let mut wrong = Vec::new();
    for (name, dir, allowed) in LAYERS {
        let deps = dependencies(&root().join(dir).join("Cargo.toml"));
        for (dep, spec) in &deps {
            if ours.contains(dep.as_str()) && !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} depends on {dep}"));
            }
            if dep == "clap" && !CLAP.contains(name) && !spec.contains("optional = true") {
                wrong.push(format!("{name} depends on clap (command lines belong to the binary and the rollout CLI)"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies that run the wrong way:\n{}",
        wrong.join("\n")
    );
}

/// Every module of a crate (by path from the crate root) and its file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            if matches!(
                parts.last().map(String::as_str),
                Some("tests" | "test_support")
            ) {
                continue;
            }
            out.insert(parts, path);
        }
    }
    out
}

/// A file's code without its tests: everything before a `#[cfg(test)]` module written
/// in place (`mod tests {`), and without the items marked `#[cfg(test)]` before it (a
/// `mod tests;` declaration, a test-only `use`).
pub(crate) fn without_tests(text: &str) -> String {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            match lines.next() {
                Some(next) if next.trim_end().ends_with('{') && next.contains("mod ") => break,
                // A one-line item (`mod tests;`, `use ...;`): skip it.
                Some(next) if next.trim_end().ends_with(';') => continue,
                Some(next) => {
                    out.push(line);
                    out.push(next);
                }
                None => break,
            }
        } else {
            out.push(line);
        }
    }
    out.join("\n")
}

/// The code of a file before its tests, without comments.
fn code(text: &str) -> String {
    without_tests(text)
        .lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into paths.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let mut items = Vec::new();
    let (mut depth, mut cur) = (0, String::new());
    for ch in tree.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    items.push(cur);
    for item in items {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        if let Some(open) = item.find("::{") {
            if item.ends_with('}') {
                let mut p = prefix.to_vec();
                p.extend(item[..open].split("::").map(str::to_string));
                expand(&p, &item[open + 3..item.len() - 1], out);
                continue;
            }
        }
        let item = item.split(" as ").next().unwrap_or(item).trim();
        let mut p = prefix.to_vec();
        p.extend(
            item.split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        out.push(p);
    }
}

/// The `crate::`, `super::` and `self::` paths of a file's code.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` statements, whole (they may span lines).
    for stmt in code.split(';') {
        // The statement starts after whatever ended the one before (a block, an attribute).
        let Some(at) = ["use crate", "use super", "use self"]
            .iter()
            .filter_map(|p| stmt.rfind(p))
            .max()
        else {
            continue;
        };
        if at > 0 && !stmt.as_bytes()[at - 1].is_ascii_whitespace() {
            continue;
        }
        let tree = &stmt[at + "use ".len()..];
        let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
        if ["crate::", "super::", "self::"]
            .iter()
            .any(|p| tree.starts_with(p))
        {
            expand(&[], &tree, &mut out);
        }
    }
    // Inline paths.
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let before = if at == 0 { b' ' } else { bytes[at - 1] };
            if before.is_ascii_alphanumeric() || before == b'_' || before == b':' {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            let path: Vec<String> = code[at..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            out.push(path);
        }
    }
    out
}

/// The deepest module `path` (used in module `me`) names.
fn resolve(me: &[String], path: &[String], mods: &BTreeMap<Vec<String>, PathBuf>) -> Vec<String> {
    let mut cur: Vec<String> = me.to_vec();
    let mut rest = path;
    if rest.first().map(String::as_str) == Some("crate") {
        cur.clear();
        rest = &rest[1..];
    } else {
        while let Some(first) = rest.first() {
            match first.as_str() {
                "super" => {
                    cur.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
    }
    cur.extend(rest.iter().cloned());
    while !cur.is_empty() && !mods.contains_key(&cur) {
        cur.pop();
    }
    cur
}

/// Sibling edges: for each parent module, child → child with the file that makes it.
type Edges = BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>>;

fn sibling_edges(src: &Path) -> Edges {
    let mods = modules(src);
    let mut edges: Edges = BTreeMap::new();
    for (me, file) in &mods {
        let text = fs::read_to_string(file).expect("read a source file");
        for path in paths(&code(&text)) {
            let target = resolve(me, &path, &mods);
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < me.len() && common < target.len() {
                edges
                    .entry(me[..common].to_vec())
                    .or_default()
                    .entry(me[common].clone())
                    .or_default()
                    .entry(target[common].clone())
                    .or_insert_with(|| {
                        file.strip_prefix(root())
                            .unwrap_or(file)
                            .display()
                            .to_string()
                    });
            }
        }
    }
    edges
}

/// The cycles of a graph, each as its strongly connected set of nodes.
fn cycles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    // Reachability by search from each node; a small graph.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(n) = stack.pop() {
            for next in graph.get(&n).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for (n, r) in &reaches {
        if done.contains(*n) || !r.contains(*n) {
            continue;
        }
        let scc: Vec<String> = r
            .iter()
            .filter(|m| reaches.get(m).is_some_and(|rm| rm.contains(*n)))
            .cloned()
            .collect();
        done.extend(scc.iter().cloned());
        out.push(scc);
    }
    out
}

/// The source roots checked for cycles: every crate of the product.
pub(crate) const SOURCE_ROOTS: &[&str] = &[
    "src",
    "crates/contract/src",
    "crates/kubelet-config/src",
    "crates/runtime/src",
    "crates/node/src",
    "crates/rollout/src",
];

#[test]
fn no_cycles_between_modules_inside_a_crate() {
    let mut found = Vec::new();
    for src in SOURCE_ROOTS {
        for (parent, graph) in sibling_edges(&root().join(src)) {
            for scc in cycles(&graph) {
                let detail: Vec<String> = scc
                    .iter()
                    .flat_map(|a| {
                        graph[a]
                            .iter()
                            .filter(|(b, _)| scc.contains(b))
                            .map(move |(b, file)| format!("    {a} -> {b} ({file})"))
                    })
                    .collect();
                found.push(format!(
                    "{src}: in {}: {}\n{}",
                    if parent.is_empty() {
                        "the crate root".to_string()
                    } else {
                        parent.join("::")
                    },
                    scc.join(", "),
                    detail.join("\n")
                ));
            }
        }
    }
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let src = dir.path();
    fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").expect("write");
    fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("write");
    fs::create_dir(src.join("b")).expect("mkdir");
    fs::write(src.join("b/mod.rs"), "mod inner;\npub struct B;\n").expect("write");
    fs::write(
        src.join("b/inner.rs"),
        "use super::super::{c::{C, D as E}};\n#[cfg(test)]\nuse crate::a::A;\n",
    )
    .expect("write");
    fs::write(
        src.join("c.rs"),
        "pub struct C;\npub fn f() { let _ = crate::a::A; }\n",
    )
    .expect("write");
    let edges = sibling_edges(src);
    let top = &edges[&Vec::<String>::new()];
    assert!(
        top["b"].contains_key("c"),
        "a grouped super:: path is an edge: {top:?}"
    );
    assert!(!top["b"].contains_key("a"), "test code is no edge: {top:?}");
    assert_eq!(
        cycles(top),
        vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]
    );
}

/// Lines of code (not blank, not a comment) before the first `#[cfg(test)]`.
fn lines_of_code(text: &str) -> usize {
    without_tests(text)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

const MAX_LINES_OF_CODE: usize = 600;

#[test]
fn no_source_file_is_over_600_lines_of_code_before_its_tests() {
    let mut over = Vec::new();
    let roots = SOURCE_ROOTS
        .iter()
        .copied()
        .chain(["testkit/src", "examples"]);
    for src in roots {
        let dir = root().join(src);
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).expect("read a directory") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
                    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    if name == "tests.rs" {
                        continue;
                    }
                    let n = lines_of_code(&fs::read_to_string(&path).expect("read"));
                    if n > MAX_LINES_OF_CODE {
                        over.push(format!(
                            "{} ({n})",
                            path.strip_prefix(root()).unwrap_or(&path).display()
                        ));
                    }
                }
            }
        }
    }
    over.sort();
    assert!(
        over.is_empty(),
        "files over {MAX_LINES_OF_CODE} lines of code before their tests:\n{}",
        over.join("\n")
    );
}
