//! How every command prints its result: JSON on stdout with `--json` (pretty, one document;
//! `events` one line per event), else text for people (aligned tables, coloured states).
//! A job is printed in the HTTP API's shape ([`job`]): `status --json`, `wait --json` and
//! `GET /v1/jobs/{id}` show the same object, the output as `output_base64` and, when it is
//! UTF-8, as `output` too.

use wasmgear_client::{JobState, JobStatus};
use wasmgear_proto::{Event, FunctionEvent};

/// Prints `value` as pretty JSON on stdout.
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints one JSON document already serialised (an event as the queue published it) as a
/// line on stdout.
pub(crate) fn print_json_line(json: &str) {
    println!("{json}");
}

/// A job as JSON, in the HTTP API's shape: the record's fields, its id, and a succeeded
/// job's output as `output_base64` and, when it is UTF-8, `output`.
pub(crate) fn job(status: &JobStatus) -> serde_json::Value {
    wasmgear_server::job_json(status)
}

/// Prints rows under `headers` in aligned columns (the last column unpadded).
pub(crate) fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers
        .iter()
        .map(|h| console::measure_text_width(h))
        .collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(console::measure_text_width(cell));
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, cell)| match i == last {
                true => cell.to_string(),
                false => {
                    console::pad_str(cell, widths[i], console::Alignment::Left, None).into_owned()
                }
            })
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(headers.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A job state, coloured when stdout is a colour terminal (console's rules: `NO_COLOR`,
/// `CLICOLOR`, `CLICOLOR_FORCE`): green succeeded, red failed or expired, yellow cancelled,
/// cyan running.
pub(crate) fn paint_state(state: JobState) -> String {
    use JobState::*;
    let text = console::style(state.as_str());
    match state {
        Succeeded => text.green(),
        Failed | Expired => text.red(),
        Cancelled => text.yellow(),
        Running => text.cyan(),
        Queued | Scheduled | Waiting => text,
    }
    .to_string()
}

/// One event of `wasmgear events`, as a line.
pub(crate) fn paint_event(published: &FunctionEvent) -> String {
    let event = &published.event;
    let detail = match event {
        Event::Start { attempt, .. } => format!("attempt {attempt}"),
        Event::Progress {
            done,
            total,
            message,
            ..
        } => format!("{done}/{total} {}", message.as_deref().unwrap_or_default()),
        Event::Checkpoint { bytes, .. } => format!("{bytes} bytes saved"),
        Event::Retry { attempt, .. } => format!("attempt {attempt} failed; runs again"),
        Event::Finish { state, .. } => paint_state(*state),
        Event::Config => format!("{} settings changed", published.function),
        _ => String::new(),
    };
    let id = event.job().map(|id| id.to_string()).unwrap_or_default();
    let kind = console::pad_str(event.kind(), 8, console::Alignment::Left, None);
    format!("{} {id} {detail}", console::style(kind).bold())
        .trim_end()
        .to_string()
}

/// A job's output for people: the text when it is UTF-8, else its size.
pub(crate) fn output_text(output: &[u8]) -> String {
    if let Some(key) = wasmgear_proto::crypto::sealed_with(output) {
        return format!(
            "<encrypted (key {key}); no key here: give the key file with --encryption-key-file or WASMGEAR_ENCRYPTION_KEY_FILE>"
        );
    }
    match std::str::from_utf8(output) {
        Ok(text) => text.to_string(),
        Err(_) => format!("<{} bytes, not UTF-8>", output.len()),
    }
}
