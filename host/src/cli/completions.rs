//! `wasmgear completions`: shell completion scripts.

use clap::CommandFactory;

/// Options of `wasmgear completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell. Bash: `wasmgear completions bash >
    /// /etc/bash_completion.d/wasmgear`; zsh: into a directory of your `$fpath` as `_wasmgear`;
    /// fish: `~/.config/fish/completions/wasmgear.fish`.
    shell: clap_complete::Shell,
}

pub fn run(args: CompletionsArgs) -> anyhow::Result<i32> {
    let mut command = super::Cli::command();
    clap_complete::generate(args.shell, &mut command, "wasmgear", &mut std::io::stdout());
    Ok(0)
}
