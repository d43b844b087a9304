//! Lexical retrieval over a chat's own messages: BM25 over analysed terms
//! ([`super::analysis::terms`]), and the choice of what to show from the ranking.
//!
//! Plain functions over term lists, so the ranking rules are tested without a store or an
//! actor. BM25 is written out here (a dozen lines) rather than through the `bm25` crate's
//! embedder, which would analyse every document twice (once to fit, once to embed).

use std::collections::HashMap;

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;

/// One scored document: its index in the corpus and its BM25 score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Hit {
    /// Index into the corpus.
    pub doc: usize,
    /// BM25 score (> 0).
    pub score: f32,
}

/// Ranks `docs` against `query` with BM25 (each query term counted once); only documents
/// sharing a term, best first, ties to the higher index (in a chat: the newer message).
pub(crate) fn bm25(docs: &[Vec<String>], query: &[String]) -> Vec<Hit> {
    if docs.is_empty() {
        return Vec::new();
    }
    let mut q: Vec<&str> = query.iter().map(String::as_str).collect();
    q.sort_unstable();
    q.dedup();
    let n = docs.len() as f32;
    let avgdl = docs.iter().map(Vec::len).sum::<usize>() as f32 / n;
    let mut df: HashMap<&str, u32> = q.iter().map(|t| (*t, 0)).collect();
    for d in docs {
        let mut seen: Vec<&str> = d
            .iter()
            .map(String::as_str)
            .filter(|t| df.contains_key(t))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            if let Some(c) = df.get_mut(t) {
                *c += 1;
            }
        }
    }
    let idf: HashMap<&str, f32> = df
        .iter()
        .filter(|(_, n_t)| **n_t > 0)
        .map(|(t, n_t)| {
            let n_t = *n_t as f32;
            (*t, ((n - n_t + 0.5) / (n_t + 0.5) + 1.0).ln())
        })
        .collect();
    let mut hits: Vec<Hit> = docs
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let len_norm = K1 * (1.0 - B + B * d.len() as f32 / avgdl.max(1.0));
            let score: f32 = idf
                .iter()
                .map(|(t, idf)| {
                    let tf = d.iter().filter(|w| w.as_str() == *t).count() as f32;
                    if tf == 0.0 {
                        0.0
                    } else {
                        idf * tf * (K1 + 1.0) / (tf + len_norm)
                    }
                })
                .sum();
            (score > 0.0).then_some(Hit { doc: i, score })
        })
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::analysis::terms;

    fn corpus(texts: &[&str]) -> Vec<Vec<String>> {
        texts.iter().map(|t| terms(t)).collect()
    }

    #[test]
    fn rare_shared_terms_rank_first_and_forms_meet() {
        let docs = corpus(&[
            "I went to the park today",
            "We moved here from Sweden four years ago",
            "How was the park?",
            "the weather is nice",
        ]);
        let hits = bm25(&docs, &terms("Where did she move from?"));
        assert_eq!(hits.first().map(|h| h.doc), Some(1));
        assert_eq!(hits.len(), 1, "only documents sharing a term");
        assert!(bm25(&[], &terms("x")).is_empty());
        assert!(bm25(&docs, &[]).is_empty());
    }

    #[test]
    fn ties_favour_the_newer_document() {
        let docs = corpus(&["standup at nine", "standup at ten"]);
        let hits = bm25(&docs, &terms("standup"));
        assert_eq!(hits[0].doc, 1);
    }
}
