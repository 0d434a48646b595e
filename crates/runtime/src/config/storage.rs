//! Where files go and how to reach it: a local path, or S3 with its settings (the checkpoint
//! storage's `storage`, the Iceberg sink's `warehouse`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::HumanDuration;

/// Where checkpoints go: a URL or path, or a map that also says how to reach it.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum StorageSpec {
    // The map comes first: a map with a mistake is then reported against the map's keys.
    Settings(StorageSettings),
    /// `s3://bucket/prefix`, a `file://` URL or a path.
    Url(String),
}

/// Checkpoint storage with how to reach it. Unset keys come from the usual AWS environment
/// variables (`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_ALLOW_HTTP`, ...), so MinIO, Ceph and AWS all work.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StorageSettings {
    /// `s3://bucket/prefix`, a `file://` URL or a path.
    pub url: String,
    /// The S3 endpoint, e.g. `http://127.0.0.1:9000` for MinIO (default: AWS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The bucket's region (default: `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id: Option<String>,
    /// Prefer the `AWS_SECRET_ACCESS_KEY` variable to writing the secret in a job file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key: Option<String>,
    /// Allow an `http://` endpoint (a local MinIO); off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_http: Option<bool>,
    /// A request taking longer is abandoned and retried (default: 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<HumanDuration>,
    /// Retries of a failed request, with exponential backoff from 100 ms up to 5 s (default: 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub max_retries: Option<u32>,
}

impl StorageSpec {
    /// The storage this names and how to reach it (nothing is contacted). S3 settings on a
    /// local path are an error, as they would be ignored.
    pub fn config(&self) -> Result<weir_checkpoint::StorageConfig, String> {
        let config = match self {
            StorageSpec::Url(url) => weir_checkpoint::StorageConfig::url(url.clone()),
            StorageSpec::Settings(s) => weir_checkpoint::StorageConfig {
                url: s.url.clone(),
                endpoint: s.endpoint.clone(),
                region: s.region.clone(),
                access_key_id: s.access_key_id.clone(),
                secret_access_key: s.secret_access_key.clone(),
                allow_http: s.allow_http,
                request_timeout: s.request_timeout.map(|d| d.0),
                max_retries: s.max_retries.map(|n| n as usize),
            },
        };
        let kind = config.kind()?;
        if let (StorageSpec::Settings(s), weir_checkpoint::object::StorageKind::Local(_)) =
            (self, &kind)
        {
            let set: Vec<&str> = [
                ("endpoint", s.endpoint.is_some()),
                ("region", s.region.is_some()),
                ("access-key-id", s.access_key_id.is_some()),
                ("secret-access-key", s.secret_access_key.is_some()),
                ("allow-http", s.allow_http.is_some()),
                ("request-timeout", s.request_timeout.is_some()),
                ("max-retries", s.max_retries.is_some()),
            ]
            .into_iter()
            .filter_map(|(k, set)| set.then_some(k))
            .collect();
            if !set.is_empty() {
                return Err(format!(
                    "{} only apply to s3:// storage, and `{}` is a local path",
                    set.iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    config.url
                ));
            }
        }
        Ok(config)
    }
}
