//! A private `redis-server` child, supervised: the embedded Redis `wasmgear worker` starts
//! when no Redis URL is given, and the servers the tests and benchmarks start
//! (`wasmgear-testkit`).
//!
//! It listens on 127.0.0.1 only, keeps its data (an append-only file, if asked for) in its
//! own directory, is restarted by [`RedisServer::ensure_running`] if it dies, and is shut
//! down when dropped. [`free_port`] picks a port for it, or for any other local server.
//!
//! This crate depends on no other wasmgear crate: the worker binary and the test harness
//! both use it, and neither needs the queue's protocol for it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use std::time::{Duration, Instant};
use wasmgear_proto::sync::Locked;

/// The `redis-server` program used, unless `WASMGEAR_REDIS_SERVER` names another.
pub const DEFAULT_REDIS_SERVER: &str = "redis-server";
/// How long a fresh server may take to answer PING.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    /// The program is not installed.
    #[error(
        "cannot run {program:?}: {source}; install Redis (Debian: apt-get install redis-server) or give a Redis URL with --redis / WASMGEAR_REDIS_URL"
    )]
    NotFound {
        /// The program tried.
        program: String,
        /// The spawn error.
        source: std::io::Error,
    },
    /// Its data directory could not be used.
    #[error("cannot use {dir:?} for Redis data: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// It started but did not answer in time, or exited.
    #[error("redis-server on port {port} did not come up: {reason}\n--- its log ---\n{log}")]
    NotReady {
        /// The port it was given.
        port: u16,
        /// What happened.
        reason: String,
        /// The end of its log file.
        log: String,
    },
}

/// A supervised `redis-server` child process.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    program: String,
    extra_args: Vec<String>,
    child: Mutex<Child>,
}

impl RedisServer {
    /// Starts a server on `port` (0: any free port) with its data in `dir`, and waits until
    /// it answers. `extra_args` go to `redis-server` as they are (e.g. `--appendonly yes`).
    pub fn start(dir: &Path, port: u16, extra_args: &[&str]) -> Result<Self, RedisServerError> {
        std::fs::create_dir_all(dir).map_err(|source| RedisServerError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let dir = dir.canonicalize().map_err(|source| RedisServerError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let program =
            std::env::var("WASMGEAR_REDIS_SERVER").unwrap_or_else(|_| DEFAULT_REDIS_SERVER.into());
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        // A free port can be taken by someone else before redis binds it: try a few.
        let mut last_error = None;
        for _ in 0..3 {
            let port = if port == 0 { free_port() } else { port };
            let ready_before = ready_lines(&dir);
            let child = spawn(&program, &dir, port, &extra_args)?;
            let server = RedisServer {
                port,
                dir: dir.clone(),
                program: program.clone(),
                extra_args: extra_args.clone(),
                child: Mutex::new(child),
            };
            match server.wait_ready(ready_before) {
                Ok(()) => return Ok(server),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.expect("at least one try"))
    }

    /// Its process id (of the current run: a restart changes it).
    pub fn pid(&self) -> u32 {
        self.child.locked().id()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL clients use to reach it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The directory holding its data and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last `max_bytes` of its log.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        let text = std::fs::read(self.dir.join(LOG_FILE)).unwrap_or_default();
        let start = text.len().saturating_sub(max_bytes);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }

    /// Restarts the server if it has exited. Returns whether it had to.
    pub fn ensure_running(&self) -> Result<bool, RedisServerError> {
        let mut child = self.child.locked();
        if matches!(child.try_wait(), Ok(None)) {
            return Ok(false);
        }
        let ready_before = ready_lines(&self.dir);
        *child = spawn(&self.program, &self.dir, self.port, &self.extra_args)?;
        drop(child);
        self.wait_ready(ready_before)?;
        Ok(true)
    }

    /// Waits until this server answers: its own log says it is ready (a line more than
    /// `ready_before`: the log is appended to across restarts) and the port answers. The
    /// log matters when the port was taken meanwhile: another server answering there must
    /// not pass for this one, which is about to exit for want of the port.
    fn wait_ready(&self, ready_before: usize) -> Result<(), RedisServerError> {
        let started = Instant::now();
        loop {
            if ready_lines(&self.dir) > ready_before && ping(self.port) {
                return Ok(());
            }
            let exited = {
                let mut child = self.child.locked();
                child.try_wait().ok().flatten()
            };
            let reason = match exited {
                Some(status) => format!("it exited with {status}"),
                None if started.elapsed() > STARTUP_TIMEOUT => {
                    format!("no answer to PING within {STARTUP_TIMEOUT:?}")
                }
                None => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            return Err(RedisServerError::NotReady {
                port: self.port,
                reason,
                log: self.log_tail(4000),
            });
        }
    }

    /// Kills the server at once (SIGKILL: no shutdown, no final save), as a crash would.
    /// [`RedisServer::ensure_running`] starts it again on the same port and data.
    pub fn kill(&self) {
        let mut child = self.child.locked();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Shuts the server down (saving its append-only file), then kills it if it lingers.
    pub fn stop(&self) {
        let mut child = self.child.locked();
        if matches!(child.try_wait(), Ok(None)) {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.write_all(b"SHUTDOWN\r\n");
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

const LOG_FILE: &str = "redis.log";

/// What redis-server logs once it listens.
const READY_LINE: &str = "Ready to accept connections";

/// How many times the log in `dir` says the server became ready.
fn ready_lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join(LOG_FILE))
        .map(|log| log.matches(READY_LINE).count())
        .unwrap_or(0)
}

fn spawn(
    program: &str,
    dir: &Path,
    port: u16,
    extra_args: &[String],
) -> Result<Child, RedisServerError> {
    Command::new(program)
        .arg("--port")
        .arg(port.to_string())
        .args([
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "yes",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join(LOG_FILE))
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| RedisServerError::NotFound {
            program: program.to_string(),
            source,
        })
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(6390)
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        // A server that wants a password answers NOAUTH: it is up all the same.
        && (&reply == b"+PONG\r\n" || &reply == b"-NOAUTH")
}
