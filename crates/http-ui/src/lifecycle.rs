//! Where a hosted job is in its life ([`JobState`]), and the names the API and the job catalog
//! write for each state: the catalog keeps a job's state as its name, and reads back whether
//! the job was live when the server stopped.

/// Where a hosted job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Running,
    /// Failed (or the server restarted), and waiting to run again as its restart strategy
    /// allows.
    Restarting,
    /// Cancel requested: sources end, what is in flight drains.
    Cancelling,
    /// Stop with a savepoint requested: the job stops once the savepoint is complete.
    Stopping,
    /// The input ended.
    Finished,
    Cancelled,
    /// Stopped with a savepoint.
    Stopped,
    /// Failed (after any restarts its restart strategy allowed).
    Failed,
}

impl JobState {
    /// Every state, in the order of a job's life.
    pub const ALL: [JobState; 8] = [
        JobState::Running,
        JobState::Restarting,
        JobState::Cancelling,
        JobState::Stopping,
        JobState::Finished,
        JobState::Cancelled,
        JobState::Stopped,
        JobState::Failed,
    ];

    /// The state as the API writes it.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Restarting => "restarting",
            JobState::Cancelling => "cancelling",
            JobState::Stopping => "stopping",
            JobState::Finished => "finished",
            JobState::Cancelled => "cancelled",
            JobState::Stopped => "stopped",
            JobState::Failed => "failed",
        }
    }

    /// Whether a run of the job is in progress.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            JobState::Running | JobState::Restarting | JobState::Cancelling | JobState::Stopping
        )
    }

    /// The state a name written by [`Self::name`] stands for.
    pub fn from_name(name: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether a state written as `name` (a catalog row's) is one the job ended in: any but
    /// a live one, a name this weir does not know included.
    pub fn ended_name(name: &str) -> bool {
        JobState::from_name(name).is_none_or(|s| !s.is_live())
    }
}
