//! The files a kubeconfig names (client certificate, client key,
//! certificate authority, token file), read the way `--kubeconfig` itself
//! is: a regular file owned by root or by us, writable by nobody else, at
//! most [`MAX_CREDENTIAL_BYTES`]. Certificates and keys are then inlined
//! (`*-data`), so the client never opens a path after it was checked. A
//! symlink is followed to the file it names and that file is checked: the
//! kubelet's own rotation keeps `kubelet-client-current.pem` as a link.

use std::path::{Path, PathBuf};

use base64::Engine;
use kube::config::Kubeconfig;
use sha2::{Digest, Sha256};

use crate::safefs::fsutil::{self, Owner, ReadError, ReadPolicy};

/// Largest certificate, key, CA bundle or token file accepted.
pub const MAX_CREDENTIAL_BYTES: u64 = 1024 * 1024;

/// Why a file the kubeconfig names was refused.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("{what} {path} named by the kubeconfig: {source}")]
    Resolve {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Unsafe(#[from] ReadError),
    #[error("{what} {path} named by the kubeconfig does not exist")]
    Missing { what: &'static str, path: PathBuf },
}

/// Makes the paths of `kc` absolute against `dir` (the kubeconfig's
/// directory, as kubectl does), reads every certificate and key under the
/// checks and inlines it (a path beside inline data is dropped, as the client would
/// ignore it), and checks the token file (which the client
/// re-reads on its own schedule, as projected tokens rotate).
///
/// Returns the files named (absolute, before their symlinks), to follow for
/// changes; every byte read goes into `digest`.
pub fn inline_files(
    kc: &mut Kubeconfig,
    dir: &Path,
    digest: &mut Sha256,
) -> Result<Vec<PathBuf>, CredentialError> {
    let mut named = Vec::new();
    let mut read = |what: &'static str, path: PathBuf| -> Result<Vec<u8>, CredentialError> {
        let bytes = read(what, &path)?;
        digest.update(path.as_os_str().as_encoded_bytes());
        digest.update(&bytes);
        named.push(path);
        Ok(bytes)
    };
    for cluster in kc.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        if let Some(path) = cluster.certificate_authority.take() {
            if cluster.certificate_authority_data.is_none() {
                let bytes = read("certificate authority", absolute(dir, &path))?;
                cluster.certificate_authority_data = Some(encode(&bytes));
            }
        }
    }
    for auth in kc
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        if let Some(path) = auth.client_certificate.take() {
            if auth.client_certificate_data.is_none() {
                let bytes = read("client certificate", absolute(dir, &path))?;
                auth.client_certificate_data = Some(encode(&bytes));
            }
        }
        if let Some(path) = auth.client_key.take() {
            if auth.client_key_data.is_none() {
                let bytes = read("client key", absolute(dir, &path))?;
                auth.client_key_data = Some(encode(&bytes).into());
            }
        }
        if let Some(path) = auth.token_file.as_mut() {
            let abs = absolute(dir, path);
            let target = resolve("token file", &abs)?;
            read("token file", abs)?;
            *path = target.to_string_lossy().into_owned();
        }
    }
    Ok(named)
}

fn absolute(dir: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_relative() {
        dir.join(path)
    } else {
        path.to_path_buf()
    }
}

fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The file a path names after its symlinks.
fn resolve(what: &'static str, path: &Path) -> Result<PathBuf, CredentialError> {
    std::fs::canonicalize(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => CredentialError::Missing {
            what,
            path: path.to_path_buf(),
        },
        _ => CredentialError::Resolve {
            what,
            path: path.to_path_buf(),
            source,
        },
    })
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, CredentialError> {
    let target = resolve(what, path)?;
    let policy = ReadPolicy {
        what,
        max_len: MAX_CREDENTIAL_BYTES,
        owner: Owner::RootOrMe,
        private: true,
    };
    fsutil::read_bounded(&target, &policy)?.ok_or_else(|| CredentialError::Missing {
        what,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn kubeconfig(cert: &str, key: &str, ca: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: {ca}\nusers:\n- name: u\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ))
        .unwrap()
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn relative_and_linked_files_are_inlined() {
        let d = tempfile::tempdir().unwrap();
        write(&d.path().join("ca.pem"), "CA", 0o644);
        write(&d.path().join("client-2026.pem"), "CERT+KEY", 0o600);
        std::os::unix::fs::symlink(
            d.path().join("client-2026.pem"),
            d.path().join("client-current.pem"),
        )
        .unwrap();
        let mut kc = kubeconfig("client-current.pem", "client-current.pem", "ca.pem");
        inline_files(&mut kc, d.path(), &mut Sha256::new()).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority, None);
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        let auth = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(auth.client_certificate, None);
        assert_eq!(
            auth.client_certificate_data.as_deref(),
            Some(encode(b"CERT+KEY").as_str())
        );
        assert!(auth.client_key.is_none() && auth.client_key_data.is_some());
    }

    #[test]
    fn a_world_writable_key_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        write(&d.path().join("ca.pem"), "CA", 0o644);
        write(&d.path().join("cert.pem"), "CERT", 0o644);
        write(&d.path().join("key.pem"), "KEY", 0o666);
        let mut kc = kubeconfig("cert.pem", "key.pem", "ca.pem");
        let err = inline_files(&mut kc, d.path(), &mut Sha256::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("client key") && err.contains("key.pem") && err.contains("writable"),
            "{err}"
        );
    }

    #[test]
    fn a_fifo_a_missing_file_and_a_huge_file_are_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        write(&d.path().join("cert.pem"), "CERT", 0o644);
        write(&d.path().join("key.pem"), "KEY", 0o600);
        nix::unistd::mkfifo(
            &d.path().join("ca.pem"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let mut kc = kubeconfig("cert.pem", "key.pem", "ca.pem");
        let err = inline_files(&mut kc, d.path(), &mut Sha256::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("fifo"), "{err}");

        let mut kc = kubeconfig("cert.pem", "nokey.pem", "cert.pem");
        let err = inline_files(&mut kc, d.path(), &mut Sha256::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("client key") && err.contains("does not exist"),
            "{err}"
        );

        let big = "x".repeat(MAX_CREDENTIAL_BYTES as usize + 1);
        write(&d.path().join("big.pem"), &big, 0o644);
        let mut kc = kubeconfig("big.pem", "key.pem", "cert.pem");
        let err = inline_files(&mut kc, d.path(), &mut Sha256::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("too large"), "{err}");
    }
}
