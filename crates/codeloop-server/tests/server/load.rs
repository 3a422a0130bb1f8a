//! Load figures (ignored; run by hand, preferably with `--release`):
//!
//! `cargo test -p codeloop-server --test server --release -- --ignored --nocapture load_`
//!
//! Prints events/s delivered to 100 SSE clients and the memory of the process. With `CODELOOP_BIN` set
//! to a `codeloop` binary, the run-driven figure uses a separate `codeloop serve` process, so its RSS is
//! the server's alone.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use codeloop_types::EventPayload;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::support::Harness;

const CLIENTS: usize = 100;

/// `(VmRSS, VmHWM)` in MiB of a process.
fn memory(pid: &str) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// What one client counted.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    frames: usize,
    resyncs: usize,
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    memchr::memmem::find_iter(haystack, needle).count()
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at the state, field 3.
    let rest = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<f64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect();
    // utime and stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    (fields.get(11).copied().unwrap_or(0.0) + fields.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// A raw SSE reader that counts frames until it has seen `idles` × `session.idle` (or `stop_after`
/// frames).
async fn client(addr: SocketAddr, query: String, idles: usize, stop_after: usize) -> JoinHandle<Counted> {
    client_with(addr, query, idles, stop_after, Arc::new(AtomicUsize::new(0))).await
}

async fn client_with(
    addr: SocketAddr,
    query: String,
    idles: usize,
    stop_after: usize,
    progress: Arc<AtomicUsize>,
) -> JoinHandle<Counted> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The token of a spawned `codeloop serve`; the in-process harness has none and ignores it.
    let request = format!(
        "GET /event{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {LOAD_TOKEN}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    // Wait for server.connected so nothing published afterwards is missed.
    let mut seen = Vec::new();
    while count(&seen, b"server.connected") == 0 {
        let n = stream.read(&mut buf).await.unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    tokio::spawn(async move {
        let mut counted = Counted::default();
        let mut idle = 0;
        let mut carry: Vec<u8> = Vec::new();
        while idle < idles && counted.frames < stop_after {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            carry.extend_from_slice(&buf[..n]);
            counted.frames += count(&carry, b"event: message\n");
            progress.store(counted.frames, Ordering::Relaxed);
            counted.resyncs += count(&carry, br#""type":"resync""#);
            idle += count(&carry, br#""type":"session.idle""#);
            if counted.resyncs > 0 {
                // A real client would refetch here; the figure stops counting.
                break;
            }
            let keep = carry.len().saturating_sub(32);
            carry.drain(..keep);
        }
        counted
    })
}

async fn collect(handles: Vec<JoinHandle<Counted>>) -> Vec<Counted> {
    let mut all = Vec::new();
    for handle in handles {
        all.push(handle.await.unwrap());
    }
    all
}

fn report(what: &str, counted: &[Counted], elapsed: Duration) {
    let frames: usize = counted.iter().map(|c| c.frames).sum();
    let resyncs: usize = counted.iter().map(|c| c.resyncs).sum();
    let min = counted.iter().map(|c| c.frames).min().unwrap_or(0);
    eprintln!(
        "{what}: {frames} events to {} clients in {elapsed:.2?} = {:.0} events/s delivered ({:.0}/s per client; fewest {min}; resyncs {resyncs})",
        counted.len(),
        frames as f64 / elapsed.as_secs_f64(),
        frames as f64 / elapsed.as_secs_f64() / counted.len() as f64,
    );
}

/// The fan-out ceiling: events published straight onto the bus, 100 clients reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load figure; run by hand"]
async fn load_bus_events_to_100_clients() {
    let events: usize = std::env::var("LOAD_EVENTS").ok().and_then(|n| n.parse().ok()).unwrap_or(50_000);
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let addr: SocketAddr = h.base.trim_start_matches("http://").parse().unwrap();
    let mut handles = Vec::new();
    let progress: Vec<Arc<AtomicUsize>> = (0..CLIENTS).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    for p in &progress {
        handles.push(client_with(addr, String::new(), 1, events, p.clone()).await);
    }
    let (rss_before, _) = memory("self");
    let bus = h.engine.bus().clone();
    let start = Instant::now();
    // Closed loop: never more than 3 000 events ahead of the slowest client, so the figure is what the
    // server can deliver, not how fast a publisher can outrun it (that case is the resync test).
    for n in 0..events {
        bus.publish(EventPayload::PartDelta {
            session_id: "ses_load".into(),
            message_id: "msg_load".into(),
            part_id: "prt_load".into(),
            field: "text".into(),
            delta: format!("token{n} "),
        });
        if n % 500 == 0 {
            while progress.iter().map(|p| p.load(Ordering::Relaxed)).min().unwrap_or(0) + 3_000 < n {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
    }
    bus.publish(EventPayload::SessionIdle { session_id: "ses_load".into() });
    let counted = collect(handles).await;
    let elapsed = start.elapsed();
    report("bus → SSE (in-process, clients included)", &counted, elapsed);
    let (rss, hwm) = memory("self");
    eprintln!("process memory: RSS {rss_before:.1} MiB before, {rss:.1} MiB after, peak {hwm:.1} MiB");
}

/// Real runs (fake provider → engine → bus → SSE) watched by 100 clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "load figure; run by hand"]
async fn load_runs_watched_by_100_clients() {
    const TURNS: usize = 3;
    const CHUNKS: usize = 10_000;
    // The first TURNS runs have no watcher (the baseline), the next TURNS have 100.
    let turns: Vec<Turn> = (0..2 * TURNS)
        .map(|n| Turn::from(Reply::text(format!("{n} ").repeat(CHUNKS)).with_text_chunks(CHUNKS)))
        .collect();
    let script = Script::new(turns);
    // Kept alive until the end: the harness or the spawned server with its fake provider.
    let (base, pid, _harness, _spawned) = match std::env::var("CODELOOP_BIN") {
        Ok(bin) => {
            let spawned = spawn_server(&bin, script).await;
            let pid = spawned.1.id().unwrap().to_string();
            (spawned.0.clone(), pid, None, Some(spawned))
        }
        Err(_) => {
            let harness = Harness::start(script).await;
            (harness.base.clone(), "self".to_owned(), Some(harness), None)
        }
    };
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {LOAD_TOKEN}")).unwrap(),
    );
    let http = reqwest::Client::builder().default_headers(headers).build().unwrap();
    let session: serde_json::Value =
        http.post(format!("{base}/session")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let session = session["id"].as_str().unwrap().to_owned();
    let addr: SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let runs = || async {
        let start = Instant::now();
        for _ in 0..TURNS {
            let response = http
                .post(format!("{base}/session/{session}/prompt"))
                .json(&json!({"parts": [{"type": "text", "text": "go"}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
        start.elapsed()
    };
    let cpu = cpu_seconds(&pid);
    let unwatched = runs().await;
    let cpu_unwatched = cpu_seconds(&pid) - cpu;
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        handles.push(client(addr, format!("?session={session}"), TURNS, usize::MAX).await);
    }
    let (rss_before, _) = memory(&pid);
    let cpu = cpu_seconds(&pid);
    let start = Instant::now();
    let runs_done = runs().await;
    let counted = collect(handles).await;
    let elapsed = start.elapsed();
    let cpu_watched = cpu_seconds(&pid) - cpu;
    let (rss, hwm) = memory(&pid);
    let whose =
        if pid == "self" { "in-process: server, clients and fake provider" } else { "server process alone" };
    report(&format!("runs → SSE ({whose})"), &counted, elapsed);
    eprintln!(
        "{TURNS} runs ({} deltas) took {unwatched:.2?} unwatched, {runs_done:.2?} watched by {CLIENTS} clients",
        TURNS * CHUNKS
    );
    eprintln!("CPU ({whose}): {cpu_unwatched:.2} s unwatched, {cpu_watched:.2} s watched");
    eprintln!("memory ({whose}): RSS {rss_before:.1} MiB before, {rss:.1} MiB after, peak {hwm:.1} MiB");
}

/// The token a spawned server is given.
const LOAD_TOKEN: &str = "load-token";

type Spawned = (String, tokio::process::Child, FakeProvider, tempfile::TempDir);

/// `codeloop serve --port 0` in its own process, configured for the fake provider.
async fn spawn_server(bin: &str, script: Script) -> Spawned {
    let fake = FakeProvider::start(script).await.unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let config = dirs.path().join("config.toml");
    let toml = format!(
        "model = \"fake/test\"\nsnapshot = false\n[provider.fake]\nbase_url = \"{}\"\n",
        fake.base_url()
    );
    std::fs::write(&config, toml).unwrap();
    let mut child = tokio::process::Command::new(bin)
        .args(["serve", "--port", "0"])
        .env("CODELOOP_SERVER_TOKEN", LOAD_TOKEN)
        .current_dir(dirs.path())
        .env("CODELOOP_CONFIG", &config)
        .env("CODELOOP_DATA_DIR", dirs.path().join("data"))
        .env("CODELOOP_LOG", "error")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next_line().await.unwrap().expect("codeloop serve exited");
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            break url.to_owned();
        }
    };
    (base, child, fake, dirs)
}
