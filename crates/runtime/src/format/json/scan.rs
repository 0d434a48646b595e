//! The decoder's fast path: a byte scanner for the lines most files are made of.
//!
//! [`scan_line`] walks a line once, matching keys against the same [`KeyTable`]s and writing
//! values into the same column builders as the serde_json path of [`super::decode`], and skips
//! undeclared values with an iterative validator. It handles plain JSON: strings without
//! escapes, integers of up to 18 digits, `true`, `false`, `null`, objects and arrays. Anything
//! else (an escape, a fraction or exponent, `-0`, a type mismatch, a duplicate key, a second
//! variant, a string too large for its batch, nesting deeper than [`MAX_DEPTH`], or any
//! malformed input) makes it give up: the caller rolls the columns back and decodes the line
//! again with serde_json, so every value and every error message is serde_json's, and the
//! scanner only ever answers for lines where both paths agree (the differential tests in
//! `tests.rs` and the `jsonl_decode` fuzz target hold it to that).
//!
//! Why it exists: the file queries q0–q2 are bound by decoding, and on a million Nexmark lines
//! serde_json alone takes 0.55 s on one thread where the scanner with it takes 0.40 s
//! (`weir bench json`; BENCHMARKS.md, "A byte scanner for JSON lines, top-n narrowed per
//! batch, huge pages off").

use super::builders::Column;
use super::decode::{FieldPlan, ObjectPlan, PortBuilder, Root};
use super::keys::KeyTable;

/// Deepest nesting the scanner skips before it leaves the line to serde_json (whose own limit
/// is 128).
const MAX_DEPTH: u32 = 100;

/// Decodes `text` (one whole line, valid UTF-8) into the builders. `Some(port)` is what the
/// serde path would return for the line (`Some(None)`: no port took it); `None` means the
/// scanner gave up, possibly after appending values, which the caller must roll back.
pub(super) fn scan_line(
    root: &Root,
    builders: &mut [PortBuilder],
    want: &[bool],
    text: &str,
) -> Option<Option<usize>> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    s.ws();
    if s.peek()? != b'{' {
        return None;
    }
    let routed = match root {
        Root::Single(plan) => {
            let port = builders.first_mut()?;
            let rows = port.rows;
            s.object(plan, &mut port.columns, rows)?;
            Some(0)
        }
        Root::Variants { keys, plans } => s.variants(keys, plans, builders, want)?,
    };
    s.ws();
    (s.pos == s.bytes.len()).then_some(routed)
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

/// Broadcasts a byte to all eight lanes of a word.
const fn lanes(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// The zero bytes of `w`, each flagged by its top bit (the classic SWAR test). A flag can be
/// wrong only in a byte above a zero byte (a borrow), so the lowest flag is exact: with `w`
/// read little-endian, `trailing_zeros / 8` is the index of the first zero byte.
#[inline]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(lanes(1)) & !w & lanes(0x80)
}

/// The bytes of `w` below `n` (`n` ≤ 128), flagged as in [`zero_bytes`], the lowest exactly.
#[inline]
fn bytes_below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(lanes(n)) & !w & lanes(0x80)
}

impl<'a> Scanner<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// A string without escapes or control characters; the scanner is at its opening quote.
    #[inline]
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.pos;
        // Eight bytes at a time to the first quote, backslash or control byte, which the
        // lowest flag finds without going back over the word byte by byte (most strings, keys
        // above all, end inside their first word).
        while let Some(chunk) = self
            .bytes
            .get(self.pos..)
            .and_then(<[u8]>::first_chunk::<8>)
        {
            let w = u64::from_le_bytes(*chunk);
            let stops =
                zero_bytes(w ^ lanes(b'"')) | zero_bytes(w ^ lanes(b'\\')) | bytes_below(w, 0x20);
            if stops != 0 {
                self.pos += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            self.pos += 8;
        }
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' | 0..=0x1f => return None,
                _ => self.pos += 1,
            }
        }
        let end = self.pos;
        self.pos += 1;
        // Quotes are ASCII, so both ends are character boundaries of the validated line.
        self.text.get(start..end)
    }

    /// An integer of at most 18 digits (so it fits an `i64` whichever its sign), as serde_json
    /// reads it; `-0`, fractions and exponents are left to serde_json.
    #[inline]
    fn integer(&mut self) -> Option<i64> {
        let negative = self.eat(b'-').is_some();
        let start = self.pos;
        let mut value: i64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            value = value * 10 + i64::from(d - b'0');
            self.pos += 1;
            if self.pos - start > 18 {
                return None;
            }
        }
        let digits = self.pos - start;
        let leading_zero = digits > 1 && self.bytes[start] == b'0';
        if digits == 0 || leading_zero || matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        match (negative, value) {
            (true, 0) => None,
            (true, v) => Some(-v),
            (false, v) => Some(v),
        }
    }

    /// Any valid JSON number, skipped.
    fn skip_number(&mut self) -> Option<()> {
        self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.bytes.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// An object key and its colon.
    #[inline]
    fn key(&mut self) -> Option<&'a [u8]> {
        let key = self.string()?;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Some(key.as_bytes())
    }

    /// After a member's value: `Some(true)` at a comma (another member follows), `Some(false)`
    /// at the closing brace.
    #[inline]
    fn next_member(&mut self) -> Option<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.pos += 1;
                self.ws();
                Some(true)
            }
            b'}' => {
                self.pos += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// Decodes the object at the scanner into `columns`, as `ObjectSeed` does.
    fn object(&mut self, plan: &ObjectPlan, columns: &mut [Column], rows: usize) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        // The field after the last one found is the likeliest next key.
        let mut expected = 0;
        loop {
            let key = self.key()?;
            let field = plan.keys.get_expecting(key, expected);
            if let Some(i) = field {
                expected = i + 1;
            }
            match field.map(|i| &plan.fields[i]) {
                None | Some(FieldPlan::Skip) => self.skip_value()?,
                Some(FieldPlan::Column { index, .. }) => {
                    let column = columns.get_mut(*index)?;
                    if column.len() > rows {
                        return None;
                    }
                    self.scalar(column)?;
                }
                Some(FieldPlan::Object(nested)) => match self.peek()? {
                    b'{' => self.object(nested, columns, rows)?,
                    _ => self.literal(b"null")?,
                },
            }
            if !self.next_member()? {
                return Some(());
            }
        }
    }

    /// Decodes one scalar into its column, as `ColumnSeed` does for values it accepts.
    #[inline]
    fn scalar(&mut self, column: &mut Column) -> Option<()> {
        match (self.peek()?, column) {
            (b'"', Column::String(c)) => {
                let v = self.string()?;
                c.push(v).ok()
            }
            (b'"', Column::Timestamp(c)) => {
                let v = self.string()?;
                let parsed = chrono::DateTime::parse_from_rfc3339(v).ok()?;
                c.push(parsed.timestamp_millis());
                Some(())
            }
            (b'-' | b'0'..=b'9', Column::Int(c) | Column::Timestamp(c)) => {
                let v = self.integer()?;
                c.push(v);
                Some(())
            }
            (b'-' | b'0'..=b'9', Column::Float(c)) => {
                let v = self.integer()?;
                c.push(v as f64);
                Some(())
            }
            (b't', Column::Bool(c)) => {
                self.literal(b"true")?;
                c.push(true);
                Some(())
            }
            (b'f', Column::Bool(c)) => {
                self.literal(b"false")?;
                c.push(false);
                Some(())
            }
            (b'n', column) => {
                self.literal(b"null")?;
                column.push_null();
                Some(())
            }
            _ => None,
        }
    }

    /// Routes a line of a variants layout, as `VariantsVisitor` does when at most one declared
    /// variant key is present.
    fn variants(
        &mut self,
        keys: &KeyTable,
        plans: &[ObjectPlan],
        builders: &mut [PortBuilder],
        want: &[bool],
    ) -> Option<Option<usize>> {
        self.eat(b'{')?;
        self.ws();
        let mut chosen = None;
        if self.eat(b'}').is_some() {
            return Some(chosen);
        }
        loop {
            let key = self.key()?;
            match keys.get(key) {
                None => self.skip_value()?,
                // A second declared variant: serde_json's path decides which one wins.
                Some(_) if chosen.is_some() => return None,
                Some(variant) => {
                    if self.peek()? == b'{' {
                        if *want.get(variant)? {
                            let builder = builders.get_mut(variant)?;
                            let rows = builder.rows;
                            self.object(plans.get(variant)?, &mut builder.columns, rows)?;
                        } else {
                            self.skip_value()?;
                        }
                        chosen = Some(variant);
                    } else {
                        // Not an object: not this variant.
                        self.skip_value()?;
                    }
                }
            }
            if !self.next_member()? {
                return Some(chosen);
            }
        }
    }

    /// Skips one valid JSON value of any shape, without recursion.
    fn skip_value(&mut self) -> Option<()> {
        // Bit `d` says whether the container at depth `d` is an object (1) or an array (0).
        let mut objects: u128 = 0;
        let mut depth: u32 = 0;
        loop {
            // A value starts here.
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'-' | b'0'..=b'9' => self.skip_number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                open @ (b'{' | b'[') => {
                    self.pos += 1;
                    self.ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.eat(close).is_none() {
                        if depth == MAX_DEPTH {
                            return None;
                        }
                        depth += 1;
                        if open == b'{' {
                            objects |= 1 << depth;
                            self.key()?;
                        } else {
                            objects &= !(1 << depth);
                        }
                        continue;
                    }
                }
                _ => return None,
            }
            // A value ended: close containers until another value follows.
            loop {
                if depth == 0 {
                    return Some(());
                }
                let object = objects & (1 << depth) != 0;
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.pos += 1;
                        self.ws();
                        if object {
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.pos += 1;
                depth -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Scanner;

    /// Where the string ends, found byte by byte: `Some(body)` at a closing quote, `None` at
    /// a backslash or a control byte (the serde path's business) or with no closing quote.
    fn naive(body: &str) -> Option<&str> {
        let stop = body
            .bytes()
            .position(|b| b == b'"' || b == b'\\' || b < 0x20)?;
        (body.as_bytes()[stop] == b'"').then(|| &body[..stop])
    }

    /// Every stop byte at every place of strings up to five words long, with multi-byte
    /// characters and bytes either side of the quote and control ranges around it: the word
    /// at a time scan ends exactly where a byte at a time one does.
    #[test]
    fn strings_end_where_a_byte_by_byte_scan_ends() {
        let fillers = ["a", "é", "~\u{7f}", " !#[", "✓"];
        let mut checked = 0;
        for filler in fillers {
            for len in 0..40 {
                let plain: String = filler.repeat(len).chars().take(len).collect();
                for stop in [None, Some('"'), Some('\\'), Some('\u{1}'), Some('\u{1f}')] {
                    for at in 0..=plain.chars().count() {
                        let mut body: String = plain.chars().take(at).collect();
                        body.extend(stop);
                        body.extend(plain.chars().skip(at));
                        for tail in ["\"", "\",\"k\":1}", ""] {
                            let text = format!("\"{body}{tail}");
                            let mut s = Scanner {
                                text: &text,
                                bytes: text.as_bytes(),
                                pos: 0,
                            };
                            let expected = naive(&text[1..]);
                            assert_eq!(s.string(), expected, "{text:?}");
                            if let Some(found) = expected {
                                assert_eq!(s.pos, found.len() + 2, "{text:?}");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }
}
