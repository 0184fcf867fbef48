//! `wasmgear:job/cancel`.

use crate::bindings::wasmgear::job::cancel::Host;
use crate::run::JobState;

impl Host for JobState {
    fn cancelled(&mut self) -> bool {
        self.cancel.is_cancelled()
    }
}
