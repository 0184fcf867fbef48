//! A real `redis-server` whose wall clock a test moves forward and back (the shim
//! `redis_clock.c`, compiled once per test run and preloaded): for the model test, where the
//! queue's time (Redis' `TIME`) moving is an operation like any other.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The shim, compiled: its path, or why it could not be built.
fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("wasmgear-redis-clock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the clock shim");
        let source = dir.join("redis_clock.c");
        std::fs::write(&source, include_str!("redis_clock.c")).expect("write the clock shim");
        let library = dir.join("redis_clock.so");
        let status = Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(&source)
            .status()
            .expect("run gcc (scripts/setup installs it) to build the clock shim");
        assert!(status.success(), "gcc could not build {}", source.display());
        library
    })
}

/// A `redis-server` on a free port, its clock `offset_ms` away from the real one; killed
/// when dropped, its log printed if the test failed.
pub struct ClockedRedis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    offset_ms: i64,
}

impl ClockedRedis {
    /// Starts it with its clock where the real one is, and waits until it answers.
    pub fn start() -> Self {
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("temp dir");
            let clock = dir.path().join("clock");
            std::fs::write(&clock, "0").expect("write the clock file");
            let port = crate::ports::free_port();
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                ])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(dir.path().join("redis.log"))
                .env("LD_PRELOAD", shim())
                .env("WASMGEAR_CLOCK_FILE", &clock)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut server = ClockedRedis {
                child,
                port,
                dir,
                offset_ms: 0,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return server;
                }
                if let Ok(Some(_)) = server.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server with the clock shim did not start");
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// How far its clock is from the real one, ms.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms
    }

    /// Moves its clock to `offset_ms` from the real one (the next call reads it).
    pub fn set_offset(&mut self, offset_ms: i64) {
        self.offset_ms = offset_ms;
        std::fs::write(self.dir.path().join("clock"), offset_ms.to_string())
            .expect("write the clock file");
    }
}

impl Drop for ClockedRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log =
                std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(4000)..];
            eprintln!("--- redis-server log (port {}) ---\n{tail}", self.port);
        }
    }
}
