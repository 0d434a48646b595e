//! The conformance suite every transactional sink runs, as `weir_state`'s suite runs every
//! state backend: the same scenarios of crashes, restores, repeated commits and aborts,
//! checked against what a reader outside weir sees of the sink's output.
//!
//! A sink under test is a [`SinkUnderTest`]: a way to make its factory as a new process would
//! (after a crash), and a way to read its visible output (the committed part files, the
//! table, a `read_committed` consumer of the topic, the stream). [`run`] then drives the
//! factory and its subtasks exactly as the executor does (prepare, create, write, pre-commit
//! at barriers, commit after the checkpoint, abort, finish) and checks, after each step, that
//! what is visible is exactly what has been committed, each row once:
//!
//! 1. rows written but never pre-committed (a crash before the barrier) are never visible;
//! 2. rows pre-committed at a checkpoint that completed, when the process died before the
//!    commit, become visible when a restore of that checkpoint prepares the sink;
//! 3. a commit repeated (the restore's, then the job's own) changes nothing;
//! 4. an aborted transaction never becomes visible;
//! 5. rows pre-committed at a checkpoint that did *not* complete are not visible after a
//!    restore of the checkpoint before it;
//! 6. the end of input's transaction, committed through the final snapshot, is visible.
//!
//! The file sink runs it in this crate's unit tests; the PostgreSQL, Kafka and NATS sinks run
//! it against real servers in `tests/it`.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::api::{Sink, SinkFactory, SinkRestore, SubtaskContext};

/// A transactional sink and what a reader outside weir sees of its output.
pub trait SinkUnderTest: Send + Sync {
    /// The sink's factory for an input of [`schema`], made afresh (as by a new process) for
    /// the same output.
    fn factory(&self) -> Arc<dyn SinkFactory>;

    /// Every row visible to a reader now, as JSON objects (`{"id": .., "name": ..}`).
    fn visible(&self) -> BoxFuture<'_, Vec<Value>>;
}

/// The input every scenario writes: `id` (int) and `name` (string).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn rows(ids: std::ops::Range<i64>) -> Vec<Value> {
    ids.map(|i| json!({"id": i, "name": format!("row {i}")}))
        .collect()
}

fn context(subtask: usize, parallelism: usize, checkpoint_base: u64) -> SubtaskContext {
    SubtaskContext {
        subtask,
        parallelism,
        batch_size: 1024,
        metrics: Arc::default(),
        want: Vec::new(),
        restore: None,
        attempt: 0,
        checkpoint_base,
        checkpointing: true,
        state: None,
    }
}

/// The visible rows as a multiset keyed by their text.
fn multiset(rows: Vec<Value>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        let key = json!({"id": r["id"], "name": r["name"]}).to_string();
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

async fn assert_visible(sink: &dyn SinkUnderTest, expected: &[Value], step: &str) {
    let got = multiset(sink.visible().await);
    let want = multiset(expected.to_vec());
    assert_eq!(
        got, want,
        "{step}: the visible output is not exactly the committed rows, each once"
    );
}

async fn write(s: &mut Box<dyn Sink>, rows: &[Value]) {
    let batch = super::batch(&schema(), rows);
    s.write(batch).await.expect("a write");
}

async fn prepared(factory: &Arc<dyn SinkFactory>, restore: Option<&SinkRestore>) {
    factory
        .prepare(2, restore)
        .await
        .expect("preparing the sink");
}

/// Runs every scenario against `sink` (a fresh output: nothing visible yet).
pub async fn run(sink: &dyn SinkUnderTest) {
    assert_visible(sink, &[], "before the first run").await;
    let a = rows(0..50);
    let b = rows(50..80);
    let c = rows(80..100);
    let d = rows(100..130);
    let e = rows(130..150);

    // 1. A run writes and dies before its first barrier: nothing shows.
    let factory = sink.factory();
    prepared(&factory, None).await;
    let mut s0 = factory.create(&context(0, 2, 0)).expect("a subtask");
    write(&mut s0, &a).await;
    drop(s0);
    drop(factory);
    assert_visible(sink, &[], "1. written, never pre-committed").await;

    // 2. A run pre-commits `a` (subtask 0) and `b` (subtask 1) at checkpoint 1, which
    // completes; the process dies before the commit. The restore of checkpoint 1 commits.
    let factory = sink.factory();
    prepared(&factory, None).await;
    let mut s0 = factory.create(&context(0, 2, 0)).expect("a subtask");
    let mut s1 = factory.create(&context(1, 2, 0)).expect("a subtask");
    write(&mut s0, &a).await;
    write(&mut s1, &b).await;
    let t0 = s0.prepare_commit(1, 0).await.expect("pre-commit");
    let t1 = s1.prepare_commit(1, 0).await.expect("pre-commit");
    let checkpoint_1: Vec<Value> = [t0, t1].into_iter().flatten().collect();
    assert_eq!(checkpoint_1.len(), 2, "each subtask has a transaction");
    assert_visible(sink, &[], "2. pre-committed, not yet committed").await;
    drop((s0, s1, factory));
    let restore_1 = SinkRestore {
        checkpoint: 1,
        transactions: checkpoint_1.clone(),
    };
    let factory = sink.factory();
    prepared(&factory, Some(&restore_1)).await;
    let ab: Vec<Value> = a.iter().chain(&b).cloned().collect();
    assert_visible(
        sink,
        &ab,
        "2. a restore of a completed checkpoint commits it",
    )
    .await;

    // 3. The job commits checkpoint 1 again (its own commit after the restore's), twice.
    factory
        .commit(checkpoint_1.clone())
        .await
        .expect("a repeated commit");
    factory
        .commit(checkpoint_1.clone())
        .await
        .expect("a repeated commit");
    assert_visible(sink, &ab, "3. a repeated commit").await;

    // 4. The restored run writes `c` and pre-commits it at snapshot 2; it is stopped with
    // savepoint 1 as its last: the transaction after it is aborted and never shows.
    let mut s0 = factory.create(&context(0, 2, 1)).expect("a subtask");
    write(&mut s0, &c).await;
    let t = s0
        .prepare_commit(2, 1)
        .await
        .expect("pre-commit")
        .expect("a transaction");
    factory.abort(vec![t], 1).expect("an abort");
    drop(s0);
    assert_visible(sink, &ab, "4. an aborted transaction").await;

    // 5. The run writes `d` and pre-commits it at checkpoint 3, which never completes; the
    // process dies. A restore of checkpoint 1 must not show `d`.
    let mut s1 = factory.create(&context(1, 2, 1)).expect("a subtask");
    write(&mut s1, &d).await;
    let _never = s1.prepare_commit(3, 1).await.expect("pre-commit");
    drop((s1, factory));
    let factory = sink.factory();
    prepared(&factory, Some(&restore_1)).await;
    assert_visible(sink, &ab, "5. a checkpoint that never completed").await;

    // 6. The run writes `e` and its input ends: the last transaction, committed through the
    // final snapshot, shows; committing it again changes nothing.
    let mut s0 = factory.create(&context(0, 2, 1)).expect("a subtask");
    write(&mut s0, &e).await;
    let last = s0.finish(1).await.expect("finish");
    let last: Vec<Value> = last.into_iter().collect();
    assert_eq!(last.len(), 1, "the end of input's transaction");
    factory
        .commit(last.clone())
        .await
        .expect("the final commit");
    factory.commit(last).await.expect("a repeated final commit");
    let abe: Vec<Value> = ab.iter().chain(&e).cloned().collect();
    assert_visible(sink, &abe, "6. the final snapshot's transaction").await;
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::api::connector::{SinkConnector, SinkContext};
    use crate::spec::FileSinkSpec;

    /// The file sink: visible output is its committed part files.
    struct Files {
        dir: PathBuf,
    }

    impl SinkUnderTest for Files {
        fn factory(&self) -> Arc<dyn SinkFactory> {
            let spec = FileSinkSpec {
                from: "in".into(),
                path: self.dir.display().to_string(),
                parallelism: None,
                format: Default::default(),
            };
            let cx = SinkContext {
                job: "conformance",
                node: "out",
                repeat_within: std::time::Duration::from_secs(60),
            };
            spec.plan(&schema(), cx).expect("the file sink plans")
        }

        fn visible(&self) -> BoxFuture<'_, Vec<Value>> {
            Box::pin(async move {
                let mut out = Vec::new();
                let Ok(entries) = std::fs::read_dir(&self.dir) else {
                    return out;
                };
                for entry in entries {
                    let path = entry.expect("an entry").path();
                    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    if name.starts_with("part-") && name.ends_with(".jsonl") {
                        let text = std::fs::read_to_string(&path).expect("a part file");
                        out.extend(
                            text.lines()
                                .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line")),
                        );
                    }
                }
                out
            })
        }
    }

    #[tokio::test]
    async fn the_file_sink_conforms() {
        let dir = tempfile::tempdir().expect("a directory");
        run(&Files {
            dir: dir.path().join("out"),
        })
        .await;
    }
}
