//! `wasmgear:job/cancel`.

use crate::bindings::wasmgear::job::cancel::Host;
use crate::run::StoreData;

impl Host for StoreData {
    fn cancelled(&mut self) -> bool {
        self.cancel.is_cancelled()
    }
}
