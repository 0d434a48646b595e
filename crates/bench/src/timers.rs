//! `weir bench timers`: timer set+delete throughput with many timers pending, heap and
//! RocksDB, beside the naive arm that recomputes the watermark hold by scanning every timer.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::measure::group;

pub(crate) fn run(
    pending: &[u64],
    ops: u64,
    scan_budget: Duration,
    data: &Path,
) -> anyhow::Result<()> {
    use weir_runtime::state::{KeyGroupRange, KeyRef, KeyedStateBackend, RocksConfig, TimeDomain};
    println!(
        "Timer set + delete (with holds) while N timers are pending; the scan arm recomputes the \
         hold by visiting every pending timer after each set and each delete (Beam's regression)."
    );
    println!();
    println!(
        "| backend | pending | set+delete/s | scan arm set+delete/s | real / scan | real vs 1,000 pending |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for backend in ["heap", "rocksdb"] {
        let mut first_rate = None;
        for &n in pending {
            let dir = data.join(format!("timers-{}", std::process::id()));
            let range = KeyGroupRange::of_subtask(0, 128, 1);
            let mut state = match backend {
                "heap" => KeyedStateBackend::heap(128, range),
                _ => KeyedStateBackend::rocksdb(
                    128,
                    range,
                    RocksConfig {
                        path: dir.clone(),
                        block_cache: RocksConfig::shared_block_cache(64 << 20),
                        write_buffer: 64 << 20,
                        compression: weir_runtime::state::Compression::Lz4,
                        cache_entries: 100_000,
                    },
                )?,
            };
            // The pending timers: far in the future, each holding the watermark.
            for i in 0..n {
                let key = i.to_be_bytes();
                state.timers().set(
                    TimeDomain::EventTime,
                    1_000_000_000 + i as i64,
                    KeyRef::new((i % 128) as u32, &key),
                    b"",
                    Some(1_000_000 + i as i64),
                )?;
            }
            state.flush()?;
            let op = |state: &mut KeyedStateBackend, i: u64| -> anyhow::Result<()> {
                let key = (u64::MAX - i).to_be_bytes();
                let k = KeyRef::new((i % 128) as u32, &key);
                let t = 5_000_000 + (i % 10_000) as i64;
                state
                    .timers()
                    .set(TimeDomain::EventTime, t, k, b"w", Some(t - 10))?;
                state.timers().delete(TimeDomain::EventTime, t, k, b"w")?;
                Ok(())
            };
            let t0 = Instant::now();
            for i in 0..ops {
                op(&mut state, i)?;
            }
            state.flush()?;
            let rate = ops as f64 / t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let mut scanned = 0u64;
            while t1.elapsed() < scan_budget && scanned < ops {
                op(&mut state, scanned)?;
                // The naive arm: two full scans per pair (after the set and after the delete).
                state.timers().min_hold_by_scan()?;
                state.timers().min_hold_by_scan()?;
                scanned += 1;
            }
            let scan_rate = scanned as f64 / t1.elapsed().as_secs_f64();
            let base = *first_rate.get_or_insert(rate);
            println!(
                "| {backend} | {} | {} | {} | {:.0}× | {:.2}× |",
                group(n),
                group(rate as u64),
                group(scan_rate as u64),
                rate / scan_rate.max(1e-9),
                base / rate,
            );
            state.close()?;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}
