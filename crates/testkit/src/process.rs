//! Processes a test starts, each the leader of a process group of its own, killed whole
//! when its guard is dropped: whatever it started goes with it (Chromium under
//! ChromeDriver, the embedded Redis under a worker), also when the test fails. Killing only
//! the leader would leave its children running, adopted by init.
//!
//! What is left of a group is read from `/proc`, so that a test can prove nothing is.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long a drop waits for a killed group's processes to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// A child process leading a process group of its own; the whole group is killed on drop.
pub struct ProcessGroup {
    child: Child,
}

impl ProcessGroup {
    /// Spawns `command` in a new process group that it leads.
    pub fn spawn(command: &mut Command) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let child = command.process_group(0).spawn()?;
        Ok(ProcessGroup { child })
    }

    /// The leader's process id, which is also the group's id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The leader, to wait for it or take its pipes.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Kills every process of the group (SIGKILL), reaps the leader, and waits (at most
    /// [`GONE_WITHIN`]) until no process of the group is left. Returns whether none is.
    pub fn kill(&mut self) -> bool {
        let group = self.id();
        // The group outlives its leader while any member lives: signal it even if the
        // leader has exited. (While a member lives, the kernel gives its id to no other
        // process or group.)
        if !members(group).is_empty() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = Instant::now() + GONE_WITHIN;
        loop {
            if members(group).is_empty() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let group = self.id();
        if !self.kill() {
            eprintln!(
                "process group {group} still has processes {:?} {GONE_WITHIN:?} after SIGKILL",
                members(group)
            );
        }
    }
}

/// The live processes (zombies excluded) of process group `group`, read from `/proc`.
pub fn members(group: u32) -> Vec<u32> {
    live_processes()
        .filter(|(_, stat)| stat_field(stat, 5) == Some(group.to_string().as_str()))
        .map(|(pid, _)| pid)
        .collect()
}

/// The live processes (zombies excluded) whose command line has an argument containing
/// `text`, read from `/proc`.
pub fn with_argument(text: &str) -> Vec<u32> {
    live_processes()
        .filter(|(pid, _)| {
            let cmdline = std::fs::read(Path::new("/proc").join(pid.to_string()).join("cmdline"))
                .unwrap_or_default();
            cmdline
                .split(|b| *b == 0)
                .any(|arg| String::from_utf8_lossy(arg).contains(text))
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// Every process that is not a zombie, with the text of its `/proc/PID/stat`.
fn live_processes() -> impl Iterator<Item = (u32, String)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            (stat_field(&stat, 3) != Some("Z")).then_some((pid, stat))
        })
}

/// Field `n` (1-based, as `man proc` counts them: 3 is the state, 5 the process group) of
/// a `/proc/PID/stat` line, for `n` of 3 or more. The command name before them (field 2)
/// may hold spaces and parentheses: they are counted from its closing parenthesis, the
/// last one in the line.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let close = stat.rfind(')')?;
    stat[close + 1..].split_whitespace().nth(n.checked_sub(3)?)
}
