//! `big-memory`: keeps its input in a table of 4 MiB that is part of its linear memory from
//! the start, so its initial memory is over 4 MiB. A worker whose memory limit
//! (`--memory-limit`) is lower cannot load it at all; the tests use it for a plugin that
//! fails to load the way an oversized real one does.
//!
//! The output is the text `kept K of N bytes in a table of T bytes` (at most T are kept).

use std::sync::Mutex;

use wasmgear_guest::{Job, JobError};

/// The table's size. Zeroed, it lives in the memory's zero-filled part: it makes the
/// initial memory large without making the component large.
const TABLE_BYTES: usize = 4 << 20;

static TABLE: Mutex<[u8; TABLE_BYTES]> = Mutex::new([0; TABLE_BYTES]);

/// Copies the input (at most [`TABLE_BYTES`] of it) into the table.
fn big_memory(_job: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let kept = input.len().min(TABLE_BYTES);
    table[..kept].copy_from_slice(&input[..kept]);
    Ok(format!(
        "kept {kept} of {} bytes in a table of {TABLE_BYTES} bytes",
        input.len()
    )
    .into_bytes())
}

wasmgear_guest::job!(big_memory);
