//! weir's HTTP API, Prometheus metrics and web dashboard.
//!
//! This crate will own `weir serve`: an axum router under `/api/v1` to submit, inspect and control
//! jobs, `/metrics` in the Prometheus text format, and the dashboard assets from `web/` embedded in
//! the binary.
//!
//! It is empty until the HTTP issue lands.
