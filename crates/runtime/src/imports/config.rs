//! `wasmgear:job/config`.

use crate::bindings::wasmgear::job::config::Host;
use crate::run::StoreData;

impl Host for StoreData {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }
}
