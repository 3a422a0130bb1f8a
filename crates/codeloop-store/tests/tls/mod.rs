//! The PostgreSQL store over TLS, against the testkit's TLS cluster (a CA made at test time) and its plain one:
//! each `sslmode` connects where libpq would and fails, with what to change, where libpq would.

use codeloop_store::{PgStore, Store, StoreError, Write};
use codeloop_testkit::postgres::{TlsDatabase, database, tls_database};
use pretty_assertions::assert_eq;

use crate::support::{TEST_LEASE, session};

/// `url` with `options` added to its query string.
fn with(url: &str, options: &str) -> String {
    format!("{url}?{options}")
}

/// `url` with a password the server never checks (trust auth), to see that errors hide it.
fn with_password(url: &str) -> String {
    url.replacen("postgres://postgres@", "postgres://postgres:hunter2@", 1)
}

/// `db`'s URL for a host name the certificate does not carry, still reaching the cluster (`hostaddr`).
fn by_other_name(db: &TlsDatabase) -> String {
    db.url.replacen("@127.0.0.1:", "@db.invalid:", 1)
}

/// Writes a session and reads it back: the store works over this connection.
fn assert_store_works(store: &PgStore) {
    let written = session("/work/tls");
    store.apply(&[Write::Session(written.clone())]).unwrap();
    assert_eq!(store.get_session(&written.id).unwrap(), Some(written));
}

/// Whether every connection to `url`'s database but the one asking is encrypted, from a plain connection.
fn all_other_connections_encrypted(url: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let plain = with(url, "sslmode=disable");
        let (client, connection) = tokio_postgres::connect(&plain, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(*), coalesce(bool_and(s.ssl), false) FROM pg_stat_activity a
                 JOIN pg_stat_ssl s USING (pid)
                 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        let (count, encrypted): (i64, bool) = (row.get(0), row.get(1));
        count > 0 && encrypted
    })
}

fn open_error(url: &str) -> (StoreError, String) {
    let error = PgStore::open(url, TEST_LEASE).unwrap_err();
    let text = error.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    (error, text)
}

#[test]
fn postgres_tls_require_encrypts_without_checking_the_certificate_and_the_store_works() {
    let Some(db) = tls_database() else { return };
    let store = PgStore::open(&with(&db.url, "sslmode=require"), TEST_LEASE).unwrap();
    assert_store_works(&store);
    assert!(all_other_connections_encrypted(&db.url));
}

#[test]
fn postgres_tls_verify_full_with_the_servers_ca_connects_by_ip_and_by_name() {
    let Some(db) = tls_database() else { return };
    let ca = db.ca.display();
    let by_ip = PgStore::open(&with(&db.url, &format!("sslmode=verify-full&sslrootcert={ca}")), TEST_LEASE);
    assert_store_works(&by_ip.unwrap());
    // `localhost` is checked against the certificate's DNS name; `hostaddr` only says where to connect.
    let by_name = db.url.replacen("@127.0.0.1:", "@localhost:", 1);
    let options = format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}");
    let by_name = PgStore::open(&with(&by_name, &options), TEST_LEASE).unwrap();
    assert_store_works(&by_name);
    // Checked while this store's pooled connections are still open.
    assert!(all_other_connections_encrypted(&db.url));
}

#[test]
fn postgres_tls_verify_full_without_the_servers_ca_is_refused_with_what_to_do() {
    let Some(db) = tls_database() else { return };
    let (error, text) = open_error(&with(&with_password(&db.url), "sslmode=verify-full"));
    assert!(matches!(error, StoreError::Tls { .. }), "{text}");
    assert!(text.contains("not signed by a trusted certificate authority"), "{text}");
    assert!(text.contains("sslrootcert=PATH"), "{text}");
    assert!(text.contains("postgres://postgres:***@127.0.0.1:"), "{text}");
}

#[test]
fn postgres_tls_verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some(db) = tls_database() else { return };
    let options = format!("hostaddr=127.0.0.1&sslrootcert={}", db.ca.display());
    let url = with(&with_password(&by_other_name(&db)), &options);
    let (error, text) = open_error(&format!("{url}&sslmode=verify-full"));
    assert!(matches!(error, StoreError::Tls { .. }), "{text}");
    assert!(text.contains("not issued for the host") && text.contains("verify-ca"), "{text}");
    assert_store_works(&PgStore::open(&format!("{url}&sslmode=verify-ca"), TEST_LEASE).unwrap());
}

#[test]
fn postgres_tls_require_against_a_server_without_tls_is_refused_with_what_to_do() {
    let Some(url) = database() else { return };
    let (error, text) = open_error(&with(&with_password(&url), "sslmode=require"));
    assert!(matches!(error, StoreError::Tls { .. }), "{text}");
    assert!(text.contains("does not accept TLS") && text.contains("sslmode=prefer"), "{text}");
}

#[test]
fn postgres_tls_prefer_against_a_server_without_tls_connects_in_plain() {
    let Some(url) = database() else { return };
    assert_store_works(&PgStore::open(&with(&url, "sslmode=prefer"), TEST_LEASE).unwrap());
    // No sslmode at all is `prefer`, as in libpq.
    assert_store_works(&PgStore::open(&url, TEST_LEASE).unwrap());
}

#[test]
fn a_root_cert_file_that_is_missing_is_refused_before_connecting() {
    // Nothing listens on port 1: the error comes from reading the file, not from the network.
    let url = "postgres://u:hunter2@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
    let (error, text) = open_error(url);
    assert!(matches!(error, StoreError::RootCert { .. }), "{text}");
    assert!(text.contains("/nonexistent/ca.pem") && text.contains("PEM file"), "{text}");
}

#[test]
fn an_unknown_sslmode_is_an_invalid_url() {
    let (error, text) = open_error("postgres://u:hunter2@127.0.0.1:1/db?sslmode=verify");
    assert!(matches!(error, StoreError::InvalidUrl { .. }), "{text}");
    assert!(text.contains("verify-full"), "{text}");
}
