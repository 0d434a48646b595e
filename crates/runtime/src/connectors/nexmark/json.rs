//! JSON lines in `SCHEMA.md`'s format: `{"type":"bid","bid":{...}}`, keys in schema order.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::generator::Generator;
use super::model::{Auction, Bid, Event, Person};

/// Buffer size of [`write_file`]'s writer.
const FILE_BUFFER_BYTES: usize = 1 << 20;

/// Appends `event` as one JSON line (with the trailing `'\n'`) to `out`. Strings are escaped as
/// JSON requires (`"`, `\` and control characters); other characters are written as they are.
pub fn write_json_line(event: &Event, out: &mut Vec<u8>) {
    let mut w = JsonWriter {
        out,
        int: itoa::Buffer::new(),
    };
    match event {
        Event::Person(person) => w.person(person),
        Event::Auction(auction) => w.auction(auction),
        Event::Bid(bid) => w.bid(bid),
    }
    w.out.extend_from_slice(b"}}\n");
}

/// Writes events `[0, events)` of `generator` to `path` as JSON lines, atomically: into a
/// temporary file in the same directory, fsynced, then renamed over `path` (and the directory
/// fsynced, where the platform allows). On error the temporary file is removed and `path` is
/// left as it was.
pub fn write_file(generator: &Generator, events: u64, path: &Path) -> io::Result<()> {
    let temp = temp_path(path)?;
    let result = write_events(generator, events, &temp).and_then(|()| fs::rename(&temp, path));
    if result.is_err() {
        // Best effort: the original error matters more than a failure to clean up.
        let _ = fs::remove_file(&temp);
    }
    result?;
    sync_parent_dir(path);
    Ok(())
}

/// `<dir>/.<name>.tmp-<pid>`, next to `path` so the rename stays within one file system.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a file path: {}", path.display()),
        )
    })?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".tmp-{}", std::process::id()));
    Ok(path.with_file_name(temp_name))
}

fn write_events(generator: &Generator, events: u64, temp: &Path) -> io::Result<()> {
    let mut writer = BufWriter::with_capacity(FILE_BUFFER_BYTES, File::create(temp)?);
    let mut line = Vec::with_capacity(1024);
    for n in 0..events {
        line.clear();
        write_json_line(&generator.event(n), &mut line);
        writer.write_all(&line)?;
    }
    let file = writer
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.sync_all()
}

/// Makes the rename durable on Unix by fsyncing the directory; best effort (and a no-op
/// elsewhere, where directories cannot be opened as files).
fn sync_parent_dir(path: &Path) {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

struct JsonWriter<'a> {
    out: &'a mut Vec<u8>,
    int: itoa::Buffer,
}

impl JsonWriter<'_> {
    fn person(&mut self, p: &Person) {
        self.out
            .extend_from_slice(br#"{"type":"person","person":{"id":"#);
        self.int_value(p.id);
        self.str_field("name", &p.name);
        self.str_field("emailAddress", &p.email_address);
        self.str_field("creditCard", &p.credit_card);
        self.str_field("city", &p.city);
        self.str_field("state", &p.state);
        self.int_field("dateTime", p.date_time);
        self.str_field("extra", &p.extra);
    }

    fn auction(&mut self, a: &Auction) {
        self.out
            .extend_from_slice(br#"{"type":"auction","auction":{"id":"#);
        self.int_value(a.id);
        self.str_field("itemName", &a.item_name);
        self.str_field("description", &a.description);
        self.int_field("initialBid", a.initial_bid);
        self.int_field("reserve", a.reserve);
        self.int_field("dateTime", a.date_time);
        self.int_field("expires", a.expires);
        self.int_field("seller", a.seller);
        self.int_field("category", a.category);
        self.str_field("extra", &a.extra);
    }

    fn bid(&mut self, b: &Bid) {
        self.out
            .extend_from_slice(br#"{"type":"bid","bid":{"auction":"#);
        self.int_value(b.auction);
        self.int_field("bidder", b.bidder);
        self.int_field("price", b.price);
        self.str_field("channel", &b.channel);
        self.str_field("url", &b.url);
        self.int_field("dateTime", b.date_time);
        self.str_field("extra", &b.extra);
    }

    /// `,"key":` — every field after the first.
    fn key(&mut self, key: &str) {
        self.out.extend_from_slice(b",\"");
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn int_value(&mut self, value: i64) {
        self.out
            .extend_from_slice(self.int.format(value).as_bytes());
    }

    fn int_field(&mut self, key: &str, value: i64) {
        self.key(key);
        self.int_value(value);
    }

    fn str_field(&mut self, key: &str, value: &str) {
        self.key(key);
        write_json_string(value, self.out);
    }
}

/// Appends `value` as a quoted JSON string. Copies runs of bytes that need no escape in one go;
/// multi-byte UTF-8 sequences never contain bytes below 0x80, so they pass through untouched.
fn write_json_string(value: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = value.as_bytes();
    out.push(b'"');
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(byte >> 4) as usize],
                HEX[(byte & 0xf) as usize],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}
