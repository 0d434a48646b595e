//! The shared checkpoint-trigger scheduler of a weir process.
//!
//! One [`Scheduler`] triggers checkpoints for every pipeline of every job in the process, with
//! one timer thread whatever the number of pipelines (lesson 1 of `DESIGN.md`: Apache
//! SeaTunnel's two threads per pipeline, and the traps of its shared scheduler). A pipeline
//! registers a [`Trigger`] and gets a [`Lease`]:
//!
//! - **No hop for bookkeeping.** The synchronous part of a trigger runs inline on the timer
//!   thread, the moment its tick is due (sub-millisecond: the thread sleeps until shortly
//!   before, then busy-waits within a CPU budget).
//! - **Nothing that waits holds a thread.** The part that waits (for barriers, for storage) is a
//!   future, owned by the lease, on the scheduler's own one-thread coordinator runtime
//!   ([`Scheduler::dedicated`], as weir's processes start it) or on a runtime the caller gives
//!   ([`Scheduler::new`]). On the jobs' runtime it would queue behind every ready data task, and
//!   a saturated job would delay its own checkpoints.
//! - **Coalescing, never a backlog.** A tick that finds its pipeline's previous future still
//!   running is coalesced and counted; the next one comes at the next interval boundary. A
//!   slow pipeline slows only its own future.
//! - **Leases.** Dropping a lease removes only its own ticks and aborts only its own future.
//!   [`Lease::fire_now`] (savepoints) fires once as soon as the pipeline is idle, waiting by
//!   notification.
//! - **Measured.** Scheduling delay (actual start minus due time) per pipeline and in total,
//!   fired and coalesced counts, threads owned: [`SchedulerMetrics`], serializable.
//!
//! # Layout
//! - [`scheduler`]: [`Scheduler`] and [`SchedulerConfig`]: registration, firing, metrics,
//!   shutdown.
//! - [`lease`]: [`Lease`] and [`FireNow`].
//! - [`trigger`]: the [`Trigger`] trait and the [`Tick`] it is given.
//! - `timer`: the timer thread's loop and its precision (margin and busy-wait budget).
//! - [`histogram`]: the log-linear delay histogram (HdrHistogram's).
//! - [`metrics`]: plain-data snapshots for the HTTP API.
//! - [`error`]: what can go wrong ([`SchedulerError`]).
//!
//! # Example
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//! use weir_scheduler::{BoxFuture, Scheduler, Tick};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Runtime::new()?;
//! let scheduler = Scheduler::new(runtime.handle().clone())?;
//!
//! let checkpoint_id = Arc::new(AtomicU64::new(0));
//! let ids = Arc::clone(&checkpoint_id);
//! let lease = scheduler.register("orders", Duration::from_secs(10), move |_tick: Tick| {
//!     // Inline on the timer thread: bookkeeping only.
//!     let id = ids.fetch_add(1, Ordering::SeqCst) + 1;
//!     // The part that waits, on the runtime.
//!     let wait: BoxFuture = Box::pin(async move {
//!         let _ = id; // inject barriers, await acknowledgements, write metadata ...
//!     });
//!     Some(wait)
//! })?;
//!
//! // A savepoint: one tick now, without waiting for the interval.
//! let tick = runtime.block_on(lease.fire_now())?;
//! assert_eq!(tick.seq, 1);
//! assert_eq!(checkpoint_id.load(Ordering::SeqCst), 1);
//! assert_eq!(scheduler.metrics().pipelines[0].fired, 1);
//!
//! drop(lease); // only this pipeline's ticks are gone
//! # Ok(())
//! # }
//! ```

pub mod error;
pub mod histogram;
pub mod lease;
pub mod metrics;
pub mod scheduler;
mod timer;
pub mod trigger;

pub use error::SchedulerError;
pub use lease::{FireNow, Lease};
pub use metrics::{DelayBucket, DelaySummary, PipelineMetrics, PrecisionMetrics, SchedulerMetrics};
pub use scheduler::{Scheduler, SchedulerConfig};
pub use trigger::{BoxFuture, Tick, TickCause, Trigger};
