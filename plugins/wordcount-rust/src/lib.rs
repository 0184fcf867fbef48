//! `wordcount`: counts the words, lines and characters of a text (the example job, the same
//! in every language).
//!
//! Input is JSON `{"text": "..."}`. The text is processed in chunks of 1000 characters
//! (Unicode code points): before each the job checks for cancellation, after each it reports
//! progress `(i, n, "chunk i/n")`. The output is compact JSON
//! `{"words":W,"lines":L,"chars":C,"top":[["word",count],...]}`: words are maximal runs of
//! characters other than space, `\t`, `\n`, `\r`, `\x0b` and `\x0c`; lines counts `\n`; chars
//! counts code points; top holds the 3 most frequent words (ASCII-lowercased), by count
//! descending, then word ascending. Input that is not a JSON object with a string `"text"`
//! fails the job for good; `"fail_retry": true` asks for a retry instead, and
//! `"chunk_delay_ms": N` waits N ms before each chunk (a long job to cancel in tests).

use std::collections::HashMap;

use serde::Serialize;
use wasmgear_guest::{Job, JobError, Json, cancelled, info, progress_msg};

/// Characters per chunk (one progress report each).
const CHUNK: usize = 1000;
/// How many of the most frequent words the output lists.
const TOP: usize = 3;

/// The job's output.
#[derive(Debug, PartialEq, Serialize)]
struct Counts {
    words: u64,
    lines: u64,
    chars: u64,
    top: Vec<(String, u64)>,
}

/// What to count: the text, and the wait before each chunk.
#[derive(Debug)]
struct Request {
    text: String,
    delay: std::time::Duration,
}

/// The request in the job's input; a permanent error names what is wrong.
fn parse(input: &[u8]) -> Result<Request, JobError> {
    let request: serde_json::Value = serde_json::from_slice(input)
        .map_err(|e| JobError::fail(format!("the input is not JSON: {e}")))?;
    let shape = |v: &serde_json::Value| match v {
        serde_json::Value::Object(_) => "an object",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Null => "null",
    };
    let Some(object) = request.as_object() else {
        return Err(JobError::fail(format!(
            "wordcount expects a JSON object {{\"text\": \"...\"}}, got {}",
            shape(&request)
        )));
    };
    if object.get("fail_retry") == Some(&serde_json::Value::Bool(true)) {
        return Err(JobError::retry("asked to retry"));
    }
    match object.get("text") {
        None => Err(JobError::fail(
            "wordcount expects a JSON object {\"text\": \"...\"}: \"text\" is missing",
        )),
        Some(serde_json::Value::String(text)) => Ok(Request {
            text: text.clone(),
            delay: std::time::Duration::from_millis(
                object
                    .get("chunk_delay_ms")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0),
            ),
        }),
        Some(other) => Err(JobError::fail(format!(
            "\"text\" must be a string, got {}",
            shape(other)
        ))),
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// Counts `text` chunk by chunk; `step(i, n)` runs before chunk `i` of `n` (and may stop
/// the count) and `done(i, n)` after it.
fn count(
    text: &str,
    mut step: impl FnMut(usize, usize) -> Result<(), JobError>,
    mut done: impl FnMut(usize, usize),
) -> Result<Counts, JobError> {
    let chars: Vec<char> = text.chars().collect();
    let total = chars.len().div_ceil(CHUNK);
    let mut frequency: HashMap<String, u64> = HashMap::new();
    let (mut words, mut lines) = (0, 0);
    let mut word = String::new();
    for (i, chunk) in chars.chunks(CHUNK).enumerate() {
        step(i, total)?;
        for &c in chunk {
            if c == '\n' {
                lines += 1;
            }
            if is_space(c) {
                if !word.is_empty() {
                    words += 1;
                    *frequency.entry(std::mem::take(&mut word)).or_default() += 1;
                }
            } else {
                word.push(c.to_ascii_lowercase());
            }
        }
        done(i + 1, total);
    }
    if !word.is_empty() {
        words += 1;
        *frequency.entry(word).or_default() += 1;
    }
    let mut top: Vec<(String, u64)> = frequency.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(TOP);
    Ok(Counts {
        words,
        lines,
        chars: chars.len() as u64,
        top,
    })
}

fn wordcount(_job: &Job, input: Vec<u8>) -> Result<Json<Counts>, JobError> {
    let Request { text, delay } = parse(&input)?;
    info!("counting {} characters", text.chars().count());
    let counts = count(
        &text,
        |i, n| {
            std::thread::sleep(delay);
            match cancelled() {
                true => Err(JobError::fail(format!("cancelled after {i} of {n} chunks"))),
                false => Ok(()),
            }
        },
        |i, n| progress_msg(i as u64, n as u64, &format!("chunk {i}/{n}")),
    )?;
    Ok(Json(counts))
}

wasmgear_guest::job!(wordcount);

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(text: &str) -> String {
        serde_json::to_string(&count(text, |_, _| Ok(()), |_, _| {}).unwrap()).unwrap()
    }

    #[test]
    fn counts_words_lines_and_characters() {
        assert_eq!(
            counted("The cat\tand THE dog\nthe end\n"),
            r#"{"words":7,"lines":2,"chars":28,"top":[["the",3],["and",1],["cat",1]]}"#
        );
        assert_eq!(counted(""), r#"{"words":0,"lines":0,"chars":0,"top":[]}"#);
        assert_eq!(
            counted("Ünïcode ünïcode"),
            r#"{"words":2,"lines":0,"chars":15,"top":[["Ünïcode",1],["ünïcode",1]]}"#
        );
    }

    #[test]
    fn words_run_across_chunks_and_progress_counts_chunks() {
        let text = "a".repeat(CHUNK * 2 + 1);
        let mut reports = Vec::new();
        let counts = count(&text, |_, _| Ok(()), |i, n| reports.push((i, n))).unwrap();
        assert_eq!(counts.words, 1);
        assert_eq!(reports, vec![(1, 3), (2, 3), (3, 3)]);
    }

    #[test]
    fn bad_input_fails_for_good_and_fail_retry_retries() {
        for (input, says) in [
            (&b"nope"[..], "not JSON"),
            (b"[1]", "got an array"),
            (b"{}", "\"text\" is missing"),
            (br#"{"text": 5}"#, "got a number"),
        ] {
            let err = parse(input).unwrap_err();
            assert!(!err.is_retry());
            assert!(err.message().contains(says), "{err}");
        }
        assert!(
            parse(br#"{"text":"x","fail_retry":true}"#)
                .unwrap_err()
                .is_retry()
        );
    }
}
