//! The JSON-lines source decoding ahead on threads beside decoding inline: the same batches,
//! rows equal to a naive serde_json decode of each line, exact checkpoints, the same failures,
//! and no thread left behind.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use serde_json::{Value, json};

use super::JsonlSourceSpec;
use super::{JsonlSource, layout, restored_chunks};
use crate::api::{OperatorError, Source, SourceEvent, SubtaskMetrics};
use crate::format::lines::plan_chunks;

/// A decoded row: id, name, score, ok, user.age.
#[derive(Clone, Debug, PartialEq)]
struct Row(
    Option<i64>,
    Option<String>,
    Option<f64>,
    Option<bool>,
    Option<i64>,
);

/// Seeded xorshift.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// A seeded file of `count` lines: mostly good objects (fields in any order, some missing,
/// some null, undeclared ones, escapes), and blank lines, invalid JSON, type mismatches,
/// `\r\n` endings and sometimes no final line break. Returns the text and each line's offset.
fn random_file(seed: u64, count: usize) -> (String, Vec<u64>) {
    let mut next = rng(seed);
    let mut text = String::new();
    let mut offsets = Vec::new();
    for i in 0..count {
        offsets.push(text.len() as u64);
        let line = match next() % 20 {
            0 => String::new(),
            1 => format!(r#"{{"id":{i},"name":"#),
            2 => format!(r#"{{"id":"{i}x"}}"#),
            3 => "[1,2]".to_owned(),
            _ => {
                let mut fields = vec![format!(r#""id":{i}"#)];
                if !next().is_multiple_of(4) {
                    let name = match next() % 3 {
                        0 => format!("n{}", next() % 1000),
                        1 => format!(r#"quote \" and \\ {}"#, next() % 10),
                        _ => "caf\\u00e9 ☕".to_owned(),
                    };
                    fields.push(format!(r#""name":"{name}""#));
                }
                match next() % 3 {
                    0 => fields.push(format!(r#""score":{}.{}"#, next() % 100, next() % 1000)),
                    1 => fields.push(r#""score":null"#.to_owned()),
                    _ => {}
                }
                if next().is_multiple_of(2) {
                    fields.push(format!(r#""ok":{}"#, next().is_multiple_of(2)));
                }
                if next().is_multiple_of(2) {
                    fields.push(format!(r#""user":{{"age":{},"x":[1,{{}}]}}"#, next() % 90));
                }
                if next().is_multiple_of(5) {
                    fields.push(r#""extra":{"deep":[1,2,"three"]}"#.to_owned());
                }
                let n = fields.len();
                fields.rotate_left((next() as usize) % n);
                format!("{{{}}}", fields.join(","))
            }
        };
        text.push_str(&line);
        if next().is_multiple_of(10) {
            text.push('\r');
        }
        if i + 1 < count || next().is_multiple_of(2) {
            text.push('\n');
        }
    }
    (text, offsets)
}

/// The row of one line decoded naively with serde_json, or `None` if the line is skipped
/// (blank, not an object, not valid JSON, a field of another type).
fn naive(line: &str) -> Option<Row> {
    let line = line.trim_end_matches('\r');
    let value: Value = serde_json::from_str(line).ok()?;
    let object = value.as_object()?;
    let field = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    let int = |v: Option<Value>| -> Result<Option<i64>, ()> {
        v.map(|v| v.as_i64().ok_or(())).transpose()
    };
    let id = int(field(object.get("id"))).ok()?;
    let name = match field(object.get("name")) {
        Some(Value::String(s)) => Some(s),
        Some(_) => return None,
        None => None,
    };
    let score = field(object.get("score")).and_then(|v| v.as_f64());
    let ok = field(object.get("ok")).and_then(|v| v.as_bool());
    let age = int(field(object.get("user")).and_then(|u| u.get("age").cloned())).ok()?;
    Some(Row(id, name, score, ok, age))
}

/// The rows of the lines starting in `subtask`'s chunks, in file order.
fn expected(
    text: &str,
    offsets: &[u64],
    path: &Path,
    chunk_size: u64,
    subtask: usize,
    parallelism: usize,
) -> Vec<Row> {
    let chunks = plan_chunks(
        &[(path.to_path_buf(), text.len() as u64)],
        chunk_size,
        subtask,
        parallelism,
    );
    let owned = |offset: u64| chunks.iter().any(|c| (c.start..c.end).contains(&offset));
    text.split('\n')
        .zip(offsets)
        .filter(|&(_, &offset)| owned(offset))
        .filter_map(|(line, _)| naive(line))
        .collect()
}

fn rows(batches: &[(usize, RecordBatch)]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (port, batch) in batches {
        assert_eq!(*port, 0);
        let id = batch.column(0).as_primitive::<Int64Type>();
        let name = batch.column(1).as_string::<i32>();
        let score = batch.column(2).as_primitive::<Float64Type>();
        let ok = batch.column(3).as_boolean();
        let age = batch.column(4).as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            rows.push(Row(
                id.is_valid(i).then(|| id.value(i)),
                name.is_valid(i).then(|| name.value(i).to_owned()),
                score.is_valid(i).then(|| score.value(i)),
                ok.is_valid(i).then(|| ok.value(i)),
                age.is_valid(i).then(|| age.value(i)),
            ));
        }
    }
    rows
}

fn spec(path: &Path, chunk_size: u64, on_error: &str) -> JsonlSourceSpec {
    serde_json::from_value(json!({
        "path": path,
        "schema": {"id": "int", "name": "string", "score": "float", "ok": "bool",
                   "user": {"age": "int"}},
        "on-error": on_error,
        "chunk-size": chunk_size,
        "max-line-length": 400,
    }))
    .unwrap()
}

struct Subtask {
    source: JsonlSource,
    metrics: Arc<SubtaskMetrics>,
}

fn subtask(spec: &JsonlSourceSpec, len: u64, subtask: usize, p: usize, threads: usize) -> Subtask {
    let metrics = Arc::new(SubtaskMetrics::default());
    let files = [(PathBuf::from(&spec.path), len)];
    let source = JsonlSource::new(
        spec,
        &layout(spec).unwrap(),
        &files,
        subtask,
        p,
        &[true],
        7,
        metrics.clone(),
    )
    .with_decode_threads(threads);
    Subtask { source, metrics }
}

/// Every batch up to the end, or the error.
async fn drain(source: &mut JsonlSource) -> Result<Vec<(usize, RecordBatch)>, OperatorError> {
    let mut all = Vec::new();
    loop {
        match source.next().await? {
            SourceEvent::Batches(batches) => all.extend(batches),
            SourceEvent::End => return Ok(all),
        }
    }
}

#[tokio::test]
async fn decoding_ahead_gives_inline_batches_and_naive_rows() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..6 {
        let (text, offsets) = random_file(seed, 300 + 500 * seed as usize);
        let path = dir.path().join(format!("f{seed}.jsonl"));
        std::fs::write(&path, &text).unwrap();
        let len = text.len() as u64;
        for chunk_size in [256, 3000, 1 << 20] {
            let spec = spec(&path, chunk_size, "skip");
            for p in [1, 2] {
                for s in 0..p {
                    let mut inline = subtask(&spec, len, s, p, 0);
                    let batches = drain(&mut inline.source).await.unwrap();
                    let want = expected(&text, &offsets, &path, chunk_size, s, p);
                    let at = format!("seed {seed} chunk {chunk_size} subtask {s}/{p}");
                    assert_eq!(rows(&batches), want, "{at}: inline");
                    for threads in [2, 3] {
                        let mut ahead = subtask(&spec, len, s, p, threads);
                        let got = drain(&mut ahead.source).await.unwrap();
                        assert!(ahead.source.ahead.is_some(), "{at}: decoded ahead");
                        assert_eq!(got, batches, "{at}: {threads} threads, batch for batch");
                        for counter in [
                            |m: &SubtaskMetrics| m.events.load(Ordering::Relaxed),
                            |m: &SubtaskMetrics| m.skipped.load(Ordering::Relaxed),
                            |m: &SubtaskMetrics| m.progress.load(Ordering::Relaxed),
                        ] {
                            assert_eq!(counter(&ahead.metrics), counter(&inline.metrics), "{at}");
                        }
                    }
                }
            }
        }
    }
}

/// Reads `calls` results of `source`, then starts one more and drops it after a few polls
/// (a barrier arriving while it waits); returns the rows read and the checkpoint taken then.
async fn read_then_checkpoint(source: &mut JsonlSource, calls: usize) -> (Vec<Row>, Value) {
    let mut batches = Vec::new();
    for _ in 0..calls {
        match source.next().await.unwrap() {
            SourceEvent::Batches(b) => batches.extend(b),
            SourceEvent::End => break,
        }
    }
    {
        let next = source.next();
        tokio::pin!(next);
        for _ in 0..calls % 4 {
            if let std::task::Poll::Ready(event) = futures::poll!(next.as_mut()) {
                if let SourceEvent::Batches(b) = event.unwrap() {
                    batches.extend(b);
                }
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    let state = source.snapshot().unwrap().unwrap();
    (rows(&batches), state)
}

#[tokio::test]
async fn a_checkpoint_while_decoding_ahead_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 10..14 {
        let (text, _) = random_file(seed, 2000);
        let path = dir.path().join(format!("f{seed}.jsonl"));
        std::fs::write(&path, &text).unwrap();
        let len = text.len() as u64;
        let spec = spec(&path, 1024, "skip");
        let layout = layout(&spec).unwrap();
        let all = rows(
            &drain(&mut subtask(&spec, len, 0, 1, 0).source)
                .await
                .unwrap(),
        );
        for (p, restore_p) in [(1, 1), (2, 1), (1, 3)] {
            for calls in [0, 1, 2, 5, 9, 40] {
                let mut before = Vec::new();
                let mut states = Vec::new();
                for s in 0..p {
                    let mut old = subtask(&spec, len, s, p, 2);
                    let (rows, state) = read_then_checkpoint(&mut old.source, calls).await;
                    before.extend(rows);
                    states.push(state);
                }
                let mut after = Vec::new();
                for s in 0..restore_p {
                    let chunks = restored_chunks(states.iter().cloned(), s, restore_p).unwrap();
                    let metrics = Arc::new(SubtaskMetrics::default());
                    let mut new =
                        JsonlSource::with_chunks(&spec, &layout, chunks, &[true], 7, metrics)
                            .with_decode_threads(2);
                    after.extend(rows(&drain(&mut new).await.unwrap()));
                }
                let at = format!("seed {seed} p {p} → {restore_p} after {calls} calls");
                before.extend(after);
                if (p, restore_p) == (1, 1) {
                    assert_eq!(before, all, "{at}: in file order");
                } else {
                    let mut all = all.clone();
                    let by_id = |a: &Row, b: &Row| a.0.cmp(&b.0);
                    before.sort_by(by_id);
                    all.sort_by(by_id);
                    assert_eq!(before, all, "{at}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_bad_line_under_fail_fails_as_inline_does() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, bad) in [
        (20, r#"{"id":1,"#.to_owned()),
        (21, r#"{"id":"seven"}"#.to_owned()),
        (22, format!(r#"{{"id":1,"name":"{}"}}"#, "x".repeat(500))),
    ] {
        let mut lines: Vec<String> = (0..3000).map(|i| format!(r#"{{"id":{i}}}"#)).collect();
        let at = 1000 + (seed as usize * 389) % 1900;
        lines[at] = bad;
        let offset: usize = lines[..at].iter().map(|l| l.len() + 1).sum();
        let path = dir.path().join(format!("f{seed}.jsonl"));
        let text = lines.join("\n");
        std::fs::write(&path, &text).unwrap();
        let spec = spec(&path, 4096, "fail");
        let len = text.len() as u64;
        let mut messages = Vec::new();
        for threads in [0, 2, 4] {
            let mut source = subtask(&spec, len, 0, 1, threads).source;
            let mut ids = Vec::new();
            let error = loop {
                match source.next().await {
                    Ok(SourceEvent::Batches(b)) => ids.extend(rows(&b).into_iter().map(|r| r.0)),
                    Ok(SourceEvent::End) => panic!("seed {seed}: the bad line was accepted"),
                    Err(e) => break e.to_string(),
                }
            };
            // Whatever was returned came before the bad line, in order.
            assert!(ids.len() <= at, "seed {seed}");
            assert!(ids.iter().enumerate().all(|(i, id)| *id == Some(i as i64)));
            let place = format!("line {} (byte {offset})", at + 1);
            assert!(error.contains(&place), "{threads} threads: {error}");
            messages.push(error);
        }
        assert!(messages.iter().all(|m| *m == messages[0]), "{messages:#?}");
    }
}

#[tokio::test]
async fn dropping_the_source_stops_its_decode_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _) = random_file(30, 20_000);
    let path = dir.path().join("f.jsonl");
    std::fs::write(&path, &text).unwrap();
    let spec = spec(&path, 4096, "skip");
    for calls in [1, 3] {
        let mut source = subtask(&spec, text.len() as u64, 0, 1, 3).source;
        // Pieces in flight, and a wait for one dropped half-way.
        let _ = read_then_checkpoint(&mut source, calls).await;
        let live = source.ahead.as_ref().unwrap().live();
        assert_eq!(live.load(Ordering::SeqCst), 3);
        drop(source);
        assert_eq!(live.load(Ordering::SeqCst), 0, "every thread joined");
    }
}

/// Decode threads run behind the job's tasks: each is 10 nice levels below the thread that
/// started it (read from /proc, where Linux keeps a thread's nice value).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn decode_threads_run_at_a_lower_priority_than_the_job() {
    let nice = |tid: &str| -> Option<i64> {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        // Fields after the parenthesised name: state is field 3, nice field 19.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(16)?
            .parse()
            .ok()
    };
    let decoders = || -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| {
                let tid = t.ok()?.file_name().into_string().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
                comm.starts_with("weir-decode-").then_some(tid)
            })
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let (text, _) = random_file(31, 20_000);
    let path = dir.path().join("f.jsonl");
    std::fs::write(&path, &text).unwrap();
    let spec = spec(&path, 4096, "skip");
    let mut source = subtask(&spec, text.len() as u64, 0, 1, 2).source;
    let _ = read_then_checkpoint(&mut source, 1).await;
    let own = nice(&rustix::thread::gettid().as_raw_nonzero().to_string()).unwrap();
    // This source's two threads, and any of tests running beside it (started as this one was).
    let niceness: Vec<(String, i64)> = decoders()
        .into_iter()
        .filter_map(|tid| Some((tid.clone(), nice(&tid)?)))
        .collect();
    assert!(niceness.len() >= 2, "{niceness:?}");
    assert!(
        niceness.iter().all(|(_, n)| *n == (own + 10).min(19)),
        "own nice {own}, decode threads {niceness:?}"
    );
    drop(source);
}

/// Chunks below the smallest size are refused when the job is planned, at `chunk-size`.
#[test]
fn tiny_chunks_are_refused() {
    let job = |size: &str| {
        format!(
            "name: demo\nsources:\n  file: {{kind: jsonl, path: data.jsonl, schema: {{a: int}}, \
             chunk-size: {size}}}\nsinks:\n  raw: {{kind: blackhole, from: file}}\n"
        )
    };
    for size in ["0", "1", "255"] {
        let Err(e) = crate::plan::check_str("job.yaml", &job(size), &[]) else {
            panic!("{size}: planned");
        };
        assert_eq!(e.problems.len(), 1, "{size}: {e}");
        assert_eq!(e.problems[0].path, "sources.file.chunk-size");
    }
    assert!(crate::plan::check_str("job.yaml", &job("256"), &[]).is_ok());
}
