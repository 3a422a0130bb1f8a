//! `GET /metrics` (DESIGN.md §5h): Prometheus text computed from the engine's bus events — tokens and
//! cost from step-finish parts, tool calls by status, retries, active runs, steps, and provider latency
//! and time to first token measured as the events arrive here.
//!
//! Owns: the counters and their text format. Must not: reach into the engine; it only watches events.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use codeloop_types::{Event, EventPayload, LockExt, Message, PartKind, SessionStatus, ToolState};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// Histogram buckets, in seconds.
const BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Requests in flight tracked at once; older ones are forgotten (a bound, never reached in practice).
const MAX_IN_FLIGHT: usize = 4_096;

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (bucket, count) in BUCKETS.iter().zip(self.counts.iter_mut()) {
            if seconds <= *bucket {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

/// A provider request in flight: when its message appeared, and whether its first token came.
struct InFlight {
    model: String,
    started: Instant,
    first_token: bool,
}

#[derive(Default)]
struct Counters {
    /// (type, model) → tokens.
    tokens: BTreeMap<(&'static str, String), u64>,
    cost: f64,
    steps: u64,
    /// (tool, status) → calls.
    tool_calls: BTreeMap<(String, &'static str), u64>,
    retries: u64,
    busy: HashSet<String>,
    in_flight: HashMap<String, InFlight>,
    counted_tools: HashSet<String>,
    duration: BTreeMap<String, Histogram>,
    ttft: BTreeMap<String, Histogram>,
}

/// The server's metrics, fed by a task that watches the bus.
#[derive(Clone, Default)]
pub struct Metrics {
    counters: Arc<Mutex<Counters>>,
}

impl Metrics {
    /// Starts watching `engine`'s events until `stop` is cancelled.
    pub fn watch(engine: &codeloop_core::Engine, stop: CancellationToken) -> Metrics {
        let metrics = Metrics::default();
        let mut events = engine.bus().subscribe();
        let watcher = metrics.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    event = events.recv() => match event {
                        Ok(event) => watcher.observe(&event),
                        // Missed events only lose counts; the metrics go on.
                        Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    },
                }
            }
        });
        metrics
    }

    fn observe(&self, event: &Event) {
        let mut c = self.counters.locked();
        match &event.payload {
            EventPayload::MessageUpdated { info: Message::Assistant(info), .. }
                if info.time.completed.is_none() && c.in_flight.len() < MAX_IN_FLIGHT =>
            {
                let model = info.model.to_string();
                c.in_flight.entry(info.id.to_string()).or_insert(InFlight {
                    model,
                    started: Instant::now(),
                    first_token: false,
                });
            }
            EventPayload::PartDelta { message_id, .. } => c.first_token(message_id.as_str()),
            EventPayload::PartUpdated { part, .. } => match &part.kind {
                PartKind::Text(_) | PartKind::Reasoning(_) => c.first_token(part.message_id.as_str()),
                PartKind::StepFinish(step) => {
                    c.step_finished(part.message_id.as_str(), &step.tokens, step.cost)
                }
                PartKind::Tool(tool) => {
                    let status = match &tool.state {
                        ToolState::Completed(_) => "completed",
                        ToolState::Error(_) if tool.state.is_interrupted() => "aborted",
                        ToolState::Error(_) => "error",
                        // A call streaming in is the request's first output too.
                        ToolState::Pending(_) | ToolState::Running(_) => {
                            c.first_token(part.message_id.as_str());
                            return;
                        }
                    };
                    if c.counted_tools.insert(part.id.to_string()) {
                        *c.tool_calls.entry((tool.tool.clone(), status)).or_default() += 1;
                    }
                }
                _ => {}
            },
            EventPayload::SessionStatus { session_id, status } => match status {
                SessionStatus::Busy => {
                    c.busy.insert(session_id.to_string());
                }
                SessionStatus::Retry { .. } => {
                    c.retries += 1;
                    c.busy.insert(session_id.to_string());
                }
                SessionStatus::Idle => {
                    c.busy.remove(session_id.as_str());
                }
            },
            EventPayload::SessionIdle { session_id } => {
                c.busy.remove(session_id.as_str());
            }
            _ => {}
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let c = self.counters.locked();
        let mut out = String::new();
        header(&mut out, "codeloop_tokens_total", "counter", "Tokens sent and received, by type and model.");
        for ((kind, model), n) in &c.tokens {
            let _ = writeln!(out, "codeloop_tokens_total{{type=\"{kind}\",model=\"{}\"}} {n}", label(model));
        }
        header(&mut out, "codeloop_cost_usd_total", "counter", "Cost of the model requests, in USD.");
        let _ = writeln!(out, "codeloop_cost_usd_total {}", c.cost);
        header(&mut out, "codeloop_steps_total", "counter", "Provider steps finished.");
        let _ = writeln!(out, "codeloop_steps_total {}", c.steps);
        header(
            &mut out,
            "codeloop_tool_calls_total",
            "counter",
            "Tool calls that ended, by tool and status.",
        );
        for ((tool, status), n) in &c.tool_calls {
            let _ = writeln!(
                out,
                "codeloop_tool_calls_total{{tool=\"{}\",status=\"{status}\"}} {n}",
                label(tool)
            );
        }
        header(&mut out, "codeloop_retries_total", "counter", "Provider requests retried.");
        let _ = writeln!(out, "codeloop_retries_total {}", c.retries);
        header(&mut out, "codeloop_runs_active", "gauge", "Sessions with a run in progress.");
        let _ = writeln!(out, "codeloop_runs_active {}", c.busy.len());
        histogram(&mut out, "codeloop_provider_duration_seconds", "Provider request duration.", &c.duration);
        histogram(&mut out, "codeloop_provider_ttft_seconds", "Time to the first streamed token.", &c.ttft);
        out
    }
}

impl Counters {
    fn first_token(&mut self, message: &str) {
        if let Some(request) = self.in_flight.get_mut(message)
            && !request.first_token
        {
            request.first_token = true;
            let seconds = request.started.elapsed().as_secs_f64();
            let model = request.model.clone();
            self.ttft.entry(model).or_default().observe(seconds);
        }
    }

    fn step_finished(&mut self, message: &str, tokens: &codeloop_types::Tokens, cost: f64) {
        self.steps += 1;
        self.cost += cost;
        let request = self.in_flight.remove(message);
        let model = request.as_ref().map_or_else(|| "unknown".to_owned(), |r| r.model.clone());
        if let Some(request) = request {
            self.duration.entry(model.clone()).or_default().observe(request.started.elapsed().as_secs_f64());
        }
        let input = tokens.input + tokens.cache.read + tokens.cache.write;
        for (kind, n) in [
            ("input", input),
            ("output", tokens.output + tokens.reasoning),
            ("cache_read", tokens.cache.read),
            ("cache_write", tokens.cache.write),
        ] {
            *self.tokens.entry((kind, model.clone())).or_default() += n;
        }
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, help: &str, by_model: &BTreeMap<String, Histogram>) {
    header(out, name, "histogram", help);
    for (model, h) in by_model {
        let model = label(model);
        for (bucket, count) in BUCKETS.iter().zip(h.counts) {
            let _ = writeln!(out, "{name}_bucket{{model=\"{model}\",le=\"{bucket}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{model=\"{model}\",le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(
            out,
            "{name}_sum{{model=\"{model}\"}} {}\n{name}_count{{model=\"{model}\"}} {}",
            h.sum, h.count
        );
    }
}

/// A label value escaped as the text format wants (backslash, quote, newline).
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
