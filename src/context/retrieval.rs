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
    let corpus = Corpus::new(&ids, vocabulary.len());
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
pub(crate) struct Corpus {
    /// Per term id: (document, term frequency), documents ascending.
    postings: Vec<Vec<(u32, u32)>>,
    /// Terms per document.
    lens: Vec<u32>,
    avgdl: f32,
}

impl Corpus {
    /// Indexes `docs`, each a list of term ids below `vocabulary`.
    pub(crate) fn new(docs: &[Vec<u32>], vocabulary: usize) -> Self {
        let mut postings: Vec<Vec<(u32, u32)>> = vec![Vec::new(); vocabulary];
        for (d, terms) in docs.iter().enumerate() {
            for t in terms {
                let Some(list) = postings.get_mut(*t as usize) else {
                    continue;
                };
                match list.last_mut() {
                    Some((doc, tf)) if *doc == d as u32 => *tf += 1,
                    _ => list.push((d as u32, 1)),
                }
            }
        }
        let lens: Vec<u32> = docs.iter().map(|d| d.len() as u32).collect();
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
            for (d, tf) in self.postings.get(*t as usize).into_iter().flatten() {
                let len = self.lens[*d as usize] as f32;
                let norm = K1 * (1.0 - B + B * len / self.avgdl);
                let tf = *tf as f32;
                out[*d as usize] += idf * tf * (K1 + 1.0) / (tf + norm);
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
    fn expansion_adds_what_the_best_hits_name() {
        // 0: the query's term; 1: named by the hit and one other line; 2: the hit's alone;
        // 3: in every line (chatter).
        let docs = vec![vec![0, 1, 2, 3], vec![1, 3], vec![3], vec![3]];
        let corpus = Corpus::new(&docs, 4);
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
