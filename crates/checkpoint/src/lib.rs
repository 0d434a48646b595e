//! Checkpoints, savepoints and restore for weir jobs.
//!
//! This crate will own the checkpoint coordinator (aligned barriers, acknowledgements, timeouts),
//! the checkpoint storage (local files by default, object storage later) with atomic, checksummed
//! metadata, savepoints, and the restore reader that reads merged operator-state files in offset
//! order without seeking when it is already positioned (lesson 5 of `DESIGN.md`).
//!
//! It is empty until the checkpoint issue lands.
