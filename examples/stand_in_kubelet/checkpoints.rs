//! The CPU and memory manager checkpoints in the root dir: restored, created or refused
//! as the real kubelet does.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::unistd::getpid;

use crate::config::KubeletConfig;
use crate::error::Error;
use crate::events::Events;
use crate::{refuse, CPU_MANAGER_STATE, MEMORY_MANAGER_STATE, ONLINE_CPUS};

/// One of the kubelet's resource-manager checkpoints in the root dir.
struct Checkpoint {
    file_name: &'static str,
    /// As in the kubelet's advice to "delete the <manager> checkpoint file".
    manager: &'static str,
    /// The kubelet's container manager wraps the manager's start error in this.
    start_error: &'static str,
    /// Prefix of the policy-mismatch error (the memory manager tags its own errors).
    mismatch_prefix: &'static str,
    /// `reason` of the `crash` line when the start is refused.
    reason: &'static str,
}

const CPU_CHECKPOINT: Checkpoint = Checkpoint {
    file_name: CPU_MANAGER_STATE,
    manager: "CPU manager",
    start_error: "start cpu manager error",
    mismatch_prefix: "",
    reason: "cpu-manager-state",
};

const MEMORY_CHECKPOINT: Checkpoint = Checkpoint {
    file_name: MEMORY_MANAGER_STATE,
    manager: "memory manager",
    start_error: "start memory manager error",
    mismatch_prefix: "[memorymanager] ",
    reason: "memory-manager-state",
};

/// Restores (or creates) the CPU, then the memory manager checkpoint in `root`; refuses to
/// start (exit 1) on a policy mismatch or a corrupted checkpoint, as the kubelet does.
pub(super) fn restore_checkpoints(
    root: &Path,
    config: &KubeletConfig,
    events: &Events,
) -> Result<(), Error> {
    let cpu_policy = config.cpu_manager_policy.as_str();
    restore_checkpoint(root, &CPU_CHECKPOINT, cpu_policy, events, || {
        // The static policy starts with every CPU in the shared pool; `none` keeps no set.
        let cpu_set = if cpu_policy == "static" {
            online_cpus()
        } else {
            String::new()
        };
        format!(
            "{{\"policyName\":{},\"defaultCpuSet\":{}",
            json_string(cpu_policy),
            json_string(&cpu_set)
        )
    })?;
    let memory_policy = config.memory_manager_policy.as_str();
    restore_checkpoint(root, &MEMORY_CHECKPOINT, memory_policy, events, || {
        format!(
            "{{\"policyName\":{},\"machineState\":{{}}",
            json_string(memory_policy)
        )
    })
}

/// `fresh` gives the content of a new checkpoint without its checksum and closing brace.
fn restore_checkpoint(
    root: &Path,
    checkpoint: &Checkpoint,
    policy: &str,
    events: &Events,
    fresh: impl FnOnce() -> String,
) -> Result<(), Error> {
    let path = root.join(checkpoint.file_name);
    let problem = match std::fs::read(&path) {
        Ok(content) => match checkpoint_policy(&content) {
            Some(found) if found == policy => return Ok(()),
            Some(found) => format!(
                "{}configured policy {policy:?} differs from state checkpoint policy {found:?}",
                checkpoint.mismatch_prefix
            ),
            None => "checkpoint is corrupted".to_owned(),
        },
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let body = fresh();
            let content = format!("{body},\"checksum\":{}}}", fnv1a(body.as_bytes()));
            write_checkpoint(root, &path, &content)?;
            say!(
                "stand-in kubelet pid {} created {} with policy {policy:?}",
                getpid(),
                path.display()
            );
            return Ok(());
        }
        Err(source) => {
            return Err(Error::Io {
                what: "read the checkpoint",
                path,
                source,
            })
        }
    };
    let message = format!(
        "could not restore state from checkpoint: {problem}, please drain this node and delete \
         the {} checkpoint file {:?} before restarting Kubelet",
        checkpoint.manager,
        path.display().to_string()
    );
    refuse(
        events,
        checkpoint.reason,
        &format!(
            "Failed to start ContainerManager: {}: {message}",
            checkpoint.start_error
        ),
    )
}

/// The `policyName` of a checkpoint; `None` if it is not a JSON object with a string one.
fn checkpoint_policy(content: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(content).ok()?;
    value.get("policyName")?.as_str().map(str::to_owned)
}

/// Writes a new checkpoint atomically (temp file, fsync, rename), mode 0644, creating `root`
/// (mode 0750, as the kubelet creates its root dir) if needed.
fn write_checkpoint(root: &Path, path: &Path, content: &str) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(root)
        .map_err(|source| Error::Io {
            what: "create --root-dir",
            path: root.to_owned(),
            source,
        })?;
    let file_name = path.file_name().map_or_else(
        || "checkpoint".into(),
        |name| name.to_string_lossy().into_owned(),
    );
    let tmp = root.join(format!(".{file_name}.stand-in-{}.tmp", getpid()));
    let io_err = |what, path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { what, path, source }
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(io_err("create the checkpoint", &tmp))?;
    file.write_all(content.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io_err("write the checkpoint", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io_err("rename the checkpoint into", path))
}

/// The online CPUs in the kernel's list format (`0-3`), from sysfs, else from the CPU count.
fn online_cpus() -> String {
    if let Ok(list) = std::fs::read_to_string(ONLINE_CPUS) {
        let list = list.trim();
        if !list.is_empty() {
            return list.to_owned();
        }
    }
    match std::thread::available_parallelism().map_or(1, usize::from) {
        1 => "0".to_owned(),
        count => format!("0-{}", count - 1),
    }
}

fn json_string(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// 32-bit FNV-1a (widened to u64), as the checkpoint checksum; the kubelet's own checksum hashes
/// Go's dump of its checkpoint struct, which the stand-in does not reproduce.
fn fnv1a(bytes: &[u8]) -> u64 {
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    });
    u64::from(hash)
}
