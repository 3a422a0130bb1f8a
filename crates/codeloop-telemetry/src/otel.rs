//! OpenTelemetry export (DESIGN.md §5h): the span tree in the GenAI semantic conventions' names,
//! `invoke_agent {agent}` → `codeloop.step` → `chat {model}` (CLIENT) / `execute_tool {tool}` /
//! `codeloop.hook`, `codeloop.compaction` under the run; the conventions' attributes (names from the
//! `opentelemetry-semantic-conventions` crate) beside codeloop's own `codeloop.*`; codeloop's metrics and
//! the conventions' `gen_ai.client.token.usage` and `gen_ai.client.operation.duration`; all sent over
//! OTLP/HTTP (protobuf) by the SDK's batching threads.
//!
//! Spans are built from facts after the fact, with the times the facts carry, so nothing here runs
//! inside a step. The SDK exports on its own threads with bounded queues: a collector that refuses or
//! never answers drops spans and costs the run nothing; the last flush is bounded too.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::{Duration, SystemTime};

use codeloop_types::{MessageId, PartId, SessionId};
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _, UpDownCounter};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider};

use crate::facts::{Fact, Recorder};
use crate::genai::{
    DURATION_BOUNDS, TOKEN_BOUNDS, model_attributes, provider_finish, provider_name, semconv, tool_attributes,
};
use crate::prometheus::token_counts;

/// What to export, and where: decided at the program's edge (config, then the `OTEL_*` variables).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where spans go (`…/v1/traces`).
    pub traces_url: String,
    /// Where metrics go (`…/v1/metrics`).
    pub metrics_url: String,
    pub service_name: String,
    /// `service.instance.id`: one per process, so workers of one deployment are told apart.
    pub instance_id: String,
    pub log_content: bool,
    /// How long finished spans wait to be batched (`None`: `OTEL_BSP_SCHEDULE_DELAY` or the SDK's).
    pub batch_delay: Option<Duration>,
    /// How often metrics are sent (`None`: `OTEL_METRIC_EXPORT_INTERVAL` or the SDK's).
    pub metric_interval: Option<Duration>,
    /// `OTEL_EXPORTER_OTLP_HEADERS`-style extra headers are read by the SDK itself; this is the time one
    /// export may take.
    pub export_timeout: Duration,
}

/// `base` with `/v1/{signal}` appended, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read.
pub fn signal_url(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

/// A fresh `service.instance.id`: 32 random hex digits.
pub fn new_instance_id() -> String {
    use opentelemetry_sdk::trace::IdGenerator as _;
    opentelemetry_sdk::trace::RandomIdGenerator::default().new_trace_id().to_string()
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start the OpenTelemetry exporter: {0} (check [telemetry] otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)"
)]
pub struct ExportError(String);

/// The running exporters, and the one HTTP client both use.
#[derive(Clone)]
pub(crate) struct Exporters {
    pub tracer_provider: SdkTracerProvider,
    pub meter_provider: SdkMeterProvider,
    pub client: reqwest::blocking::Client,
}

impl Exporters {
    /// Builds the exporters. Blocks (the HTTP client is a blocking one): call it off the async runtime.
    pub fn build(settings: &Settings) -> Result<Exporters, ExportError> {
        let mut client = reqwest::blocking::Client::builder().timeout(settings.export_timeout).no_proxy();
        let plain = [&settings.traces_url, &settings.metrics_url].iter().all(|u| u.starts_with("http://"));
        if plain {
            // Loading the system's root certificates costs more than a whole run; plain HTTP needs none.
            client = client.tls_certs_only([]);
        }
        let client = client.build().map_err(|e| ExportError(e.to_string()))?;
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attributes([
                KeyValue::new("service.instance.id", settings.instance_id.clone()),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .build();
        // One attempt per batch: a collector that is away loses that batch, and the next goes out on time.
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(client.clone())
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .with_endpoint(settings.traces_url.clone())
            .build()
            .map_err(|e| ExportError(e.to_string()))?;
        let mut batch = BatchConfigBuilder::default();
        if let Some(delay) = settings.batch_delay {
            batch = batch.with_scheduled_delay(delay);
        }
        let processor = BatchSpanProcessor::builder(spans).with_batch_config(batch.build()).build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.clone())
            .build();

        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(client.clone())
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .with_endpoint(settings.metrics_url.clone())
            .build()
            .map_err(|e| ExportError(e.to_string()))?;
        let mut reader = PeriodicReader::builder(metrics);
        if let Some(interval) = settings.metric_interval {
            reader = reader.with_interval(interval);
        }
        let meter_provider =
            SdkMeterProvider::builder().with_reader(reader.build()).with_resource(resource).build();
        Ok(Exporters { tracer_provider, meter_provider, client })
    }

    /// Whether the collector answers at all: an empty trace export (valid OTLP), any HTTP status.
    pub fn probe(&self, traces_url: &str, within: Duration) -> bool {
        self.client
            .post(traces_url)
            .header("content-type", "application/x-protobuf")
            .timeout(within)
            .body(Vec::new())
            .send()
            .is_ok()
    }
}

struct Instruments {
    tokens: Counter<u64>,
    cost: Counter<f64>,
    tool_calls: Counter<u64>,
    duration: Histogram<f64>,
    ttft: Histogram<f64>,
    retries: Counter<u64>,
    runs_active: UpDownCounter<i64>,
    steps: Counter<u64>,
    /// `gen_ai.client.token.usage`.
    token_usage: Histogram<u64>,
    /// `gen_ai.client.operation.duration`.
    operation_duration: Histogram<f64>,
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        let seconds: Vec<f64> = crate::prometheus::BUCKETS.to_vec();
        Self {
            tokens: meter
                .u64_counter("codeloop.tokens")
                .with_unit("{token}")
                .with_description("Tokens by type and model")
                .build(),
            cost: meter
                .f64_counter("codeloop.cost")
                .with_unit("USD")
                .with_description("Cost of the model requests")
                .build(),
            tool_calls: meter
                .u64_counter("codeloop.tool.calls")
                .with_description("Tool calls that ended, by tool and status")
                .build(),
            duration: meter
                .f64_histogram("codeloop.provider.duration")
                .with_unit("s")
                .with_description("Provider request duration")
                .with_boundaries(seconds.clone())
                .build(),
            ttft: meter
                .f64_histogram("codeloop.provider.ttft")
                .with_unit("s")
                .with_description("Time to the first streamed token")
                .with_boundaries(seconds)
                .build(),
            retries: meter
                .u64_counter("codeloop.retries")
                .with_description("Provider requests retried")
                .build(),
            runs_active: meter
                .i64_up_down_counter("codeloop.runs.active")
                .with_description("Runs in progress")
                .build(),
            steps: meter.u64_counter("codeloop.steps").with_description("Provider steps finished").build(),
            token_usage: meter
                .u64_histogram(semconv::GEN_AI_CLIENT_TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BOUNDS.to_vec())
                .build(),
            operation_duration: meter
                .f64_histogram(semconv::GEN_AI_CLIENT_OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build(),
        }
    }
}

/// One assistant message: its step span and the request in flight.
struct Step {
    cx: Context,
    request: Option<Context>,
    /// The request whose stream finished, with when: its span ends (at that time) once the message's
    /// texts are final, so the completion can still be added.
    finished: Option<(Context, SystemTime)>,
    /// Latest text per part, for `gen_ai.content.completion` (only with `log_content`).
    texts: Vec<(PartId, String)>,
}

struct Run {
    cx: Context,
    model_set: bool,
    /// The run span has its agent's name.
    agent_set: bool,
    steps: HashMap<MessageId, Step>,
    /// Open tool spans, with the tool's name.
    tools: HashMap<PartId, (Context, String)>,
    compaction: Option<Context>,
    /// The message of the step that began last, where hooks between tools belong.
    last_step: Option<MessageId>,
    prompt: Option<String>,
    failed: Option<String>,
}

/// Builds spans and records metrics from facts.
pub(crate) struct SpanRecorder {
    tracer: SdkTracer,
    instruments: Instruments,
    log_content: bool,
    runs: HashMap<SessionId, Run>,
    /// Subagent sessions → the session that started them; forgotten when the child's run ends.
    parents: HashMap<SessionId, SessionId>,
    /// The person's latest text per session, stored before its run starts (only with `log_content`).
    prompts: HashMap<SessionId, String>,
}

pub(crate) fn session_attribute(session: &SessionId) -> KeyValue {
    KeyValue::new("codeloop.session.id", session.to_string())
}

impl SpanRecorder {
    pub fn new(
        tracer_provider: &SdkTracerProvider,
        meter_provider: &SdkMeterProvider,
        log_content: bool,
    ) -> Self {
        let tracer = tracer_provider.tracer("codeloop");
        let meter = meter_provider.meter("codeloop");
        Self {
            tracer,
            instruments: Instruments::new(&meter),
            log_content,
            runs: HashMap::new(),
            parents: HashMap::new(),
            prompts: HashMap::new(),
        }
    }

    fn child(
        &self,
        name: impl Into<std::borrow::Cow<'static, str>>,
        kind: SpanKind,
        parent: &Context,
        at: SystemTime,
        attributes: Vec<KeyValue>,
    ) -> Context {
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        Context::new().with_span(span)
    }

    /// Where a subagent's run hangs: the parent's open `task` call, else its latest step, else its run.
    fn parent_context(&self, session: &SessionId) -> Context {
        let Some(run) = self.parents.get(session).and_then(|p| self.runs.get(p)) else {
            return Context::new();
        };
        if let Some((cx, _)) = run.tools.values().find(|(_, name)| name == "task") {
            return cx.clone();
        }
        run.last_step.as_ref().and_then(|m| run.steps.get(m)).map_or_else(|| run.cx.clone(), |s| s.cx.clone())
    }

    fn start_run(&mut self, session: &SessionId, at: SystemTime) -> &mut Run {
        let fresh = (!self.runs.contains_key(session)).then(|| {
            let parent = self.parent_context(session);
            // Named for its agent when its first request says which (`invoke_agent {agent}`).
            let attributes = vec![
                session_attribute(session),
                KeyValue::new(semconv::GEN_AI_OPERATION_NAME, "invoke_agent"),
                KeyValue::new(semconv::GEN_AI_CONVERSATION_ID, session.to_string()),
            ];
            self.child("invoke_agent", SpanKind::Internal, &parent, at, attributes)
        });
        match self.runs.entry(session.clone()) {
            Entry::Occupied(run) => run.into_mut(),
            Entry::Vacant(slot) => {
                self.instruments.runs_active.add(1, &[]);
                slot.insert(Run {
                    cx: fresh.unwrap_or_default(),
                    model_set: false,
                    agent_set: false,
                    steps: HashMap::new(),
                    tools: HashMap::new(),
                    compaction: None,
                    last_step: None,
                    prompt: self.prompts.remove(session),
                    failed: None,
                })
            }
        }
    }

    fn end_run(&mut self, session: &SessionId, at: SystemTime) {
        self.parents.remove(session);
        let Some(mut run) = self.runs.remove(session) else { return };
        self.instruments.runs_active.add(-1, &[]);
        for (cx, _) in run.tools.values() {
            cx.span().set_status(Status::error("the run ended before the tool"));
            cx.span().end_with_timestamp(at);
        }
        for step in run.steps.values_mut() {
            end_finished(step, self.log_content);
            if let Some(request) = &step.request {
                request.span().end_with_timestamp(at);
            }
            step.cx.span().end_with_timestamp(at);
        }
        if let Some(compaction) = &run.compaction {
            compaction.span().end_with_timestamp(at);
        }
        if let Some(failed) = run.failed {
            run.cx.span().set_status(Status::error(failed));
        }
        run.cx.span().end_with_timestamp(at);
    }

    fn content_event(&self, cx: &Context, name: &'static str, key: &'static str, text: &str) {
        if self.log_content {
            cx.span().add_event(name, vec![KeyValue::new(key, text.to_owned())]);
        }
    }
}

impl Recorder for SpanRecorder {
    fn record(&mut self, fact: &Fact<'_>) {
        match fact {
            Fact::RunStarted { session, at } => {
                self.start_run(session, *at);
            }
            Fact::RunEnded { session, at } => self.end_run(session, *at),
            Fact::Child { session, parent } => {
                self.parents.insert((*session).clone(), (*parent).clone());
            }
            Fact::RequestStarted { session, message, model, agent, summary, at } => {
                let log_content = self.log_content;
                let run = self.start_run(session, *at);
                if !run.model_set {
                    run.model_set = true;
                    run.cx.span().set_attributes(model_attributes(model));
                }
                if !run.agent_set && !*summary && !agent.is_empty() {
                    run.agent_set = true;
                    run.cx.span().update_name(format!("invoke_agent {agent}"));
                    run.cx.span().set_attribute(KeyValue::new(semconv::GEN_AI_AGENT_NAME, agent.to_string()));
                }
                let prompt = run.prompt.clone();
                let run_cx = run.cx.clone();
                let existing = run.steps.get(*message).map(|s| s.cx.clone());
                let open_compaction = run.compaction.clone();
                let mut attributes = vec![session_attribute(session)];
                attributes.extend(model_attributes(model));
                let (step_cx, compaction) = match existing {
                    Some(cx) => (cx, None),
                    None if *summary => {
                        let cx = open_compaction.unwrap_or_else(|| {
                            let attributes = vec![session_attribute(session)];
                            self.child("codeloop.compaction", SpanKind::Internal, &run_cx, *at, attributes)
                        });
                        (cx.clone(), Some(cx))
                    }
                    None => {
                        let mut step = attributes.clone();
                        if !agent.is_empty() {
                            step.push(KeyValue::new(semconv::GEN_AI_AGENT_NAME, agent.to_string()));
                        }
                        (self.child("codeloop.step", SpanKind::Internal, &run_cx, *at, step), None)
                    }
                };
                attributes.extend([
                    KeyValue::new(semconv::GEN_AI_OPERATION_NAME, "chat"),
                    KeyValue::new(semconv::GEN_AI_CONVERSATION_ID, session.to_string()),
                    KeyValue::new("codeloop.provider.id", model.provider_id.clone()),
                ]);
                let name = format!("chat {}", model.model_id);
                let request = self.child(name, SpanKind::Client, &step_cx, *at, attributes);
                if let Some(prompt) = &prompt {
                    self.content_event(&request, "gen_ai.content.prompt", "gen_ai.prompt", prompt);
                }
                let Some(run) = self.runs.get_mut(*session) else { return };
                if compaction.is_some() {
                    run.compaction = compaction;
                }
                let step = run.steps.entry((*message).clone()).or_insert(Step {
                    cx: step_cx,
                    request: None,
                    finished: None,
                    texts: Vec::new(),
                });
                if let Some(previous) = step.request.replace(request) {
                    previous.span().end_with_timestamp(*at);
                }
                end_finished(step, log_content);
                run.last_step = Some((*message).clone());
            }
            Fact::FirstToken { model, after, .. } => {
                self.instruments
                    .ttft
                    .record(after.as_secs_f64(), &[KeyValue::new("model", model.to_string())]);
            }
            Fact::RequestFinished { session, message, model, step: usage, took, at } => {
                let model_label = model.to_string();
                self.instruments
                    .duration
                    .record(took.as_secs_f64(), &[KeyValue::new("model", model_label.clone())]);
                self.instruments.steps.add(1, &[KeyValue::new("model", model_label.clone())]);
                self.instruments.cost.add(usage.cost, &[KeyValue::new("model", model_label.clone())]);
                for (kind, n) in token_counts(&usage.tokens) {
                    self.instruments
                        .tokens
                        .add(n, &[KeyValue::new("type", kind), KeyValue::new("model", model_label.clone())]);
                }
                let [input, output, cache_read, cache_write] = token_counts(&usage.tokens).map(|(_, n)| n);
                let provider = provider_name(&model.provider_id);
                let operation = [
                    KeyValue::new(semconv::GEN_AI_OPERATION_NAME, "chat"),
                    KeyValue::new(semconv::GEN_AI_PROVIDER_NAME, provider.clone()),
                    KeyValue::new(semconv::GEN_AI_REQUEST_MODEL, model.model_id.clone()),
                ];
                self.instruments.operation_duration.record(took.as_secs_f64(), &operation);
                for (kind, n) in [("input", input), ("output", output)] {
                    let mut labels = operation.to_vec();
                    labels.push(KeyValue::new(semconv::GEN_AI_TOKEN_TYPE, kind));
                    self.instruments.token_usage.record(n, &labels);
                }
                let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                let usage_attributes = [
                    KeyValue::new(semconv::GEN_AI_USAGE_INPUT_TOKENS, count(input)),
                    KeyValue::new(semconv::GEN_AI_USAGE_OUTPUT_TOKENS, count(output)),
                    KeyValue::new(semconv::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, count(cache_read)),
                    KeyValue::new(semconv::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, count(cache_write)),
                    KeyValue::new(
                        "codeloop.usage.cache_read_tokens",
                        i64::try_from(cache_read).unwrap_or(i64::MAX),
                    ),
                    KeyValue::new(
                        "codeloop.usage.cache_write_tokens",
                        i64::try_from(cache_write).unwrap_or(i64::MAX),
                    ),
                    KeyValue::new("codeloop.cost.usd", usage.cost),
                ];
                let finish = KeyValue::new(
                    semconv::GEN_AI_RESPONSE_FINISH_REASONS,
                    opentelemetry::Value::Array(
                        vec![opentelemetry::StringValue::from(provider_finish(&provider, usage.reason))]
                            .into(),
                    ),
                );
                let Some(step) = self.runs.get_mut(*session).and_then(|r| r.steps.get_mut(*message)) else {
                    return;
                };
                if let Some(request) = step.request.take() {
                    request.span().set_attributes(usage_attributes.clone());
                    request.span().set_attribute(finish);
                    step.finished = Some((request, *at));
                }
                add_usage(&step.cx, &usage_attributes);
            }
            Fact::MessageCompleted { session, message, error, at } => {
                let Some(run) = self.runs.get_mut(*session) else { return };
                let Some(mut step) = run.steps.remove(*message) else { return };
                end_finished(&mut step, self.log_content);
                if let Some(request) = step.request {
                    if let Some(error) = error {
                        request.span().set_status(Status::error(error.name()));
                    }
                    request.span().end_with_timestamp(*at);
                }
                if let Some(error) = error {
                    step.cx.span().set_status(Status::error(error.name()));
                }
                let is_compaction = run.compaction.as_ref().is_some_and(|c| {
                    c.span().span_context().span_id() == step.cx.span().span_context().span_id()
                });
                if !is_compaction {
                    step.cx.span().end_with_timestamp(*at);
                }
                if run.last_step.as_ref() == Some(*message) {
                    run.last_step = None;
                }
            }
            Fact::ToolStarted { session, message, part, tool, at } => {
                let log_content = self.log_content;
                let Some(run) = self.runs.get(*session) else { return };
                let parent = run.steps.get(*message).map_or_else(|| run.cx.clone(), |s| s.cx.clone());
                let cx = self.child(
                    format!("execute_tool {}", tool.tool),
                    SpanKind::Internal,
                    &parent,
                    *at,
                    tool_attributes(session, tool),
                );
                if log_content {
                    self.content_event(
                        &cx,
                        "codeloop.tool.input",
                        "codeloop.tool.input",
                        &tool.state.input().to_string(),
                    );
                }
                if let Some(run) = self.runs.get_mut(*session) {
                    run.tools.insert((*part).clone(), (cx, tool.tool.clone()));
                }
            }
            Fact::ToolEnded { session, message, part, tool, status, sandboxed, started, at } => {
                let labels =
                    [KeyValue::new("tool", tool.tool.clone()), KeyValue::new("status", status.as_str())];
                self.instruments.tool_calls.add(1, &labels);
                let Some(run) = self.runs.get_mut(*session) else { return };
                let open = run.tools.remove(*part).map(|(cx, _)| cx);
                let parent = run.steps.get(*message).map_or_else(|| run.cx.clone(), |s| s.cx.clone());
                let cx = match open {
                    Some(cx) => cx,
                    None => self.child(
                        format!("execute_tool {}", tool.tool),
                        SpanKind::Internal,
                        &parent,
                        *started,
                        tool_attributes(session, tool),
                    ),
                };
                cx.span().set_attributes([
                    KeyValue::new("codeloop.tool.status", status.as_str()),
                    KeyValue::new("codeloop.tool.sandboxed", *sandboxed),
                ]);
                if self.log_content {
                    if let codeloop_types::ToolState::Completed(done) = &tool.state {
                        self.content_event(&cx, "codeloop.tool.output", "codeloop.tool.output", &done.output);
                    } else if let codeloop_types::ToolState::Error(failed) = &tool.state {
                        self.content_event(
                            &cx,
                            "codeloop.tool.output",
                            "codeloop.tool.output",
                            &failed.error,
                        );
                    }
                }
                if *status != crate::facts::ToolStatus::Completed {
                    cx.span().set_status(Status::error(status.as_str()));
                }
                cx.span().end_with_timestamp(*at);
            }
            Fact::Text { session, message, part, text, user } => {
                if !self.log_content {
                    return;
                }
                let Some(run) = self.runs.get_mut(*session) else {
                    if *user && self.prompts.len() < 1_024 {
                        self.prompts.insert((*session).clone(), (*text).to_owned());
                    }
                    return;
                };
                if *user {
                    run.prompt = Some((*text).to_owned());
                } else if let Some(step) = run.steps.get_mut(*message) {
                    match step.texts.iter_mut().find(|(id, _)| id == *part) {
                        Some((_, kept)) => *kept = (*text).to_owned(),
                        None => step.texts.push(((*part).clone(), (*text).to_owned())),
                    }
                }
            }
            Fact::Hook { session, event, source, command, exit_code, decision, took, at } => {
                let Some(run) = self.runs.get(*session) else { return };
                let parent = run
                    .last_step
                    .as_ref()
                    .and_then(|m| run.steps.get(m))
                    .map_or_else(|| run.cx.clone(), |s| s.cx.clone());
                let mut attributes = vec![
                    session_attribute(session),
                    KeyValue::new("codeloop.hook.event", event.to_string()),
                    KeyValue::new("codeloop.hook.source", source.to_string()),
                    KeyValue::new("codeloop.hook.decision", decision.to_string()),
                ];
                if let Some(code) = exit_code {
                    attributes.push(KeyValue::new("codeloop.hook.exit_code", i64::from(*code)));
                }
                if self.log_content {
                    attributes.push(KeyValue::new("codeloop.hook.command", command.to_string()));
                }
                let start = at.checked_sub(*took).unwrap_or(*at);
                let cx = self.child("codeloop.hook", SpanKind::Internal, &parent, start, attributes);
                if exit_code.is_none() {
                    cx.span().set_status(Status::error("timed out or crashed"));
                }
                cx.span().end_with_timestamp(*at);
            }
            Fact::Retry { session, attempt, at } => {
                self.instruments.retries.add(1, &[]);
                if let Some(run) = self.runs.get(*session) {
                    run.cx.span().add_event_with_timestamp(
                        "codeloop.retry",
                        *at,
                        vec![KeyValue::new("codeloop.retry.attempt", i64::from(*attempt))],
                    );
                }
            }
            Fact::Compacted { session, at } => {
                if let Some(compaction) = self.runs.get_mut(*session).and_then(|r| r.compaction.take()) {
                    compaction.span().end_with_timestamp(*at);
                }
            }
            Fact::Limit { session, limit, value, used, at } => {
                let Some(run) = self.runs.get_mut(*session) else { return };
                run.cx.span().add_event_with_timestamp(
                    "codeloop.limit",
                    *at,
                    vec![
                        KeyValue::new("codeloop.limit", limit.key()),
                        KeyValue::new("codeloop.limit.value", *value),
                        KeyValue::new("codeloop.limit.used", *used),
                    ],
                );
                run.failed = Some(format!("limit reached: {}", limit.key()));
            }
            Fact::CacheChanged { session, reason, at } => {
                if let Some(run) = self.runs.get(*session) {
                    let reason =
                        serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned));
                    run.cx.span().add_event_with_timestamp(
                        "codeloop.cache",
                        *at,
                        vec![KeyValue::new("codeloop.cache.reason", reason.unwrap_or_default())],
                    );
                }
            }
            Fact::Error { session, error, .. } => {
                if let Some(run) = self.runs.get_mut(*session)
                    && !error.is_aborted()
                {
                    run.failed = Some(error.name().to_owned());
                }
            }
        }
    }

    fn close(&mut self) {
        let now = SystemTime::now();
        let open: Vec<SessionId> = self.runs.keys().cloned().collect();
        for session in open {
            self.end_run(&session, now);
        }
    }
}

/// Ends the step's finished request at the time its stream ended, with the completion when content is
/// logged.
fn end_finished(step: &mut Step, log_content: bool) {
    let Some((request, at)) = step.finished.take() else { return };
    let completion = step.texts.drain(..).map(|(_, text)| text).collect::<Vec<_>>().join("\n");
    if log_content && !completion.is_empty() {
        request
            .span()
            .add_event("gen_ai.content.completion", vec![KeyValue::new("gen_ai.completion", completion)]);
    }
    request.span().end_with_timestamp(at);
}

fn add_usage(cx: &Context, usage: &[KeyValue; 7]) {
    // A message with several steps sums them on its step span: the last value of an attribute wins, so
    // the step span carries the message's totals only when it had one request (the common case).
    cx.span().set_attributes(usage.iter().cloned());
}
