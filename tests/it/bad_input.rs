//! Bad input is refused up front: one clear `kubelet-pivot: error: ...` line naming the
//! offending path, a non-zero exit, and nothing started or left behind.

use crate::support;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::lock_state::{claims_dir, holder_path};
use support::{node_paths, pivot_bin, stand_in_bin, Scene};

/// The prefix of kubelet-pivot's one-line fatal errors.
const ERROR_PREFIX: &str = "kubelet-pivot: error:";
/// The unprivileged user the binary runs as when the tests run as root (`nobody`).
const NOBODY: u32 = 65534;

/// Runs `cmd` to completion with stdout and stderr captured.
fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|err| panic!("failed to run {:?}: {err}", cmd.get_program()))
}

/// `kubelet-pivot bootstrap` in `scene` running the stand-in, output captured.
fn bootstrap(scene: &Scene) -> Command {
    scene.pivot(&["bootstrap"], &[], &[])
}

/// `kubelet-pivot bootstrap --lock-file <lock> ... -- <kubelet>`, for a lock path or kubelet
/// other than the scene's.
fn bootstrap_with(scene: &Scene, lock: &Path, kubelet: &Path) -> Command {
    let mut cmd = Command::new(pivot_bin());
    cmd.arg("bootstrap");
    node_paths(&mut cmd, lock, &scene.config_dir())
        .arg("--")
        .arg(kubelet)
        .env_remove("NOTIFY_SOCKET")
        .envs(scene.stand_in_env());
    cmd
}

/// Asserts a refused start: non-zero exit, exactly one error line on stderr that names
/// `path`, and no kubelet, holder record or claim left behind.
fn assert_refused(scene: &Scene, out: &Output, path: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "kubelet-pivot accepted bad input ({}); stderr:\n{stderr}",
        out.status
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with(ERROR_PREFIX))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "expected exactly one `{ERROR_PREFIX}` line; stderr:\n{stderr}"
    );
    let path_text = path.display().to_string();
    assert!(
        errors[0].contains(&path_text),
        "the error does not name {path_text}: {}",
        errors[0]
    );
    assert!(
        scene.read_log().is_empty(),
        "a stand-in kubelet was started:\n{:#?}",
        scene.read_log()
    );
    let holder = holder_path(&scene.state_dir());
    assert!(!holder.exists(), "a holder record was written: {holder:?}");
    let claims = claims_dir(&scene.state_dir());
    let leftover: Vec<_> = fs::read_dir(&claims)
        .map(|dir| dir.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    assert!(leftover.is_empty(), "claims left behind: {leftover:?}");
}

#[test]
fn missing_kubelet_binary_is_refused() {
    let scene = Scene::new();
    let missing = scene.path().join("no-such-dir").join("kubelet");
    let out = run(bootstrap_with(&scene, &scene.lock(), &missing));
    assert_refused(&scene, &out, &missing);
    assert!(
        !scene.lock().exists(),
        "the lock file was created (and maybe taken) for a kubelet that cannot start"
    );
}

#[test]
fn lock_path_that_is_a_directory_is_refused() {
    let scene = Scene::new();
    fs::create_dir(scene.lock()).unwrap_or_else(|err| panic!("mkdir lock path: {err}"));
    let out = run(bootstrap(&scene));
    assert_refused(&scene, &out, &scene.lock());
    assert!(scene.lock().is_dir(), "the directory was replaced");
}

#[test]
fn lock_path_that_is_a_symlink_is_refused() {
    let scene = Scene::new();
    let target = scene.path().join("elsewhere.lock");
    symlink(&target, scene.lock()).unwrap_or_else(|err| panic!("symlink lock path: {err}"));
    let out = run(bootstrap(&scene));
    assert_refused(&scene, &out, &scene.lock());
    assert!(
        !target.exists(),
        "the symlink was followed: {} was created",
        target.display()
    );
}

/// Runs `cmd` without write access to `dir`: as root, as nobody against a root-owned 0755
/// `dir` (root writes anywhere); otherwise with `dir` made 0555 for the run.
fn run_without_write_access(scene: &Scene, dir: &Path, cmd: Command) -> Output {
    let chmod = |path: &Path, mode: u32| {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|err| panic!("chmod {mode:o} {}: {err}", path.display()));
    };
    if !nix::unistd::geteuid().is_root() {
        chmod(dir, 0o555);
        let out = run(cmd);
        // Writable again, so that the temp dir can be removed.
        chmod(dir, 0o755);
        return out;
    }
    // Nobody must be able to reach `dir`: the scene dir is 0700 from tempfile.
    let mut reach = Some(dir);
    while let Some(at) = reach.filter(|at| at.starts_with(scene.path())) {
        chmod(at, 0o755);
        reach = at.parent();
    }
    // Nobody may not be able to reach the build's binaries either (a checkout
    // under a 0700 directory): run copies of them from the scene.
    let mut as_nobody = Command::new(reachable_copy(scene, &support::pivot_bin()));
    let stand_in = support::stand_in_bin();
    let stand_in_copy = reachable_copy(scene, &stand_in);
    as_nobody.args(cmd.get_args().map(|arg| {
        if Path::new(arg) == stand_in {
            stand_in_copy.as_os_str()
        } else {
            arg
        }
    }));
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => as_nobody.env(key, value),
            None => as_nobody.env_remove(key),
        };
    }
    as_nobody.uid(NOBODY).gid(NOBODY);
    run(as_nobody)
}

/// A copy of `bin` in `<scene>/bin` (0755 up to the scene root), runnable by nobody.
fn reachable_copy(scene: &Scene, bin: &Path) -> std::path::PathBuf {
    let dir = scene.path().join("bin");
    fs::create_dir_all(&dir).unwrap_or_else(|err| panic!("mkdir {}: {err}", dir.display()));
    for path in [scene.path(), dir.as_path()] {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|err| panic!("chmod {}: {err}", path.display()));
    }
    let name = bin
        .file_name()
        .unwrap_or_else(|| panic!("{} has no file name", bin.display()));
    let copy = dir.join(name);
    fs::copy(bin, &copy).unwrap_or_else(|err| panic!("copy {}: {err}", bin.display()));
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|err| panic!("chmod {}: {err}", copy.display()));
    copy
}

#[test]
fn unwritable_lock_directory_is_refused() {
    let scene = Scene::new();
    let lock_dir = scene.path().join("lock");
    assert_eq!(scene.lock().parent(), Some(lock_dir.as_path()));
    let out = run_without_write_access(&scene, &lock_dir, bootstrap(&scene));
    assert_refused(&scene, &out, &scene.lock());
    assert!(!scene.lock().exists(), "a lock file was created");
}

#[test]
fn uncreatable_lock_directory_is_refused() {
    let scene = Scene::new();
    let parent = scene.path().join("lock");
    let lock_dir = parent.join("missing");
    let lock = lock_dir.join("kubelet.lock");
    let cmd = bootstrap_with(&scene, &lock, &stand_in_bin());
    let out = run_without_write_access(&scene, &parent, cmd);
    assert_refused(&scene, &out, &lock_dir);
    assert!(!lock_dir.exists(), "the lock directory was created");
}

#[test]
fn self_hosted_generation_zero_is_refused() {
    let scene = Scene::new();
    let out = run(scene.pivot(&["self-hosted", "--generation", "0"], &[], &[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "generation 0 (the bootstrap's) was accepted for self-hosted ({}); stderr:\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("--generation"),
        "the error does not name --generation:\n{stderr}"
    );
    assert!(
        scene.read_log().is_empty(),
        "a stand-in kubelet was started"
    );
    let claims = claims_dir(&scene.state_dir());
    assert!(
        !claims.exists(),
        "a claim was registered for a rejected command line"
    );
    assert!(!scene.lock().exists(), "a lock file was created");
}
