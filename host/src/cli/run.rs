//! `wasmgear run`: run one job of a plugin file locally, with no Redis and no worker: the
//! same sandbox, limits and manifest (`NAME.toml` beside it) as a worker would use. The
//! quickest way to try a plugin while writing it.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmgear_proto::{
    DEFAULT_TIMEOUT, ErrorClass, FunctionName, JobId, JobInfo, LogLevel, Outcome, Progress,
};
use wasmgear_runtime::{
    CancelReason, CancelSignal, CompileCache, JobHooks, Limits, Runtime, RuntimeConfig,
};

use super::{exit, parse_duration, usage};

/// Options of `wasmgear run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The plugin: a job component (`NAME.wasm`; its manifest `NAME.toml` beside it applies).
    plugin: PathBuf,

    /// The job's input as text; `-` reads it from stdin. Empty when left out.
    #[arg(conflicts_with = "input_file")]
    input: Option<String>,

    /// Read the input from this file (any bytes).
    #[arg(long, value_name = "FILE")]
    input_file: Option<PathBuf>,

    /// The function the job is of (its name is what the guest sees), when the plugin
    /// serves several; by default its first (the file's name without a manifest).
    #[arg(long)]
    function: Option<FunctionName>,

    /// Stop the job after this long [default: the manifest's default timeout, else 60s].
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// The most memory the job's linear memory may grow to (`256MiB`, `1GiB`, or bytes; the
    /// manifest may only lower it).
    #[arg(long, default_value_t = super::Size::of(wasmgear_runtime::engine::DEFAULT_MEMORY_BYTES))]
    memory_limit: super::Size,

    /// Meter fuel, so that the manifest's `limits.fuel` applies.
    #[arg(long)]
    fuel: bool,

    /// Compile the plugin instead of using the compile cache (WASMGEAR_HOME/cache).
    #[arg(long)]
    no_cache: bool,

    /// Local state: where the compile cache is.
    #[arg(long, env = "WASMGEAR_HOME", default_value = super::DEFAULT_HOME)]
    home: PathBuf,
}

/// Shows the job's progress and log on stderr: a bar on a terminal, lines otherwise.
struct Terminal {
    bar: indicatif::ProgressBar,
    terminal: bool,
}

impl JobHooks for Terminal {
    fn progress(&self, p: Progress) {
        let message = p.message.unwrap_or_default();
        if self.terminal {
            self.bar.set_length(p.total);
            self.bar.set_position(p.done);
            self.bar.set_message(message);
        } else {
            eprintln!("progress {}/{} {message}", p.done, p.total);
        }
    }

    fn log(&self, level: LogLevel, message: String) {
        let line = format!("{:<5} {message}", format!("{level:?}").to_uppercase());
        self.bar.suspend(|| eprintln!("{line}"));
    }
}

/// A runtime for one job at a time, with the compile cache under `home` unless `no_cache`.
pub(crate) fn local_runtime(
    memory_limit: usize,
    fuel: bool,
    home: &std::path::Path,
    no_cache: bool,
) -> anyhow::Result<Runtime> {
    let config = RuntimeConfig {
        max_instances: 1,
        limits: Limits {
            memory_bytes: memory_limit,
            ..Limits::default()
        },
        fuel,
        cache: (!no_cache).then(|| CompileCache::new(home.join("cache"))),
    };
    Runtime::new(config).map_err(|e| anyhow::anyhow!("cannot start the runtime: {e:#}"))
}

pub async fn run(args: RunArgs) -> anyhow::Result<i32> {
    let input = read_input(&args)?;
    let runtime = local_runtime(
        args.memory_limit.bytes(),
        args.fuel,
        &args.home,
        args.no_cache,
    )?;
    let plugin = runtime
        .load_plugin(&args.plugin)
        .map_err(|e| usage(e.to_string()))?;
    let function = match &args.function {
        Some(function) if !plugin.functions().contains(function) => {
            let served: Vec<&str> = plugin.functions().iter().map(|f| f.as_str()).collect();
            return Err(usage(format!(
                "{} does not serve {function}; it serves {}",
                args.plugin.display(),
                served.join(", ")
            )));
        }
        Some(function) => function.clone(),
        None => plugin.functions()[0].clone(),
    };
    let timeout = args
        .timeout
        .or(plugin.defaults().timeout)
        .unwrap_or(DEFAULT_TIMEOUT);
    let info = JobInfo {
        // Seq 0: a job of no queue.
        id: JobId { function, seq: 0 },
        attempt: 1,
        max_attempts: 1,
        enqueued_at_ms: wasmgear_proto::units::now_ms(),
        timeout_ms: timeout.as_millis() as u64,
        trace: None,
    };
    run_here(&runtime, &plugin, &info, &input).await
}

/// Runs the job `info` with `input` in a fresh instance of `plugin`, showing its progress
/// and log on stderr and its output on stdout; returns the exit code (0 succeeded, 1
/// failed, 3 cancelled by Ctrl-C or SIGTERM).
pub(crate) async fn run_here(
    runtime: &Runtime,
    plugin: &wasmgear_runtime::Plugin,
    info: &JobInfo,
    input: &[u8],
) -> anyhow::Result<i32> {
    let terminal = std::io::stderr().is_terminal();
    let bar = indicatif::ProgressBar::new(0);
    if terminal {
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
        {
            bar.set_style(style);
        }
    } else {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let hooks = Arc::new(Terminal {
        bar: bar.clone(),
        terminal,
    });
    // Ctrl-C or SIGTERM asks the job to stop, as a cancel does in a worker.
    let cancel = CancelSignal::new();
    let stop = cancel.clone();
    let signals = tokio::spawn(async move {
        super::worker::shutdown_signal().await;
        stop.cancel(CancelReason::Requested);
    });
    let outcome = runtime
        .run(plugin, info, input, hooks, cancel.clone())
        .await;
    signals.abort();
    bar.finish_and_clear();
    match outcome {
        Outcome::Succeeded(output) => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&output)?;
            if stdout.is_terminal() && !output.ends_with(b"\n") {
                writeln!(stdout)?;
            }
            Ok(exit::OK)
        }
        // Failures other than the guest's own are in the job's log already (stderr above).
        Outcome::Failed(_) if cancel.fired().is_some() => Ok(exit::CANCELLED),
        Outcome::Failed(failure) => {
            if failure.class == ErrorClass::GuestError {
                eprintln!("ERROR [{}] {}", failure.class, failure.message);
            }
            Ok(exit::FAILED)
        }
    }
}

/// The input: the argument, stdin (`-`), a file, or nothing.
fn read_input(args: &RunArgs) -> anyhow::Result<Vec<u8>> {
    if let Some(path) = &args.input_file {
        return std::fs::read(path).map_err(|e| {
            usage(format!(
                "cannot read the input file {}: {e}",
                path.display()
            ))
        });
    }
    match args.input.as_deref() {
        Some("-") => {
            let mut input = Vec::new();
            std::io::stdin()
                .read_to_end(&mut input)
                .map_err(|e| usage(format!("cannot read the input from stdin: {e}")))?;
            Ok(input)
        }
        Some(text) => Ok(text.as_bytes().to_vec()),
        None => Ok(Vec::new()),
    }
}
