//! Where one run of a job keeps its keyed state: heap or RocksDB, from the job's `state`
//! section, under a working directory of the run's own.
//!
//! [`StateSettings`] is made once per run by [`super::job::start`] (planning makes none: a
//! plan is a description, so `weir validate` creates no directory and no block cache) and
//! handed to every subtask as its [`KeyedStateStore`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use weir_state::key_groups::KeyGroupRange;
use weir_state::{BlockCache, KeyedStateBackend, RocksConfig, StateOptions};

use crate::api::{KeyedStateStore, OperatorError, SubtaskContext};
use crate::spec::paths::{data_dir, safe_name};
use crate::spec::{Compression, JobSpec, StateBackendKind};

/// The state settings of one run of a job, shared by its keyed operators.
pub struct StateSettings {
    key_groups: u32,
    kind: StateBackendKind,
    /// This run's working directory: RocksDB databases (one per keyed subtask and attempt),
    /// snapshots being stored, state being restored.
    run_dir: PathBuf,
    /// One block cache for every database of the run.
    block_cache: Option<BlockCache>,
    write_buffer: usize,
    compression: weir_state::Compression,
    cache_entries: usize,
    ttl_ms: Option<i64>,
}

impl std::fmt::Debug for StateSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateSettings")
            .field("kind", &self.kind)
            .field("run_dir", &self.run_dir)
            .finish()
    }
}

impl StateSettings {
    /// The settings of a new run of `spec`, with a working directory of its own (named by
    /// start time, process and a counter, so that runs never share one).
    pub fn for_run(spec: &JobSpec) -> Self {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let root = spec
            .state
            .path
            .as_ref()
            .map_or_else(|| data_dir().join("state"), PathBuf::from);
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let run = format!(
            "{started}-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        );
        let rocks = spec.state.backend == StateBackendKind::Rocksdb;
        Self {
            key_groups: spec.key_groups,
            kind: spec.state.backend,
            run_dir: root.join(safe_name(&spec.name)).join(run),
            block_cache: rocks
                .then(|| RocksConfig::shared_block_cache(spec.state.block_cache.0 as usize)),
            write_buffer: spec.state.write_buffer.0 as usize,
            compression: match spec.state.compression {
                Compression::None => weir_state::Compression::None,
                Compression::Lz4 => weir_state::Compression::Lz4,
                Compression::Zstd => weir_state::Compression::Zstd,
            },
            cache_entries: spec.state.cache_entries as usize,
            ttl_ms: spec.state.ttl.map(|t| t.as_millis_i64()),
        }
    }

    /// The run's working directory, removed when the run ends.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }
}

impl KeyedStateStore for StateSettings {
    fn open(
        &self,
        node: &str,
        ctx: &SubtaskContext,
        ttl_ms: Option<i64>,
    ) -> Result<KeyedStateBackend, OperatorError> {
        let range = KeyGroupRange::of_subtask(ctx.subtask, self.key_groups, ctx.parallelism);
        let defaults = StateOptions {
            ttl_ms: ttl_ms.or(self.ttl_ms),
        };
        let sources = ctx.restore.as_ref().map_or(&[][..], |r| r.keyed.as_slice());
        let failed = |what: &str, e: weir_state::StateError| {
            OperatorError::external(
                format!(
                    "{what} the state of `{node}` (subtask {}): {e}",
                    ctx.subtask
                ),
                e,
            )
        };
        let backend = match (&self.kind, &self.block_cache) {
            (StateBackendKind::Rocksdb, Some(cache)) => {
                let config = RocksConfig {
                    path: self
                        .run_dir
                        .join(format!("attempt-{}", ctx.attempt))
                        .join(format!("{}-{}", safe_name(node), ctx.subtask)),
                    block_cache: cache.clone(),
                    write_buffer: self.write_buffer,
                    compression: self.compression,
                    cache_entries: self.cache_entries,
                };
                if sources.is_empty() {
                    KeyedStateBackend::rocksdb(self.key_groups, range, config)
                        .map_err(|e| failed("opening", e))?
                } else {
                    KeyedStateBackend::restore_rocksdb(self.key_groups, range, config, sources)
                        .map_err(|e| failed("restoring", e))?
                }
            }
            _ if sources.is_empty() => KeyedStateBackend::heap(self.key_groups, range),
            _ => KeyedStateBackend::restore_heap(self.key_groups, range, sources)
                .map_err(|e| failed("restoring", e))?,
        };
        Ok(backend.with_defaults(defaults))
    }
}
