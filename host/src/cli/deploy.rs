//! `wasmgear deploy`: store a plugin in Redis once for every worker node started with
//! `--plugins-from-redis`, list the versions kept, roll back or activate another one, and
//! collect the chunks nothing needs any more.

use std::path::{Path, PathBuf};

use wasmgear_client::FunctionName;
use wasmgear_client::deploy::DeployState;
use wasmgear_proto::deploy::DEFAULT_KEEP;
use wasmgear_runtime::manifest;

use super::output::{print_json, print_table};
use super::{RedisArgs, usage};

/// Options of `wasmgear deploy`: a plugin to deploy, or a subcommand.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    group = clap::ArgGroup::new("action")
        .args(["plugin", "list", "rollback", "activate", "remove", "collect"])
        .required(true)
)]
pub struct DeployArgs {
    #[command(subcommand)]
    command: Option<DeployCommand>,

    #[command(flatten)]
    redis: RedisArgs,

    /// The plugin to deploy (`FUNCTION.wasm`): checked (it must load as a job component),
    /// stored in Redis by its content hash and made the current version of each function
    /// it serves. Its manifest is `FUNCTION.toml` beside it unless --manifest says.
    plugin: Option<PathBuf>,

    /// The plugin's manifest [default: NAME.toml beside the plugin, if there is one].
    #[arg(long, requires = "plugin")]
    manifest: Option<PathBuf>,

    /// Sign the plugin (its component, manifest and name) with this secret key (a .key file
    /// written by `wasmgear keygen`), for workers started with --trust.
    #[arg(
        long,
        value_name = "KEY",
        env = "WASMGEAR_SIGNING_KEY",
        requires = "plugin"
    )]
    sign: Option<PathBuf>,

    /// Store the plugin without making it current (make it current later with `deploy
    /// activate`).
    #[arg(long, requires = "plugin")]
    no_activate: bool,

    /// How many versions of each function to keep; older ones are forgotten unless a kept
    /// job's history names them (so that `wasmgear replay` still finds them).
    #[arg(long, default_value_t = DEFAULT_KEEP, value_parser = clap::value_parser!(u32).range(1..=1000))]
    keep: u32,

    /// Print the result as JSON.
    #[arg(long)]
    json: bool,

    /// Check the plugin by compiling it anew instead of through the compile cache
    /// (WASMGEAR_HOME/cache).
    #[arg(long, requires = "plugin")]
    no_cache: bool,

    /// The old spelling of `deploy list [FUNCTION]`, kept for one release with a warning.
    #[arg(long, value_name = "FUNCTION", num_args = 0..=1, default_missing_value = "", hide = true)]
    list: Option<String>,

    /// The old spelling of `deploy rollback FUNCTION`, kept for one release with a warning.
    #[arg(long, value_name = "FUNCTION", hide = true)]
    rollback: Option<FunctionName>,

    /// The old spelling of `deploy activate FUNCTION VERSION`, kept for one release with a
    /// warning.
    #[arg(long, num_args = 2, value_names = ["FUNCTION", "VERSION"], hide = true)]
    activate: Option<Vec<String>>,

    /// The old spelling of `deploy remove FUNCTION`, kept for one release with a warning.
    #[arg(long, value_name = "FUNCTION", hide = true)]
    remove: Option<FunctionName>,

    /// The old spelling of `deploy collect`, kept for one release with a warning.
    #[arg(long, hide = true)]
    collect: bool,
}

#[derive(Debug, clap::Subcommand)]
enum DeployCommand {
    /// List the versions kept (of FUNCTION only, if given), with when they were deployed,
    /// their size, and which is current.
    List(ListArgs),
    /// Put FUNCTION back on the version it had before its current one.
    Rollback(FunctionArgs),
    /// Make VERSION (or the one version starting with it) the current version of FUNCTION.
    Activate(ActivateArgs),
    /// Stop serving FUNCTION from the store: workers drop it (running jobs finish); its
    /// versions stay stored, for replay and for `deploy activate`.
    Remove(FunctionArgs),
    /// Delete the chunks of versions no record names any more and of interrupted deploys
    /// (done after every deploy and by workers serving deployed plugins too; never the
    /// chunks of a version a record names or a deploy is writing).
    Collect(CollectArgs),
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// List only this function's versions.
    function: Option<FunctionName>,

    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct FunctionArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function.
    function: FunctionName,

    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ActivateArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function.
    function: FunctionName,

    /// The version to make current, or the start of exactly one kept version's hash.
    version: String,

    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CollectArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// What `wasmgear deploy` was asked to do, however it was spelt.
enum Action {
    Deploy(PathBuf),
    List(Option<FunctionName>),
    Rollback(FunctionName),
    Activate(FunctionName, String),
    Remove(FunctionName),
    Collect,
}

pub async fn run(args: DeployArgs) -> anyhow::Result<i32> {
    let (redis, json, action) = action_of(&args)?;
    match action {
        Action::Deploy(path) => deploy(&args, &path).await,
        Action::List(function) => list(&redis, json, function.as_ref()).await,
        Action::Rollback(function) => {
            let client = redis.client().await?;
            let (left, now) = client.rollback_deployed(&function).await?;
            let outcome = format!("ok: {left} -> {now}");
            super::access::record(&client, "deploy rollback", function.as_str(), &outcome).await;
            if json {
                print_json(
                    &serde_json::json!({ "function": function, "left": left, "current": now }),
                )?;
            } else {
                println!("{function}: rolled back from {left} to {now}");
            }
            Ok(0)
        }
        Action::Remove(function) => {
            let client = redis.client().await?;
            let left = client.remove_deployed(&function).await?;
            let outcome = format!("ok: was on {left}");
            super::access::record(&client, "deploy remove", function.as_str(), &outcome).await;
            if json {
                print_json(&serde_json::json!({ "function": function, "left": left }))?;
            } else {
                println!("{function}: no longer served from the store (it was on {left})");
            }
            Ok(0)
        }
        Action::Collect => {
            let collected = redis.client().await?.collect_deployed().await?;
            if json {
                print_json(&serde_json::json!({ "collected": collected }))?;
            } else if collected.is_empty() {
                println!("nothing to collect");
            } else {
                for version in &collected {
                    println!("collected the chunks of version {version}");
                }
            }
            Ok(0)
        }
        Action::Activate(function, version) => {
            let client = redis.client().await?;
            let version = client.activate_deployed(&function, &version).await?;
            let target = format!("{function} {version}");
            super::access::record(&client, "deploy activate", &target, "ok").await;
            if json {
                print_json(&serde_json::json!({ "function": function, "current": version }))?;
            } else {
                println!("{function}: version {version} is current");
            }
            Ok(0)
        }
    }
}

/// The Redis to use, whether to print JSON, and the action: from the subcommand, else from
/// the plugin argument, else from an old flag (with a warning that it is deprecated).
fn action_of(args: &DeployArgs) -> anyhow::Result<(RedisArgs, bool, Action)> {
    let old = |old: &str, new: &str| super::deprecated(old, new);
    Ok(match &args.command {
        Some(DeployCommand::List(a)) => (a.redis.clone(), a.json, Action::List(a.function.clone())),
        Some(DeployCommand::Rollback(a)) => (
            a.redis.clone(),
            a.json,
            Action::Rollback(a.function.clone()),
        ),
        Some(DeployCommand::Activate(a)) => (
            a.redis.clone(),
            a.json,
            Action::Activate(a.function.clone(), a.version.clone()),
        ),
        Some(DeployCommand::Remove(a)) => {
            (a.redis.clone(), a.json, Action::Remove(a.function.clone()))
        }
        Some(DeployCommand::Collect(a)) => (a.redis.clone(), a.json, Action::Collect),
        None => {
            let action = if let Some(path) = &args.plugin {
                Action::Deploy(path.clone())
            } else if let Some(function) = &args.list {
                old("deploy --list [FUNCTION]", "deploy list [FUNCTION]");
                match function.as_str() {
                    "" => Action::List(None),
                    name => Action::List(Some(FunctionName::new(name)?)),
                }
            } else if let Some(function) = &args.rollback {
                old("deploy --rollback FUNCTION", "deploy rollback FUNCTION");
                Action::Rollback(function.clone())
            } else if let Some(pair) = &args.activate {
                old(
                    "deploy --activate FUNCTION VERSION",
                    "deploy activate FUNCTION VERSION",
                );
                let [function, version] = pair.as_slice() else {
                    return Err(usage("--activate takes FUNCTION VERSION"));
                };
                Action::Activate(FunctionName::new(function)?, version.clone())
            } else if let Some(function) = &args.remove {
                old("deploy --remove FUNCTION", "deploy remove FUNCTION");
                Action::Remove(function.clone())
            } else if args.collect {
                old("deploy --collect", "deploy collect");
                Action::Collect
            } else {
                return Err(usage(
                    "give a plugin to deploy, or a subcommand: list, rollback, activate, remove or collect",
                ));
            };
            (args.redis.clone(), args.json, action)
        }
    })
}

/// Checks, stores and (unless `--no-activate`) activates the plugin at `path`.
async fn deploy(args: &DeployArgs, path: &Path) -> anyhow::Result<i32> {
    let bytes = std::fs::read(path)
        .map_err(|e| usage(format!("cannot read plugin {}: {e}", path.display())))?;
    let manifest_path = args
        .manifest
        .clone()
        .unwrap_or_else(|| manifest::manifest_path(path));
    let manifest_text = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && args.manifest.is_none() => None,
        Err(e) => {
            return Err(usage(format!(
                "cannot read the manifest {}: {e}",
                manifest_path.display()
            )));
        }
    };
    let parsed = match &manifest_text {
        Some(text) => manifest::parse(&manifest_path, text).map_err(|e| usage(e.to_string()))?,
        None => manifest::Manifest::default(),
    };
    if !parsed.capabilities.dirs.is_empty() {
        return Err(usage(format!(
            "{} grants host directories ([[dirs]]): a deployed plugin cannot, as they would \
             have to exist on every node; serve it from a plugin directory instead",
            manifest_path.display()
        )));
    }
    // The same check a worker makes: it compiles and links as a job component.
    let runtime = super::run::local_runtime(
        wasmgear_runtime::engine::DEFAULT_MEMORY_BYTES,
        parsed.limits.fuel.is_some(),
        &args.redis.home,
        args.no_cache,
    )?;
    let plugin = {
        let (path, bytes) = (path.to_path_buf(), bytes.clone());
        tokio::task::spawn_blocking(move || runtime.compile_plugin(&path, &bytes, parsed))
            .await?
            .map_err(|e| usage(e.to_string()))?
    };
    let name = super::signing::plugin_name(path)?;
    let signature = match &args.sign {
        Some(key) => {
            let key = super::signing::read_signing_key(key)?;
            Some(key.sign(name, &bytes, manifest_text.as_deref()))
        }
        None => None,
    };
    let client = args.redis.client().await?;
    let outcome = client
        .deploy(
            &wasmgear_client::deploy::PluginUpload {
                component: &bytes,
                name,
                functions: plugin.functions(),
                manifest: manifest_text.as_deref(),
                signature: signature.as_deref(),
            },
            !args.no_activate,
            args.keep as usize,
        )
        .await?;
    let signed = match &signature {
        Some(line) => match wasmgear_proto::signing::parse_signature(line) {
            Ok((key, _)) => format!(", signed by {key}"),
            Err(_) => String::new(),
        },
        None => String::new(),
    };
    let target = format!(
        "{} version {} for {}{signed}{}",
        name,
        outcome.record.version,
        outcome.record.functions.join(", "),
        if args.no_activate {
            " (not activated)"
        } else {
            ""
        }
    );
    super::access::record(&client, "deploy", &target, "ok").await;
    if args.json {
        print_json(&serde_json::json!({
            "version": outcome.record.version,
            "sha256": outcome.record.sha256,
            "size": outcome.record.size,
            "chunks": outcome.record.chunks,
            "functions": outcome.record.functions,
            "deployed_ms": outcome.record.deployed_ms,
            "activated": outcome.activated,
            "forgotten": pairs(&outcome.forgotten),
            "kept_for_jobs": pairs(&outcome.kept_for_jobs),
            "collected": outcome.collected,
        }))?;
        return Ok(0);
    }
    let record = &outcome.record;
    println!(
        "deployed {} as version {} ({}, {} chunk{}){}",
        path.display(),
        record.version,
        indicatif::HumanBytes(record.size),
        record.chunks,
        if record.chunks == 1 { "" } else { "s" },
        if outcome.activated {
            format!(": now current for {}", record.functions.join(", "))
        } else {
            format!(
                ": stored, not current (`wasmgear deploy activate {} {}`)",
                record.functions[0], record.version
            )
        }
    );
    for field in &outcome.forgotten {
        let (function, version) = field.split_once(' ').unwrap_or((field, ""));
        println!(
            "forgot version {version} of {function} (beyond the {} kept)",
            args.keep
        );
    }
    for field in &outcome.kept_for_jobs {
        let (function, version) = field.split_once(' ').unwrap_or((field, ""));
        println!("kept version {version} of {function}: a kept job ran on it");
    }
    for version in &outcome.collected {
        println!("collected the chunks of version {version}");
    }
    Ok(0)
}

/// `FUNCTION VERSION`s as JSON objects.
fn pairs(fields: &[String]) -> Vec<serde_json::Value> {
    fields
        .iter()
        .map(|field| {
            let (function, version) = field.split_once(' ').unwrap_or((field, ""));
            serde_json::json!({ "function": function, "version": version })
        })
        .collect()
}

/// `deploy list [FUNCTION]`.
async fn list(
    redis: &RedisArgs,
    json: bool,
    function: Option<&FunctionName>,
) -> anyhow::Result<i32> {
    let client = redis.client().await?;
    let state = client.deploy_state().await?;
    let functions: Vec<&String> = match function {
        None => state.history.keys().collect(),
        Some(function) => match state.history.get_key_value(function.as_str()) {
            Some((f, _)) => vec![f],
            None => {
                return Err(super::NotFoundError(format!(
                    "{function} has no deployed version (deploy one with `wasmgear deploy`)"
                ))
                .into());
            }
        },
    };
    if json {
        let list: Vec<serde_json::Value> = functions
            .iter()
            .map(|f| {
                let versions: Vec<serde_json::Value> = state
                    .versions_of(f)
                    .map(|v| {
                        serde_json::json!({
                            "version": v.version,
                            "deployed_ms": v.deployed_ms,
                            "size": v.size,
                            "sha256": v.sha256,
                            "current": state.current.get(*f) == Some(&v.version),
                            "signed_by": signer(v),
                        })
                    })
                    .collect();
                serde_json::json!({ "function": f, "current": state.current.get(*f), "versions": versions })
            })
            .collect();
        print_json(&list)?;
        return Ok(0);
    }
    if functions.is_empty() {
        println!("no plugin deployed yet: `wasmgear deploy FUNCTION.wasm`");
        return Ok(0);
    }
    print_table(
        &["FUNCTION", "VERSION", "DEPLOYED", "SIZE", "SIGNED BY", ""],
        rows(&state, &functions),
    );
    Ok(0)
}

/// One row per version of each function, newest first, the current one marked.
fn rows(state: &DeployState, functions: &[&String]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for function in functions {
        let mut versions: Vec<_> = state.versions_of(function).collect();
        versions.reverse();
        for v in versions {
            let when = wasmgear_proto::units::utc_text(v.deployed_ms);
            rows.push(vec![
                function.to_string(),
                v.version.clone(),
                format!(
                    "{when} ({})",
                    wasmgear_proto::units::in_or_ago(v.deployed_ms)
                ),
                indicatif::HumanBytes(v.size).to_string(),
                signer(v).unwrap_or_else(|| "-".into()),
                if state.current.get(*function) == Some(&v.version) {
                    "current".into()
                } else {
                    String::new()
                },
            ]);
        }
    }
    rows
}

/// The key a version's signature names, if it is signed (whether it verifies is each
/// trusting worker's check).
fn signer(version: &wasmgear_proto::deploy::DeployedVersion) -> Option<String> {
    let line = version.signature.as_deref()?;
    Some(match wasmgear_proto::signing::parse_signature(line) {
        Ok((key, _)) => key.to_string(),
        Err(_) => "(unreadable signature)".into(),
    })
}
