//! The W3C trace context a job carries (<https://www.w3.org/TR/trace-context/>): the
//! `traceparent` of the span that made it and the `tracestate` that came with it, checked
//! once where they enter (a producer, a header, an environment variable) and stored with
//! the job, so that the worker's spans for it join the producer's trace.

use std::fmt;

/// The longest `tracestate` kept, in bytes (the W3C recommendation: a propagator may cut
/// a longer one; wasmgear refuses it, so that what a job carries is what was given).
pub const MAX_TRACESTATE_BYTES: usize = crate::limits::MAX_TRACESTATE_BYTES as usize;

/// A W3C trace context: a valid `traceparent` (version 00 as written; a later version's
/// first four fields are taken, as the specification says) and an optional `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// Why a `traceparent` or `tracestate` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    /// The `traceparent` is not `VERSION-TRACEID-PARENTID-FLAGS` in lower-case hex.
    #[error(
        "traceparent {0:?} is not a W3C traceparent: give 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, in lower case, the ids not all zeros"
    )]
    Traceparent(String),
    /// The `tracestate` is too long or holds other than printable ASCII.
    #[error(
        "tracestate is not a W3C tracestate: give at most {MAX_TRACESTATE_BYTES} bytes of printable ASCII (key=value members separated by commas)"
    )]
    Tracestate,
}

/// Whether `s` is `len` lower-case hex digits, not all zeros when `nonzero`.
fn hex(s: &str, len: usize, nonzero: bool) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && !(nonzero && s.bytes().all(|b| b == b'0'))
}

impl TraceContext {
    /// A trace context from its two headers' values, checked (a later version of
    /// `traceparent` is kept as the version 00 of its first four fields).
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        let refused = || TraceContextError::Traceparent(traceparent.chars().take(80).collect());
        let value = traceparent.trim_matches([' ', '\t']);
        let head = value.get(..55).ok_or_else(refused)?;
        let mut parts = head.split('-');
        let (Some(version), Some(trace_id), Some(span_id), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(refused());
        };
        let later = value.len() > 55;
        if !hex(version, 2, false)
            || version == "ff"
            || (version == "00" && later)
            || (later && !value[55..].starts_with('-'))
            || !hex(trace_id, 32, true)
            || !hex(span_id, 16, true)
            || !hex(flags, 2, false)
        {
            return Err(refused());
        }
        let tracestate = match tracestate.map(|s| s.trim_matches([' ', '\t'])) {
            None | Some("") => None,
            Some(state) => {
                if state.len() > MAX_TRACESTATE_BYTES
                    || !state.bytes().all(|b| (0x20..0x7f).contains(&b))
                {
                    return Err(TraceContextError::Tracestate);
                }
                Some(state.to_string())
            }
        };
        Ok(TraceContext {
            traceparent: format!("00-{trace_id}-{span_id}-{flags}"),
            tracestate,
        })
    }

    /// A context for a span with these ids (lower-case hex, as [`TraceContext::new`] wants
    /// them) and whether it was sampled.
    pub fn from_ids(
        trace_id: &str,
        span_id: &str,
        sampled: bool,
        tracestate: Option<&str>,
    ) -> Result<Self, TraceContextError> {
        let flags = if sampled { "01" } else { "00" };
        Self::new(&format!("00-{trace_id}-{span_id}-{flags}"), tracestate)
    }

    /// The `traceparent` header's value (version 00).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header's value, if one came.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace's id, 32 lower-case hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the span the job was made in (its parent), 16 lower-case hex digits.
    pub fn span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the producer sampled its span (flag 01).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }

    /// The same trace and state, with `span_id` as the parent: what a span of that id
    /// passes on to what it makes.
    pub fn with_span(&self, span_id: &str, sampled: bool) -> Result<Self, TraceContextError> {
        Self::from_ids(self.trace_id(), span_id, sampled, self.tracestate())
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_kept_and_read() {
        let context = TraceContext::new(PARENT, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(context.traceparent(), PARENT);
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id(), "00f067aa0ba902b7");
        assert!(context.sampled());
        assert_eq!(context.tracestate(), Some("rojo=00f067aa0ba902b7"));
        let unsampled = TraceContext::new(&PARENT.replace("-01", "-00"), Some(" ")).unwrap();
        assert!(!unsampled.sampled());
        assert_eq!(unsampled.tracestate(), None);
        let child = context.with_span("b7ad6b7169203331", true).unwrap();
        assert_eq!(
            child.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"
        );
        assert_eq!(child.tracestate(), context.tracestate());
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next";
        let context = TraceContext::new(later, None).unwrap();
        assert_eq!(
            context.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"
        );
        assert!(context.sampled());
    }

    #[test]
    fn what_is_not_a_traceparent_is_refused_with_the_form_to_give() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        ] {
            let error = TraceContext::new(bad, None).unwrap_err();
            assert!(
                error.to_string().contains("00-<32 hex trace id>"),
                "{bad}: {error}"
            );
        }
        let long = "k=".to_string() + &"v".repeat(MAX_TRACESTATE_BYTES);
        for bad in [long.as_str(), "k=v\nx", "k=\u{7f}"] {
            assert_eq!(
                TraceContext::new(PARENT, Some(bad)),
                Err(TraceContextError::Tracestate)
            );
        }
    }
}
