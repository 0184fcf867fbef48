//! The far end of a plugin's outgoing HTTP request, for tests that stand up a service a
//! plugin calls: read a request's head, answer 200 with no body.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The head of the request on `stream` (request line and headers), read up to the blank
/// line (at most 16 KiB, 10 s); `None` if the peer went away first.
pub fn read_head(stream: &mut TcpStream) -> Option<String> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut request = Vec::new();
    let mut buf = [0u8; 2048];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&request).into_owned())
}

/// Answers 200 with no body and closes.
pub fn answer_ok(stream: &mut TcpStream) {
    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
}
