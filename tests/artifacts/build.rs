//! Builds every plugin of `plugins/` as a `wasm32-wasip2` component and writes
//! `$OUT_DIR/plugins.rs`, which names each component's path as a constant.
//!
//! `plugins/` is a Cargo workspace of its own; this runs a nested
//! `cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml` with the
//! target directory `<root>/target/plugins` (or `$CARGO_TARGET_DIR/plugins`), and with the
//! environment the outer build would leak into it (flags, wrappers, the outer target
//! directory, ...) taken out. The plugins are the member directories of `plugins/`: each holds
//! a `Cargo.toml` whose package name is the function name, and builds `<name>.wasm`.

use std::env;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

/// The target the plugins are built for.
const TARGET: &str = "wasm32-wasip2";

/// Variables of the outer build that the nested one keeps although they start with `CARGO_`:
/// where Cargo's home is, how it reaches the registry, how it prints, and the jobserver, so
/// that the nested build shares the outer build's job slots instead of adding its own.
const KEPT_CARGO_VARS: &[&str] = &[
    "CARGO_HOME",
    "CARGO_MAKEFLAGS",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_REGISTRY_",
    "CARGO_TERM_",
];

/// Variables outside `CARGO_*` that would change how the nested build compiles.
const REMOVED_VARS: &[&str] = &[
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
];

/// One member of the plugins workspace.
struct Plugin {
    /// The package name, which is also the function name: `echo`.
    name: String,
    /// Its directory, `<root>/plugins/<dir>`.
    dir: PathBuf,
    /// The first paragraph of its crate docs (`//!`), if any.
    summary: Vec<String>,
}

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .and_then(Path::parent)
        .expect("tests/artifacts sits two levels below the repository root")
        .to_path_buf();
    let plugins_dir = root.join("plugins");
    let target_dir = plugins_target_dir(&root);

    let plugins = discover(&plugins_dir);
    if plugins.is_empty() {
        die(&format!(
            "no plugins found: no directory of {} has a Cargo.toml",
            plugins_dir.display()
        ));
    }
    rerun_if_changed(&root, &plugins);

    build(&plugins_dir, &target_dir);

    let release_dir = target_dir.join(TARGET).join("release");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let code = generate(&plugins, &release_dir);
    let out = out_dir.join("plugins.rs");
    if let Err(e) = fs::write(&out, code) {
        die(&format!("cannot write {}: {e}", out.display()));
    }
}

/// Where the nested build puts its output: `$CARGO_TARGET_DIR/plugins` when the outer build
/// has a `CARGO_TARGET_DIR` (a relative one is taken from the repository root), else
/// `<root>/target/plugins`. A directory of its own, so that the nested Cargo never waits for
/// the lock the outer Cargo holds on its target directory.
fn plugins_target_dir(root: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir).join("plugins"),
        _ => root.join("target").join("plugins"),
    }
}

/// Finds the plugins: the directories of `plugins/` that hold a `Cargo.toml`, in name order.
fn discover(plugins_dir: &Path) -> Vec<Plugin> {
    let entries = fs::read_dir(plugins_dir)
        .unwrap_or_else(|e| die(&format!("cannot list {}: {e}", plugins_dir.display())));
    let mut plugins = Vec::new();
    for entry in entries {
        let dir = entry
            .unwrap_or_else(|e| die(&format!("cannot list {}: {e}", plugins_dir.display())))
            .path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let text = fs::read_to_string(&manifest)
            .unwrap_or_else(|e| die(&format!("cannot read {}: {e}", manifest.display())));
        let name = package_name(&text).unwrap_or_else(|| {
            die(&format!(
                "{} has no `name` in its [package]",
                manifest.display()
            ))
        });
        if !is_identifier(&const_name(&name)) {
            die(&format!(
                "plugin `{name}` ({}) cannot be named as a constant: use lowercase letters, \
                 digits, `-` and `_`, starting with a letter",
                manifest.display()
            ));
        }
        let summary = fs::read_to_string(dir.join("src").join("lib.rs"))
            .map(|lib| crate_summary(&lib))
            .unwrap_or_default();
        plugins.push(Plugin { name, dir, summary });
    }
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    plugins
}

/// The `name` of the `[package]` table of a `Cargo.toml`: a line `name = "..."` after the
/// `[package]` header and before the next table. Enough for the manifests of `plugins/`.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == "name" {
            let value = value.trim();
            return value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_owned);
        }
    }
    None
}

/// The first paragraph of a crate's `//!` docs, line by line.
fn crate_summary(lib: &str) -> Vec<String> {
    lib.lines()
        .map(str::trim_start)
        .take_while(|line| line.starts_with("//!"))
        .map(|line| line.trim_start_matches("//!").trim().to_owned())
        .take_while(|line| !line.is_empty())
        .collect()
}

/// `json-sum` -> `JSON_SUM`.
fn const_name(name: &str) -> String {
    name.replace('-', "_").to_ascii_uppercase()
}

fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Asks Cargo to run this script again when anything the components are built from changes.
fn rerun_if_changed(root: &Path, plugins: &[Plugin]) {
    let mut paths = vec![
        root.join("plugins").join("Cargo.toml"),
        root.join("plugins").join(".cargo").join("config.toml"),
        root.join("plugins").join("Cargo.lock"),
        root.join("guest-sdk").join("Cargo.toml"),
        root.join("guest-sdk").join("src"),
        root.join("wit"),
    ];
    // Whole member directories (sources, manifest, any build script): they hold no target
    // directory, since the plugins workspace builds elsewhere.
    paths.extend(plugins.iter().map(|p| p.dir.clone()));
    for path in paths {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Runs the nested `cargo build`, and exits with its errors if it fails.
fn build(plugins_dir: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let manifest = plugins_dir.join("Cargo.toml");
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(&manifest);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if leaks_into_nested_build(key) {
            cmd.env_remove(key);
        }
    }
    cmd.env("CARGO_TARGET_DIR", target_dir);
    // From the plugins' directory, so that their `.cargo/config.toml` applies.
    cmd.current_dir(plugins_dir);

    let shown = format!(
        "cargo build --release --target {TARGET} --manifest-path {} (CARGO_TARGET_DIR={})",
        manifest.display(),
        target_dir.display()
    );
    let output = cmd
        .output()
        .unwrap_or_else(|e| die(&format!("cannot run {cargo:?} to build the plugins: {e}")));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let mut message = format!(
            "building the plugins failed ({}):\n  {shown}\n\n{stderr}",
            output.status
        );
        if target_missing(&stderr) {
            message.push_str(&format!(
                "\nThe `{TARGET}` target seems not to be installed for this toolchain: run\n\n  \
                 rustup target add {TARGET}\n"
            ));
        }
        die(&message);
    }
    if stderr.lines().any(|line| line.starts_with("warning")) {
        println!("cargo:warning=the plugins built with warnings; to see them, run: {shown}");
    }
}

/// Whether the outer build's variable `key` must not reach the nested Cargo: every `CARGO_*`
/// one (outer flags, target, target directory, profile overrides, package metadata) but those
/// in [`KEPT_CARGO_VARS`], Cargo's internal `__CARGO_*` ones, and [`REMOVED_VARS`]. `PATH`,
/// `HOME`, `RUSTUP_*` and the rest stay.
fn leaks_into_nested_build(key: &str) -> bool {
    if key == "CARGO" || key.starts_with("__CARGO") || REMOVED_VARS.contains(&key) {
        return true;
    }
    key.starts_with("CARGO_")
        && !KEPT_CARGO_VARS.iter().any(|kept| {
            if kept.ends_with('_') {
                key.starts_with(kept)
            } else {
                key == *kept
            }
        })
}

/// Whether a failed build's stderr says the Rust target is not installed.
fn target_missing(stderr: &str) -> bool {
    stderr.contains("may not be installed")
        || stderr.contains("can't find crate for `core`")
        || stderr.contains("can't find crate for `std`")
        || (stderr.contains(TARGET) && stderr.contains("rustup target add"))
}

/// Checks each plugin's component and writes the constants that name them.
fn generate(plugins: &[Plugin], release_dir: &Path) -> String {
    let mut code = String::from(
        "// @generated by tests/artifacts/build.rs from the members of plugins/: do not edit.\n",
    );
    for plugin in plugins {
        let wasm = release_dir.join(format!("{}.wasm", plugin.name.replace('-', "_")));
        check_built(plugin, &wasm);
        let path = wasm
            .to_str()
            .unwrap_or_else(|| die(&format!("the path {} is not UTF-8", wasm.display())));
        code.push('\n');
        for line in &plugin.summary {
            writeln!(code, "/// {line}").unwrap();
        }
        if !plugin.summary.is_empty() {
            code.push_str("///\n");
        }
        writeln!(
            code,
            "/// The component of the `{name}` plugin, built from `plugins/{dir}` for `{TARGET}`.",
            name = plugin.name,
            dir = plugin.dir.file_name().unwrap_or_default().to_string_lossy(),
        )
        .unwrap();
        writeln!(
            code,
            "pub const {}: &str = {path:?};",
            const_name(&plugin.name)
        )
        .unwrap();
    }
    code.push_str("\n/// Every plugin as `(function name, component path)`, in name order.\n");
    code.push_str("pub const ALL: &[(&str, &str)] = &[\n");
    for plugin in plugins {
        writeln!(
            code,
            "    ({:?}, {}),",
            plugin.name,
            const_name(&plugin.name)
        )
        .unwrap();
    }
    code.push_str("];\n");
    code
}

/// Exits with an error unless `wasm` was built. (Whether it is a component is checked by
/// this crate's own test with wasmparser, and by the runtime on every load: a build-time
/// dependency would hold back the start of the plugins' build.)
fn check_built(plugin: &Plugin, wasm: &Path) {
    if let Err(e) = fs::metadata(wasm) {
        die(&format!(
            "the plugin `{}` ({}) built no component at {}: {e}\n\
             Is its directory listed in `members` of plugins/Cargo.toml, and is it a \
             `crate-type = [\"cdylib\"]` library?",
            plugin.name,
            plugin.dir.display(),
            wasm.display()
        ));
    }
}

/// Fails the build with `message`; Cargo shows the script's stderr.
fn die(message: &str) -> ! {
    eprintln!("error: {message}");
    exit(1);
}
