//! `cl100k_base`'s split of ASCII text into pieces, without its regex.
//!
//! tiktoken splits text with a regex before byte-pair encoding each piece. The regex has a
//! look-ahead, so it runs on fancy-regex's backtracking machine: counting the tokens of a short
//! chat message cost about 19,000 instructions, one of the larger items of a turn. For ASCII
//! text the same split is a few comparisons per byte ([`cl100k_ascii_pieces`]), and the pieces
//! of chat text recur (words, digit groups, spaces), so their counts are remembered per thread
//! ([`PIECE_MEMO_ENTRIES`]). Tests check the split against tiktoken's own count.
//!
//! The pattern, tried alternative by alternative at each position (`++`, `?+` possessive):
//! ```text
//! '(?i:[sdmt]|ll|ve|re) | [^\r\n\p{L}\p{N}]?+\p{L}++ | \p{N}{1,3}+
//! | ' '?[^\s\p{L}\p{N}]++[\r\n]*+ | \s++$ | \s*[\r\n] | \s+(?!\S) | \s
//! ```

use std::cell::RefCell;

use foldhash::HashMap;

/// Pieces remembered per thread that counts tokens (about 256 KiB at most each); when full,
/// the memo starts over.
pub(crate) const PIECE_MEMO_ENTRIES: usize = 4_096;

/// Longest piece remembered (longer ones are counted each time).
pub(crate) const PIECE_MEMO_MAX_BYTES: usize = 24;

thread_local! {
    static PIECES: RefCell<HashMap<Box<str>, u32>> = RefCell::new(HashMap::default());
}

/// `\s` on ASCII.
fn is_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}

fn is_newline(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

/// Neither `\s`, `\p{L}` nor `\p{N}`.
fn is_other(b: u8) -> bool {
    !is_space(b) && !b.is_ascii_alphanumeric()
}

/// Length of the piece at `i` of ASCII `t` (`i < t.len()`).
fn piece_len(t: &[u8], i: usize) -> usize {
    let n = t.len();
    let c = t[i];
    let lower = |j: usize| t.get(j).map(u8::to_ascii_lowercase);
    // '(?i:[sdmt]|ll|ve|re)
    if c == b'\'' {
        match (lower(i + 1), lower(i + 2)) {
            (Some(b's' | b'd' | b'm' | b't'), _) => return 2,
            (Some(b'l'), Some(b'l')) | (Some(b'v'), Some(b'e')) | (Some(b'r'), Some(b'e')) => {
                return 3
            }
            _ => {}
        }
    }
    // [^\r\n\p{L}\p{N}]?+\p{L}++ (the optional character, once taken, is not given back)
    let letters_from = if !is_newline(c) && !c.is_ascii_alphanumeric() {
        i + 1
    } else {
        i
    };
    let letters = t[letters_from.min(n)..]
        .iter()
        .take_while(|b| b.is_ascii_alphabetic())
        .count();
    if letters > 0 {
        return letters_from + letters - i;
    }
    // \p{N}{1,3}+
    if c.is_ascii_digit() {
        return t[i..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
    }
    // ' '?[^\s\p{L}\p{N}]++[\r\n]*+
    let others_from = if c == b' ' && t.get(i + 1).is_some_and(|&b| is_other(b)) {
        i + 1
    } else {
        i
    };
    if is_other(t[others_from]) {
        let others = t[others_from..]
            .iter()
            .take_while(|&&b| is_other(b))
            .count();
        let end = others_from + others;
        let newlines = t[end..].iter().take_while(|&&b| is_newline(b)).count();
        return end + newlines - i;
    }
    // `c` is whitespace from here on.
    let run = t[i..].iter().take_while(|&&b| is_space(b)).count();
    // \s++$
    if i + run == n {
        return run;
    }
    // \s*[\r\n]: up to the run's last line break
    if let Some(last) = t[i..i + run].iter().rposition(|&b| is_newline(b)) {
        return last + 1;
    }
    // \s+(?!\S): all but the last of a run followed by a non-space
    if run >= 2 {
        return run - 1;
    }
    // \s
    1
}

/// Calls `piece` with each piece of `text` (ASCII), in order, as `cl100k_base` splits it.
fn cl100k_ascii_pieces(text: &str, mut piece: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let len = piece_len(bytes, i).max(1);
        // Every byte of ASCII text is a character boundary.
        let Some(p) = text.get(i..i + len) else {
            return;
        };
        piece(p);
        i += len;
    }
}

/// Tokens of `text` under `cl100k_base`: the pieces' counts, remembered per thread, with
/// `count_piece` counting a piece not remembered. `None` when `text` is not ASCII.
pub(crate) fn cl100k_ascii_count(text: &str, count_piece: impl Fn(&str) -> u32) -> Option<u32> {
    if !text.is_ascii() {
        return None;
    }
    PIECES.with(|memo| {
        let mut memo = memo.borrow_mut();
        let mut total = 0u32;
        cl100k_ascii_pieces(text, |p| {
            let n = match memo.get(p) {
                Some(n) => *n,
                None => {
                    let n = count_piece(p);
                    if p.len() <= PIECE_MEMO_MAX_BYTES {
                        if memo.len() >= PIECE_MEMO_ENTRIES {
                            memo.clear();
                        }
                        memo.insert(p.into(), n);
                    }
                    n
                }
            };
            total = total.saturating_add(n);
        });
        Some(total)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pieces(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        cl100k_ascii_pieces(text, |p| out.push(p.to_string()));
        out
    }

    fn tiktoken(text: &str) -> u32 {
        tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(text)
            .len() as u32
    }

    fn ours(text: &str) -> u32 {
        cl100k_ascii_count(text, tiktoken).expect("ASCII")
    }

    #[test]
    fn splits_as_the_pattern_does() {
        assert_eq!(pieces("msg 12345"), ["msg", " ", "123", "45"]);
        assert_eq!(
            pieces("I'll see you're fine"),
            ["I", "'ll", " see", " you", "'re", " fine"]
        );
        assert_eq!(pieces("a  b"), ["a", " ", " b"]);
        assert_eq!(pieces("a   \n\n b"), ["a", "   \n\n", " b"]);
        assert_eq!(pieces("end.  "), ["end", ".", "  "]);
        assert_eq!(pieces("x !?\n\ny"), ["x", " !?\n\n", "y"]);
        assert_eq!(pieces("\tword -dash"), ["\tword", " -", "dash"]);
    }

    #[test]
    fn counts_known_texts_like_tiktoken() {
        for text in [
            "",
            "msg 12345",
            "The quick brown fox jumps over the lazy dog.",
            "Don't stop: it's 3.14159, isn't it?\r\n\r\n  Next   line\t\ttabs   ",
            "''' '' 's 'S 'LL 'Ve 're\n",
            "{\"json\": [1, 2, 3], \"k\": null}",
            "\u{7f}\u{1}ctrl\u{1b}[0m",
        ] {
            assert_eq!(ours(text), tiktoken(text), "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn counts_any_ascii_like_tiktoken(text in "[a-zA-Z0-9 '\"\\n\\r\\t.,!?:;()\\[\\]{}<>/\\\\_@#$%^&*+=~`|-]{0,80}") {
            prop_assert_eq!(ours(&text), tiktoken(&text));
        }

        #[test]
        fn counts_odd_ascii_like_tiktoken(text in "[ \\t\\n\\r\\x0b\\x0c\\x00-\\x08\\x1c-\\x1f\\x7f'sSlLvVeErRdDmMtT0-9a!]{0,40}") {
            prop_assert_eq!(ours(&text), tiktoken(&text));
        }

        #[test]
        fn pieces_cover_the_text(text in "[ -~\\n\\r\\t]{0,80}") {
            prop_assert_eq!(pieces(&text).concat(), text);
        }
    }
}
