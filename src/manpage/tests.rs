use super::*;
use std::collections::BTreeSet;
use std::process::Command;

fn main_page() -> String {
    let mut buf = Vec::new();
    render_main(&mut buf).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn main_page_lists_subcommands_and_exit_codes() {
    let page = main_page();
    assert!(page.starts_with(".ie"), "{page}");
    for needle in [
        ".TH kubelet-pivot 1",
        "bootstrap",
        "self\\-hosted",
        "EXIT STATUS",
        "KUBELET_PIVOT_",
        "/lock/holder.json",
    ] {
        assert!(page.contains(needle), "missing {needle:?} in\n{page}");
    }
    assert!(!page.contains("beside it"), "the old layout: {page}");
}

/// Every page, rendered by man(1) as a reader sees it.
fn rendered_pages() -> (tempfile::TempDir, Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("not/yet/there");
    let files = write_all(&out).unwrap();
    let mut pages = Vec::new();
    for file in files {
        let output = Command::new("man")
            .arg("-l")
            .arg(&file)
            .env("MANWIDTH", "200")
            .env("MAN_KEEP_FORMATTING", "0")
            .output()
            .expect("run man -l (man-db)");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stderr.trim().is_empty(),
            "man -l {}: {stderr}",
            file.display()
        );
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        pages.push((name, plain(&String::from_utf8(output.stdout).unwrap())));
    }
    (dir, pages)
}

#[test]
fn every_subcommand_has_a_page_that_renders_with_exit_status_and_files() {
    let (_dir, pages) = rendered_pages();
    let names: BTreeSet<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "kubelet-pivot.1",
        "kubelet-pivot-bootstrap.1",
        "kubelet-pivot-rollout.1",
        "kubelet-pivot-rollout-start.1",
        "kubelet-pivot-rollout-global-stop.1",
        "kubelet-pivot-checkpoint-forget-bad.1",
        "kubelet-pivot-config-check.1",
    ] {
        assert!(names.contains(want), "{want} not in {names:?}");
    }
    assert!(!names.iter().any(|n| n.contains("-help")), "{names:?}");
    for (name, text) in &pages {
        // No empty section: a heading followed at once by another.
        let headings: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
            .collect();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            assert!(
                !(headings.contains(&pair[0]) && headings.contains(&pair[1])),
                "{name}: empty section {:?}:\n{text}",
                pair[0]
            );
        }
        assert!(text.contains("EXIT STATUS"), "{name}:\n{text}");
        assert!(text.contains("FILES"), "{name}:\n{text}");
    }
    let start = &pages
        .iter()
        .find(|(n, _)| n == "kubelet-pivot-rollout-start.1")
        .unwrap()
        .1;
    assert!(start.contains("--max-unavailable"), "{start}");
}

#[test]
fn every_cross_reference_names_a_generated_page() {
    let (_dir, pages) = rendered_pages();
    let names: BTreeSet<String> = pages
        .iter()
        .map(|(n, _)| n.trim_end_matches(".1").to_owned())
        .collect();
    let mut seen = 0;
    for (page, text) in &pages {
        for reference in references(text) {
            seen += 1;
            assert!(
                names.contains(&reference),
                "{page} refers to {reference}(1), which is not generated: {names:?}"
            );
        }
    }
    assert!(seen >= pages.len(), "too few references found: {seen}");
}

/// Text without man's overstrike (bold `X\bX`, underline `_\bX`), as `col -b` gives it.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}

/// The `kubelet-pivot...(1)` references in a rendered page.
fn references(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("kubelet-pivot") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(tail.len());
        if tail[end..].starts_with("(1)") {
            found.push(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    found
}

#[test]
fn out_dir_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a/b");
    let files = write_all(&out).unwrap();
    assert!(files.iter().all(|f| f.starts_with(&out) && f.is_file()));
}

#[test]
fn exit_codes_are_the_code_constants() {
    let status = facts::for_command(&["rollout", "status"]);
    let codes: Vec<u8> = status.exits.iter().map(|e| e.code).collect();
    assert!(codes.contains(&kp_rollout::cli::EXIT_TIMEOUT));
    let check = facts::for_command(&["config", "check"]);
    assert_eq!(check.exits.len(), 6);
    let list = facts::for_command(&["checkpoint", "list"]);
    assert!(list
        .files
        .iter()
        .any(|f| f.path.contains("kubelet\\-pivot")));
}

/// docs/reference.md's "Exit codes" table for kubelet-pivot has a row for
/// each code of the main page's table, and none besides.
#[test]
fn reference_lists_the_main_exit_codes_of_the_table() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md")).unwrap();
    let section = doc
        .split("\n## Exit codes\n")
        .nth(1)
        .and_then(|s| s.split("`kubelet-pivot config check`").next())
        .expect("the Exit codes section of docs/reference.md");
    let rows: BTreeSet<u8> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let table: BTreeSet<u8> = facts::for_command(&[])
        .exits
        .iter()
        .map(|e| e.code)
        .collect();
    assert_eq!(rows, table, "docs/reference.md vs src/manpage/facts.rs");
    let check = doc
        .split("`kubelet-pivot config check`: ")
        .nth(1)
        .expect("config check's exit codes in docs/reference.md");
    for exit in facts::for_command(&["config", "check"]).exits {
        assert!(
            check.contains(&format!("{} ", exit.code)),
            "config check's exit {} not in docs/reference.md",
            exit.code
        );
    }
}
