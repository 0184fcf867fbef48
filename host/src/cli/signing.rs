//! Signed plugins: `wasmgear keygen` (an ed25519 key pair), `wasmgear sign` (a directory
//! plugin's `NAME.wasm.sig`), and reading the keys `deploy --sign` and `worker --trust` take.

use std::io::Write;
use std::path::{Path, PathBuf};

use wasmgear_proto::signing::{PublicKey, SigningKey, Trust, signature_path};
use wasmgear_runtime::manifest;

use super::usage;

/// The keys a worker (or `wasmgear plugins`) trusts: `--trust`, repeatable.
#[derive(Debug, Clone, clap::Args)]
pub struct TrustArgs {
    /// Run only plugins signed by this key (a .pub file written by `wasmgear keygen`, or
    /// the key itself); repeatable (the variable takes keys separated by commas). A plugin
    /// whose signature (NAME.wasm.sig beside it, or stored with a deployed version) is
    /// missing or invalid is refused, with the reason in `wasmgear workers`, and the
    /// version before it keeps serving.
    #[arg(
        long,
        value_name = "PUBKEY",
        env = "WASMGEAR_TRUST",
        value_delimiter = ','
    )]
    trust: Vec<String>,
}

impl TrustArgs {
    /// The trust policy: every plugin without keys, else only plugins signed by one.
    pub fn policy(&self) -> anyhow::Result<Trust> {
        let keys = (self.trust.iter())
            .map(|value| read_trusted_key(value))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Trust::keys(keys))
    }
}

/// Options of `wasmgear keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Where to write the pair: PATH.key (the secret key, readable by its owner only) and
    /// PATH.pub (the public key, for `worker --trust`). Existing files are not overwritten.
    path: PathBuf,
}

/// Options of `wasmgear sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The plugin to sign (`NAME.wasm`): its signature, over its name, component and
    /// manifest (`NAME.toml` beside it, if any), is written to NAME.wasm.sig.
    plugin: PathBuf,

    /// The secret key to sign with (a .key file written by `wasmgear keygen`).
    #[arg(long, env = "WASMGEAR_SIGNING_KEY")]
    key: PathBuf,
}

pub fn keygen(args: KeygenArgs) -> anyhow::Result<i32> {
    let with = |extension: &str| {
        let mut name = args.path.as_os_str().to_owned();
        name.push(extension);
        PathBuf::from(name)
    };
    let (secret_path, public_path) = (with(".key"), with(".pub"));
    for path in [&secret_path, &public_path] {
        if path.exists() {
            return Err(usage(format!(
                "{} exists: keygen never overwrites a key (give another PATH, or remove it)",
                path.display()
            )));
        }
    }
    let key = SigningKey::generate().map_err(|e| usage(e.to_string()))?;
    write_new(&secret_path, &key.to_line(), 0o600)?;
    write_new(&public_path, &key.public().to_line(), 0o644)?;
    println!(
        "secret key: {} (sign with `wasmgear sign PLUGIN.wasm --key {}` or `wasmgear deploy PLUGIN.wasm --sign {}`)",
        secret_path.display(),
        secret_path.display(),
        secret_path.display()
    );
    println!(
        "public key: {} (trust it with `wasmgear worker --trust {}`)",
        public_path.display(),
        public_path.display()
    );
    println!("{}", key.public());
    Ok(0)
}

pub fn sign(args: SignArgs) -> anyhow::Result<i32> {
    let key = read_signing_key(&args.key)?;
    let component = std::fs::read(&args.plugin)
        .map_err(|e| usage(format!("cannot read plugin {}: {e}", args.plugin.display())))?;
    let manifest_text = manifest::read_for(&args.plugin).map_err(|e| usage(e.to_string()))?;
    // A manifest that does not parse would be refused by every worker anyway.
    manifest::parse_for(&args.plugin, manifest_text.as_deref())
        .map_err(|e| usage(e.to_string()))?;
    let name = plugin_name(&args.plugin)?;
    let signature = key.sign(name, &component, manifest_text.as_deref());
    let path = signature_path(&args.plugin);
    std::fs::write(&path, format!("{signature}\n"))
        .map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
    println!(
        "{}: signed by {} (with {}); signature in {}",
        args.plugin.display(),
        key.public(),
        if manifest_text.is_some() {
            "its manifest"
        } else {
            "no manifest"
        },
        path.display()
    );
    Ok(0)
}

/// The plugin's name as signed: its file's stem.
pub fn plugin_name(path: &Path) -> anyhow::Result<&str> {
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| usage(format!("{} has no usable file name", path.display())))
}

/// Reads a secret key file (`wasmgear keygen`'s PATH.key).
pub fn read_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cannot read the signing key {}: {e}",
            path.display()
        ))
    })?;
    SigningKey::parse(&text).map_err(|e| usage(format!("{}: {e}", path.display())))
}

/// Reads a key to trust: a public key file's path, or the key itself (base64).
fn read_trusted_key(value: &str) -> anyhow::Result<PublicKey> {
    let path = Path::new(value);
    let text = if path.is_file() {
        std::fs::read_to_string(path)
            .map_err(|e| usage(format!("--trust {value}: cannot read it: {e}")))?
    } else {
        value.to_string()
    };
    PublicKey::parse(&text).map_err(|e| {
        usage(format!(
            "--trust {value}: {e} (give a .pub file written by `wasmgear keygen`, or its key)"
        ))
    })
}

fn write_new(path: &Path, line: &str, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
    writeln!(file, "{line}")?;
    Ok(())
}
