//! `bootstrap`: the workspace's bootstrap files, in order, each as a `## NAME` section of the
//! system prompt. A file is re-read when its mtime or length changes, so an edit shows on the
//! next turn without a restart.

use std::path::PathBuf;

use serde::Deserialize;

use super::workspace::{fingerprint, stamp, FileCache};
use crate::context::text::truncate_middle;
use crate::context::{
    BlockKind, BlockMeta, ContextBlock, ContextError, ContextSource, SessionView, StageContext,
    StageError, TokenBudget,
};
use crate::model::MESSAGE_OVERHEAD_TOKENS;

/// The bootstrap files, in the order they are injected.
pub const BOOTSTRAP_FILES: [&str; 6] = [
    "AGENTS.md",
    "SOUL.md",
    "TOOLS.md",
    "IDENTITY.md",
    "USER.md",
    "MEMORY.md",
];

/// Most bytes read of one bootstrap file; the rest is ignored.
const MAX_READ_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {
    /// The files, relative to the workspace dir, in order. Default the six bootstrap files.
    files: Vec<String>,
    /// Longer files keep their first 70% and last 20% of this many characters. Default 20,000.
    max_chars_per_file: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            files: BOOTSTRAP_FILES.iter().map(|s| s.to_string()).collect(),
            max_chars_per_file: 20_000,
        }
    }
}

pub(super) struct BootstrapSource {
    /// `(name, path)` of each file; empty without a workspace.
    files: Vec<(String, PathBuf)>,
    max_chars: usize,
    cache: FileCache,
}

impl BootstrapSource {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let p: Params = c.params()?;
        let files = match &c.config.agent.workspace_dir {
            Some(dir) => p
                .files
                .iter()
                .map(|f| {
                    let rel = std::path::Path::new(f);
                    if rel.is_absolute() || rel.components().any(|c| c.as_os_str() == "..") {
                        return Err(format!(
                            "bootstrap: {f:?} must be a path inside the workspace"
                        ));
                    }
                    Ok((f.clone(), dir.join(rel)))
                })
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        Ok(Self {
            files,
            max_chars: p.max_chars_per_file,
            cache: FileCache::default(),
        })
    }
}

impl ContextSource for BootstrapSource {
    fn name(&self) -> &str {
        "bootstrap"
    }

    fn default_priority(&self) -> u8 {
        90
    }

    fn fingerprint(&self, _session: &SessionView<'_>) -> u64 {
        fingerprint(self.files.iter().map(|(_, p)| (p.as_path(), stamp(p))))
    }

    fn collect(
        &self,
        session: &SessionView<'_>,
        _budget: &TokenBudget,
    ) -> Result<Vec<ContextBlock>, ContextError> {
        let head = self.max_chars * 7 / 10;
        let tail = self.max_chars / 5;
        let mut out = Vec::new();
        for (name, path) in &self.files {
            let Some(cached) = self
                .cache
                .get(path, MAX_READ_BYTES, session.tokens, |text| {
                    let body = text.trim();
                    if body.is_empty() {
                        return String::new();
                    }
                    format!("## {name}\n\n{}", truncate_middle(body, head, tail))
                })
            else {
                continue;
            };
            if cached.text.is_empty() {
                continue;
            }
            let meta = BlockMeta {
                path: Some(name.clone()),
                ..BlockMeta::default()
            };
            out.push(
                ContextBlock::new(
                    BlockKind::Bootstrap,
                    cached.text.to_string(),
                    cached.tokens + MESSAGE_OVERHEAD_TOKENS,
                )
                .with_meta(meta),
            );
        }
        Ok(out)
    }
}
