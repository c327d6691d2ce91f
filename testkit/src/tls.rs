//! HTTPS with x509 client certificate authentication ([`crate::ApiServer::start_https`]).
//!
//! A CA minted at start signs the server certificate (for `127.0.0.1`) and every client
//! certificate ([`crate::ApiServer::issue_client_cert`]). A client must present a certificate
//! the CA signed and that is valid now (rustls' `WebPkiClientVerifier` checks the signature
//! chain and `notBefore`/`notAfter` against the current time, as Go's crypto/tls does for
//! kube-apiserver): otherwise the handshake fails (counted, [`crate::ApiServer::failed_handshakes`]).
//! A verified certificate authenticates as its Common Name, as kube-apiserver's x509
//! authenticator does (`system:node:NAME` is the node NAME). Only certificates issued here can
//! be presented (the CA key never leaves), so the CN is looked up by the certificate's DER
//! rather than parsed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

/// A TLS handshake that takes longer is abandoned (and counted as failed).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A client certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// When it expires (`notAfter`, whole seconds).
    pub not_after: std::time::SystemTime,
}

impl ClientCert {
    /// Certificate then key, as the kubelet's `kubelet-client-current.pem` holds them.
    pub fn combined_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}

pub(crate) struct Tls {
    ca: CertifiedIssuer<'static, KeyPair>,
    config: Arc<ServerConfig>,
    /// DER of every client certificate issued → its Common Name.
    issued: Mutex<HashMap<Vec<u8>, String>>,
}

fn pki_error(what: &str, err: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("fake API server TLS: {what}: {err}"))
}

impl Tls {
    pub(crate) fn new() -> io::Result<Tls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_key = KeyPair::generate().map_err(|e| pki_error("CA key", e))?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| pki_error("CA", e))?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kubelet-pivot-test-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key)
            .map_err(|e| pki_error("CA certificate", e))?;

        let server_key = KeyPair::generate().map_err(|e| pki_error("server key", e))?;
        let mut server_params = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .map_err(|e| pki_error("server certificate", e))?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params
            .signed_by(&server_key, &ca)
            .map_err(|e| pki_error("server certificate", e))?;

        let mut roots = RootCertStore::empty();
        roots
            .add(ca.der().clone())
            .map_err(|e| pki_error("CA root", e))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| pki_error("client verifier", e))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| pki_error("protocol versions", e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server_cert.der().clone(), ca.der().clone()], key)
            .map_err(|e| pki_error("server certificate", e))?;
        Ok(Tls {
            ca,
            config: Arc::new(config),
            issued: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A client certificate for `common_name`, valid from a minute ago for `valid_for`.
    pub(crate) fn issue(&self, common_name: &str, valid_for: Duration) -> io::Result<ClientCert> {
        let key = KeyPair::generate().map_err(|e| pki_error("client key", e))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| pki_error("client certificate", e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        let valid = time::Duration::try_from(valid_for).map_err(|e| pki_error("validity", e))?;
        params.not_after = now + valid;
        let cert = params
            .signed_by(&key, &self.ca)
            .map_err(|e| pki_error("client certificate", e))?;
        self.issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cert.der().to_vec(), common_name.to_string());
        let not_after = std::time::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(params.not_after.unix_timestamp()).unwrap_or(0));
        Ok(ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }

    /// Runs the server side of the handshake on `stream`; the connection and the client
    /// certificate's Common Name. `Err` when the handshake failed (the alert is sent).
    pub(crate) fn accept(
        &self,
        stream: &mut TcpStream,
    ) -> io::Result<(ServerConnection, Option<String>)> {
        let mut conn =
            ServerConnection::new(self.config.clone()).map_err(|e| pki_error("connection", e))?;
        stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        while conn.is_handshaking() {
            if let Err(err) = conn.complete_io(stream) {
                // Tell the client why (an alert such as certificate_expired).
                let _ = conn.write_tls(stream);
                return Err(err);
            }
        }
        stream.set_read_timeout(None)?;
        let cn = conn
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|der: &CertificateDer<'_>| {
                self.issued
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(der.as_ref())
                    .cloned()
            });
        Ok((conn, cn))
    }
}

/// One half of a TLS stream shared by the connection's reader and writer (one thread uses
/// both, never at once).
#[derive(Clone)]
pub(crate) struct Half(pub(crate) Arc<Mutex<rustls::StreamOwned<ServerConnection, TcpStream>>>);

impl Read for Half {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).read(buf)
    }
}

impl Write for Half {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}
