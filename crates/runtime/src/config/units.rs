//! Human-friendly units in job files: durations like `100ms` and byte sizes like `64MiB`.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written with a unit (`0`, `250us`, `100ms`, `10s`, `5m`, `1h 30m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const ZERO: HumanDuration = HumanDuration(Duration::ZERO);

    pub fn from_millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }

    pub fn as_millis_i64(&self) -> i64 {
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        if trimmed == "0" {
            return Ok(Self::ZERO);
        }
        humantime::parse_duration(trimmed).map(HumanDuration).map_err(|e| {
            format!("`{s}` is not a duration ({e}); write a number and a unit, like 100ms, 10s or 5m")
        })
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Zero(u64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::Zero(0) => Ok(Self::ZERO),
            Raw::Zero(n) => Err(serde::de::Error::custom(format!(
                "`{n}` has no unit; write e.g. {n}ms or {n}s"
            ))),
        }
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Pattern shared by the JSON Schema and the validator's friendlier message.
const DURATION_PATTERN: &str = r"^\s*(0|([0-9]+(\.[0-9]+)?\s*(ns|nsec|us|usec|µs|ms|msec|s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days)\s*)+)\s*$";

impl JsonSchema for HumanDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration with a unit: `0`, `250us`, `100ms`, `10s`, `5m`, `1h 30m`.",
            "anyOf": [
                { "type": "string", "pattern": DURATION_PATTERN },
                { "type": "integer", "const": 0 }
            ],
            "x-weir-type": "duration"
        })
    }
}

/// A duration that may be negative (`-5s`, `10s`), for offsets such as interval-join bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SignedDuration(pub i64);

impl SignedDuration {
    pub fn as_millis(&self) -> i64 {
        self.0
    }
}

impl fmt::Display for SignedDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let d = HumanDuration(Duration::from_millis(self.0.unsigned_abs()));
        write!(f, "{sign}{d}")
    }
}

impl std::str::FromStr for SignedDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let (negative, rest) = match t.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        let d: HumanDuration = rest.parse()?;
        let ms = d.as_millis_i64();
        Ok(SignedDuration(if negative { -ms } else { ms }))
    }
}

impl<'de> Deserialize<'de> for SignedDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = serde_json::Value::deserialize(deserializer)?;
        match raw {
            serde_json::Value::String(s) => s.parse().map_err(serde::de::Error::custom),
            serde_json::Value::Number(n) if n.as_i64() == Some(0) => Ok(SignedDuration(0)),
            other => Err(serde::de::Error::custom(format!(
                "`{other}` is not a duration; write e.g. -5s or 10s"
            ))),
        }
    }
}

impl Serialize for SignedDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl JsonSchema for SignedDuration {
    fn schema_name() -> Cow<'static, str> {
        "SignedDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let signed = format!(r"^\s*[-+]?{}", &DURATION_PATTERN[1..]);
        json_schema!({
            "description": "A duration with a unit that may be negative: `-5s`, `0`, `10s`.",
            "anyOf": [
                { "type": "string", "pattern": signed },
                { "type": "integer", "const": 0 }
            ],
            "x-weir-type": "duration"
        })
    }
}

/// A byte size written with a unit (`512KiB`, `64MiB`, `1GB`) or as a plain number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", bytesize::ByteSize(self.0).display().iec())
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<bytesize::ByteSize>()
            .map(|b| ByteSize(b.as_u64()))
            .map_err(|e| format!("`{s}` is not a byte size ({e}); write e.g. 64MiB or 512KiB"))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Bytes(u64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Text(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::Bytes(n) => Ok(ByteSize(n)),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

const BYTE_SIZE_PATTERN: &str =
    r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTP]i?B|[KMGTP]|B|[kmgtp]i?b|[kmgtp])?\s*$";

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A size in bytes: a number, or a number with a unit like `512KiB`, `64MiB`, `1GB`.",
            "anyOf": [
                { "type": "string", "pattern": BYTE_SIZE_PATTERN },
                { "type": "integer", "minimum": 0 }
            ],
            "x-weir-type": "byte-size"
        })
    }
}

/// 1234567 → "1,234,567": how counts are printed (`weir run`'s summary, `weir bench`'s
/// tables, messages that name a count).
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_reject_bare_numbers() {
        let d: HumanDuration = serde_json::from_value(serde_json::json!("100ms")).unwrap();
        assert_eq!(d.0, Duration::from_millis(100));
        let d: HumanDuration = serde_json::from_value(serde_json::json!("1h 30m")).unwrap();
        assert_eq!(d.0, Duration::from_secs(5400));
        let d: HumanDuration = serde_json::from_value(serde_json::json!(0)).unwrap();
        assert_eq!(d, HumanDuration::ZERO);
        let err = serde_json::from_value::<HumanDuration>(serde_json::json!(5)).unwrap_err();
        assert!(err.to_string().contains("has no unit"), "{err}");
        let err = serde_json::from_value::<HumanDuration>(serde_json::json!("ten")).unwrap_err();
        assert!(err.to_string().contains("is not a duration"), "{err}");
    }

    #[test]
    fn duration_pattern_accepts_what_the_parser_accepts() {
        let re = regex_lite_match;
        for ok in ["0", "100ms", "10s", "1h 30m", "250us", "2 minutes"] {
            assert!(re(DURATION_PATTERN, ok), "{ok}");
            assert!(ok.parse::<HumanDuration>().is_ok(), "{ok}");
        }
        for bad in ["ten", "10", "10 parsecs"] {
            assert!(!re(DURATION_PATTERN, bad), "{bad}");
        }
    }

    #[test]
    fn byte_sizes_parse_units_and_numbers() {
        let b: ByteSize = serde_json::from_value(serde_json::json!("64MiB")).unwrap();
        assert_eq!(b.0, 64 * 1024 * 1024);
        let b: ByteSize = serde_json::from_value(serde_json::json!(4096)).unwrap();
        assert_eq!(b.0, 4096);
        assert!(serde_json::from_value::<ByteSize>(serde_json::json!("lots")).is_err());
    }

    /// Checks a pattern with the same engine the validator uses.
    fn regex_lite_match(pattern: &str, text: &str) -> bool {
        let schema = serde_json::json!({"type": "string", "pattern": pattern});
        jsonschema::validator_for(&schema)
            .unwrap()
            .is_valid(&serde_json::json!(text))
    }
}
