//! The HTTP API against its own OpenAPI document, by schemathesis (PyPI) with every check it
//! has: a real `wasmgear serve` on a real Redis answers every request the document allows
//! without a server error, with the statuses, content types, headers and bodies it
//! declares; accepts every schema-valid request but for those the queue's state refuses
//! (409) or that name what is not there (404); and refuses every request the document
//! does not allow.
//!
//! Each run draws new cases; the seed is printed, and `WASMGEAR_SCHEMATHESIS_SEED=N` draws
//! the same ones again.

use std::process::Command;

use crate::http_api::{Server, TOKEN};
use crate::support::clients;
use wasmgear_testkit::TestRedis;

#[test]
fn the_http_api_keeps_to_its_openapi_document() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let seed: u64 = match std::env::var("WASMGEAR_SCHEMATHESIS_SEED") {
        Ok(seed) => seed
            .parse()
            .expect("WASMGEAR_SCHEMATHESIS_SEED is a number"),
        Err(_) => {
            use std::hash::BuildHasher;
            // std's hasher keys are random per process.
            std::collections::hash_map::RandomState::new().hash_one(0u8) >> 1
        }
    };
    eprintln!("schemathesis seed {seed} (WASMGEAR_SCHEMATHESIS_SEED={seed} draws it again)");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/schemathesis.toml");
    // Its reports and example database go to a directory of the test's own.
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(clients::schemathesis())
        .current_dir(scratch.path())
        .args(["--config-file", config, "run"])
        .arg(format!("http://{}/openapi.json", server.address))
        .args(["--checks", "all", "--workers", "1", "--no-color"])
        .args(["--generation-database", "none"])
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--header")
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .output()
        .expect("run schemathesis");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis found requests the server answers against its document (seed {seed}):\n{report}"
    );
    // It ran cases: a document it could not read, or no operation, is no pass.
    assert!(
        report.contains("passed") && !report.contains("No operations"),
        "schemathesis ran nothing:\n{report}"
    );
}
