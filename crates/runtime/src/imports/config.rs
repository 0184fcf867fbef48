//! `wasmgear:job/config`.

use crate::bindings::wasmgear::job::config::Host;
use crate::run::JobState;

impl Host for JobState {
    fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }
}
