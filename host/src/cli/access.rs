//! Who may do what: `wasmgear token add` (a scoped token for `serve --tokens-file`),
//! `wasmgear audit` (the audit log), and the entry each operate command of the CLI writes
//! to it ([`record`]).

use std::io::Write;
use std::path::PathBuf;

use wasmgear_client::Client;
use wasmgear_client::audit::{AuditEntry, MAX_AUDIT_READ};
use wasmgear_server::tokens::{self, Role, TokenEntry, Tokens};

use super::output::{print_json, print_table};
use super::{RedisArgs, usage};

/// Options of `wasmgear token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TokenCommand {
    /// Make a new random token, append its name, role, functions and SHA-256 to FILE
    /// (created if need be; the token itself is not stored) and print the token once.
    Add(TokenAddArgs),
}

#[derive(Debug, clap::Args)]
struct TokenAddArgs {
    /// The tokens file (`serve --tokens-file`).
    file: PathBuf,

    /// The token's name: what refusals and the audit log call it.
    name: String,

    /// What it may do: read, enqueue (read + submit jobs), operate (read + cancel, retry,
    /// pause, priority, group settings) or admin (everything).
    #[arg(long)]
    role: Role,

    /// The only functions it may touch (comma-separated); default: every function.
    #[arg(long, value_delimiter = ',')]
    functions: Vec<String>,
}

pub fn token(args: TokenArgs) -> anyhow::Result<i32> {
    let TokenCommand::Add(args) = args.command;
    let existing = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(usage(format!("cannot read {}: {e}", args.file.display()))),
    };
    // Checked whole before a byte is written: the file with the new entry must read.
    let mut tokens = Tokens::parse(&args.file, &existing).map_err(usage)?;
    let (token, sha256) = tokens::new_token();
    let entry = TokenEntry {
        name: args.name.clone(),
        role: args.role,
        functions: (!args.functions.is_empty()).then(|| args.functions.clone()),
        sha256,
    };
    tokens
        .add(&entry)
        .map_err(|e| usage(format!("token {:?}: {e}", args.name)))?;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&args.file)
        .map_err(|e| usage(format!("cannot write {}: {e}", args.file.display())))?;
    let separator = if existing.is_empty() || existing.ends_with("\n\n") {
        ""
    } else if existing.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    write!(file, "{separator}{}", tokens::entry_toml(&entry))?;
    eprintln!(
        "token {:?} (role {}{}) added to {}; it is shown once, here:",
        args.name,
        args.role,
        if args.functions.is_empty() {
            String::new()
        } else {
            format!(", functions {}", args.functions.join(", "))
        },
        args.file.display()
    );
    println!("{token}");
    Ok(0)
}

/// Options of `wasmgear audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// How many entries, newest first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=MAX_AUDIT_READ as u64))]
    limit: u64,

    /// Entries written before this one (its id), for the next page.
    #[arg(long, value_name = "ID")]
    before: Option<String>,

    /// Print JSON: [{"id", "at_ms", "actor", "action", "target", "outcome"}].
    #[arg(long)]
    json: bool,
}

pub async fn audit(args: AuditArgs) -> anyhow::Result<i32> {
    let client = args.redis.client().await?;
    let entries = client
        .audit_log(args.limit as usize, args.before.as_deref())
        .await?;
    if args.json {
        print_json(&entries)?;
        return Ok(0);
    }
    if entries.is_empty() {
        println!("the audit log is empty");
        return Ok(0);
    }
    print_table(
        &["WHEN", "WHO", "ACTION", "TARGET", "OUTCOME", "ID"],
        entries
            .iter()
            .map(|e| {
                vec![
                    wasmgear_proto::units::utc_text(e.at_ms),
                    e.actor.clone(),
                    e.action.clone(),
                    e.target.clone(),
                    e.outcome.clone(),
                    e.id.clone(),
                ]
            })
            .collect(),
    );
    Ok(0)
}

/// Appends what an operate command did to the audit log, as `cli USER@HOST`; a failure to
/// write it is a warning (the action itself is done).
pub async fn record(client: &Client, action: &str, target: &str, outcome: &str) {
    let entry = AuditEntry::new(format!("cli {}", operator()), action, target, outcome);
    if let Err(error) = client.audit(&entry).await {
        tracing::warn!(%error, "cannot write the audit log entry for {action} {target}");
    }
}

/// The user and host running the CLI.
fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata("/proc/self")
                .map_or_else(|_| "unknown".into(), |m| format!("uid {}", m.uid()))
        });
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{user}@{host}")
}

/// Options of `wasmgear acl`.
#[derive(Debug, clap::Args)]
pub struct AclArgs {
    /// The kind of user: producer (enqueue and read), worker (a producer that also leases,
    /// reports and does upkeep) or operator (a producer that also cancels, retries,
    /// configures, deploys and changes schedules).
    role: wasmgear_client::acl::RedisRole,

    /// The user's name [default: wasmgear-ROLE].
    #[arg(long)]
    user: Option<String>,

    /// A file holding the user's password (else `>PASSWORD` is left for you to fill in).
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

/// Prints the `ACL SETUSER` command that makes a least-privilege Redis user of a role.
pub fn acl(args: AclArgs) -> anyhow::Result<i32> {
    let user = args
        .user
        .clone()
        .unwrap_or_else(|| format!("wasmgear-{}", args.role));
    if user.is_empty() || user.contains(char::is_whitespace) {
        return Err(usage(format!("--user {user:?}: a user name has no spaces")));
    }
    let password = match &args.password_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
            let text = text.trim().to_string();
            if text.is_empty() || text.contains(char::is_whitespace) {
                return Err(usage(format!(
                    "{}: the password must be one word, not empty",
                    path.display()
                )));
            }
            text
        }
        None => "PASSWORD".to_string(),
    };
    println!(
        "ACL SETUSER {user} reset on >{password} {}",
        args.role.rules().join(" ")
    );
    Ok(0)
}
