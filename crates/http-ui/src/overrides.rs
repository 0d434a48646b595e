//! `--set` overrides as the server reads them: `key.path=value` each, from a submit's `set=`
//! query, a rescale, or a job's document in the catalog. The syntax is the job file's
//! ([`Override`]); only the answer to a bad one, a client's mistake (400), is the server's.

// To move: parsing a list of overrides is job-file syntax and belongs beside `Override` in
// `weir_runtime::spec`, with only the `ApiError` mapping left in the server. It waits here,
// beneath the hosted job that needs it, until crates/runtime can take it.

use weir_runtime::spec::load::Override;

use crate::error::ApiError;

/// `key.path=value` overrides, parsed; a bad one is the client's mistake.
pub fn parse(overrides: &[String]) -> Result<Vec<Override>, ApiError> {
    overrides
        .iter()
        .map(|o| {
            o.parse::<Override>()
                .map_err(|e| ApiError::BadRequest(format!("override `{o}`: {e}")))
        })
        .collect()
}
