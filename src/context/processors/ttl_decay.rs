//! `ttl_decay`: the chat kind's TTL rules. A conversation block whose age falls in a rule's
//! band (older than the previous rule's age, at most this rule's) is kept per the rule: `all`,
//! the newest `n` of the band, `none`, or `summary` — left out and its span marked for the
//! compactor (see `Assembly::summary_span`). Blocks older than every rule are kept.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::context::{
    Blocks, ContextError, ContextProcessor, Keep, Placement, SessionView, StageContext, StageError,
};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// The `ttl_decay` processor.
#[derive(Debug, Default)]
pub(crate) struct TtlDecay;

impl TtlDecay {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

fn human(ms: u64) -> String {
    if ms == u64::MAX {
        "inf".into()
    } else {
        humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
    }
}

impl ContextProcessor for TtlDecay {
    fn name(&self) -> &str {
        "ttl_decay"
    }

    fn process(&self, blocks: &mut Blocks, session: &SessionView<'_>) -> Result<(), ContextError> {
        let rules = &session.policy.ttl;
        if rules.is_empty() {
            return Ok(());
        }
        let band_of = |ts: u64| {
            let age = session.now_ms.saturating_sub(ts);
            rules.iter().position(|r| age <= r.age_ms)
        };
        // Members of every `keep: n` band, to find each band's newest n.
        let mut counted: HashMap<usize, Vec<(u64, u8, u32)>> = HashMap::new();
        for b in blocks.blocks() {
            if b.placement() != Placement::Conversation {
                continue;
            }
            if let Some(band) = b.metadata.timestamp_ms.and_then(band_of) {
                if let Keep::Count(_) = rules[band].keep {
                    counted
                        .entry(band)
                        .or_default()
                        .push(b.conversation_order());
                }
            }
        }
        let mut kept: HashSet<(u64, u8, u32)> = HashSet::new();
        for (band, mut members) in counted {
            if let Keep::Count(n) = rules[band].keep {
                members.sort_unstable_by(|a, b| b.cmp(a));
                kept.extend(members.into_iter().take(n as usize));
            }
        }
        let mut summarised: Vec<(u64, u32)> = Vec::new();
        let span = |band: usize| {
            let lower = if band == 0 { 0 } else { rules[band - 1].age_ms };
            format!("aged {}–{}", human(lower), human(rules[band].age_ms))
        };
        blocks.drop_where(|b| {
            if b.placement() != Placement::Conversation {
                return None;
            }
            let band = b.metadata.timestamp_ms.and_then(band_of)?;
            match rules[band].keep {
                Keep::All => None,
                Keep::Count(n) => (!kept.contains(&b.conversation_order()))
                    .then(|| format!("ttl: {} keeps only its newest {n}", span(band))),
                Keep::None => Some(format!("ttl: {} keeps none", span(band))),
                Keep::Summary => {
                    if let Some(seq) = b.metadata.seq {
                        summarised.push((seq, b.token_count));
                    }
                    Some(format!(
                        "ttl: {} is left to the compactor's summary",
                        span(band)
                    ))
                }
            }
        });
        for (seq, tokens) in summarised {
            blocks.mark_for_summary(seq, tokens);
        }
        Ok(())
    }
}
