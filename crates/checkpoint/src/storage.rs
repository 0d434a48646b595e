//! Where checkpoints live: a key → bytes store, local files by default.
//!
//! Keys are `/`-separated relative paths (`q5/chk-0000000007/_metadata`). Every write is
//! durable when it returns and atomic: a reader sees the whole object or nothing. The
//! interface is what object storage offers (whole puts, ranged gets, listing by prefix), so
//! an S3-compatible store can implement it; [`LocalStorage`] implements it with files, writing
//! to a temporary name, fsyncing, renaming and fsyncing the directory.
//!
//! Reads are bounded by what the caller expects, because a checkpoint directory is data a
//! person (or a broken disk) can change: [`CheckpointStorage::get`] takes a most, and
//! [`CheckpointStorage::get_to_file`] the length the metadata records. [`LocalStorage`] reads
//! only regular files, opened without following a link: a file replaced by a link to an
//! endless device, a FIFO or a directory is refused, naming what it is, before a byte is read.

use std::fs::File;
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

    /// The whole object `key`, which may hold at most `max` bytes: a larger one is refused
    /// (error kind `FileTooLarge`) without reading more than `max` bytes of it.
    fn get(&self, key: &str, max: u64) -> BoxFuture<'_, Result<Vec<u8>, StorageError>>;

    /// Bytes `range` of `key` (one ranged request on object storage).
    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Vec<u8>, StorageError>>;

    /// Copies `key`, which the metadata records as `size` bytes long, to the local file
    /// `local`, returning what was read so the caller can verify its checksum. An object of
    /// another length is refused (error kind `InvalidData`) and at most `size` bytes are ever
    /// copied, so a damaged snapshot cannot fill the disk. `immutable`: the local copy will
    /// never be written (a RocksDB SST), so local storage may hard-link it instead of copying.
    fn get_to_file(
        &self,
        key: &str,
        local: PathBuf,
        immutable: bool,
        size: u64,
    ) -> BoxFuture<'_, Result<Placed, StorageError>>;

    /// Every object whose key starts with `prefix`, in key order. Where local storage finds a
    /// folder below the prefix's that it may not read (its permissions), it lists the
    /// folder's own key as one object, as it lists a file at that key: something is there,
    /// and reading what is under it fails with the reason. The folder the prefix names being
    /// unreadable fails the listing, with an error of the same kind that says what to fix.
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

/// What a file that is not a regular file is, for messages.
fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something other than a file"
    }
}

/// The error for a path that is not a regular file (see [`StorageError::is_unreadable`]).
fn not_regular(kind: std::fs::FileType) -> std::io::Error {
    let error_kind = if kind.is_dir() {
        std::io::ErrorKind::IsADirectory
    } else {
        std::io::ErrorKind::InvalidData
    };
    std::io::Error::new(
        error_kind,
        format!(
            "it is {}, not a regular file (a checkpoint's files are never links, directories or devices)",
            describe(kind)
        ),
    )
}

/// Opens the regular file at `path` for reading, with its metadata. A symbolic link (even to
/// a regular file), directory, FIFO, device or socket is refused without being opened or read:
/// one link to `/dev/zero` would otherwise be copied until the disk is full, and a FIFO would
/// block the restore forever.
fn open_regular(path: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    // Looking before opening: opening a device or a FIFO can block or have effects.
    let kind = std::fs::symlink_metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(not_regular(kind));
    }
    // The path may be replaced between the look and the open: the open follows no link and
    // does not wait for a FIFO's writer, and what it opened is checked again.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.file_type().is_file() {
        return Err(not_regular(metadata.file_type()));
    }
    Ok((file, metadata))
}

/// The error for a file whose length is not what its metadata records.
pub(crate) fn wrong_length(actual: impl std::fmt::Display, recorded: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{actual} bytes where the metadata records {recorded} (truncated or replaced)"),
    )
}

/// The error for an object larger than a read accepts.
pub(crate) fn too_large(max: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!("it is larger than {max} bytes, the most this read accepts"),
    )
}

/// Reads `input` to its end, but at most `size` bytes, passing each piece to `sink` and
/// hashing it. More than `size` bytes is an error, found after reading one byte too many.
fn read_bounded(
    input: &mut File,
    size: u64,
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<Placed> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    let mut limited = input.take(size.saturating_add(1));
    loop {
        let n = limited.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > size {
            return Err(wrong_length(format!("more than {size}"), size));
        }
        hasher.update(&buf[..n]);
        sink(&buf[..n])?;
    }
    Ok(Placed {
        size: read,
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

    fn get(&self, key: &str, max: u64) -> BoxFuture<'_, Result<Vec<u8>, StorageError>> {
        let path = self.path(key);
        self.blocking("reading", key, move || {
            let (file, metadata) = open_regular(&path)?;
            let too_large = || too_large(max);
            if metadata.len() > max {
                return Err(too_large());
            }
            let mut out = Vec::with_capacity(metadata.len() as usize);
            // One byte more than allowed tells a file that grew since it was looked at.
            file.take(max.saturating_add(1)).read_to_end(&mut out)?;
            if out.len() as u64 > max {
                return Err(too_large());
            }
            Ok(out)
        })
    }

    fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> BoxFuture<'_, Result<Vec<u8>, StorageError>> {
        use std::io::Seek;
        let path = self.path(key);
        self.blocking("reading", key, move || {
            let (mut file, metadata) = open_regular(&path)?;
            // Checked before allocating: the range comes from metadata, the length from disk.
            if range.end > metadata.len() || range.start > range.end {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "the file ends at {}; bytes {}..{} were asked for",
                        metadata.len(),
                        range.start,
                        range.end
                    ),
                ));
            }
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
        size: u64,
    ) -> BoxFuture<'_, Result<Placed, StorageError>> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path(key);
        self.blocking("reading", key, move || {
            let (mut input, metadata) = open_regular(&path)?;
            if metadata.len() != size {
                return Err(wrong_length(metadata.len(), size));
            }
            create_parent(&local)?;
            if immutable {
                // A hard link costs nothing, and neither side ever writes the file; the
                // content is still read once, through the file checked above, to verify it.
                match std::fs::hard_link(&path, &local) {
                    Ok(()) => {
                        // The link must be to that file: the path may have been replaced since.
                        let linked = std::fs::symlink_metadata(&local)?;
                        if (linked.dev(), linked.ino()) != (metadata.dev(), metadata.ino()) {
                            let _ = std::fs::remove_file(&local);
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::InvalidData,
                                "the file was replaced while it was being restored",
                            ));
                        }
                        return read_bounded(&mut input, size, |_| Ok(()));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(e),
                    // Another filesystem (or one without links): copy.
                    Err(_) => {}
                }
            }
            // A restore's scratch copy: not fsynced (a crash removes the whole directory).
            let mut output = File::create(&local)?;
            let placed = read_bounded(&mut input, size, |piece| output.write_all(piece));
            if placed.is_err() {
                let _ = std::fs::remove_file(&local);
            }
            placed
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
            let mut stack = vec![(start.clone(), dir_part.to_string())];
            while let Some((dir, key_prefix)) = stack.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    // The folder the listing is of: nothing in it can be found.
                    Err(e) if dir == start => return Err(cannot_list(e)),
                    // A folder inside it that cannot be looked into stands for itself, as
                    // one object a reader will fail to read (see `CheckpointStorage::list`).
                    Err(e) if cannot_enter(&e) => {
                        if key_prefix.starts_with(&prefix) {
                            out.push(ObjectInfo {
                                key: key_prefix,
                                size: 0,
                            });
                        }
                        continue;
                    }
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
                    if kind.is_dir() && name_is_metadata(&key) {
                        // A directory where a snapshot's metadata belongs is listed as the
                        // object it stands in for, so the snapshot is reported as unusable
                        // rather than passed over as one that never completed.
                        if key.starts_with(&prefix) {
                            out.push(ObjectInfo { key, size: 0 });
                        }
                    } else if kind.is_dir() {
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
                // A directory [`list`](CheckpointStorage::list) reported as an object (a
                // snapshot's metadata replaced by a directory) goes with what is in it.
                Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
                    std::fs::remove_dir_all(&path)?;
                }
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

/// Whether reading a directory failed because of the directory itself (its permissions, or
/// something other than a directory now at its path), not because of an outage.
fn cannot_enter(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::NotADirectory
    ) || e.raw_os_error() == Some(libc::ELOOP)
}

/// The error for a listed directory that cannot be read, saying what to fix when its
/// permissions or a file in its path are at fault. The kind is kept, for callers' decisions
/// (other errors, a loop of links among them, keep their OS error number and message).
fn cannot_list(e: std::io::Error) -> std::io::Error {
    let fix = match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "the user weir runs as must be allowed to read, enter and write this folder and to \
             enter the folders above it: change their permissions (`chmod u+rwx`) or owner \
             (`chown`)"
        }
        std::io::ErrorKind::NotADirectory => {
            "a file stands where this folder or one above it belongs: move the file away, or \
             choose another checkpoint directory"
        }
        _ => return e,
    };
    std::io::Error::new(e.kind(), format!("{e}; {fix}"))
}

/// Whether `key` names a snapshot's metadata (`<job>/chk-0000000007/_metadata`).
fn name_is_metadata(key: &str) -> bool {
    key.rsplit('/').next() == Some(crate::metadata::METADATA)
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
pub(crate) mod tests {
    use super::*;

    #[tokio::test]
    async fn puts_are_readable_listed_ranged_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        crate::fixtures::objects(&s).await.unwrap();
        assert!(!dir.path().join("job").exists(), "empty dirs go too");
    }

    /// A FIFO at `path`, made by `mkfifo(1)` (the crate forbids the `unsafe` of libc's).
    pub(crate) fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "mkfifo {}", path.display());
    }

    /// Runs `read`, failing the test (instead of hanging it) if it blocks: a FIFO opened
    /// for reading waits for a writer, and `/dev/zero` never ends.
    async fn promptly<T>(read: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .expect("the read returned instead of blocking or reading without end")
    }

    #[tokio::test]
    async fn reads_refuse_links_devices_fifos_and_directories_without_reading_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        s.put("j/chk-1/real", vec![1; 64]).await.unwrap();
        let at = |name: &str| dir.path().join("j/chk-1").join(name);
        std::os::unix::fs::symlink("/dev/zero", at("zero")).unwrap();
        std::os::unix::fs::symlink(at("real"), at("link")).unwrap();
        std::os::unix::fs::symlink(at("nowhere"), at("dangling")).unwrap();
        mkfifo(&at("fifo"));
        std::fs::create_dir(at("dir")).unwrap();
        let scratch = dir.path().join("scratch");
        for (name, what) in [
            ("zero", "a symbolic link"),
            ("link", "a symbolic link"),
            ("dangling", "a symbolic link"),
            ("fifo", "a FIFO"),
            ("dir", "a directory"),
        ] {
            let key = format!("j/chk-1/{name}");
            let path = at(name).display().to_string();
            let check = |read: &str, e: StorageError| {
                assert!(e.is_unreadable(), "{read} {name}: {e}");
                assert!(!e.is_not_found(), "{read} {name}: {e}");
                let text = e.to_string();
                assert!(text.contains(&path), "{read} {name} names the path: {text}");
                assert!(
                    text.contains(&format!("it is {what}, not a regular file")),
                    "{read} {name} says what it is: {text}"
                );
            };
            check("get", promptly(s.get(&key, u64::MAX)).await.unwrap_err());
            check(
                "get_range",
                promptly(s.get_range(&key, 0..1)).await.unwrap_err(),
            );
            for immutable in [false, true] {
                let local = scratch.join(format!("{name}-{immutable}"));
                let e = promptly(s.get_to_file(&key, local.clone(), immutable, 64))
                    .await
                    .unwrap_err();
                check("get_to_file", e);
                assert!(
                    std::fs::symlink_metadata(&local).is_err(),
                    "nothing was placed for {name}"
                );
            }
        }
        // The regular file itself still reads.
        assert_eq!(s.get("j/chk-1/real", 64).await.unwrap(), vec![1; 64]);
    }

    #[tokio::test]
    async fn a_range_beyond_the_file_is_refused_before_allocating_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        s.put("j/x", vec![1; 10]).await.unwrap();
        // A range a damaged metadata might name: far more than memory holds.
        let e = s.get_range("j/x", 5..u64::MAX / 2).await.unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
        assert!(e.to_string().contains("ends at 10"), "{e}");
    }

    #[tokio::test]
    async fn a_metadata_directory_is_listed_and_deleted_with_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path());
        s.put("j/chk-1/operator-state-0", vec![1]).await.unwrap();
        std::fs::create_dir_all(dir.path().join("j/chk-1/_metadata/inner")).unwrap();
        let keys: Vec<String> = s
            .list("j/")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, ["j/chk-1/_metadata", "j/chk-1/operator-state-0"]);
        s.delete("j/chk-1/_metadata").await.unwrap();
        assert!(!dir.path().join("j/chk-1/_metadata").exists());
        assert_eq!(s.list("j/").await.unwrap().len(), 1);
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
        let read = s
            .get_to_file("j/x/file", back.clone(), true, 3000)
            .await
            .unwrap();
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
