//! `wasmgear:job/checkpoint`: a job saves where it got to and its next attempt resumes. A
//! save over the plugin's limit is refused here, before the worker sees it; `load` answers
//! what this attempt saved last, else asks the worker for the one an earlier attempt left.
//! A job run with no queue behind it (`wasmgear run`) keeps its checkpoints in the attempt.

use crate::bindings::wasmgear::job::checkpoint::Host;
use crate::run::StoreData;

impl Host for StoreData {
    async fn load(&mut self) -> Result<Option<Vec<u8>>, String> {
        if let Some(saved) = &self.checkpoint.saved {
            return Ok(Some(saved.clone()));
        }
        match self.checkpoint.queue.clone() {
            Some(queue) => queue.load().await,
            None => Ok(None),
        }
    }

    fn save(&mut self, data: Vec<u8>) -> Result<(), String> {
        let most = self.checkpoint.max_bytes;
        if data.len() > most {
            return Err(format!(
                "a checkpoint of {} bytes is over this plugin's limit of {most} bytes: save \
                 where the job got to rather than its data, or raise `[limits] checkpoint` in \
                 its manifest",
                data.len()
            ));
        }
        if let Some(queue) = &self.checkpoint.queue {
            queue.save(data.clone())?;
        }
        self.checkpoint.saved = Some(data);
        Ok(())
    }
}
