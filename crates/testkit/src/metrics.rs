//! A worker's `/metrics` read as Prometheus reads it (`prometheus-parse`): how a test
//! learns what a worker process did (jobs started, jobs finished and how) without reading
//! its log.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long one scrape may take.
const SCRAPE_WITHIN: Duration = Duration::from_secs(10);

/// The samples `/metrics` at `address` (`HOST:PORT`) serves now.
pub fn scrape(address: &str) -> prometheus_parse::Scrape {
    let mut stream = TcpStream::connect(address)
        .unwrap_or_else(|e| panic!("connect to the metrics address {address}: {e}"));
    stream
        .set_read_timeout(Some(SCRAPE_WITHIN))
        .expect("a read timeout");
    // HTTP/1.0: the server closes the connection after the answer, which is not chunked.
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .expect("send the scrape");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("read /metrics of {address}: {e}"));
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer from {address}: {answer}"));
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "/metrics of {address} answered {head}"
    );
    let lines = body.lines().map(|line| Ok(line.to_string()));
    prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format")
}

/// The sum of the samples of `metric` that carry every label of `labels` (whatever their
/// other labels); 0 when none does, as a counter that has not moved yet.
pub fn sum(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            other => panic!("{metric} is not a number: {other:?}"),
        })
        .sum()
}
