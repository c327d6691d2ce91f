//! Real kubectl against the fake API server. Tests that need it are skipped (with the reason
//! printed) when it is not installed; CI installs Debian's `kubernetes-client`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// kubectl to run: `$KUBECTL` or `kubectl` on PATH; `None` (with the reason printed) if it
/// cannot run.
pub fn kubectl_binary() -> Option<PathBuf> {
    let binary = PathBuf::from(std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()));
    match Command::new(&binary).args(["version", "--client"]).output() {
        Ok(output) if output.status.success() => Some(binary),
        Ok(output) => {
            eprintln!(
                "SKIPPED: {} version --client failed: {}",
                binary.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            None
        }
        Err(err) => {
            eprintln!(
                "SKIPPED: kubectl is not installed ({}: {err}); install the kubernetes-client package",
                binary.display()
            );
            None
        }
    }
}

/// kubectl with its own temp dir: the kubeconfig (`<dir>/kubeconfig`) and discovery cache.
pub struct Kubectl {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// `None` (with the reason printed) if kubectl cannot run; otherwise `write_kubeconfig`
    /// writes the kubeconfig to the path it is given (e.g. `ApiServer::write_kubeconfig`).
    pub fn new(write_kubeconfig: impl FnOnce(&Path)) -> Option<Kubectl> {
        let binary = kubectl_binary()?;
        let dir = tempfile::tempdir().expect("temp dir");
        write_kubeconfig(&dir.path().join("kubeconfig"));
        Some(Kubectl { binary, dir })
    }

    /// A path in kubectl's temp dir.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs kubectl with `args`, to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        let cache = self.path("cache");
        Command::new(&self.binary)
            .args(args)
            .arg(format!("--cache-dir={}", cache.display()))
            .env("KUBECONFIG", self.path("kubeconfig"))
            .output()
            .unwrap_or_else(|err| panic!("failed to run kubectl {args:?}: {err}"))
    }

    /// Runs kubectl, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs kubectl, asserts failure, returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            !output.status.success(),
            "kubectl {args:?} should have failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    }
}
