//! `wasmgear keys`: the encryption key file of encrypted job data
//! ([`wasmgear_proto::crypto`]).

use std::io::Write;
use std::path::PathBuf;

use wasmgear_proto::crypto::KeyRing;

use super::usage;

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
}

#[derive(Debug, clap::Args)]
struct NewArgs {
    /// The key file.
    file: PathBuf,

    /// The new key's id (1 to 32 of `[A-Za-z0-9_.-]`), stored with each envelope it seals.
    id: String,
}

pub fn run(args: KeysArgs) -> anyhow::Result<i32> {
    let KeysCommand::New(args) = args.command;
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
