//! `scripts/install.sh` against temporary roots (`--destdir`), with the binary under test: the
//! file layout and modes, the unit's paths for the prefix, idempotent re-runs, the init config
//! as a conffile (refused without `--force` or `--keep-config`, backed up with `--force`, kept
//! by `--uninstall` and by the re-install after it), a debug build refused without
//! `--allow-debug`, `kubectl-pivot` as a link, the init config listing every variable of the
//! unit's command,
//! `--enable`, `--uninstall`, `systemd-analyze verify` of the installed unit, and the binary
//! installed without its debug info, which `--debug-symbols` installs beside it (build ID and
//! `.gnu_debuglink` matching).
//!
//! Needs bash, coreutils, binutils' `objcopy` and `readelf` and systemd's `systemd-analyze` and
//! `systemctl` (Debian packages `binutils`, `systemd`; `scripts/deps.sh` installs them). A
//! missing tool fails the test, it is never skipped.

use crate::support::command;

use command::{duration_secs, help_env, pivot_bin, run, text};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Exit status of install.sh for a usage error or a missing input.
const EXIT_USAGE: i32 = 2;
/// Exit status of install.sh when it refuses to overwrite a changed init config.
const EXIT_CONFLICT: i32 = 3;

/// Where the init config is installed (also the unit's `EnvironmentFile=`).
const CONFIG: &str = "etc/default/kubelet-pivot";
const UNIT_NAME: &str = "kubelet-pivot.service";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("scripts/install.sh")
}

fn shipped_config() -> String {
    read(&repo().join("systemd/kubelet-pivot.default"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|err| panic!("cannot stat {}: {err}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// sha256 of a file, by coreutils' `sha256sum` (the unoptimised test build of a Rust sha256
/// takes seconds for the debug binary).
fn sha256_file(path: &Path) -> String {
    let mut cmd = Command::new("sha256sum");
    cmd.arg(path);
    let output = run(cmd);
    assert!(output.status.success(), "sha256sum: {}", text(&output));
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .expect("sha256sum output")
        .to_owned()
}

fn sha256_text(text: &str) -> String {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    write(file.path(), text);
    sha256_file(file.path())
}

/// A temporary root and the install.sh options used for it.
struct Root {
    dir: tempfile::TempDir,
    prefix: &'static str,
}

impl Root {
    fn new(prefix: &'static str) -> Root {
        Root {
            dir: tempfile::tempdir().expect("temp dir"),
            prefix,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `root/rel` (`rel` without a leading slash).
    fn at(&self, rel: &str) -> PathBuf {
        self.path().join(rel.trim_start_matches('/'))
    }

    /// `bash scripts/install.sh --destdir ROOT --prefix PREFIX --binary PIVOT --allow-debug
    /// <args>` (the binary under test is a debug build), without any DESTDIR of the environment.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(script())
            .arg("--destdir")
            .arg(self.path())
            .arg("--prefix")
            .arg(self.prefix)
            .arg("--binary")
            .arg(pivot_bin())
            .arg("--allow-debug")
            .args(args)
            .env_remove("DESTDIR");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        run(self.command(args))
    }

    /// Runs install.sh and panics unless it exits 0; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "install.sh {args:?} failed:\n{}",
            text(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs the script, asserting that it exits with `code`.
    fn fails(&self, args: &[&str], code: i32) -> Output {
        let output = self.run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "install.sh {args:?}:\n{}",
            text(&output)
        );
        output
    }

    fn bin(&self) -> PathBuf {
        self.at(&format!("{}/bin/kubelet-pivot", self.prefix))
    }

    /// The kubectl plugin (`kubectl pivot ...`): the same binary.
    fn plugin(&self) -> PathBuf {
        self.at(&format!("{}/bin/kubectl-pivot", self.prefix))
    }

    /// What kubectl runs to complete `kubectl pivot <TAB>`: the same binary.
    fn plugin_complete(&self) -> PathBuf {
        self.at(&format!("{}/bin/kubectl_complete-pivot", self.prefix))
    }

    fn unit(&self) -> PathBuf {
        if self.prefix == "/usr" {
            self.at("usr/lib/systemd/system/kubelet-pivot.service")
        } else {
            self.at("etc/systemd/system/kubelet-pivot.service")
        }
    }

    fn config(&self) -> PathBuf {
        self.at(CONFIG)
    }

    fn share(&self, rel: &str) -> PathBuf {
        self.at(&format!("{}/share/{rel}", self.prefix))
    }

    fn manifest(&self) -> PathBuf {
        self.share("kubelet-pivot/install-manifest")
    }

    /// The install manifest as target path -> sha256.
    fn recorded(&self) -> BTreeMap<String, String> {
        read(&self.manifest())
            .lines()
            .map(|line| {
                let (sha, path) = line
                    .split_once("  ")
                    .unwrap_or_else(|| panic!("bad manifest line {line:?}"));
                (path.to_owned(), sha.to_owned())
            })
            .collect()
    }

    /// Every entry below the root with type, mode, size, mtime and inode (link target): equal
    /// snapshots mean nothing was written, replaced (rename: new inode), touched or added.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        snapshot_into(self.path(), self.path(), &mut out);
        out
    }

    /// Regular files and symlinks below the root, as paths relative to it.
    fn files(&self) -> Vec<String> {
        self.snapshot()
            .into_iter()
            .filter(|(_, what)| !what.starts_with('d'))
            .map(|(path, _)| path.to_string_lossy().into_owned())
            .collect()
    }
}

fn snapshot_into(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("cannot list {}: {err}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = fs::symlink_metadata(&path).expect("stat");
        let rel = path.strip_prefix(root).expect("below root").to_path_buf();
        let common = format!(
            "mode={:o} mtime={}.{} ino={}",
            meta.mode() & 0o7777,
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ino()
        );
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).expect("readlink");
            out.insert(rel, format!("l {common} -> {}", target.display()));
        } else if meta.is_dir() {
            out.insert(rel, format!("d {common}"));
            snapshot_into(root, &path, out);
        } else {
            out.insert(rel, format!("f {common} size={}", meta.len()));
        }
    }
}

/// Panics naming the differences if two snapshots differ.
fn assert_same_tree(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
    let mut diffs = Vec::new();
    for (path, what) in before {
        match after.get(path) {
            None => diffs.push(format!("removed {}: {what}", path.display())),
            Some(now) if now != what => diffs.push(format!(
                "changed {}: {what}\n     now: {now}",
                path.display()
            )),
            Some(_) => {}
        }
    }
    for (path, what) in after {
        if !before.contains_key(path) {
            diffs.push(format!("added {}: {what}", path.display()));
        }
    }
    assert!(diffs.is_empty(), "the tree changed:\n{}", diffs.join("\n"));
}

/// The subcommand pages `kubelet-pivot man --out-dir` writes, as installed file names.
fn man_pages() -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(pivot_bin());
    cmd.arg("man").arg("--out-dir").arg(dir.path());
    let output = run(cmd);
    assert!(output.status.success(), "man --out-dir: {}", text(&output));
    let mut pages: Vec<String> = fs::read_dir(dir.path())
        .expect("list man dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    pages.sort();
    assert!(pages.contains(&"kubelet-pivot.1".to_owned()), "{pages:?}");
    pages
}

/// What `root` must hold after an install with `prefix` (relative paths, sorted).
fn expected_files(root: &Root) -> Vec<String> {
    let rel = |path: PathBuf| {
        path.strip_prefix(root.path())
            .expect("below root")
            .to_string_lossy()
            .into_owned()
    };
    let mut files = vec![
        rel(root.bin()),
        rel(root.plugin()),
        rel(root.plugin_complete()),
        rel(root.unit()),
        CONFIG.to_owned(),
        rel(root.manifest()),
        rel(root.share("doc/kubelet-pivot/README.md")),
        rel(root.share("bash-completion/completions/kubelet-pivot")),
        rel(root.share("zsh/site-functions/_kubelet-pivot")),
        rel(root.share("fish/vendor_completions.d/kubelet-pivot.fish")),
    ];
    for page in man_pages() {
        files.push(rel(root.share(&format!("man/man1/{page}"))));
    }
    files.sort();
    files
}

/// `KEY=value` settings of a unit file (all sections; the last one of a key wins).
fn unit_settings(unit: &str) -> BTreeMap<String, String> {
    unit.lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with('['))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Seconds of a systemd time span (`45s`, `1min 30s`, `500ms`; a bare number is seconds).
fn seconds(span: &str) -> f64 {
    let span = span.trim();
    span.parse::<f64>()
        .ok()
        .or_else(|| duration_secs(span))
        .unwrap_or_else(|| panic!("cannot read the time span {span:?}"))
}

// ---- systemd-analyze verify ----

fn require_tool(name: &str) -> PathBuf {
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    for dir in ["/usr/bin", "/bin", "/usr/sbin"] {
        let candidate = Path::new(dir).join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "{name} not found: install systemd (`apt-get install systemd`; .ci/run does) to check \
         the installed unit"
    );
}

/// Copies `src/.` into `dst` with `cp -a` (keeps modes, links and times; overwrites).
fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).expect("create dir");
    let mut cmd = Command::new("cp");
    cmd.arg("-a").arg(format!("{}/.", src.display())).arg(dst);
    let output = run(cmd);
    assert!(
        output.status.success(),
        "cp {} {}: {}",
        src.display(),
        dst.display(),
        text(&output)
    );
}

/// Absolute programs of the unit's `Exec*=` lines (without systemd's `-@:+!` prefixes).
fn exec_programs(unit: &str) -> Vec<String> {
    unit.lines()
        .filter(|line| line.starts_with("Exec"))
        .filter_map(|line| line.split_once('=').map(|(_, cmd)| cmd))
        .filter_map(|cmd| cmd.split_whitespace().next())
        .map(|prog| {
            prog.trim_start_matches(['-', '@', ':', '+', '!'])
                .to_owned()
        })
        .filter(|prog| prog.starts_with('/'))
        .collect()
}

/// `systemd-analyze --root=R verify kubelet-pivot.service`, where R is a copy of `root` plus
/// what the unit needs from the host that install.sh does not install: the host's system units
/// (`sysinit.target`, `multi-user.target`, ...) and host programs of other `Exec*=` lines
/// (`/bin/kill`). The kubelet-pivot binary is never taken from the host. Fails on a non-zero
/// exit and on any output: verify only warns (exit 0) about unknown keys and bad values.
fn verify_unit(root: &Root) -> Result<(), String> {
    let analyze = require_tool("systemd-analyze");
    let verify_root = tempfile::tempdir().expect("temp dir");
    let host_units = Path::new("/usr/lib/systemd/system");
    assert!(
        host_units.join("sysinit.target").is_file(),
        "{} has no sysinit.target: is systemd installed?",
        host_units.display()
    );
    // The host's units first, so that the installed files win.
    copy_tree(
        host_units,
        &verify_root.path().join("usr/lib/systemd/system"),
    );
    copy_tree(root.path(), verify_root.path());
    let unit_text = fs::read_to_string(root.unit()).map_err(|err| format!("no unit: {err}"))?;
    let own_binary = format!("{}/bin/kubelet-pivot", root.prefix);
    for program in exec_programs(&unit_text) {
        let inside = verify_root.path().join(program.trim_start_matches('/'));
        if program == own_binary || inside.exists() || !Path::new(&program).is_file() {
            continue;
        }
        fs::create_dir_all(inside.parent().expect("parent")).expect("create dir");
        fs::copy(&program, &inside).expect("copy host program");
    }
    let mut cmd = Command::new(analyze);
    cmd.arg(format!("--root={}", verify_root.path().display()))
        .arg("--man=no")
        .arg("verify")
        .arg(UNIT_NAME);
    let output = run(cmd);
    if output.status.success() && output.stdout.is_empty() && output.stderr.is_empty() {
        Ok(())
    } else {
        Err(text(&output))
    }
}

// ---- tests ----

#[test]
fn fresh_install_lays_out_the_files_with_their_modes() {
    let root = Root::new("/usr/local");
    let out = root.ok(&[]);
    assert!(
        out.contains("installed  /usr/local/bin/kubelet-pivot"),
        "{out}"
    );

    assert_eq!(root.files(), expected_files(&root));
    assert_eq!(mode(&root.bin()), 0o755);
    // The binary given with --binary, without its debug info (same build ID).
    assert_eq!(
        build_id(&root.bin()),
        build_id(&pivot_bin()),
        "the installed binary is not the one given with --binary"
    );
    // The kubectl plugin is a link to the binary beside it, and answers as `kubectl pivot`.
    assert_eq!(
        fs::read_link(root.plugin()).expect("kubectl-pivot is a symlink"),
        PathBuf::from("kubelet-pivot")
    );
    let mut plugin = Command::new(root.plugin());
    plugin.args(["rollout", "--help"]);
    let help = run(plugin);
    assert!(help.status.success(), "{}", text(&help));
    assert!(
        text(&help).contains("kubectl pivot rollout"),
        "{}",
        text(&help)
    );
    // kubectl's plugin completion runs kubectl_complete-pivot: a link that answers for
    // `kubectl pivot ro<TAB>`.
    assert_eq!(
        fs::read_link(root.plugin_complete()).expect("kubectl_complete-pivot is a symlink"),
        PathBuf::from("kubelet-pivot")
    );
    let mut complete = Command::new(root.plugin_complete());
    complete.args(["ro"]);
    let answer = run(complete);
    assert!(answer.status.success(), "{}", text(&answer));
    assert!(
        String::from_utf8_lossy(&answer.stdout)
            .lines()
            .any(|l| l.starts_with("rollout")),
        "{}",
        text(&answer)
    );
    for file in root.files() {
        if ![root.bin(), root.plugin(), root.plugin_complete()].contains(&root.at(&file)) {
            assert_eq!(mode(&root.at(&file)), 0o644, "{file}");
        }
    }
    // The stock unit is written for /usr/local: installed as it is.
    assert_eq!(
        read(&root.unit()),
        read(&repo().join("systemd/kubelet-pivot.service"))
    );
    assert_eq!(read(&root.config()), shipped_config());

    // The installed binary runs and prints its man page, as installed.
    let mut version = Command::new(root.bin());
    version.arg("--version");
    let output = run(version);
    assert!(output.status.success(), "{}", text(&output));
    let mut man = Command::new(root.bin());
    man.arg("man");
    assert_eq!(
        run(man).stdout,
        fs::read(root.share("man/man1/kubelet-pivot.1")).expect("man page")
    );

    // The manifest records every installed file with its hash.
    let recorded = root.recorded();
    let mut listed: Vec<String> = recorded.keys().map(|p| p[1..].to_owned()).collect();
    listed.push(
        root.manifest()
            .strip_prefix(root.path())
            .unwrap()
            .to_string_lossy()
            .into_owned(),
    );
    listed.sort();
    assert_eq!(listed, expected_files(&root));
    for (path, sha) in &recorded {
        assert_eq!(&sha256_file(&root.at(path)), sha, "{path}");
    }
}

#[test]
fn rerun_changes_nothing() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let before = root.snapshot();
    let out = root.ok(&[]);
    assert!(out.contains("done: 0 changed"), "{out}");
    assert!(!out.contains("installed "), "{out}");
    assert_same_tree(&before, &root.snapshot());
}

#[test]
fn rerun_repairs_a_mode_and_a_changed_binary() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    fs::set_permissions(root.bin(), fs::Permissions::from_mode(0o700)).expect("chmod");
    let page = root.share("man/man1/kubelet-pivot.1");
    write(&page, "stale\n");
    let out = root.ok(&[]);
    assert!(
        out.contains("mode       /usr/local/bin/kubelet-pivot"),
        "{out}"
    );
    assert!(
        out.contains("installed  /usr/local/share/man/man1/kubelet-pivot.1"),
        "{out}"
    );
    assert_eq!(mode(&root.bin()), 0o755);
    assert_ne!(read(&page), "stale\n");
}

/// An install whose init config the operator then changed, and that config's text.
fn installed_with_a_changed_config() -> (Root, String) {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let mine = format!("{}KUBELET_PIVOT_LOG_FORMAT=json\n", shipped_config());
    write(&root.config(), &mine);
    (root, mine)
}

#[test]
fn config_changed_locally_is_kept_when_the_shipped_one_did_not_change() {
    let (root, mine) = installed_with_a_changed_config();
    let before = root.snapshot();
    let out = root.ok(&[]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot"),
        "{out}"
    );
    assert_same_tree(&before, &root.snapshot());
    assert_eq!(read(&root.config()), mine);
}

#[test]
fn config_not_changed_locally_is_upgraded() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let new = root.path().join("new.default");
    write(&new, "KUBELET_ARGS=--v=2\n");
    let out = root.ok(&["--config", new.to_str().unwrap()]);
    assert!(
        out.contains("installed  /etc/default/kubelet-pivot"),
        "{out}"
    );
    assert_eq!(read(&root.config()), "KUBELET_ARGS=--v=2\n");
    assert!(!root.at("etc/default/kubelet-pivot.bak").exists());
    assert_eq!(
        root.recorded()["/etc/default/kubelet-pivot"],
        sha256_text("KUBELET_ARGS=--v=2\n")
    );
}

#[test]
fn changed_config_is_refused_without_force_and_nothing_is_written() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let mine = "KUBELET_ARGS=--v=4 # mine\n";
    write(&root.config(), mine);
    let new = root.path().join("new.default");
    write(&new, "KUBELET_ARGS=--v=2\n");
    let before = root.snapshot();

    let output = root.fails(&["--config", new.to_str().unwrap()], EXIT_CONFLICT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&root.config().display().to_string())
            && stderr.contains("--force")
            && stderr.contains("--keep-config")
            && stderr.contains("diff -u"),
        "the refusal must name the file, how to compare, --keep-config and --force: {stderr}"
    );
    assert!(
        !stderr.contains("merge your changes into"),
        "merging into the source tree's copy would not end the refusal: {stderr}"
    );
    assert_same_tree(&before, &root.snapshot());
    assert_eq!(read(&root.config()), mine);

    // --keep-config keeps the operator's file, and the next run keeps it quietly.
    let out = root.ok(&["--config", new.to_str().unwrap(), "--keep-config"]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot (yours"),
        "{out}"
    );
    assert_eq!(read(&root.config()), mine);
    let out = root.ok(&["--config", new.to_str().unwrap()]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot"),
        "{out}"
    );
    assert_eq!(read(&root.config()), mine);
}

#[test]
fn config_not_installed_by_the_script_is_kept() {
    let root = Root::new("/usr/local");
    fs::create_dir_all(root.at("etc/default")).unwrap();
    let theirs = "KUBELET_ARGS=--from-the-cluster-script\n";
    write(&root.config(), theirs);
    let out = root.ok(&[]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot (yours"),
        "{out}"
    );
    assert_eq!(read(&root.config()), theirs);
    let before = root.snapshot();
    root.ok(&[]);
    assert_same_tree(&before, &root.snapshot());
}

/// dpkg's remove-then-install: the conffile the uninstall kept is the operator's and wins,
/// whether or not the config to install changed meanwhile; never a refusal.
#[test]
fn reinstall_after_uninstall_keeps_the_operators_config() {
    let (root, mine) = installed_with_a_changed_config();
    root.ok(&["--uninstall"]);
    assert_eq!(root.files(), vec![CONFIG.to_owned()]);

    // The same source tree again.
    let out = root.ok(&[]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot (yours; it differs from"),
        "{out}"
    );
    assert_eq!(read(&root.config()), mine);
    assert_eq!(root.files(), expected_files(&root));
    let before = root.snapshot();
    let out = root.ok(&[]);
    assert!(out.contains("done: 0 changed"), "{out}");
    assert_same_tree(&before, &root.snapshot());

    // Uninstalled again, and re-installed from a tree whose config changed too.
    root.ok(&["--uninstall"]);
    let new = root.path().join("new.default");
    write(&new, "KUBELET_ARGS=--v=2\n");
    root.ok(&["--config", new.to_str().unwrap()]);
    assert_eq!(read(&root.config()), mine);
    // Still the operator's: a later --uninstall keeps it.
    let out = root.ok(&["--uninstall"]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot"),
        "{out}"
    );
    assert_eq!(read(&root.config()), mine);
}

/// The binary's profile directory as cargo lays it out, in a copy of the source tree (the
/// script, the unit, the init config): `target/{release,debug}/kubelet-pivot` are the
/// binary under test (a hard link, else a copy: a symlink would resolve to the debug dir).
fn tree_with_builds(profiles: &[&str]) -> tempfile::TempDir {
    let tree = tempfile::tempdir().expect("temp dir");
    for dir in ["scripts", "systemd"] {
        copy_tree(&repo().join(dir), &tree.path().join(dir));
    }
    for profile in profiles {
        let dir = tree.path().join("target").join(profile);
        fs::create_dir_all(&dir).expect("mkdir");
        let bin = dir.join("kubelet-pivot");
        if fs::hard_link(pivot_bin(), &bin).is_err() {
            fs::copy(pivot_bin(), &bin).expect("copy the binary");
        }
    }
    tree
}

/// `bash TREE/scripts/install.sh --destdir ROOT <args>`, without any DESTDIR of the environment.
fn run_tree_script(tree: &Path, root: &Root, args: &[&str]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(tree.join("scripts/install.sh"))
        .arg("--destdir")
        .arg(root.path())
        .args(args)
        .env_remove("DESTDIR");
    run(cmd)
}

#[test]
fn a_debug_build_is_refused_unless_allowed() {
    // Given with --binary (cargo's target/debug/): refused, nothing written.
    let root = Root::new("/usr/local");
    let bin = pivot_bin();
    let output = run_tree_script(&repo(), &root, &["--binary", bin.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(EXIT_USAGE), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is a debug build") && stderr.contains("--allow-debug"),
        "{stderr}"
    );
    assert_eq!(root.files(), Vec::<String>::new());

    // Only a debug build in the tree: refused by default, installed with --allow-debug.
    let tree = tree_with_builds(&["debug"]);
    let output = run_tree_script(tree.path(), &root, &[]);
    assert_eq!(output.status.code(), Some(EXIT_USAGE), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("only a debug build")
            && stderr.contains("cargo build --release")
            && stderr.contains("--allow-debug"),
        "{stderr}"
    );
    assert_eq!(root.files(), Vec::<String>::new());
    let output = run_tree_script(tree.path(), &root, &["--allow-debug"]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(build_id(&root.bin()), build_id(&pivot_bin()));

    // A release build in the tree is taken without the flag.
    let root = Root::new("/usr/local");
    let tree = tree_with_builds(&["release", "debug"]);
    let output = run_tree_script(tree.path(), &root, &[]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(root.bin().is_file());
}

#[test]
fn a_plugin_copy_of_an_earlier_install_becomes_a_link() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    fs::remove_file(root.plugin()).expect("rm plugin");
    fs::copy(root.bin(), root.plugin()).expect("copy");
    let out = root.ok(&[]);
    assert!(
        out.contains("installed  /usr/local/bin/kubectl-pivot -> kubelet-pivot"),
        "{out}"
    );
    assert!(root.plugin().is_symlink());
    root.ok(&["--uninstall"]);
    assert_eq!(root.files(), Vec::<String>::new());
}

#[test]
fn force_replaces_a_changed_config_and_keeps_a_backup() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let mine = "KUBELET_ARGS=--v=4 # mine\n";
    write(&root.config(), mine);
    let new = root.path().join("new.default");
    write(&new, "KUBELET_ARGS=--v=2\n");

    let out = root.ok(&["--config", new.to_str().unwrap(), "--force"]);
    assert!(
        out.contains("backup     /etc/default/kubelet-pivot.bak"),
        "{out}"
    );
    assert_eq!(read(&root.config()), "KUBELET_ARGS=--v=2\n");
    assert_eq!(read(&root.at("etc/default/kubelet-pivot.bak")), mine);

    // A second forced replacement keeps the first backup and adds another.
    let mine_again = "KUBELET_ARGS=--v=5 # mine again\n";
    write(&root.config(), mine_again);
    root.ok(&["--force"]);
    assert_eq!(read(&root.config()), shipped_config());
    assert_eq!(read(&root.at("etc/default/kubelet-pivot.bak")), mine);
    assert_eq!(
        read(&root.at("etc/default/kubelet-pivot.bak.1")),
        mine_again
    );
}

#[test]
fn uninstall_removes_what_was_installed_and_keeps_a_changed_config() {
    let root = Root::new("/usr/local");
    root.ok(&["--enable"]);
    let wants = root.at("etc/systemd/system/multi-user.target.wants/kubelet-pivot.service");
    assert!(wants.is_symlink(), "--enable made no WantedBy= link");
    let mine = "KUBELET_ARGS=--v=4 # mine\n";
    write(&root.config(), mine);

    let out = root.ok(&["--uninstall"]);
    assert!(
        out.contains("kept       /etc/default/kubelet-pivot (changed since it was installed"),
        "{out}"
    );
    assert_eq!(root.files(), vec![CONFIG.to_owned()]);
    assert_eq!(read(&root.config()), mine);

    // Again: nothing left to do.
    let before = root.snapshot();
    root.ok(&["--uninstall"]);
    assert_same_tree(&before, &root.snapshot());
}

#[test]
fn uninstall_removes_an_unchanged_config() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let out = root.ok(&["--uninstall"]);
    assert!(
        out.contains("removed    /etc/default/kubelet-pivot"),
        "{out}"
    );
    assert_eq!(root.files(), Vec::<String>::new());
}

#[test]
fn enable_links_the_unit_as_systemctl_would() {
    let root = Root::new("/usr/local");
    root.ok(&["--enable"]);
    let before = root.snapshot();
    root.ok(&["--enable"]);
    assert_same_tree(&before, &root.snapshot());

    let systemctl = require_tool("systemctl");
    let mut cmd = Command::new(systemctl);
    cmd.arg(format!("--root={}", root.path().display()))
        .args(["is-enabled", UNIT_NAME]);
    let output = run(cmd);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "enabled",
        "{}",
        text(&output)
    );
}

/// A node that still has kubeadm's kubelet.service enabled is warned (on stderr, exit 0) with
/// what to do; once that unit is masked, or was never enabled, nothing is said.
#[test]
fn an_enabled_kubelet_service_is_warned_about_until_it_is_masked() {
    let root = Root::new("/usr/local");
    let units = root.at("etc/systemd/system");
    fs::create_dir_all(&units).unwrap();
    write(
        &units.join("kubelet.service"),
        "[Service]\nExecStart=/usr/bin/kubelet\n[Install]\nWantedBy=multi-user.target\n",
    );
    // Not enabled: no warning.
    let quiet = root.run(&[]);
    assert!(quiet.status.success(), "{}", text(&quiet));
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("kubelet.service"),
        "{}",
        text(&quiet)
    );
    // Enabled (as `systemctl enable kubelet` leaves it): a warning that says what to run.
    let wants = units.join("multi-user.target.wants");
    fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(
        "/etc/systemd/system/kubelet.service",
        wants.join("kubelet.service"),
    )
    .unwrap();
    let warned = root.run(&[]);
    assert!(warned.status.success(), "{}", text(&warned));
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(
        stderr.contains("warning: kubelet.service is enabled")
            && stderr.contains("systemctl mask kubelet.service")
            && stderr.contains("Moving a kubeadm node over"),
        "{}",
        text(&warned)
    );
    // Masked, as README says: quiet again (a masked unit never starts, whatever links remain).
    fs::remove_file(units.join("kubelet.service")).unwrap();
    std::os::unix::fs::symlink("/dev/null", units.join("kubelet.service")).unwrap();
    let masked = root.run(&[]);
    assert!(masked.status.success(), "{}", text(&masked));
    assert!(
        !String::from_utf8_lossy(&masked.stderr).contains("kubelet.service"),
        "{}",
        text(&masked)
    );
    // And systemctl agrees with the script about both states, where it is installed.
    if let Some(systemctl) = find_systemctl() {
        let out = Command::new(systemctl)
            .arg(format!("--root={}", root.path().display()))
            .args(["is-enabled", "kubelet.service"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "masked");
    }
}

fn find_systemctl() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("systemctl"))
            .find(|path| path.is_file())
    })
}

#[test]
fn installed_unit_passes_systemd_analyze_verify() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    verify_unit(&root).unwrap_or_else(|err| panic!("systemd-analyze verify failed:\n{err}"));
}

#[test]
fn verify_catches_a_broken_unit_and_a_missing_binary() {
    // A key systemd does not know is only a warning, exit 0: the output must fail it.
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let unit = read(&root.unit());
    write(
        &root.unit(),
        &unit.replace("Restart=always", "Restrat=always"),
    );
    let err = verify_unit(&root).expect_err("verify passed a unit with an unknown key");
    assert!(err.contains("Restrat"), "{err}");

    // ExecStart= names a binary that is not executable under the root.
    write(&root.unit(), &unit);
    fs::set_permissions(root.bin(), fs::Permissions::from_mode(0o644)).expect("chmod");
    let err = verify_unit(&root).expect_err("verify passed a unit whose binary cannot run");
    assert!(err.contains("/usr/local/bin/kubelet-pivot"), "{err}");
}

#[test]
fn prefix_usr_installs_a_vendor_unit_with_rewritten_paths() {
    let root = Root::new("/usr");
    let out = root.ok(&["--enable"]);
    assert!(
        out.contains("installed  /usr/lib/systemd/system/kubelet-pivot.service"),
        "{out}"
    );
    let mut files = expected_files(&root);
    files.push("etc/systemd/system/multi-user.target.wants/kubelet-pivot.service".to_owned());
    files.sort();
    assert_eq!(root.files(), files);
    assert!(!root.at("etc/systemd/system/kubelet-pivot.service").exists());
    assert_eq!(
        fs::read_link(root.at("etc/systemd/system/multi-user.target.wants/kubelet-pivot.service"))
            .unwrap(),
        PathBuf::from("/usr/lib/systemd/system/kubelet-pivot.service")
    );

    let unit = read(&root.unit());
    let settings = unit_settings(&unit);
    assert!(
        settings["ExecStart"].starts_with("/usr/bin/kubelet-pivot bootstrap -- "),
        "{unit}"
    );
    // Only the prefix changed, and no /usr/local path is left in a setting.
    let settings_lines = |unit: &str| -> Vec<String> {
        unit.lines()
            .filter(|line| !line.starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    let stock = read(&repo().join("systemd/kubelet-pivot.service"));
    assert_eq!(
        settings_lines(&unit),
        settings_lines(&stock.replace("/usr/local/", "/usr/"))
    );
    assert!(
        !settings_lines(&unit)
            .iter()
            .any(|l| l.contains("/usr/local/")),
        "a /usr/local path is left in the unit for --prefix /usr:\n{unit}"
    );
    verify_unit(&root).unwrap_or_else(|err| panic!("systemd-analyze verify failed:\n{err}"));

    root.ok(&["--uninstall"]);
    assert_eq!(root.files(), Vec::<String>::new());
}

#[test]
fn unit_documentation_points_at_installed_files() {
    for prefix in ["/usr/local", "/usr", "/opt/kubelet-pivot"] {
        let root = Root::new(prefix);
        root.ok(&[]);
        let unit = read(&root.unit());
        let docs = unit_settings(&unit)
            .get("Documentation")
            .cloned()
            .unwrap_or_default();
        for doc in docs.split_whitespace() {
            let path = if let Some(path) = doc.strip_prefix("file://") {
                root.at(path)
            } else if let Some(page) = doc.strip_prefix("man:") {
                let (name, section) = page
                    .trim_end_matches(')')
                    .split_once('(')
                    .unwrap_or_else(|| panic!("bad man reference {doc}"));
                root.share(&format!("man/man{section}/{name}.{section}"))
            } else {
                continue;
            };
            assert!(
                path.is_file(),
                "{prefix}: Documentation={doc} is not installed"
            );
        }
    }
}

#[test]
fn unit_and_init_config_agree_with_the_binary() {
    let root = Root::new("/usr/local");
    root.ok(&[]);
    let unit = read(&root.unit());
    let settings = unit_settings(&unit);
    assert_eq!(
        settings["EnvironmentFile"], "-/etc/default/kubelet-pivot",
        "the unit must read the installed init config"
    );
    let help = help_env("bootstrap");
    let stop_default = help["KUBELET_PIVOT_STOP_TIMEOUT"]
        .1
        .clone()
        .expect("--stop-timeout has a default");
    assert!(
        seconds(&settings["TimeoutStopSec"]) > seconds(&stop_default),
        "TimeoutStopSec={} must exceed the kubelet's stop timeout {stop_default}",
        settings["TimeoutStopSec"]
    );

    // Every KUBELET_PIVOT_* setting, commented or not, names a real flag, and a commented
    // one shows that flag's default.
    let config = read(&root.config());
    let mut seen = 0;
    for line in config.lines() {
        let commented = line.starts_with('#');
        let setting = line.trim_start_matches('#');
        let Some((key, value)) = setting.split_once('=') else {
            continue;
        };
        if !key.starts_with("KUBELET_PIVOT_") || key.contains(' ') {
            continue;
        }
        seen += 1;
        let (flag, default) = help
            .get(key)
            .unwrap_or_else(|| panic!("{key} in the init config is not a bootstrap flag"));
        if commented {
            // clap shows an empty default as `""`.
            if let Some(default) = default.as_deref().map(|d| d.trim_matches('"')) {
                assert_eq!(
                    value, default,
                    "{key} ({flag}): the comment shows a wrong default"
                );
            }
        }
    }
    assert!(
        seen >= 5,
        "the init config documents too few flags:\n{config}"
    );
    assert!(
        config.lines().any(|line| line.starts_with("KUBELET_ARGS=")),
        "the init config sets no KUBELET_ARGS (the unit's ExecStart= uses it)"
    );
}

/// The `KUBELET_PIVOT_*` names of `text`'s settings, commented (`#NAME=`) or not.
fn setting_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.trim_start_matches('#').split_once('='))
        .map(|(key, _)| key)
        .filter(|key| {
            key.starts_with("KUBELET_PIVOT_")
                && key.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// The env file, the unit and the clap definitions agree: the file lists every variable the
/// unit's command (`kubelet-pivot bootstrap`, reading the file through `EnvironmentFile=`)
/// reads, and nothing else; every one is an `env = "..."` of src/cli.rs; the variables
/// `ExecStart=` expands are set (not commented) in the file; the unit names only real ones.
#[test]
fn init_config_lists_every_variable_the_unit_passes() {
    let config = shipped_config();
    let unit = read(&repo().join("systemd/kubelet-pivot.service"));
    let settings = unit_settings(&unit);
    assert_eq!(settings["EnvironmentFile"], "-/etc/default/kubelet-pivot");
    let exec = &settings["ExecStart"];
    assert!(
        exec.contains("/kubelet-pivot bootstrap "),
        "the unit runs something other than bootstrap: {exec}"
    );

    let clap: std::collections::BTreeSet<String> = help_env("bootstrap").into_keys().collect();
    let listed = setting_names(&config);
    let missing: Vec<&String> = clap.difference(&listed).collect();
    let unknown: Vec<&String> = listed.difference(&clap).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "systemd/kubelet-pivot.default must list exactly bootstrap's variables: missing          {missing:?}, not bootstrap's {unknown:?}"
    );

    let cli = read(&repo().join("src/cli.rs"));
    for name in &clap {
        assert!(
            cli.contains(&format!("env = \"{name}\"")),
            "{name} is no env = attribute of src/cli.rs"
        );
    }

    // $VAR and ${VAR} of ExecStart=: set in the file.
    let set: Vec<&str> = config
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('=').map(|(key, _)| key))
        .collect();
    let mut vars = Vec::new();
    for word in exec.split_whitespace() {
        if let Some(var) = word.strip_prefix('$') {
            vars.push(var.trim_start_matches('{').trim_end_matches('}').to_owned());
        }
    }
    assert!(!vars.is_empty(), "ExecStart= expands no variable: {exec}");
    for var in &vars {
        assert!(
            set.contains(&var.as_str()),
            "ExecStart= expands ${var}, which the init config does not set"
        );
    }
    let named = unit
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|word| word.starts_with("KUBELET_PIVOT_") && word.len() > "KUBELET_PIVOT_".len());
    let mut seen = 0;
    for name in named {
        seen += 1;
        assert!(
            clap.contains(name),
            "the unit names {name}, which is not bootstrap's"
        );
    }
    assert!(
        seen > 0,
        "the unit's comments name no KUBELET_PIVOT_ variable: the check proves nothing"
    );
}

#[test]
fn usage_errors_exit_2_and_write_nothing() {
    let root = Root::new("/usr/local");
    for args in [
        &["--no-such-option"][..],
        &["--prefix", "relative/path"],
        &["--prefix", "/"],
        &["--prefix", "/opt/with space"],
        &["--config", "/nonexistent/kubelet-pivot.default"],
        &["--enable", "--uninstall"],
        &["--force", "--keep-config"],
    ] {
        let output = root.fails(args, EXIT_USAGE);
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("install.sh: error:"),
            "{args:?}: {}",
            text(&output)
        );
    }
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .arg("--destdir")
        .arg(root.path())
        .arg("--binary")
        .arg(root.path().join("no-such-binary"));
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(EXIT_USAGE), "{}", text(&output));
    assert_eq!(root.files(), Vec::<String>::new());
}

#[test]
fn destdir_from_the_environment_is_honoured() {
    let root = Root::new("/usr/local");
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .arg("--binary")
        .arg(pivot_bin())
        .arg("--allow-debug")
        .env("DESTDIR", root.path());
    let output = run(cmd);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(root.files(), expected_files(&root));
}

#[test]
fn help_documents_every_option() {
    let mut cmd = Command::new("bash");
    cmd.arg(script()).arg("--help");
    let output = run(cmd);
    assert!(output.status.success(), "{}", text(&output));
    let help = String::from_utf8_lossy(&output.stdout);
    for option in [
        "--prefix",
        "--destdir",
        "--binary",
        "--config",
        "--force",
        "--enable",
        "--debug-symbols",
        "--allow-debug",
        "--keep-config",
        "--uninstall",
        "OBJCOPY",
        "Exit status",
    ] {
        assert!(
            help.contains(option),
            "--help does not mention {option}:\n{help}"
        );
    }
}

#[test]
fn a_failed_step_exits_1() {
    // /etc under the root is a file: the unit's directory cannot be made.
    let root = Root::new("/usr/local");
    write(&root.at("etc"), "not a directory\n");
    let output = root.fails(&[], 1);
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("install.sh: error:"),
        "{}",
        text(&output)
    );

    // A directory where the binary goes is not replaced.
    let root = Root::new("/usr/local");
    fs::create_dir_all(root.bin()).unwrap();
    root.fails(&[], 1);
    assert!(root.bin().is_dir());
}

// ---- the binary without its debug info; --debug-symbols ----

/// `readelf ARGS FILE`'s stdout (binutils; a missing readelf fails the test).
fn readelf(args: &[&str], file: &Path) -> String {
    let mut cmd = Command::new(require_tool("readelf"));
    cmd.args(args).arg(file);
    let output = run(cmd);
    assert!(
        output.status.success(),
        "readelf {args:?} {}: {}",
        file.display(),
        text(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The ELF section names of `file`, from `readelf -S -W` (`  [12] .text  PROGBITS ...`).
fn sections(file: &Path) -> Vec<String> {
    readelf(&["-S", "-W"], file)
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix('['))
        .filter_map(|rest| rest.split_once(']'))
        .filter_map(|(_, rest)| rest.split_whitespace().next())
        .filter(|name| name.starts_with('.'))
        .map(str::to_owned)
        .collect()
}

/// The DWARF sections of `file` (`.debug_info`, `.debug_line`, ...). `.debug_gdb_scripts` is
/// not debug info: rustc puts it in a loaded segment (gdb's pretty-printer hint), and
/// `objcopy --strip-all` keeps it.
fn dwarf_sections(file: &Path) -> Vec<String> {
    sections(file)
        .into_iter()
        .filter(|name| name.starts_with(".debug_") || name.starts_with(".zdebug_"))
        .filter(|name| name != ".debug_gdb_scripts")
        .collect()
}

/// The GNU build ID of `file` (`readelf -n`), which the linker derives from the whole output.
fn build_id(file: &Path) -> String {
    readelf(&["-n"], file)
        .lines()
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build ID", file.display()))
        .trim()
        .to_owned()
}

/// The `.gnu_debuglink` of `file`: the debug file's name and its CRC-32 (the name,
/// NUL-padded to 4 bytes, then the CRC in the file's byte order: little-endian here).
fn debuglink(file: &Path) -> (String, u32) {
    let dump = tempfile::NamedTempFile::new().expect("temp file");
    let mut cmd = Command::new(require_tool("objcopy"));
    cmd.arg(format!(
        "--dump-section=.gnu_debuglink={}",
        dump.path().display()
    ))
    .arg(file)
    .arg(dump.path().with_extension("discard"));
    let output = run(cmd);
    let _ = fs::remove_file(dump.path().with_extension("discard"));
    assert!(
        output.status.success(),
        "{} has no .gnu_debuglink: {}",
        file.display(),
        text(&output)
    );
    let bytes = fs::read(dump.path()).expect("debuglink dump");
    let name_len = bytes
        .iter()
        .position(|&b| b == 0)
        .expect("NUL after the name");
    let crc_at = (name_len + 1).div_ceil(4) * 4;
    let crc = bytes
        .get(crc_at..crc_at + 4)
        .unwrap_or_else(|| panic!("short .gnu_debuglink: {bytes:?}"));
    (
        String::from_utf8_lossy(&bytes[..name_len]).into_owned(),
        u32::from_le_bytes(crc.try_into().expect("4 bytes")),
    )
}

/// CRC-32 (IEEE 802.3, reflected, as zlib and gdb's debuglink check compute it).
fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, entry) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *entry = c;
    }
    !data.iter().fold(!0u32, |crc, &b| {
        table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

impl Root {
    /// Where --debug-symbols puts the debug file: below /usr/lib/debug, at the binary's path.
    fn debug_file(&self) -> PathBuf {
        self.at(&format!(
            "usr/lib/debug{}/bin/kubelet-pivot.debug",
            self.prefix
        ))
    }

    /// The build-ID link to the debug file (`/usr/lib/debug/.build-id/NN/REST.debug`).
    fn build_id_link(&self, id: &str) -> PathBuf {
        self.at(&format!(
            "usr/lib/debug/.build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        ))
    }
}

#[test]
fn installed_binary_has_no_debug_info_and_links_to_its_debug_file() {
    assert!(
        !dwarf_sections(&pivot_bin()).is_empty(),
        "the binary under test has no debug info: the test proves nothing"
    );
    let root = Root::new("/usr/local");
    root.ok(&[]);
    for bin in [root.bin(), root.plugin()] {
        assert_eq!(
            dwarf_sections(&bin),
            Vec::<String>::new(),
            "{}",
            bin.display()
        );
        // The symbol table went to the debug file too.
        assert!(
            !sections(&bin).contains(&".symtab".to_owned()),
            "{}",
            bin.display()
        );
        assert_eq!(debuglink(&bin).0, "kubelet-pivot.debug");
    }
    let installed = fs::metadata(root.bin()).expect("stat").len();
    let given = fs::metadata(pivot_bin()).expect("stat").len();
    assert!(
        installed * 2 < given,
        "the installed binary ({installed} bytes) is not much smaller than the one given \
         ({given} bytes)"
    );
    // Without --debug-symbols, no debug file.
    assert!(!root.at("usr/lib/debug").exists());
}

#[test]
fn debug_symbols_installs_the_matching_debug_file_and_uninstall_removes_it() {
    let root = Root::new("/usr/local");
    let out = root.ok(&["--debug-symbols"]);
    let id = build_id(&pivot_bin());
    let debug = root.debug_file();
    let link = root.build_id_link(&id);
    assert!(
        out.contains("installed  /usr/lib/debug/usr/local/bin/kubelet-pivot.debug"),
        "{out}"
    );
    let mut files = expected_files(&root);
    for path in [&debug, &link] {
        files.push(
            path.strip_prefix(root.path())
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    files.sort();
    assert_eq!(root.files(), files);
    assert_eq!(mode(&debug), 0o644);

    // The debug file holds the DWARF the binary lost, under the same build ID, and its CRC is
    // the one the binary's .gnu_debuglink records (gdb checks both).
    assert!(
        dwarf_sections(&debug).contains(&".debug_info".to_owned()),
        "{:?}",
        sections(&debug)
    );
    assert!(
        sections(&debug).contains(&".symtab".to_owned()),
        "{:?}",
        sections(&debug)
    );
    assert_eq!(build_id(&debug), id);
    assert_eq!(build_id(&root.bin()), id);
    let (name, crc) = debuglink(&root.bin());
    assert_eq!(name, "kubelet-pivot.debug");
    assert_eq!(
        crc,
        crc32(&fs::read(&debug).expect("debug file")),
        "the .gnu_debuglink CRC does not match the installed debug file"
    );
    // The build-ID link is relative (it holds below DESTDIR too) and leads to the debug file.
    assert_eq!(
        fs::read_link(&link).expect("build-id link"),
        PathBuf::from("../../usr/local/bin/kubelet-pivot.debug")
    );
    assert_eq!(
        fs::canonicalize(&link).unwrap(),
        fs::canonicalize(&debug).unwrap()
    );
    // The manifest records both, with true sums.
    let recorded = root.recorded();
    for path in [&debug, &link] {
        let target = format!("/{}", path.strip_prefix(root.path()).unwrap().display());
        assert_eq!(recorded.get(&target), Some(&sha256_file(path)), "{target}");
    }

    // A re-run changes nothing.
    let before = root.snapshot();
    let out = root.ok(&["--debug-symbols"]);
    assert!(out.contains("done: 0 changed"), "{out}");
    assert_same_tree(&before, &root.snapshot());

    // Uninstall removes them (and the directories below /usr/lib/debug they made).
    root.ok(&["--uninstall"]);
    assert_eq!(root.files(), Vec::<String>::new());
    assert!(!root.at("usr/lib/debug/.build-id").exists());
    assert!(!root.at("usr/lib/debug/usr").exists());

    // An install without --debug-symbols after one with removes the debug file.
    root.ok(&["--debug-symbols"]);
    let out = root.ok(&[]);
    assert!(
        out.contains("removed    /usr/lib/debug/usr/local/bin/kubelet-pivot.debug"),
        "{out}"
    );
    assert_eq!(root.files(), expected_files(&root));
}

#[test]
fn without_objcopy_the_binary_is_installed_as_it_is_with_a_warning() {
    let root = Root::new("/usr/local");
    let mut cmd = root.command(&[]);
    cmd.env("OBJCOPY", "/nonexistent/objcopy");
    let output = run(cmd);
    assert!(output.status.success(), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning:") && stderr.contains("binutils"),
        "{stderr}"
    );
    assert_eq!(
        fs::read(root.bin()).expect("installed binary"),
        fs::read(pivot_bin()).expect("binary under test")
    );
    assert_eq!(root.files(), expected_files(&root));

    // --debug-symbols cannot be done then: exit 2, nothing written.
    let root = Root::new("/usr/local");
    let mut cmd = root.command(&["--debug-symbols"]);
    cmd.env("OBJCOPY", "/nonexistent/objcopy");
    let output = run(cmd);
    assert_eq!(output.status.code(), Some(EXIT_USAGE), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("binutils"),
        "{}",
        text(&output)
    );
    assert_eq!(root.files(), Vec::<String>::new());
}
