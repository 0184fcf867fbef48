//! Paths of the plugin components the tests run.
//!
//! The build script builds every member of the `plugins/` workspace for `wasm32-wasip2` (a
//! nested `cargo build --release`, into `target/plugins/`) and names each component here: one
//! constant per plugin, upper-snake-cased from its crate name (`echo` is [`ECHO`]), and
//! [`ALL`] listing them with their function names. A plugin that fails to build fails this
//! crate's build, with the nested Cargo's errors.
//!
//! # Examples
//!
//! ```
//! use wasmgear_test_artifacts::{ALL, ECHO};
//!
//! assert!(ECHO.ends_with("echo.wasm"));
//! assert!(ALL.contains(&("echo", ECHO)));
//! ```
#![deny(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));

#[cfg(test)]
mod tests {
    use super::ALL;

    /// Every named path holds a component, not a core module.
    #[test]
    fn every_plugin_is_a_component() {
        assert!(!ALL.is_empty());
        for (name, path) in ALL {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{name}: {path}: {e}"));
            assert!(wasmtime_wasmparser::Parser::is_component(&bytes), "{name}");
        }
    }

    /// Names are unique and in order, so a test can look one up.
    #[test]
    fn names_are_sorted_and_unique() {
        assert!(ALL.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
