//! The API client, kept current: `--kubeconfig` (followed: a file that does
//! not exist yet, or whose credentials rotate), in-cluster config, or none.
//!
//! The current [`Client`] lives in a `tokio::sync::watch` channel
//! ([`Api::current`], [`Api::subscribe`]); whoever talks to the API server
//! takes the newest one (the supervisor restarts its syncer when a new one
//! is published). A follower task (`follow`) re-reads the kubeconfig and
//! every file it names when one of them changes (inotify on their
//! directories; a symlink re-pointed, as the kubelet's certificate manager
//! does with `kubelet-client-current.pem`, is a change), and after a 401 or
//! a failed TLS handshake ([`CredentialHint::rejected`], at most once per
//! [`REJECTED_REREAD_INTERVAL`]). What the follower sees is published as an
//! [`ApiStatus`] (logged, and shown by `status` from `STATE/api.json`).
//!
//! Split: the client and its checks (`client`), the files a kubeconfig
//! names (`credentials`), the follower (`follow`), the status record
//! (`status`).

mod client;
mod credentials;
mod follow;
pub mod status;

pub use client::{node_name, ClientError};
pub use status::{ApiPhase, ApiStatus};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::{watch, Notify};
use tracing::info;

/// At most one re-read for a rejected credential (401, failed handshake)
/// per this interval.
pub const REJECTED_REREAD_INTERVAL: Duration = Duration::from_secs(5);

/// A client and its generation (1 for the first; each new one counts up).
#[derive(Clone)]
pub struct Published {
    pub generation: u64,
    pub client: Client,
}

/// Tells the follower that the API server refused our credentials (401)
/// or a TLS handshake failed: the files are read again (rate-limited).
#[derive(Clone, Default)]
pub struct CredentialHint(Arc<Notify>);

impl CredentialHint {
    pub fn rejected(&self) {
        self.0.notify_one();
    }
}

/// The API access of one supervisor.
pub struct Api {
    clients: watch::Receiver<Option<Published>>,
    status: watch::Receiver<ApiStatus>,
    hint: CredentialHint,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Api {
    /// `--kubeconfig` (followed), else in-cluster config when the pod
    /// environment provides it, else `None` (local-only mode). A kubeconfig
    /// that does not exist yet is waited for (one log line); one that exists
    /// and is refused is an error, as before a kubelet ran.
    ///
    /// `force_poll` (`--watch-mode poll`): no inotify, a read every 10 s (and
    /// after a refusal).
    pub async fn start(
        kubeconfig: Option<&PathBuf>,
        force_poll: bool,
    ) -> Result<Option<Api>, ClientError> {
        let Some(path) = kubeconfig else {
            return Ok(client::in_cluster()?.map(|client| {
                let (_, clients) = watch::channel(Some(Published {
                    generation: 1,
                    client,
                }));
                let (_, status) = watch::channel(ApiStatus::in_cluster());
                Api {
                    clients,
                    status,
                    hint: CredentialHint::default(),
                    task: None,
                }
            }));
        };
        // Absolute, so that its directories can be followed.
        let path = &std::path::absolute(path).unwrap_or_else(|_| path.clone());
        let first = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || client::load_kubeconfig(&path))
                .await
                .map_err(|e| ClientError::Task(e.to_string()))?
        };
        let (initial, status) = match first {
            Ok(loaded) => {
                let named = loaded.named.clone();
                let digest = loaded.digest;
                let client = client::build(path, loaded.kubeconfig).await?;
                (Some((client, digest, named)), ApiStatus::following(path))
            }
            Err(err) if err.is_unwritten() => {
                info!(kubeconfig = %path.display(), "the kubeconfig does not exist yet (the kubelet writes it after its TLS bootstrap): starting the kubelet without following the node's assignment; following the path until it appears");
                (None, ApiStatus::waiting(path))
            }
            Err(err) => return Err(err),
        };
        let (clients_tx, clients) =
            watch::channel(initial.as_ref().map(|(client, ..)| Published {
                generation: 1,
                client: client.clone(),
            }));
        let (status_tx, status) = watch::channel(status);
        let hint = CredentialHint::default();
        let follower = follow::Follower::new(
            path.clone(),
            initial.map(|(_, digest, named)| (digest, named)),
            clients_tx,
            status_tx,
            hint.0.clone(),
            force_poll,
        );
        let task = tokio::spawn(follower.run());
        Ok(Some(Api {
            clients,
            status,
            hint,
            task: Some(task),
        }))
    }

    /// The newest client, if credentials were read.
    pub fn current(&self) -> Option<Published> {
        self.clients.borrow().clone()
    }

    /// Changes of the client.
    pub fn subscribe(&self) -> watch::Receiver<Option<Published>> {
        self.clients.clone()
    }

    /// What the follower sees now.
    pub fn status(&self) -> ApiStatus {
        self.status.borrow().clone()
    }

    /// Changes of the status.
    pub fn status_changes(&self) -> watch::Receiver<ApiStatus> {
        self.status.clone()
    }

    /// The hint to give when the API server refuses our credentials.
    pub fn hint(&self) -> CredentialHint {
        self.hint.clone()
    }
}

/// Whether an API error means our credentials were refused (401) or a TLS
/// handshake failed (an expired or rotated certificate), so that the files
/// are worth reading again.
pub fn is_credential_failure(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(kube::Error::Api(resp)) = e.downcast_ref::<kube::Error>() {
            if resp.code == 401 {
                return true;
            }
        }
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("401 unauthorized")
            || text.contains("certificate")
            || text.contains("handshake")
            || text.contains("tls")
        {
            return true;
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Unauthorized").with_code(code),
        ))
    }

    #[test]
    fn a_401_and_a_failed_handshake_are_credential_failures_others_are_not() {
        assert!(is_credential_failure(&api_error(401)));
        assert!(!is_credential_failure(&api_error(403)));
        assert!(!is_credential_failure(&api_error(500)));
        let tls = std::io::Error::other(
            "received fatal alert: CertificateExpired during the TLS handshake",
        );
        assert!(is_credential_failure(&tls));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_credential_failure(&refused));
    }
}
