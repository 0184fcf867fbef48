//! `wasmgear:job/cancel`.

use crate::runtime::bindings::wasmgear::job::cancel::Host;
use crate::runtime::run::JobState;

impl Host for JobState {
    fn cancelled(&mut self) -> bool {
        self.cancel.is_cancelled()
    }
}
