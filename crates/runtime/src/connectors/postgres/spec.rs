//! The keys of `kind: postgres`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::HumanDuration;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresSinkSpec {
    /// The input: a node name, or `node.port`.
    pub from: String,
    /// A libpq-style connection string (`host=127.0.0.1 port=5432 user=postgres dbname=test`)
    /// or URL (`postgresql://user@host:5432/db`).
    #[schemars(length(min = 1))]
    pub connection: String,
    /// The table rows go into. Its columns must include every column of the input.
    #[schemars(length(min = 1, max = 63))]
    pub table: String,
    /// The table's schema; leave out for the connection's search path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Columns of a unique key: rows are upserted by it (the last row of a key wins), so a
    /// changelog converges on the latest value per key. Leave out to append.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// Create the table from the input's columns (and `key` as its primary key) if missing.
    #[serde(default)]
    pub create_table: bool,
    /// The staging table used for exactly-once commits (default `<table>__weir_stage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub staging_table: Option<String>,
    /// Rows written per `COPY`.
    #[serde(default = "default_pg_batch_size")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub batch_size: u32,
    /// Longest time a row waits in a subtask before it is written.
    #[serde(default = "default_pg_flush_interval")]
    pub flush_interval: HumanDuration,
    #[serde(default)]
    pub pool: PostgresPoolSpec,
    #[serde(default)]
    pub retry: PostgresRetrySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

fn default_pg_batch_size() -> u32 {
    5_000
}

fn default_pg_flush_interval() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(1))
}

/// The sink's connection pool, shared by its subtasks.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresPoolSpec {
    /// Most connections open at once.
    #[serde(default = "default_pg_pool_size")]
    #[schemars(range(min = 1, max = 256))]
    pub max_size: u32,
    /// Longest wait for a free connection.
    #[serde(default = "default_pg_acquire_timeout")]
    pub acquire_timeout: HumanDuration,
    /// Longest wait for a new connection to open.
    #[serde(default = "default_pg_connect_timeout")]
    pub connect_timeout: HumanDuration,
}

impl Default for PostgresPoolSpec {
    fn default() -> Self {
        Self {
            max_size: default_pg_pool_size(),
            acquire_timeout: default_pg_acquire_timeout(),
            connect_timeout: default_pg_connect_timeout(),
        }
    }
}

fn default_pg_pool_size() -> u32 {
    4
}

fn default_pg_acquire_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}

fn default_pg_connect_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}

/// Retries of a failed write: transient failures only (connection lost or refused, server
/// restarting, serialization conflicts); permanent ones fail the job at once.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PostgresRetrySpec {
    /// Attempts in all before the job fails.
    #[serde(default = "default_pg_attempts")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_attempts: u32,
    /// Wait after the first failure; doubles after each (plus jitter, see [`Self::delays`]).
    #[serde(default = "default_pg_initial_backoff")]
    pub initial_backoff: HumanDuration,
    /// Longest wait between attempts.
    #[serde(default = "default_pg_max_backoff")]
    pub max_backoff: HumanDuration,
}

impl PostgresRetrySpec {
    /// The waits between attempts, `max-attempts - 1` of them: `initial-backoff` doubling up
    /// to `max-backoff`, each plus a random part of up to its own length (backon's jitter), so
    /// that the subtasks of a sink that lost its database together do not all come back in
    /// the same millisecond.
    pub fn delays(&self) -> backon::ExponentialBackoff {
        use backon::BackoffBuilder;
        backon::ExponentialBuilder::default()
            .with_min_delay(self.initial_backoff.0)
            .with_max_delay(self.max_backoff.0.max(self.initial_backoff.0))
            .with_max_times(self.max_attempts.saturating_sub(1) as usize)
            .with_jitter()
            .build()
    }
}

impl Default for PostgresRetrySpec {
    fn default() -> Self {
        Self {
            max_attempts: default_pg_attempts(),
            initial_backoff: default_pg_initial_backoff(),
            max_backoff: default_pg_max_backoff(),
        }
    }
}

fn default_pg_attempts() -> u32 {
    10
}

fn default_pg_initial_backoff() -> HumanDuration {
    HumanDuration(std::time::Duration::from_millis(100))
}

fn default_pg_max_backoff() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_doubling_delays_with_jitter_up_to_as_much_again() {
        let retry = PostgresRetrySpec {
            max_attempts: 6,
            initial_backoff: HumanDuration::from_millis(100),
            max_backoff: HumanDuration::from_millis(500),
        };
        // Naively: 100, 200, 400, 500, 500 ms, each plus a jitter in [0, itself).
        let expected = [100u64, 200, 400, 500, 500];
        let mut seen_jitter = false;
        for _ in 0..20 {
            let waits: Vec<_> = retry.delays().collect();
            assert_eq!(waits.len(), expected.len(), "max-attempts - 1 waits");
            for (wait, base) in waits.iter().zip(expected) {
                let base = std::time::Duration::from_millis(base);
                assert!(*wait >= base && *wait < base * 2, "{wait:?} for {base:?}");
                seen_jitter |= *wait != base;
            }
        }
        assert!(seen_jitter, "the waits are jittered");
        let once = PostgresRetrySpec {
            max_attempts: 1,
            ..retry
        };
        assert_eq!(once.delays().count(), 0, "one attempt: no retry");
    }
}
