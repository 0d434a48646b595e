//! The logical snapshot format: one file, `keyed.wks`, the same whichever backend wrote it.
//!
//! # Layout
//! All integers little-endian; `varint` is unsigned LEB128; `bytes` is a varint length and
//! that many bytes.
//!
//! ```text
//! header   magic "WEIRKGS\0" (8) · version u32 (= 1) · header length u32 (of what follows)
//!          key groups u32 · range start u32 · range end u32 · state count varint
//!          per state: name bytes · has TTL u8 (0/1) · TTL ms i64 (when 1)
//! sections one per key group holding anything, ascending; records until the section ends:
//!          entry 0x01 · state index varint · key bytes · namespace bytes
//!                     · written-at ms i64 (0 when the state has no TTL) · value bytes
//!          timer 0x02 · domain u8 (0 event time, 1 processing time) · time i64
//!                     · key bytes · namespace bytes · has hold u8 (0/1) · hold i64 (when 1)
//! index    count u32 · per section: key group u32 · offset u64 · length u64
//! footer   index offset u64 · checksum u64 · magic "WEIRKGS\0" (8)
//! ```
//!
//! The checksum is xxh3-64 of every byte before it (the footer's index offset included). A
//! value is its state's [`crate::StateValue`] encoding, without RocksDB's write-time prefix
//! (that is the record's written-at). Only live entries are written: expired ones are left out.
//!
//! A reader checks the magic, the version, the end marker and the checksum before it trusts
//! any length in the file, then reads the index and only the sections of the groups it wants.
//! Every failure names the file and what is wrong; no input makes it panic.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3Default;

use crate::codec::{get_varint, put_varint};
use crate::error::StateError;
use crate::heap::SlotRef;
use crate::key_groups::KeyGroupRange;
use crate::store::{Store, decode_entry_key, group_bounds, storage};
use crate::timers::{TimeDomain, Timer, decode_hold, decode_timer};

use super::{Sink, StateMeta};

/// The file's name in a snapshot directory.
pub const FILE_NAME: &str = "keyed.wks";
const MAGIC: [u8; 8] = *b"WEIRKGS\0";
const VERSION: u32 = 1;
/// Magic, version, header length.
const PREAMBLE: u64 = 16;
/// Index offset, checksum, magic.
const FOOTER: u64 = 24;
/// Key group, offset, length.
const INDEX_ENTRY: u64 = 20;
const ENTRY: u8 = 1;
const TIMER: u8 = 2;

/// A writer that hashes and counts what it writes.
struct Hashing {
    out: BufWriter<File>,
    hasher: Xxh3Default,
    position: u64,
}

impl Hashing {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.hasher.update(bytes);
        self.position += bytes.len() as u64;
        Ok(())
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn domain_code(domain: TimeDomain) -> u8 {
    match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

/// Writes a logical snapshot file, one key group at a time in ascending order.
pub(crate) struct Writer {
    path: PathBuf,
    out: Hashing,
    range: KeyGroupRange,
    /// (group, offset, length) of the sections written.
    index: Vec<(u32, u64, u64)>,
    /// The section being written: its group and offset.
    open: Option<(u32, u64)>,
    record: Vec<u8>,
}

impl Writer {
    /// Creates the file (it must not exist) and writes the header.
    pub(crate) fn create(
        path: &Path,
        key_groups: u32,
        range: KeyGroupRange,
        states: &[StateMeta],
    ) -> Result<Self, StateError> {
        let file = File::create_new(path)
            .map_err(|e| storage(&format!("creating {}", path.display()), e))?;
        let mut writer = Self {
            path: path.to_path_buf(),
            out: Hashing {
                out: BufWriter::with_capacity(1 << 16, file),
                hasher: Xxh3Default::new(),
                position: 0,
            },
            range,
            index: Vec::new(),
            open: None,
            record: Vec::new(),
        };
        let mut header = Vec::new();
        for x in [key_groups, range.start, range.end] {
            header.extend_from_slice(&x.to_le_bytes());
        }
        put_varint(&mut header, states.len() as u64);
        for s in states {
            put_bytes(&mut header, s.name.as_bytes());
            match s.ttl_ms {
                None => header.push(0),
                Some(t) => {
                    header.push(1);
                    header.extend_from_slice(&t.to_le_bytes());
                }
            }
        }
        let mut preamble = MAGIC.to_vec();
        preamble.extend_from_slice(&VERSION.to_le_bytes());
        preamble.extend_from_slice(&(header.len() as u32).to_le_bytes());
        writer.put(&preamble)?;
        writer.put(&header)?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        self.out
            .put(bytes)
            .map_err(|e| storage(&format!("writing {}", self.path.display()), e))
    }

    /// Ends the open section, if any.
    fn close_section(&mut self) {
        if let Some((group, offset)) = self.open.take() {
            self.index.push((group, offset, self.out.position - offset));
        }
    }

    /// Makes `group`'s section the open one.
    fn section(&mut self, group: u32) -> Result<(), StateError> {
        match self.open {
            Some((g, _)) if g == group => return Ok(()),
            Some((g, _)) if g > group => {
                return Err(StateError::Invalid(format!(
                    "key group {group} written after {g}: sections must ascend"
                )));
            }
            _ => {}
        }
        if !self.range.contains(group) {
            return Err(StateError::Invalid(format!(
                "key group {group} is outside the snapshot's groups {}..{}",
                self.range.start, self.range.end
            )));
        }
        self.close_section();
        self.open = Some((group, self.out.position));
        Ok(())
    }

    /// Writes an entry of state number `state` (in the header's order).
    pub(crate) fn entry(
        &mut self,
        group: u32,
        state: u32,
        key: &[u8],
        ns: &[u8],
        written: i64,
        value: &[u8],
    ) -> Result<(), StateError> {
        self.section(group)?;
        let mut r = std::mem::take(&mut self.record);
        r.clear();
        r.push(ENTRY);
        put_varint(&mut r, u64::from(state));
        put_bytes(&mut r, key);
        put_bytes(&mut r, ns);
        r.extend_from_slice(&written.to_le_bytes());
        put_bytes(&mut r, value);
        let result = self.put(&r);
        self.record = r;
        result
    }

    pub(crate) fn timer(
        &mut self,
        group: u32,
        domain: TimeDomain,
        timer: &Timer,
        hold: Option<i64>,
    ) -> Result<(), StateError> {
        self.section(group)?;
        let mut r = std::mem::take(&mut self.record);
        r.clear();
        r.push(TIMER);
        r.push(domain_code(domain));
        r.extend_from_slice(&timer.time.to_le_bytes());
        put_bytes(&mut r, &timer.key);
        put_bytes(&mut r, &timer.namespace);
        match hold {
            None => r.push(0),
            Some(h) => {
                r.push(1);
                r.extend_from_slice(&h.to_le_bytes());
            }
        }
        let result = self.put(&r);
        self.record = r;
        result
    }

    /// Writes the index and the footer; returns the file's size.
    pub(crate) fn finish(mut self) -> Result<u64, StateError> {
        self.close_section();
        let index_offset = self.out.position;
        let mut index = Vec::with_capacity(4 + self.index.len() * INDEX_ENTRY as usize);
        index.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        for (group, offset, len) in &self.index {
            index.extend_from_slice(&group.to_le_bytes());
            index.extend_from_slice(&offset.to_le_bytes());
            index.extend_from_slice(&len.to_le_bytes());
        }
        self.put(&index)?;
        self.put(&index_offset.to_le_bytes())?;
        let checksum = self.out.hasher.digest();
        let mut end = checksum.to_le_bytes().to_vec();
        end.extend_from_slice(&MAGIC);
        self.put(&end)?;
        self.out
            .out
            .flush()
            .map_err(|e| storage(&format!("writing {}", self.path.display()), e))?;
        Ok(self.out.position)
    }
}

/// Writes the RocksDB backend's logical snapshot to `path` (the tables and timers flushed
/// first, so the store holds everything): per key group, the live entries of every state,
/// each state's column family read in key order by its own iterator, then the timers of the
/// group. Timers are ordered by time in RocksDB, so they are gathered and sorted by group in
/// memory first (they are few next to the entries). Returns the file's size and its states.
pub(crate) fn write_rocks(
    store: &Store,
    key_groups: u32,
    range: KeyGroupRange,
    now: i64,
    path: &Path,
) -> Result<(u64, Vec<StateMeta>), StateError> {
    let states = store.states()?;
    let codec = |state: &str, message: String| StateError::Codec {
        state: state.to_string(),
        message,
    };
    let mut timers: Vec<(u32, TimeDomain, Timer, Option<i64>)> = Vec::new();
    store.scan(crate::store::TIMERS_CF, &[], None, |key, value| {
        let (domain, timer) = decode_timer(key).map_err(|m| codec(crate::store::TIMERS_CF, m))?;
        timers.push((timer.key_group, domain, timer, decode_hold(value)));
        Ok(())
    })?;
    timers.sort_by_key(|t| t.0);
    if let Some(t) = timers.iter().find(|t| !range.contains(t.0)) {
        return Err(StateError::Invalid(format!(
            "a timer of key group {}, outside this subtask's groups {}..{}",
            t.0, range.start, range.end
        )));
    }
    let db = store.db()?;
    let (from, to) = group_bounds(range);
    let mut iterators = Vec::with_capacity(states.len());
    for s in &states {
        let mut opts = rocksdb::ReadOptions::default();
        if let Some(to) = &to {
            opts.set_iterate_upper_bound(to.clone());
        }
        let mut it = db.raw_iterator_cf_opt(store.cf(&s.name)?, opts);
        it.seek(&from);
        iterators.push(it);
    }
    let mut writer = Writer::create(path, key_groups, range, &states)?;
    let mut timers = timers.into_iter().peekable();
    for group in range.start..range.end {
        for (i, (s, it)) in states.iter().zip(iterators.iter_mut()).enumerate() {
            while let Some((key, value)) = it.item() {
                let (g, k, ns) = decode_entry_key(key).map_err(|m| codec(&s.name, m))?;
                if g != group {
                    if g < group {
                        return Err(codec(&s.name, format!("key group {g} out of order")));
                    }
                    break;
                }
                let (written, bytes) = match s.ttl_ms {
                    None => (0, value),
                    Some(ttl) => {
                        let (t, rest) = value.split_at_checked(8).ok_or_else(|| {
                            codec(&s.name, format!("a TTL value of {} bytes", value.len()))
                        })?;
                        let mut stamp = [0u8; 8];
                        stamp.copy_from_slice(t);
                        let written = i64::from_le_bytes(stamp);
                        if written.saturating_add(ttl) <= now {
                            it.next();
                            continue;
                        }
                        (written, rest)
                    }
                };
                writer.entry(group, i as u32, k, ns, written, bytes)?;
                it.next();
            }
            it.status()
                .map_err(|e| storage(&format!("reading state `{}`", s.name), e))?;
        }
        while let Some((_, domain, timer, hold)) = timers.next_if(|t| t.0 == group) {
            writer.timer(group, domain, &timer, hold)?;
        }
    }
    Ok((writer.finish()?, states))
}

/// A logical snapshot file opened for reading, its checksum verified.
pub(crate) struct Reader<R = File> {
    /// The file's path, for messages.
    path: PathBuf,
    file: R,
    key_groups: u32,
    range: KeyGroupRange,
    states: Vec<StateMeta>,
    /// (group, offset, length) of each section, groups ascending.
    index: Vec<(u32, u64, u64)>,
}

/// Reads from the front of a byte slice; every failure is a message about the file.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("needed {n} bytes, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.array().map(i64::from_le_bytes)
    }
    fn varint(&mut self) -> Result<u64, String> {
        get_varint(&mut self.0)
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| format!("a length of {n}"))?;
        self.take(n)
    }
    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("flag byte {b}")),
        }
    }
}

impl Reader<File> {
    /// Opens `path` and checks it: magic, version, end marker, checksum, header and index.
    pub(crate) fn open(path: &Path) -> Result<Self, StateError> {
        let file =
            File::open(path).map_err(|e| storage(&format!("opening {}", path.display()), e))?;
        Self::new(path, file)
    }
}

impl<R: Read + Seek> Reader<R> {
    /// Checks the file `file` (read from `path`): magic, version, end marker, checksum, header
    /// and index.
    pub(crate) fn new(path: &Path, mut file: R) -> Result<Self, StateError> {
        let io = |what: &str, e: std::io::Error| storage(&format!("{what} {}", path.display()), e);
        let corrupt = |message: String| StateError::Snapshot {
            path: path.to_path_buf(),
            message,
        };
        let len = file.seek(SeekFrom::End(0)).map_err(|e| io("reading", e))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| io("reading", e))?;
        let mut preamble = [0u8; PREAMBLE as usize];
        let head = (len.min(PREAMBLE)) as usize;
        file.read_exact(&mut preamble[..head])
            .map_err(|e| io("reading", e))?;
        if head < MAGIC.len() {
            return Err(corrupt(format!("truncated: {len} bytes")));
        }
        if preamble[..8] != MAGIC {
            return Err(corrupt("bad magic: not a weir keyed-state snapshot".into()));
        }
        if len < PREAMBLE + FOOTER {
            return Err(corrupt(format!("truncated: {len} bytes")));
        }
        let mut c = Cursor(&preamble[8..]);
        let version = c.u32().map_err(corrupt)?;
        if version != VERSION {
            return Err(corrupt(format!(
                "unsupported version {version} (this build reads {VERSION})"
            )));
        }
        let header_len = u64::from(c.u32().map_err(corrupt)?);
        let mut footer = [0u8; FOOTER as usize];
        file.seek(SeekFrom::Start(len - FOOTER))
            .map_err(|e| io("reading", e))?;
        file.read_exact(&mut footer).map_err(|e| io("reading", e))?;
        let mut c = Cursor(&footer);
        let index_offset = c.u64().map_err(corrupt)?;
        let stored = c.u64().map_err(corrupt)?;
        if c.0 != MAGIC {
            return Err(corrupt(
                "truncated: the file does not end with its end marker".into(),
            ));
        }
        // Everything before the checksum, in one streaming pass.
        file.seek(SeekFrom::Start(0))
            .map_err(|e| io("reading", e))?;
        let mut hasher = Xxh3Default::new();
        let mut left = len - 16;
        let mut buf = vec![0u8; 1 << 16];
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            file.read_exact(&mut buf[..n])
                .map_err(|e| io("reading", e))?;
            hasher.update(&buf[..n]);
            left -= n as u64;
        }
        let computed = hasher.digest();
        if computed != stored {
            return Err(corrupt(format!(
                "checksum mismatch (stored {stored:016x}, computed {computed:016x}): the file is corrupt"
            )));
        }
        let header_end = PREAMBLE + header_len;
        if header_end > index_offset || index_offset > len - FOOTER {
            return Err(corrupt(format!(
                "header ends at {header_end} and index starts at {index_offset} in {len} bytes"
            )));
        }
        let header = read_at(&mut file, PREAMBLE, header_len).map_err(|e| io("reading", e))?;
        let mut c = Cursor(&header);
        let (key_groups, range, states) = (|| {
            let key_groups = c.u32()?;
            let range = KeyGroupRange {
                start: c.u32()?,
                end: c.u32()?,
            };
            let n = c.varint()?;
            let mut states = Vec::new();
            for _ in 0..n {
                let name = String::from_utf8(c.bytes()?.to_vec())
                    .map_err(|_| "a state name that is not UTF-8".to_string())?;
                let ttl_ms = if c.flag()? { Some(c.i64()?) } else { None };
                states.push(StateMeta { name, ttl_ms });
            }
            if !c.0.is_empty() {
                return Err(format!("{} bytes after the header", c.0.len()));
            }
            if range.start > range.end || range.end > key_groups {
                return Err(format!(
                    "groups {}..{} of {key_groups}",
                    range.start, range.end
                ));
            }
            Ok((key_groups, range, states))
        })()
        .map_err(|m| corrupt(format!("header: {m}")))?;
        let index_bytes = read_at(&mut file, index_offset, len - FOOTER - index_offset)
            .map_err(|e| io("reading", e))?;
        let mut c = Cursor(&index_bytes);
        let index = (|| {
            let n = u64::from(c.u32()?);
            if c.0.len() as u64 != n * INDEX_ENTRY {
                return Err(format!("{n} sections in {} bytes", c.0.len()));
            }
            let mut index: Vec<(u32, u64, u64)> = Vec::new();
            for _ in 0..n {
                let (group, offset, length) = (c.u32()?, c.u64()?, c.u64()?);
                let in_order = index.last().is_none_or(|last| last.0 < group);
                let inside = offset >= header_end
                    && offset
                        .checked_add(length)
                        .is_some_and(|end| end <= index_offset);
                if !in_order || !range.contains(group) || !inside {
                    return Err(format!(
                        "section of group {group} at {offset}+{length} is out of place"
                    ));
                }
                index.push((group, offset, length));
            }
            Ok(index)
        })()
        .map_err(|m| corrupt(format!("index: {m}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            key_groups,
            range,
            states,
            index,
        })
    }

    /// Checks that the file was written with `key_groups` by the subtask of `range`.
    pub(crate) fn check(&self, key_groups: u32, range: KeyGroupRange) -> Result<(), StateError> {
        if self.key_groups != key_groups {
            return Err(StateError::Snapshot {
                path: self.path.clone(),
                message: format!(
                    "written with {} key groups, restored with {key_groups}: the number of key \
                     groups of a job cannot change",
                    self.key_groups
                ),
            });
        }
        if self.range != range {
            return Err(StateError::Snapshot {
                path: self.path.clone(),
                message: format!(
                    "holds key groups {}..{}, but its source says {}..{}",
                    self.range.start, self.range.end, range.start, range.end
                ),
            });
        }
        Ok(())
    }

    /// Reads the sections of the groups in `groups` into `sink`.
    pub(crate) fn read(
        &mut self,
        groups: KeyGroupRange,
        sink: &mut dyn Sink,
    ) -> Result<(), StateError> {
        let states = self
            .states
            .iter()
            .map(|s| sink.state(s, &self.path))
            .collect::<Result<Vec<usize>, _>>()?;
        let sections: Vec<_> = self
            .index
            .iter()
            .filter(|(g, _, _)| groups.contains(*g))
            .copied()
            .collect();
        for (group, offset, length) in sections {
            let bytes = read_at(&mut self.file, offset, length)
                .map_err(|e| storage(&format!("reading {}", self.path.display()), e))?;
            decode_section(group, &bytes, &states, sink).map_err(|e| match e {
                Decode::Corrupt(m) => StateError::Snapshot {
                    path: self.path.clone(),
                    message: format!("section of key group {group}: {m}"),
                },
                Decode::Sink(e) => e,
            })?;
        }
        Ok(())
    }
}

/// Checks a logical snapshot file held in memory and reads all of it as a restore into a heap
/// backend would; `origin` names it in errors. For the fuzz targets in `fuzz/`, which feed it
/// damaged files: whatever the bytes, the answer is `Ok` or an error, never a panic.
#[doc(hidden)]
pub fn read_from_memory(origin: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let mut reader = Reader::new(origin, std::io::Cursor::new(bytes))?;
    let range = reader.range;
    reader.read(range, &mut super::HeapSink::default())
}

/// What a reader reads from: a file, or bytes in memory (tests).
trait ReadSeek: Read + Seek {}
impl<R: Read + Seek> ReadSeek for R {}

/// Why decoding a section stopped.
enum Decode {
    Corrupt(String),
    Sink(StateError),
}

impl From<String> for Decode {
    fn from(m: String) -> Self {
        Decode::Corrupt(m)
    }
}

fn decode_section(
    group: u32,
    bytes: &[u8],
    states: &[usize],
    sink: &mut dyn Sink,
) -> Result<(), Decode> {
    let mut c = Cursor(bytes);
    while !c.0.is_empty() {
        match c.u8()? {
            ENTRY => {
                let state = c.varint()?;
                let state = usize::try_from(state)
                    .ok()
                    .and_then(|s| states.get(s))
                    .ok_or_else(|| format!("state number {state} of {}", states.len()))?;
                let key = c.bytes()?;
                let ns = c.bytes()?;
                let written = c.i64()?;
                let value = c.bytes()?;
                sink.entry(*state, SlotRef { group, key, ns }, written, value)
                    .map_err(Decode::Sink)?;
            }
            TIMER => {
                let domain = match c.u8()? {
                    0 => TimeDomain::EventTime,
                    1 => TimeDomain::ProcessingTime,
                    d => return Err(Decode::Corrupt(format!("time domain {d}"))),
                };
                let time = c.i64()?;
                let key = c.bytes()?;
                let ns = c.bytes()?;
                let hold = if c.flag()? { Some(c.i64()?) } else { None };
                let timer = Timer {
                    time,
                    key_group: group,
                    key: key.into(),
                    namespace: ns.into(),
                };
                sink.timer(domain, timer, hold).map_err(Decode::Sink)?;
            }
            tag => return Err(Decode::Corrupt(format!("record tag {tag}"))),
        }
    }
    Ok(())
}

/// `len` bytes of `file` from `offset` (within the file: the caller checked).
fn read_at(file: &mut impl ReadSeek, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut buf = vec![0u8; len];
    file.read_exact(&mut buf)?;
    Ok(buf)
}
