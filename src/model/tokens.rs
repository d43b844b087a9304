//! Token counting with tiktoken, bounded to linear time.
//!
//! tiktoken's byte-pair merge is quadratic in the length of one pre-tokenised piece, and a long
//! run without whitespace is one piece (about 0.4 s for 50 KB). The counter therefore cuts any
//! run of same-class characters longer than [`MAX_RUN_BYTES`] before encoding; the count of a
//! cut run differs from the exact one by at most a token per cut, which budgets absorb. ASCII
//! text under cl100k is split without tiktoken's regex (`pretokenize.rs`), to the same count.

use std::sync::{Mutex, OnceLock, PoisonError};

use foldhash::HashMap;
use tiktoken_rs::CoreBPE;

use super::pretokenize::cl100k_ascii_count;

/// Longest run of whitespace or of non-whitespace encoded as one piece.
pub(crate) const MAX_RUN_BYTES: usize = 256;

/// Longest text [`TokenCounter::count_recurring`] remembers.
pub(crate) const MEMO_MAX_TEXT_BYTES: usize = 512;

/// Counts [`TokenCounter::count_recurring`] remembers per vocabulary; when full, it starts
/// over (about 1.5 MiB at most).
pub(crate) const MEMO_ENTRIES: usize = 16_384;

/// Tokens a chat message costs beyond its content (role and separators), as OpenAI counts.
pub(crate) const MESSAGE_OVERHEAD_TOKENS: u32 = 4;

/// Which vocabulary to count with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `cl100k_base` (GPT-3.5/4 and the default for unknown models).
    Cl100k,
    /// `o200k_base` (GPT-4o, 4.1, 5 and the o-series).
    O200k,
}

impl Encoding {
    /// The encoding that fits `model`.
    pub fn for_model(model: &str) -> Self {
        let m = model.to_ascii_lowercase();
        let o200k = ["gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4", "chatgpt-4o"];
        if o200k.iter().any(|p| m.starts_with(p)) {
            Encoding::O200k
        } else {
            Encoding::Cl100k
        }
    }
}

/// Counts tokens. Cheap to copy; the vocabulary is loaded once per process, on first use.
#[derive(Debug, Clone, Copy)]
pub struct TokenCounter {
    encoding: Encoding,
}

impl TokenCounter {
    /// A counter for `encoding`.
    pub fn new(encoding: Encoding) -> Self {
        Self { encoding }
    }

    /// Loads the vocabulary now (it takes a fraction of a second), e.g. off the critical path
    /// at start-up.
    pub fn warm_up(&self) {
        let _ = self.bpe();
    }

    fn bpe(&self) -> &'static CoreBPE {
        static CL100K: OnceLock<&'static CoreBPE> = OnceLock::new();
        static O200K: OnceLock<&'static CoreBPE> = OnceLock::new();
        match self.encoding {
            Encoding::Cl100k => CL100K.get_or_init(tiktoken_rs::cl100k_base_singleton),
            Encoding::O200k => O200K.get_or_init(tiktoken_rs::o200k_base_singleton),
        }
    }

    /// Tokens in `text`.
    pub fn count(&self, text: &str) -> u32 {
        let bpe = self.bpe();
        let encode =
            |piece: &str| u32::try_from(bpe.encode_ordinary(piece).len()).unwrap_or(u32::MAX);
        let mut total = 0u32;
        for segment in segments(text) {
            let fast = match self.encoding {
                Encoding::Cl100k => cl100k_ascii_count(segment, encode),
                Encoding::O200k => None,
            };
            let n = fast.unwrap_or_else(|| encode(segment));
            total = total.saturating_add(n);
        }
        total
    }

    /// Like [`TokenCounter::count`], remembering the counts of short texts that recur turn
    /// after turn (the labelled sender block of a group message is counted for every turn of
    /// that sender). Texts longer than [`MEMO_MAX_TEXT_BYTES`] are counted directly.
    pub fn count_recurring(&self, text: &str) -> u32 {
        if text.len() > MEMO_MAX_TEXT_BYTES {
            return self.count(text);
        }
        static CL100K: OnceLock<Mutex<HashMap<Box<str>, u32>>> = OnceLock::new();
        static O200K: OnceLock<Mutex<HashMap<Box<str>, u32>>> = OnceLock::new();
        let memo = match self.encoding {
            Encoding::Cl100k => &CL100K,
            Encoding::O200k => &O200K,
        }
        .get_or_init(|| Mutex::new(HashMap::default()));
        // A poisoned memo only holds complete entries: keep using it.
        let lock = || memo.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = lock().get(text) {
            return *n;
        }
        let n = self.count(text);
        let mut memo = lock();
        if memo.len() >= MEMO_ENTRIES {
            memo.clear();
        }
        memo.insert(text.into(), n);
        n
    }

    /// Tokens of `text` sent as one chat message.
    pub fn count_message(&self, text: &str) -> u32 {
        self.count(text).saturating_add(MESSAGE_OVERHEAD_TOKENS)
    }
}

/// Splits `text` so no run of same-class characters in a segment exceeds [`MAX_RUN_BYTES`].
fn segments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut run_start = 0usize;
        let mut run_ws: Option<bool> = None;
        let mut cut = rest.len();
        for (i, c) in rest.char_indices() {
            let ws = c.is_whitespace();
            if run_ws != Some(ws) {
                run_ws = Some(ws);
                run_start = i;
            } else if i - run_start >= MAX_RUN_BYTES {
                cut = i;
                break;
            }
        }
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_the_text_and_cut_long_runs() {
        let text = format!("hello {} world {}", "x".repeat(1000), " ".repeat(600));
        let parts: Vec<&str> = segments(&text).collect();
        assert_eq!(parts.concat(), text);
        assert!(parts.len() >= 4);
        let short = "plain short text";
        assert_eq!(segments(short).collect::<Vec<_>>(), vec![short]);
        let multibyte = "é".repeat(400);
        assert_eq!(segments(&multibyte).collect::<Vec<_>>().concat(), multibyte);
    }

    #[test]
    fn counts_like_tiktoken_on_ordinary_text() {
        let counter = TokenCounter::new(Encoding::Cl100k);
        let text = "The quick brown fox jumps over the lazy dog.";
        let exact = tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(text)
            .len() as u32;
        assert_eq!(counter.count(text), exact);
        assert_eq!(counter.count(""), 0);
    }

    #[test]
    fn adversarial_input_is_close_to_exact() {
        let counter = TokenCounter::new(Encoding::Cl100k);
        let text = "ab".repeat(2_000);
        let exact = tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(&text)
            .len() as u32;
        let ours = counter.count(&text);
        let cuts = (text.len() / MAX_RUN_BYTES) as u32;
        assert!(ours >= exact && ours <= exact + cuts, "{ours} vs {exact}");
    }

    #[test]
    fn remembered_counts_equal_direct_counts() {
        let counter = TokenCounter::new(Encoding::Cl100k);
        let long = "word ".repeat(MEMO_MAX_TEXT_BYTES);
        for text in [
            "Sender (untrusted):\n```\nAda (id 7)\n```",
            "",
            "x",
            long.as_str(),
        ] {
            assert_eq!(
                counter.count_recurring(text),
                counter.count(text),
                "{text:?}"
            );
            assert_eq!(
                counter.count_recurring(text),
                counter.count(text),
                "again: {text:?}"
            );
        }
        // Past the bound it starts over and stays correct.
        for i in 0..MEMO_ENTRIES + 10 {
            let text = format!("sender {i}");
            assert_eq!(counter.count_recurring(&text), counter.count(&text));
        }
    }

    #[test]
    fn encoding_follows_the_model() {
        assert_eq!(Encoding::for_model("gpt-4o-mini"), Encoding::O200k);
        assert_eq!(Encoding::for_model("gpt-5"), Encoding::O200k);
        assert_eq!(Encoding::for_model("llama3"), Encoding::Cl100k);
        assert_eq!(Encoding::for_model("echo"), Encoding::Cl100k);
    }
}
