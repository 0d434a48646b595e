//! Checkpoints beyond the kill tests: corrupt snapshots are reported with their path and the
//! one before is used; savepoints taken from the command line, then resumed on the other state
//! backend; a task failure restarts the job from its latest checkpoint in the same process; and
//! at-least-once mode loses nothing across kills.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use weir_runtime::api::Operator;
use weir_runtime::api::OperatorError;
use weir_runtime::api::SubtaskContext;
use weir_runtime::plan::Factory;
use weir_runtime::spec::load::Override;

use crate::recovery::{committed_rows, weir};
use crate::support::{assert_same_rows, job_file, multiset, run_job, run_plan};

const EVENTS: u64 = 60_000;
/// Events per second: a run takes about two seconds, long enough for several checkpoints.
const RATE: u64 = 30_000;

fn q5() -> PathBuf {
    job_file("jobs/nexmark/q5.yaml")
}

fn base_overrides(out: &Path) -> Vec<String> {
    vec![
        format!("sources.nexmark.events={EVENTS}"),
        "sinks.out.kind=file".into(),
        format!("sinks.out.path={}", out.display()),
    ]
}

/// q5 run once in-process without checkpoints: what every other run must commit.
fn golden(dir: &Path) -> BTreeMap<String, usize> {
    let out = dir.join("golden");
    run_job(&q5(), &base_overrides(&out));
    let rows = multiset(committed_rows(&out));
    assert!(!rows.is_empty());
    rows
}

/// `weir run q5` as a child with checkpoints every 150 ms; `extra` are more arguments.
fn run_child(data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let cmd = child_command(
        Path::new(env!("CARGO_BIN_EXE_weir")),
        &q5(),
        data,
        out,
        extra,
    );
    wait_limited(cmd, extra)
}

/// The command [`run_child`] runs.
fn child_command(
    program: &Path,
    job: &Path,
    data: &Path,
    out: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.env("WEIR_DATA_DIR", data)
        .env("RUST_LOG", "warn,weir_checkpoint=info,weir_runtime=info");
    cmd.arg("run").arg(job).arg("--quiet");
    for o in base_overrides(out) {
        cmd.args(["--set", &o]);
    }
    cmd.args([
        "--set",
        &format!("sources.nexmark.rate={RATE}"),
        "--set",
        "checkpoint.interval=150ms",
        // Enough for every fallback the corruption test makes.
        "--set",
        "checkpoint.retained=10",
    ]);
    cmd.args(extra);
    cmd
}

/// Runs `cmd` (made by [`child_command`] with `extra`) to its end, within [`RUN_LIMIT`].
fn wait_limited(mut cmd: std::process::Command, extra: &[&str]) -> std::process::Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A restore that blocks (on a FIFO) or reads without end (from `/dev/zero`) fails the
    // test after a while instead of hanging it.
    let child = cmd.spawn().expect("weir runs");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (done, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match output.recv_timeout(RUN_LIMIT) {
        Ok(output) => output.expect("weir runs"),
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("weir {extra:?} did not finish within {RUN_LIMIT:?}");
        }
    }
}

/// Longer than any run of [`run_child`] takes (a few seconds), shorter than a hang.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// What a run printed: its summary (stdout), then warnings and logs (stderr).
fn printed(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The job's snapshot directories, `(name, path)`, oldest first.
fn snapshots(data: &Path) -> Vec<(String, PathBuf)> {
    let dir = data.join("checkpoints").join("nexmark-q5");
    let mut list: Vec<(u64, String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("_metadata").exists())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let id = name.rsplit_once('-')?.1.parse().ok()?;
            Some((id, name, p))
        })
        .collect();
    list.sort();
    list.into_iter().map(|(_, n, p)| (n, p)).collect()
}

/// Files of a snapshot other than its metadata, recursively.
fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(data_files(&p));
        } else if p.file_name().unwrap() != "_metadata" {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn newest_checkpoint(data: &Path) -> PathBuf {
    snapshots(data)
        .into_iter()
        .rev()
        .find(|(n, _)| n.starts_with("chk-"))
        .expect("a completed checkpoint")
        .1
}

fn truncate(path: &Path) {
    let len = std::fs::metadata(path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len / 2).unwrap();
}

/// Replaces `path` with what `make` puts there (a directory, a link, a FIFO). On a loaded
/// machine a resumed run may end before its first new checkpoint, so the newest checkpoint
/// can be one an earlier round already damaged (its `_metadata` made a directory, say).
fn replace(path: &Path, make: impl FnOnce(&Path)) {
    if path.is_dir() {
        std::fs::remove_dir_all(path).unwrap();
    } else {
        std::fs::remove_file(path).unwrap();
    }
    make(path);
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A file of a subtask's keyed state (in a subdirectory of the snapshot): one the restore
/// copies or links rather than reads by range.
fn keyed_file(dir: &Path) -> PathBuf {
    data_files(dir)
        .into_iter()
        .find(|f| f.parent() != Some(dir))
        .unwrap_or_else(|| panic!("{} has keyed state", dir.display()))
}

fn flip_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    assert!(!bytes.is_empty(), "{} is empty", path.display());
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

/// Output files and their contents, to show a failed run touched nothing.
fn listing(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn corrupt_snapshots_are_reported_and_the_one_before_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden(dir.path());
    let data = dir.path().join("data");
    let out = dir.path().join("out");

    let first = run_child(&data, &out, &[]);
    assert!(first.status.success(), "{}", printed(&first));
    assert_same_rows("first run", &multiset(committed_rows(&out)), &expected);
    assert!(
        snapshots(&data)
            .iter()
            .filter(|(n, _)| n.starts_with("chk-"))
            .count()
            >= 2,
        "the run took at least two checkpoints: {:?}",
        snapshots(&data)
    );

    // Each way of breaking a snapshot: the newest snapshot (the final one of the completed
    // run) loses half its metadata, and the newest checkpoint is damaged too, so `--from
    // latest` must pass over both and resume from the checkpoint before. Unreadable snapshots
    // (metadata that is a directory, a FIFO or a link to an endless device; a state file
    // linked to one or longer than recorded) are passed over like corrupt ones, and promptly:
    // none of them is read.
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 8] = [
        ("truncated metadata", |p| truncate(&p.join("_metadata"))),
        ("flipped byte", |p| flip_byte(&data_files(p)[0])),
        ("missing file", |p| {
            std::fs::remove_file(data_files(p).last().unwrap()).unwrap()
        }),
        ("metadata is a directory", |p| {
            replace(&p.join("_metadata"), |m| std::fs::create_dir(m).unwrap())
        }),
        ("metadata is a FIFO", |p| {
            replace(&p.join("_metadata"), mkfifo)
        }),
        ("metadata links to /dev/zero", |p| {
            replace(&p.join("_metadata"), |m| {
                std::os::unix::fs::symlink("/dev/zero", m).unwrap()
            })
        }),
        ("a state file links to /dev/zero", |p| {
            replace(&keyed_file(p), |f| {
                std::os::unix::fs::symlink("/dev/zero", f).unwrap()
            })
        }),
        ("a state file one byte longer", |p| {
            let file = keyed_file(p);
            let mut bytes = std::fs::read(&file).unwrap();
            bytes.push(b'\n');
            std::fs::write(&file, bytes).unwrap();
        }),
    ];
    for (what, damage) in damages {
        let listed = snapshots(&data);
        let (final_name, final_dir) = listed.last().unwrap().clone();
        assert!(final_name.starts_with("final-"), "{listed:?}");
        truncate(&final_dir.join("_metadata"));
        let broken = newest_checkpoint(&data);
        damage(&broken);
        let fallback = listed
            .iter()
            .rev()
            .filter(|(n, _)| n.starts_with("chk-"))
            .nth(1)
            .unwrap_or_else(|| panic!("{what}: a second checkpoint: {listed:?}"))
            .1
            .clone();

        // Named explicitly, a damaged snapshot is refused with its path, and the output is
        // left as it was.
        let before = listing(&out);
        let explicit = run_child(&data, &out, &["--from", broken.to_str().unwrap()]);
        assert!(
            !explicit.status.success(),
            "{what}: restoring a damaged snapshot failed"
        );
        let text = printed(&explicit);
        assert!(
            text.contains(broken.file_name().unwrap().to_str().unwrap()),
            "{what}: the error names the snapshot: {text}"
        );
        assert_eq!(listing(&out), before, "{what}: the output is untouched");

        // `latest` reports both and uses the one before.
        let resumed = run_child(&data, &out, &["--from", "latest"]);
        let text = printed(&resumed);
        assert!(resumed.status.success(), "{what}: {text}");
        for skipped in [&final_name, broken.file_name().unwrap().to_str().unwrap()] {
            assert!(
                text.contains(skipped),
                "{what}: the warning names {skipped}: {text}"
            );
        }
        let fallback_name = fallback.file_name().unwrap().to_str().unwrap();
        assert!(
            text.contains(fallback_name),
            "{what}: the run says it restored {fallback_name}: {text}"
        );
        assert_same_rows(what, &multiset(committed_rows(&out)), &expected);
        // What was damaged is left for a person to look at, not deleted.
        assert!(broken.exists(), "{what}: {} is kept", broken.display());
    }
}

/// The user `weir` children run as in [`unreadable_snapshots_are_passed_over_and_an_unreadable_job_folder_is_named`]:
/// `nobody` when the test runs as root, which ignores permission bits, else the test's own.
struct Unprivileged {
    /// `nobody`'s uid and gid when the test runs as root.
    drop_to: Option<u32>,
    /// Where the children find RocksDB's library when the one beside the binary is out of
    /// `nobody`'s reach (a link into root's home, see `scripts/cargo.sh`): a copy in the
    /// test's folder.
    library_path: Option<PathBuf>,
    /// The `weir` binary and q5's job file the children run: as root, copies in the test's
    /// folder, since the build's and the clone's folders may be root's own (CI's target
    /// directory is in root's home, mode 700, where `nobody` may not execute).
    program: PathBuf,
    job: PathBuf,
    /// The children's working folder: one `nobody` may enter.
    cwd: PathBuf,
}

impl Unprivileged {
    /// Hands `dir` (the test's folder, where every child writes) to the children's user.
    fn new(dir: &Path) -> Self {
        use std::os::unix::fs::MetadataExt;
        // A folder the test made is owned by its effective user.
        let root = std::fs::metadata(dir).unwrap().uid() == 0;
        let drop_to = root.then_some(65534);
        let mut library_path = None;
        let mut program = PathBuf::from(env!("CARGO_BIN_EXE_weir"));
        let mut job = q5();
        if let Some(id) = drop_to {
            let bin = dir.join("bin");
            std::fs::create_dir(&bin).unwrap();
            std::fs::copy(&program, bin.join("weir")).unwrap();
            std::fs::copy(&job, bin.join("q5.yaml")).unwrap();
            program = bin.join("weir");
            job = bin.join("q5.yaml");
            let beside = Path::new(env!("CARGO_BIN_EXE_weir")).with_file_name("librocksdb.so");
            if beside.exists() {
                let lib = dir.join("lib");
                std::fs::create_dir(&lib).unwrap();
                std::fs::copy(&beside, lib.join("librocksdb.so")).unwrap();
                library_path = Some(lib);
            }
            std::os::unix::fs::chown(dir, Some(id), Some(id)).unwrap();
        }
        Self {
            drop_to,
            library_path,
            program,
            job,
            cwd: dir.to_path_buf(),
        }
    }

    fn run(&self, data: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
        use std::os::unix::process::CommandExt;
        let mut cmd = child_command(&self.program, &self.job, data, out, extra);
        cmd.current_dir(&self.cwd);
        if let Some(id) = self.drop_to {
            cmd.uid(id).gid(id);
        }
        if let Some(lib) = &self.library_path {
            cmd.env("LD_LIBRARY_PATH", lib);
        }
        wait_limited(cmd, extra)
    }
}

/// Sets the permission bits of `path` (a folder) to `mode`.
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `--from latest` when the folders of the newest snapshots may not be read (mode 000): each
/// is passed over with a warning naming it, as a corrupt one is, and the checkpoint before
/// them is restored, the output still exactly the golden one; the folders are kept. When the
/// job's checkpoint folder itself may not be read, the run fails naming it and what to fix,
/// and touches no output. Root ignores permission bits, so when the test runs as root (as
/// `make test` does) every `weir` child runs as `nobody`, owning the test's folder: the
/// permission errors are the kernel's, not a simulation (the checkpoint crate's unit tests
/// cover the folders even root cannot enter: a file or a link loop in a folder's place).
#[test]
fn unreadable_snapshots_are_passed_over_and_an_unreadable_job_folder_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden(dir.path());
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let user = Unprivileged::new(dir.path());

    let first = user.run(&data, &out, &[]);
    assert!(first.status.success(), "{}", printed(&first));
    let listed = snapshots(&data);
    let (final_name, final_dir) = listed.last().expect("a snapshot").clone();
    assert!(final_name.starts_with("final-"), "{listed:?}");
    let broken = newest_checkpoint(&data);
    let broken_name = broken.file_name().unwrap().to_str().unwrap().to_string();
    let fallback = listed
        .iter()
        .rev()
        .filter(|(n, _)| n.starts_with("chk-"))
        .nth(1)
        .unwrap_or_else(|| panic!("a second checkpoint: {listed:?}"))
        .1
        .clone();
    for unreadable in [&final_dir, &broken] {
        chmod(unreadable, 0o000);
    }

    let resumed = user.run(&data, &out, &["--from", "latest"]);
    let text = printed(&resumed);
    assert!(resumed.status.success(), "{text}");
    for skipped in [&final_name, &broken_name] {
        assert!(
            text.lines()
                .any(|l| l.contains("skipping") && l.contains(skipped.as_str())),
            "a warning names {skipped}: {text}"
        );
    }
    assert!(text.contains("Permission denied"), "says why: {text}");
    let fallback_name = fallback.file_name().unwrap().to_str().unwrap();
    assert!(
        text.contains(fallback_name),
        "the run says it restored {fallback_name}: {text}"
    );
    assert_same_rows(
        "restored past unreadable snapshots",
        &multiset(committed_rows(&out)),
        &expected,
    );
    for kept in [&final_dir, &broken] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(kept).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0, "{} is kept as it was", kept.display());
        chmod(kept, 0o755);
    }

    // The job's own folder: nothing in it can be found, so the run refuses to start.
    let job_dir = data.join("checkpoints").join("nexmark-q5");
    chmod(&job_dir, 0o000);
    let before = listing(&out);
    let refused = user.run(&data, &out, &["--from", "latest"]);
    chmod(&job_dir, 0o755);
    let text = printed(&refused);
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains(&job_dir.display().to_string()),
        "names the folder: {text}"
    );
    assert!(text.contains("chmod"), "says what to fix: {text}");
    assert_eq!(listing(&out), before, "the output is untouched");
}

#[test]
fn a_savepoint_from_the_command_line_stops_the_job_and_resumes_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden(dir.path());
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    // Stopped while it aggregates in one phase over whole windows, resumed in two phases over
    // slices (the defaults): the local phase keeps no state, and the sliced operator merges the
    // whole windows it restores into the windows it fires, so a savepoint restores either way.
    let sets: Vec<String> = base_overrides(&out)
        .into_iter()
        .chain([
            format!("sources.nexmark.rate={RATE}"),
            "checkpoint.interval=150ms".into(),
            "state.backend=heap".into(),
            "two-phase-aggregation=false".into(),
            "window-slicing=false".into(),
        ])
        .collect();

    let mut job = weir(&data);
    job.arg("run").arg(q5()).arg("--quiet");
    for s in &sets {
        job.args(["--set", s]);
    }
    let log = dir.path().join("stopped.log");
    let mut child = job
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stopped.err")).unwrap())
        .spawn()
        .unwrap();
    // Running once its pid file is there; let it get some way in.
    let pid_file = data.join("run").join("nexmark-q5.pid");
    let started = Instant::now();
    while !pid_file.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "no pid file");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(700));

    let mut ask = weir(&data);
    ask.arg("savepoint").arg(q5()).arg("--stop");
    for s in &sets {
        ask.args(["--set", s]);
    }
    let asked = ask.output().unwrap();
    assert!(
        asked.status.success(),
        "weir savepoint: {}",
        printed(&asked)
    );
    let location = String::from_utf8(asked.stdout).unwrap().trim().to_string();
    let savepoint = PathBuf::from(location.strip_prefix("file://").unwrap_or(&location));
    assert!(
        savepoint.join("_metadata").exists(),
        "weir savepoint printed the savepoint's location: {location}"
    );

    let stopped = child.wait().unwrap();
    let said = std::fs::read_to_string(&log).unwrap()
        + &std::fs::read_to_string(dir.path().join("stopped.err")).unwrap();
    assert!(stopped.success(), "{said}");
    assert!(
        said.contains(&location),
        "the stopped run printed its savepoint: {said}"
    );
    let partial = committed_rows(&out);
    assert!(
        multiset(partial.clone()).len() < expected.len(),
        "the job stopped before its end ({} of {} rows)",
        partial.len(),
        expected.len()
    );
    assert!(!pid_file.exists(), "the stopped run removed its pid file");

    // Resume from the savepoint on RocksDB, in two phases: heap state read into the other
    // backend, by a plan with a `.local` node the savepoint does not know.
    let resumed = run_child(
        &data,
        &out,
        &[
            "--from",
            savepoint.to_str().unwrap(),
            "--set",
            "state.backend=rocksdb",
        ],
    );
    assert!(resumed.status.success(), "{}", printed(&resumed));
    assert_same_rows(
        "stopped with a savepoint in one phase, resumed on RocksDB in two",
        &multiset(committed_rows(&out)),
        &expected,
    );
}

/// Wraps an operator so that its first attempt fails after `fail_after` records.
struct FailOnce {
    inner: Box<dyn Operator>,
    seen: usize,
    fail_after: Option<usize>,
}

impl Operator for FailOnce {
    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        self.seen += batch.num_rows();
        if self.fail_after.is_some_and(|n| self.seen > n) {
            return Err(OperatorError::Internal("injected failure".into()));
        }
        self.inner.process_batch(input, batch, out)
    }

    fn process_watermark(
        &mut self,
        watermark: i64,
        out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        self.inner.process_watermark(watermark, out)
    }

    fn finish(&mut self, out: &mut Vec<RecordBatch>) -> Result<(), OperatorError> {
        self.inner.finish(out)
    }

    fn keyed_state(&mut self) -> Option<&mut weir_runtime::state::KeyedStateBackend> {
        self.inner.keyed_state()
    }

    fn snapshot_state(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        self.inner.snapshot_state()
    }
}

#[test]
fn a_failed_task_restarts_the_job_from_its_latest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden(dir.path());
    let out = dir.path().join("out");
    for backend in ["heap", "rocksdb"] {
        let overrides: Vec<Override> = base_overrides(&out)
            .into_iter()
            .chain([
                format!("sources.nexmark.rate={RATE}"),
                "checkpoint.interval=100ms".into(),
                format!("checkpoint.storage={}", dir.path().join("ck").display()),
                format!("state.path={}", dir.path().join("state").display()),
                format!("state.backend={backend}"),
                "restart.delay=10ms".into(),
                // The failure comes after a count of records, which the window operator sees
                // one by one only in one phase (in two it sees a partial per key and batch).
                "two-phase-aggregation=false".into(),
            ])
            .map(|o| o.parse().unwrap())
            .collect();
        let mut plan = weir_runtime::plan::check_file(&q5(), &overrides).unwrap();
        // The window operator of the first attempt fails part of the way through.
        let node = plan
            .nodes
            .iter_mut()
            .find(|n| n.kind == "window-aggregate")
            .expect("q5 has a window aggregate");
        let Factory::Operator(inner) = node.factory.clone() else {
            panic!("an operator node")
        };
        node.factory = Factory::Operator(Arc::new(move |ctx: &SubtaskContext| {
            Ok(Box::new(FailOnce {
                inner: inner(ctx)?,
                seen: 0,
                // About 60% of the bids (bids are 92% of the events).
                fail_after: (ctx.attempt == 0).then_some(EVENTS as usize * 55 / 100),
            }) as Box<dyn Operator>)
        }));
        let summary = run_plan(&plan, true);
        assert_eq!(summary.restarts, 1, "{backend}: one restart");
        assert!(
            summary
                .restored_from
                .as_deref()
                .is_some_and(|l| l.contains("chk-")),
            "{backend}: the restart restored a checkpoint: {:?}",
            summary.restored_from
        );
        assert_same_rows(
            &format!("{backend}: restarted after a failure"),
            &multiset(committed_rows(&out)),
            &expected,
        );
    }
}

#[test]
fn at_least_once_checkpoints_lose_nothing_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let expected = golden(dir.path());
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let mut killed = weir(&data);
    killed.arg("run").arg(q5()).arg("--quiet");
    for o in base_overrides(&out) {
        killed.args(["--set", &o]);
    }
    killed.args([
        "--set",
        &format!("sources.nexmark.rate={RATE}"),
        "--set",
        "checkpoint.interval=150ms",
        "--set",
        "checkpoint.mode=at-least-once",
    ]);
    let mut child = killed
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !snapshots(&data).is_empty(),
        "a checkpoint completed before the kill"
    );
    let resumed = run_child(
        &data,
        &out,
        &["--from", "latest", "--set", "checkpoint.mode=at-least-once"],
    );
    assert!(resumed.status.success(), "{}", printed(&resumed));
    // q5 counts bids per window: a bid seen twice changes a count, so at-least-once cannot be
    // compared row for row. What it promises: every window that has output has it (no
    // window lost), possibly with higher counts.
    let got = multiset(committed_rows(&out));
    let windows = |rows: &BTreeMap<String, usize>| -> std::collections::BTreeSet<String> {
        rows.keys()
            .map(|r| {
                let v: serde_json::Value = serde_json::from_str(r).unwrap();
                v["starttime"].to_string()
            })
            .collect()
    };
    assert_eq!(windows(&got), windows(&expected));
}

/// Two `weir run`s of one checkpointed job: the second is refused while the first runs (the
/// pid file's lock, not a check-then-write both could pass); once the first is killed with
/// SIGKILL its stale file is taken over by the next run.
#[test]
fn one_checkpointed_job_runs_once_per_data_directory_and_a_killed_run_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("out");
    let start = || {
        let mut cmd = weir(&data);
        cmd.arg("run").arg(q5()).arg("--quiet");
        for o in base_overrides(&out) {
            cmd.args(["--set", &o]);
        }
        // Unbounded and slow: it runs until killed.
        cmd.args([
            "--set",
            "sources.nexmark.events=null",
            "--set",
            "sources.nexmark.rate=1000",
            "--set",
            "checkpoint.interval=200ms",
        ]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    };
    let pid_file = data.join("run").join("nexmark-q5.pid");
    let wait_for_pid = |not: Option<u32>| {
        let started = Instant::now();
        loop {
            let pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok());
            match pid {
                Some(p) if Some(p) != not => return p,
                _ => {}
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no pid file");
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    let mut first = start().spawn().unwrap();
    assert_eq!(wait_for_pid(None), first.id());
    let second = start().stderr(Stdio::piped()).output().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "the second run was refused");
    assert!(
        said.contains(&format!("already running as process {}", first.id())),
        "the refusal names the running process: {said}"
    );

    // SIGKILL: no clean-up runs, the file stays with the dead process's pid.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(pid_file.exists(), "a killed run leaves its file");
    let mut third = start().spawn().unwrap();
    assert_eq!(wait_for_pid(Some(first.id())), third.id());
    third.kill().unwrap();
    third.wait().unwrap();
}
