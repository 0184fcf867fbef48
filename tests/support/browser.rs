//! A real browser for the dashboard's tests: Debian's headless Chromium driven through
//! its ChromeDriver by the W3C WebDriver protocol (JSON over HTTP, spoken here with hyper).
//! `scripts/setup` installs both (`chromium`, `chromium-driver`).
//!
//! ChromeDriver runs in a process group of its own, with Chromium's whole process tree
//! under it; dropping the [`Browser`] quits the session and then kills the group, so no
//! Chromium outlives the test, also when it fails.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use wasmgear_testkit::free_port;

use wasmgear_testkit::eventually;
use wasmgear_testkit::process::ProcessGroup;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One headless Chromium session; when it is dropped, the session is quit and the driver's
/// whole process group (Chromium with it) is killed.
pub struct Browser {
    driver: ProcessGroup,
    address: String,
    session: String,
    /// Chromium's profile (`--user-data-dir`), this session's own.
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts ChromeDriver on a free port and opens a headless Chromium session.
    pub async fn start() -> Self {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: run scripts/setup (it installs Debian's chromium and chromium-driver)"
            );
        }
        let port = free_port();
        let driver = ProcessGroup::spawn(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("a profile directory");
        let address = format!("127.0.0.1:{port}");
        eventually(
            Duration::from_secs(30),
            "chromedriver to get ready",
            || async {
                let answer = call(&address, "GET", "/status", None).await;
                matches!(answer, Ok((200, status)) if status["value"]["ready"] == true)
                    .then_some(())
            },
        )
        .await;
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.path().display())],
            },
        } } });
        let (status, created) = call(&address, "POST", "/session", Some(capabilities))
            .await
            .expect("a session");
        assert_eq!(status, 200, "new session: {created}");
        let session = created["value"]["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        Browser {
            driver,
            address,
            session,
            profile,
        }
    }

    /// Chromium's profile directory (its `--user-data-dir`), this session's own.
    pub fn profile(&self) -> &Path {
        self.profile.path()
    }

    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let (status, answer) = call(&self.address, method, &path, body)
            .await
            .expect("chromedriver answers");
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer["value"].clone()
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The page's URL now.
    pub async fn url(&self) -> String {
        self.command("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Runs `script` in the page (`arguments` are `args`) and returns what it returns.
    pub async fn run(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// The first element matching `css`.
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .command(
                "POST",
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    /// Clicks the first element matching `css`. A live page may replace its content between
    /// finding the element and clicking it (a stale element): then it is found again.
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let element = self.find(css).await;
            let path = format!("/session/{}/element/{element}/click", self.session);
            let (status, answer) = call(&self.address, "POST", &path, Some(json!({})))
                .await
                .expect("chromedriver answers");
            if status == 200 {
                return;
            }
            assert!(
                answer["value"]["error"] == "stale element reference" && Instant::now() < deadline,
                "click {css}: {answer}"
            );
        }
    }

    /// Types `text` into the first element matching `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// The text of the open `confirm` dialog, once one opens (within `timeout`).
    pub async fn dialog(&self, timeout: Duration) -> String {
        let path = format!("/session/{}/alert/text", self.session);
        eventually(timeout, "a dialog to open", || async {
            match call(&self.address, "GET", &path, None).await {
                Ok((200, answer)) => Some(answer["value"].as_str().unwrap_or("").to_string()),
                _ => None,
            }
        })
        .await
    }

    /// Accepts the open dialog.
    pub async fn accept(&self) {
        self.command("POST", "/alert/accept", Some(json!({}))).await;
    }

    /// Waits until `script` returns a truthy value (bounded by `timeout`), and returns it.
    pub async fn until(&self, timeout: Duration, what: &str, script: &str) -> Value {
        eventually(timeout, what, || async {
            let value = self.run(script, json!([])).await;
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            truthy.then_some(value)
        })
        .await
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let encoded = self.command("GET", "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or(""))
            .expect("a base64 PNG")
    }

    /// Sets the window's size (to see the pages in a narrow window).
    pub async fn resize(&self, width: u32, height: u32) {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        quit_session(&self.address, &self.session);
        self.driver.kill();
    }
}

/// Asks ChromeDriver to end `session` (it closes Chromium), waiting at most a few seconds:
/// from `drop`, so without the async runtime.
fn quit_session(address: &str, session: &str) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_end(&mut Vec::new());
    }
}

/// One WebDriver request; the status and the JSON answer.
async fn call(
    address: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", address)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Ok((status, value))
}
