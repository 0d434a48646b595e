//! Synthetic Nexmark events as JSON lines (the format of `shared/nexmark/SCHEMA.md`), for tests
//! and throughput measurements. Deterministic for a seed.

use indexmap::IndexMap;

use super::layout::{JsonLayout, JsonType, ScalarType};

const CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const CITIES: [&str; 6] = [
    "Phoenix",
    "Los Angeles",
    "Boise",
    "Portland",
    "Seattle",
    "Cheyenne",
];
const FIRST: [&str; 6] = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky"];
const LAST: [&str; 6] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton"];

/// A tiny deterministic generator (splitmix64).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Padding text of a random length in `0..=2 * mean`.
fn extra(rng: &mut Rng, mean: u64) -> String {
    let len = rng.below(2 * mean + 1) as usize;
    let mut s = String::with_capacity(len);
    while s.len() < len {
        s.push((b'a' + rng.below(26) as u8) as char);
        if s.len() % 9 == 8 && s.len() < len {
            s.push(' ');
        }
    }
    s.truncate(len);
    s
}

/// `n` Nexmark events as JSON lines, each ending in `'\n'`: person, auction and bid in the
/// proportions 1:3:46, padded (through `extra`) to about 300, 600 and 200 bytes a line.
pub(crate) fn generate(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n * 240);
    let mut time = 1_700_000_000_000_i64;
    let (mut people, mut auctions) = (1000_u64, 1000_u64);
    for i in 0..n {
        time += rng.below(3) as i64;
        let line = match i % 50 {
            0 => {
                people += 1;
                format!(
                    r#"{{"type":"person","person":{{"id":{},"name":"{} {}","emailAddress":"{}@{}.com","creditCard":"{:04} {:04} {:04} {:04}","city":"{}","state":"{}","dateTime":{},"extra":"{}"}}}}"#,
                    people,
                    rng.pick(&FIRST),
                    rng.pick(&LAST),
                    rng.pick(&FIRST).to_lowercase(),
                    rng.pick(&LAST).to_lowercase(),
                    rng.below(10_000),
                    rng.below(10_000),
                    rng.below(10_000),
                    rng.below(10_000),
                    rng.pick(&CITIES),
                    rng.pick(&STATES),
                    time,
                    extra(&mut rng, 60),
                )
            }
            1..=3 => {
                auctions += 1;
                let initial = 100 + rng.below(10_000);
                format!(
                    r#"{{"type":"auction","auction":{{"id":{},"itemName":"item {}","description":"a fine item, barely used, number {}","initialBid":{},"reserve":{},"dateTime":{},"expires":{},"seller":{},"category":{},"extra":"{}"}}}}"#,
                    auctions,
                    rng.below(100_000),
                    rng.below(100_000),
                    initial,
                    initial + rng.below(5_000),
                    time,
                    time + 1_000 + rng.below(20_000) as i64,
                    1000 + rng.below(people - 999),
                    10 + rng.below(5),
                    extra(&mut rng, 175),
                )
            }
            _ => format!(
                r#"{{"type":"bid","bid":{{"auction":{},"bidder":{},"price":{},"channel":"{}","url":"https://www.nexmark.com/{}/item.htm?query=1&channel_id={}","dateTime":{},"extra":"{}"}}}}"#,
                auctions - rng.below(100.min(auctions - 999)),
                1000 + rng.below(people - 999),
                100 + rng.below(100_000),
                rng.pick(&CHANNELS),
                extra(&mut rng, 6).replace(' ', "/"),
                rng.below(1 << 20),
                time,
                extra(&mut rng, 20),
            ),
        };
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out
}

fn fields(fields: &[(&str, ScalarType)]) -> IndexMap<String, JsonType> {
    fields
        .iter()
        .map(|(name, ty)| ((*name).to_owned(), JsonType::Scalar(*ty)))
        .collect()
}

/// The Nexmark layout; with `all` false only `bid` is declared.
pub(crate) fn layout(all: bool) -> JsonLayout {
    use ScalarType::{Int, String, Timestamp};
    let person = fields(&[
        ("id", Int),
        ("name", String),
        ("emailAddress", String),
        ("creditCard", String),
        ("city", String),
        ("state", String),
        ("dateTime", Timestamp),
        ("extra", String),
    ]);
    let auction = fields(&[
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
    ]);
    let bid = fields(&[
        ("auction", Int),
        ("bidder", Int),
        ("price", Int),
        ("channel", String),
        ("url", String),
        ("dateTime", Timestamp),
        ("extra", String),
    ]);
    let mut variants = IndexMap::new();
    if all {
        variants.insert("person".to_owned(), person);
        variants.insert("auction".to_owned(), auction);
    }
    variants.insert("bid".to_owned(), bid);
    JsonLayout::Variants(variants)
}
