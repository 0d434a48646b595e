//! `weir bench json`: weir's JSON-lines decoder beside `arrow-json` on the Nexmark file, so the
//! choice to keep a decoder of its own is measured rather than assumed.
//!
//! Every arm reads the same bytes, already in memory (the file is read once), into Arrow
//! batches of 8,192 rows, on one thread:
//! - **weir**: [`JsonDecoder`] line by line, each event routed by its `type` into the port of
//!   its variant (person, auction, bid), flat columns, as the file source runs it: its byte
//!   scanner takes the plain lines (all of Nexmark's) and serde_json the rest;
//! - **weir, serde_json only**: the same decoder without the scanner
//!   ([`JsonDecoder::serde_only`]), every line through serde_json (the decoder before the
//!   scanner, and the scanner's reference);
//! - **arrow-json**: arrow's `Decoder` over the whole buffer with the schema
//!   `{type, person: {...}, auction: {...}, bid: {...}}`: one batch of three nullable struct
//!   columns, not yet what a job reads;
//! - **arrow-json + split**: the same, then each batch split by `type` into the three variants
//!   with flat columns (a filter per variant): the output weir gives.
//!
//! Each arm's rows per variant are checked equal to weir's, and the sum of bid prices too, so
//! the arms did the same work. Arms are interleaved run by run; the table shows medians.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use indexmap::IndexMap;
use weir_runtime::format::json::{JsonDecoder, JsonLayout, JsonType, ScalarType};

use crate::measure::{ensure_jsonl, group, median};

const BATCH: usize = 8192;
const VARIANTS: [&str; 3] = ["person", "auction", "bid"];

/// The Nexmark model's fields per variant (`shared/nexmark/SCHEMA.md`).
fn model() -> Vec<(&'static str, Vec<(&'static str, ScalarType)>)> {
    use ScalarType::{Int, String, Timestamp};
    vec![
        (
            "person",
            vec![
                ("id", Int),
                ("name", String),
                ("emailAddress", String),
                ("creditCard", String),
                ("city", String),
                ("state", String),
                ("dateTime", Timestamp),
                ("extra", String),
            ],
        ),
        (
            "auction",
            vec![
                ("id", Int),
                ("itemName", String),
                ("description", String),
                ("initialBid", Int),
                ("reserve", Int),
                ("dateTime", Timestamp),
                ("expires", Timestamp),
                ("seller", Int),
                ("category", Int),
                ("extra", String),
            ],
        ),
        (
            "bid",
            vec![
                ("auction", Int),
                ("bidder", Int),
                ("price", Int),
                ("channel", String),
                ("url", String),
                ("dateTime", Timestamp),
                ("extra", String),
            ],
        ),
    ]
}

fn layout() -> JsonLayout {
    JsonLayout::Variants(
        model()
            .into_iter()
            .map(|(variant, fields)| {
                let fields = fields
                    .into_iter()
                    .map(|(name, ty)| (name.to_owned(), JsonType::Scalar(ty)))
                    .collect::<IndexMap<_, _>>();
                (variant.to_owned(), fields)
            })
            .collect(),
    )
}

/// arrow-json's schema of a whole line: the type tag and one nullable struct per variant.
fn arrow_schema() -> Arc<Schema> {
    let scalar = |ty: ScalarType| match ty {
        ScalarType::Int => DataType::Int64,
        ScalarType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
        ScalarType::String => DataType::Utf8,
        ScalarType::Float => DataType::Float64,
        ScalarType::Bool => DataType::Boolean,
    };
    let mut fields = vec![Field::new("type", DataType::Utf8, true)];
    for (variant, columns) in model() {
        let inner: Fields = columns
            .into_iter()
            .map(|(name, ty)| Field::new(name, scalar(ty), true))
            .collect();
        fields.push(Field::new(variant, DataType::Struct(inner), true));
    }
    Arc::new(Schema::new(fields))
}

/// What an arm produced: rows per variant and the sum of bid prices.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Output {
    rows: [u64; 3],
    price_sum: i64,
}

impl Output {
    fn add(&mut self, variant: usize, batch: &RecordBatch) {
        self.rows[variant] += batch.num_rows() as u64;
        if VARIANTS[variant] == "bid" {
            let price = batch
                .column_by_name("price")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .expect("bids have an Int64 price");
            self.price_sum += price.iter().flatten().sum::<i64>();
        }
    }
}

fn weir_arm(data: &[u8], serde_only: bool) -> anyhow::Result<Output> {
    let layout = layout();
    let mut decoder = JsonDecoder::new(&layout, &[true; 3], BATCH);
    if serde_only {
        decoder = decoder.serde_only();
    }
    let mut out = Output::default();
    let mut buffered = 0;
    for line in data.split(|b| *b == b'\n') {
        if line.is_empty() {
            continue;
        }
        decoder
            .decode_line(line)
            .map_err(|e| anyhow::anyhow!("weir: {e}"))?;
        buffered += 1;
        if buffered == BATCH {
            for (port, batch) in decoder.flush() {
                out.add(port, &batch);
            }
            buffered = 0;
        }
    }
    for (port, batch) in decoder.flush() {
        out.add(port, &batch);
    }
    Ok(out)
}

fn arrow_arm(data: &[u8], split: bool) -> anyhow::Result<Output> {
    let mut decoder = arrow_json::ReaderBuilder::new(arrow_schema())
        .with_batch_size(BATCH)
        .build_decoder()?;
    let mut out = Output::default();
    let mut rest = data;
    loop {
        let used = decoder.decode(rest)?;
        rest = &rest[used..];
        let Some(batch) = decoder.flush()? else {
            if rest.is_empty() {
                return Ok(out);
            }
            continue;
        };
        let tags = batch.column(0).as_string::<i32>();
        for (v, name) in VARIANTS.iter().enumerate() {
            if split {
                let mask = arrow_ord::cmp::eq(tags, &StringArray::new_scalar(*name))?;
                let rows = arrow_select::filter::filter(batch.column(v + 1), &mask)?;
                out.add(v, &RecordBatch::from(rows.as_struct().clone()));
            } else {
                // Unsplit: count the variant's rows (its struct is non-null) and sum prices
                // over the whole column, nulls skipped.
                let column = batch.column(v + 1).as_struct();
                out.rows[v] += (column.len() - column.null_count()) as u64;
                if *name == "bid" {
                    let price = column
                        .column_by_name("price")
                        .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                        .expect("bids have an Int64 price");
                    out.price_sum += (0..column.len())
                        .filter(|i| column.is_valid(*i) && price.is_valid(*i))
                        .map(|i| price.value(i))
                        .sum::<i64>();
                }
            }
        }
    }
}

pub(crate) fn run(events: u64, runs: usize, data_dir: &std::path::Path) -> anyhow::Result<()> {
    let file = ensure_jsonl(data_dir, events)?;
    let data = std::fs::read(&file)?;
    let mb = data.len() as f64 / 1e6;
    type Arm = fn(&[u8]) -> anyhow::Result<Output>;
    let arms: [(&str, Arm); 4] = [
        ("weir JsonDecoder", |d| weir_arm(d, false)),
        ("weir JsonDecoder, serde_json only", |d| weir_arm(d, true)),
        ("arrow-json", |d| arrow_arm(d, false)),
        ("arrow-json + split by type", |d| arrow_arm(d, true)),
    ];
    let mut secs = vec![Vec::new(); arms.len()];
    let mut expected = None;
    for _ in 0..runs {
        for (i, (name, arm)) in arms.iter().enumerate() {
            let t0 = Instant::now();
            let output = arm(&data)?;
            secs[i].push(t0.elapsed().as_secs_f64());
            let expected = *expected.get_or_insert(output);
            anyhow::ensure!(
                output == expected,
                "{name} produced {output:?}, weir {expected:?}: the arms disagree"
            );
        }
    }
    let rows = expected.map_or(0, |o| o.rows.iter().sum::<u64>());
    println!(
        "\nJSON lines → Arrow, {} events ({mb:.0} MB) in memory, batches of {BATCH}, one thread, median of {runs}:",
        group(rows)
    );
    println!(
        "| decoder | s | MB/s | events/s | weir's speed ÷ this arm's |\n|---|---:|---:|---:|---:|"
    );
    let weir = median(secs[0].clone());
    for ((name, _), s) in arms.iter().zip(secs) {
        let s = median(s);
        println!(
            "| {name} | {s:.3} | {:.0} | {} | {:.2}× |",
            mb / s,
            group((rows as f64 / s) as u64),
            s / weir
        );
    }
    Ok(())
}
