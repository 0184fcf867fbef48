//! `wasmgear serve`: the HTTP API, the dashboard, metrics and health checks
//! ([`wasmgear_server`]), with their URLs printed at the start.

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;
use wasmgear_server::Auth;
use wasmgear_server::tokens::{self, Role, TokenEntry, Tokens};

use super::{RedisArgs, usage};

/// Options of `wasmgear serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// The address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// A file holding the bearer token callers must send (`Authorization: Bearer TOKEN`),
    /// which may do everything; or set WASMGEAR_API_TOKEN.
    #[arg(long, conflicts_with = "insecure_no_auth")]
    token_file: Option<PathBuf>,

    /// A file of scoped tokens, each with a name, a role (read, enqueue, operate, admin)
    /// and optionally the functions it may touch, stored as SHA-256 hashes (`wasmgear token
    /// add FILE NAME --role ROLE` writes it); with --token-file too, that token may do all.
    #[arg(
        long,
        env = "WASMGEAR_API_TOKENS_FILE",
        value_name = "FILE",
        conflicts_with = "insecure_no_auth"
    )]
    tokens_file: Option<PathBuf>,

    /// Serve without authentication: anyone who can reach the address may enqueue and
    /// cancel. Only on a loopback address.
    #[arg(long)]
    insecure_no_auth: bool,
}

/// The environment variable holding the bearer token when --token-file is not given.
const TOKEN_VAR: &str = "WASMGEAR_API_TOKEN";

/// Who may call, from the flags and the environment; refuses to serve an open API off
/// loopback.
fn auth(args: &ServeArgs) -> anyhow::Result<Auth> {
    let token = match &args.token_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            usage(format!(
                "cannot read the token file {}: {e}",
                path.display()
            ))
        })?),
        None => std::env::var(TOKEN_VAR).ok(),
    };
    match token.map(|t| t.trim().to_string()) {
        Some(token) if args.insecure_no_auth => Err(usage(format!(
            "--insecure-no-auth is given, and so is a token ({TOKEN_VAR}, {} bytes): choose one",
            token.len()
        ))),
        Some(token) if token.is_empty() => Err(usage(
            "the bearer token is empty: put a long random string in the token file or \
             WASMGEAR_API_TOKEN",
        )),
        Some(token) if args.tokens_file.is_some() => {
            let mut tokens = scoped_tokens(args)?;
            tokens
                .add(&TokenEntry {
                    name: "api-token".into(),
                    role: Role::Admin,
                    functions: None,
                    sha256: tokens::token_hash(&token),
                })
                .map_err(|e| usage(format!("the token of --token-file or {TOKEN_VAR}: {e}")))?;
            Ok(Auth::Tokens(tokens))
        }
        Some(token) => Ok(Auth::Token(token)),
        None if args.tokens_file.is_some() => Ok(Auth::Tokens(scoped_tokens(args)?)),
        None if !args.insecure_no_auth => Err(usage(format!(
            "no token: pass --token-file FILE or set {TOKEN_VAR}, or --tokens-file FILE (callers send it as \
             `Authorization: Bearer TOKEN`), or --insecure-no-auth on a loopback address"
        ))),
        None if !args.listen.ip().is_loopback() => Err(usage(format!(
            "--insecure-no-auth serves only on a loopback address, not {}: use a token",
            args.listen
        ))),
        None => Ok(Auth::None),
    }
}

/// The tokens of --tokens-file; refuses a file without one.
fn scoped_tokens(args: &ServeArgs) -> anyhow::Result<Tokens> {
    let Some(path) = &args.tokens_file else {
        return Ok(Tokens::default());
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cannot read the tokens file {}: {e}",
            path.display()
        ))
    })?;
    let tokens = Tokens::parse(path, &text).map_err(usage)?;
    if tokens.is_empty() {
        return Err(usage(format!(
            "{} has no token: add one with `wasmgear token add {} NAME --role ROLE`",
            path.display(),
            path.display()
        )));
    }
    Ok(tokens)
}

pub async fn run(args: ServeArgs) -> anyhow::Result<i32> {
    let auth = auth(&args)?;
    let client = args.redis.writer(&args.replicas).await?;
    if let Some(warning) = client.eviction_warning().await {
        tracing::warn!("{warning}");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let address = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        super::worker::shutdown_signal().await;
        stop.cancel();
    });
    let token = match &auth {
        Auth::Token(_) => "bearer token required".to_string(),
        Auth::Tokens(tokens) => format!("one of {} scoped tokens required", tokens.len()),
        Auth::None => "no authentication".to_string(),
    };
    println!(
        "serving the HTTP API on http://{address} ({token}; the routes: http://{address}{})",
        wasmgear_server::OPENAPI_PATH
    );
    println!("  dashboard      http://{address}/ui");
    println!("  metrics        http://{address}/metrics (Prometheus text format; {token})");
    println!("  health checks  http://{address}/healthz http://{address}/readyz (no token)");
    wasmgear_server::serve(
        listener,
        client,
        auth,
        shutdown,
        wasmgear_client::options::MAX_INPUT_BYTES,
    )
    .await?;
    println!("stopped");
    Ok(0)
}
