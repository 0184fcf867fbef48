//! An OTLP receiver for the Python and Node suites: prints `http PORT grpc PORT` on its first
//! line, then keeps the spans it receives, listed as JSON by `GET http://127.0.0.1:PORT/spans`,
//! until its standard input closes (the test that started it ended).

fn main() {
    let receiver = wasmgear_testkit::OtlpReceiver::start();
    let port = |endpoint: String| endpoint.rsplit(':').next().unwrap_or_default().to_string();
    println!(
        "http {} grpc {}",
        port(receiver.http_endpoint()),
        port(receiver.grpc_endpoint())
    );
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    drop(receiver);
}
