//! A real OTLP receiver for tests: it takes spans over OTLP/HTTP (protobuf, `POST /v1/traces`)
//! and OTLP/gRPC (the collector's `TraceService`), decodes the protocol's own messages
//! (`opentelemetry-proto`), and keeps what it got for the test to look at (`GET /spans`
//! answers them as JSON, for the Python and Node suites through the `otlp-receiver` binary).
//! It runs on a thread of its own, so that it outlives any one Tokio runtime; it stops when
//! dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;

/// One span as the receiver got it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// How it came: `http` or `grpc`.
    pub transport: &'static str,
    /// Its resource's `service.name`.
    pub service: String,
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// 16 lower-case hex digits.
    pub span_id: String,
    /// The parent's span id (empty for a root span).
    pub parent_span_id: String,
    /// Its name (`process echo`, `send echo`, `POST /v1/jobs`).
    pub name: String,
    /// `internal`, `server`, `client`, `producer` or `consumer`.
    pub kind: &'static str,
    /// Attribute values as text.
    pub attributes: BTreeMap<String, String>,
    /// Each event's name and attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// The span contexts it links to: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Its status said error.
    pub error: bool,
}

impl ReceivedSpan {
    /// An attribute's value as text.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// The span as JSON (what `GET /spans` lists).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "transport": self.transport,
            "service": self.service,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "kind": self.kind,
            "attributes": self.attributes,
            "events": self.events.iter().map(|(name, attributes)| {
                serde_json::json!({ "name": name, "attributes": attributes })
            }).collect::<Vec<_>>(),
            "links": self.links.iter().map(|(trace_id, span_id)| {
                serde_json::json!({ "trace_id": trace_id, "span_id": span_id })
            }).collect::<Vec<_>>(),
            "error": self.error,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

/// The spans of one export request.
fn spans_of(request: &ExportTraceServiceRequest, transport: &'static str) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                out.push(ReceivedSpan {
                    transport,
                    service: service.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: match span.kind {
                        2 => "server",
                        3 => "client",
                        4 => "producer",
                        5 => "consumer",
                        _ => "internal",
                    },
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    error: span.status.as_ref().is_some_and(|s| s.code == 2),
                });
            }
        }
    }
    out
}

type Store = Arc<Mutex<Vec<ReceivedSpan>>>;

struct Grpc(Store);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = spans_of(request.get_ref(), "grpc");
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A running receiver.
pub struct OtlpReceiver {
    http_port: u16,
    grpc_port: u16,
    spans: Store,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Starts a receiver on two free ports of 127.0.0.1 (HTTP and gRPC).
    pub fn start() -> OtlpReceiver {
        let http = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port for OTLP/HTTP");
        let grpc = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port for OTLP/gRPC");
        let (http_port, grpc_port) = (
            http.local_addr().expect("its port").port(),
            grpc.local_addr().expect("its port").port(),
        );
        http.set_nonblocking(true).expect("a non-blocking listener");
        grpc.set_nonblocking(true).expect("a non-blocking listener");
        let spans: Store = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let store = spans.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the receiver's runtime");
            runtime.block_on(serve(http, grpc, store, stopped));
        });
        OtlpReceiver {
            http_port,
            grpc_port,
            spans,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for OTLP/HTTP.
    pub fn http_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for OTLP/gRPC.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits (up to `timeout`) until `found` finds something in the spans received.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        what: &str,
        mut found: impl FnMut(&[ReceivedSpan]) -> Option<T>,
    ) -> T {
        crate::eventually(timeout, what, || {
            let spans = self.spans();
            std::future::ready(found(&spans))
        })
        .await
    }

    /// The variables a process exports its spans here with, over `protocol` (`http/protobuf`
    /// or `grpc`), sending each batch within 50 ms.
    pub fn env(&self, protocol: &str) -> Vec<(String, String)> {
        let endpoint = match protocol {
            "grpc" => self.grpc_endpoint(),
            _ => self.http_endpoint(),
        };
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), protocol.into()),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "50".into()),
        ]
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    http: std::net::TcpListener,
    grpc: std::net::TcpListener,
    spans: Store,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let http = tokio::net::TcpListener::from_std(http).expect("a Tokio listener");
    let grpc = tokio::net::TcpListener::from_std(grpc).expect("a Tokio listener");
    let store = spans.clone();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let store = store.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            let spans = spans_of(&request, "http");
                            store
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .extend(spans);
                            (
                                axum::http::StatusCode::OK,
                                [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                        Err(error) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            [(axum::http::header::CONTENT_TYPE, "text/plain")],
                            error.to_string().into_bytes(),
                        ),
                    }
                }
            }),
        )
        .route(
            "/spans",
            axum::routing::get({
                let spans = spans.clone();
                move || {
                    let spans = spans.clone();
                    async move {
                        let listed: Vec<serde_json::Value> = spans
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .iter()
                            .map(ReceivedSpan::to_json)
                            .collect();
                        axum::Json(listed)
                    }
                }
            }),
        );
    let http_server = axum::serve(http, app);
    let grpc_server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Grpc(spans)))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc));
    // (Stopping drops the runtime, and with it every connection still open.)
    tokio::select! {
        _ = stopped => {}
        _ = http_server => {}
        _ = grpc_server => {}
    }
}
