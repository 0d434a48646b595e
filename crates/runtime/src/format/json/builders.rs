//! Column builders for the decoder: plain vectors that can be truncated (to roll back a partly
//! decoded row) and become Arrow arrays without copying.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
    new_null_array,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};

use super::layout::ScalarType;

/// A growable bitmap that can be truncated.
#[derive(Debug, Default)]
pub(crate) struct BitVec {
    bytes: Vec<u8>,
    len: usize,
}

impl BitVec {
    fn with_capacity(bits: usize) -> Self {
        BitVec {
            bytes: Vec::with_capacity(bits.div_ceil(8)),
            len: 0,
        }
    }

    /// `len` set bits.
    fn ones(len: usize, capacity: usize) -> Self {
        let mut bytes = Vec::with_capacity(capacity.max(len).div_ceil(8));
        bytes.resize(len / 8, 0xFF);
        let partial = len % 8;
        if partial > 0 {
            bytes.push((1u8 << partial) - 1);
        }
        BitVec { bytes, len }
    }

    #[inline]
    fn push(&mut self, bit: bool) {
        let offset = self.len % 8;
        match self.bytes.last_mut() {
            Some(last) if offset > 0 => *last |= u8::from(bit) << offset,
            _ => self.bytes.push(u8::from(bit)),
        }
        self.len += 1;
    }

    fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        self.bytes.truncate(len.div_ceil(8));
        let partial = len % 8;
        match self.bytes.last_mut() {
            Some(last) if partial > 0 => *last &= (1u8 << partial) - 1,
            _ => {}
        }
        self.len = len;
    }

    fn finish(self) -> BooleanBuffer {
        BooleanBuffer::new(Buffer::from_vec(self.bytes), 0, self.len)
    }
}

/// Validity bits, only materialised once the first null arrives.
#[derive(Debug, Default)]
struct Validity {
    bits: Option<BitVec>,
}

impl Validity {
    #[inline]
    fn push_valid(&mut self) {
        if let Some(bits) = &mut self.bits {
            bits.push(true);
        }
    }

    /// Appends a null after `len` values, all valid unless recorded otherwise.
    fn push_null(&mut self, len: usize, capacity: usize) {
        self.bits
            .get_or_insert_with(|| BitVec::ones(len, capacity))
            .push(false);
    }

    fn truncate(&mut self, len: usize) {
        if let Some(bits) = &mut self.bits {
            bits.truncate(len);
        }
    }

    fn finish(&mut self) -> Option<NullBuffer> {
        let nulls = NullBuffer::new(self.bits.take()?.finish());
        (nulls.null_count() > 0).then_some(nulls)
    }
}

/// Values of a fixed-width column.
#[derive(Debug)]
pub(crate) struct Primitive<T> {
    values: Vec<T>,
    validity: Validity,
}

impl<T: Copy + Default + arrow_buffer::ArrowNativeType> Primitive<T> {
    fn with_capacity(capacity: usize) -> Self {
        Primitive {
            values: Vec::with_capacity(capacity),
            validity: Validity::default(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, value: T) {
        self.values.push(value);
        self.validity.push_valid();
    }

    pub(crate) fn push_null(&mut self) {
        self.validity
            .push_null(self.values.len(), self.values.capacity());
        self.values.push(T::default());
    }

    fn truncate(&mut self, len: usize) {
        self.values.truncate(len);
        self.validity.truncate(len);
    }

    fn finish(&mut self, capacity: usize) -> (ScalarBuffer<T>, Option<NullBuffer>) {
        let values = std::mem::replace(&mut self.values, Vec::with_capacity(capacity));
        (ScalarBuffer::from(values), self.validity.finish())
    }
}

/// A boolean column.
#[derive(Debug)]
pub(crate) struct Bools {
    values: BitVec,
    validity: Validity,
}

impl Bools {
    #[inline]
    pub(crate) fn push(&mut self, value: bool) {
        self.values.push(value);
        self.validity.push_valid();
    }

    pub(crate) fn push_null(&mut self) {
        self.validity
            .push_null(self.values.len, self.values.bytes.capacity() * 8);
        self.values.push(false);
    }
}

/// A UTF-8 column: offsets into one byte buffer.
#[derive(Debug)]
pub(crate) struct Strings {
    /// `offsets[i]..offsets[i + 1]` is value `i`; starts with a 0.
    offsets: Vec<i32>,
    data: Vec<u8>,
    validity: Validity,
}

/// A string column would pass `i32::MAX` bytes in one batch.
#[derive(Debug)]
pub(crate) struct Overflow;

impl Strings {
    fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Strings {
            offsets,
            data: Vec::with_capacity(bytes),
            validity: Validity::default(),
        }
    }

    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    #[inline]
    pub(crate) fn push(&mut self, value: &str) -> Result<(), Overflow> {
        self.data.extend_from_slice(value.as_bytes());
        let Ok(end) = i32::try_from(self.data.len()) else {
            let last = self.offsets.last().copied().unwrap_or(0);
            self.data.truncate(usize::try_from(last).unwrap_or(0));
            return Err(Overflow);
        };
        self.offsets.push(end);
        self.validity.push_valid();
        Ok(())
    }

    pub(crate) fn push_null(&mut self) {
        self.validity.push_null(self.len(), self.offsets.capacity());
        let last = self.offsets.last().copied().unwrap_or(0);
        self.offsets.push(last);
    }

    fn truncate(&mut self, len: usize) {
        if len >= self.len() {
            return;
        }
        self.offsets.truncate(len + 1);
        let end = self.offsets.last().copied().unwrap_or(0);
        self.data.truncate(usize::try_from(end).unwrap_or(0));
        self.validity.truncate(len);
    }
}

/// One output column being built.
#[derive(Debug)]
pub(crate) enum Column {
    Int(Primitive<i64>),
    Float(Primitive<f64>),
    Timestamp(Primitive<i64>),
    String(Strings),
    Bool(Bools),
    /// A column nothing downstream reads (projection pushdown, see
    /// [`JsonDecoder::reading`](super::JsonDecoder::reading)): its values are skipped like
    /// undeclared ones, and it becomes an all-null column of its declared type, `len` long.
    Unread {
        ty: ScalarType,
        len: usize,
    },
}

impl Column {
    pub(crate) fn new(ty: ScalarType, capacity: usize) -> Self {
        match ty {
            ScalarType::Int => Column::Int(Primitive::with_capacity(capacity)),
            ScalarType::Float => Column::Float(Primitive::with_capacity(capacity)),
            ScalarType::Timestamp => Column::Timestamp(Primitive::with_capacity(capacity)),
            ScalarType::String => Column::String(Strings::with_capacity(capacity, capacity * 8)),
            ScalarType::Bool => Column::Bool(Bools {
                values: BitVec::with_capacity(capacity),
                validity: Validity::default(),
            }),
        }
    }

    /// The declared type of a column being built (`None` for one already unread).
    pub(crate) fn scalar_type(&self) -> Option<ScalarType> {
        match self {
            Column::Int(_) => Some(ScalarType::Int),
            Column::Float(_) => Some(ScalarType::Float),
            Column::Timestamp(_) => Some(ScalarType::Timestamp),
            Column::String(_) => Some(ScalarType::String),
            Column::Bool(_) => Some(ScalarType::Bool),
            Column::Unread { .. } => None,
        }
    }

    /// Values (including nulls) appended so far.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Column::Int(c) | Column::Timestamp(c) => c.values.len(),
            Column::Float(c) => c.values.len(),
            Column::String(c) => c.len(),
            Column::Bool(c) => c.values.len,
            Column::Unread { len, .. } => *len,
        }
    }

    pub(crate) fn push_null(&mut self) {
        match self {
            Column::Int(c) | Column::Timestamp(c) => c.push_null(),
            Column::Float(c) => c.push_null(),
            Column::String(c) => c.push_null(),
            Column::Bool(c) => c.push_null(),
            Column::Unread { len, .. } => *len += 1,
        }
    }

    /// Drops values past the first `len`.
    pub(crate) fn truncate(&mut self, len: usize) {
        match self {
            Column::Int(c) | Column::Timestamp(c) => c.truncate(len),
            Column::Float(c) => c.truncate(len),
            Column::String(c) => c.truncate(len),
            Column::Bool(c) => {
                c.values.truncate(len);
                c.validity.truncate(len);
            }
            Column::Unread { len: n, .. } => *n = len.min(*n),
        }
    }

    /// Hands the values over as an Arrow array and starts an empty column with room for
    /// `capacity` rows.
    pub(crate) fn finish(&mut self, capacity: usize) -> ArrayRef {
        match self {
            Column::Int(c) => {
                let (values, nulls) = c.finish(capacity);
                Arc::new(Int64Array::new(values, nulls))
            }
            Column::Float(c) => {
                let (values, nulls) = c.finish(capacity);
                Arc::new(Float64Array::new(values, nulls))
            }
            Column::Timestamp(c) => {
                let (values, nulls) = c.finish(capacity);
                Arc::new(TimestampMillisecondArray::new(values, nulls))
            }
            Column::String(c) => {
                // Reserve as many bytes as this batch used: batches tend to look alike.
                let next = Strings::with_capacity(capacity, c.data.len());
                let Strings {
                    offsets,
                    data,
                    mut validity,
                } = std::mem::replace(c, next);
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
                Arc::new(
                    StringArray::try_new(offsets, Buffer::from_vec(data), validity.finish())
                        .expect("the decoder appends only whole UTF-8 strings"),
                )
            }
            Column::Bool(c) => {
                let values = std::mem::replace(&mut c.values, BitVec::with_capacity(capacity));
                Arc::new(BooleanArray::new(values.finish(), c.validity.finish()))
            }
            Column::Unread { ty, len } => new_null_array(&ty.data_type(), std::mem::take(len)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    #[test]
    fn bitvec_truncate_clears_dropped_bits() {
        let mut bits = BitVec::with_capacity(0);
        for i in 0..13 {
            bits.push(i % 3 != 0);
        }
        bits.truncate(9);
        bits.push(false);
        bits.push(false);
        let buffer = bits.finish();
        let expected: Vec<bool> = (0..9).map(|i| i % 3 != 0).chain([false, false]).collect();
        assert_eq!(buffer.iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn validity_appears_only_with_a_null_and_survives_truncation() {
        let mut column = Column::new(ScalarType::Int, 4);
        if let Column::Int(c) = &mut column {
            c.push(1);
            c.push(2);
        }
        column.push_null();
        column.truncate(2);
        let array = column.finish(4);
        assert_eq!(array.null_count(), 0);
        assert!(array.nulls().is_none());

        let mut column = Column::new(ScalarType::String, 4);
        if let Column::String(c) = &mut column {
            c.push("a").ok();
            c.push("bc").ok();
        }
        column.push_null();
        column.truncate(1);
        column.push_null();
        let array = column.finish(4);
        let strings = array
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("strings");
        assert_eq!(strings.len(), 2);
        assert_eq!(strings.value(0), "a");
        assert!(strings.is_null(1));
    }
}
