//! `wasmgear:job/batch-jobs`: whether one job of the running batch is to stop.

use crate::bindings::batch::wasmgear::job::batch_jobs::Host;
use crate::run::StoreData;

impl Host for StoreData {
    fn cancelled(&mut self, index: u32) -> bool {
        usize::try_from(index)
            .ok()
            .and_then(|index| self.batch.get(index))
            .is_some_and(|signal| signal.is_cancelled())
    }
}
