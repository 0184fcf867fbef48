//! `wasmgear keys`: the encryption key file of encrypted job data
//! ([`wasmgear_proto::crypto`]).

use std::io::Write;
use std::path::PathBuf;

use wasmgear_proto::crypto::KeyRing;

use super::{RedisArgs, usage};

/// Options of `wasmgear keys`.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KeysCommand {
    /// Make a new random key and put it first in FILE (created, readable by its owner only,
    /// if need be): it seals new data from now on; the keys after it still open what they
    /// sealed.
    New(NewArgs),
    /// Seal again with the key file's first key everything kept that an older key sealed
    /// (inputs, outputs, checkpoints, logs, error messages, schedules' inputs), a batch at a
    /// time; a value that changes meanwhile is left for the next run. Run it again until it
    /// says nothing is left (it keeps no state: an interrupted run goes on where it stopped);
    /// then the older keys may leave the key file. Exits 1 while something is left.
    Rotate(RotateArgs),
}

#[derive(Debug, clap::Args)]
struct RotateArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// How many fields of a hash are read (and written) at a time.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
}

#[derive(Debug, clap::Args)]
struct NewArgs {
    /// The key file.
    file: PathBuf,

    /// The new key's id (1 to 32 of `[A-Za-z0-9_.-]`), stored with each envelope it seals.
    id: String,
}

pub async fn run(args: KeysArgs) -> anyhow::Result<i32> {
    match args.command {
        KeysCommand::New(args) => new(args),
        KeysCommand::Rotate(args) => rotate(args).await,
    }
}

async fn rotate(args: RotateArgs) -> anyhow::Result<i32> {
    let client = args.redis.client().await?;
    if client.keys().is_none() {
        return Err(usage(
            "keys rotate needs the key file, its new key first: give --encryption-key-file \
             or WASMGEAR_ENCRYPTION_KEY_FILE",
        ));
    }
    let rotation = client.rotate_keys(args.batch as usize).await?;
    for (holder, n) in &rotation.resealed {
        println!("{holder}: {n} sealed again with key {}", rotation.key);
    }
    let outcome = format!(
        "{} sealed again with key {}, {} changed meanwhile, {} do not open",
        rotation.total(),
        rotation.key,
        rotation.changed,
        rotation.unopened
    );
    super::access::record(&client, "keys rotate", "*", &outcome).await;
    for problem in &rotation.problems {
        eprintln!("does not open: {problem}");
    }
    if rotation.changed > 0 {
        eprintln!(
            "{} values changed while they were read (their jobs ran on): run keys rotate again",
            rotation.changed
        );
    }
    if rotation.unopened > 0 {
        eprintln!(
            "{} values do not open with this key file: add the keys they name, or leave them \
             (they stay readable only with those keys)",
            rotation.unopened
        );
    }
    if rotation.finished() {
        println!(
            "{} values sealed again; nothing sealed with an older key is left: older keys may \
             leave the key file",
            rotation.total()
        );
        Ok(0)
    } else {
        Ok(1)
    }
}

fn new(args: NewArgs) -> anyhow::Result<i32> {
    let name = args.file.display().to_string();
    let existing = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(usage(format!("cannot read {name}: {e}"))),
    };
    let line = KeyRing::new_key_line(&args.id).map_err(|e| usage(e.to_string()))?;
    let text = format!("{line}\n{existing}");
    // The file with the new key first must read (and its id must be new) before it is
    // written.
    KeyRing::parse(&name, &text).map_err(|e| usage(e.to_string()))?;
    let temp = args.file.with_extension("new");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| usage(format!("cannot write {}: {e}", temp.display())))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&temp, &args.file).map_err(|e| usage(format!("cannot replace {name}: {e}")))?;
    println!(
        "key {} is first in {name}: it seals new data from now on{}",
        args.id,
        if existing.trim().is_empty() {
            String::new()
        } else {
            "; the keys after it still open what they sealed".to_string()
        }
    );
    Ok(0)
}
