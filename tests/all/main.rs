//! wasmgear's integration tests: real `redis-server`s started per test, real components
//! built from `plugins/`, the library API and the real `wasmgear` binary.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod cancel;
mod chaos;
mod children;
mod cli;
mod cluster;
mod commands;
mod dashboard;
mod deploy;
mod features;
mod gearman;
mod hardening;
mod hardening3;
mod harness;
mod http;
mod languages;
mod lease;
mod manifest;
mod model;
mod observe;
mod openapi_fuzz;
mod operate;
mod plugin_dir;
mod pubsub;
mod qless;
mod reload;
mod run_local;
mod sandbox;
mod schedule;
mod sources;
mod structure;
mod worqr;
