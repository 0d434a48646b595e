//! Where checkpoints live: a key → bytes store, local files by default.
//!
//! Keys are `/`-separated relative paths (`q5/chk-0000000007/_metadata`). Every write is
//! durable when it returns and atomic: a reader sees the whole object or nothing. The
//! interface is what object storage offers (whole puts, ranged gets, listing by prefix), so
//! an S3-compatible store can implement it; [`LocalStorage`] implements it with files, writing
//! to a temporary name, fsyncing, renaming and fsyncing the directory.

use std::io::{Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use crate::error::StorageError;

/// An object in storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
}

/// A file placed in storage, with what a reader needs to verify it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub size: u64,
    /// xxh3-64 of the content.
    pub xxh3: u64,
}

/// Checkpoint storage. Implementations are shared by every job of a process.
pub trait CheckpointStorage: Send + Sync + std::fmt::Debug {
    /// The location of `key`, for messages (a URL or a path).
    fn location(&self, key: &str) -> String;

    /// Writes `bytes` at `key`, atomically and durably.
    fn put(&self, key: &str, bytes: Vec<u8>) -> BoxFuture<'_, Result<Placed, StorageError>>;

    /// Places the local file `local` at `key`, atomically and durably. The local file is
    /// consumed: it may be moved rather than copied.
    fn put_file(&self, key: &str, local: PathBuf) -> BoxFuture<'_, Result<Placed, StorageError>>;

    fn get(&self, key: &str) -> BoxFuture<'_, Result<Vec<u8>, StorageError>>;

    /// Bytes `range` of `key` (one ranged request on object storage).
    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Vec<u8>, StorageError>>;

    /// Copies `key` to the local file `local`, returning what was read so the caller can
    /// verify it. `immutable`: the local copy will never be written (a RocksDB SST), so local
    /// storage may hard-link it instead of copying.
    fn get_to_file(
        &self,
        key: &str,
        local: PathBuf,
        immutable: bool,
    ) -> BoxFuture<'_, Result<Placed, StorageError>>;

    /// Every object whose key starts with `prefix`, in key order.
    fn list(&self, prefix: &str) -> BoxFuture<'_, Result<Vec<ObjectInfo>, StorageError>>;

    /// Removes `key`; removing what does not exist is not an error.
    fn delete(&self, key: &str) -> BoxFuture<'_, Result<(), StorageError>>;
}

/// Storage in a local directory.
#[derive(Clone, Debug)]
pub struct LocalStorage {
    root: PathBuf,
}

impl LocalStorage {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> PathBuf {
        let mut path = self.root.clone();
        for part in key.split('/').filter(|p| !p.is_empty() && *p != ".") {
            path.push(part);
        }
        path
    }

    /// Runs blocking file work off the async threads, mapping its error to `key`.
    fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        key: &str,
        work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StorageError>> {
        let location = self.location(key);
        Box::pin(async move {
            let result = tokio::task::spawn_blocking(work)
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(format!("storage task: {e}"))));
            result.map_err(|source| StorageError {
                op,
                location,
                source,
            })
        })
    }
}

/// A temporary name next to `path`, unique within the process.
fn temp_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

/// Makes the rename of a file in `dir` durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(parent) => std::fs::create_dir_all(parent),
        None => Ok(()),
    }
}

/// Reads `file` to its end, hashing it.
fn hash_file(file: &mut std::fs::File) -> std::io::Result<Placed> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(Placed {
        size,
        xxh3: hasher.digest(),
    })
}

/// Copies `from` into a new file `to`, hashing on the way, and fsyncs it.
fn copy_hashing(from: &Path, to: &Path) -> std::io::Result<Placed> {
    let mut input = std::fs::File::open(from)?;
    let mut output = std::fs::File::create(to)?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        output.write_all(&buf[..n])?;
        size += n as u64;
    }
    output.sync_all()?;
    Ok(Placed {
        size,
        xxh3: hasher.digest(),
    })
}

impl CheckpointStorage for LocalStorage {
    fn location(&self, key: &str) -> String {
        self.path(key).display().to_string()
    }

    fn put(&self, key: &str, bytes: Vec<u8>) -> BoxFuture<'_, Result<Placed, StorageError>> {
        let path = self.path(key);
        self.blocking("writing", key, move || {
            create_parent(&path)?;
            let temp = temp_name(&path);
            let written = (|| {
                let mut file = std::fs::File::create(&temp)?;
                file.write_all(&bytes)?;
                file.sync_all()?;
                std::fs::rename(&temp, &path)
            })();
            if written.is_err() {
                let _ = std::fs::remove_file(&temp);
            }
            written?;
            if let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
            Ok(Placed {
                size: bytes.len() as u64,
                xxh3: xxhash_rust::xxh3::xxh3_64(&bytes),
            })
        })
    }

    fn put_file(&self, key: &str, local: PathBuf) -> BoxFuture<'_, Result<Placed, StorageError>> {
        let path = self.path(key);
        self.blocking("writing", key, move || {
            create_parent(&path)?;
            // Moving is free when the scratch directory is on the same filesystem; the inode
            // is then fsynced where it lands.
            let placed = match std::fs::rename(&local, &path) {
                Ok(()) => {
                    let mut file = std::fs::File::open(&path)?;
                    let placed = hash_file(&mut file)?;
                    file.sync_all()?;
                    placed
                }
                Err(e) if e.raw_os_error() == Some(18) => {
                    // EXDEV: another filesystem; copy under a temporary name, then rename.
                    let temp = temp_name(&path);
                    let copied = copy_hashing(&local, &temp)
                        .and_then(|placed| std::fs::rename(&temp, &path).map(|()| placed));
                    if copied.is_err() {
                        let _ = std::fs::remove_file(&temp);
                    }
                    let placed = copied?;
                    std::fs::remove_file(&local)?;
                    placed
                }
                Err(e) => return Err(e),
            };
            if let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
            Ok(placed)
        })
    }

    fn get(&self, key: &str) -> BoxFuture<'_, Result<Vec<u8>, StorageError>> {
        let path = self.path(key);
        self.blocking("reading", key, move || std::fs::read(&path))
    }

    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Vec<u8>, StorageError>> {
        use std::io::Seek;
        let path = self.path(key);
        self.blocking("reading", key, move || {
            let mut file = std::fs::File::open(&path)?;
            file.seek(std::io::SeekFrom::Start(range.start))?;
            let mut out = vec![0u8; (range.end.saturating_sub(range.start)) as usize];
            file.read_exact(&mut out)?;
            Ok(out)
        })
    }

    fn get_to_file(
        &self,
        key: &str,
        local: PathBuf,
        immutable: bool,
    ) -> BoxFuture<'_, Result<Placed, StorageError>> {
        let path = self.path(key);
        self.blocking("reading", key, move || {
            create_parent(&local)?;
            if !immutable {
                return copy_hashing(&path, &local);
            }
            // A hard link costs nothing, and neither side ever writes the file; the content is
            // still read once to verify it.
            match std::fs::hard_link(&path, &local) {
                Ok(()) => hash_file(&mut std::fs::File::open(&local)?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(e),
                Err(_) => copy_hashing(&path, &local),
            }
        })
    }

    fn list(&self, prefix: &str) -> BoxFuture<'_, Result<Vec<ObjectInfo>, StorageError>> {
        let root = self.root.clone();
        let prefix = prefix.to_string();
        self.blocking("listing", &prefix.clone(), move || {
            // Walk only the directory the prefix names (up to its last `/`).
            let dir_part = prefix.rfind('/').map_or("", |i| &prefix[..i]);
            let mut start = root.clone();
            for part in dir_part.split('/').filter(|p| !p.is_empty()) {
                start.push(part);
            }
            let mut out = Vec::new();
            let mut stack = vec![(start, dir_part.to_string())];
            while let Some((dir, key_prefix)) = stack.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                for entry in entries {
                    let entry = entry?;
                    let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                        continue;
                    };
                    let key = if key_prefix.is_empty() {
                        name
                    } else {
                        format!("{key_prefix}/{name}")
                    };
                    let kind = entry.file_type()?;
                    if kind.is_dir() {
                        if key.starts_with(&prefix) || prefix.starts_with(&format!("{key}/")) {
                            stack.push((entry.path(), key));
                        }
                    } else if key.starts_with(&prefix) {
                        out.push(ObjectInfo {
                            key,
                            size: entry.metadata()?.len(),
                        });
                    }
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
    }

    fn delete(&self, key: &str) -> BoxFuture<'_, Result<(), StorageError>> {
        let path = self.path(key);
        let root = self.root.clone();
        self.blocking("deleting", key, move || {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
            // Directories left empty go too (object storage has none), up to the root.
            let mut dir = path.parent();
            while let Some(d) = dir {
                if d == root || std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
    }
}

/// Deletes every object under `prefix` (a checkpoint's directory, say).
pub async fn delete_prefix(
    storage: &dyn CheckpointStorage,
    prefix: &str,
) -> Result<usize, StorageError> {
    let objects = storage.list(prefix).await?;
    for o in &objects {
        storage.delete(&o.key).await?;
    }
    Ok(objects.len())
}

/// Checks that `bytes` are what `placed` describes.
pub fn verify(bytes: &[u8], expected: Placed) -> Result<(), String> {
    if bytes.len() as u64 != expected.size {
        return Err(format!(
            "{} bytes where {} were written (truncated or replaced)",
            bytes.len(),
            expected.size
        ));
    }
    let actual = xxhash_rust::xxh3::xxh3_64(bytes);
    if actual != expected.xxh3 {
        return Err(format!(
            "checksum mismatch (xxh3 {actual:016x}, expected {:016x}): the content changed after it was written",
            expected.xxh3
        ));
    }
    Ok(())
}

/// A local path as a storage root and a key under it: `/data/checkpoints/q5/chk-7` →
/// (`/data/checkpoints/q5`, `chk-7`).
pub fn split_local(path: &Path) -> Option<(PathBuf, String)> {
    let name = path.file_name()?.to_str()?.to_string();
    let parent = path.parent()?.to_path_buf();
    Some((parent, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn puts_are_readable_listed_ranged_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        crate::fixtures::objects(&s).await.unwrap();
        assert!(!dir.path().join("job").exists(), "empty dirs go too");
    }

    #[tokio::test]
    async fn put_file_moves_and_get_to_file_links_with_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path().join("store"));
        let local = dir.path().join("scratch.bin");
        std::fs::write(&local, vec![7u8; 3000]).unwrap();
        let placed = s.put_file("j/x/file", local.clone()).await.unwrap();
        assert!(!local.exists(), "the local file was consumed");
        let back = dir.path().join("restore/file");
        let read = s.get_to_file("j/x/file", back.clone(), true).await.unwrap();
        assert_eq!(read, placed);
        assert_eq!(std::fs::read(&back).unwrap(), vec![7u8; 3000]);
        assert!(verify(&[7u8; 3000], placed).is_ok());
        assert!(
            verify(&[7u8; 2999], placed)
                .unwrap_err()
                .contains("truncated")
        );
        let mut flipped = vec![7u8; 3000];
        flipped[100] = 8;
        assert!(verify(&flipped, placed).unwrap_err().contains("checksum"));
    }
}
