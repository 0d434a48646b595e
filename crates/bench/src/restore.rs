//! `weir bench restore`: restoring operator state with many offsets in merged files: weir's
//! seek-free reader beside one seek and ranged request per offset, from an in-memory store
//! with injected latency and from an S3-compatible server.

use std::time::{Duration, Instant};

use crate::measure::median;

/// The naive restore, the baseline arm of `weir bench restore`: the metadata, then one seek and
/// one ranged request per offset, each range verified.
async fn restore_per_offset(
    snapshot: &weir_checkpoint::catalog::SnapshotRef,
) -> anyhow::Result<weir_checkpoint::RestoreStats> {
    use weir_checkpoint::reader::read_one_per_range;
    let started = Instant::now();
    let metadata = snapshot.metadata().await?;
    let (wanted, sums) = operator_ranges(snapshot, &metadata)?;
    let (states, mut stats) = read_one_per_range(snapshot.storage.as_ref(), &wanted).await?;
    for (bytes, sum) in states.iter().zip(&sums) {
        anyhow::ensure!(
            weir_checkpoint::metadata::checksum(bytes) == *sum,
            "checksum mismatch"
        );
    }
    stats.elapsed_us = started.elapsed().as_micros() as u64;
    Ok(stats)
}

/// Every subtask's operator-state range in `metadata`, and its checksum.
fn operator_ranges(
    snapshot: &weir_checkpoint::catalog::SnapshotRef,
    metadata: &weir_checkpoint::metadata::CheckpointMetadata,
) -> anyhow::Result<(Vec<weir_checkpoint::reader::Wanted>, Vec<String>)> {
    let mut wanted = Vec::new();
    let mut sums = Vec::new();
    for s in metadata.nodes.iter().flat_map(|n| &n.subtasks) {
        if let Some(r) = &s.operator {
            let file = metadata
                .operator_state
                .get(r.file as usize)
                .ok_or_else(|| anyhow::anyhow!("no merged file {}", r.file))?;
            wanted.push(weir_checkpoint::reader::Wanted {
                key: snapshot.key(&file.path),
                offset: r.offset,
                length: r.length,
            });
            sums.push(r.xxh3.clone());
        }
    }
    Ok((wanted, sums))
}

/// Writes checkpoint `id` with the operator state of `offsets` subtasks (about `state_bytes`
/// each, seeded), merged as the coordinator merges it; returns the number of merged files.
async fn write_operator_snapshot(
    catalog: &weir_checkpoint::JobCheckpoints,
    id: u64,
    offsets: usize,
    state_bytes: usize,
) -> anyhow::Result<usize> {
    use weir_checkpoint::publish::{MERGED_FILE_TARGET, merge_operator_states};
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ offsets as u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let states: Vec<Vec<u8>> = (0..offsets)
        .map(|_| {
            let len = state_bytes / 2 + (next() as usize) % state_bytes.max(1);
            (0..len).map(|_| next() as u8).collect()
        })
        .collect();
    let keyed: Vec<((usize, u32), &[u8])> = states
        .iter()
        .enumerate()
        .map(|(i, s)| ((0, i as u32), s.as_slice()))
        .collect();
    let (files, ranges) = merge_operator_states(&keyed, MERGED_FILE_TARGET);
    let count = files.len();
    let ranges = ranges.into_iter().map(|(_, range)| range).collect();
    weir_checkpoint::fixtures::publish_operator_state(catalog, id, files, ranges).await?;
    Ok(count)
}

pub(crate) fn run(
    offsets: &[usize],
    latencies: &[Duration],
    state_bytes: usize,
    s3: Option<&str>,
    runs: usize,
) -> anyhow::Result<()> {
    use std::sync::Arc;
    use weir_checkpoint::metadata::SnapshotKind;
    use weir_checkpoint::object_store::memory::InMemory;
    use weir_checkpoint::object_store::throttle::{ThrottleConfig, ThrottledStore};
    use weir_checkpoint::restore::Restored;
    use weir_checkpoint::{CheckpointStorage, JobCheckpoints, ObjectStorage, StorageConfig};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut stores: Vec<(String, Arc<dyn CheckpointStorage>)> = latencies
        .iter()
        .map(|latency| {
            let store = ThrottledStore::new(
                InMemory::new(),
                ThrottleConfig {
                    wait_get_per_call: *latency,
                    ..ThrottleConfig::default()
                },
            );
            let storage: Arc<dyn CheckpointStorage> =
                Arc::new(ObjectStorage::new(Arc::new(store), "memory://bench", ""));
            (
                format!(
                    "in memory, {} per request",
                    humantime::format_duration(*latency)
                ),
                storage,
            )
        })
        .collect();
    if let Some(endpoint) = s3 {
        let key = |var: &str| std::env::var(var).unwrap_or_else(|_| "test".into());
        let config = StorageConfig {
            url: format!("s3://weir-bench/{}", std::process::id()),
            endpoint: Some(endpoint.to_string()),
            region: Some(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())),
            access_key_id: Some(key("AWS_ACCESS_KEY_ID")),
            secret_access_key: Some(key("AWS_SECRET_ACCESS_KEY")),
            allow_http: Some(endpoint.starts_with("http://")),
            request_timeout: Some(Duration::from_secs(10)),
            max_retries: Some(1),
        };
        let storage: Arc<dyn CheckpointStorage> = Arc::new(ObjectStorage::s3(&config)?);
        match runtime.block_on(storage.put("probe", vec![0])) {
            Ok(_) => stores.push((format!("S3 server at {endpoint}"), storage)),
            Err(e) => eprintln!("bench restore: skipping the S3 server: {e}"),
        }
    }
    println!(
        "Restore of operator state: the metadata, then every offset's range read and verified. \
         Baseline: one seek and one ranged request per offset (Flink's reader before it skipped \
         seeks); weir: the seek-free reader (sorted ranges, no seek when positioned, contiguous \
         ranges coalesced into one request per merged file). About {state_bytes} B per offset; \
         median span of {runs} runs per arm, arms interleaved."
    );
    println!();
    println!(
        "| store | offsets | merged files | baseline span | baseline requests | weir span | \
         weir requests | seeks performed | seeks skipped | weir / baseline |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, storage) in &stores {
        let catalog = JobCheckpoints::new(storage.clone(), "bench-restore");
        for (i, &n) in offsets.iter().enumerate() {
            let id = i as u64 + 1;
            let files = runtime.block_on(write_operator_snapshot(&catalog, id, n, state_bytes))?;
            let snapshot = catalog.snapshot(SnapshotKind::Checkpoint, id);
            let mut base = Vec::new();
            let mut ours = Vec::new();
            let (mut base_stats, mut our_stats) = (None, None);
            for _ in 0..runs {
                let b = runtime.block_on(restore_per_offset(&snapshot))?;
                base.push(b.elapsed_us as f64);
                base_stats = Some(b);
                let started = Instant::now();
                let r = runtime.block_on(Restored::open(snapshot.clone()))?;
                ours.push(started.elapsed().as_micros() as f64);
                our_stats = Some(r.stats);
            }
            let (Some(b), Some(o)) = (base_stats, our_stats) else {
                continue;
            };
            let (base, ours) = (median(base), median(ours));
            println!(
                "| {name} | {n} | {files} | {:.1} ms | {} | {:.1} ms | {} | {} | {} | {:.3}× |",
                base / 1000.0,
                b.requests,
                ours / 1000.0,
                o.requests,
                o.seeks_performed,
                o.seeks_skipped,
                ours / base
            );
        }
        // Leave nothing behind on a real server.
        if name.starts_with("S3") {
            runtime.block_on(async {
                let _ = storage.delete("probe").await;
                weir_checkpoint::storage::delete_prefix(storage.as_ref(), "").await
            })?;
        }
    }
    Ok(())
}
