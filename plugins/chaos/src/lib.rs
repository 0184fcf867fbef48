//! `chaos`: runs for a given time and tells an observer, over HTTP, that it is running, so
//! that the chaos tests can see every run of every job: where it ran, and when.
//!
//! Input is UTF-8 text, `MS OBSERVER PAYLOAD`: the job runs for `MS` milliseconds (0: it
//! returns at once) and returns `PAYLOAD done`. Each run picks a random run id and GETs
//! `http://OBSERVER/beat/JOB-ID/RUN/MS` (MS: the wall clock, ms since the Unix epoch, when
//! the beat was sent) when it starts and then every 50 ms until it returns, in
//! host calls that never check for cancellation (a run stops only when the worker stops it).
//! The observer must be allowed in the plugin's manifest (`[http] allow`).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wasmgear_guest::{Job, JobError};

/// How often a long run reports that it is still running.
const BEAT: Duration = Duration::from_millis(50);

/// Runs as `input` says, reporting to the observer it names.
fn chaos(job: &Job, input: String) -> Result<String, JobError> {
    let mut words = input.splitn(3, ' ');
    let (Some(ms), Some(observer), Some(payload)) = (words.next(), words.next(), words.next())
    else {
        return Err(JobError::fail(format!(
            "expected `MS OBSERVER PAYLOAD`, got {input:?}"
        )));
    };
    let ms: u64 = ms
        .parse()
        .map_err(|_| JobError::fail(format!("MS must be a number of milliseconds, got {ms:?}")))?;
    let run = wasip2::random::random::get_random_u64();
    let until = Instant::now() + Duration::from_millis(ms);
    loop {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let path = format!("/beat/{}/{run:016x}/{}", job.id, now.as_millis());
        // The observer may be slow or gone for a moment: a lost beat is not the job's failure.
        let _ = beat(observer, &path);
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(format!("{payload} done"));
        }
        std::thread::sleep(left.min(BEAT));
    }
}

/// One `GET http://AUTHORITY/PATH` through `wasi:http`; only the status is read.
fn beat(authority: &str, path: &str) -> Result<(), String> {
    use wasip2::http::outgoing_handler::handle;
    use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

    let request = OutgoingRequest::new(Fields::new());
    request
        .set_method(&Method::Get)
        .map_err(|()| "method refused")?;
    request
        .set_scheme(Some(&Scheme::Http))
        .map_err(|()| "scheme refused")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority refused")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path refused")?;
    let response = handle(request, None).map_err(|e| format!("{e:?}"))?;
    response.subscribe().block();
    match response.get() {
        Some(Ok(Ok(answer))) if answer.status() == 200 => Ok(()),
        Some(Ok(Ok(answer))) => Err(format!("status {}", answer.status())),
        Some(Ok(Err(code))) => Err(format!("{code:?}")),
        Some(Err(())) | None => Err("no answer".into()),
    }
}

wasmgear_guest::job!(chaos);
