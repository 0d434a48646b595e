//! Checkpoint storage on object stores (S3, MinIO, Ceph...) through the `object_store` crate,
//! and [`open`], which picks the storage a job's `checkpoint.storage` names.
//!
//! What local files get from write-fsync-rename, object storage gives by itself: a `PUT` is
//! atomic (a reader sees the whole object or none) and durable when it returns. Large files
//! (RocksDB SSTs) go up in parts ([`ObjectStorage::with_multipart`]); a failed multipart upload
//! is aborted, so nothing half-written is ever visible under its key. Transient failures (5xx
//! answers, timeouts, dropped connections) are retried with exponential backoff by
//! `object_store`'s client ([`StorageConfig::max_retries`]). A checkpoint is complete only once
//! its metadata object exists, and the coordinator writes that last, so an interrupted
//! checkpoint is never restored.
//!
//! Local paths and `file://` URLs stay with [`LocalStorage`], which object storage cannot
//! replace: it fsyncs files and their directories (`object_store`'s local backend does not),
//! moves RocksDB's files into place instead of copying them, and hard-links SSTs back on
//! restore.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::StorageError;
use crate::storage::{CheckpointStorage, LocalStorage, ObjectInfo, Placed};

/// Where checkpoints go and how to reach it: the job's `checkpoint.storage` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageConfig {
    /// `s3://bucket/prefix`, `file:///path` or a plain path.
    pub url: String,
    /// The S3 endpoint (MinIO, Ceph, a local server): `http://127.0.0.1:9000`. Else
    /// `AWS_ENDPOINT`, else AWS itself.
    pub endpoint: Option<String>,
    /// Else `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// Else `AWS_ACCESS_KEY_ID` (and the rest of the usual AWS environment).
    pub access_key_id: Option<String>,
    /// Else `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// Allow `http://` endpoints (else `AWS_ALLOW_HTTP`; off by default).
    pub allow_http: Option<bool>,
    /// How long one request may take before it is abandoned (and retried).
    pub request_timeout: Option<Duration>,
    /// Retries of a failed request, with exponential backoff, before the operation fails.
    pub max_retries: Option<usize>,
}

impl StorageConfig {
    /// Storage at `url`, everything else from the environment.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// What kind of storage the URL names, without opening it.
    pub fn kind(&self) -> Result<StorageKind, String> {
        let url = self.url.trim();
        if url.is_empty() {
            return Err(
                "an empty storage location; use s3://bucket/prefix, a file:// URL or a path".into(),
            );
        }
        if let Some(path) = url.strip_prefix("file://") {
            if path.is_empty() {
                return Err(
                    "`file://` needs a path, e.g. `file:///var/lib/weir/checkpoints`".into(),
                );
            }
            return Ok(StorageKind::Local(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("`{url}` names no bucket; write s3://bucket/prefix"));
            }
            let prefix = prefix.trim_matches('/').to_string();
            return Ok(StorageKind::S3 {
                bucket: bucket.to_string(),
                prefix,
            });
        }
        match url.split_once("://") {
            Some((scheme, _)) => Err(format!(
                "checkpoint storage `{scheme}://` is not supported; use s3://bucket/prefix, a file:// URL or a path"
            )),
            None => Ok(StorageKind::Local(PathBuf::from(url))),
        }
    }
}

/// The storage a [`StorageConfig`] names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageKind {
    Local(PathBuf),
    S3 { bucket: String, prefix: String },
}

/// Opens the storage `config` names. Nothing is contacted yet: an unreachable store is
/// reported, with its URL, by the first operation.
pub fn open(config: &StorageConfig) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    open_guarded(config, None)
}

/// Decides, each time an S3 client connects, which addresses of a host name it may connect
/// to. A server's outbound policy implements it (`weir_http_ui::endpoints`): it checked the
/// names a job gives when the job was submitted, and DNS may answer otherwise by the time the
/// client connects, so the check is made again on the addresses the client is about to use,
/// and the client connects to no others. Addresses written as literals are not looked up, and
/// so never reach it (they were checked as written).
pub trait AddressGuard:
    std::fmt::Debug + Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe
{
    /// The addresses of `host` the client may connect to, or why it may not connect at all.
    /// Runs on a blocking thread: it may look the name up.
    fn addresses(&self, host: &str) -> Result<Vec<std::net::IpAddr>, String>;
}

/// An [`AddressGuard`] as `object_store` takes a resolver.
#[derive(Debug)]
struct GuardedResolver(Arc<dyn AddressGuard>);

impl object_store::client::DnsResolver for GuardedResolver {
    fn resolve(&self, host: &str) -> object_store::client::DnsFuture {
        let guard = self.0.clone();
        let host = host.to_owned();
        Box::pin(async move {
            let addresses = tokio::task::spawn_blocking(move || guard.addresses(&host))
                .await
                .map_err(|e| Box::new(e) as object_store::client::DnsError)?;
            addresses.map_err(object_store::client::DnsError::from)
        })
    }
}

/// [`open`], with the S3 client connecting only where `guard` allows (`None`: anywhere DNS
/// says).
pub fn open_guarded(
    config: &StorageConfig,
    guard: Option<&Arc<dyn AddressGuard>>,
) -> Result<Arc<dyn CheckpointStorage>, StorageError> {
    let invalid = |reason: String| StorageError {
        op: "opening",
        location: config.url.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, reason),
    };
    match config.kind().map_err(invalid)? {
        StorageKind::Local(root) => Ok(Arc::new(LocalStorage::new(root))),
        StorageKind::S3 { .. } => Ok(Arc::new(ObjectStorage::s3_guarded(config, guard)?)),
    }
}

/// The environment variable that lets the S3 client fetch credentials from the cloud
/// instance's metadata service when none are configured (`true`; off by default).
pub const INSTANCE_METADATA: &str = "WEIR_S3_INSTANCE_METADATA";

/// Whether an environment value means yes, as `object_store` reads its flags.
fn truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "on" | "yes" | "y"
    )
}

/// Files at least this large are uploaded in parts.
pub const MULTIPART_THRESHOLD: u64 = 16 << 20;
/// Size of one part of a multipart upload (S3 wants at least 5 MiB for all but the last).
pub const PART_SIZE: usize = 8 << 20;
/// Parts of one file in flight at once (each holds [`PART_SIZE`] bytes of memory).
const PARTS_IN_FLIGHT: usize = 4;

/// Checkpoint storage over any [`ObjectStore`], keys under a prefix.
#[derive(Clone, Debug)]
pub struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    /// Keys live under it (the URL's path), without `/` at either end; empty for the root.
    prefix: String,
    /// The store's URL (`s3://bucket/prefix`), which locations in messages start with.
    url: String,
    /// Files at least this large go up in parts of `part_size`.
    multipart_threshold: u64,
    part_size: usize,
}

impl ObjectStorage {
    /// Storage in `store` under `prefix`; `url` names it in messages.
    pub fn new(store: Arc<dyn ObjectStore>, url: impl Into<String>, prefix: &str) -> Self {
        Self {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            url: url.into().trim_end_matches('/').to_string(),
            multipart_threshold: MULTIPART_THRESHOLD,
            part_size: PART_SIZE,
        }
    }

    /// Uploads files of at least `threshold` bytes in parts of `part_size` bytes.
    pub fn with_multipart(mut self, threshold: u64, part_size: usize) -> Self {
        assert!(
            part_size > 0,
            "a multipart upload needs parts of at least a byte"
        );
        self.multipart_threshold = threshold;
        self.part_size = part_size;
        self
    }

    /// S3-compatible storage as `config` says, the usual `AWS_*` variables of the process's
    /// environment filling in what it leaves out. Credentials come from `config`, the
    /// environment's keys, or a credential source the environment configures (web identity,
    /// container credentials); never from the cloud instance's metadata service unless
    /// [`INSTANCE_METADATA`] says so (see [`Self::s3_in`]).
    pub fn s3(config: &StorageConfig) -> Result<Self, StorageError> {
        Self::s3_guarded(config, None)
    }

    /// [`Self::s3`], the client connecting only where `guard` allows.
    pub fn s3_guarded(
        config: &StorageConfig,
        guard: Option<&Arc<dyn AddressGuard>>,
    ) -> Result<Self, StorageError> {
        let env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        Self::s3_with(config, env, guard)
    }

    /// [`Self::s3`] with `env` as the environment (tests pass their own: a process's
    /// environment cannot be changed safely while it runs threads).
    ///
    /// With no credentials configured, `object_store` would ask the instance metadata service
    /// (`http://169.254.169.254`) for the instance's own: whoever can make weir open a store
    /// then acts with the machine's cloud role, and a job submitted to `weir serve` could
    /// make the server fetch them. So without credentials the store is refused with a message
    /// saying what to configure, unless the environment asks for unsigned requests
    /// (`AWS_SKIP_SIGNATURE=true`, for a store that takes anonymous ones) or for the
    /// metadata service ([`INSTANCE_METADATA`]`=true`, on a cloud instance whose role is meant
    /// to be used). Refusing rather than silently sending unsigned requests: an unsigned
    /// write is refused by any store that holds private data, and that refusal would only
    /// come at the first checkpoint, as a 403 far from its cause.
    pub fn s3_in(
        config: &StorageConfig,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, StorageError> {
        Self::s3_with(config, env, None)
    }

    fn s3_with(
        config: &StorageConfig,
        env: impl IntoIterator<Item = (String, String)>,
        guard: Option<&Arc<dyn AddressGuard>>,
    ) -> Result<Self, StorageError> {
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as Key};

        let invalid = |reason: String| StorageError {
            op: "opening",
            location: config.url.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, reason),
        };
        let StorageKind::S3 { bucket, prefix } = config.kind().map_err(invalid)? else {
            return Err(invalid("not an s3:// URL".into()));
        };
        let mut builder = AmazonS3Builder::new();
        if let Some(guard) = guard {
            // First: client options set later (the environment's) change these in place.
            builder = builder.with_client_options(
                object_store::ClientOptions::new()
                    .with_dns_resolver(Arc::new(GuardedResolver(guard.clone()))),
            );
        }
        let mut instance_metadata = false;
        for (name, value) in env {
            if name == INSTANCE_METADATA {
                instance_metadata = truthy(&value);
            } else if name.starts_with("AWS_") {
                // As `AmazonS3Builder::from_env` does.
                if let Ok(key) = name.to_ascii_lowercase().parse::<Key>() {
                    builder = builder.with_config(key, value);
                }
            }
        }
        let mut builder = builder.with_bucket_name(&bucket);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(allow) = config.allow_http {
            builder = builder.with_allow_http(allow);
        }
        if let Some(timeout) = config.request_timeout {
            builder = builder.with_config(
                object_store::aws::AmazonS3ConfigKey::Client(
                    object_store::ClientConfigKey::Timeout,
                ),
                format!("{}ms", timeout.as_millis()),
            );
        }
        let set = |key: Key| {
            builder
                .get_config_value(&key)
                .is_some_and(|v| !v.trim().is_empty())
        };
        let credentials = set(Key::AccessKeyId)
            || set(Key::SecretAccessKey)
            || (set(Key::WebIdentityTokenFile) && set(Key::RoleArn))
            || set(Key::ContainerCredentialsRelativeUri)
            || (set(Key::ContainerCredentialsFullUri) && set(Key::ContainerAuthorizationTokenFile));
        let unsigned = builder
            .get_config_value(&Key::SkipSignature)
            .is_some_and(|v| truthy(&v));
        if !credentials && !unsigned && !instance_metadata {
            return Err(invalid(format!(
                "no S3 credentials: give `access-key-id` and `secret-access-key` (or set \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); for a store that takes anonymous \
                 requests set AWS_SKIP_SIGNATURE=true; to use this cloud instance's own role set \
                 {INSTANCE_METADATA}=true (weir never asks the instance metadata service unless told to)"
            )));
        }
        builder = builder.with_retry(object_store::RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: config.max_retries.unwrap_or(10),
            retry_timeout: Duration::from_secs(120),
        });
        let store = builder
            .build()
            .map_err(|e| invalid(format!("cannot configure S3 access: {e}")))?;
        let url = if prefix.is_empty() {
            format!("s3://{bucket}")
        } else {
            format!("s3://{bucket}/{prefix}")
        };
        Ok(Self::new(Arc::new(store), url, &prefix))
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    fn path(&self, key: &str) -> ObjectPath {
        let key = key.trim_matches('/');
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.prefix))
        }
    }

    /// The key of an object listed in the store.
    fn key_of(&self, path: &ObjectPath) -> Option<String> {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            return Some(full.to_string());
        }
        full.strip_prefix(self.prefix.as_str())?
            .strip_prefix('/')
            .map(str::to_string)
    }

    fn error(&self, op: &'static str, key: &str, e: object_store::Error) -> StorageError {
        let kind = match &e {
            object_store::Error::NotFound { .. } => std::io::ErrorKind::NotFound,
            _ => std::io::ErrorKind::Other,
        };
        StorageError {
            op,
            location: self.location(key),
            source: std::io::Error::new(kind, e),
        }
    }

    fn local_error(
        &self,
        op: &'static str,
        key: &str,
        local: &std::path::Path,
        e: std::io::Error,
    ) -> StorageError {
        StorageError {
            op,
            location: self.location(key),
            source: std::io::Error::new(e.kind(), format!("{}: {e}", local.display())),
        }
    }

    /// Starts reading the object `key`.
    async fn open(&self, key: &str) -> Result<object_store::GetResult, StorageError> {
        self.store
            .get(&self.path(key))
            .await
            .map_err(|e| self.error("reading", key, e))
    }

    async fn upload_in_parts(
        &self,
        key: &str,
        local: &std::path::Path,
    ) -> Result<Placed, StorageError> {
        let path = self.path(key);
        let upload = self
            .store
            .put_multipart(&path)
            .await
            .map_err(|e| self.error("writing", key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.part_size);
        let written = async {
            let mut file = tokio::fs::File::open(local)
                .await
                .map_err(|e| self.local_error("writing", key, local, e))?;
            let mut hasher = xxhash_rust::xxh3::Xxh3::new();
            let mut size = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = file
                    .read(&mut buf)
                    .await
                    .map_err(|e| self.local_error("writing", key, local, e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                size += n as u64;
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.error("writing", key, e))?;
                writer.write(&buf[..n]);
            }
            Ok::<_, StorageError>(Placed {
                size,
                xxh3: hasher.digest(),
            })
        }
        .await;
        match written {
            Ok(placed) => {
                writer
                    .finish()
                    .await
                    .map_err(|e| self.error("writing", key, e))?;
                Ok(placed)
            }
            Err(e) => {
                // Nothing becomes visible under the key; the parts are discarded.
                if let Err(abort) = writer.abort().await {
                    tracing::warn!(location = %self.location(key), error = %abort, "aborting a multipart upload failed");
                }
                Err(e)
            }
        }
    }
}

impl CheckpointStorage for ObjectStorage {
    fn location(&self, key: &str) -> String {
        format!("{}/{}", self.url, key.trim_matches('/'))
    }

    fn put(&self, key: &str, bytes: Vec<u8>) -> BoxFuture<'_, Result<Placed, StorageError>> {
        let key = key.to_string();
        Box::pin(async move {
            let placed = Placed {
                size: bytes.len() as u64,
                xxh3: xxhash_rust::xxh3::xxh3_64(&bytes),
            };
            self.store
                .put(&self.path(&key), PutPayload::from(bytes))
                .await
                .map_err(|e| self.error("writing", &key, e))?;
            Ok(placed)
        })
    }

    fn put_file(&self, key: &str, local: PathBuf) -> BoxFuture<'_, Result<Placed, StorageError>> {
        let key = key.to_string();
        Box::pin(async move {
            let size = tokio::fs::metadata(&local)
                .await
                .map_err(|e| self.local_error("writing", &key, &local, e))?
                .len();
            let placed = if size >= self.multipart_threshold {
                self.upload_in_parts(&key, &local).await?
            } else {
                let bytes = tokio::fs::read(&local)
                    .await
                    .map_err(|e| self.local_error("writing", &key, &local, e))?;
                self.put(&key, bytes).await?
            };
            // The local file is consumed, as with local storage (which moves it).
            tokio::fs::remove_file(&local)
                .await
                .map_err(|e| self.local_error("writing", &key, &local, e))?;
            Ok(placed)
        })
    }

    fn get(&self, key: &str, max: u64) -> BoxFuture<'_, Result<Vec<u8>, StorageError>> {
        let key = key.to_string();
        Box::pin(async move {
            let result = self.open(&key).await?;
            let refuse = |source| StorageError {
                op: "reading",
                location: self.location(&key),
                source,
            };
            if result.meta.size > max {
                return Err(refuse(crate::storage::too_large(max)));
            }
            // The object's size is what the store says; the body is counted as it streams.
            let mut out = Vec::with_capacity(result.meta.size as usize);
            let mut stream = result.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.error("reading", &key, e))?;
                if (out.len() + chunk.len()) as u64 > max {
                    return Err(refuse(crate::storage::too_large(max)));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(out)
        })
    }

    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Vec<u8>, StorageError>> {
        let key = key.to_string();
        Box::pin(async move {
            let path = self.path(&key);
            let short = |got: u64| StorageError {
                op: "reading",
                location: self.location(&key),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "the object ends at {got}; bytes {}..{} were asked for",
                        range.start, range.end
                    ),
                ),
            };
            match self.store.get_range(&path, range.clone()).await {
                // Some stores answer a range past the end with what there is.
                Ok(bytes) if (bytes.len() as u64) < range.end - range.start => {
                    Err(short(range.start + bytes.len() as u64))
                }
                Ok(bytes) => Ok(bytes.to_vec()),
                Err(e) => {
                    // A range past the end is a truncated object: say so, so that a restore
                    // treats it as corrupt (and falls back) rather than as a storage outage.
                    if let Ok(meta) = self.store.head(&path).await
                        && meta.size < range.end
                    {
                        return Err(short(meta.size));
                    }
                    Err(self.error("reading", &key, e))
                }
            }
        })
    }

    fn get_to_file(
        &self,
        key: &str,
        local: PathBuf,
        _immutable: bool,
        expected: u64,
    ) -> BoxFuture<'_, Result<Placed, StorageError>> {
        let key = key.to_string();
        Box::pin(async move {
            let result = self.open(&key).await?;
            let wrong_length = |actual: String| StorageError {
                op: "reading",
                location: self.location(&key),
                source: crate::storage::wrong_length(actual, expected),
            };
            if result.meta.size != expected {
                return Err(wrong_length(result.meta.size.to_string()));
            }
            if let Some(parent) = local.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(|e| self.local_error("reading", &key, parent, e))?;
            }
            // A restore's scratch copy: not fsynced (a crash removes the whole directory).
            let mut file = tokio::fs::File::create(&local)
                .await
                .map_err(|e| self.local_error("reading", &key, &local, e))?;
            let mut hasher = xxhash_rust::xxh3::Xxh3::new();
            let mut size = 0u64;
            let mut stream = result.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.error("reading", &key, e))?;
                // Never more than recorded, whatever the store sends.
                if size + chunk.len() as u64 > expected {
                    drop(file);
                    let _ = tokio::fs::remove_file(&local).await;
                    return Err(wrong_length(format!("more than {expected}")));
                }
                hasher.update(&chunk);
                size += chunk.len() as u64;
                file.write_all(&chunk)
                    .await
                    .map_err(|e| self.local_error("reading", &key, &local, e))?;
            }
            file.flush()
                .await
                .map_err(|e| self.local_error("reading", &key, &local, e))?;
            Ok(Placed {
                size,
                xxh3: hasher.digest(),
            })
        })
    }

    fn list(&self, prefix: &str) -> BoxFuture<'_, Result<Vec<ObjectInfo>, StorageError>> {
        let prefix = prefix.to_string();
        Box::pin(async move {
            // Object stores list by whole path segments: list the directory the prefix names
            // (up to its last `/`) and keep the keys that start with the prefix.
            let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
            let base = (!dir.is_empty() || !self.prefix.is_empty()).then(|| self.path(dir));
            let mut listing = self.store.list(base.as_ref());
            let mut out = Vec::new();
            while let Some(meta) = listing.next().await {
                let meta = meta.map_err(|e| self.error("listing", &prefix, e))?;
                if let Some(key) = self.key_of(&meta.location)
                    && key.starts_with(&prefix)
                {
                    out.push(ObjectInfo {
                        key,
                        size: meta.size,
                    });
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
    }

    fn delete(&self, key: &str) -> BoxFuture<'_, Result<(), StorageError>> {
        let key = key.to_string();
        Box::pin(async move {
            match self.store.delete(&self.path(&key)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.error("deleting", &key, e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::verify;
    use object_store::memory::InMemory;

    fn memory() -> ObjectStorage {
        ObjectStorage::new(Arc::new(InMemory::new()), "memory://b/root", "root")
    }

    #[test]
    fn urls_name_their_storage_or_say_what_is_wrong() {
        let kind = |url: &str| StorageConfig::url(url).kind();
        assert_eq!(
            kind("s3://bucket/a/b/").unwrap(),
            StorageKind::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            kind("s3://bucket").unwrap(),
            StorageKind::S3 {
                bucket: "bucket".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            kind("file:///tmp/x").unwrap(),
            StorageKind::Local("/tmp/x".into())
        );
        assert_eq!(kind("data/c").unwrap(), StorageKind::Local("data/c".into()));
        assert!(kind("s3:///x").unwrap_err().contains("no bucket"));
        assert!(
            kind("gs://b/x")
                .unwrap_err()
                .contains("`gs://` is not supported")
        );
        assert!(kind("file://").unwrap_err().contains("needs a path"));
        let e = open(&StorageConfig::url("ftp://h/x")).unwrap_err();
        assert!(e.to_string().contains("ftp://h/x"), "{e}");
    }

    /// A server on 127.0.0.1 that records the head of every request and answers each with
    /// `answer`, closing the connection.
    struct Recorder {
        url: String,
        heads: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Recorder {
        fn start(answer: &'static str) -> Self {
            use std::io::{BufRead, Write};
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
            let seen = heads.clone();
            // Lives as long as the test process: a test's listener is never waited for.
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut reader = std::io::BufReader::new(&stream);
                    let mut head = String::new();
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        head.push_str(&line);
                        line.clear();
                    }
                    seen.lock().unwrap().push(head);
                    let _ = (&stream).write_all(answer.as_bytes());
                }
            });
            Recorder { url, heads }
        }

        fn heads(&self) -> Vec<String> {
            self.heads.lock().unwrap().clone()
        }
    }

    const NOT_FOUND: &str =
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

    /// A store with no credentials of its own on an endpoint of the test's, failing fast,
    /// opened with `vars` and a metadata service of the test's as the environment.
    struct Anonymous {
        metadata: Recorder,
        endpoint: Recorder,
        opened: Result<ObjectStorage, StorageError>,
    }

    fn anonymous(config: StorageConfig, vars: &[(&str, &str)]) -> Anonymous {
        let metadata = Recorder::start(NOT_FOUND);
        let endpoint = Recorder::start(NOT_FOUND);
        let config = StorageConfig {
            endpoint: Some(endpoint.url.clone()),
            allow_http: Some(true),
            max_retries: Some(0),
            request_timeout: Some(Duration::from_secs(5)),
            ..config
        };
        let mut env = vec![("AWS_METADATA_ENDPOINT".to_owned(), metadata.url.clone())];
        env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let opened = ObjectStorage::s3_in(&config, env);
        Anonymous {
            metadata,
            endpoint,
            opened,
        }
    }

    const URL: &str = "s3://bucket/prefix";

    #[tokio::test]
    async fn without_credentials_a_store_is_refused_and_the_metadata_service_is_never_asked() {
        let a = anonymous(StorageConfig::url(URL), &[]);
        let message = a.opened.unwrap_err().to_string();
        assert!(message.contains("no S3 credentials"), "{message}");
        assert!(message.contains(URL), "{message}");
        assert!(message.contains(INSTANCE_METADATA), "{message}");
        // A key id without its secret is not a way around it either: object_store refuses.
        let half = StorageConfig {
            access_key_id: Some("AKIA".into()),
            ..StorageConfig::url(URL)
        };
        let b = anonymous(half, &[]);
        assert!(b.opened.is_err());
        for asked in [a.metadata, a.endpoint, b.metadata, b.endpoint] {
            assert!(asked.heads().is_empty(), "{:?}", asked.heads());
        }
    }

    #[tokio::test]
    async fn unsigned_requests_when_asked_for_go_to_the_endpoint_alone() {
        let a = anonymous(StorageConfig::url(URL), &[("AWS_SKIP_SIGNATURE", "true")]);
        let e = a
            .opened
            .unwrap()
            .get("job/_metadata", 1 << 20)
            .await
            .unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound, "{e}");
        let heads = a.endpoint.heads();
        assert_eq!(heads.len(), 1, "{heads:?}");
        assert!(
            heads[0].starts_with("GET /bucket/prefix/job/_metadata"),
            "{heads:?}"
        );
        assert!(
            !heads[0].to_ascii_lowercase().contains("authorization:"),
            "{heads:?}"
        );
        assert!(a.metadata.heads().is_empty(), "{:?}", a.metadata.heads());
    }

    #[tokio::test]
    async fn the_metadata_service_is_asked_only_when_configured_to() {
        let a = anonymous(StorageConfig::url(URL), &[(INSTANCE_METADATA, "true")]);
        let s = a.opened.unwrap();
        // No credentials come back, so the read fails; the metadata service was asked.
        let read =
            tokio::time::timeout(Duration::from_secs(30), s.get("job/_metadata", 1 << 20)).await;
        assert!(matches!(read, Ok(Err(_))), "{read:?}");
        assert!(!a.metadata.heads().is_empty());
        assert!(a.endpoint.heads().is_empty(), "{:?}", a.endpoint.heads());
    }

    #[tokio::test]
    async fn objects_are_written_read_ranged_listed_and_deleted_under_the_prefix() {
        let s = memory();
        crate::fixtures::objects(&s).await.unwrap();
        s.put("job/x", vec![1]).await.unwrap();
        assert!(
            s.store.head(&ObjectPath::from("root/job/x")).await.is_ok(),
            "keys live under the prefix"
        );
        assert_eq!(s.location("job/x"), "memory://b/root/job/x");
    }

    #[tokio::test]
    async fn retention_deletes_only_what_no_retained_checkpoint_uses() {
        crate::fixtures::retention(Arc::new(memory()))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn large_files_go_up_in_parts_and_come_back_verified() {
        let dir = tempfile::tempdir().unwrap();
        let s = memory().with_multipart(1000, 300);
        let content: Vec<u8> = (0..2500u32).map(|i| (i * 7 % 251) as u8).collect();
        for (name, bytes) in [("big.sst", &content[..]), ("small", &content[..999])] {
            let local = dir.path().join(name);
            std::fs::write(&local, bytes).unwrap();
            let placed = s
                .put_file(&format!("j/shared/{name}"), local.clone())
                .await
                .unwrap();
            assert!(!local.exists(), "the local file was consumed");
            assert!(verify(bytes, placed).is_ok());
            let back = dir.path().join("restore").join(name);
            let read = s
                .get_to_file(
                    &format!("j/shared/{name}"),
                    back.clone(),
                    true,
                    bytes.len() as u64,
                )
                .await
                .unwrap();
            assert_eq!(read, placed);
            assert_eq!(std::fs::read(&back).unwrap(), bytes);
        }
        let e = s
            .put_file("j/x", dir.path().join("never-written"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("never-written"), "{e}");
        assert!(e.to_string().contains("memory://b/root/j/x"), "{e}");
    }
}
