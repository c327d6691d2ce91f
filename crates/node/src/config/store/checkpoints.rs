//! Checkpoints: `checkpoints/{uid}/{resourceVersion}/` saved through a
//! temp directory renamed into place, loaded within one payload budget,
//! and listed.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::PathBuf;

use super::{
    validate_key, ConfigSource, SourceCheck, Store, StoreError, DIR_MODE, FILE_MODE, MAX_PAYLOAD,
};
use crate::safefs::fsutil::{self, FsError, TEMP_PREFIX};

impl Store {
    fn checkpoint_dir(&self, uid: &str, rv: &str) -> PathBuf {
        self.checkpoints_dir().join(uid).join(rv)
    }

    /// Saves a payload as `checkpoints/{uid}/{resourceVersion}/`. The files
    /// go into a temp directory that is renamed into place; an existing
    /// checkpoint of the same uid and resourceVersion is kept (same version,
    /// same content).
    pub fn save_checkpoint(
        &self,
        src: &ConfigSource,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> Result<(), StoreError> {
        src.validate()?;
        let size: usize = files.values().map(Vec::len).sum();
        if size > MAX_PAYLOAD {
            return Err(StoreError::TooLarge { size });
        }
        for key in files.keys() {
            validate_key(key)?;
        }
        let uid_dir = self.checkpoints_dir().join(&src.uid);
        self.check_no_symlink(&uid_dir)?;
        fsutil::ensure_dir(&uid_dir, DIR_MODE)?;
        let final_dir = uid_dir.join(&src.resource_version);
        self.check_no_symlink(&final_dir)?;
        if final_dir.is_dir() {
            return Ok(());
        }
        let tmp = uid_dir.join(format!(
            "{TEMP_PREFIX}{}.{}",
            src.resource_version,
            std::process::id()
        ));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| FsError::io("remove stale temp dir", &tmp, e))?;
        }
        fsutil::ensure_dir(&tmp, DIR_MODE)?;
        for (key, data) in files {
            fsutil::write_atomic(&tmp.join(key), data, FILE_MODE)?;
        }
        fsutil::sync_dir(&tmp)?;
        fs::rename(&tmp, &final_dir)
            .map_err(|e| FsError::io("rename checkpoint into", &final_dir, e))?;
        fsutil::sync_dir(&uid_dir)?;
        Ok(())
    }

    /// Loads every file of a checkpoint.
    pub fn load_checkpoint(
        &self,
        src: &ConfigSource,
    ) -> Result<BTreeMap<String, Vec<u8>>, StoreError> {
        src.validate()?;
        let dir = self.checkpoint_dir(&src.uid, &src.resource_version);
        let missing = || StoreError::MissingCheckpoint {
            uid: src.uid.clone(),
            resource_version: src.resource_version.clone(),
            dir: self.checkpoints_dir(),
        };
        if !self.check_root()? {
            return Err(missing());
        }
        self.check_no_symlink(&dir)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(FsError::io("read checkpoint directory", &dir, e).into()),
        };
        let mut files = BTreeMap::new();
        let mut size = 0usize;
        for entry in entries {
            let entry = entry.map_err(|e| FsError::io("read checkpoint directory", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let path = entry.path();
            // The whole checkpoint shares one budget: each file may use what
            // the previous ones left.
            let left = (MAX_PAYLOAD - size) as u64;
            let data = self
                .read_file(&path, "checkpoint file", left)?
                .unwrap_or_default();
            size += data.len();
            files.insert(name, data);
        }
        Ok(files)
    }

    /// (uid, resourceVersion) of every checkpoint on disk.
    pub fn list_checkpoints(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if !matches!(self.check_root(), Ok(true)) {
            return out;
        }
        let Ok(uids) = fs::read_dir(self.checkpoints_dir()) else {
            return out;
        };
        for uid in uids.flatten() {
            let uid_name = uid.file_name().to_string_lossy().into_owned();
            if uid_name.starts_with(TEMP_PREFIX) {
                continue;
            }
            if let Ok(rvs) = fs::read_dir(uid.path()) {
                for rv in rvs.flatten() {
                    let rv_name = rv.file_name().to_string_lossy().into_owned();
                    if !rv_name.starts_with(TEMP_PREFIX) {
                        out.push((uid_name.clone(), rv_name));
                    }
                }
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;
    use crate::config::store::test_source as src;

    #[test]
    fn checkpoint_save_load_and_key_rules() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let mut files = BTreeMap::new();
        files.insert("kubelet".to_string(), b"{}".to_vec());
        s.save_checkpoint(&src("u1", "5"), &files).unwrap();
        assert_eq!(s.load_checkpoint(&src("u1", "5")).unwrap(), files);
        assert_eq!(s.list_checkpoints(), vec![("u1".into(), "5".into())]);
        for bad in ["../x", "a/b", "..", "", "sp ace"] {
            let mut f = BTreeMap::new();
            f.insert(bad.to_string(), b"x".to_vec());
            assert!(
                s.save_checkpoint(&src("u2", "1"), &f).is_err(),
                "{bad:?} accepted"
            );
        }
        let mut big = BTreeMap::new();
        big.insert("kubelet".to_string(), vec![b' '; MAX_PAYLOAD + 1]);
        assert!(matches!(
            s.save_checkpoint(&src("u3", "1"), &big),
            Err(StoreError::TooLarge { .. })
        ));
        assert!(matches!(
            s.load_checkpoint(&src("nope", "1")),
            Err(StoreError::MissingCheckpoint { .. })
        ));
    }

    #[test]
    fn checkpoint_files_share_one_budget_and_must_be_regular() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        let mut files = BTreeMap::new();
        files.insert("kubelet".to_string(), b"{}".to_vec());
        s.save_checkpoint(&src("u1", "5"), &files).unwrap();
        let dir = d.path().join("checkpoints/u1/5");
        File::create(dir.join("big"))
            .unwrap()
            .set_len(MAX_PAYLOAD as u64)
            .unwrap();
        let err = s.load_checkpoint(&src("u1", "5")).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
        fs::remove_file(dir.join("big")).unwrap();
        nix::unistd::mkfifo(
            &dir.join("pipe"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let err = s.load_checkpoint(&src("u1", "5")).unwrap_err().to_string();
        assert!(err.contains("fifo"), "{err}");
    }
}
