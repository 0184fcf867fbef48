//! Plugin authoring: `wasmgear new`, `build`, `bindings` and `componentize`.

use std::path::PathBuf;

use anyhow::{Context, bail};

use wasmgear_authoring as authoring;
use wasmgear_authoring::{Lang, World};

/// Options of `wasmgear new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The plugin's name: the function it serves, and the directory written.
    name: String,

    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,

    /// Write the project here instead of ./NAME.
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub fn new(args: NewArgs) -> anyhow::Result<i32> {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let files = authoring::new_project(&dir, &args.name, args.lang)?;
    println!("wrote {} files in {}:", files.len(), dir.display());
    for file in files {
        println!("  {file}");
    }
    println!(
        "build it with `wasmgear build {dir}` (or `{dir}/build.sh`), try it with `wasmgear run {dir}/{name}.wasm INPUT`, then copy {name}.wasm into the worker's plugin directory (see {dir}/README.md)",
        dir = dir.display(),
        name = args.name
    );
    Ok(0)
}

/// Options of `wasmgear build`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The plugin project (made by `wasmgear new`) [default: .].
    #[arg(default_value = ".")]
    dir: PathBuf,

    /// Write NAME.wasm into this directory [default: the project's].
    #[arg(long, short)]
    out: Option<PathBuf>,
}

pub fn build(args: BuildArgs) -> anyhow::Result<i32> {
    let dir = std::fs::canonicalize(&args.dir)
        .with_context(|| format!("no plugin project at {:?}", args.dir))?;
    let script = dir.join("build.sh");
    if !script.is_file() {
        return Err(super::usage(format!(
            "{dir:?} has no build.sh: is it a project made by `wasmgear new`?"
        )));
    }
    let out = args.out.clone().unwrap_or_else(|| dir.clone());
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {out:?}"))?;
    let me = std::env::current_exe().context("cannot find the wasmgear binary")?;
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg(&out)
        .current_dir(&dir)
        .env("WASMGEAR", me)
        .status()
        .with_context(|| format!("cannot run {script:?}"))?;
    if !status.success() {
        bail!("{script:?} failed ({status})");
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let wasm = out.join(format!("{name}.wasm"));
    if !wasm.is_file() {
        bail!("{script:?} wrote no {wasm:?}");
    }
    let runtime = wasmgear_runtime::Runtime::new(wasmgear_runtime::RuntimeConfig {
        max_instances: 1,
        ..Default::default()
    })
    .map_err(|e| anyhow::anyhow!("cannot start the runtime to check the plugin: {e:#}"))?;
    let plugin = runtime.load_plugin(&wasm)?;
    println!(
        "built {} ({} KiB): serves function {}",
        wasm.display(),
        plugin.size() / 1024,
        plugin
            .functions()
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(0)
}

/// Options of `wasmgear bindings`.
#[derive(Debug, clap::Args)]
pub struct BindingsArgs {
    /// The language; only `c` needs generated bindings (Rust, Python and JavaScript
    /// generate their own while building).
    #[arg(value_parser = ["c"])]
    lang: String,

    /// The directory to write them into.
    out: PathBuf,

    /// The world: `resumable` for a one-job plugin (job.h, job.c, job_component_type.o),
    /// `batch` for a batch plugin (batch.h, batch.c, batch_component_type.o).
    #[arg(long, value_enum, default_value_t)]
    world: World,
}

pub fn bindings(args: BindingsArgs) -> anyhow::Result<i32> {
    for path in authoring::c_bindings(&args.out, args.world)? {
        println!("{}", path.display());
    }
    Ok(0)
}

/// Options of `wasmgear componentize`.
#[derive(Debug, clap::Args)]
pub struct ComponentizeArgs {
    /// A core WebAssembly module exporting the job world's functions (canonical ABI).
    module: PathBuf,

    /// Where to write the component.
    #[arg(long, short)]
    out: PathBuf,
}

pub fn componentize(args: ComponentizeArgs) -> anyhow::Result<i32> {
    let core =
        std::fs::read(&args.module).with_context(|| format!("cannot read {:?}", args.module))?;
    let component = authoring::componentize(&core)
        .with_context(|| format!("{:?} cannot be made into a job component", args.module))?;
    std::fs::write(&args.out, &component)
        .with_context(|| format!("cannot write {:?}", args.out))?;
    println!(
        "wrote {} ({} KiB)",
        args.out.display(),
        component.len() / 1024
    );
    Ok(0)
}
