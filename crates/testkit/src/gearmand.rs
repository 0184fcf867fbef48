//! A real `gearmand` (Debian's gearman-job-server) of the test's own on a free port, and the
//! `gearman` / `gearadmin` command-line tools pointed at it.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::process::ProcessGroup;
use crate::wait::eventually_sync;

/// A `gearmand` on a free loopback port, in a process group of its own that is killed on
/// drop; its log is printed if the test fails.
pub struct Gearmand {
    child: ProcessGroup,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gearmand {
    /// Starts one on a free port and waits until it accepts connections.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = crate::ports::free_port();
        let log = dir.path().join("gearmand.log");
        let child = spawn(port, &log);
        let gearmand = Gearmand {
            child,
            port,
            log,
            _dir: dir,
        };
        gearmand.wait_ready();
        gearmand
    }

    /// Its address, `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The `--source` spec of a worker of it.
    pub fn spec(&self) -> String {
        format!("gearman://{}", self.address())
    }

    /// Stops it and starts it again on the same port (its queue is in memory: jobs waiting
    /// are gone).
    pub fn restart(&mut self) {
        self.child.kill();
        self.child = spawn(self.port, &self.log);
        self.wait_ready();
    }

    /// Waits until it accepts connections (its log is printed if it never does).
    fn wait_ready(&self) {
        let what = format!("gearmand to listen on {}", self.port);
        eventually_sync(Duration::from_secs(20), &what, || {
            std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
    }

    /// `gearman -h 127.0.0.1 -p PORT ARGS...`, the client tool.
    pub fn client(&self, args: &[&str]) -> Output {
        self.tool("gearman", args)
    }

    /// `gearadmin -h 127.0.0.1 -p PORT ARGS...`.
    pub fn admin(&self, args: &[&str]) -> String {
        let out = self.tool("gearadmin", args);
        assert!(out.status.success(), "gearadmin {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn tool(&self, tool: &str, args: &[&str]) -> Output {
        Command::new(tool)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e} (scripts/setup installs gearman-tools)"))
    }
}

fn spawn(port: u16, log: &std::path::Path) -> ProcessGroup {
    // Debian puts it in /usr/sbin, which a user's PATH may lack.
    let program = match std::path::Path::new("/usr/sbin/gearmand").exists() {
        true => "/usr/sbin/gearmand",
        false => "gearmand",
    };
    ProcessGroup::spawn(
        Command::new(program)
            .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
            .arg(format!("--log-file={}", log.display()))
            .args(["--verbose", "INFO"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .expect("start gearmand (scripts/setup installs gearman-job-server)")
}

impl Drop for Gearmand {
    fn drop(&mut self) {
        self.child.kill();
        if std::thread::panicking() {
            eprintln!(
                "--- gearmand log (port {}) ---\n{}",
                self.port,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}
