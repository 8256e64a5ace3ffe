//! TLS for client connections (rustls via pgwire), from PEM files.

use std::path::Path;
use std::sync::Arc;

use pgwire::tokio::tokio_rustls::rustls;
use pgwire::tokio::TlsAcceptor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS acceptor from a PEM certificate chain and a PEM private key.
pub fn acceptor(cert: &Path, key: &Path) -> std::io::Result<TlsAcceptor> {
    let invalid = |what: &Path, e: &dyn std::fmt::Display| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", what.display()),
        )
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| invalid(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(cert, &e))?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| invalid(key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(cert, &e))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| invalid(cert, &e))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
