//! HTTPS for the sandbox when `SandboxOptions::auth` is on: kubectl sends a bearer token
//! only over TLS. A CA and a serving certificate for 127.0.0.1 and localhost are made at
//! start (kept in memory; the CA goes into the kubeconfig as `certificate-authority-data`).
//!
//! The port keeps answering plain HTTP as well, told apart by the first byte a client sends
//! (a TLS handshake starts with 0x16, an HTTP request with a method's letter): test
//! clients built from `Sandbox::url()` with a token keep working without the CA.

use std::sync::Arc;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the sandbox's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot configure TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The sandbox's CA and the acceptor serving its certificate.
#[derive(Clone)]
pub struct Tls {
    /// The CA certificate, DER.
    pub ca_der: Vec<u8>,
    pub acceptor: TlsAcceptor,
}

/// The first byte of a TLS record carrying a handshake.
pub const HANDSHAKE: u8 = 0x16;

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

impl Tls {
    pub fn new() -> Result<Tls, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "kube-sandbox-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, &ca_key);

        // A separate serving certificate: rustls refuses a CA used as an end entity.
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".into()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let leaf_cert = leaf.signed_by(&key, &issuer)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf_cert.der().clone(), ca_cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        // The server speaks HTTP/1.1 only; say so, so clients do not try h2.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            ca_der: ca_cert.der().to_vec(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The CA as PEM.
    pub fn ca_pem(&self) -> String {
        pem(&self.ca_der)
    }

    /// The CA as a kubeconfig's `certificate-authority-data` (base64 of the PEM).
    pub fn ca_data(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem())
    }

    /// The CA for a kube-rs `Config::root_cert`.
    pub fn ca_certificate(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.ca_der.clone())
    }
}
