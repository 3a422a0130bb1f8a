//! Slow clients: one that stops reading must not delay a run, and finds out it missed events.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use codeloop_testkit::{Reply, Script, Turn};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{Harness, PATIENCE};

/// Deltas per scripted answer: far more SSE bytes than socket buffers, the broadcast channel and the
/// replay buffer together hold.
const CHUNKS: usize = 20_000;

fn long_answer(n: usize) -> Turn {
    // Two bytes per chunk keeps three answers far from the context limit (no compaction).
    Turn::from(Reply::text(format!("{n} ").repeat(CHUNKS)).with_text_chunks(CHUNKS))
}

/// Opens `/event` on a socket with a tiny receive buffer, reads up to `server.connected`, and returns the
/// socket without reading any further.
async fn stalled_client(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(b"GET /event HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&seen).contains("server.connected") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed");
        seen.extend_from_slice(&buf[..n]);
    }
    stream
}

/// Reads from a stalled client until `needle` shows up.
async fn read_until(stream: &mut TcpStream, needle: &str) {
    let mut tail = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended before `{needle}`");
        tail.push_str(&String::from_utf8_lossy(&buf[..n]));
        if tail.contains(needle) {
            return;
        }
        let keep = tail.len().saturating_sub(needle.len());
        tail.drain(..tail.floor_char_boundary(keep));
    }
}

async fn timed_prompt(h: &Harness, session: &str) -> Duration {
    let start = Instant::now();
    let (status, result) = h
        .post(&format!("/session/{session}/prompt"), json!({"parts": [{"type": "text", "text": "go"}]}))
        .await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["stop"], json!({"type": "completed"}));
    start.elapsed()
}

/// A run watched by a client that reads everything.
async fn with_reading_client(h: &Harness, session: &str) -> Duration {
    let mut reader = h.events("").await;
    let reading = tokio::spawn(async move { reader.until(|e| e.kind() == "session.idle").await.len() });
    let elapsed = timed_prompt(h, session).await;
    assert!(tokio::time::timeout(PATIENCE, reading).await.unwrap().unwrap() > CHUNKS);
    elapsed
}

#[tokio::test]
async fn a_client_that_stops_reading_does_not_delay_the_run() {
    let h = Harness::start(Script::new([long_answer(1), long_answer(2), long_answer(3)])).await;
    let session = h.create_session().await;
    let addr: SocketAddr = h.base.trim_start_matches("http://").parse().unwrap();

    let reading_first = with_reading_client(&h, &session).await;
    let mut stalled = stalled_client(addr).await;
    let with_stalled = timed_prompt(&h, &session).await;
    let reading_again = with_reading_client(&h, &session).await;

    eprintln!(
        "run with a reading client: {reading_first:?}, {reading_again:?}; with a stalled client: {with_stalled:?}"
    );
    let reading = reading_first.max(reading_again);
    assert!(
        with_stalled < reading * 2,
        "a stalled client slowed the run: {with_stalled:?} vs {reading_first:?} / {reading_again:?} with a reading client"
    );
    // It really fell behind: when it reads again it is told it missed events.
    tokio::time::timeout(PATIENCE, read_until(&mut stalled, r#""type":"resync""#)).await.unwrap();
}

/// Reads SSE frames from a raw socket until `last` is seen; returns the ids and whether a resync came.
async fn read_ids_until(stream: &mut TcpStream, last: u64) -> (Vec<u64>, bool) {
    let mut ids = Vec::new();
    let mut resync = false;
    let mut pending = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    while ids.last() != Some(&last) {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "the stream ended");
        pending.push_str(std::str::from_utf8(&buf[..n]).unwrap());
        while let Some(end) = pending.find("\n\n") {
            let frame: String = pending.drain(..end + 2).collect();
            resync |= frame.contains(r#""type":"resync""#);
            if let Some(id) = frame.lines().find_map(|l| l.strip_prefix("id: ")) {
                ids.push(id.parse().unwrap());
            }
        }
    }
    (ids, resync)
}

#[tokio::test]
async fn a_client_that_lags_behind_the_channel_catches_up_from_the_replay_buffer() {
    let h = Harness::start(Script::new(Vec::<Turn>::new())).await;
    let addr: SocketAddr = h.base.trim_start_matches("http://").parse().unwrap();
    let mut stalled = stalled_client(addr).await;
    let bus = h.engine.bus().clone();
    // More than the broadcast channel holds (4 096), less than the replay buffer (10 000).
    let published: Vec<u64> = (0..8_000)
        .map(|n| {
            bus.publish(codeloop_types::EventPayload::SessionCompacted {
                session_id: format!("ses_{n}").into(),
            })
        })
        .collect();
    let last = *published.last().unwrap();
    let (ids, resync) = tokio::time::timeout(PATIENCE, read_ids_until(&mut stalled, last)).await.unwrap();
    assert!(!resync, "the replay buffer still held every missed event");
    assert_eq!(ids, published, "no gap, no duplicate");
}

#[tokio::test]
async fn heartbeats_keep_an_idle_stream_alive() {
    let h = Harness::start_with(Script::new(Vec::<Turn>::new()), |setup| {
        setup.options.heartbeat = Duration::from_millis(50);
    })
    .await;
    let mut sse = h.events("").await;
    let first = sse.next().await;
    let second = sse.next().await;
    assert_eq!((first.kind(), second.kind()), ("server.heartbeat", "server.heartbeat"));
    // No `id:` line: the client's Last-Event-ID stays what the last real event set.
    assert_eq!((first.id, first.data.get("id")), (Some(0), None));
}
