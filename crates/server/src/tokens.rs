//! Scoped API tokens: each has a name, a role and optionally the functions it may touch,
//! read from a file that stores only their SHA-256 (`wasmgear token add` writes it):
//!
//! ```toml
//! [[token]]
//! name = "billing"
//! role = "enqueue"                 # read, enqueue, operate or admin
//! functions = ["invoice"]          # optional: only these functions' jobs and routes
//! sha256 = "…64 hex digits…"
//! ```
//!
//! A route needs a role ([`crate::ROUTE_ROLES`]): `read` reads; `enqueue` reads and submits
//! jobs; `operate` reads and cancels, retries, pauses, reprioritises; `admin` does all.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wasmgear_client::FunctionName;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read jobs, queues, workers, events and metrics.
    Read,
    /// Read, and submit jobs (enqueue, bulk, flows, batches).
    Enqueue,
    /// Read, and act on jobs and functions: cancel, retry, pause, priority, group settings.
    Operate,
    /// Everything.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 4] = [Role::Read, Role::Enqueue, Role::Operate, Role::Admin];

    /// Whether a caller with this role may use a route that needs `needed`.
    pub fn allows(self, needed: Role) -> bool {
        self == Role::Admin || needed == Role::Read || self == needed
    }

    /// Its name, as the token file and the OpenAPI document spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Enqueue => "enqueue",
            Role::Operate => "operate",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("no role {s:?}: the roles are read, enqueue, operate and admin"))
    }
}

/// Who made a request: a token's name, role and the functions it may touch (`None`: all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name (`api-token` for the single token of `--token-file`, `anonymous`
    /// on a server without authentication).
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The only functions it may touch, if it is limited to some.
    pub functions: Option<BTreeSet<FunctionName>>,
}

impl Caller {
    /// A caller who may do everything.
    pub fn admin(name: &str) -> Self {
        Caller {
            name: name.to_string(),
            role: Role::Admin,
            functions: None,
        }
    }

    /// Whether it may touch `function`.
    pub fn may_touch(&self, function: &FunctionName) -> bool {
        self.functions.as_ref().is_none_or(|f| f.contains(function))
    }

    /// The functions it is limited to, as text.
    pub fn functions_text(&self) -> String {
        (self.functions.iter().flatten())
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One token of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Its name: what the audit log and refusals call it.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The only functions it may touch; absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<Vec<String>>,
    /// The SHA-256 of the token, in hex.
    pub sha256: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    #[serde(default)]
    token: Vec<TokenEntry>,
}

/// The tokens a server accepts.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(Caller, [u8; 32])>,
}

impl Tokens {
    /// Reads a token file's text (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Self, String> {
        let file: TokenFile = toml::from_str(text)
            .map_err(|e| format!("{}: {}", path.display(), e.to_string().trim()))?;
        let mut tokens = Tokens::default();
        for entry in file.token {
            tokens
                .add(&entry)
                .map_err(|e| format!("{}: token {:?}: {e}", path.display(), entry.name))?;
        }
        Ok(tokens)
    }

    /// Accepts the token of `entry`.
    pub fn add(&mut self, entry: &TokenEntry) -> Result<(), String> {
        if entry.name.trim().is_empty() {
            return Err("a token needs a name".into());
        }
        if self.entries.iter().any(|(c, _)| c.name == entry.name) {
            return Err("two tokens have this name: names must differ".into());
        }
        let hash = parse_hash(&entry.sha256)?;
        let functions = match &entry.functions {
            None => None,
            Some(list) if list.is_empty() => {
                return Err("`functions` is empty: leave it out for every function".into());
            }
            Some(list) => Some(
                list.iter()
                    .map(|f| FunctionName::new(f).map_err(|e| e.to_string()))
                    .collect::<Result<BTreeSet<_>, _>>()?,
            ),
        };
        self.entries.push((
            Caller {
                name: entry.name.clone(),
                role: entry.role,
                functions,
            },
            hash,
        ));
        Ok(())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The caller whose token `given` is, if any (compared in constant time, by hash).
    pub fn identify(&self, given: &str) -> Option<&Caller> {
        use subtle::ConstantTimeEq;
        let hash: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        let mut found = None;
        for (caller, expected) in &self.entries {
            if bool::from(hash.ct_eq(expected)) {
                found = Some(caller);
            }
        }
        found
    }
}

/// A new random token (64 hex digits) and its SHA-256, as the file stores it.
pub fn new_token() -> (String, String) {
    let token = wasmgear_proto::sync::random_hex(32);
    let hash = token_hash(&token);
    (token, hash)
}

/// The SHA-256 of a token, in hex.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.trim().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The TOML of one token's entry, to append to a token file.
pub fn entry_toml(entry: &TokenEntry) -> String {
    let file = TokenFile {
        token: vec![entry.clone()],
    };
    toml::to_string(&file).unwrap_or_default()
}

fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    let bad = || format!("sha256 must be 64 hex digits (the token's SHA-256), not {text:?}");
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &[TokenEntry]) -> String {
        entries
            .iter()
            .map(entry_toml)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn tokens_are_found_by_hash_with_their_role_and_functions() {
        let (reader, reader_hash) = new_token();
        let (billing, billing_hash) = new_token();
        let text = file(&[
            TokenEntry {
                name: "dashboard".into(),
                role: Role::Read,
                functions: None,
                sha256: reader_hash,
            },
            TokenEntry {
                name: "billing".into(),
                role: Role::Enqueue,
                functions: Some(vec!["invoice".into()]),
                sha256: billing_hash,
            },
        ]);
        let tokens = Tokens::parse(Path::new("t.toml"), &text).unwrap();
        assert_eq!(tokens.len(), 2);
        let caller = tokens.identify(&reader).unwrap();
        assert_eq!(
            (caller.name.as_str(), caller.role),
            ("dashboard", Role::Read)
        );
        let caller = tokens.identify(&billing).unwrap();
        assert!(caller.may_touch(&FunctionName::new("invoice").unwrap()));
        assert!(!caller.may_touch(&FunctionName::new("payroll").unwrap()));
        assert!(tokens.identify("guess").is_none());
        assert!(!text.contains(&reader), "the file stores hashes only");
    }

    #[test]
    fn roles_allow_reading_and_their_own_kind_of_change() {
        use Role::*;
        for role in Role::ALL {
            assert!(role.allows(Read));
            assert!(Admin.allows(role));
        }
        assert!(!Read.allows(Enqueue) && !Read.allows(Operate) && !Read.allows(Admin));
        assert!(!Enqueue.allows(Operate) && !Operate.allows(Enqueue));
        assert!(!Operate.allows(Admin) && !Enqueue.allows(Admin));
        assert_eq!("operate".parse::<Role>(), Ok(Operate));
        assert!(
            "root"
                .parse::<Role>()
                .unwrap_err()
                .contains("read, enqueue")
        );
    }

    #[test]
    fn bad_files_are_refused_naming_the_token() {
        let path = Path::new("t.toml");
        let hash = token_hash("x");
        for (text, says) in [
            (
                "[[token]]\nname = \"a\"\nrole = \"root\"\nsha256 = \"00\"\n",
                "root",
            ),
            (
                &format!(
                    "[[token]]\nname = \"a\"\nrole = \"read\"\nsha256 = \"{}\"\n",
                    "ab"
                ),
                "64 hex",
            ),
            (
                &format!(
                    "[[token]]\nname = \"a\"\nrole = \"read\"\nsha256 = \"{hash}\"\n[[token]]\nname = \"a\"\nrole = \"admin\"\nsha256 = \"{hash}\"\n"
                ),
                "names must differ",
            ),
            (
                &format!(
                    "[[token]]\nname = \"a\"\nrole = \"read\"\nfunctions = []\nsha256 = \"{hash}\"\n"
                ),
                "leave it out",
            ),
            (
                &format!(
                    "[[token]]\nname = \"a\"\nrole = \"read\"\nfunctions = [\"no spaces\"]\nsha256 = \"{hash}\"\n"
                ),
                "a",
            ),
            (
                "[[token]]\nname = \"a\"\nrole = \"read\"\nsecret = \"x\"\n",
                "secret",
            ),
        ] {
            let error = Tokens::parse(path, text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
