//! Section 1, isolation per job: a fresh instance of a plugin, one call and its drop, against
//! fork + exit and fork + exec of /bin/true.

use crate::common;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use wasmgear_proto::Outcome;
use wasmgear_runtime::CancelSignal;
use wasmgear_runtime::JobHooks;
use wasmgear_runtime::Runtime;
use wasmgear_runtime::RuntimeConfig;

use super::{Plan, Row, percentiles, row, us};
use crate::common::Quiet;
use crate::common::job_info;

/// 1. A fresh instance + call + drop, against fork + exit and fork + exec.
pub(crate) fn isolation(plan: &Plan, rt: &tokio::runtime::Runtime, rows: &mut Vec<Row>) {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 4,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let hooks: Arc<dyn JobHooks> = Arc::new(Quiet);
    let measure = |path: &Path, name: &str, input: &[u8], n: usize| {
        let plugin = runtime.load_plugin(path).unwrap();
        let info = job_info(name);
        rt.block_on(async {
            let mut samples = Vec::with_capacity(n);
            for i in 0..n + n / 10 {
                let started = Instant::now();
                let outcome = runtime
                    .run(&plugin, &info, input, hooks.clone(), CancelSignal::new())
                    .await;
                let took = started.elapsed();
                assert!(
                    matches!(outcome, Outcome::Succeeded(_)),
                    "{name}: {outcome:?}"
                );
                if i >= n / 10 {
                    samples.push(took);
                }
            }
            percentiles(&mut samples)
        })
    };
    let (echo50, echo99) = measure(
        Path::new(wasmgear_test_artifacts::ECHO),
        "echo",
        b"x",
        // Cheap enough for many samples, which steadies the median on a noisy machine.
        plan.isolation * 10,
    );

    let mut fork_exit = Vec::with_capacity(plan.isolation);
    for _ in 0..plan.isolation {
        let started = Instant::now();
        // SAFETY: the child calls only `_exit`, which is async-signal-safe. (The one unsafe
        // block of the benchmarks: fork is what this row measures.)
        #[allow(unsafe_code)]
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                libc::_exit(0);
            }
            assert!(pid > 0, "fork failed");
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
        fork_exit.push(started.elapsed());
    }
    let (fork50, fork99) = percentiles(&mut fork_exit);
    let mut fork_exec = Vec::with_capacity(plan.isolation);
    for _ in 0..plan.isolation.min(2000) {
        let started = Instant::now();
        let status = std::process::Command::new("/bin/true").status().unwrap();
        assert!(status.success());
        fork_exec.push(started.elapsed());
    }
    let (exec50, exec99) = percentiles(&mut fork_exec);
    let ratio = |ours: Duration, theirs: Duration| {
        let times = theirs.as_secs_f64() / ours.as_secs_f64();
        if times >= 1.0 {
            format!("{times:.0}× cheaper")
        } else {
            format!("{:.1}× dearer", 1.0 / times)
        }
    };
    rows.push(row(
        "isolation: echo instance+call+drop vs fork+exit, p50",
        us(echo50),
        us(fork50),
        ratio(echo50, fork50),
    ));
    rows.push(row(
        "  same, p99",
        us(echo99),
        us(fork99),
        ratio(echo99, fork99),
    ));
    rows.push(row(
        "isolation: echo vs fork+exec /bin/true, p50",
        us(echo50),
        us(exec50),
        ratio(echo50, exec50),
    ));
    rows.push(row(
        "  same, p99",
        us(echo99),
        us(exec99),
        ratio(echo99, exec99),
    ));

    // The Python and JavaScript examples (built here; their toolchains come from setup).
    let out = tempfile::tempdir().unwrap();
    for name in ["wordcount-python", "wordcount-js"] {
        if let Err(why) = common::build_plugin(name, out.path(), true) {
            rows.push(row(
                format!("isolation: {name}"),
                format!("not built: {why}"),
                "",
                "",
            ));
            continue;
        }
        let path = out.path().join(format!("{name}.wasm"));
        let n = (plan.isolation / 10).max(50);
        let (p50, p99) = measure(&path, name, br#"{"text": "a b c"}"#, n);
        rows.push(row(
            format!("isolation: {name} instance+call+drop, p50 / p99"),
            format!("{} / {}", us(p50), us(p99)),
            us(exec50),
            ratio(p50, exec50),
        ));
    }
}
