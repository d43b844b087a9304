//! `dedupe`: drops a block that repeats one of higher precedence — the same platform message
//! twice in one placement, or the same text twice in the system message. Conversation blocks
//! without a message id are never compared by text: saying "ok" twice is not a duplicate.

use serde::Deserialize;

use crate::context::{
    Blocks, ContextError, ContextProcessor, Placement, SessionView, StageContext, StageError,
};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// The `dedupe` processor.
#[derive(Debug, Default)]
pub struct Dedupe;

impl Dedupe {
    pub(super) fn build(c: &StageContext<'_>) -> Result<Self, StageError> {
        let _: Params = c.params()?;
        Ok(Self)
    }
}

impl ContextProcessor for Dedupe {
    fn name(&self) -> &str {
        "dedupe"
    }

    fn process(&self, blocks: &mut Blocks, _session: &SessionView<'_>) -> Result<(), ContextError> {
        // Blocks are in precedence order, so the first of a kind is the one kept.
        // Message ids go in a per-assembly map (foldhash, not SipHash). System texts, a few
        // per assembly but kilobytes each (the system prompt), are compared with the earlier
        // ones instead of hashed: texts of different lengths differ at the first comparison.
        let mut first_message: foldhash::HashSet<(Placement, &str)> =
            foldhash::HashSetExt::with_capacity(blocks.blocks().len());
        let mut system_texts: Vec<(Placement, &str)> = Vec::new();
        let mut duplicates: Vec<usize> = Vec::new();
        for (i, b) in blocks.blocks().iter().enumerate() {
            let placement = b.placement();
            let repeated = match (&b.metadata.message_id, placement) {
                (Some(id), _) => !first_message.insert((placement, id.as_str())),
                (None, Placement::Prefix | Placement::System | Placement::SystemEnd) => {
                    let key = (placement, b.content.as_str());
                    let seen = system_texts.contains(&key);
                    if !seen {
                        system_texts.push(key);
                    }
                    seen
                }
                (None, _) => continue,
            };
            if repeated && !b.immutable {
                duplicates.push(i);
            }
        }
        if duplicates.is_empty() {
            return Ok(());
        }
        let mut i = 0usize;
        blocks.drop_where(|_| {
            let dup = duplicates.binary_search(&i).is_ok();
            i += 1;
            dup.then(|| "repeats a block of higher precedence".to_string())
        });
        Ok(())
    }
}
