//! wasmgear's integration tests: real `redis-server`s started per test, real components
//! built from `plugins/`, the library API and the real `wasmgear` binary.

#[path = "../support/mod.rs"]
mod support;

mod batch_plugins;
mod batches;
mod cancel;
mod chaos;
mod checkpoints;
mod children;
mod cli_conventions;
mod cli_jobs;
mod cluster;
mod dashboard;
mod dedup;
mod dependencies;
mod deploy;
mod expiry;
mod failover;
mod fairness;
mod flows;
mod gearman;
mod groups;
mod hand_offs;
mod harness;
mod http_api;
mod job_limits;
mod job_options;
mod languages;
mod lease;
mod lost_replies;
mod manifest;
mod model;
mod observe;
mod openapi_fuzz;
mod operate;
mod plugin_dir;
mod pubsub;
mod qless;
mod queue_controls;
mod queue_invariants;
mod queue_reports;
mod redis_urls;
mod reload;
mod replication;
mod run_local;
mod rust_api;
mod sandbox;
mod schedule;
mod sdk_languages;
mod sources;
mod structure;
mod traces;
mod waits;
mod worker_process;
mod worqr;
