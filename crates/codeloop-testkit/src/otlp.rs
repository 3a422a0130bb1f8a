//! An OpenTelemetry collector for tests: OTLP over HTTP (protobuf, gzip or not) on 127.0.0.1, keeping
//! every span and metric point it receives, decoded, for assertions. Also a collector that accepts
//! connections and never answers, and an endpoint that refuses them, for the dead-collector cases.

use codeloop_types::LockExt;
use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message as _;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One received span, with ids in hex and attribute values as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: BTreeMap<String, Value>,
    /// Span events: name and attributes.
    pub events: Vec<(String, BTreeMap<String, Value>)>,
    /// The status code (0 unset, 1 ok, 2 error).
    pub status_code: i32,
    /// OTLP's span kind (1 internal, 2 server, 3 client, 4 producer, 5 consumer).
    pub kind: i32,
    /// The attributes of the resource that sent it (`service.name`, `service.instance.id`, …).
    pub resource: BTreeMap<String, Value>,
}

/// One received metric data point: a sum's or gauge's value, or a histogram's count and sum.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectedPoint {
    pub metric: String,
    pub attributes: BTreeMap<String, Value>,
    pub value: f64,
    /// A histogram's sample count (`None` for sums and gauges).
    pub count: Option<u64>,
    /// The metric's unit (`s`, `{token}`, …).
    pub unit: String,
    /// A histogram's explicit bucket boundaries (empty for sums and gauges).
    pub bounds: Vec<f64>,
}

#[derive(Default)]
struct Received {
    spans: Vec<CollectedSpan>,
    points: Vec<CollectedPoint>,
    requests: usize,
    /// Each export request's headers, names lowercased (an exporter's authentication among them).
    headers: Vec<BTreeMap<String, String>>,
}

/// A collector receiving OTLP/HTTP on loopback.
pub struct OtlpCollector {
    addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    arrived: watch::Sender<usize>,
    _stop: watch::Sender<bool>,
}

fn value_json(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::from(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::from(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|v| value_json(Some(v))).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(
            kv.values.iter().map(|kv| (kv.key.clone(), value_json(kv.value.as_ref()))).collect(),
        ),
        Some(any_value::Value::BytesValue(b)) => Value::from(hex(b)),
        _ => Value::Null,
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter().map(|kv| (kv.key.clone(), value_json(kv.value.as_ref()))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn body(headers: &HeaderMap, bytes: &Bytes) -> Option<Vec<u8>> {
    let gzip =
        headers.get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    if !gzip {
        return Some(bytes.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut out).ok()?;
    Some(out)
}

type Shared = (Arc<Mutex<Received>>, watch::Sender<usize>);

fn protobuf(message: impl prost::Message) -> axum::response::Response {
    ([(header::CONTENT_TYPE, "application/x-protobuf")], message.encode_to_vec()).into_response()
}

async fn traces(
    State((received, arrived)): State<Shared>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    let Some(request) = body(&headers, &bytes).and_then(|b| ExportTraceServiceRequest::decode(&b[..]).ok())
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut spans = Vec::new();
    for resource_spans in &request.resource_spans {
        let resource =
            resource_spans.resource.as_ref().map(|r| attributes(&r.attributes)).unwrap_or_default();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                spans.push(CollectedSpan {
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    attributes: attributes(&span.attributes),
                    events: span.events.iter().map(|e| (e.name.clone(), attributes(&e.attributes))).collect(),
                    status_code: span.status.as_ref().map_or(0, |s| s.code),
                    kind: span.kind,
                    resource: resource.clone(),
                });
            }
        }
    }
    record(&received, &arrived, &headers, |r| r.spans.extend(spans));
    protobuf(ExportTraceServiceResponse::default())
}

async fn metrics(
    State((received, arrived)): State<Shared>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    let Some(request) = body(&headers, &bytes).and_then(|b| ExportMetricsServiceRequest::decode(&b[..]).ok())
    else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut points = Vec::new();
    for resource in &request.resource_metrics {
        for scope in &resource.scope_metrics {
            for metric in &scope.metrics {
                let name = metric.name.clone();
                let unit = &metric.unit;
                match &metric.data {
                    Some(Data::Sum(sum)) => {
                        points.extend(sum.data_points.iter().map(|p| number(&name, unit, p)))
                    }
                    Some(Data::Gauge(gauge)) => {
                        points.extend(gauge.data_points.iter().map(|p| number(&name, unit, p)))
                    }
                    Some(Data::Histogram(h)) => points.extend(h.data_points.iter().map(|p| CollectedPoint {
                        metric: name.clone(),
                        attributes: attributes(&p.attributes),
                        value: p.sum.unwrap_or_default(),
                        count: Some(p.count),
                        unit: unit.clone(),
                        bounds: p.explicit_bounds.clone(),
                    })),
                    _ => {}
                }
            }
        }
    }
    record(&received, &arrived, &headers, |r| r.points.extend(points));
    protobuf(ExportMetricsServiceResponse::default())
}

fn number(
    name: &str,
    unit: &str,
    point: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint,
) -> CollectedPoint {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as N;
    let value = match point.value {
        Some(N::AsDouble(d)) => d,
        #[allow(clippy::cast_precision_loss)]
        Some(N::AsInt(i)) => i as f64,
        None => 0.0,
    };
    CollectedPoint {
        metric: name.to_owned(),
        attributes: attributes(&point.attributes),
        value,
        count: None,
        unit: unit.to_owned(),
        bounds: Vec::new(),
    }
}

fn record(
    received: &Mutex<Received>,
    arrived: &watch::Sender<usize>,
    headers: &HeaderMap,
    add: impl FnOnce(&mut Received),
) {
    let headers = headers
        .iter()
        .map(|(name, value)| {
            (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned())
        })
        .collect();
    let requests = {
        let mut received = received.locked();
        add(&mut received);
        received.headers.push(headers);
        received.requests += 1;
        received.requests
    };
    arrived.send_replace(requests);
}

impl OtlpCollector {
    /// A live collector on a free loopback port.
    pub async fn start() -> std::io::Result<OtlpCollector> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(Mutex::new(Received::default()));
        let arrived = watch::Sender::new(0);
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state((received.clone(), arrived.clone()));
        let (stop, mut stopped) = watch::channel(false);
        tokio::spawn(async move {
            let signal = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            if let Err(err) = axum::serve(listener, app).with_graceful_shutdown(signal).await {
                tracing::warn!("test collector stopped with an error: {err}");
            }
        });
        Ok(OtlpCollector { addr, received, arrived, _stop: stop })
    }

    /// The base URL, as `otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<CollectedSpan> {
        self.received.locked().spans.clone()
    }

    pub fn points(&self) -> Vec<CollectedPoint> {
        self.received.locked().points.clone()
    }

    /// The values header `name` (lowercase) had on each export request that carried it.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        let received = self.received.locked();
        received.headers.iter().filter_map(|h| h.get(name).cloned()).collect()
    }

    /// Export requests received (traces and metrics).
    pub fn requests(&self) -> usize {
        self.received.locked().requests
    }

    /// Waits until what was received satisfies `done`, at most `limit`; returns whether it did.
    pub async fn wait_until(
        &self,
        limit: Duration,
        done: impl Fn(&[CollectedSpan], &[CollectedPoint]) -> bool,
    ) -> bool {
        let mut arrived = self.arrived.subscribe();
        let check = || {
            let received = self.received.locked();
            done(&received.spans, &received.points)
        };
        tokio::time::timeout(limit, async {
            loop {
                if check() {
                    return;
                }
                if arrived.changed().await.is_err() {
                    return;
                }
            }
        })
        .await
        .is_ok()
            && check()
    }
}

/// A collector that accepts connections and reads requests but never answers: the slow-or-hung case.
pub struct SilentCollector {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SilentCollector {
    pub async fn start() -> std::io::Result<SilentCollector> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        Ok(SilentCollector { addr, task })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for SilentCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A loopback URL where nothing listens (connections are refused).
pub fn refused_endpoint() -> std::io::Result<String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}"))
}
