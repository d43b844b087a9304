//! The pipeline: sources collect in order (each within the budget left), blocks are put in
//! precedence order, processors run in order, then tool pairing is repaired and the budget
//! enforced, and the kept blocks are rendered.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use super::block::{ContextBlock, DroppedBlock};
use super::budget::TokenBudget;
use super::config::{BUILTIN_PROCESSORS, BUILTIN_SOURCES};
use super::dump::{Assembly, StageNames};
use super::error::ContextError;
use super::processor::{Blocks, ContextProcessor};
use super::processors::{ToolPairing, TrimToBudget};
use super::registry::Registry;
use super::render::layout;
use super::session::SessionView;
use super::source::ContextSource;
use crate::config::Config;
use crate::error::ConfigError;

struct SourceStage {
    name: Cow<'static, str>,
    priority: u8,
    weight: Option<i32>,
    source: Box<dyn ContextSource>,
}

struct ProcessorStage {
    name: Cow<'static, str>,
    processor: Box<dyn ContextProcessor>,
}

/// A configured pipeline. Built once per runtime; shared by every turn.
pub(crate) struct Pipeline {
    sources: Vec<SourceStage>,
    processors: Vec<ProcessorStage>,
    names: Arc<StageNames>,
}

/// A stage's name as its blocks carry it: a built-in stage's is static, so that stamping it on
/// each of a turn's blocks copies no string.
fn stage_name(name: &str) -> Cow<'static, str> {
    BUILTIN_SOURCES
        .iter()
        .chain(BUILTIN_PROCESSORS.iter())
        .find(|b| **b == name)
        .map_or_else(|| Cow::Owned(name.to_string()), |b| Cow::Borrowed(*b))
}

/// The pipeline's own tail, run after the configured processors on every assembly.
const TAIL: [&str; 2] = ["tool_pairing", "trim_to_budget"];

impl Pipeline {
    /// Builds the stages `config.context` names from `registry`.
    pub(crate) fn from_config(config: &Config, registry: &Registry) -> Result<Self, ConfigError> {
        let mut seen = HashSet::new();
        let mut sources = Vec::new();
        for spec in &config.context.sources {
            if !seen.insert(spec.name.clone()) {
                return Err(ConfigError::Invalid(format!(
                    "context.sources: {:?} is listed twice",
                    spec.name
                )));
            }
            let source = registry.build_source(spec, config)?;
            if spec.priority.is_some_and(|p| p > 100) {
                return Err(ConfigError::Invalid(format!(
                    "context.sources: {:?}: priority must be 0–100",
                    spec.name
                )));
            }
            sources.push(SourceStage {
                name: stage_name(&spec.name),
                priority: spec
                    .priority
                    .unwrap_or_else(|| source.default_priority())
                    .min(100),
                weight: spec.weight,
                source,
            });
        }
        let mut seen = HashSet::new();
        let mut processors = Vec::new();
        for spec in &config.context.processors {
            if !seen.insert(spec.name.clone()) {
                return Err(ConfigError::Invalid(format!(
                    "context.processors: {:?} is listed twice",
                    spec.name
                )));
            }
            processors.push(ProcessorStage {
                name: stage_name(&spec.name),
                processor: registry.build_processor(spec, config)?,
            });
        }
        let names = Arc::new(StageNames {
            sources: sources.iter().map(|s| s.name.to_string()).collect(),
            processors: processors
                .iter()
                .map(|p| p.name.to_string())
                .chain(TAIL.iter().map(|t| format!("{t} (always)")))
                .collect(),
        });
        Ok(Self {
            sources,
            processors,
            names,
        })
    }

    /// Each source's fingerprint of its outside inputs (for the assembly cache).
    pub(crate) fn fingerprints(&self, session: &SessionView<'_>) -> Vec<u64> {
        self.sources
            .iter()
            .map(|s| s.source.fingerprint(session))
            .collect()
    }

    /// Assembles the context of `session` within `budget`.
    pub(crate) fn assemble(
        &self,
        session: &SessionView<'_>,
        budget: TokenBudget,
    ) -> Result<Assembly, ContextError> {
        let mut used = 0u32;
        let mut kept: Vec<ContextBlock> = Vec::new();
        let mut dropped: Vec<DroppedBlock> = Vec::new();
        let mut index = 0u32;
        for stage in &self.sources {
            let weight = stage.weight.unwrap_or_else(|| stage.source.weight(session));
            let view = TokenBudget { used, ..budget };
            let start = kept.len();
            stage
                .source
                .collect_into(session, &view, &mut kept)
                .map_err(|e| match e {
                    ContextError::Store(s) => ContextError::Store(s),
                    other => ContextError::Source {
                        stage: stage.name.to_string(),
                        message: other.to_string(),
                    },
                })?;
            // Stamped and admitted where they were written: the blocks that fit stay in
            // order, the rest are recorded as dropped and cut off the end.
            let mut end = start;
            for i in start..kept.len() {
                let block = &mut kept[i];
                block.source = stage.name.clone();
                block.priority = stage.priority;
                block.weight = weight;
                block.index = index;
                index = index.saturating_add(1);
                let left = budget.total.saturating_sub(used);
                if block.must_keep() && block.token_count > left {
                    block.shrink_to(left, &session.tokens);
                }
                if block.immutable || block.must_keep() || block.token_count <= left {
                    used = used.saturating_add(block.token_count);
                    kept.swap(end, i);
                    end += 1;
                } else {
                    let reason = format!(
                        "{} tokens do not fit the {left} left when it was collected",
                        block.token_count
                    );
                    dropped.push(DroppedBlock::new(block, stage.name.clone(), reason));
                }
            }
            kept.truncate(end);
        }

        let mut blocks = Blocks::new(kept, dropped, budget.total);
        for stage in &self.processors {
            blocks.set_stage(stage.name.clone());
            stage
                .processor
                .process(&mut blocks, session)
                .map_err(|e| match e {
                    ContextError::Store(s) => ContextError::Store(s),
                    other => ContextError::Processor {
                        stage: stage.name.to_string(),
                        message: other.to_string(),
                    },
                })?;
        }
        // The tail: whatever the configuration, pairing is repaired and the budget holds.
        blocks.set_stage(Cow::Borrowed(TAIL[0]));
        ToolPairing.process(&mut blocks, session)?;
        if blocks.used() > blocks.total() {
            blocks.set_stage(Cow::Borrowed(TAIL[1]));
            TrimToBudget.process(&mut blocks, session)?;
            blocks.set_stage(Cow::Borrowed(TAIL[0]));
            ToolPairing.process(&mut blocks, session)?;
        }

        let used = blocks.used();
        let (kept, dropped, summary_span) = blocks.into_parts();
        let mut shown: Vec<u64> = kept
            .iter()
            .filter_map(|b| b.metadata.seq)
            .chain(dropped.iter().filter_map(|d| d.seq))
            .collect();
        shown.sort_unstable();
        shown.dedup();
        let not_shown = session
            .stored
            .map_or(0, |s| s.entries)
            .saturating_sub(shown.len() as u64);
        let laid_out = layout(kept);
        if used > budget.total {
            tracing::warn!(
                session_key = session.key,
                used,
                total = budget.total,
                "immutable context blocks alone exceed the budget"
            );
        }
        Ok(Assembly {
            session_key: session.key.to_string(),
            chat_kind: session.chat_kind,
            policy: session.policy.clone(),
            blocks: laid_out.blocks,
            dropped,
            older_entries_not_loaded: not_shown,
            budget: TokenBudget { used, ..budget },
            stable_prefix_tokens: laid_out.stable_prefix_tokens,
            summary_span,
            stages: Arc::clone(&self.names),
        })
    }
}
