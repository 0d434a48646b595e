//! Seek-free reading of many small ranges from a few merged files.
//!
//! A restore needs the operator state of every subtask: many small ranges of a few merged
//! files. Apache Flink once read them with one seek per range; on object storage every seek is
//! a new ranged request with tens of milliseconds of latency, and skipping the seek when the
//! stream already sat at the next offset cut its restore phase by 31–45% (lesson 5 of the
//! design brief). This reader goes further:
//!
//! 1. it sorts what it must read by file and offset;
//! 2. it tracks its logical position in the file: a range that starts where the reader is
//!    needs no seek (counted as a seek *skipped*), nor does one a small forward gap ahead
//!    (up to [`ReaderConfig::max_gap`] bytes, read through and dropped);
//! 3. ranges read without a seek join the same request, so contiguous ranges cost one ranged
//!    read (one GET on object storage) per merged file. Only a backward jump or a gap larger
//!    than `max-gap` is a seek *performed*, and starts a new request.
//!
//! [`plan`] is the pure part (which requests, which counters) and [`read`] runs a plan;
//! [`RestoreStats`] holds the counters of one restore. [`read_one_per_range`] is the naive
//! reader (a seek and a request per range), kept as the baseline arm of `weir bench restore`.

use std::ops::Range;
use std::time::Instant;

use futures::stream::{self, StreamExt, TryStreamExt};

use crate::error::RestoreError;
use crate::storage::CheckpointStorage;

/// A range a restore needs: `length` bytes at `offset` of the object `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub key: String,
    pub offset: u64,
    pub length: u64,
}

impl Wanted {
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.length)
    }
}

/// How the reader turns ranges into requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderConfig {
    /// A forward gap of at most this many bytes is read through (fetched and dropped) instead
    /// of sought over. A request to object storage costs tens of milliseconds, in which
    /// hundreds of kilobytes stream in, so reading a small gap is cheaper than a new request.
    pub max_gap: u64,
    /// Most bytes one request fetches (bounds the memory a request holds): a longer run of
    /// ranges continues in a new request that starts where the last ended, without a seek.
    pub max_request: u64,
    /// Requests in flight at once (to different files, or consecutive parts of one).
    pub concurrency: usize,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        Self {
            max_gap: 256 << 10,
            max_request: 32 << 20,
            concurrency: 4,
        }
    }
}

/// The counters of one restore's reads: logged in one line when a snapshot is opened and kept
/// by the runtime with the job (`JobControl::restore_stats`).
#[derive(
    Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct RestoreStats {
    /// Ranges the restore needed (operator states of subtasks).
    pub ranges: u64,
    /// Distinct files those ranges lie in.
    pub files: u64,
    /// Repositionings: ranges that did not start where the reader was (nor a small gap
    /// ahead). Each starts a new request.
    pub seeks_performed: u64,
    /// Ranges read without repositioning: the reader already sat at their offset, or read
    /// through a small gap to it.
    pub seeks_skipped: u64,
    /// Requests made to storage (ranged GETs on object storage).
    pub requests: u64,
    /// Bytes fetched, gaps read through included.
    pub bytes_read: u64,
    /// Bytes of gaps read through and dropped.
    pub gap_bytes: u64,
    /// Wall time of the reads, in microseconds.
    pub elapsed_us: u64,
}

/// One request of a [`ReadPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub key: String,
    pub range: Range<u64>,
    /// What it serves: (index in the wanted list, offset in the request's bytes, length).
    pub parts: Vec<(usize, u64, u64)>,
}

/// The requests that serve a list of wanted ranges, and the counters known before reading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadPlan {
    pub requests: Vec<Request>,
    /// Everything but `bytes_read` and `elapsed_us`, which [`read`] fills in.
    pub stats: RestoreStats,
}

/// Plans the requests that read `wanted` (see the module's documentation).
pub fn plan(wanted: &[Wanted], config: &ReaderConfig) -> ReadPlan {
    let mut order: Vec<usize> = (0..wanted.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&wanted[a], &wanted[b]);
        (a.key.as_str(), a.offset, a.length).cmp(&(b.key.as_str(), b.offset, b.length))
    });
    let mut stats = RestoreStats {
        ranges: wanted.len() as u64,
        ..RestoreStats::default()
    };
    let mut requests: Vec<Request> = Vec::new();
    // The request being built, for the file being read.
    let mut current: Option<Request> = None;
    // Where the reader sits in that file: a newly opened file is read from its start.
    let mut position = 0u64;
    let max_request = config.max_request.max(1);
    for i in order {
        let w = &wanted[i];
        let end = w.end();
        let same_file = current.as_ref().is_some_and(|r| r.key == w.key);
        if !same_file {
            requests.extend(current.take());
            stats.files += 1;
            position = 0;
        }
        // Already fetched by the request being built (ranges that overlap): no seek, no read.
        let fetched = current
            .as_ref()
            .is_some_and(|r| r.range.start <= w.offset && end <= r.range.end);
        let positioned = w.offset >= position && w.offset - position <= config.max_gap;
        if fetched {
            stats.seeks_skipped += 1;
        } else if positioned
            || (w.offset < position && current.as_ref().is_some_and(|r| r.range.start <= w.offset))
        {
            // From where the reader is (or, for a range overlapping what is fetched, from the
            // end of it), read on: no seek.
            stats.seeks_skipped += 1;
            stats.gap_bytes += w.offset.saturating_sub(position);
            let fits = current
                .as_ref()
                .is_some_and(|r| end - r.range.start <= max_request);
            if !fits {
                requests.extend(current.take());
                current = Some(Request {
                    key: w.key.clone(),
                    range: position.min(w.offset)..end,
                    parts: Vec::new(),
                });
            }
        } else {
            // Backward, or too far forward: reposition, in a new request.
            stats.seeks_performed += 1;
            requests.extend(current.take());
            current = Some(Request {
                key: w.key.clone(),
                range: w.offset..end,
                parts: Vec::new(),
            });
        }
        if let Some(r) = current.as_mut() {
            r.range.end = r.range.end.max(end);
            r.parts.push((i, w.offset - r.range.start, w.length));
            position = r.range.end;
        }
    }
    requests.extend(current);
    stats.requests = requests.len() as u64;
    ReadPlan { requests, stats }
}

/// Reads `wanted` with the requests [`plan`] chooses; returns each range's bytes, in the
/// order of `wanted`, and the counters. A range the object does not hold in full (a truncated
/// or missing object) is reported as corrupt with its location.
pub async fn read(
    storage: &dyn CheckpointStorage,
    wanted: &[Wanted],
    config: &ReaderConfig,
) -> Result<(Vec<Vec<u8>>, RestoreStats), RestoreError> {
    let started = Instant::now();
    let ReadPlan {
        requests,
        mut stats,
    } = plan(wanted, config);
    let fetched: Vec<(Request, Vec<u8>)> = stream::iter(requests)
        .map(|r| async move {
            let bytes = fetch(storage, &r.key, r.range.clone()).await?;
            Ok::<_, RestoreError>((r, bytes))
        })
        .buffered(config.concurrency.max(1))
        .try_collect()
        .await?;
    let mut out = vec![Vec::new(); wanted.len()];
    // By value: each fetched buffer is freed once split, and a range that is a whole request is
    // moved, not copied.
    for (request, bytes) in fetched {
        stats.bytes_read += bytes.len() as u64;
        if let [(i, 0, length)] = request.parts[..]
            && length as usize == bytes.len()
        {
            out[i] = bytes;
            continue;
        }
        for &(i, at, length) in &request.parts {
            // `fetch` checked the length, so every part lies in `bytes`.
            let at = at as usize;
            out[i] = bytes
                .get(at..at + length as usize)
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
        }
    }
    stats.elapsed_us = started.elapsed().as_micros() as u64;
    Ok((out, stats))
}

/// The naive reader: one seek and one ranged request per range, one after the other, in the
/// order given (Flink's reader before it learned to skip seeks). Only the benchmark's
/// baseline arm uses it.
pub async fn read_one_per_range(
    storage: &dyn CheckpointStorage,
    wanted: &[Wanted],
) -> Result<(Vec<Vec<u8>>, RestoreStats), RestoreError> {
    let started = Instant::now();
    let mut stats = RestoreStats {
        ranges: wanted.len() as u64,
        ..RestoreStats::default()
    };
    let mut files: Vec<&str> = wanted.iter().map(|w| w.key.as_str()).collect();
    files.sort_unstable();
    files.dedup();
    stats.files = files.len() as u64;
    let mut out = Vec::with_capacity(wanted.len());
    for w in wanted {
        let bytes = fetch(storage, &w.key, w.offset..w.end()).await?;
        stats.seeks_performed += 1;
        stats.requests += 1;
        stats.bytes_read += bytes.len() as u64;
        out.push(bytes);
    }
    stats.elapsed_us = started.elapsed().as_micros() as u64;
    Ok((out, stats))
}

/// One ranged read, which must return the whole range.
async fn fetch(
    storage: &dyn CheckpointStorage,
    key: &str,
    range: Range<u64>,
) -> Result<Vec<u8>, RestoreError> {
    let asked = range.end - range.start;
    let corrupt = |reason: String| RestoreError::Corrupt {
        location: storage.location(key),
        reason,
    };
    match storage.get_range(key, range.clone()).await {
        Ok(bytes) if bytes.len() as u64 == asked => Ok(bytes),
        Ok(bytes) => Err(corrupt(format!(
            "{} bytes at {}..{} where {asked} were written (truncated)",
            bytes.len(),
            range.start,
            range.end
        ))),
        Err(e) if e.is_not_found() => Err(corrupt("the file is missing".into())),
        Err(e) if e.source.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(corrupt(format!("it ends before {} (truncated)", range.end)))
        }
        Err(e) => Err(RestoreError::reading(storage.location(key), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{LocalStorage, Placed};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// `n` ranges of `size` bytes each, laid out one after the other in `files` files (round
    /// robin), with `gap` bytes between neighbours.
    fn layout(n: usize, size: u64, gap: u64, files: usize) -> Vec<Wanted> {
        let mut next = vec![0u64; files];
        (0..n)
            .map(|i| {
                let f = i % files;
                let w = Wanted {
                    key: format!("job/chk-1/operator-state-{f}"),
                    offset: next[f],
                    length: size,
                };
                next[f] += size + gap;
                w
            })
            .collect()
    }

    #[test]
    fn contiguous_offsets_need_no_seek_and_one_request_per_file() {
        for n in [101, 203, 307, 409, 510] {
            let p = plan(&layout(n, 37, 0, 1), &ReaderConfig::default());
            assert_eq!(p.stats.seeks_performed, 0, "{n} offsets");
            assert_eq!(p.stats.seeks_skipped, n as u64);
            assert_eq!(p.stats.requests, 1);
            assert_eq!(p.requests[0].range, 0..n as u64 * 37);
            let p = plan(&layout(n, 37, 0, 3), &ReaderConfig::default());
            assert_eq!(
                (p.stats.seeks_performed, p.stats.requests, p.stats.files),
                (0, 3, 3)
            );
        }
    }

    #[test]
    fn order_of_the_wanted_list_does_not_matter() {
        let mut wanted = layout(307, 11, 0, 2);
        wanted.reverse();
        let p = plan(&wanted, &ReaderConfig::default());
        assert_eq!((p.stats.seeks_performed, p.stats.requests), (0, 2));
        // Each part still points at its own range.
        for r in &p.requests {
            for &(i, at, len) in &r.parts {
                assert_eq!(r.range.start + at, wanted[i].offset);
                assert_eq!(len, wanted[i].length);
            }
        }
    }

    #[test]
    fn gaps_cost_exactly_the_seeks_they_must() {
        let config = ReaderConfig {
            max_gap: 100,
            ..ReaderConfig::default()
        };
        // Small gaps are read through: no seek, one request, the gap bytes counted.
        let p = plan(&layout(101, 10, 100, 1), &config);
        assert_eq!(
            (p.stats.seeks_performed, p.stats.requests, p.stats.gap_bytes),
            (0, 1, 100 * 100)
        );
        // Gaps one byte too large: a seek (and a request) for each of the 100 gaps.
        let p = plan(&layout(101, 10, 101, 1), &config);
        assert_eq!(p.stats.seeks_performed, 100);
        assert_eq!(p.stats.seeks_skipped, 1, "the first range starts the file");
        assert_eq!(p.stats.requests, 101);
        assert_eq!(p.stats.gap_bytes, 0);
        // Three runs of contiguous ranges, two large gaps between them: two seeks.
        let mut wanted = layout(30, 8, 0, 1);
        for (i, w) in wanted.iter_mut().enumerate() {
            w.offset += (i as u64 / 10) * 1000;
        }
        let p = plan(&wanted, &config);
        assert_eq!((p.stats.seeks_performed, p.stats.requests), (2, 3));
        // A first range far into its file is a seek.
        let p = plan(
            &[Wanted {
                key: "f".into(),
                offset: 5000,
                length: 5,
            }],
            &config,
        );
        assert_eq!((p.stats.seeks_performed, p.stats.seeks_skipped), (1, 0));
    }

    #[test]
    fn overlapping_ranges_are_served_from_what_was_fetched() {
        let wanted = [
            Wanted {
                key: "f".into(),
                offset: 0,
                length: 100,
            },
            Wanted {
                key: "f".into(),
                offset: 10,
                length: 20,
            },
            Wanted {
                key: "f".into(),
                offset: 90,
                length: 30,
            },
        ];
        let p = plan(&wanted, &ReaderConfig::default());
        assert_eq!((p.stats.seeks_performed, p.stats.requests), (0, 1));
        assert_eq!(p.requests[0].range, 0..120);
    }

    #[test]
    fn long_runs_continue_in_new_requests_without_seeking() {
        let config = ReaderConfig {
            max_request: 1000,
            ..ReaderConfig::default()
        };
        let p = plan(&layout(100, 100, 0, 1), &config);
        assert_eq!((p.stats.seeks_performed, p.stats.requests), (0, 10));
        for pair in p.requests.windows(2) {
            assert_eq!(pair[0].range.end, pair[1].range.start);
        }
    }

    /// Local storage that counts ranged reads.
    #[derive(Debug)]
    struct Counting {
        inner: LocalStorage,
        ranged: AtomicU64,
    }

    impl CheckpointStorage for Counting {
        fn location(&self, key: &str) -> String {
            self.inner.location(key)
        }
        fn put(
            &self,
            key: &str,
            bytes: Vec<u8>,
        ) -> futures::future::BoxFuture<'_, Result<Placed, crate::StorageError>> {
            self.inner.put(key, bytes)
        }
        fn put_file(
            &self,
            key: &str,
            local: std::path::PathBuf,
        ) -> futures::future::BoxFuture<'_, Result<Placed, crate::StorageError>> {
            self.inner.put_file(key, local)
        }
        fn get(
            &self,
            key: &str,
            max: u64,
        ) -> futures::future::BoxFuture<'_, Result<Vec<u8>, crate::StorageError>> {
            self.inner.get(key, max)
        }
        fn get_range(
            &self,
            key: &str,
            range: Range<u64>,
        ) -> futures::future::BoxFuture<'_, Result<Vec<u8>, crate::StorageError>> {
            self.ranged.fetch_add(1, Ordering::Relaxed);
            self.inner.get_range(key, range)
        }
        fn get_to_file(
            &self,
            key: &str,
            local: std::path::PathBuf,
            immutable: bool,
            size: u64,
        ) -> futures::future::BoxFuture<'_, Result<Placed, crate::StorageError>> {
            self.inner.get_to_file(key, local, immutable, size)
        }
        fn list(
            &self,
            prefix: &str,
        ) -> futures::future::BoxFuture<
            '_,
            Result<Vec<crate::storage::ObjectInfo>, crate::StorageError>,
        > {
            self.inner.list(prefix)
        }
        fn delete(
            &self,
            key: &str,
        ) -> futures::future::BoxFuture<'_, Result<(), crate::StorageError>> {
            self.inner.delete(key)
        }
    }

    #[tokio::test]
    async fn reads_return_each_range_and_count_the_requests_made() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(Counting {
            inner: LocalStorage::new(dir.path()),
            ranged: AtomicU64::new(0),
        });
        // Two files of 510 ranges of varying sizes; each range's content is its index.
        let mut wanted = Vec::new();
        let mut expected = Vec::new();
        for f in 0..2 {
            let mut file = Vec::new();
            for i in 0..255u32 {
                let bytes: Vec<u8> =
                    std::iter::repeat_n((i % 251) as u8, 1 + (i as usize * 7) % 50).collect();
                wanted.push(Wanted {
                    key: format!("j/operator-state-{f}"),
                    offset: file.len() as u64,
                    length: bytes.len() as u64,
                });
                file.extend_from_slice(&bytes);
                expected.push(bytes);
            }
            storage
                .put(&format!("j/operator-state-{f}"), file)
                .await
                .unwrap();
        }
        let (got, stats) = read(storage.as_ref(), &wanted, &ReaderConfig::default())
            .await
            .unwrap();
        assert_eq!(got, expected);
        assert_eq!(stats.requests, 2);
        assert_eq!(storage.ranged.load(Ordering::Relaxed), 2);
        assert_eq!(stats.seeks_performed, 0);
        assert_eq!(
            stats.bytes_read,
            expected.iter().map(|b| b.len() as u64).sum::<u64>()
        );

        let (naive, baseline) = read_one_per_range(storage.as_ref(), &wanted).await.unwrap();
        assert_eq!(naive, expected);
        assert_eq!((baseline.requests, baseline.seeks_performed), (510, 510));
        assert_eq!(storage.ranged.load(Ordering::Relaxed), 2 + 510);

        // A range past the end of a (truncated) file is reported, with the file's location.
        let mut beyond = wanted.clone();
        beyond[0].length += 1_000_000;
        let e = read(storage.as_ref(), &beyond, &ReaderConfig::default())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("operator-state-0"), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
