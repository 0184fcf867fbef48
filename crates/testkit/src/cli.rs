//! The `wasmgear` binary cargo built for the tests and benchmarks ([`bin`]), run to
//! completion ([`wasmgear`], [`wasmgear_with_stdin`]), and reading what it printed.
//!
//! Every run starts from a clean environment for wasmgear: no inherited Redis URL or plugin
//! directory, `RUST_LOG=info`, and a home of its own outside the source tree.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The `wasmgear` binary cargo built beside the running test or benchmark.
///
/// Cargo names it in `CARGO_BIN_EXE_wasmgear` when it runs a test or benchmark of the
/// `wasmgear` package; run by hand, the test executable is in `target/<profile>/deps` and
/// the binary one directory up.
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_wasmgear") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the path of this test executable");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join("wasmgear");
    assert!(
        path.exists(),
        "no wasmgear binary at {path:?}: run the tests with `cargo test -p wasmgear`, which builds it"
    );
    path
}

/// Runs the `wasmgear` binary to completion with `args` and `env`.
pub fn wasmgear(args: &[&str], env: &[(&str, &str)]) -> Output {
    wasmgear_with_stdin(args, env, b"")
}

/// Runs the `wasmgear` binary with `stdin` fed to it.
pub fn wasmgear_with_stdin(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = command(args, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wasmgear");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("wait for wasmgear")
}

/// `wasmgear ARGS` with `env`, in the clean environment described above, not started yet.
pub fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(bin());
    command
        .args(args)
        .env_remove("WASMGEAR_REDIS_URL")
        .env_remove("WASMGEAR_PLUGINS");
    command.env("RUST_LOG", "info");
    // Local state (the compile cache, an embedded Redis) stays out of the source tree; a
    // test that needs its own home passes WASMGEAR_HOME in `env`.
    command.env(
        "WASMGEAR_HOME",
        std::env::temp_dir().join("wasmgear-tests-home"),
    );
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Text of a process' stdout.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Text of a process' stderr.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The JSON a successful command printed on stdout (panics, showing stderr, otherwise).
pub fn json(output: &Output) -> serde_json::Value {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}
