//! The API client (`--kubeconfig`, in-cluster config or none) with the
//! checks every `--kubeconfig` passes first, and the node name.

use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;
use kube::Client;
use sha2::{Digest, Sha256};

use super::credentials;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read --kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("refusing --kubeconfig: {0}")]
    Unsafe(#[source] crate::safefs::fsutil::ReadError),
    #[error("refusing --kubeconfig {path}: {source}")]
    TooDeep {
        path: PathBuf,
        #[source]
        source: kp_kubelet_config::ConfigError,
    },
    #[error("cannot use --kubeconfig {path}: {source}")]
    Config {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("--kubeconfig {path} does not exist")]
    Missing { path: PathBuf },
    #[error("--kubeconfig {path} is empty")]
    Empty { path: PathBuf },
    #[error("refusing --kubeconfig {path}: {source}")]
    Credentials {
        path: PathBuf,
        #[source]
        source: super::credentials::CredentialError,
    },
    #[error("the kubeconfig reader task failed: {0}")]
    Task(String),
    #[error("cannot build the API client: {}", kp_runtime::api_error::shown(.0))]
    Client(#[source] kube::Error),
}

/// A kubeconfig read and checked, with the files it names inlined.
pub struct Loaded {
    pub kubeconfig: Kubeconfig,
    /// The files it names (as named, made absolute), to follow for changes.
    pub named: Vec<PathBuf>,
    /// A digest of everything read (the kubeconfig and every file it names):
    /// equal digests build equal clients.
    pub digest: [u8; 32],
}

impl ClientError {
    /// Not written yet: missing, or empty (the kubelet writes kubelet.conf in
    /// place, `os.WriteFile`: created empty, then written).
    pub fn is_unwritten(&self) -> bool {
        matches!(
            self,
            ClientError::Missing { .. } | ClientError::Empty { .. }
        )
    }
}

/// The in-cluster client when the pod environment provides one, else
/// `None` (local-only mode).
pub fn in_cluster() -> Result<Option<Client>, ClientError> {
    match kube::Config::incluster() {
        Ok(config) => build_config(config).map(Some),
        Err(_) => Ok(None),
    }
}

/// Builds the client of a loaded kubeconfig.
pub async fn build(path: &Path, loaded: Kubeconfig) -> Result<Client, ClientError> {
    let config =
        kube::Config::from_custom_kubeconfig(loaded, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| ClientError::Config {
                path: path.to_path_buf(),
                source: e,
            })?;
    build_config(config)
}

fn build_config(config: kube::Config) -> Result<Client, ClientError> {
    kp_runtime::client::build(config, kp_runtime::agent::Component::Supervisor)
        .map_err(ClientError::Client)
}

/// Largest kubeconfig accepted (a node's is a few KiB).
const MAX_KUBECONFIG_BYTES: u64 = 1024 * 1024;

/// Reads `--kubeconfig` the way every other input is read: a regular file
/// (never a FIFO or a device, so nothing hangs), at most 1 MiB, nested no
/// deeper than a config may be; then the files it names are read under the
/// same checks and inlined ([`credentials`](super::credentials)), so the
/// client opens no file after this. Blocking: call it off the event loop.
pub fn load_kubeconfig(path: &Path) -> Result<Loaded, ClientError> {
    let policy = crate::safefs::fsutil::ReadPolicy {
        what: "kubeconfig",
        max_len: MAX_KUBECONFIG_BYTES,
        owner: crate::safefs::fsutil::Owner::Any,
        private: false,
    };
    let bytes = crate::safefs::fsutil::read_bounded(path, &policy)
        .map_err(ClientError::Unsafe)?
        .ok_or_else(|| ClientError::Missing {
            path: path.to_path_buf(),
        })?;
    if bytes.is_empty() {
        return Err(ClientError::Empty {
            path: path.to_path_buf(),
        });
    }
    // The same size and nesting bounds as a KubeletConfiguration.
    kp_kubelet_config::check_document_bounds(&bytes).map_err(|source| ClientError::TooDeep {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let mut kc = Kubeconfig::from_yaml(&text).map_err(|e| ClientError::Kubeconfig {
        path: path.to_path_buf(),
        source: e,
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut digest = Sha256::new();
    digest.update(&bytes);
    let named = credentials::inline_files(&mut kc, dir, &mut digest).map_err(|source| {
        ClientError::Credentials {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok(Loaded {
        kubeconfig: kc,
        named,
        digest: digest.finalize().into(),
    })
}

/// The node name: `--node-name`, else the hostname.
pub fn node_name(flag: Option<String>) -> String {
    flag.or_else(|| {
        nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
    })
    .unwrap_or_else(|| "localhost".to_string())
}
