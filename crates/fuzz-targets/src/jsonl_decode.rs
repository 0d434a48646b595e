//! The JSON-lines decoder: each input line through a single layout (every type, nested
//! objects) and a variants layout, flushing now and then; what decodes is encoded back. The
//! byte scanner and serde_json alone must agree on every line.

use std::sync::LazyLock;

use indexmap::IndexMap;
use weir_runtime::format::json::{JsonDecoder, JsonLayout, JsonType, ScalarType, encode_batch};

fn scalar(t: ScalarType) -> JsonType {
    JsonType::Scalar(t)
}

static LAYOUTS: LazyLock<[JsonLayout; 2]> = LazyLock::new(|| {
    let fields = IndexMap::from([
        ("i".to_owned(), scalar(ScalarType::Int)),
        ("f".to_owned(), scalar(ScalarType::Float)),
        ("s".to_owned(), scalar(ScalarType::String)),
        ("b".to_owned(), scalar(ScalarType::Bool)),
        ("t".to_owned(), scalar(ScalarType::Timestamp)),
        (
            "o".to_owned(),
            JsonType::Object(IndexMap::from([
                ("i".to_owned(), scalar(ScalarType::Int)),
                (
                    "o".to_owned(),
                    JsonType::Object(IndexMap::from([(
                        "s".to_owned(),
                        scalar(ScalarType::String),
                    )])),
                ),
            ])),
        ),
    ]);
    let variants = IndexMap::from([
        ("bid".to_owned(), fields.clone()),
        (
            "person".to_owned(),
            IndexMap::from([("id".to_owned(), scalar(ScalarType::Int))]),
        ),
        (
            "auction".to_owned(),
            IndexMap::from([("t".to_owned(), scalar(ScalarType::Timestamp))]),
        ),
    ]);
    [JsonLayout::Single(fields), JsonLayout::Variants(variants)]
});

/// Decodes the input's lines through both layouts, encoding back what decodes. Each line goes
/// through the decoder as jobs use it (byte scanner first) and through serde_json alone: the
/// two must agree on every result, error message and batch.
pub fn jsonl_decode(data: &[u8]) {
    for layout in LAYOUTS.iter() {
        // The last port is unwanted: its lines are recognised and skipped.
        let ports = layout.ports().len();
        let want: Vec<bool> = (0..ports).map(|p| ports == 1 || p + 1 < ports).collect();
        let mut decoder = JsonDecoder::new(layout, &want, 8);
        let mut reference = JsonDecoder::new(layout, &want, 8).serde_only();
        for (i, line) in data.split(|&b| b == b'\n').enumerate() {
            let got = decoder.decode_line(line);
            assert_eq!(got, reference.decode_line(line), "{line:?}");
            if i % 5 == 4 {
                flush_both(&mut decoder, &mut reference);
            }
        }
        flush_both(&mut decoder, &mut reference);
    }
}

/// Flushes both decoders, checks that their batches are equal, and encodes them back.
fn flush_both(decoder: &mut JsonDecoder, reference: &mut JsonDecoder) {
    let batches = decoder.flush();
    assert_eq!(batches, reference.flush());
    for (_, batch) in batches {
        let mut out = Vec::new();
        let _ = encode_batch(&batch, &mut out);
    }
}
