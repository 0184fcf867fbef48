//! `wasmgear new`: plugin projects, one per language, each doing the same small job
//! (`wordcount`), written from the example plugins in `plugins/wordcount-*` so that the
//! examples and the templates never drift apart.

use std::path::Path;

use anyhow::{Context, bail};

/// A language `wasmgear new` writes projects in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with the `wasmgear-guest` crate (vendored into the project).
    Rust,
    /// Python, with componentize-py and the `wasmgear` module.
    Python,
    /// JavaScript, with componentize-js and the `wasmgear.js` module.
    Js,
    /// C, with clang-19, the header-only `wasmgear.h` and generated bindings.
    C,
}

/// One file of a template: its path in the project and its contents.
type File = (&'static str, &'static str);

const RUST: &[File] = &[
    (
        "src/lib.rs",
        include_str!("../../../plugins/wordcount-rust/src/lib.rs"),
    ),
    (
        "build.sh",
        include_str!("../../../plugins/wordcount-rust/build.sh"),
    ),
    (
        "wasmgear-guest/src/lib.rs",
        include_str!("../../../guest-sdk/src/lib.rs"),
    ),
    (
        "wasmgear-guest/src/batch.rs",
        include_str!("../../../guest-sdk/src/batch.rs"),
    ),
    (
        "wasmgear-guest/src/checkpoint.rs",
        include_str!("../../../guest-sdk/src/checkpoint.rs"),
    ),
    (
        "wasmgear-guest/src/children.rs",
        include_str!("../../../guest-sdk/src/children.rs"),
    ),
    (
        "wasmgear-guest/src/dependencies.rs",
        include_str!("../../../guest-sdk/src/dependencies.rs"),
    ),
    (
        "wasmgear-guest/src/error.rs",
        include_str!("../../../guest-sdk/src/error.rs"),
    ),
    (
        "wasmgear-guest/src/host.rs",
        include_str!("../../../guest-sdk/src/host.rs"),
    ),
    (
        "wasmgear-guest/src/io.rs",
        include_str!("../../../guest-sdk/src/io.rs"),
    ),
    (
        "wasmgear-guest/src/job.rs",
        include_str!("../../../guest-sdk/src/job.rs"),
    ),
];

const PYTHON: &[File] = &[
    (
        "app.py",
        include_str!("../../../plugins/wordcount-python/app.py"),
    ),
    (
        "build.sh",
        include_str!("../../../plugins/wordcount-python/build.sh"),
    ),
    (
        "wasmgear.py",
        include_str!("../../../guest-sdk/python/wasmgear.py"),
    ),
];

const JS: &[File] = &[
    (
        "app.js",
        include_str!("../../../plugins/wordcount-js/app.js"),
    ),
    (
        "build.sh",
        include_str!("../../../plugins/wordcount-js/build.sh"),
    ),
    (
        "wasmgear.js",
        include_str!("../../../guest-sdk/js/wasmgear.js"),
    ),
    (
        "wasmgear-core.js",
        include_str!("../../../guest-sdk/js/wasmgear-core.js"),
    ),
    (
        "wasmgear-batch.js",
        include_str!("../../../guest-sdk/js/wasmgear-batch.js"),
    ),
];

const C: &[File] = &[
    ("app.c", include_str!("../../../plugins/wordcount-c/app.c")),
    (
        "build.sh",
        include_str!("../../../plugins/wordcount-c/build.sh"),
    ),
    (
        "wasmgear.h",
        include_str!("../../../guest-sdk/c/wasmgear.h"),
    ),
    (
        "wasmgear_checkpoint.h",
        include_str!("../../../guest-sdk/c/wasmgear_checkpoint.h"),
    ),
    (
        "wasmgear_batch.h",
        include_str!("../../../guest-sdk/c/wasmgear_batch.h"),
    ),
];

/// Writes a new plugin project for function `name` in `dir` (which must not exist or be
/// empty): the example job in `lang`, its build script (`./build.sh [OUT_DIR]` writes
/// `NAME.wasm`), and the job world's WIT. Returns the files written, relative to `dir`.
pub fn new_project(dir: &Path, name: &str, lang: Lang) -> anyhow::Result<Vec<String>> {
    wasmgear_proto::FunctionName::new(name)?;
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {dir:?}"))?
            .next()
            .is_some()
    {
        bail!("{dir:?} exists and is not empty: choose a new directory");
    }
    let mut files: Vec<(String, String)> = match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
        Lang::C => C,
    }
    .iter()
    .map(|(path, text)| (path.to_string(), text.to_string()))
    .collect();
    files.push(("wit/job.wit".into(), super::WIT.into()));
    files.push(("README.md".into(), readme(name, lang)));
    files.push((
        ".gitignore".into(),
        "*.wasm\ntarget/\nnode_modules/\n__pycache__/\n".into(),
    ));
    if lang == Lang::Rust {
        files.push(("Cargo.toml".into(), rust_manifest(name)));
        files.push(("wasmgear-guest/Cargo.toml".into(), RUST_SDK_MANIFEST.into()));
        files.push((".cargo/config.toml".into(), RUST_CARGO_CONFIG.into()));
    }
    let mut written = Vec::new();
    for (path, text) in files {
        let full = dir.join(&path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {parent:?}"))?;
        }
        std::fs::write(&full, text).with_context(|| format!("cannot write {full:?}"))?;
        if path.ends_with(".sh") {
            make_executable(&full)?;
        }
        written.push(path);
    }
    if lang == Lang::C {
        for path in super::c_bindings(&dir.join("gen"), super::World::default())? {
            written.push(format!(
                "gen/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            ));
        }
    }
    Ok(written)
}

/// The project's README: how to build it, try it with `wasmgear run`, and serve it.
fn readme(name: &str, lang: Lang) -> String {
    let (language, source) = match lang {
        Lang::Rust => ("Rust", "src/lib.rs"),
        Lang::Python => ("Python", "app.py"),
        Lang::Js => ("JavaScript", "app.js"),
        Lang::C => ("C", "app.c"),
    };
    format!(
        r#"# {name}

A wasmgear job handler in {language}, made by `wasmgear new`. It counts the words of
`{{"text": "..."}}`; change `{source}` to do your job.

Build it (writes `{name}.wasm` here):

    wasmgear build .

Try it, here and now, with no Redis and no worker (the same sandbox and limits a worker
uses; output on stdout, progress and log on stderr):

    wasmgear run {name}.wasm '{{"text": "the cat and the dog"}}'

Serve it: copy `{name}.wasm` into a worker's plugin directory (`wasmgear worker --plugins
DIR`); a running worker picks it up at once. Then:

    wasmgear enqueue {name} '{{"text": "the cat and the dog"}}' --wait
"#
    )
}

fn rust_manifest(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
wasmgear-guest = {{ path = "wasmgear-guest", features = ["json"] }}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

[profile.release]
opt-level = "s"
strip = "debuginfo"

# A project of its own, even when created inside another Cargo workspace.
[workspace]
"#
    )
}

/// The guest SDK's manifest in a generated project (the repository's inherits from its
/// workspace).
const RUST_SDK_MANIFEST: &str = r#"[package]
name = "wasmgear-guest"
description = "Write wasmgear job handlers in Rust: progress, logs, cancellation, typed input and output"
version = "0.1.0"
edition = "2024"
publish = false

[features]
default = []
json = ["dep:serde", "dep:serde_json"]

[dependencies]
wit-bindgen = "0.63.0"
serde = { version = "1", optional = true }
serde_json = { version = "1", optional = true }
"#;

/// The Rust project's Cargo settings: a 128 KiB stack instead of 1 MiB keeps each job's
/// memory small, so the worker resets less of it between jobs.
const RUST_CARGO_CONFIG: &str = r#"# A small stack keeps each job's linear memory small: the worker resets a job's memory
# between jobs, so less memory makes a fresh instance cheaper. Raise it for deep recursion.
[target.wasm32-wasip2]
rustflags = ["-C", "link-arg=-zstack-size=131072"]
"#;

#[cfg(unix)]
fn make_executable(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {path:?} executable"))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A Rust project carries every source file of the guest SDK (one left out fails the
    /// project's build, as `pub mod` names it).
    #[test]
    fn a_rust_project_carries_the_whole_guest_sdk() {
        let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk/src");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(&sdk).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let path = format!("wasmgear-guest/src/{name}");
            match super::RUST.iter().find(|(file, _)| *file == path) {
                Some((_, text)) => assert_eq!(
                    *text,
                    std::fs::read_to_string(sdk.join(&name)).unwrap(),
                    "{path}"
                ),
                None => missing.push(path),
            }
        }
        assert!(missing.is_empty(), "not in the Rust template: {missing:?}");
    }

    /// The files of the SDK in `dir` (under guest-sdk/) whose names end in `ext`, each in
    /// `template` as it is; returns how many there are.
    fn carried(template: &[super::File], dir: &str, ext: &str) -> usize {
        let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../guest-sdk")
            .join(dir);
        let mut files = 0;
        for entry in std::fs::read_dir(&sdk).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if !name.ends_with(ext) {
                continue;
            }
            files += 1;
            let found = template.iter().find(|(file, _)| *file == name);
            assert_eq!(
                found.map(|(_, text)| *text),
                Some(std::fs::read_to_string(sdk.join(&name)).unwrap().as_str()),
                "{name} is not in the template as it is"
            );
        }
        files
    }

    /// A C project carries every header of the C SDK (wasmgear.h includes the others), and a
    /// JavaScript project every module of the JavaScript SDK (wasmgear.js and
    /// wasmgear-batch.js import wasmgear-core.js).
    #[test]
    fn c_and_javascript_projects_carry_every_file_of_their_sdk() {
        assert_eq!(carried(super::C, "c", ".h"), 3);
        assert_eq!(carried(super::JS, "js", ".js"), 3);
    }
}
