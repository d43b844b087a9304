//! The fact-retention check: a summary must carry every identifier of what it summarises.
//!
//! Identifiers missing from the summary are appended verbatim under an `Exact identifiers`
//! heading; then the summary is capped at its token limit. Cutting removes the summary's body
//! from the end first (identifiers it held move into the list), down to a floor of
//! [`BODY_FLOOR_SHARE`] of the limit; only then are the least important identifiers dropped
//! from the list (numbers before versions before mentions … before dates, decisions, names,
//! ids and URLs: the order of [`IdentifierKind`](crate::compaction::IdentifierKind)), with a
//! note saying how many.
//!
//! What counts as an identifier is [`crate::compaction::identifiers`]'s: besides ids, URLs,
//! paths and numbers with units, the names of people and owners, dates, and short decision
//! clauses ("ZX-4411 is owned by Priya", "decided to ship on Friday"); bare one- or two-digit
//! numbers are not.

use crate::compaction::identifiers::{extract_all, Identifier};
use crate::model::TokenCounter;

/// The heading of the identifier list.
pub const IDENTIFIERS_HEADING: &str = "Exact identifiers";

/// The line put at the end of a body that was cut to fit.
pub const CUT_MARKER: &str = "[…]";

/// Share of `summary_max_tokens` the summary's body keeps (when it is that long) even when
/// identifiers must then be omitted from the list.
pub const BODY_FLOOR_SHARE: f64 = 0.25;

/// A summary after the retention check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retained {
    /// The summary, with the identifier list.
    pub text: String,
    /// Its tokens.
    pub tokens: u32,
    /// Identifiers that were missing and were appended.
    pub restored: usize,
    /// Identifiers left out because even the list alone did not fit.
    pub omitted: usize,
    /// Whether the summary's body was cut to fit.
    pub truncated: bool,
}

/// Identifiers of `ids` that `summary` does not contain.
pub fn missing<'a>(ids: &'a [Identifier], summary: &str) -> Vec<&'a Identifier> {
    ids.iter().filter(|id| !id.appears_in(summary)).collect()
}

fn is_heading(line: &str) -> bool {
    let t = line
        .trim()
        .trim_start_matches('#')
        .trim()
        .trim_matches('*')
        .trim()
        .trim_end_matches(':')
        .trim();
    t.eq_ignore_ascii_case(IDENTIFIERS_HEADING)
}

/// Splits a summary into its body and the lines of its `Exact identifiers` section (which
/// runs from the heading to the next Markdown heading or the end).
pub fn split_section(summary: &str) -> (String, Vec<String>) {
    let mut body = Vec::new();
    let mut section = Vec::new();
    let mut in_section = false;
    for line in summary.lines() {
        if is_heading(line) {
            in_section = true;
        } else if in_section && line.trim_start().starts_with('#') {
            in_section = false;
            body.push(line);
        } else if in_section {
            if !line.trim().is_empty() {
                section.push(line.trim().to_string());
            }
        } else {
            body.push(line);
        }
    }
    (body.join("\n").trim_end().to_string(), section)
}

/// Writes a summary: the body, then the identifier list under its heading.
pub fn compose(body: &str, section: &[String]) -> String {
    let body = body.trim_end();
    if section.is_empty() {
        return body.to_string();
    }
    let mut out = String::with_capacity(body.len() + 32 + section.len() * 16);
    if !body.is_empty() {
        out.push_str(body);
        out.push_str("\n\n");
    }
    out.push_str(IDENTIFIERS_HEADING);
    out.push(':');
    for line in section {
        out.push('\n');
        out.push_str(line);
    }
    out
}

fn list_line(id: &Identifier) -> String {
    format!("- {}", id.display())
}

/// Runs the retention check of `summary` against the identifiers of `sources` (the compacted
/// span, and the previous summary of a rolling summary), and caps the result at `max_tokens`.
pub fn enforce(
    sources: &[&str],
    summary: &str,
    max_tokens: u32,
    counter: &TokenCounter,
) -> Retained {
    let ids = extract_all(sources);
    enforce_ids(&ids, summary, max_tokens, counter)
}

/// The parts of a summary under construction, with what each costs.
struct Parts<'a> {
    body_lines: Vec<&'a str>,
    /// Tokens of each body line (with its line break).
    line_tokens: Vec<u32>,
    /// Lines of the summary's own identifier list.
    existing: Vec<String>,
    existing_tokens: u32,
    /// Identifiers not in the summary's own list.
    wanted: Vec<&'a Identifier>,
    /// Tokens of each wanted identifier's list line.
    id_tokens: Vec<u32>,
    /// For each wanted identifier, the first body line holding it.
    first_line: Vec<Option<usize>>,
}

impl Parts<'_> {
    /// Wanted identifiers missing when only the first `kept` body lines stay, most important
    /// kinds first.
    fn missing(&self, kept: usize) -> Vec<usize> {
        let mut missing: Vec<usize> = (0..self.wanted.len())
            .filter(|&i| self.first_line[i].is_none_or(|line| line >= kept))
            .collect();
        missing.sort_by_key(|&i| (self.wanted[i].kind, i));
        missing
    }

    fn body(&self, kept: usize) -> String {
        let mut text = self.body_lines[..kept].join("\n");
        if kept < self.body_lines.len() && kept > 0 {
            text.push('\n');
            text.push_str(CUT_MARKER);
        }
        text
    }

    fn body_tokens(&self, kept: usize) -> u32 {
        self.line_tokens[..kept].iter().sum()
    }

    fn estimate(&self, kept: usize, heading_tokens: u32) -> u32 {
        let list: u32 = self.missing(kept).iter().map(|&i| self.id_tokens[i]).sum();
        self.body_tokens(kept) + list + self.existing_tokens + heading_tokens
    }
}

/// [`enforce`] with the identifiers already extracted.
///
/// Cutting order: body lines from the end, down to [`BODY_FLOOR_SHARE`] of `max_tokens` (a
/// summary that is only a list of identifiers is useless); then the least important missing
/// identifiers, replaced by a note that counts them.
pub fn enforce_ids(
    ids: &[Identifier],
    summary: &str,
    max_tokens: u32,
    counter: &TokenCounter,
) -> Retained {
    let (body, existing) = split_section(summary);
    let existing_text = existing.join("\n");
    let body_lines: Vec<&str> = body.lines().collect();
    // Identifiers the summary's own list already carries stay there; the others must be in
    // the body or get appended.
    let wanted: Vec<&Identifier> = ids
        .iter()
        .filter(|id| !id.appears_in(&existing_text))
        .collect();
    let parts = Parts {
        line_tokens: body_lines
            .iter()
            .map(|l| counter.count(l).saturating_add(1))
            .collect(),
        existing_tokens: counter.count(&existing_text),
        id_tokens: wanted
            .iter()
            .map(|id| counter.count(&list_line(id)).saturating_add(1))
            .collect(),
        first_line: wanted
            .iter()
            .map(|id| body_lines.iter().position(|l| id.appears_in(l)))
            .collect(),
        body_lines,
        existing,
        wanted,
    };
    let heading_tokens = counter.count(IDENTIFIERS_HEADING).saturating_add(4);
    let n = parts.body_lines.len();
    let floor = ((f64::from(max_tokens) * BODY_FLOOR_SHARE) as u32).min(parts.body_tokens(n));
    let min_kept = (0..=n)
        .find(|&k| parts.body_tokens(k) >= floor)
        .unwrap_or(n);

    // Keep as much body as fits with the whole list: estimate with per-line counts, confirm
    // with an exact count.
    for kept in (min_kept..=n).rev() {
        if kept < n && parts.estimate(kept, heading_tokens) > max_tokens {
            continue;
        }
        let missing = parts.missing(kept);
        let mut section = parts.existing.clone();
        section.extend(missing.iter().map(|&i| list_line(parts.wanted[i])));
        let text = compose(&parts.body(kept), &section);
        let tokens = counter.count(&text);
        if tokens <= max_tokens {
            return Retained {
                text,
                tokens,
                restored: missing.len(),
                omitted: 0,
                truncated: kept < n,
            };
        }
    }
    cap_list(&parts, min_kept, max_tokens, counter)
}

/// The body is at its floor and the list still does not fit: keep as many of the most
/// important identifiers as fit, and count the rest.
fn cap_list(parts: &Parts<'_>, kept: usize, max_tokens: u32, counter: &TokenCounter) -> Retained {
    let body = parts.body(kept);
    let missing = parts.missing(kept);
    let mut candidates: Vec<String> = parts.existing.clone();
    let mut costs: Vec<u32> = parts
        .existing
        .iter()
        .map(|l| counter.count(l).saturating_add(1))
        .collect();
    candidates.extend(missing.iter().map(|&i| list_line(parts.wanted[i])));
    costs.extend(missing.iter().map(|&i| parts.id_tokens[i]));
    let total = candidates.len();
    let note = |omitted: usize| {
        format!("- … {omitted} more identifiers omitted (summary_max_tokens reached)")
    };
    let fixed = counter
        .count(&body)
        .saturating_add(counter.count(&note(total)))
        .saturating_add(counter.count(IDENTIFIERS_HEADING))
        .saturating_add(8);
    let mut budget = max_tokens.saturating_sub(fixed);
    let mut keep = 0;
    for cost in &costs {
        if *cost > budget {
            break;
        }
        budget -= cost;
        keep += 1;
    }
    let mut body = body;
    loop {
        let mut lines = candidates[..keep].to_vec();
        let omitted = total - keep;
        if omitted > 0 {
            lines.push(note(omitted));
        }
        let mut text = compose(&body, &lines);
        let mut tokens = counter.count(&text);
        if tokens > max_tokens && keep == 0 && body.is_empty() {
            // Not even the note fits: nothing does.
            text.clear();
            tokens = 0;
        }
        if tokens <= max_tokens {
            return Retained {
                text,
                tokens,
                restored: keep.saturating_sub(parts.existing.len()),
                omitted,
                truncated: true,
            };
        }
        if keep > 0 {
            keep -= 1;
        } else {
            // Estimates were off and no identifier is left to drop: give up the body.
            body.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Encoding;

    fn counter() -> TokenCounter {
        TokenCounter::new(Encoding::Cl100k)
    }

    const SPAN: &str = "Alice: the deploy of v2.3.1 failed on host web-07, see \
        https://ci.example.com/jobs/8812 and /var/log/app/error.log.\n\
        Bob: ticket OPS-4411 tracks it; @carol owns `restart_workers()`.\n\
        Alice: we decided to retry at 14:30 with 3 replicas.";

    #[test]
    fn restores_what_a_summary_dropped() {
        let summary = "## Decisions\n- Retry the deploy later with fewer replicas.";
        let out = enforce(&[SPAN], summary, 1_024, &counter());
        for id in extract_all(&[SPAN]) {
            assert!(
                id.appears_in(&out.text),
                "{} missing in {}",
                id.text,
                out.text
            );
        }
        assert!(out.text.starts_with(summary));
        assert!(out
            .text
            .contains("\n\nExact identifiers:\n- https://ci.example.com/jobs/8812"));
        assert!(out.text.contains("- `restart_workers()`"));
        assert_eq!(out.restored, extract_all(&[SPAN]).len());
        assert_eq!((out.omitted, out.truncated), (0, false));
        assert_eq!(out.tokens, counter().count(&out.text));
    }

    #[test]
    fn a_complete_summary_is_left_alone() {
        let out = enforce(&[SPAN], SPAN, 1_024, &counter());
        assert_eq!(out.text, SPAN);
        assert_eq!(out.restored, 0);
    }

    #[test]
    fn merges_into_the_models_own_list() {
        let summary = "Deploy failed.\n\n## Exact identifiers\n- OPS-4411\n- v2.3.1\n\n## Pending user asks\n- none";
        let out = enforce(&[SPAN], summary, 1_024, &counter());
        assert_eq!(
            out.text.matches("Exact identifiers").count(),
            1,
            "{}",
            out.text
        );
        assert!(out.text.contains("## Pending user asks"));
        assert_eq!(out.text.matches("OPS-4411").count(), 1);
        assert_eq!(out.restored, extract_all(&[SPAN]).len() - 2);
    }

    #[test]
    fn caps_the_body_before_the_identifiers() {
        let filler: String = (0..200)
            .map(|i| format!("Line {i} says nothing of importance at all.\n"))
            .collect();
        let summary = format!("Host web-07 is down.\n{filler}");
        let out = enforce(&[SPAN], &summary, 200, &counter());
        assert!(out.tokens <= 200, "{} tokens", out.tokens);
        assert!(out.truncated);
        assert_eq!(out.omitted, 0);
        assert!(out.text.starts_with("Host web-07 is down."));
        assert!(out.text.contains(CUT_MARKER));
        for id in extract_all(&[SPAN]) {
            assert!(id.appears_in(&out.text), "{} lost", id.text);
        }
    }

    #[test]
    fn a_list_too_long_keeps_the_most_important() {
        let span: String = (0..400)
            .map(|i| format!("ticket T-{i} costs {}. ", 1000 + i))
            .collect();
        let out = enforce(&[&span], "nothing", 150, &counter());
        assert!(out.tokens <= 150, "{} tokens", out.tokens);
        assert!(out.omitted > 0);
        assert!(out.text.contains("more identifiers omitted"));
        assert!(out.text.starts_with("nothing\n\nExact identifiers:"));
        // Ids rank above plain numbers.
        assert!(out.text.contains("T-0"));
        assert!(!out.text.contains("1000"));
    }

    #[test]
    fn people_dates_and_decisions_are_kept_but_small_numbers_are_not() {
        let span = "Priya: ticket ZX-4411 is owned by Priya, due 2026-12-03.\n\
            Bob: I have 2 cats and 4 dogs, 6 total lol\n\
            Chen: we agreed to ship on Dec 3 with 5 GB of cache";
        let out = enforce(&[span], "Something was shipped.", 1_024, &counter());
        let (_, list) = split_section(&out.text);
        for wanted in [
            "- Priya",
            "- Bob",
            "- Chen",
            "- ZX-4411",
            "- ZX-4411 is owned by Priya",
            "- due 2026-12-03",
            "- 2026-12-03",
            "- Dec 3",
            "- agreed to ship on Dec 3 with 5 GB of cache",
            "- 5 GB",
        ] {
            assert!(list.iter().any(|l| l == wanted), "{wanted} not in {list:?}");
        }
        for unwanted in ["- 2", "- 4", "- 6", "- 5"] {
            assert!(
                !list.iter().any(|l| l == unwanted),
                "{unwanted} in {list:?}"
            );
        }
        // The owner's name, from "is owned by" alone, and from a speaker line alone.
        for source in [
            "ticket ZX-4411 is owned by Priya",
            "Priya: see you at the standup",
        ] {
            let out = enforce(&[source], "Nothing.", 1_024, &counter());
            assert!(out.text.contains("\n- Priya"), "{}", out.text);
        }
    }

    #[test]
    fn split_section_finds_heading_variants() {
        for heading in [
            "Exact identifiers:",
            "## Exact Identifiers",
            "**Exact identifiers**",
        ] {
            let (body, list) = split_section(&format!("Body.\n{heading}\n- a\n- b\n"));
            assert_eq!(body, "Body.");
            assert_eq!(list, vec!["- a", "- b"]);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn never_over_budget_and_complete_when_nothing_omitted(
            span in "[a-zA-Z0-9 .,:/#@`_-]{0,400}",
            summary in "[a-zA-Z0-9 .\n#-]{0,200}",
            max in 1u32..400,
        ) {
            let c = counter();
            let out = enforce(&[&span], &summary, max, &c);
            proptest::prop_assert!(out.tokens <= max, "{} > {max}", out.tokens);
            proptest::prop_assert_eq!(out.tokens, c.count(&out.text));
            if out.omitted == 0 && !out.text.is_empty() {
                for id in extract_all(&[&span]) {
                    proptest::prop_assert!(id.appears_in(&out.text), "{} lost", id.text);
                }
            }
        }
    }
}
