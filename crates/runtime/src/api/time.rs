//! Event time: its ends, how a source derives watermarks, and reading time columns.
//!
//! Event times are epoch milliseconds in a `TIMESTAMP` column (or an `INT` of epoch ms).

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use super::OperatorError;

/// The watermark that says "the stream has ended": every window and join completes.
pub const END_OF_TIME: i64 = i64::MAX;
/// The watermark before any has been seen.
pub const BEGINNING_OF_TIME: i64 = i64::MIN;

/// How a source subtask derives watermarks from what it reads.
#[derive(Clone, Debug)]
pub struct EventTime {
    /// Per port: the index of the event-time column, if any.
    pub columns: Vec<Option<usize>>,
    /// Bounded out-of-orderness in milliseconds.
    pub out_of_orderness_ms: i64,
    pub idle_timeout: Option<std::time::Duration>,
}

/// Event times of a TIMESTAMP (or INT epoch-ms) column.
pub fn event_times(array: &ArrayRef) -> Result<Vec<Option<i64>>, OperatorError> {
    Ok(match array.data_type() {
        DataType::Timestamp(_, _) => array
            .as_primitive::<TimestampMillisecondType>()
            .iter()
            .collect(),
        DataType::Int64 => array.as_primitive::<Int64Type>().iter().collect(),
        other => {
            return Err(OperatorError::Internal(format!(
                "a time column of type {other}"
            )));
        }
    })
}

/// The largest event time in a timestamp (or epoch-ms integer) column.
pub fn max_event_time(col: &dyn Array) -> Option<i64> {
    match col.data_type() {
        DataType::Timestamp(_, _) => {
            arrow_arith::aggregate::max(col.as_primitive::<TimestampMillisecondType>())
        }
        DataType::Int64 => arrow_arith::aggregate::max(col.as_primitive::<Int64Type>()),
        _ => None,
    }
}
