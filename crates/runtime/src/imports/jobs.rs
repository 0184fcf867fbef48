//! `wasmgear:job/jobs`: child jobs, denied unless the manifest grants them (`[jobs]`).

use std::time::Duration;

use crate::bindings::wasmgear::job::jobs::{ChildOptions, Host, Outcome};
use crate::run::{ChildOutcome, ChildRequest, StoreData};
use wasmgear_proto::FunctionName;

/// The longest key a child may be given (a parent's key names it in the queue).
const MAX_KEY_BYTES: usize = wasmgear_proto::limits::MAX_KEY_BYTES as usize;

impl Host for StoreData {
    async fn enqueue(
        &mut self,
        function: String,
        input: Vec<u8>,
        options: ChildOptions,
    ) -> Result<String, String> {
        let function = FunctionName::new(function).map_err(|e| e.to_string())?;
        if !self.child_grants.contains(&function) {
            return Err(format!(
                "enqueueing jobs of {function} is not granted to this plugin: add it to \
                 `enqueue` under [jobs] in its manifest"
            ));
        }
        let Some(children) = self.children.clone() else {
            return Err("child jobs need a queue: this job runs without one".into());
        };
        if self.cancel.fired().is_some() {
            return Err("the job was asked to stop: it enqueues no more children".into());
        }
        // Every call counts, refused or not, so that a child's place is the same on every
        // attempt of the parent.
        let place = self.child_calls;
        self.child_calls += 1;
        if place >= self.max_children {
            return Err(format!(
                "this job may enqueue at most {} child jobs ([jobs] max_children in the manifest)",
                self.max_children
            ));
        }
        if let Some(key) = &options.key
            && (key.is_empty() || key.len() > MAX_KEY_BYTES)
        {
            return Err(format!(
                "a child's key must be 1 to {MAX_KEY_BYTES} bytes long, not {}",
                key.len()
            ));
        }
        let key = match options.key {
            Some(key) => key,
            None => self.unkeyed_key(&function, &input),
        };
        let request = ChildRequest {
            function,
            input,
            key,
            priority: options.priority,
            max_attempts: options.max_attempts,
            timeout: options.timeout_ms.map(Duration::from_millis),
        };
        children.enqueue(request).await
    }

    async fn wait(&mut self, id: String, timeout_ms: u64) -> Result<Outcome, String> {
        let Some(children) = self.children.clone() else {
            return Err("child jobs need a queue: this job runs without one".into());
        };
        let cancel = self.cancel.clone();
        tokio::select! {
            outcome = children.wait(id, Duration::from_millis(timeout_ms)) => outcome.map(|o| match o {
                ChildOutcome::Succeeded(output) => Outcome::Succeeded(output),
                ChildOutcome::Failed(message) => Outcome::Failed(message),
                ChildOutcome::Cancelled => Outcome::Cancelled,
            }),
            () = cancel.fired_wait() => Err("the job was asked to stop while it waited".into()),
        }
    }
}

impl StoreData {
    /// The key of a child enqueued without one: `#` and a digest of its function and input,
    /// then how many such children came before it (`#DIGEST.N`), so that every attempt of the
    /// parent names its children alike whatever the order of its calls (children alike in
    /// function and input are interchangeable).
    fn unkeyed_key(&mut self, function: &FunctionName, input: &[u8]) -> String {
        use sha2::Digest;
        let mut hasher = sha2::Sha256::new();
        hasher.update(function.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(input);
        let digest: [u8; 32] = hasher.finalize().into();
        let count = self.unkeyed_children.entry(digest).or_insert(0);
        let n = *count;
        *count += 1;
        let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
        format!("#{hex}.{n}")
    }
}
