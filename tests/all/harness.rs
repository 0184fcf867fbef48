//! The harness's own promise: every process a test starts ends with the test, also what
//! those processes started themselves (read from `/proc`).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::browser::Browser;
use wasmgear_testkit::process::{ProcessGroup, with_argument};
use wasmgear_testkit::{WorkerProcess, eventually, eventually_sync, plugin_dir};

/// Whether process `pid` is gone (or a zombie: dead, only not yet reaped).
fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// Dropping a process group kills the children its leader started, not only the leader.
#[test]
fn a_dropped_process_group_takes_the_leader_s_children_along() {
    let mut group = ProcessGroup::spawn(
        Command::new("sh")
            .args(["-c", "sleep 600 & echo $!; wait"])
            .stdout(Stdio::piped()),
    )
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(group.child().stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grandchild: u32 = line.trim().parse().unwrap();
    assert!(!gone(grandchild));
    drop(group);
    eventually_sync(Duration::from_secs(10), "the leader's child to end", || {
        gone(grandchild)
    });
}

/// A worker process started without a Redis URL starts an embedded redis-server; dropping
/// the worker (a test that fails, killing it) ends that server too.
#[test]
fn a_dropped_worker_process_takes_its_embedded_redis_along() {
    let home = tempfile::tempdir().unwrap();
    let plugins = plugin_dir(&["echo"]);
    let worker = WorkerProcess::embedded(home.path())
        .plugins(plugins.path())
        .start();
    // The worker writes where its Redis listens; redis-server's title names the address.
    let url = std::fs::read_to_string(home.path().join("redis.url")).unwrap();
    let address = url.trim().trim_start_matches("redis://").to_string();
    let redis = with_argument(&format!("redis-server {address}"));
    assert_eq!(
        redis.len(),
        1,
        "one embedded redis-server at {address}: {redis:?}"
    );
    drop(worker);
    eventually_sync(Duration::from_secs(10), "the embedded Redis to end", || {
        gone(redis[0])
    });
}

/// Dropping the browser ends Chromium's whole process tree: no process of its profile
/// directory is left (ChromeDriver's children are adopted by init when only it is killed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_browser_leaves_no_chromium_behind() {
    let browser = Browser::start().await;
    let profile = format!("--user-data-dir={}", browser.profile().display());
    let chromium = with_argument(&profile);
    assert!(!chromium.is_empty(), "no process runs with {profile}");
    drop(browser);
    eventually(Duration::from_secs(10), "Chromium to end", || async {
        let left = with_argument(&profile);
        left.is_empty().then_some(())
    })
    .await;
}

/// What the harness waits for before a worker process counts as serving is the line the
/// worker logs on purpose, and README documents it as a contract.
#[test]
fn the_ready_line_the_harness_waits_for_is_documented() {
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains("`wasmgear_worker::READY_LINE`")
            && readme.contains(&format!("`{}`", wasmgear_testkit::READY_LINE)),
        "README must document the ready line {:?} (wasmgear_worker::READY_LINE)",
        wasmgear_testkit::READY_LINE
    );
}
