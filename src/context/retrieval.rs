//! Lexical retrieval over a chat's own messages: BM25 over analysed terms
//! ([`super::analysis::terms`]), and the choice of what to show from the ranking.
//!
//! Plain functions over term ids, so the ranking rules are tested without a store or an
//! actor. BM25 is written out here ([`Corpus`], postings per term) rather than through the
//! `bm25` crate's embedder, which would analyse every document twice (once to fit, once to
//! embed); [`expansion`] picks the terms of a second round (relevance feedback).

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
#[cfg(test)]
pub(crate) fn bm25(docs: &[Vec<String>], query: &[String]) -> Vec<Hit> {
    let mut vocabulary: HashMap<&str, u32> = HashMap::new();
    let ids: Vec<Vec<u32>> = docs
        .iter()
        .map(|d| {
            d.iter()
                .map(|t| {
                    let next = vocabulary.len() as u32;
                    *vocabulary.entry(t.as_str()).or_insert(next)
                })
                .collect()
        })
        .collect();
    let mut q: Vec<(u32, f32)> = Vec::new();
    for t in query {
        if let Some(id) = vocabulary.get(t.as_str()) {
            if !q.iter().any(|(x, _)| x == id) {
                q.push((*id, 1.0));
            }
        }
    }
    let corpus = Corpus::new(&ids, None, vocabulary.len());
    let mut hits: Vec<Hit> = corpus
        .scores(&q)
        .into_iter()
        .enumerate()
        .filter(|(_, s)| *s > 0.0)
        .map(|(doc, score)| Hit { doc, score })
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.doc.cmp(&a.doc)));
    hits
}

/// A corpus indexed once for several BM25 queries over interned term ids: the first round
/// and the round its best hits seed ([`expansion`]). Postings per term, so a query touches
/// only the documents that hold its terms.
///
/// A document may end in terms that are not its text (a chat line's sender and month): with
/// `text_lens`, those match without BM25's length normalisation (BM25F with a field of its
/// own), so a match on the sender alone does not favour the lines that say least.
pub(crate) struct Corpus {
    /// Per term id: its postings, documents ascending.
    postings: Vec<Vec<Posting>>,
    /// Text terms per document (the length BM25 normalises by).
    lens: Vec<u32>,
    avgdl: f32,
}

/// One document's occurrences of a term: in its text and in its other terms.
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    text: u32,
    meta: u32,
}

impl Corpus {
    /// Indexes `docs`, each a list of term ids below `vocabulary`; with `text_lens`, the
    /// first `text_lens[d]` terms of document `d` are its text and the rest its other terms.
    pub(crate) fn new(docs: &[Vec<u32>], text_lens: Option<&[usize]>, vocabulary: usize) -> Self {
        let mut postings: Vec<Vec<Posting>> = vec![Vec::new(); vocabulary];
        let mut lens: Vec<u32> = Vec::with_capacity(docs.len());
        for (d, terms) in docs.iter().enumerate() {
            let text_len = text_lens
                .and_then(|l| l.get(d).copied())
                .unwrap_or(terms.len())
                .min(terms.len());
            lens.push(text_len as u32);
            for (k, t) in terms.iter().enumerate() {
                let Some(list) = postings.get_mut(*t as usize) else {
                    continue;
                };
                if list.last().is_none_or(|p| p.doc != d as u32) {
                    list.push(Posting {
                        doc: d as u32,
                        text: 0,
                        meta: 0,
                    });
                }
                if let Some(p) = list.last_mut() {
                    if k < text_len {
                        p.text += 1;
                    } else {
                        p.meta += 1;
                    }
                }
            }
        }
        let avgdl = if lens.is_empty() {
            1.0
        } else {
            (lens.iter().map(|l| *l as f32).sum::<f32>() / lens.len() as f32).max(1.0)
        };
        Self {
            postings,
            lens,
            avgdl,
        }
    }

    /// Documents indexed.
    pub(crate) fn len(&self) -> usize {
        self.lens.len()
    }

    /// Documents holding term `t`.
    pub(crate) fn df(&self, t: u32) -> usize {
        self.postings.get(t as usize).map_or(0, Vec::len)
    }

    /// BM25's inverse document frequency of `t` (0 for a term no document holds).
    pub(crate) fn idf(&self, t: u32) -> f32 {
        let n_t = self.df(t) as f32;
        if n_t == 0.0 {
            return 0.0;
        }
        let n = self.lens.len() as f32;
        ((n - n_t + 0.5) / (n_t + 0.5) + 1.0).ln()
    }

    /// Every document's BM25 score for `query` (term id, weight; a term listed twice counts
    /// twice), by document index.
    pub(crate) fn scores(&self, query: &[(u32, f32)]) -> Vec<f32> {
        let mut out = vec![0.0f32; self.lens.len()];
        for (t, w) in query {
            let idf = self.idf(*t) * w;
            if idf <= 0.0 {
                continue;
            }
            for p in self.postings.get(*t as usize).into_iter().flatten() {
                let d = p.doc as usize;
                if p.text > 0 {
                    let len = self.lens[d] as f32;
                    let norm = K1 * (1.0 - B + B * len / self.avgdl);
                    let tf = p.text as f32;
                    out[d] += idf * tf * (K1 + 1.0) / (tf + norm);
                }
                if p.meta > 0 {
                    // As in a document of average length.
                    let tf = p.meta as f32;
                    out[d] += idf * tf * (K1 + 1.0) / (tf + K1);
                }
            }
        }
        out
    }
}

/// Expansion terms for a second retrieval round (relevance feedback): the terms the best
/// `seeds` (document, score) hold that the query does not — people, places, things the first
/// hits name — weighted by how much of each seed they make up, their rarity and the seed's
/// score; the `max_terms` strongest, each weight scaled so the strongest is `weight`. A term
/// of one document only brings nothing new and one of more than a tenth of them is chatter:
/// both are left out.
pub(crate) fn expansion(
    corpus: &Corpus,
    docs: &[Vec<u32>],
    seeds: &[(usize, f32)],
    query: &[(u32, f32)],
    max_terms: usize,
    weight: f32,
) -> Vec<(u32, f32)> {
    let Some(best) = seeds.iter().map(|s| s.1).reduce(f32::max) else {
        return Vec::new();
    };
    if best <= 0.0 || max_terms == 0 {
        return Vec::new();
    }
    let common = (corpus.len() / 10).max(2);
    let mut w: HashMap<u32, f32> = HashMap::new();
    for (d, score) in seeds {
        let Some(terms) = docs.get(*d) else { continue };
        if terms.is_empty() {
            continue;
        }
        let share = 1.0 / terms.len() as f32 * score / best;
        for t in terms {
            if query.iter().any(|(q, _)| q == t) {
                continue;
            }
            let df = corpus.df(*t);
            if df < 2 || df > common {
                continue;
            }
            *w.entry(*t).or_default() += share * corpus.idf(*t);
        }
    }
    let mut terms: Vec<(u32, f32)> = w.into_iter().collect();
    terms.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    terms.truncate(max_terms);
    let top = terms.first().map_or(1.0, |t| t.1).max(f32::MIN_POSITIVE);
    for t in &mut terms {
        t.1 = t.1 / top * weight;
    }
    terms
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

    #[test]
    fn a_match_on_the_sender_alone_does_not_favour_short_lines() {
        // Term 0 is the sender's name (the last term of each line), term 1 a word of the
        // text. As a field of its own the name scores the same on a short line and a long
        // one; counted as text, the short line wins.
        let docs = vec![vec![1, 0], vec![2, 3, 4, 5, 6, 7, 0], vec![8, 9]];
        let fields = Corpus::new(&docs, Some(&[1, 6, 2]), 10);
        let s = fields.scores(&[(0, 1.0)]);
        assert!(
            s[0] > 0.0 && (s[0] - s[1]).abs() < 1e-6 && s[2] == 0.0,
            "{s:?}"
        );
        let text = Corpus::new(&docs, None, 10);
        let s = text.scores(&[(0, 1.0)]);
        assert!(s[0] > s[1], "{s:?}");
        // The text still matches as text, normalised by the text's length.
        let s = fields.scores(&[(1, 1.0)]);
        assert!(s[0] > 0.0 && s[1] == 0.0, "{s:?}");
    }

    #[test]
    fn expansion_adds_what_the_best_hits_name() {
        // 0: the query's term; 1: named by the hit and one other line; 2: the hit's alone;
        // 3: in every line (chatter).
        let docs = vec![vec![0, 1, 2, 3], vec![1, 3], vec![3], vec![3]];
        let corpus = Corpus::new(&docs, None, 4);
        let query = [(0, 1.0)];
        let hits = corpus.scores(&query);
        assert!(hits[0] > 0.0 && hits[1] == 0.0);
        let added = expansion(&corpus, &docs, &[(0, hits[0])], &query, 8, 0.4);
        assert_eq!(added, vec![(1, 0.4)]);
        let wider: Vec<(u32, f32)> = query.iter().copied().chain(added).collect();
        assert!(
            corpus.scores(&wider)[1] > 0.0,
            "the second round reaches line 1"
        );
        assert!(expansion(&corpus, &docs, &[], &query, 8, 0.4).is_empty());
    }
}
