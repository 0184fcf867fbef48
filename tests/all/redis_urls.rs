//! Redis URLs as every command takes them, through the real binary: a password or an ACL
//! user (never shown), TLS (`rediss://`), a Redis Cluster, and a server that is not Redis,
//! named as such.

use std::io::Write;
use std::process::Command;

use wasmgear_testkit::{ClosedPort, TestRedis, json, stderr, stdout, wasmgear};

/// Passwords (default user and ACL users) work, and never show in output.
#[test]
fn passwords_work_and_stay_secret() {
    let redis = TestRedis::start_with(&[
        "--requirepass",
        "s3cret-pass",
        "--user",
        "app",
        "on",
        ">app-pass",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = redis.port();
    let url = |userinfo: &str| format!("redis://{userinfo}127.0.0.1:{port}");
    let queues = |url: &str| wasmgear(&["queues", "--json"], &[("WASMGEAR_REDIS_URL", url)]);

    assert_eq!(queues(&url(":s3cret-pass@")).status.code(), Some(0));
    assert_eq!(queues(&url("app:app-pass@")).status.code(), Some(0));
    let out = queues(&url(""));
    assert_eq!(out.status.code(), Some(6));
    assert!(
        stderr(&out).contains("wants a password"),
        "{}",
        stderr(&out)
    );
    for wrong in [":nope-nope@", "app:s3cret-pass@", "ghost:app-pass@"] {
        let out = queues(&url(wrong));
        assert_eq!(out.status.code(), Some(6), "{wrong}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("refused"),
            "{wrong}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(":***@") || !wrong.contains(':'),
            "{}",
            stderr(&out)
        );
    }
    // Neither the messages nor the help text show a password.
    let secret = url("app:app-pass@");
    let missing = wasmgear(
        &["status", "echo:9"],
        &[("WASMGEAR_REDIS_URL", secret.as_str())],
    );
    let help = wasmgear(
        &["status", "--help"],
        &[("WASMGEAR_REDIS_URL", secret.as_str())],
    );
    let closed_port = ClosedPort::new();
    let closed = format!("redis://app:app-pass@127.0.0.1:{}", closed_port.port());
    let unreachable = wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", closed.as_str())]);
    assert_eq!(unreachable.status.code(), Some(6));
    assert!(
        stderr(&unreachable).contains("app:***@"),
        "{}",
        stderr(&unreachable)
    );
    for out in [&missing, &help, &unreachable] {
        let all = format!("{}{}", stdout(out), stderr(out));
        assert!(!all.contains("app-pass"), "password shown: {all}");
    }
}

/// `rediss://` speaks TLS, verifying the server against the CA in SSL_CERT_FILE.
#[test]
fn tls_urls_work() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.crt",
    ]);
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let (redis, tls_port) = TestRedis::start_with_port(|tls_port| {
        let tls_port = tls_port.to_string();
        [
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
        ]
        .map(String::from)
        .to_vec()
    });
    let url = format!("rediss://localhost:{tls_port}");
    let env = [
        ("WASMGEAR_REDIS_URL", url.as_str()),
        ("SSL_CERT_FILE", ca.as_str()),
    ];
    let out = wasmgear(&["enqueue", "echo", "over tls"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "echo:1");
    // The same job, seen over the plain port: it really went to this server.
    let plain = redis.url();
    let status = json(&wasmgear(
        &["status", "echo:1", "--json"],
        &[("WASMGEAR_REDIS_URL", plain.as_str())],
    ));
    assert_eq!(status["state"], "queued");
    // Without the CA the server's certificate is not trusted: a clear refusal.
    let out = wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", url.as_str())]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    drop(redis);
}

/// Something that is not Redis, or nothing at all, behind the URL: exit 6, one sentence.
#[test]
fn a_server_that_is_not_redis_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut stream = stream;
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        &["queues"][..],
        &["status", "echo:1"],
        &["enqueue", "echo", "x"],
    ] {
        let out = wasmgear(args, &[("WASMGEAR_REDIS_URL", url.as_str())]);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("cannot reach Redis at {url}")),
            "{}",
            stderr(&out)
        );
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
    let out = wasmgear(&["queues"], &[("WASMGEAR_REDIS_URL", "http://example")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid Redis URL"),
        "{}",
        stderr(&out)
    );
}

/// The URL of any node of a Redis Cluster works for every command.
#[test]
fn a_cluster_url_works() {
    let cluster = wasmgear_testkit::TestCluster::start();
    let url = cluster.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| wasmgear(args, &env);
    for function in ["alpha", "beta", "gamma"] {
        assert_eq!(
            stdout(&run(&["enqueue", function, "x", "--tag", "t"])).trim(),
            format!("{function}:1")
        );
    }
    let queues = json(&run(&["queues", "--json"]));
    let names: Vec<&str> = queues
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    assert!(queues.as_array().unwrap().iter().all(|q| q["queued"] == 1));
    assert_eq!(
        json(&run(&["jobs", "--tag", "t", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        json(&run(&["cancel", "beta:1", "--json"]))["outcome"],
        "cancelled"
    );
}
