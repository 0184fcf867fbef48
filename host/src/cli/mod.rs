//! The `wasmgear` command line: one file per subcommand; `output` prints for all of them
//! (tables and lines for people, JSON with `--json`).
//!
//! Subcommands talk to Redis only through [`wasmgear_client`]; `worker` also builds the runtime.

mod access;
mod author;
mod batch;
mod bulk;
mod cancel;
mod completions;
mod config;
mod deploy;
mod enqueue;
mod events;
mod failed;
mod flow;
mod groups;
mod jobs;
mod keys;
mod logs;
pub mod otel;
mod output;
mod plugins;
mod priority;
mod queues;
mod replay;
mod retry;
mod run;
mod schedule;
mod serve;
mod signing;
mod stats;
mod status;
mod wait;
mod worker;
mod workers;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
pub use wasmgear_proto::units::{parse_duration, parse_time};

/// The directory for local state (the embedded Redis) when `WASMGEAR_HOME` is not set.
pub const DEFAULT_HOME: &str = ".wasmgear";
/// The file in the home directory that tells the CLI where the embedded Redis listens.
pub const REDIS_URL_FILE: &str = "redis.url";

/// wasmgear: a job queue whose workers run every job in a fresh, sandboxed WebAssembly
/// component.
///
/// Start a worker on a directory of plugins (FUNCTION.wasm), enqueue jobs for those
/// functions, and watch them:
///
///   wasmgear worker --plugins ./plugins          # embedded Redis unless --redis is given
///   wasmgear enqueue reverse "hello" --wait       # prints the output
///   wasmgear enqueue resize --input-file a.jpg --priority high --after fetch:3
///   wasmgear wait resize:1 resize:2               # live progress bars
///   wasmgear queues / workers / failed / stats F  # what the queue is doing
///   wasmgear events                               # follow every event live
///   wasmgear new thumbs --lang python             # start a plugin (rust, python, js, c)
///
/// Every command takes the Redis URL from --redis or WASMGEAR_REDIS_URL:
/// redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss:// for TLS (trusting the system's CAs or
/// SSL_CERT_FILE), any node of a Redis Cluster, or
/// redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[?db=N] for the primary
/// Redis Sentinel names (followed through failovers). Commands that print data take --json (print
/// JSON instead of text); a job's JSON is the HTTP API's (output in output_base64).
/// Colour only on a terminal, never with NO_COLOR set.
#[derive(Debug, Parser)]
#[command(name = "wasmgear", version, about, verbatim_doc_comment, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How to reach Redis; shared by every subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL: redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss://... for TLS, any node of
    /// a cluster, or redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[?db=N]
    /// (sentinels' own credentials: &sentinel_user=U&sentinel_password=P). Without it the CLI uses the embedded Redis started by `wasmgear worker` in
    /// the same WASMGEAR_HOME.
    #[arg(long = "redis", env = "WASMGEAR_REDIS_URL", hide_env_values = true)]
    pub url: Option<String>,

    /// Directory for local state: the embedded Redis' data and the file telling the CLI
    /// where it listens.
    #[arg(long, env = "WASMGEAR_HOME", default_value = DEFAULT_HOME)]
    pub home: PathBuf,

    /// Encrypted job data: a key file (`ID BASE64KEY` a line, the first seals; `wasmgear
    /// keys new FILE ID` adds one). Inputs of functions that store only encrypted input
    /// (`config F --encrypt`) are sealed, each bound to its job; what is read of sealed
    /// jobs is opened; a worker opens their inputs and seals their output, error, log and
    /// checkpoint.
    #[arg(long, env = "WASMGEAR_ENCRYPTION_KEY_FILE", value_name = "FILE")]
    pub encryption_key_file: Option<PathBuf>,

    /// With --encryption-key-file: seal the input of every job written, whatever its
    /// function's config says.
    #[arg(long, env = "WASMGEAR_ENCRYPT_ALL", requires = "encryption_key_file")]
    pub encrypt_all: bool,
}

/// How many replicas confirm the writes of a command that writes jobs (enqueue, bulk, flow,
/// batch, replay, serve; the worker for its completions).
#[derive(Debug, Clone, clap::Args)]
pub struct ReplicaArgs {
    /// How many replicas must confirm each write of jobs (a worker's: each completion)
    /// before it is reported done: a job acknowledged then survives the loss of the
    /// primary. 0 asks for none; a function's own setting (config --min-replicas) may ask
    /// for more.
    #[arg(
        long,
        env = "WASMGEAR_MIN_REPLICAS",
        default_value_t = 0,
        value_name = "N"
    )]
    pub min_replicas: u32,

    /// How long those replicas are waited for, per write.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub min_replicas_timeout: std::time::Duration,
}

impl ReplicaArgs {
    /// How many replicas confirm writes (checked).
    pub fn min_replicas(&self) -> anyhow::Result<wasmgear_client::MinReplicas> {
        wasmgear_client::MinReplicas::new(self.min_replicas, self.min_replicas_timeout)
            .map_err(|e| usage(format!("--min-replicas: {e}")))
    }
}

impl RedisArgs {
    /// A queue client for the Redis these arguments name.
    pub async fn client(&self) -> anyhow::Result<wasmgear_client::Client> {
        let keys = self.keys()?;
        let url = self.resolve()?;
        let client = wasmgear_client::Client::connect(&url).await?;
        Ok(match keys {
            Some(keys) => client.with_keys(keys, self.encrypt_all),
            None => client,
        })
    }

    /// The keys of --encryption-key-file, if given (read before anything is sent).
    pub fn keys(&self) -> anyhow::Result<Option<std::sync::Arc<wasmgear_proto::crypto::KeyRing>>> {
        let Some(path) = &self.encryption_key_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            usage(format!(
                "cannot read the encryption key file {}: {e}",
                path.display()
            ))
        })?;
        let keys = wasmgear_proto::crypto::KeyRing::parse(&path.display().to_string(), &text)
            .map_err(|e| usage(e.to_string()))?;
        Ok(Some(std::sync::Arc::new(keys)))
    }

    /// A client whose writes of jobs `replicas` confirm (checked before connecting).
    pub async fn writer(&self, replicas: &ReplicaArgs) -> anyhow::Result<wasmgear_client::Client> {
        let min = replicas.min_replicas()?;
        Ok(self.client().await?.with_min_replicas(min))
    }

    /// The Redis URL to use: the one given, else the embedded Redis' (from its URL file).
    pub fn resolve(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.url {
            return Ok(url.clone());
        }
        let file = self.home.join(REDIS_URL_FILE);
        match std::fs::read_to_string(&file) {
            Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => Err(usage(format!(
                "no Redis to talk to: pass --redis URL or set WASMGEAR_REDIS_URL, or start \
                 `wasmgear worker` without a URL to run an embedded Redis (it writes {file:?})"
            ))),
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a worker node: lease jobs and run each in a fresh instance of its plugin.
    Worker(worker::WorkerArgs),
    /// Enqueue a job and print its id (or, with --wait, its output).
    Enqueue(Box<enqueue::EnqueueArgs>),
    /// Enqueue many jobs from JSON lines (stdin or a file) and print their ids.
    Bulk(bulk::BulkArgs),
    /// Show a job's state, progress and result.
    #[command(visible_alias = "get")]
    Status(status::StatusArgs),
    /// Wait for jobs to end, with a live progress bar each; exits with their outcome.
    Wait(wait::WaitArgs),
    /// Follow the events of one function or of all, live (create, start, progress, finish...).
    Events(events::EventsArgs),
    /// Change the priority of a job that has not started.
    Priority(priority::PriorityArgs),
    /// Print a job's log: its log lines, stdout and stderr, attempt by attempt.
    Logs(logs::LogsArgs),
    /// List the live workers: host, pid, functions and plugin versions, running jobs.
    Workers(workers::WorkersArgs),
    /// Check a plugin directory offline: each plugin's functions, version, limits and
    /// grants, or why it cannot load (exit 1).
    Plugins(plugins::PluginsArgs),
    /// Cancel a job: a waiting one at once, a running one by asking its worker to stop it.
    Cancel(cancel::CancelArgs),
    /// Per function: jobs queued, scheduled, running, waiting on dependencies, finished;
    /// live workers; paused or not.
    Queues(queues::QueuesArgs),
    /// Failure groups with their counts, or (with --group) the failed jobs of one group.
    Failed(failed::FailedArgs),
    /// Run a failed or cancelled job again, or a whole failure group (--group).
    Retry(retry::RetryArgs),
    /// A function's statistics for one day: wait and run times, failures, retries.
    Stats(stats::StatsArgs),
    /// Find jobs by tag, or a function's jobs by state.
    Jobs(jobs::JobsArgs),
    /// Add or remove tags of a job.
    Tag(jobs::TagArgs),
    /// Show or change a function's settings: concurrency cap, rate limit, jobs kept.
    Config(config::ConfigArgs),
    /// A function's groups (tenants, customers, documents), the deepest first: ready and
    /// running jobs, limits, paused or rate-limited.
    Groups(groups::GroupsArgs),
    /// Pause a function: workers start none of its jobs (running ones finish; enqueueing
    /// goes on). With --group, one group only.
    Pause(config::PauseArgs),
    /// Resume a paused function.
    Resume(config::PauseArgs),
    /// Run one job of a plugin file here and now: no Redis, no worker; the same sandbox,
    /// limits and manifest; progress and log on stderr, output on stdout; exit codes as
    /// `enqueue --wait`.
    Run(run::RunArgs),
    /// Run a job of the queue again, locally (no worker, nothing written), on the exact
    /// plugin build an attempt ran on (deployed, or in --plugins DIR) or on another
    /// (--plugin FILE).
    Replay(replay::ReplayArgs),
    /// Recurring jobs: add (cron or fixed interval), list, rm, pause, resume; fired by the
    /// workers, one job per tick.
    Schedule(schedule::ScheduleArgs),
    /// Workflows: submit a graph of jobs whose dependents read their dependencies' outputs
    /// (JSON or TOML), draw it with its states, cancel or retry it.
    Flow(flow::FlowArgs),
    /// Batches: jobs of any functions with a callback job once all have succeeded
    /// (--on-success) and one once all have ended (--on-complete); add, close, status.
    Batch(batch::BatchArgs),
    /// Deploy a plugin once for every worker started with --plugins-from-redis (stored in
    /// Redis by content hash); list the versions kept, roll back, or activate another.
    Deploy(deploy::DeployArgs),
    /// Make an ed25519 key pair for signed plugins: PATH.key signs (`sign`, `deploy
    /// --sign`), PATH.pub is what workers trust (`worker --trust`).
    Keygen(signing::KeygenArgs),
    /// Scoped API tokens for `serve --tokens-file`: add one (name, role, functions).
    Token(access::TokenArgs),
    /// The audit log: who did what through `serve`, the dashboard and the CLI's operate
    /// commands, newest first.
    Audit(access::AuditArgs),
    /// Print the `ACL SETUSER` command of a least-privilege Redis user: producer, worker or
    /// operator.
    Acl(access::AclArgs),
    /// The key file of encrypted job data: `keys new FILE ID` puts a new key first.
    Keys(keys::KeysArgs),
    /// Sign a directory plugin (its component, manifest and name) into NAME.wasm.sig, for
    /// workers started with --trust.
    Sign(signing::SignArgs),
    /// Write a new plugin project (Rust, Python, JavaScript or C) that builds NAME.wasm.
    New(author::NewArgs),
    /// Build a plugin project made by `new` and check that the result is a job component.
    Build(author::BuildArgs),
    /// Write the C bindings of a job world (job.h, job.c, job_component_type.o; with --world
    /// batch, a batch plugin's: batch.h, batch.c, batch_component_type.o).
    Bindings(author::BindingsArgs),
    /// Make a core WebAssembly module (C, Zig, AssemblyScript, ...) into a job component.
    Componentize(author::ComponentizeArgs),
    /// Serve the HTTP API, the dashboard (/ui), Prometheus metrics (/metrics) and health
    /// checks (/healthz, /readyz).
    ///
    /// On the --listen address (http://127.0.0.1:8080 by default; the URLs are printed at
    /// the start):
    ///
    /// /v1/...: the HTTP API: enqueue, get, wait for and cancel jobs, follow events, list
    /// queues, workers, failures and statistics (its OpenAPI document: /openapi.json).
    ///
    /// /ui: the dashboard, for people: queues, jobs, failures and workers, with cancel,
    /// retry and pause (sign in with the API token).
    ///
    /// /metrics: the queue in the Prometheus text format (with the API token).
    ///
    /// /healthz (the server is up) and /readyz (Redis answers): without the token, for
    /// orchestrators.
    Serve(serve::ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
}

impl Cli {
    /// The name the process's spans are exported under (unless `OTEL_SERVICE_NAME` says).
    pub fn service_name(&self) -> &'static str {
        match self.command {
            Command::Worker(_) => "wasmgear-worker",
            Command::Serve(_) => "wasmgear-serve",
            _ => "wasmgear-cli",
        }
    }

    /// Whether the command is a long-running service (a worker, the HTTP server), which must
    /// outlive any reader of its output, rather than one that prints and ends.
    pub fn is_service(&self) -> bool {
        matches!(self.command, Command::Worker(_) | Command::Serve(_))
    }

    /// Runs the chosen subcommand; returns the process exit code.
    pub async fn run(self) -> anyhow::Result<i32> {
        match self.command {
            Command::Worker(args) => worker::run(args).await,
            Command::Serve(args) => serve::run(args).await,
            Command::Enqueue(args) => enqueue::run(*args).await,
            Command::Bulk(args) => bulk::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Cancel(args) => cancel::run(args).await,
            Command::Logs(args) => logs::run(args).await,
            Command::Workers(args) => workers::run(args).await,
            Command::Plugins(args) => plugins::run(args).await,
            Command::Queues(args) => queues::run(args).await,
            Command::Failed(args) => failed::run(args).await,
            Command::Retry(args) => retry::run(args).await,
            Command::Stats(args) => stats::run(args).await,
            Command::Jobs(args) => jobs::run(args).await,
            Command::Tag(args) => jobs::tag(args).await,
            Command::Config(args) => config::run(args).await,
            Command::Groups(args) => groups::run(args).await,
            Command::Pause(args) => config::pause(args, true).await,
            Command::Resume(args) => config::pause(args, false).await,
            Command::Run(args) => run::run(args).await,
            Command::Replay(args) => replay::run(args).await,
            Command::Deploy(args) => deploy::run(args).await,
            Command::Schedule(args) => schedule::run(args).await,
            Command::Flow(args) => flow::run(args).await,
            Command::Batch(args) => batch::run(args).await,
            Command::New(args) => author::new(args),
            Command::Keygen(args) => signing::keygen(args),
            Command::Token(args) => access::token(args),
            Command::Audit(args) => access::audit(args).await,
            Command::Acl(args) => access::acl(args),
            Command::Keys(args) => keys::run(args).await,
            Command::Sign(args) => signing::sign(args),
            Command::Build(args) => author::build(args),
            Command::Bindings(args) => author::bindings(args),
            Command::Componentize(args) => author::componentize(args),
            Command::Completions(args) => completions::run(args),
            Command::Wait(args) => wait::run(args).await,
            Command::Events(args) => events::run(args).await,
            Command::Priority(args) => priority::run(args).await,
        }
    }
}

/// The exit codes of every command (also in the README and `wasmgear --help`).
pub mod exit {
    /// Success (for `--wait` and `wait`: the job succeeded).
    pub const OK: i32 = 0;
    /// The job failed, or the command could not do what it was asked for another reason.
    pub const FAILED: i32 = 1;
    /// Bad usage or bad input: nothing was changed.
    pub const USAGE: i32 = 2;
    /// The job was cancelled.
    pub const CANCELLED: i32 = 3;
    /// Waiting ran out of time; the job goes on.
    pub const TIMED_OUT: i32 = 4;
    /// No such job (never enqueued, or its retention is over).
    pub const NOT_FOUND: i32 = 5;
    /// Redis cannot be reached, refused the credentials, or is not Redis.
    pub const UNREACHABLE: i32 = 6;
}

/// The text of the exit codes, for `--help`.
pub const EXIT_CODES: &str = "Exit codes: 0 success; 1 the job failed (or another error); \
2 bad usage or bad input (nothing changed); 3 the job was cancelled; 4 gave up waiting (the job \
goes on); 5 no such job; 6 cannot reach Redis (down, wrong password, or not Redis).";

/// Bad input that a command found itself (clap finds the rest): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Something a command looked for is not there (a plugin version, say): exit code 5.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotFoundError(pub String);

/// A [`UsageError`] as an `anyhow::Error`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The exit code for an error: the first error in its chain that says.
pub fn exit_code(error: &anyhow::Error) -> i32 {
    use wasmgear_client::QueueError;
    for cause in error.chain() {
        if cause.is::<UsageError>() || cause.is::<wasmgear_proto::NameError>() {
            return exit::USAGE;
        }
        if cause.is::<NotFoundError>() {
            return exit::NOT_FOUND;
        }
        if let Some(wasmgear_sources::ConnectError::Unreachable { .. }) = cause.downcast_ref() {
            return exit::UNREACHABLE;
        }
        if let Some(e) = cause.downcast_ref::<QueueError>() {
            return e.class().exit_code();
        }
    }
    exit::FAILED
}

/// A size in bytes as written on the command line: plain bytes (`4096`) or with a unit
/// (`64KiB`, `256MiB`, `1GiB`; `500KB` counts in powers of 1000), read by the same parser as
/// plugin manifests' sizes. `--help` shows it in the largest binary unit that divides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl Size {
    /// `bytes` as a size.
    pub const fn of(bytes: usize) -> Size {
        Size(bytes as u64)
    }

    /// The number of bytes, as a `usize` (saturating beyond the address space: no memory
    /// is that large).
    pub fn bytes(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl std::str::FromStr for Size {
    type Err = String;

    fn from_str(text: &str) -> Result<Size, String> {
        wasmgear_runtime::manifest::parse_size(text).map(Size)
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 != 0 && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// Says on stderr that `old` is an old spelling kept for one release, and to write `new`.
pub(crate) fn deprecated(old: &str, new: &str) {
    eprintln!(
        "warning: `wasmgear {old}` is deprecated and goes in the next release; write `wasmgear {new}`"
    );
}

#[cfg(test)]
mod size_tests {
    use super::Size;

    /// Sizes read plain bytes and units, print back in the largest binary unit that
    /// divides them, and refuse what is not a size.
    #[test]
    fn sizes_take_units_and_print_back_the_same() {
        for (text, bytes, shown) in [
            ("256MiB", 256 << 20, "256MiB"),
            ("1GiB", 1 << 30, "1GiB"),
            ("64 KiB", 64 << 10, "64KiB"),
            ("4096", 4096, "4KiB"),
            ("1000", 1000, "1000"),
            ("500KB", 500_000, "500000"),
        ] {
            let size: Size = text.parse().unwrap();
            assert_eq!(size, Size(bytes), "{text}");
            assert_eq!(size.to_string(), shown, "{text}");
            assert_eq!(size.to_string().parse::<Size>(), Ok(size), "{text}");
        }
        for bad in ["", "lots", "-1MiB", "1 parsec"] {
            let error = bad.parse::<Size>().unwrap_err();
            assert!(error.contains("is not a size"), "{bad:?}: {error}");
        }
    }
}

#[cfg(test)]
mod error_class_tests {
    use wasmgear_client::ErrorClass;

    /// Every front end's error classes are the CLI's exit codes.
    #[test]
    fn error_classes_are_the_cli_s_exit_codes() {
        assert_eq!(ErrorClass::BadInput.exit_code(), super::exit::USAGE);
        assert_eq!(ErrorClass::NotFound.exit_code(), super::exit::NOT_FOUND);
        assert_eq!(ErrorClass::Conflict.exit_code(), super::exit::USAGE);
        assert_eq!(
            ErrorClass::Unreachable.exit_code(),
            super::exit::UNREACHABLE
        );
        assert_eq!(ErrorClass::TimedOut.exit_code(), super::exit::TIMED_OUT);
        assert_eq!(ErrorClass::Failed.exit_code(), super::exit::FAILED);
    }
}
