//! The host facts the kubelet checks a config against at start
//! (`validateKubeletOSConfiguration`): the cgroup version, from the file
//! system type of the cgroup mount (`cgroup2fs` is v2; `tmpfs`, the v1
//! hierarchy's parent, is v1), as runc's `IsCgroup2UnifiedMode` tells it.
//!
//! The cgroup driver is not among them: the runtime's driver is known only
//! through the CRI (`RuntimeConfig`), which kubelet-pivot does not speak,
//! and since `KubeletCgroupDriverFromCRI` (on by default from 1.31, locked
//! from 1.34) the kubelet takes the runtime's driver and ignores the
//! config's `cgroupDriver` when the runtime reports one, so no config value
//! can fail against it there.

use std::path::Path;

use kp_kubelet_config::gates::{CgroupVersion, HostFacts};
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, TMPFS_MAGIC};

/// The cgroup mount the kubelet looks at.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The host facts read from the cgroup mount at `root` ([`CGROUP_ROOT`]
/// on a node; another path in tests). A fact that cannot be read (no such
/// mount, another file system type) is left unknown: its checks are then
/// skipped.
pub fn probe(root: &Path) -> HostFacts {
    HostFacts {
        cgroup: cgroup_version(root),
    }
}

fn cgroup_version(root: &Path) -> Option<(CgroupVersion, String)> {
    let fs = statfs(root).ok()?;
    let kind = fs.filesystem_type();
    let shown = root.display();
    if kind == CGROUP2_SUPER_MAGIC {
        Some((CgroupVersion::V2, format!("{shown} is cgroup2fs")))
    } else if kind == TMPFS_MAGIC {
        Some((CgroupVersion::V1, format!("{shown} is tmpfs")))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_mount_is_unknown() {
        assert_eq!(
            probe(Path::new("/nonexistent/cgroup")),
            HostFacts::unknown()
        );
    }

    #[test]
    fn a_tmpfs_mount_reads_as_cgroup_v1() {
        // /dev/shm is a tmpfs on Linux hosts and containers alike.
        let shm = Path::new("/dev/shm");
        if statfs(shm).is_ok_and(|fs| fs.filesystem_type() == TMPFS_MAGIC) {
            assert_eq!(
                probe(shm).cgroup,
                Some((CgroupVersion::V1, "/dev/shm is tmpfs".to_owned()))
            );
        }
    }

    #[test]
    fn the_hosts_cgroup_mount_is_read() {
        let facts = probe(Path::new(CGROUP_ROOT));
        if let Some((_, how)) = facts.cgroup {
            assert!(how.starts_with("/sys/fs/cgroup is "), "{how}");
        }
    }
}
