//! The components the build made of `plugins/` (`tests/artifacts` builds them and names
//! their paths), and temporary plugin directories holding copies of them for a worker to
//! serve.

use wasmgear_proto::FunctionName;

/// A function name known to be valid.
pub fn function(name: &str) -> FunctionName {
    FunctionName::new(name).expect("valid function name")
}

/// The path of a built plugin by function name.
pub fn artifact(name: &str) -> &'static str {
    wasmgear_test_artifacts::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, path)| *path)
        .unwrap_or_else(|| panic!("no plugin {name} was built from plugins/"))
}

/// A temporary plugin directory holding copies of the named built plugins.
pub fn plugin_dir(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in names {
        std::fs::copy(artifact(name), dir.path().join(format!("{name}.wasm")))
            .expect("copy plugin");
    }
    dir
}

/// A plugin directory in which the artifact `name` serves each of `functions` (one copy of
/// the file per function).
pub fn plugin_copies(name: &str, functions: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for function in functions {
        std::fs::copy(artifact(name), dir.path().join(format!("{function}.wasm")))
            .expect("copy plugin");
    }
    dir
}
