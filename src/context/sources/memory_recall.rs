//! `memory_recall`: the daily notes `memory/YYYY-MM-DD.md` are not injected wholesale; they
//! are split into paragraph snippets, ranked with BM25 against the current message, and the
//! top `top_n` snippets are. The index is rebuilt only when a note changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bm25::{Embedder, EmbedderBuilder, Scorer};
use serde::Deserialize;

use super::workspace::{fingerprint, read_capped, stamp, FileStamp};
use crate::context::analysis::{terms, Terms};
use crate::context::text::prefix_chars;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

/// Bytes read of one daily note.
const MAX_NOTE_BYTES: u64 = 64 * 1024;
/// Characters of the current message used as the query.
const MAX_QUERY_CHARS: usize = 2_000;
/// What recall searches for: the current messages' text (at most [`MAX_QUERY_CHARS`]), or
/// `None` when it has no word worth ranking by.
pub(super) fn recall_query(session: &SessionView<'_>) -> Option<String> {
    let query: String = session
        .current
        .iter()
        .map(|c| c.record.message.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let query = prefix_chars(&query, MAX_QUERY_CHARS);
    (!terms(query).is_empty()).then(|| query.to_string())
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// Snippets recalled. Default 3.
    top_n: usize,
    /// Newest notes indexed. Default 365.
    max_files: usize,
    /// Longest snippet, in characters. Default 600.
    max_snippet_chars: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            top_n: 3,
            max_files: 365,
            max_snippet_chars: 600,
        }
    }
}

struct Snippet {
    /// `memory/YYYY-MM-DD.md`.
    file: String,
    text: String,
}

struct Index {
    fingerprint: u64,
    snippets: Vec<Snippet>,
    embedder: Embedder<u32, Terms>,
    scorer: Scorer<usize, u32>,
}

pub(super) struct MemoryRecallSource {
    dir: Option<PathBuf>,
    top_n: usize,
    max_files: usize,
    max_snippet_chars: usize,
    index: Mutex<Option<Arc<Index>>>,
}

/// True for `YYYY-MM-DD.md`.
fn is_daily_note(name: &str) -> bool {
    let b = name.as_bytes();
    name.len() == 13
        && name.ends_with(".md")
        && b[..10].iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// Paragraphs of `text` (a heading joins the paragraph after it), each cut into pieces of at
/// most `max_chars` characters.
fn snippets(text: &str, max_chars: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending_heading = String::new();
    for para in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if para.lines().all(|l| l.trim_start().starts_with('#')) {
            pending_heading.push_str(para);
            pending_heading.push('\n');
            continue;
        }
        let full = format!("{pending_heading}{para}");
        pending_heading.clear();
        let mut rest = full.as_str();
        while !rest.is_empty() {
            let piece = prefix_chars(rest, max_chars.max(1));
            out.push(piece.trim().to_string());
            rest = &rest[piece.len()..];
        }
    }
    if !pending_heading.trim().is_empty() {
        out.push(pending_heading.trim().to_string());
    }
    out.retain(|s| !s.is_empty());
    out
}

impl MemoryRecallSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        Ok(Self {
            dir: c
                .config
                .agent
                .workspace_dir
                .as_ref()
                .map(|d| d.join("memory")),
            top_n: p.top_n,
            max_files: p.max_files,
            max_snippet_chars: p.max_snippet_chars,
            index: Mutex::new(None),
        })
    }

    /// The newest daily notes, newest first.
    fn notes(&self) -> Vec<(String, PathBuf, Option<FileStamp>)> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| is_daily_note(n))
            .collect();
        names.sort_unstable_by(|a, b| b.cmp(a));
        names.truncate(self.max_files);
        names
            .into_iter()
            .map(|n| {
                let path = dir.join(&n);
                let stamp = stamp(&path);
                (n, path, stamp)
            })
            .collect()
    }

    fn fingerprint_of(notes: &[(String, PathBuf, Option<FileStamp>)]) -> u64 {
        fingerprint(notes.iter().map(|(_, p, s)| (Path::new(p), *s)))
    }

    fn index(&self) -> Arc<Index> {
        let notes = self.notes();
        let fp = Self::fingerprint_of(&notes);
        let mut slot = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = slot.as_ref().filter(|i| i.fingerprint == fp) {
            return Arc::clone(index);
        }
        let mut all = Vec::new();
        for (name, path, _) in &notes {
            match read_capped(path, MAX_NOTE_BYTES) {
                Ok(text) => all.extend(snippets(&text, self.max_snippet_chars).into_iter().map(
                    |text| Snippet {
                        file: format!("memory/{name}"),
                        text,
                    },
                )),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot read memory note")
                }
            }
        }
        let corpus: Vec<&str> = all.iter().map(|s| s.text.as_str()).collect();
        let embedder =
            EmbedderBuilder::<u32, Terms>::with_tokenizer_and_fit_to_corpus(Terms, &corpus).build();
        let mut scorer = Scorer::<usize, u32>::new();
        for (i, text) in corpus.iter().enumerate() {
            scorer.upsert(&i, embedder.embed(text));
        }
        let index = Arc::new(Index {
            fingerprint: fp,
            snippets: all,
            embedder,
            scorer,
        });
        *slot = Some(Arc::clone(&index));
        index
    }
}

impl ContextSource for MemoryRecallSource {
    fn name(&self) -> &str {
        "memory_recall"
    }

    fn default_priority(&self) -> u8 {
        45
    }

    fn fingerprint(&self, _session: &SessionView<'_>) -> u64 {
        Self::fingerprint_of(&self.notes())
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        if self.dir.is_none() || self.top_n == 0 {
            return Ok(Vec::new());
        }
        let Some(query) = recall_query(session) else {
            return Ok(Vec::new());
        };
        let index = self.index();
        let mut matches = index.scorer.matches(&index.embedder.embed(&query));
        // Ties in a stable order (the scorer's own order among equal scores is arbitrary).
        matches.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        let mut room = budget.remaining();
        let mut out = Vec::new();
        for m in matches.iter().filter(|m| m.score > 0.0).take(self.top_n) {
            let Some(snippet) = index.snippets.get(m.id) else {
                continue;
            };
            let content = format!("Memory ({}):\n{}", snippet.file, snippet.text);
            let tokens = session.tokens.count(&content) + MESSAGE_OVERHEAD_TOKENS;
            if tokens > room {
                continue;
            }
            room -= tokens;
            let mut meta = BlockMeta {
                path: Some(snippet.file.clone()),
                ..BlockMeta::default()
            };
            meta.extra.insert("score".into(), format!("{:.3}", m.score));
            out.push(ContextBlock::new(BlockKind::Memory, content, tokens).with_meta(meta));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daily_note_names() {
        assert!(is_daily_note("2025-01-31.md"));
        assert!(!is_daily_note("2025-1-31.md"));
        assert!(!is_daily_note("notes.md"));
        assert!(!is_daily_note("2025-01-31.txt"));
    }

    #[test]
    fn snippets_follow_paragraphs_and_headings() {
        let s = snippets("# Monday\n\nMet Bob.\n\n\nBought milk and eggs.", 600);
        assert_eq!(s, ["# Monday\nMet Bob.", "Bought milk and eggs."]);
        let long = "word ".repeat(50);
        assert!(snippets(&long, 60).iter().all(|p| p.chars().count() <= 60));
    }

    #[test]
    fn tokenizer_drops_noise() {
        assert_eq!(
            terms("What is the WiFi password, Bob? x"),
            ["wifi", "password", "bob"]
        );
    }
}
