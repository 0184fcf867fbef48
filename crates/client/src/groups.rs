//! Groups: fairness inside a function. A job enqueued with a group
//! ([`EnqueueOptions::group`](crate::EnqueueOptions::group): a tenant, customer or document
//! key) is leased round robin with the other groups' jobs; each group runs within its own
//! limits, the function's defaults ([`Setting::GroupConcurrency`](crate::Setting::GroupConcurrency),
//! [`Setting::GroupRateLimit`](crate::Setting::GroupRateLimit)) unless it has its own
//! ([`Client::configure_group`]), and may be paused on its own. A group of concurrency 1 is a
//! sequence: its jobs run one at a time, in order.

use std::time::Duration;

use serde::Serialize;
use wasmgear_proto::FunctionName;
use wasmgear_proto::limits::MAX_GROUPS_LISTED;

use crate::options::check_group;
use crate::{Client, QueueError, Result, scripts};

/// A group's own settings (each `None`: the function's default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupConfig {
    /// The most of its jobs running at once, over all workers.
    pub concurrency: Option<u64>,
    /// The most of its leases per interval: `(leases, interval)`.
    #[serde(serialize_with = "crate::admin::rate_as_text")]
    pub rate_limit: Option<(u64, Duration)>,
    /// Workers lease none of its jobs (the other groups go on).
    pub paused: bool,
}

impl GroupConfig {
    /// Reads the queue's `CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|PAUSED` text.
    fn from_text(text: &str) -> Self {
        let parts: Vec<&str> = text.split('|').collect();
        let number = |i: usize| parts.get(i).and_then(|p| p.parse::<u64>().ok());
        GroupConfig {
            concurrency: number(0),
            rate_limit: number(1)
                .zip(number(2))
                .map(|(n, ms)| (n, Duration::from_millis(ms))),
            paused: parts.get(3) == Some(&"1"),
        }
    }
}

/// One change to a group's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSetting {
    /// Pause (`true`) or resume the group.
    Paused(bool),
    /// Its own concurrency (`None`: the function's default again).
    Concurrency(Option<u64>),
    /// Its own rate limit (`None`: the function's default again).
    RateLimit(Option<(u64, Duration)>),
}

/// One group of a function, as [`Client::groups`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupInfo {
    /// The group key.
    pub group: String,
    /// Its jobs ready to run.
    pub ready: u64,
    /// Its jobs holding a slot: running (and a sequence's job waiting out a retry's backoff).
    pub running: u64,
    /// Its own settings.
    pub config: GroupConfig,
    /// Until when it waits for its rate window (ms since the epoch), if it does.
    pub rate_limited_until_ms: Option<u64>,
}

/// A function's groups, the deepest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupsOverview {
    /// How many groups have ready jobs, running jobs or their own settings.
    pub groups: u64,
    /// More groups than the queue looks at in one call exist; `groups` counts those it did.
    pub truncated: bool,
    /// Ready jobs without a group (they take their turns as one group).
    pub ungrouped_ready: u64,
    /// The deepest groups (most ready jobs first), at most as many as asked for.
    pub listed: Vec<GroupInfo>,
}

impl Client {
    /// Changes the own settings of `group` of `function`; idle workers see the change at
    /// once. Returns the group's own settings afterwards.
    pub async fn configure_group(
        &self,
        function: &FunctionName,
        group: &str,
        settings: &[GroupSetting],
    ) -> Result<GroupConfig> {
        check_group(group)?;
        let mut call = scripts::on_function(&scripts::CONFIGURE_GROUP, function);
        call.arg(group);
        let text = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        for setting in settings {
            match setting {
                GroupSetting::Paused(paused) => {
                    call.arg("paused").arg(if *paused { "1" } else { "" });
                }
                GroupSetting::Concurrency(cap) => {
                    if *cap == Some(0) {
                        return Err(QueueError::BadOption(format!(
                            "a concurrency of 0 would stop group {group}; pause it instead"
                        )));
                    }
                    call.arg("concurrency").arg(text(*cap));
                }
                GroupSetting::RateLimit(rate) => {
                    crate::admin::rate_args(&mut call, "rate_limit", "rate_interval_ms", *rate)?;
                }
            }
        }
        self.register(function).await?;
        let own: Vec<String> = call
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(bad_args)?;
        Ok(GroupConfig::from_text(&own.join("|")))
    }

    /// The groups of `function`, the deepest first: at most `most` of them (1 to
    /// [`MAX_GROUPS_LISTED`]), or only `only`.
    pub async fn groups(
        &self,
        function: &FunctionName,
        most: usize,
        only: Option<&str>,
    ) -> Result<GroupsOverview> {
        if most == 0 || most as u64 > MAX_GROUPS_LISTED {
            return Err(QueueError::BadOption(format!(
                "list 1 to {MAX_GROUPS_LISTED} groups, not {most}"
            )));
        }
        if let Some(group) = only {
            check_group(group)?;
        }
        type Row = (String, u64, u64, String, u64);
        let (groups, truncated, ungrouped_ready, rows): (u64, u8, u64, Vec<Row>) =
            scripts::on_function(&scripts::GROUPS, function)
                .arg(most)
                .arg(only.unwrap_or(""))
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(bad_args)?;
        Ok(GroupsOverview {
            groups,
            truncated: truncated == 1,
            ungrouped_ready,
            listed: rows
                .into_iter()
                .map(|(group, ready, running, own, waits)| GroupInfo {
                    group,
                    ready,
                    running,
                    config: GroupConfig::from_text(&own),
                    rate_limited_until_ms: (waits > 0).then_some(waits),
                })
                .collect(),
        })
    }
}

/// Reads a script's `BADARGS ...` refusal as [`QueueError::BadOption`].
fn bad_args(e: redis::RedisError) -> QueueError {
    match (e.code(), e.detail()) {
        (Some("BADARGS"), Some(detail)) => QueueError::BadOption(detail.to_string()),
        _ => QueueError::Redis(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_s_settings_read_from_the_queue_s_text() {
        assert_eq!(GroupConfig::from_text(""), GroupConfig::default());
        assert_eq!(GroupConfig::from_text("|||"), GroupConfig::default());
        assert_eq!(
            GroupConfig::from_text("1|10|60000|1"),
            GroupConfig {
                concurrency: Some(1),
                rate_limit: Some((10, Duration::from_secs(60))),
                paused: true,
            }
        );
        assert_eq!(
            GroupConfig::from_text("|5||"),
            GroupConfig::default(),
            "a rate without its interval is none"
        );
    }
}
