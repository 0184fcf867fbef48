//! Where a job's words go: its `log` calls and its stdout and stderr, cut to size and
//! counted against one budget, to the caller's [`JobHooks`].
//!
//! Guest output never reaches the worker's terminal, and a guest that prints without end
//! neither fails (its writes keep succeeding) nor fills the worker's memory (lines past the
//! budget are dropped).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::run::JobHooks;
use wasmgear_proto::LogLevel;
use wasmgear_proto::sync::Locked;

/// Longest log line kept, in bytes; longer ones are cut.
pub const MAX_LOG_LINE_BYTES: usize = 4096;

/// The job's log: forwards lines to the hooks while the line budget lasts.
pub(crate) struct JobLog {
    hooks: Arc<dyn JobHooks>,
    lines_left: AtomicU32,
}

impl JobLog {
    /// A log allowing `max_lines` lines.
    pub(crate) fn new(hooks: Arc<dyn JobHooks>, max_lines: u32) -> Arc<Self> {
        Arc::new(JobLog {
            hooks,
            lines_left: AtomicU32::new(max_lines),
        })
    }

    /// The hooks, for reports other than log lines.
    pub(crate) fn hooks(&self) -> &Arc<dyn JobHooks> {
        &self.hooks
    }

    /// Writes one line, cut to [`MAX_LOG_LINE_BYTES`]. The last line the budget allows says
    /// that the rest is dropped.
    pub(crate) fn write(&self, level: LogLevel, message: String) {
        let left = self
            .lines_left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        match left {
            Err(_) => {}
            Ok(1) => self.hooks.log(
                LogLevel::Warn,
                "log limit reached: further lines of this job are dropped".to_string(),
            ),
            Ok(_) => self.hooks.log(level, truncate(message, MAX_LOG_LINE_BYTES)),
        }
    }
}

/// A guest's stdout or stderr: complete lines go to the job's log as they are written.
#[derive(Clone)]
pub(crate) struct GuestOutput {
    log: Arc<JobLog>,
    name: &'static str,
    level: LogLevel,
    partial: Arc<Mutex<Vec<u8>>>,
}

impl GuestOutput {
    /// The stream called `name` ("stdout"), logging at `level`.
    pub(crate) fn new(log: Arc<JobLog>, name: &'static str, level: LogLevel) -> Self {
        GuestOutput {
            log,
            name,
            level,
            partial: Arc::default(),
        }
    }

    /// Logs what is left of an unfinished last line.
    pub(crate) fn flush_partial(&self) {
        let rest = std::mem::take(&mut *self.partial.locked());
        if !rest.is_empty() {
            self.emit(&rest);
        }
    }

    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        self.log.write(
            self.level,
            format!("[{}] {}", self.name, text.trim_end_matches('\r')),
        );
    }

    fn accept(&self, bytes: &[u8]) {
        let mut partial = self.partial.locked();
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            if let Some(line) = chunk.strip_suffix(b"\n") {
                partial.extend_from_slice(line);
                let line = std::mem::take(&mut *partial);
                self.emit(&line);
            } else if partial.len() < MAX_LOG_LINE_BYTES {
                let room = MAX_LOG_LINE_BYTES - partial.len();
                partial.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut with how
/// many bytes were dropped (the marker counts against `max`).
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let marker = format!("… [{} bytes cut]", text.len() - max);
        let mut end = max.saturating_sub(marker.len() + 1);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let cut = text.len() - end;
        text.truncate(end);
        text.push_str(&format!("… [{cut} bytes cut]"));
    }
    text
}
