//! HTTPS with x509 client certificates (`ApiServer::start_https`), through kube-rs: a
//! certificate the server's CA issued authenticates as its Common Name, with a node's
//! authorization for `system:node:NAME`; no certificate, another CA's or an expired one fails
//! the handshake, and the failures are counted.

mod support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use support::{client_from, status_of};
use testkit::{ApiServer, ClientCert};

const ME: &str = "node-a";
const OTHER: &str = "node-b";

/// Writes a kubeconfig for `server` with its CA and, if given, `cert` (as data).
fn kubeconfig(server: &ApiServer, dir: &Path, cert: Option<&ClientCert>) -> std::path::PathBuf {
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, server.ca_pem()).expect("CA");
    let user = match cert {
        Some(cert) => {
            let pem = dir.join(format!("client-{}.pem", rand_name()));
            std::fs::write(&pem, cert.combined_pem()).expect("client pem");
            format!(
                "client-certificate: {}\n    client-key: {}",
                pem.display(),
                pem.display()
            )
        }
        None => "{}".to_string(),
    };
    let path = dir.join(format!("kubeconfig-{}", rand_name()));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            server.url(),
            ca.display(),
        ),
    )
    .expect("kubeconfig");
    path
}

fn rand_name() -> String {
    format!("{:08x}", rand::random::<u32>())
}

async fn client(server: &ApiServer, dir: &Path, cert: Option<&ClientCert>) -> Client {
    client_from(&kubeconfig(server, dir, cert)).await
}

fn https_cluster() -> ApiServer {
    let server = ApiServer::start_https();
    for node in [ME, OTHER] {
        server.create_node(node, std::iter::empty::<(&str, &str)>());
    }
    server
}

#[tokio::test]
async fn a_node_certificate_is_the_node_and_nothing_more() {
    let server = https_cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    let cert = server.issue_client_cert(&format!("system:node:{ME}"), Duration::from_secs(600));
    let nodes: Api<Node> = Api::all(client(&server, dir.path(), Some(&cert)).await);
    assert!(server.url().starts_with("https://"));
    nodes.get(ME).await.expect("a node reads its own Node");
    let refused = status_of(nodes.get(OTHER).await);
    assert_eq!(refused.code, 403, "{refused:?}");
    assert_eq!(server.failed_handshakes(), 0);
}

#[tokio::test]
async fn no_certificate_another_ca_or_an_expired_one_fails_the_handshake() {
    let server = https_cluster();
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes: Api<Node> = Api::all(client(&server, dir.path(), None).await);
    assert!(
        nodes.get(ME).await.is_err(),
        "no client certificate accepted"
    );
    assert_eq!(server.failed_handshakes(), 1);

    let foreign = ApiServer::start_https();
    let stranger =
        foreign.issue_client_cert(&format!("system:node:{ME}"), Duration::from_secs(600));
    let nodes: Api<Node> = Api::all(client(&server, dir.path(), Some(&stranger)).await);
    assert!(
        nodes.get(ME).await.is_err(),
        "another CA's certificate accepted"
    );
    assert_eq!(server.failed_handshakes(), 2);

    let short = server.issue_client_cert(&format!("system:node:{ME}"), Duration::from_secs(1));
    let nodes: Api<Node> = Api::all(client(&server, dir.path(), Some(&short)).await);
    nodes.get(ME).await.expect("valid for a second");
    // X.509 times are whole seconds: wait past notAfter (a bounded wait on the clock).
    while std::time::SystemTime::now() <= short.not_after + Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The open connection outlives the certificate; a new handshake does not.
    server.drop_connections();
    let nodes: Api<Node> = Api::all(client(&server, dir.path(), Some(&short)).await);
    assert!(
        nodes.get(ME).await.is_err(),
        "an expired certificate accepted"
    );
    assert_eq!(server.failed_handshakes(), 3);
}
