//! Iceberg's file I/O on weir's object store: the library writes Parquet data files,
//! manifests and table metadata through its [`Storage`] trait, and this one sends them to the
//! same `object_store` clients as the checkpoints (S3 with the checkpoint storage's settings,
//! or the local file system), so no second S3 client (OpenDAL) is built.
//!
//! A location is `s3://bucket/key` (the warehouse's bucket only) or a local absolute path,
//! with or without `file://`.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

/// Where a location's bytes live.
#[derive(Clone, Debug)]
struct Stores {
    /// The warehouse's bucket and its client, when the warehouse is on S3.
    s3: Option<(String, Arc<dyn ObjectStore>)>,
    local: Arc<dyn ObjectStore>,
}

/// The [`Storage`] of a sink's table. It is made in the process and never sent elsewhere:
/// serialised, it carries nothing (no credentials), and a copy read back cannot reach a store.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WeirStorage {
    #[serde(skip)]
    stores: Option<Stores>,
}

impl WeirStorage {
    /// Storage for a warehouse on S3 (`bucket` through `store`) and for local paths.
    pub fn new(s3: Option<(String, Arc<dyn ObjectStore>)>) -> Self {
        Self {
            stores: Some(Stores {
                s3,
                local: Arc::new(object_store::local::LocalFileSystem::new()),
            }),
        }
    }

    /// The store and key of `location`.
    fn resolve(&self, location: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        let Some(stores) = &self.stores else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "this copy of weir's Iceberg storage was deserialised and reaches no store",
            ));
        };
        if let Some(rest) = location.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            return match &stores.s3 {
                Some((b, store)) if b == bucket => Ok((store.clone(), ObjectPath::from(key))),
                _ => Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!(
                        "{location} is outside the warehouse's bucket: the sink reaches only the \
                         bucket of its `warehouse`"
                    ),
                )),
            };
        }
        let path = location.strip_prefix("file://").unwrap_or(location);
        if !path.starts_with('/') {
            return Err(Error::new(
                ErrorKind::FeatureUnsupported,
                format!("{location} is neither s3:// nor an absolute local path"),
            ));
        }
        // The local store's root is `/`: a location's absolute path is its key.
        let key = ObjectPath::parse(path.trim_start_matches('/')).map_err(|e| {
            Error::new(ErrorKind::DataInvalid, format!("the path {location}")).with_source(e)
        })?;
        Ok((stores.local.clone(), key))
    }
}

impl WeirStorage {
    /// The files below the directory `dir` whose names start with `prefix`, as locations of
    /// the same form as `dir` (`s3://...` or `file://...`).
    pub async fn list(&self, dir: &str, prefix: &str) -> Result<Vec<String>> {
        let (store, root) = self.resolve(dir)?;
        let head = if let Some(rest) = dir.strip_prefix("s3://") {
            let bucket = rest.split('/').next().unwrap_or_default();
            format!("s3://{bucket}/")
        } else {
            "file:///".to_string()
        };
        let mut out = Vec::new();
        let mut listed = store.list(Some(&root));
        while let Some(meta) = listed.next().await {
            let meta = match meta {
                Ok(m) => m,
                // A table that has no data directory yet.
                Err(object_store::Error::NotFound { .. }) => break,
                Err(e) => return Err(io_error("listing", dir, e)),
            };
            if meta
                .location
                .filename()
                .is_some_and(|n| n.starts_with(prefix))
            {
                out.push(format!("{head}{}", meta.location));
            }
        }
        Ok(out)
    }
}

/// An `object_store` error as Iceberg's, keeping "not found" apart (the library asks whether
/// files exist).
fn io_error(what: &str, location: &str, e: object_store::Error) -> Error {
    Error::new(ErrorKind::Unexpected, format!("{what} {location}")).with_source(e)
}

#[async_trait::async_trait]
#[typetag::serde(name = "weir")]
impl Storage for WeirStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        let (store, key) = self.resolve(path)?;
        match store.head(&key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(io_error("checking", path, e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let (store, key) = self.resolve(path)?;
        let meta = store
            .head(&key)
            .await
            .map_err(|e| io_error("reading the size of", path, e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let (store, key) = self.resolve(path)?;
        let got = store
            .get(&key)
            .await
            .map_err(|e| io_error("reading", path, e))?;
        got.bytes().await.map_err(|e| io_error("reading", path, e))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        let (store, key) = self.resolve(path)?;
        Ok(Box::new(Reader {
            store,
            key,
            location: path.to_string(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let (store, key) = self.resolve(path)?;
        store
            .put(&key, bs.into())
            .await
            .map_err(|e| io_error("writing", path, e))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let (store, key) = self.resolve(path)?;
        Ok(Box::new(Writer {
            inner: object_store::buffered::BufWriter::with_capacity(store, key, WRITE_PART),
            location: path.to_string(),
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let (store, key) = self.resolve(path)?;
        match store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io_error("deleting", path, e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let (store, key) = self.resolve(path)?;
        let mut listed = store.list(Some(&key));
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(|e| io_error("listing", path, e))?;
            match store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error("deleting", meta.location.as_ref(), e)),
            }
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Bytes a data file's writer buffers before it starts a multipart upload (and the size of
/// each part after that): S3's smallest part is 5 MiB.
const WRITE_PART: usize = 8 << 20;

struct Reader {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    location: String,
}

#[async_trait::async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.key, range)
            .await
            .map_err(|e| io_error("reading", &self.location, e))
    }
}

struct Writer {
    inner: object_store::buffered::BufWriter,
    location: String,
}

#[async_trait::async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.inner
            .put(bs)
            .await
            .map_err(|e| io_error("writing", &self.location, e))
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.shutdown().await.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("finishing {}", self.location),
            )
            .with_source(e)
        })
    }
}

/// Hands the library the sink's storage (it asks a factory for one).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WeirStorageFactory {
    #[serde(skip)]
    storage: Option<Arc<WeirStorage>>,
}

impl WeirStorageFactory {
    pub fn new(storage: WeirStorage) -> Self {
        Self {
            storage: Some(Arc::new(storage)),
        }
    }
}

#[typetag::serde(name = "weir")]
impl StorageFactory for WeirStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        match &self.storage {
            Some(s) => Ok(s.clone()),
            None => Err(Error::new(
                ErrorKind::Unexpected,
                "this copy of weir's Iceberg storage was deserialised and reaches no store",
            )),
        }
    }
}
