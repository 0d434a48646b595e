//! The job-file loader and planner: YAML text and `--set` overrides, as `weir validate` and
//! `POST /api/v1/jobs/validate` receive them.
//!
//! Input: leading lines of the form `--set key=value` are overrides, the rest is the job file.

use weir_runtime::spec::load::Override;

/// Loads, checks and plans one job file with its overrides; refusals are fine, panics are not.
pub fn job_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut overrides = Vec::new();
    let mut rest = text;
    while let Some(line) = rest.strip_prefix("--set ") {
        let (set, after) = line.split_once('\n').unwrap_or((line, ""));
        if let Ok(o) = set.parse::<Override>() {
            overrides.push(o);
        }
        rest = after;
    }
    let _ = weir_runtime::plan::check_str("fuzz.yaml", rest, &overrides);
}
