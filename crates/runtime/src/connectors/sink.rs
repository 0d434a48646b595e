//! The sink trait.

use arrow_array::RecordBatch;
use futures::future::BoxFuture;

use crate::error::OperatorError;

/// One subtask of a sink.
pub trait Sink: Send {
    /// Writes (or buffers) one batch.
    fn write(&mut self, batch: RecordBatch) -> BoxFuture<'_, Result<(), OperatorError>>;

    /// Every input has ended: flush, make the output durable and visible.
    fn finish(&mut self) -> BoxFuture<'_, Result<(), OperatorError>>;
}

/// Makes the subtasks of one sink node.
pub trait SinkFactory: Send + Sync {
    /// Once per run, before any subtask starts (create the output directory, say).
    fn prepare(&self, parallelism: usize) -> Result<(), OperatorError>;

    fn create(&self, ctx: &super::source::SubtaskContext) -> Result<Box<dyn Sink>, OperatorError>;
}

/// The factory of a sink spec.
pub fn factory(spec: &crate::spec::SinkSpec) -> std::sync::Arc<dyn SinkFactory> {
    use crate::spec::SinkSpec;
    match spec {
        SinkSpec::Blackhole(_) => std::sync::Arc::new(Simple(|| -> Box<dyn Sink> {
            Box::new(super::blackhole::Blackhole)
        })),
        SinkSpec::Stdout(_) => std::sync::Arc::new(Simple(|| -> Box<dyn Sink> {
            Box::new(super::stdout::Stdout::default())
        })),
        SinkSpec::File(f) => std::sync::Arc::new(FileSinkFactory {
            dir: std::path::PathBuf::from(&f.path),
        }),
    }
}

struct Simple<F>(F);

impl<F: Fn() -> Box<dyn Sink> + Send + Sync> SinkFactory for Simple<F> {
    fn prepare(&self, _parallelism: usize) -> Result<(), OperatorError> {
        Ok(())
    }

    fn create(&self, _ctx: &super::source::SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        Ok((self.0)())
    }
}

struct FileSinkFactory {
    dir: std::path::PathBuf,
}

impl SinkFactory for FileSinkFactory {
    fn prepare(&self, parallelism: usize) -> Result<(), OperatorError> {
        super::file_sink::FileSink::prepare(&self.dir, parallelism).map_err(|e| {
            OperatorError::external(
                format!("preparing output directory {}", self.dir.display()),
                e,
            )
        })
    }

    fn create(&self, ctx: &super::source::SubtaskContext) -> Result<Box<dyn Sink>, OperatorError> {
        Ok(Box::new(super::file_sink::FileSink::new(
            &self.dir,
            ctx.subtask,
        )))
    }
}
