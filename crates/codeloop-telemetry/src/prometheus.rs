//! `GET /metrics` (DESIGN.md §5h): Prometheus text from the facts of this process's runs — tokens and
//! cost per step, tool calls by status, retries, active runs, steps, provider latency and time to first
//! token.
//!
//! Owns: the counters and their text format. Must not: reach into the engine; it only reads facts.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use codeloop_core::Bus;
use codeloop_types::LockExt;
use tokio_util::sync::CancellationToken;

use crate::facts::{self, Fact, Recorder};

/// Histogram buckets, in seconds.
pub(crate) const BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

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
    duration: BTreeMap<String, Histogram>,
    ttft: BTreeMap<String, Histogram>,
}

/// The server's metrics, fed by a task that watches the bus.
#[derive(Clone, Default)]
pub struct Metrics {
    counters: Arc<Mutex<Counters>>,
}

/// Whether a tool name is one the engine offers (built-in or a connected MCP server's).
pub type KnownTool = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The label of a tool call whose name is no tool the engine offers: a model's made-up or hostile name
/// never becomes a label of its own (DESIGN.md §5j).
pub const INVALID_TOOL: &str = "invalid";

/// The four token counts of a step, the way both exports name them: `input` is every prompt token
/// (uncached, cache read, cache write), `output` includes reasoning.
pub(crate) fn token_counts(tokens: &codeloop_types::Tokens) -> [(&'static str, u64); 4] {
    [
        ("input", tokens.input + tokens.cache.read + tokens.cache.write),
        ("output", tokens.output + tokens.reasoning),
        ("cache_read", tokens.cache.read),
        ("cache_write", tokens.cache.write),
    ]
}

struct Feed(Metrics, KnownTool);

impl Recorder for Feed {
    fn record(&mut self, fact: &Fact<'_>) {
        let mut c = self.0.counters.locked();
        match fact {
            Fact::RunStarted { session, .. } => {
                c.busy.insert(session.to_string());
            }
            Fact::RunEnded { session, .. } => {
                c.busy.remove(session.as_str());
            }
            Fact::Retry { .. } => c.retries += 1,
            Fact::FirstToken { model, after, .. } => {
                c.ttft.entry(model.to_string()).or_default().observe(after.as_secs_f64());
            }
            Fact::RequestFinished { model, step, took, .. } => {
                let model = model.to_string();
                c.steps += 1;
                c.cost += step.cost;
                c.duration.entry(model.clone()).or_default().observe(took.as_secs_f64());
                for (kind, n) in token_counts(&step.tokens) {
                    *c.tokens.entry((kind, model.clone())).or_default() += n;
                }
            }
            Fact::ToolEnded { tool, status, .. } => {
                let name = if (self.1)(&tool.tool) { tool.tool.clone() } else { INVALID_TOOL.to_owned() };
                *c.tool_calls.entry((name, status.as_str())).or_default() += 1;
            }
            _ => {}
        }
    }
}

impl Metrics {
    /// Starts watching the events this process publishes until `stop` is cancelled; a tool call is
    /// counted under its tool's name only when `known` says the engine offers that tool.
    pub fn watch(bus: &Bus, stop: CancellationToken, known: KnownTool) -> Metrics {
        let metrics = Metrics::default();
        facts::watch(bus.subscribe_local(), stop, Feed(metrics.clone(), known));
        metrics
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

/// Appends the figures of many workers on one store: queued input over every session, and this
/// process's lease renewals, lost leases and take-overs.
pub fn render_scale(out: &mut String, figures: &codeloop_core::ScaleFigures) {
    header(out, "codeloop_queue_depth", "gauge", "Queued inputs waiting, over every session of the store.");
    let _ = writeln!(out, "codeloop_queue_depth {}", figures.queue_depth);
    header(
        out,
        "codeloop_lease_renewals_total",
        "counter",
        "Run-lease renewals this process made (PostgreSQL).",
    );
    let _ = writeln!(out, "codeloop_lease_renewals_total {}", figures.lease_renewals);
    header(out, "codeloop_leases_lost_total", "counter", "Run leases this process lost (PostgreSQL).");
    let _ = writeln!(out, "codeloop_leases_lost_total {}", figures.leases_lost);
    header(out, "codeloop_failovers_total", "counter", "Sessions this process took over from a dead one.");
    let _ = writeln!(out, "codeloop_failovers_total {}", figures.failovers);
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
