//! How state values are turned into bytes and back: for the RocksDB backend on every access,
//! for the heap backend only in snapshots.
//!
//! [`StateValue`] encodings are compact, not ordered. [`MapKey`] encodings are ordered: the
//! byte order of encoded keys is the order of the keys, so a RocksDB range read returns map
//! entries sorted, exactly as the heap backend's `BTreeMap` does.

/// A value stored in keyed state.
pub trait StateValue: Clone + Send + 'static {
    fn encode(&self, out: &mut Vec<u8>);
    /// Decodes from the front of `input`, advancing it.
    fn decode(input: &mut &[u8]) -> Result<Self, String>;

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    fn from_bytes(mut bytes: &[u8]) -> Result<Self, String> {
        let v = Self::decode(&mut bytes)?;
        if bytes.is_empty() {
            Ok(v)
        } else {
            Err(format!("{} trailing bytes", bytes.len()))
        }
    }
}

/// A map-state key: ordered, with an order-preserving encoding.
pub trait MapKey: StateValue + Ord {
    fn encode_ordered(&self, out: &mut Vec<u8>);
    fn decode_ordered(input: &mut &[u8]) -> Result<Self, String>;
}

fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if input.len() < n {
        return Err(format!("needed {n} bytes, {} left", input.len()));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn fixed<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], String> {
    let mut a = [0u8; N];
    a.copy_from_slice(take(input, N)?);
    Ok(a)
}

/// Unsigned LEB128.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn get_varint(input: &mut &[u8]) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = take(input, 1)?[0];
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 64 bits".into())
}

impl StateValue for i64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        Ok(i64::from_le_bytes(fixed(input)?))
    }
}

impl StateValue for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        Ok(u64::from_le_bytes(fixed(input)?))
    }
}

impl StateValue for f64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        Ok(f64::from_le_bytes(fixed(input)?))
    }
}

impl StateValue for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        match take(input, 1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bool byte {b}")),
        }
    }
}

impl StateValue for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        out.extend_from_slice(self);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        let n = get_varint(input)? as usize;
        Ok(take(input, n)?.to_vec())
    }
}

impl StateValue for String {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        let n = get_varint(input)? as usize;
        String::from_utf8(take(input, n)?.to_vec()).map_err(|e| e.to_string())
    }
}

impl<T: StateValue> StateValue for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.encode(out);
            }
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        match take(input, 1)?[0] {
            0 => Ok(None),
            1 => Ok(Some(T::decode(input)?)),
            b => Err(format!("option tag {b}")),
        }
    }
}

impl<T: StateValue> StateValue for Vec<T>
where
    T: NotU8,
{
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        for v in self {
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        let n = get_varint(input)? as usize;
        let mut v = Vec::with_capacity(n.min(input.len()));
        for _ in 0..n {
            v.push(T::decode(input)?);
        }
        Ok(v)
    }
}

/// Marks element types of `Vec<T>` (bytes have their own, denser encoding).
pub trait NotU8 {}
impl NotU8 for i64 {}
impl NotU8 for u64 {}
impl NotU8 for f64 {}
impl NotU8 for bool {}
impl NotU8 for String {}
impl NotU8 for Vec<u8> {}
impl<T> NotU8 for Option<T> {}
impl<T> NotU8 for Vec<T> where T: NotU8 {}
impl<A, B> NotU8 for (A, B) {}
impl<A, B, C> NotU8 for (A, B, C) {}

impl<A: StateValue, B: StateValue> StateValue for (A, B) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        Ok((A::decode(input)?, B::decode(input)?))
    }
}

impl<A: StateValue, B: StateValue, C: StateValue> StateValue for (A, B, C) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
        self.2.encode(out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        Ok((A::decode(input)?, B::decode(input)?, C::decode(input)?))
    }
}

impl<K: MapKey, V: StateValue> StateValue for std::collections::BTreeMap<K, V> {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.len() as u64);
        for (k, v) in self {
            k.encode(out);
            v.encode(out);
        }
    }
    fn decode(input: &mut &[u8]) -> Result<Self, String> {
        let n = get_varint(input)? as usize;
        let mut m = std::collections::BTreeMap::new();
        for _ in 0..n {
            let k = K::decode(input)?;
            m.insert(k, V::decode(input)?);
        }
        Ok(m)
    }
}

/// `i64` in big-endian with the sign bit flipped: byte order equals numeric order.
pub fn put_ordered_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&ordered_i64(v));
}

/// `v` as 8 bytes that sort like the numbers (big-endian, sign bit flipped).
pub fn ordered_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn get_ordered_i64(input: &mut &[u8]) -> Result<i64, String> {
    Ok((u64::from_be_bytes(fixed(input)?) ^ (1 << 63)) as i64)
}

impl MapKey for i64 {
    fn encode_ordered(&self, out: &mut Vec<u8>) {
        put_ordered_i64(out, *self);
    }
    fn decode_ordered(input: &mut &[u8]) -> Result<Self, String> {
        get_ordered_i64(input)
    }
}

/// Byte strings order as bytes; as a map key a byte string must be the last component.
impl MapKey for Vec<u8> {
    fn encode_ordered(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn decode_ordered(input: &mut &[u8]) -> Result<Self, String> {
        let v = input.to_vec();
        *input = &[];
        Ok(v)
    }
}

impl MapKey for (i64, i64) {
    fn encode_ordered(&self, out: &mut Vec<u8>) {
        put_ordered_i64(out, self.0);
        put_ordered_i64(out, self.1);
    }
    fn decode_ordered(input: &mut &[u8]) -> Result<Self, String> {
        Ok((get_ordered_i64(input)?, get_ordered_i64(input)?))
    }
}

/// A timestamp with a byte-string tie-breaker (which must be the last component).
impl MapKey for (i64, Vec<u8>) {
    fn encode_ordered(&self, out: &mut Vec<u8>) {
        put_ordered_i64(out, self.0);
        out.extend_from_slice(&self.1);
    }
    fn decode_ordered(input: &mut &[u8]) -> Result<Self, String> {
        let t = get_ordered_i64(input)?;
        let rest = input.to_vec();
        *input = &[];
        Ok((t, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let v: (i64, Vec<Option<String>>, Vec<u8>) = (
            -5,
            vec![Some("a".into()), None, Some(String::new())],
            vec![0, 255, 7],
        );
        assert_eq!(
            <(i64, Vec<Option<String>>, Vec<u8>)>::from_bytes(&v.to_bytes()).unwrap(),
            v
        );
        assert!(
            i64::from_bytes(&[1, 2]).is_err(),
            "truncated input is an error"
        );
        assert!(
            bool::from_bytes(&[1, 0]).is_err(),
            "trailing bytes are an error"
        );
    }

    #[test]
    fn ordered_keys_sort_as_bytes_like_they_sort_as_numbers() {
        let mut xs = vec![i64::MIN, -1_000_000, -1, 0, 1, 42, i64::MAX];
        let mut encoded: Vec<Vec<u8>> = xs
            .iter()
            .map(|x| {
                let mut out = Vec::new();
                x.encode_ordered(&mut out);
                out
            })
            .collect();
        encoded.sort();
        let decoded: Vec<i64> = encoded
            .iter()
            .map(|e| i64::decode_ordered(&mut e.as_slice()).unwrap())
            .collect();
        xs.sort();
        assert_eq!(decoded, xs);
    }
}
