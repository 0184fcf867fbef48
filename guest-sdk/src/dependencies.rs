//! Dependencies: the jobs this one waited for (enqueued with `after`, or a flow's edges into
//! it), how each ended, and their outputs.
//!
//! They are read a page and a piece at a time, so a job with thousands of dependencies holds
//! only what it asks for: [`all`] walks them in the order of the job's `after` list, and
//! [`Dependency::output`] reads one output when it is wanted.
//!
//! ```no_run
//! use wasmgear_guest::dependencies;
//!
//! let mut lines = Vec::new();
//! for dependency in dependencies::all() {
//!     let dependency = dependency?;
//!     lines.push(String::from_utf8_lossy(&dependency.output()?).into_owned());
//! }
//! # Ok::<(), String>(())
//! ```

use crate::__bindings::wasmgear::job::dependencies as wit;

/// How many dependencies one page holds.
const PAGE: u32 = 100;

/// How many bytes of an output one read takes.
const PIECE: u32 = 1024 * 1024;

/// How a dependency stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// It succeeded: its output can be read.
    Succeeded,
    /// It failed for good ([`Dependency::error`] says why).
    Failed,
    /// It was cancelled.
    Cancelled,
    /// It has not ended yet.
    Unfinished,
    /// It is not kept: it never existed, or it was forgotten after its retention.
    Missing,
}

/// One dependency of the running job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// Its place in the job's `after` list, from 0.
    pub position: u32,
    /// Its id, for example `resize:17`.
    pub id: String,
    /// Its function.
    pub function: String,
    /// How it stands.
    pub state: State,
    /// The size of its output in bytes: 0 unless it succeeded.
    pub output_size: u64,
    /// The message it failed or was cancelled with.
    pub error: Option<String>,
}

impl Dependency {
    /// Its whole output, read a piece at a time; an error says why it cannot be read (it
    /// has not succeeded, or it was forgotten).
    pub fn output(&self) -> Result<Vec<u8>, String> {
        let mut output = Vec::with_capacity(usize::try_from(self.output_size).unwrap_or(0));
        loop {
            let piece = wit::output(self.position, output.len() as u64, PIECE)?;
            if piece.is_empty() {
                return Ok(output);
            }
            output.extend_from_slice(&piece);
        }
    }
}

/// How many dependencies the running job has.
pub fn count() -> Result<u32, String> {
    wit::count()
}

/// The running job's dependencies in the order of its `after` list, a page at a time.
pub fn all() -> Dependencies {
    Dependencies {
        next: 0,
        page: Vec::new().into_iter(),
        done: false,
    }
}

/// The dependencies [`all`] walks: each an error when a page could not be read (the walk
/// ends there).
#[derive(Debug)]
pub struct Dependencies {
    next: u32,
    page: std::vec::IntoIter<Dependency>,
    done: bool,
}

impl Iterator for Dependencies {
    type Item = Result<Dependency, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(dependency) = self.page.next() {
            return Some(Ok(dependency));
        }
        if self.done {
            return None;
        }
        let start = self.next;
        let page = match wit::page(start, PAGE) {
            Ok(page) => page,
            Err(error) => {
                self.done = true;
                return Some(Err(error));
            }
        };
        if (page.len() as u32) < PAGE {
            self.done = true;
        }
        self.next = start.saturating_add(page.len() as u32);
        self.page = page
            .into_iter()
            .zip(start..)
            .map(|(d, position)| Dependency {
                position,
                id: d.id,
                function: d.function,
                state: match d.state {
                    wit::State::Succeeded => State::Succeeded,
                    wit::State::Failed => State::Failed,
                    wit::State::Cancelled => State::Cancelled,
                    wit::State::Unfinished => State::Unfinished,
                    wit::State::Missing => State::Missing,
                },
                output_size: d.output_size,
                error: d.error,
            })
            .collect::<Vec<_>>()
            .into_iter();
        self.page.next().map(Ok)
    }
}
