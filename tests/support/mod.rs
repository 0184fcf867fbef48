//! Support code only some of these tests use: the real clients of other queues
//! ([`clients`], [`gearmonkey`], [`worqr`]), a browser for the dashboard ([`browser`]),
//! raw calls of the Functions library ([`library`]), a worker without plugins ([`hand`])
//! and small builders and waits of jobs ([`jobs`]). The harnesses every test, benchmark
//! and client suite shares (Redis servers, clusters, worker processes, bounded polling) are
//! the `wasmgear-testkit` crate.

pub mod browser;
pub mod clients;
pub mod gearmonkey;
pub mod hand;
pub mod jobs;
pub mod library;
pub mod worqr;
