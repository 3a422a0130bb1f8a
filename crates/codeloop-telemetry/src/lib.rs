//! Telemetry (DESIGN.md §5h): what this process's runs did, read from the events it publishes, reported
//! as Prometheus text for `GET /metrics` and, when a collector is configured, as OpenTelemetry traces and
//! metrics over OTLP/HTTP.
//!
//! Owns: turning events into facts ([`facts`]), the Prometheus counters, the span tree and the exporters.
//! Must not: reach into the engine or slow a run. It only watches the bus; the SDK exports on its own
//! threads, with bounded queues that drop when the collector is away, and the last flush is bounded.

pub mod facts;
mod otel;
mod prometheus;

use std::time::Duration;

use codeloop_core::Bus;
use tokio_util::sync::CancellationToken;

pub use otel::{ExportError, Settings, new_instance_id};
pub use prometheus::Metrics;

/// The longest the last flush may hold up a process that is ending (DESIGN.md §5h: at most 0.2 s).
pub const FINAL_FLUSH: Duration = Duration::from_millis(180);

/// OpenTelemetry export of one process's runs, until [`Telemetry::finish`].
pub struct Telemetry {
    stop: CancellationToken,
    watcher: Option<tokio::task::JoinHandle<otel::SpanRecorder>>,
    exporters: Option<otel::Exporters>,
}

impl Telemetry {
    /// Starts exporting what `bus` carries from this process. Call inside the Tokio runtime.
    pub fn start(bus: &Bus, settings: &Settings) -> Result<Telemetry, ExportError> {
        // The exporter's client is the workspace's rustls reqwest, which needs the process's provider.
        codeloop_core::mcp::ensure_crypto_provider();
        let exporters = otel::Exporters::start(settings)?;
        let recorder = otel::SpanRecorder::new(&exporters, settings.log_content);
        let stop = CancellationToken::new();
        let watcher = facts::watch(bus.subscribe_local(), stop.clone(), recorder);
        Ok(Telemetry { stop, watcher: Some(watcher), exporters: Some(exporters) })
    }

    /// Ends the spans still open, then sends what is left, waiting at most [`FINAL_FLUSH`]: a collector
    /// that is down or silent keeps nothing waiting.
    pub async fn finish(mut self) {
        self.stop.cancel();
        if let Some(watcher) = self.watcher.take() {
            // The recorder drops with the task's result: its spans are ended, and exporting is the SDK's.
            let _ = watcher.await;
        }
        let Some(exporters) = self.exporters.take() else { return };
        let (done, flushed) = tokio::sync::oneshot::channel();
        shut_down_elsewhere(exporters, Some(done));
        let _ = tokio::time::timeout(FINAL_FLUSH, flushed).await;
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(exporters) = self.exporters.take() {
            shut_down_elsewhere(exporters, None);
        }
    }
}

/// Shuts both providers down on a thread of their own (the SDK's shutdown blocks, and a provider dropped
/// on the caller's thread would block there instead), and says when both are done.
fn shut_down_elsewhere(exporters: otel::Exporters, done: Option<tokio::sync::oneshot::Sender<()>>) {
    let spawned = std::thread::Builder::new().name("codeloop-otel-flush".into()).spawn(move || {
        let otel::Exporters { tracer_provider, meter_provider } = exporters;
        let traces = std::thread::spawn(move || {
            let _ = tracer_provider.shutdown_with_timeout(FINAL_FLUSH);
        });
        let _ = meter_provider.shutdown_with_timeout(FINAL_FLUSH);
        let _ = traces.join();
        if let Some(done) = done {
            let _ = done.send(());
        }
    });
    if let Err(error) = spawned {
        tracing::debug!("telemetry: cannot start the flush thread: {error}");
    }
}
