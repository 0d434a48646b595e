//! `weir savepoint`: asks the `weir run` process of a job for a savepoint (by signal, the
//! process being found through its pid file) and waits for the savepoint to be published.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use weir_checkpoint::JobCheckpoints;
use weir_checkpoint::metadata::SnapshotKind;
use weir_runtime::spec::load::Override;

use crate::run::PidFile;

pub fn savepoint(job: &Path, overrides: &[Override], stop: bool, timeout: Duration) -> ExitCode {
    match request(job, overrides, stop, timeout) {
        Ok(location) => {
            println!("{location}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn request(
    job: &Path,
    overrides: &[Override],
    stop: bool,
    timeout: Duration,
) -> anyhow::Result<String> {
    let plan =
        weir_runtime::plan::check_file(job, overrides).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !plan.spec.checkpoint.enabled() {
        anyhow::bail!(
            "job `{}` does not checkpoint (no `checkpoint.interval`), so it takes no savepoints",
            plan.name()
        );
    }
    let Some(pid) = PidFile::running(plan.name()) else {
        anyhow::bail!(
            "job `{}` is not running (no live process in {})",
            plan.name(),
            PidFile::path_of(plan.name()).display()
        );
    };
    let storage = plan
        .spec
        .checkpoint
        .open_storage()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let catalog = JobCheckpoints::new(storage, plan.name());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let newest = |listed: &[weir_checkpoint::catalog::Listed]| {
            listed
                .iter()
                .filter(|l| l.kind == SnapshotKind::Savepoint && l.has_metadata)
                .map(|l| l.id)
                .max()
        };
        let before = newest(&catalog.list().await?);
        let signal = if stop {
            nix::sys::signal::Signal::SIGUSR2
        } else {
            nix::sys::signal::Signal::SIGUSR1
        };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)?;
        eprintln!(
            "asked process {pid} for a savepoint{}; waiting for it",
            if stop { " and to stop" } else { "" }
        );
        // The savepoint is published by another process: watching its directory is all this
        // one can do.
        let deadline = Instant::now() + timeout;
        loop {
            let now = newest(&catalog.list().await?);
            if let Some(id) = now.filter(|id| Some(*id) > before) {
                return Ok(catalog
                    .storage()
                    .location(&catalog.dir_key(SnapshotKind::Savepoint, id)));
            }
            if Instant::now() > deadline {
                anyhow::bail!("no savepoint after {}", humantime::format_duration(timeout));
            }
            if PidFile::running(plan.name()).is_none() {
                anyhow::bail!("process {pid} ended without publishing a savepoint");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}
