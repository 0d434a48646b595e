//! The per-generator random text that every generated string is cut from.
//!
//! Beam builds each random string character by character; here each is a window into a buffer
//! of random text built once from the seed, at an offset drawn by the event's own PRNG. A string
//! therefore stays a pure function of `(seed, n)` but costs a `memcpy` instead of an allocation
//! and a few dozen random draws. The bid channel table (Beam's `ChannelCache`) and the four hot
//! URLs are built here too, once, from the seed.

use super::rng::Rng;

/// Length of the `words` buffer. Windows are at most 100 bytes, so 64 KiB gives ~65,000 distinct
/// starting points per length while the buffer stays in L2 cache.
const WORDS_LEN: usize = 64 * 1024;
/// Smallest length of the `letters` buffer (it grows with the configured average sizes).
const MIN_LETTERS_LEN: usize = 64 * 1024;
/// Beam's `MIN_STRING_LENGTH`: the shortest `next_string` before trimming.
const MIN_STRING_LENGTH: usize = 3;
/// Beam's `CHANNELS_NUMBER`: the number of distinct non-hot channels.
pub(crate) const CHANNELS_NUMBER: usize = 10_000;
/// Beam's `HOT_CHANNELS`.
pub(crate) const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// Salt separating the text stream from the per-event streams.
const TEXT_SALT: u64 = 0x7465_7874_5f62_7566; // "text_buf"

/// Many short strings stored back to back in one allocation.
struct StrTable {
    text: String,
    /// `bounds[i]..bounds[i + 1]` is string `i`; one more entry than strings.
    bounds: Vec<usize>,
}

impl StrTable {
    fn with_capacity(strings: usize, bytes: usize) -> Self {
        let mut bounds = Vec::with_capacity(strings + 1);
        bounds.push(0);
        StrTable {
            text: String::with_capacity(bytes),
            bounds,
        }
    }

    /// Ends the string being written to `text`.
    fn end_string(&mut self) {
        self.bounds.push(self.text.len());
    }

    fn get(&self, i: usize) -> &str {
        &self.text[self.bounds[i]..self.bounds[i + 1]]
    }
}

/// Random text and tables for one generator; see the module docs.
pub(crate) struct Text {
    /// Lowercase letters with a space about one character in 13 (Beam's `nextString`), cut into
    /// item names, descriptions and email parts.
    words: String,
    /// Lowercase letters only (Beam's `nextExactString`), cut into `extra`. At least twice as
    /// long as the longest `extra` the config can ask for.
    letters: String,
    /// `channel-<k>` for `k` in `0..CHANNELS_NUMBER`.
    channel_names: StrTable,
    /// The URL of each channel: a random base URL, nine times in ten with `&channel_id=...`.
    channel_urls: StrTable,
    /// One random base URL per hot channel.
    hot_urls: [String; 4],
}

impl Text {
    /// Builds the text for `seed`, with `letters` long enough for `extra` strings of up to
    /// `max_extra` bytes.
    pub(crate) fn new(seed: u64, max_extra: usize) -> Self {
        let mut rng = Rng::new(super::rng::mix64(seed ^ TEXT_SALT), 0);
        let words: String = (0..WORDS_LEN).map(|_| next_char(&mut rng, ' ')).collect();
        let letters_len = MIN_LETTERS_LEN.max(max_extra.saturating_mul(2));
        let letters: String = (0..letters_len)
            .map(|_| char::from(b'a' + rng.below(26) as u8))
            .collect();

        let hot_urls = std::array::from_fn(|_| {
            let mut url = String::new();
            push_base_url(&mut rng, &mut url);
            url
        });

        let mut channel_names = StrTable::with_capacity(CHANNELS_NUMBER, CHANNELS_NUMBER * 13);
        let mut channel_urls = StrTable::with_capacity(CHANNELS_NUMBER, CHANNELS_NUMBER * 72);
        let mut digits = itoa::Buffer::new();
        for k in 0..CHANNELS_NUMBER {
            channel_names.text.push_str("channel-");
            channel_names.text.push_str(digits.format(k));
            channel_names.end_string();

            push_base_url(&mut rng, &mut channel_urls.text);
            if rng.below(10) > 0 {
                // Beam: `Math.abs(Integer.reverse(channelNumber))`.
                let id = (k as i32).reverse_bits().unsigned_abs();
                channel_urls.text.push_str("&channel_id=");
                channel_urls.text.push_str(digits.format(id));
            }
            channel_urls.end_string();
        }

        Text {
            words,
            letters,
            channel_names,
            channel_urls,
            hot_urls,
        }
    }

    /// Beam's `nextString(random, max_len)`: `3..max_len` random characters (lowercase letters
    /// and spaces), trimmed of spaces. `max_len` must be in `4..=100`.
    #[inline]
    pub(crate) fn next_string(&self, rng: &mut Rng, max_len: usize) -> &str {
        let len = MIN_STRING_LENGTH + rng.index(max_len - MIN_STRING_LENGTH);
        let start = rng.index(self.words.len() - len + 1);
        self.words[start..start + len].trim_matches(' ')
    }

    /// Beam's `nextExactString(random, len)`: exactly `len` random lowercase letters (capped at
    /// the buffer length, which the constructor sized for the config).
    #[inline]
    pub(crate) fn exact_string(&self, rng: &mut Rng, len: usize) -> &str {
        let len = len.min(self.letters.len());
        let start = rng.index(self.letters.len() - len + 1);
        &self.letters[start..start + len]
    }

    /// Beam's bid channel choice: half the time one of the four hot channels with its URL,
    /// otherwise one of [`CHANNELS_NUMBER`] channels with its URL.
    #[inline]
    pub(crate) fn channel(&self, rng: &mut Rng) -> (&str, &str) {
        if rng.below(2) > 0 {
            let i = rng.index(HOT_CHANNELS.len());
            (HOT_CHANNELS[i], &self.hot_urls[i])
        } else {
            let k = rng.index(CHANNELS_NUMBER);
            (self.channel_names.get(k), self.channel_urls.get(k))
        }
    }
}

/// One random character as Beam's `nextString` draws it: `special` one time in 13, else `a..=z`.
fn next_char(rng: &mut Rng, special: char) -> char {
    if rng.below(13) == 0 {
        special
    } else {
        char::from(b'a' + rng.below(26) as u8)
    }
}

/// Beam's `getBaseUrl`: `https://www.nexmark.com/<s>/<s>/<s>/item.htm?query=1`, each `<s>` being
/// 3 or 4 characters of lowercase letters and `_`.
fn push_base_url(rng: &mut Rng, out: &mut String) {
    out.push_str("https://www.nexmark.com/");
    for _ in 0..3 {
        let len = MIN_STRING_LENGTH + rng.index(5 - MIN_STRING_LENGTH);
        out.extend((0..len).map(|_| next_char(rng, '_')));
        out.push('/');
    }
    out.push_str("item.htm?query=1");
}
