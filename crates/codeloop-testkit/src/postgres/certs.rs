//! Certificates for the TLS test cluster, made at test time: a throw-away CA and a server certificate it signs
//! for `localhost` and `127.0.0.1`, written as PEM files the server (and a client's `sslrootcert`) can read.
//! Owns: making and writing them. Must not: start servers.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// The PEM files of one test CA and the server certificate it signed.
pub(super) struct Files {
    pub(super) ca: PathBuf,
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

/// The names the server certificate is issued for: what tests put in their URLs.
const SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// Makes a CA and a server certificate and writes them into `dir`; the server key is 0600, as PostgreSQL
/// insists.
pub(super) fn write(dir: &Path) -> Result<Files, String> {
    let failed = |what: &str, error: rcgen::Error| format!("cannot make the test {what}: {error}");
    let mut ca_params = CertificateParams::new(Vec::new()).map_err(|e| failed("CA", e))?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "codeloop test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
    let ca_cert = ca_params.self_signed(&ca_key).map_err(|e| failed("CA", e))?;
    let issuer = Issuer::new(ca_params, ca_key);

    let names: Vec<String> = SERVER_NAMES.iter().map(|name| (*name).to_owned()).collect();
    let mut server_params = CertificateParams::new(names).map_err(|e| failed("server certificate", e))?;
    server_params.distinguished_name.push(DnType::CommonName, "localhost");
    let server_key = KeyPair::generate().map_err(|e| failed("server key", e))?;
    let server_cert =
        server_params.signed_by(&server_key, &issuer).map_err(|e| failed("server certificate", e))?;

    let files = Files { ca: dir.join("ca.crt"), cert: dir.join("server.crt"), key: dir.join("server.key") };
    write_file(&files.ca, &ca_cert.pem(), 0o644)?;
    write_file(&files.cert, &server_cert.pem(), 0o644)?;
    write_file(&files.key, &server_key.serialize_pem(), 0o600)?;
    Ok(files)
}

fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| file.write_all(contents.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
