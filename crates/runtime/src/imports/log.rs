//! `wasmgear:job/log`.

use crate::bindings::wasmgear::job::log::{Host, Level};
use crate::run::StoreData;
use wasmgear_proto::LogLevel;

impl Host for StoreData {
    fn write(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        self.log.write(level, message);
    }
}
