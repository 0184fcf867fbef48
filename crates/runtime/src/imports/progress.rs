//! `wasmgear:job/progress`.

use crate::bindings::wasmgear::job::progress::Host;
use crate::output::truncate;
use crate::run::StoreData;
use wasmgear_proto::Progress;

/// Longest progress message kept, in bytes; longer ones are cut.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize =
    wasmgear_proto::limits::MAX_PROGRESS_MESSAGE_BYTES as usize;

impl Host for StoreData {
    fn report(&mut self, done: u64, total: u64, message: Option<String>) {
        let message = message.map(|m| truncate(m, MAX_PROGRESS_MESSAGE_BYTES));
        self.log.hooks().progress(Progress {
            done,
            total,
            message,
        });
    }
}
