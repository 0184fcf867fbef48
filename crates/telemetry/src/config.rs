//! What the standard `OTEL_*` variables ask for: whether spans are exported at all, over
//! which OTLP transport, and how the batches are made. Every variable is read here, and a
//! value that cannot be used is refused with the variable's name.

use std::time::Duration;

/// Why the `OTEL_*` variables could not be followed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A variable holds a value wasmgear cannot use.
    #[error("{variable}={value:?}: {what}")]
    Variable {
        /// The variable's name.
        variable: &'static str,
        /// What it holds.
        value: String,
        /// What to give instead.
        what: &'static str,
    },
    /// The exporter could not be made (a bad endpoint, say).
    #[error("the OTLP span exporter could not be made: {0}")]
    Exporter(String),
}

/// The OTLP transport (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`, the default: POST to ENDPOINT/v1/traces.
    HttpProtobuf,
    /// `grpc`: the collector's TraceService.
    Grpc,
}

/// The batching of spans (`OTEL_BSP_*`, with the specification's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Spans waiting beyond this many are dropped (and counted), never waited for.
    pub max_queue: usize,
    /// The most spans in one export.
    pub max_batch: usize,
    /// How long a span waits for its batch to fill before it is sent anyway.
    pub delay: Duration,
    /// How long one export may take before its spans count as failed.
    pub export_timeout: Duration,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_queue: 2048,
            max_batch: 512,
            delay: Duration::from_millis(5000),
            export_timeout: Duration::from_millis(30_000),
        }
    }
}

/// What the variables ask for when spans are to be exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// The transport.
    pub protocol: Protocol,
    /// How spans are batched.
    pub batching: Batching,
}

/// Reads the variables through `var` (the environment, or a test's table). `None`: spans are
/// not exported: `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`, or neither an OTLP
/// endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or `..._TRACES_ENDPOINT`) nor
/// `OTEL_TRACES_EXPORTER=otlp` given: tracing is off unless asked for.
pub fn read(var: impl Fn(&str) -> Option<String>) -> Result<Option<ExportConfig>, TelemetryError> {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let exporter = var("OTEL_TRACES_EXPORTER");
    match exporter.as_deref().map(str::trim) {
        Some("none") => return Ok(None),
        None | Some("otlp") => {}
        Some(other) => {
            return Err(TelemetryError::Variable {
                variable: "OTEL_TRACES_EXPORTER",
                value: other.to_string(),
                what: "wasmgear exports spans over OTLP only: give otlp (or none)",
            });
        }
    }
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or(var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    if endpoint.is_none() && exporter.is_none() {
        return Ok(None);
    }
    let (variable, protocol) = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(p) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Some(p)),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            var("OTEL_EXPORTER_OTLP_PROTOCOL"),
        ),
    };
    let protocol = match protocol.as_deref().map(str::trim) {
        None | Some("http/protobuf") => Protocol::HttpProtobuf,
        Some("grpc") => Protocol::Grpc,
        Some(other) => {
            return Err(TelemetryError::Variable {
                variable,
                value: other.to_string(),
                what: "give http/protobuf (the default) or grpc",
            });
        }
    };
    let number = |name: &'static str, default: u64, least: u64| -> Result<u64, TelemetryError> {
        match var(name) {
            None => Ok(default),
            Some(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= least)
                .ok_or(TelemetryError::Variable {
                    variable: name,
                    value: text,
                    what: if least > 0 {
                        "give a whole number of at least 1"
                    } else {
                        "give a whole number of milliseconds"
                    },
                }),
        }
    };
    let defaults = Batching::default();
    let batching = Batching {
        max_queue: number("OTEL_BSP_MAX_QUEUE_SIZE", defaults.max_queue as u64, 1)? as usize,
        max_batch: number(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            defaults.max_batch as u64,
            1,
        )? as usize,
        delay: Duration::from_millis(number(
            "OTEL_BSP_SCHEDULE_DELAY",
            defaults.delay.as_millis() as u64,
            0,
        )?),
        export_timeout: Duration::from_millis(number(
            "OTEL_BSP_EXPORT_TIMEOUT",
            defaults.export_timeout.as_millis() as u64,
            1,
        )?),
    };
    Ok(Some(ExportConfig { protocol, batching }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Option<ExportConfig>, TelemetryError> {
        read(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn tracing_is_off_unless_an_endpoint_or_the_otlp_exporter_is_asked_for() {
        assert!(read_from(&[]).unwrap().is_none());
        assert!(read_from(&[("OTEL_SERVICE_NAME", "x")]).unwrap().is_none());
        let on = read_from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]).unwrap();
        assert_eq!(
            on,
            Some(ExportConfig {
                protocol: Protocol::HttpProtobuf,
                batching: Batching::default()
            })
        );
        assert!(
            read_from(&[("OTEL_TRACES_EXPORTER", "otlp")])
                .unwrap()
                .is_some()
        );
        for off in [
            [
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
                ("OTEL_SDK_DISABLED", "TRUE"),
            ],
            [
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:4318"),
                ("OTEL_TRACES_EXPORTER", "none"),
            ],
        ] {
            assert!(read_from(&off).unwrap().is_none());
        }
    }

    #[test]
    fn the_protocol_and_batching_follow_the_variables() {
        let config = read_from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "10"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(config.protocol, Protocol::Grpc);
        assert_eq!(config.batching.delay, Duration::from_millis(100));
        assert_eq!(config.batching.max_queue, 10);
        assert_eq!(config.batching.max_batch, 512);
    }

    #[test]
    fn a_value_that_cannot_be_used_is_refused_naming_its_variable() {
        for (vars, named) in [
            (
                vec![("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER=\"zipkin\": wasmgear exports spans over OTLP only",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": give http/protobuf",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h"),
                    ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
                ],
                "OTEL_BSP_MAX_QUEUE_SIZE=\"0\": give a whole number of at least 1",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h"),
                    ("OTEL_BSP_SCHEDULE_DELAY", "5s"),
                ],
                "OTEL_BSP_SCHEDULE_DELAY=\"5s\": give a whole number of milliseconds",
            ),
        ] {
            let error = read_from(&vars).unwrap_err().to_string();
            assert!(error.starts_with(named), "{error}");
        }
    }
}
