//! `wasmgear plugins`: check a plugin directory offline and show what it would serve.

use std::path::PathBuf;

use wasmgear_runtime::{Runtime, RuntimeConfig};
use wasmgear_worker::plugins::PluginRegistry;

/// Options of `wasmgear plugins`.
#[derive(Debug, clap::Args)]
pub struct PluginsArgs {
    /// The plugin directory to check.
    #[arg(env = "WASMGEAR_PLUGINS", default_value = "plugins")]
    dir: PathBuf,

    /// Check with fuel metering on (as `wasmgear worker --fuel`).
    #[arg(long)]
    fuel: bool,

    /// Check as a worker started with these --trust keys would: a plugin not signed by one
    /// of them is a problem.
    #[command(flatten)]
    trust: super::signing::TrustArgs,

    /// Print JSON: {"plugins": [...], "problems": [...]}.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: PluginsArgs) -> anyhow::Result<i32> {
    let config = RuntimeConfig {
        max_instances: 1,
        fuel: args.fuel,
        ..RuntimeConfig::default()
    };
    let runtime =
        Runtime::new(config).map_err(|e| anyhow::anyhow!("cannot start the runtime: {e:#}"))?;
    let registry = PluginRegistry::trusting(args.trust.policy()?);
    let report = registry.sync_dir(&runtime, &args.dir)?;
    let code = if report.problems.is_empty() { 0 } else { 1 };
    if args.json {
        let plugins: Vec<serde_json::Value> = registry
            .plugins()
            .iter()
            .map(|plugin| {
                let caps = &plugin.manifest().capabilities;
                serde_json::json!({
                    "file": plugin.source(),
                    "version": plugin.version(),
                    "size": plugin.size(),
                    "functions": plugin.functions().iter().map(|f| f.as_str()).collect::<Vec<_>>(),
                    "limits": {
                        "memory_bytes": plugin.limits().memory_bytes,
                        "output_bytes": plugin.limits().output_bytes,
                        "log_lines": plugin.limits().log_lines,
                        "checkpoint_bytes": plugin.limits().checkpoint_bytes,
                        "max_timeout_ms": plugin.max_timeout().map(|t| t.as_millis() as u64),
                        "fuel": plugin.fuel(),
                    },
                    "concurrency": plugin.manifest().concurrency,
                    "grants": {
                        "env": caps.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                        "dirs": caps.dirs.iter().map(|(h, g)| serde_json::json!({"host": h, "guest": g})).collect::<Vec<_>>(),
                        "config": caps.config.keys().collect::<Vec<_>>(),
                        "http": &caps.http_allow,
                    },
                })
            })
            .collect();
        let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        super::output::print_json(
            &serde_json::json!({ "plugins": plugins, "problems": problems }),
        )?;
        return Ok(code);
    }
    for plugin in registry.plugins() {
        let limits = plugin.limits();
        let functions: Vec<String> = plugin.functions().iter().map(|f| f.to_string()).collect();
        println!(
            "{}  version {}  {} bytes",
            plugin.source().display(),
            plugin.version(),
            plugin.size()
        );
        println!("  serves      {}", functions.join(", "));
        println!(
            "  limits      memory {} B, output {} B, {} log lines, checkpoint {} B{}{}",
            limits.memory_bytes,
            limits.output_bytes,
            limits.log_lines,
            limits.checkpoint_bytes,
            plugin
                .max_timeout()
                .map(|t| format!(", timeout at most {t:?}"))
                .unwrap_or_default(),
            plugin
                .fuel()
                .map(|f| format!(", fuel {f}"))
                .unwrap_or_default(),
        );
        let manifest = plugin.manifest();
        if let Some(concurrency) = manifest.concurrency {
            println!("  concurrency {concurrency}");
        }
        let caps = &manifest.capabilities;
        let env: Vec<&str> = caps.env.iter().map(|(k, _)| k.as_str()).collect();
        let dirs: Vec<String> = caps
            .dirs
            .iter()
            .map(|(h, g)| format!("{} -> {g} (read-only)", h.display()))
            .collect();
        let config: Vec<&str> = caps.config.keys().map(String::as_str).collect();
        println!(
            "  grants      env [{}], dirs [{}], config [{}], http [{}]",
            env.join(", "),
            dirs.join(", "),
            config.join(", "),
            caps.http_allow.join(", ")
        );
    }
    for problem in &report.problems {
        println!("error: {problem}");
    }
    Ok(code)
}
