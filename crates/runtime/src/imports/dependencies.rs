//! `wasmgear:job/dependencies`: a job reads how its dependencies stand and their outputs, a
//! page and a piece at a time (bounded here, before the queue is asked).

use crate::bindings::wasmgear::job::dependencies::{Dependency, Host, State};
use crate::dependencies::{self as deps, DependencyState};
use crate::run::StoreData;

impl Host for StoreData {
    async fn count(&mut self) -> Result<u32, String> {
        match self.dependencies.clone() {
            Some(queue) => queue.count().await,
            None => Ok(0),
        }
    }

    async fn page(&mut self, start: u32, max: u32) -> Result<Vec<Dependency>, String> {
        let Some(queue) = self.dependencies.clone() else {
            return Ok(Vec::new());
        };
        if max == 0 {
            return Ok(Vec::new());
        }
        let found = queue.page(start, max.min(deps::MAX_PAGE)).await?;
        Ok(found
            .into_iter()
            .map(|d| Dependency {
                id: d.id,
                function: d.function,
                state: match d.state {
                    DependencyState::Succeeded => State::Succeeded,
                    DependencyState::Failed => State::Failed,
                    DependencyState::Cancelled => State::Cancelled,
                    DependencyState::Unfinished => State::Unfinished,
                    DependencyState::Missing => State::Missing,
                },
                output_size: d.output_size,
                error: d.error,
            })
            .collect())
    }

    async fn output(&mut self, position: u32, offset: u64, max: u32) -> Result<Vec<u8>, String> {
        let Some(queue) = self.dependencies.clone() else {
            return Err(format!(
                "this job has no dependency at position {position}: it runs without a queue"
            ));
        };
        if max == 0 {
            return Ok(Vec::new());
        }
        queue
            .output(position, offset, max.min(deps::MAX_OUTPUT_PIECE))
            .await
    }
}
