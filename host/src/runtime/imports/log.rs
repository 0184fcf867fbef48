//! `wasmgear:job/log`.

use crate::job::LogLevel;
use crate::runtime::bindings::wasmgear::job::log::{Host, Level};
use crate::runtime::run::JobState;

/// Longest log line kept, in bytes; longer ones are cut.
pub const MAX_LOG_LINE_BYTES: usize = 4096;

impl Host for JobState {
    fn write(&mut self, level: Level, message: String) {
        if self.log_lines_left == 0 {
            return;
        }
        self.log_lines_left -= 1;
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        let message = if self.log_lines_left == 0 {
            "log limit reached: further lines of this job are dropped".to_string()
        } else {
            truncate(message, MAX_LOG_LINE_BYTES)
        };
        self.hooks.log(level, message);
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
