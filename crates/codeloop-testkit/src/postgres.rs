//! A real PostgreSQL for tests: one throw-away cluster per test process (`initdb` in a temp dir, a free
//! loopback port, its socket in that dir) and a fresh database per test. A second cluster, started only when a
//! test asks for [`tls_database`], serves TLS with a certificate from a CA made at test time.
//!
//! As root (CI), the server programs run as the `postgres` OS user (`runuser -u postgres --`), since
//! `initdb` and `postgres` refuse root; the temp dir is handed to that user. A watchdog process stops the
//! cluster and removes its dir as soon as the test process is gone, however it ends (a test binary never
//! runs destructors of statics). Without PostgreSQL binaries, [`database`] returns `None` after printing
//! a loud SKIPPED line; `CODELOOP_REQUIRE_POSTGRES=1` turns that into a failure (CI sets it).
//! Owns: finding the binaries, starting, and cleaning up. Must not: know codeloop's schema.

mod certs;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Set to `1` to fail instead of skipping when PostgreSQL is missing.
pub const REQUIRE_ENV: &str = "CODELOOP_REQUIRE_POSTGRES";

struct Cluster {
    bin: PathBuf,
    port: u16,
    /// The CA that signed the server's certificate, on a TLS cluster.
    ca: Option<PathBuf>,
}

/// Whether a cluster accepts TLS connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plain,
    Tls,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static TLS_CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

/// A new empty database on the test cluster, as a connection URL; `None` (after a loud message) when
/// PostgreSQL is not installed. The cluster does not offer TLS.
pub fn database() -> Option<String> {
    let cluster = cluster(&CLUSTER, Transport::Plain)?;
    Some(create_database(cluster))
}

/// A database on the TLS test cluster and the CA its server certificate (for `localhost` and
/// `127.0.0.1`) chains to.
#[derive(Debug, Clone)]
pub struct TlsDatabase {
    /// `postgres://postgres@127.0.0.1:PORT/NAME`, without `sslmode`: the test adds it.
    pub url: String,
    /// The test CA's certificate, a PEM file for `sslrootcert`.
    pub ca: PathBuf,
}

/// A new empty database on the test cluster that serves TLS (plain connections are accepted too);
/// `None` (after a loud message) when PostgreSQL is not installed.
pub fn tls_database() -> Option<TlsDatabase> {
    let cluster = cluster(&TLS_CLUSTER, Transport::Tls)?;
    let ca = cluster.ca.clone()?;
    Some(TlsDatabase { url: create_database(cluster), ca })
}

/// The cluster in `cell`, started on first use; `None` after the SKIPPED message.
fn cluster(
    cell: &'static OnceLock<Result<Cluster, String>>,
    transport: Transport,
) -> Option<&'static Cluster> {
    match cell.get_or_init(|| start(transport)) {
        Ok(cluster) => Some(cluster),
        Err(reason) => {
            let message = format!(
                "SKIPPED: PostgreSQL tests need a PostgreSQL server ({reason}); install it with \
                 `apt-get install -y postgresql`"
            );
            if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
                panic!("{message} ({REQUIRE_ENV}=1)");
            }
            eprintln!("\n*** {message} ***\n");
            None
        }
    }
}

fn create_database(cluster: &Cluster) -> String {
    let name = format!("t{}_{}", std::process::id(), NEXT_DB.fetch_add(1, Ordering::Relaxed));
    let output = Command::new(cluster.bin.join("createdb"))
        .args(["-h", "127.0.0.1", "-p", &cluster.port.to_string(), "-U", "postgres", &name])
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("createdb failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("cannot run createdb: {e}"),
    }
    format!("postgres://postgres@127.0.0.1:{}/{name}", cluster.port)
}

/// The `bin` dir of the newest PostgreSQL under `/usr/lib/postgresql`, else the dir of `initdb` on PATH.
fn find_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `program args…`, as the `postgres` user when we are root.
fn server_command(bin: &Path, program: &str, root: bool) -> Command {
    let path = bin.join(program);
    let mut command = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    };
    command.stdin(Stdio::null());
    command
}

fn run(mut command: Command, what: &str) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn start(transport: Transport) -> Result<Cluster, String> {
    let bin = find_bin().ok_or("no initdb under /usr/lib/postgresql/*/bin or on PATH")?;
    let root = is_root();
    let dir = std::env::temp_dir().join(format!("codeloop-pg-{}-{:x}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if root {
        run(
            {
                let mut c = Command::new("chown");
                c.arg("postgres:").arg(&dir);
                c
            },
            "chown of the cluster dir to postgres",
        )?;
    }
    let data = dir.join("data");
    let mut initdb = server_command(&bin, "initdb", root);
    initdb.arg("-D").arg(&data).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
    run(initdb, "initdb")?;
    // The watchdog first: from here on, the dir goes away with this process, whatever happens next.
    spawn_watchdog(&bin, &dir, &data, root)?;
    let ca = match transport {
        Transport::Plain => None,
        Transport::Tls => Some(enable_tls(&dir, &data, root)?),
    };
    let port = free_port()?;
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
         -c full_page_writes=off -c max_connections=300",
        dir.display()
    );
    let mut pg_ctl = server_command(&bin, "pg_ctl", root);
    pg_ctl
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("log"))
        .args(["-w", "-t", "60", "-o", &options, "start"]);
    run(pg_ctl, "pg_ctl start").map_err(|e| {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        format!("{e}\n{log}")
    })?;
    Ok(Cluster { bin, port, ca })
}

/// Writes a test CA and server certificate into `dir` and turns `ssl` on in the cluster's
/// postgresql.conf. Returns the CA's file.
fn enable_tls(dir: &Path, data: &Path, root: bool) -> Result<PathBuf, String> {
    let files = certs::write(dir)?;
    if root {
        // The server runs as `postgres` and refuses a key it cannot read or that others can.
        let mut chown = Command::new("chown");
        chown.arg("postgres:").args([&files.ca, &files.cert, &files.key]);
        run(chown, "chown of the test certificates to postgres")?;
    }
    let conf = data.join("postgresql.conf");
    let settings = format!(
        "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
        files.cert.display(),
        files.key.display()
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&conf)
        .and_then(|mut file| std::io::Write::write_all(&mut file, settings.as_bytes()))
        .map_err(|e| format!("cannot turn ssl on in {}: {e}", conf.display()))?;
    Ok(files.ca)
}

/// A shell that waits for this process to end, then stops the cluster and removes its dir.
fn spawn_watchdog(bin: &Path, dir: &Path, data: &Path, root: bool) -> Result<(), String> {
    let as_postgres = if root { "runuser -u postgres -- " } else { "" };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
         {as_postgres}'{pg_ctl}' -D '{data}' -m immediate stop >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        pg_ctl = bin.join("pg_ctl").display(),
        data = data.display(),
        dir = dir.display(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the cleanup watchdog: {e}"))
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}
