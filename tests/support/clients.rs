//! The real client libraries of other queues, installed by `tests/clients/install.sh`
//! (`scripts/setup` runs it), driven through the small scripts beside it.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Where `tests/clients/install.sh` puts the libraries.
fn tools() -> PathBuf {
    match std::env::var_os("WASMGEAR_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/wasmgear-tools")
        }
    }
}

/// A script of `tests/clients/`.
fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/clients")
        .join(name)
}

fn run(mut command: Command, what: &str) -> Output {
    let out = command.output().unwrap_or_else(|e| {
        panic!("{what}: {e} (run tests/clients/install.sh; scripts/setup does)")
    });
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `python rwq.py URL PREFIX ARGS...` with redis-work-queue 0.1.5 from PyPI.
pub fn rwq_python(url: &str, prefix: &str, args: &[&str]) -> Output {
    let python = tools().join("redis-work-queue-py-0.1.5/bin/python");
    assert!(
        python.exists(),
        "{python:?} is missing: run tests/clients/install.sh (scripts/setup does)"
    );
    let mut command = Command::new(python);
    command
        .arg(script("rwq.py"))
        .arg(url)
        .arg(prefix)
        .args(args);
    run(command, &format!("redis-work-queue (Python) {args:?}"))
}

/// `node rwq.cjs URL PREFIX ARGS...` with @mevitae/redis-work-queue 0.1.5 from npm.
pub fn rwq_node(url: &str, prefix: &str, args: &[&str]) -> Output {
    let modules = tools().join("redis-work-queue-node-0.1.5");
    assert!(
        modules
            .join("node_modules/@mevitae/redis-work-queue")
            .exists(),
        "{modules:?} is missing: run tests/clients/install.sh (scripts/setup does)"
    );
    let mut command = Command::new("node");
    command
        .env("RWQ_NODE_MODULES", modules)
        .arg(script("rwq.cjs"))
        .arg(url)
        .arg(prefix)
        .args(args);
    run(command, &format!("redis-work-queue (Node.js) {args:?}"))
}

/// `python SCRIPT FIRST ARGS...` with the Python of `venv` (under the tools directory):
/// the JSON it prints. `library` names the library for messages.
fn python_json(
    venv: &str,
    library: &str,
    script_name: &str,
    first: &str,
    args: &[&str],
) -> serde_json::Value {
    let python = tools().join(venv).join("bin/python");
    assert!(
        python.exists(),
        "{python:?} is missing: run tests/clients/install.sh (scripts/setup does)"
    );
    let mut command = Command::new(python);
    command.arg(script(script_name)).arg(first).args(args);
    let out = run(command, &format!("{library} {args:?}"));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{library} {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `python qless_py.py URL ARGS...` with qless-py 0.11.4 from PyPI: its JSON answer.
pub fn qless_py(url: &str, args: &[&str]) -> serde_json::Value {
    python_json("qless-py-0.11.4", "qless-py", "qless_py.py", url, args)
}

/// `python gearman_py.py SERVER FUNCTION DATA [bg]` with python3-gearman 0.1.0 from PyPI:
/// what the client saw.
pub fn gearman_py(server: &str, args: &[&str]) -> serde_json::Value {
    python_json(
        "python3-gearman-0.1.0",
        "python3-gearman",
        "gearman_py.py",
        server,
        args,
    )
}

/// The `st` command of schemathesis 4.32.5 from PyPI, which fuzzes the HTTP API against its
/// own OpenAPI document.
pub fn schemathesis() -> PathBuf {
    let st = tools().join("schemathesis-4.32.5/bin/st");
    assert!(
        st.exists(),
        "{st:?} is missing: run tests/clients/install.sh (scripts/setup does)"
    );
    st
}
