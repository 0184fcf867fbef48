//! Outgoing HTTP (`wasi:http`) for jobs, to the hosts a plugin's manifest lists and no others,
//! each request carrying the job's trace context (`traceparent`, `tracestate`) so that the
//! services a job calls join its trace.

use std::future::Future;
use std::sync::Arc;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::output::JobLog;
use wasmgear_proto::{LogLevel, TraceContext};

/// Lets a request through only if its authority is on the plugin's allow list: an entry
/// `host` allows any port of that host, `host:port` that port only.
pub(crate) struct HttpGate {
    allow: Arc<Vec<String>>,
    log: Option<Arc<JobLog>>,
    trace: Option<TraceContext>,
}

impl HttpGate {
    /// A gate letting through the hosts in `allow` (none if empty); denials are written to
    /// `log`.
    pub(crate) fn new(allow: Arc<Vec<String>>, log: Option<Arc<JobLog>>) -> Self {
        HttpGate {
            allow,
            log,
            trace: None,
        }
    }

    /// The gate adds `trace` to each request it lets through, as the W3C `traceparent` and
    /// `tracestate` headers (unless the guest gave its own `traceparent`).
    pub(crate) fn with_trace(self, trace: Option<TraceContext>) -> Self {
        HttpGate { trace, ..self }
    }

    /// Adds the trace context's headers to `request`, unless it names a trace already.
    fn add_trace(&self, request: &mut http::Request<WasiBody>) {
        let Some(trace) = &self.trace else { return };
        let headers = request.headers_mut();
        if headers.contains_key("traceparent") {
            return;
        }
        // (Both are checked ASCII: they always make header values.)
        if let Ok(value) = http::HeaderValue::from_str(trace.traceparent()) {
            headers.insert("traceparent", value);
            headers.remove("tracestate");
            if let Some(Ok(state)) = trace.tracestate().map(http::HeaderValue::from_str) {
                headers.insert("tracestate", state);
            }
        }
    }

    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        self.allow.iter().any(|entry| match entry.rsplit_once(':') {
            Some((entry_host, entry_port)) if entry_port.bytes().all(|b| b.is_ascii_digit()) => {
                entry_host.eq_ignore_ascii_case(host)
                    && port.is_some_and(|p| p.to_string() == entry_port)
            }
            _ => entry.eq_ignore_ascii_case(host),
        })
    }
}

type Sent = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        let uri = request.uri();
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        });
        let allowed = uri.host().is_some_and(|host| self.allows(host, port));
        if !allowed {
            if let Some(log) = &self.log {
                log.write(
                    LogLevel::Warn,
                    format!("HTTP request to {uri} denied: its host is not in the manifest's [http] allow list"),
                );
            }
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        drop(fut);
        self.add_trace(&mut request);
        Box::new(async move {
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_ports_are_matched_exactly() {
        let allow = vec!["api.example.com".to_string(), "127.0.0.1:8080".to_string()];
        let gate = HttpGate::new(Arc::new(allow), None);
        assert!(gate.allows("api.example.com", Some(443)));
        assert!(gate.allows("API.example.com", Some(80)));
        assert!(gate.allows("127.0.0.1", Some(8080)));
        assert!(!gate.allows("127.0.0.1", Some(8081)));
        assert!(!gate.allows("evil.example.com", Some(443)));
        assert!(!gate.allows("example.com", Some(443)));
        assert!(!HttpGate::new(Arc::default(), None).allows("api.example.com", Some(443)));
    }
}
