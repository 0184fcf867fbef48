//! `hostile`: misbehaves on purpose, in the way its input names, so that the tests can prove
//! that the worker contains each misbehaviour to the one job.
//!
//! Input is UTF-8 text, a mode and maybe an argument:
//! - `loop`: a tight loop that never returns and never checks for cancellation;
//! - `memory`: allocates 1 MiB blocks and keeps them until allocation fails;
//! - `recursion`: recurses without end (a stack overflow);
//! - `unreachable`: executes `unreachable` (a Rust `panic!`);
//! - `divide`: divides by zero in a way the compiler cannot see coming;
//! - `output N`: returns N bytes;
//! - `log N`: writes N log lines, then returns `logged N lines`;
//! - `print N`: prints N lines to stdout and stderr, then returns `printed N lines`;
//! - `read PATH`: reads a file and returns its contents;
//! - `env NAME`: returns the value of an environment variable;
//! - `config KEY`: returns a configuration value of the manifest;
//! - `socket HOST:PORT`: opens a TCP connection and returns `connected`;
//! - `http HOST:PORT/PATH`: makes a `wasi:http` GET to `http://HOST:PORT/PATH` and returns
//!   the response body;
//! - `sleep S`: sleeps S seconds in one host call (a `wasi:io` poll on a timer) and never
//!   checks for cancellation;
//! - `retry N`: asks to be retried with an error message of N bytes;
//! - `progress N`: reports progress N of N (and a message of 4 KiB), then returns `reported N`.
//!
//! Anything the sandbox refuses comes back as a `fail` error that says what was refused.

use std::io::Write;

use wasmgear_guest::{Job, JobError, info};

/// Parses the argument of `mode`.
fn number(mode: &str, arg: Option<&str>) -> Result<usize, JobError> {
    arg.and_then(|a| a.parse().ok())
        .ok_or_else(|| JobError::fail(format!("{mode} needs a number, got {arg:?}")))
}

/// Recurses without end; the `black_box` keeps every frame alive.
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    recurse(depth + 1) + frame[0]
}

/// Misbehaves as `input` says.
fn hostile(_job: &Job, input: String) -> Result<Vec<u8>, JobError> {
    let mut words = input.trim().splitn(2, ' ');
    let mode = words.next().unwrap_or_default();
    let arg = words.next();
    match mode {
        "loop" => {
            let mut x: u64 = 1;
            loop {
                x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
            }
        }
        "memory" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                let mut block = Vec::new();
                if block.try_reserve_exact(1 << 20).is_err() {
                    return Err(JobError::fail(format!(
                        "allocation refused after {} MiB",
                        hoard.len()
                    )));
                }
                block.resize(1 << 20, 1);
                hoard.push(std::hint::black_box(block));
            }
        }
        "recursion" => Ok(recurse(0).to_le_bytes().to_vec()),
        "unreachable" => panic!("hostile plugin reached unreachable code on purpose"),
        "divide" => {
            let zero = std::hint::black_box(0u32);
            Ok((1u32 / zero).to_le_bytes().to_vec())
        }
        "output" => Ok(vec![b'x'; number(mode, arg)?]),
        "log" => {
            let n = number(mode, arg)?;
            for i in 0..n {
                info!("log line {i} of {n}");
            }
            Ok(format!("logged {n} lines").into_bytes())
        }
        "print" => {
            let n = number(mode, arg)?;
            for i in 0..n {
                // Ignore write errors: a full capture buffer must not end the job.
                let _ = writeln!(std::io::stdout(), "stdout line {i}");
                let _ = writeln!(std::io::stderr(), "stderr line {i}");
            }
            Ok(format!("printed {n} lines").into_bytes())
        }
        "read" => {
            let path = arg.unwrap_or("/etc/passwd");
            std::fs::read(path).map_err(|e| JobError::fail(format!("reading {path} refused: {e}")))
        }
        "env" => {
            let name = arg.unwrap_or("HOME");
            std::env::var(name)
                .map(String::into_bytes)
                .map_err(|e| JobError::fail(format!("environment variable {name} refused: {e}")))
        }
        "config" => {
            let key = arg.unwrap_or_default();
            wasmgear_guest::config(key)
                .map(String::into_bytes)
                .ok_or_else(|| JobError::fail(format!("configuration key {key} is not set")))
        }
        "socket" => {
            let address = arg.unwrap_or("127.0.0.1:6379");
            std::net::TcpStream::connect(address)
                .map(|_| b"connected".to_vec())
                .map_err(|e| JobError::fail(format!("connecting to {address} refused: {e}")))
        }
        "http" => {
            let target = arg.unwrap_or("127.0.0.1:80/");
            http_get(target)
                .map_err(|e| JobError::fail(format!("HTTP GET http://{target} refused: {e}")))
        }
        "sleep" => {
            let seconds = number(mode, arg)?;
            std::thread::sleep(std::time::Duration::from_secs(seconds as u64));
            Ok(format!("slept {seconds} s").into_bytes())
        }
        "sleepms" => {
            let ms = number(mode, arg)?;
            std::thread::sleep(std::time::Duration::from_millis(ms as u64));
            Ok(format!("slept {ms} ms").into_bytes())
        }
        "retry" => Err(JobError::retry("E".repeat(number(mode, arg)?))),
        "progress" => {
            let n = arg
                .and_then(|a| a.parse::<u64>().ok())
                .ok_or_else(|| JobError::fail(format!("progress needs a number, got {arg:?}")))?;
            wasmgear_guest::progress_msg(n, n, &"m".repeat(4096));
            Ok(format!("reported {n}").into_bytes())
        }
        other => Err(JobError::fail(format!("unknown mode {other:?}"))),
    }
}

/// GETs `http://TARGET` through `wasi:http` and returns the body.
fn http_get(target: &str) -> Result<Vec<u8>, String> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

    let (authority, path) = match target.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None => (target, "/".to_string()),
    };
    let request = OutgoingRequest::new(Fields::new());
    request
        .set_method(&Method::Get)
        .map_err(|()| "bad method")?;
    request
        .set_scheme(Some(&Scheme::Http))
        .map_err(|()| "bad scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "bad authority")?;
    request
        .set_path_with_query(Some(&path))
        .map_err(|()| "bad path")?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(format!("{code:?}")),
        _ => return Err("no response".into()),
    };
    if response.status() != 200 {
        return Err(format!("status {}", response.status()));
    }
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no body stream")?;
    let mut out = Vec::new();
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

wasmgear_guest::job!(hostile);
