//! Telemetry (DESIGN.md §5h): what this process's runs did, read from the events it publishes, reported
//! as Prometheus text for `GET /metrics` and, when a collector is configured, as OpenTelemetry traces and
//! metrics over OTLP/HTTP.
//!
//! Owns: turning events into facts ([`facts`]), the Prometheus counters, the span tree and the exporters.
//! Must not: reach into the engine or slow a run. It only watches the bus; the exporters are built on a
//! thread of their own, the SDK exports on its own threads with bounded queues that drop when the
//! collector is away, and the last flush is bounded (and skipped for a collector that never answered).

pub mod facts;
mod genai;
mod otel;
mod prometheus;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codeloop_core::Bus;
use codeloop_types::LockExt;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use otel::{ExportError, Settings, new_instance_id, signal_url};
pub use prometheus::{INVALID_TOOL, KnownTool, Metrics, render_scale};

/// The longest the last flush may hold up a process that is ending (DESIGN.md §5h: at most 0.2 s).
pub const FINAL_FLUSH: Duration = Duration::from_millis(180);
/// How long a process that ends waits for exporters still being built.
const INIT_GRACE: Duration = Duration::from_millis(100);
/// How long a process that ends waits to learn whether the collector answers at all.
const PROBE_GRACE: Duration = Duration::from_millis(40);
/// The probe's own limit: a collector slower than this to answer an empty export counts as away.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

const UNKNOWN: u8 = 0;
const LIVE: u8 = 1;
const AWAY: u8 = 2;

/// What the exporters' thread found.
struct Shared {
    exporters: Mutex<Option<otel::Exporters>>,
    /// Whether the collector answered the probe: [`UNKNOWN`], [`LIVE`], [`AWAY`].
    health: watch::Sender<u8>,
}

/// OpenTelemetry export of one process's runs, until [`Telemetry::finish`].
pub struct Telemetry {
    stop: CancellationToken,
    watcher: Option<tokio::task::JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl Telemetry {
    /// Starts exporting what `bus` carries from this process. Returns at once: the exporters are built
    /// on a thread of their own (events wait in the subscription meanwhile). Call inside the Tokio
    /// runtime.
    pub fn start(bus: &Bus, settings: &Settings) -> Telemetry {
        // The exporter's client is the workspace's rustls reqwest, which needs the process's provider.
        codeloop_core::mcp::ensure_crypto_provider();
        let shared = Arc::new(Shared { exporters: Mutex::new(None), health: watch::Sender::new(UNKNOWN) });
        let (built, mut ready) = oneshot::channel();
        let events = bus.subscribe_local();
        let stop = CancellationToken::new();
        let log_content = settings.log_content;
        let thread_shared = shared.clone();
        let settings = settings.clone();
        let spawned = std::thread::Builder::new().name("codeloop-otel-init".into()).spawn(move || {
            match otel::Exporters::build(&settings) {
                Ok(exporters) => {
                    *thread_shared.exporters.locked() = Some(exporters.clone());
                    let _ = built.send((exporters.tracer_provider.clone(), exporters.meter_provider.clone()));
                    let live = exporters.probe(&settings.traces_url, PROBE_TIMEOUT);
                    thread_shared.health.send_replace(if live { LIVE } else { AWAY });
                    // Whoever holds the providers last must not be on the async runtime: this thread's
                    // copy goes now, the shared one in `finish`'s own thread.
                    drop(exporters);
                }
                Err(error) => {
                    tracing::warn!("{error}");
                    thread_shared.health.send_replace(AWAY);
                }
            }
        });
        if let Err(error) = spawned {
            tracing::warn!("cannot start the OpenTelemetry exporter: {error}");
        }
        let watch_stop = stop.clone();
        let watcher = tokio::spawn(async move {
            let providers = tokio::select! {
                providers = &mut ready => providers.ok(),
                // A process that ends before the exporters are built gives them a moment more: what it
                // published waits in the subscription.
                _ = watch_stop.cancelled() => {
                    tokio::time::timeout(INIT_GRACE, &mut ready).await.ok().and_then(Result::ok)
                }
            };
            let Some((tracer_provider, meter_provider)) = providers else { return };
            let recorder = otel::SpanRecorder::new(&tracer_provider, &meter_provider, log_content);
            drop((tracer_provider, meter_provider));
            drop(facts::watch(events, watch_stop, recorder).await);
        });
        Telemetry { stop, watcher: Some(watcher), shared }
    }

    /// Ends the spans still open, then sends what is left: waiting at most [`FINAL_FLUSH`] for a
    /// collector that answered, and not at all for one that is away or never answered.
    pub async fn finish(mut self) {
        self.stop.cancel();
        if let Some(watcher) = self.watcher.take() {
            let _ = watcher.await;
        }
        let mut health = self.shared.health.subscribe();
        let _ = tokio::time::timeout(PROBE_GRACE, health.wait_for(|h| *h != UNKNOWN)).await;
        let live = *health.borrow() == LIVE;
        let Some(exporters) = self.shared.exporters.locked().take() else { return };
        let (done, flushed) = oneshot::channel();
        shut_down_elsewhere(exporters, Some(done));
        if live {
            let _ = tokio::time::timeout(FINAL_FLUSH, flushed).await;
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(exporters) = self.shared.exporters.locked().take() {
            shut_down_elsewhere(exporters, None);
        }
    }
}

/// Shuts both providers down on a thread of their own (the SDK's shutdown blocks, and the blocking HTTP
/// client may not be dropped on the async runtime), and says when both are done.
fn shut_down_elsewhere(exporters: otel::Exporters, done: Option<oneshot::Sender<()>>) {
    let spawned = std::thread::Builder::new().name("codeloop-otel-flush".into()).spawn(move || {
        let otel::Exporters { tracer_provider, meter_provider, client } = exporters;
        let traces = std::thread::spawn(move || {
            let _ = tracer_provider.shutdown_with_timeout(FINAL_FLUSH);
        });
        let _ = meter_provider.shutdown_with_timeout(FINAL_FLUSH);
        let _ = traces.join();
        drop(client);
        if let Some(done) = done {
            let _ = done.send(());
        }
    });
    if let Err(error) = spawned {
        tracing::debug!("telemetry: cannot start the flush thread: {error}");
    }
}
