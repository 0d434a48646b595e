//! The JSON-lines decoder: each input line through a single layout (every type, nested
//! objects) and a variants layout, flushing now and then; what decodes is encoded back.

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

/// Decodes the input's lines through both layouts, encoding back what decodes.
pub fn jsonl_decode(data: &[u8]) {
    for layout in LAYOUTS.iter() {
        // The last port is unwanted: its lines are recognised and skipped.
        let ports = layout.ports().len();
        let want: Vec<bool> = (0..ports).map(|p| ports == 1 || p + 1 < ports).collect();
        let mut decoder = JsonDecoder::new(layout, &want, 8);
        for (i, line) in data.split(|&b| b == b'\n').enumerate() {
            let _ = decoder.decode_line(line);
            if i % 5 == 4 {
                for (_, batch) in decoder.flush() {
                    let mut out = Vec::new();
                    let _ = encode_batch(&batch, &mut out);
                }
            }
        }
        decoder.flush();
    }
}
