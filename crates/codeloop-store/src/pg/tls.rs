//! TLS for the PostgreSQL store, with the URL options libpq users know: `sslmode` (`disable`, `prefer` — the
//! default —, `require`, `verify-ca`, `verify-full`) and `sslrootcert=PATH` (or `system`).
//!
//! tokio-postgres parses only `disable`, `prefer` and `require`, and no `sslrootcert`, so [`TlsOptions::split`]
//! takes both options out of the URL, tells the driver whether to ask for TLS, and [`TlsOptions::connector`]
//! gives it a rustls connector whose certificate check matches the mode (libpq semantics: `prefer` and
//! `require` encrypt without checking the certificate unless `sslrootcert` names a CA; `verify-ca` checks the
//! chain; `verify-full` also checks the host name). Roots are `sslrootcert`'s PEM file, else the Mozilla set
//! that reqwest trusts too (webpki-roots).
//! Owns: those options, the connector, and advice for a failed TLS connection. Must not: open connections.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode as DriverMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{Result, StoreError};

/// The connector every connection of one store uses.
pub(crate) type Connector = MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    /// TLS when the server offers it, else plain (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless `sslrootcert` is given).
    Require,
    /// TLS with a certificate signed by a trusted CA, whatever name it carries.
    VerifyCa,
    /// TLS with a certificate signed by a trusted CA and issued for the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        match value {
            "disable" => Some(SslMode::Disable),
            // libpq's `allow` tries plain first; TLS first is the safer order and reaches the same servers.
            "allow" | "prefer" => Some(SslMode::Prefer),
            "require" => Some(SslMode::Require),
            "verify-ca" => Some(SslMode::VerifyCa),
            "verify-full" => Some(SslMode::VerifyFull),
            _ => None,
        }
    }
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// `sslrootcert=system`, or none given under `verify-*`: the Mozilla roots of webpki-roots.
    System,
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
}

/// The TLS options of a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsOptions {
    pub(crate) mode: SslMode,
    /// `None` when the URL names none.
    pub(crate) root_cert: Option<RootCert>,
}

/// How much of the server's certificate a connection checks.
#[derive(Debug)]
enum Check {
    Nothing,
    Chain(Arc<RootCertStore>),
    ChainAndName(Arc<RootCertStore>),
}

impl TlsOptions {
    /// Splits `url` into the URL the driver parses (without `sslmode` and `sslrootcert`) and the TLS options.
    /// The error is the reason the URL is invalid.
    pub(crate) fn split(url: &str) -> std::result::Result<(String, TlsOptions), String> {
        let mut options = TlsOptions { mode: SslMode::Prefer, root_cert: None };
        let (driver_url, taken) = take_tls_options(url);
        // In URL order, so the last of a repeated option wins, as in the driver.
        for (key, value) in taken {
            let value = percent_decode_str(value).decode_utf8_lossy();
            match (key, value.as_ref()) {
                ("sslmode", mode) => {
                    options.mode = SslMode::parse(mode).ok_or_else(|| {
                        format!(
                            "unknown sslmode `{mode}`: use disable, prefer, require, verify-ca or verify-full"
                        )
                    })?;
                }
                (_, "system") => options.root_cert = Some(RootCert::System),
                (_, path) => options.root_cert = Some(RootCert::File(PathBuf::from(path))),
            }
        }
        Ok((driver_url, options))
    }

    /// Whether the driver asks the server for TLS, and whether it may go on without.
    pub(crate) fn driver_mode(&self) -> DriverMode {
        match self.mode {
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        }
    }

    /// The connector for this mode. Reads `sslrootcert` now, so a bad path fails when the store opens;
    /// `url` (its password hidden) is for the error.
    pub(crate) fn connector(&self, url: &str) -> Result<Connector> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let check = match (self.mode, &self.root_cert) {
            // `disable` never starts TLS, so its root file is not even read.
            (SslMode::Disable, _) | (SslMode::Prefer | SslMode::Require, None) => Check::Nothing,
            // libpq checks the chain whenever it has a root certificate, `require` included.
            (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, root) => {
                Check::Chain(roots(root.as_ref(), url)?)
            }
            (SslMode::VerifyFull, root) => Check::ChainAndName(roots(root.as_ref(), url)?),
        };
        let verifier = Verifier { check, algorithms: provider.signature_verification_algorithms };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            // Only a provider without TLS 1.2 and 1.3 fails here; ring has both.
            .map_err(|error| StoreError::Tls {
                url: url.to_owned(),
                reason: error.to_string(),
                advice: "this build of codeloop cannot speak TLS; report it".into(),
            })?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// The URL without its TLS options, for parsing by the driver (which refuses `sslrootcert` and `verify-*`).
/// The password written in `url`, if any, so error texts from the driver can be scrubbed of it.
pub(crate) fn password(url: &str) -> Option<String> {
    let config: tokio_postgres::Config = without_tls_options(url).parse().ok()?;
    let password = config.get_password()?;
    let password = String::from_utf8_lossy(password).into_owned();
    (!password.is_empty()).then_some(password)
}

pub(crate) fn without_tls_options(url: &str) -> String {
    take_tls_options(url).0
}

/// `url` without `sslmode` and `sslrootcert`, and those options as (key, raw value) in URL order.
fn take_tls_options(url: &str) -> (String, Vec<(&str, &str)>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), Vec::new()) };
    let (mut kept, mut taken) = (Vec::new(), Vec::new());
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((key @ ("sslmode" | "sslrootcert"), value)) => taken.push((key, value)),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (url, taken)
}

/// The trusted CAs: the PEM file `root` names, else the Mozilla set.
fn roots(root: Option<&RootCert>, url: &str) -> Result<Arc<RootCertStore>> {
    let path = match root {
        None | Some(RootCert::System) => {
            return Ok(Arc::new(RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() }));
        }
        Some(RootCert::File(path)) => path,
    };
    let unusable = |reason: String| StoreError::RootCert { url: url.to_owned(), path: path.clone(), reason };
    let pem = std::fs::read(path).map_err(|error| unusable(error.to_string()))?;
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|error| unusable(format!("not a PEM file ({error})")))?;
    if certificates.is_empty() {
        return Err(unusable("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    let mut store = RootCertStore::empty();
    for certificate in certificates {
        store
            .add(certificate)
            .map_err(|error| unusable(format!("a certificate in it is unusable ({error})")))?;
    }
    Ok(Arc::new(store))
}

/// What to do about a failed connection, when TLS is why it failed.
pub(crate) fn advice(error: &(dyn Error + 'static)) -> Option<&'static str> {
    let mut source = Some(error);
    while let Some(cause) = source {
        if let Some(tls) = as_rustls(cause) {
            return Some(advice_for(tls));
        }
        // The driver's own TLS refusals are plain strings; their texts are all there is to match.
        match cause.to_string().as_str() {
            "server does not support TLS" => {
                return Some(
                    "the server does not accept TLS connections: turn `ssl` on in its postgresql.conf, or set \
                     sslmode=prefer (TLS when offered) or sslmode=disable in the store URL",
                );
            }
            "no hostname provided for TLS handshake" => {
                return Some("TLS needs a host name: give the host in the store URL, or set sslmode=disable");
            }
            _ => {}
        }
        source = cause.source();
    }
    None
}

/// The rustls error in `error`, directly or inside the `io::Error` tokio-rustls wraps it in.
fn as_rustls<'e>(error: &'e (dyn Error + 'static)) -> Option<&'e rustls::Error> {
    error
        .downcast_ref::<rustls::Error>()
        .or_else(|| error.downcast_ref::<std::io::Error>()?.get_ref()?.downcast_ref::<rustls::Error>())
}

fn advice_for(error: &rustls::Error) -> &'static str {
    match error {
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => {
            "the server's certificate is not signed by a trusted certificate authority: set sslrootcert=PATH in \
             the store URL to the PEM file of the CA that signed it (your provider publishes it), or use \
             sslmode=require to encrypt without checking the certificate"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => {
            "the server's certificate is not issued for the host in the store URL: connect by a name the \
             certificate carries, or use sslmode=verify-ca to check only who signed it"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => {
            "the server's certificate has expired or is not valid yet: check the server's certificate and this \
              machine's clock"
        }
        rustls::Error::InvalidCertificate(_) => {
            "the server's certificate was refused: check the certificate the server sends and the CA file \
             named by sslrootcert"
        }
        _ => {
            "the TLS handshake with the server failed: check the server's ssl settings, or try sslmode=disable \
              if the server is on a trusted network"
        }
    }
}

/// Checks the server's certificate as far as the mode asks; handshake signatures are always checked.
#[derive(Debug)]
struct Verifier {
    check: Check,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let (roots, name) = match &self.check {
            Check::Nothing => return Ok(ServerCertVerified::assertion()),
            Check::Chain(roots) => (roots, false),
            Check::ChainAndName(roots) => (roots, true),
        };
        let certificate = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &certificate,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if name {
            verify_server_name(&certificate, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrubber_finds_the_password_past_options_only_codeloop_knows() {
        assert_eq!(password("postgres://u:hunter2@h/db").as_deref(), Some("hunter2"));
        let verified = "postgres://u:hunter2@h/db?sslmode=verify-full&sslrootcert=/ca.pem";
        assert_eq!(password(verified).as_deref(), Some("hunter2"));
        assert_eq!(password("postgres://u@h/db"), None);
    }

    fn split(url: &str) -> (String, TlsOptions) {
        TlsOptions::split(url).unwrap()
    }

    #[test]
    fn sslmode_and_sslrootcert_leave_the_url_and_other_options_stay() {
        assert_eq!(
            split(
                "postgres://u@h/db?application_name=x&sslmode=verify-full&sslrootcert=/etc/ca%20bundle.pem"
            ),
            (
                "postgres://u@h/db?application_name=x".into(),
                TlsOptions {
                    mode: SslMode::VerifyFull,
                    root_cert: Some(RootCert::File("/etc/ca bundle.pem".into()))
                }
            )
        );
        assert_eq!(
            split("postgres://u@h/db?sslmode=require"),
            ("postgres://u@h/db".into(), TlsOptions { mode: SslMode::Require, root_cert: None })
        );
        assert_eq!(split("postgres://u@h/db?sslrootcert=system").1.root_cert, Some(RootCert::System));
    }

    #[test]
    fn prefer_is_the_default_and_an_unknown_sslmode_is_refused() {
        assert_eq!(split("postgres://u@h/db").1.mode, SslMode::Prefer);
        let error = TlsOptions::split("postgres://u@h/db?sslmode=verify").unwrap_err();
        assert!(error.contains("verify-full"), "{error}");
    }

    #[test]
    fn the_driver_asks_for_tls_unless_disabled_and_insists_from_require_on() {
        let mode = |mode| TlsOptions { mode, root_cert: None }.driver_mode();
        assert_eq!(mode(SslMode::Disable), DriverMode::Disable);
        assert_eq!(mode(SslMode::Prefer), DriverMode::Prefer);
        for strict in [SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull] {
            assert_eq!(mode(strict), DriverMode::Require);
        }
    }

    #[test]
    fn a_missing_or_empty_root_cert_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let options =
            TlsOptions { mode: SslMode::VerifyFull, root_cert: Some(RootCert::File(missing.clone())) };
        let error = options.connector("postgres://u:***@h/db").err().unwrap().to_string();
        assert!(error.contains(&missing.display().to_string()) && error.contains("PEM"), "{error}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let options = TlsOptions { mode: SslMode::VerifyCa, root_cert: Some(RootCert::File(empty)) };
        let error = options.connector("postgres://u:***@h/db").err().unwrap().to_string();
        assert!(error.contains("no PEM certificate"), "{error}");
    }
}
