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

#[derive(Hash, PartialEq, Eq)]
enum Key<'a> {
    Message(Placement, &'a str),
    Text(Placement, &'a str),
}

impl ContextProcessor for Dedupe {
    fn name(&self) -> &str {
        "dedupe"
    }

    fn process(&self, blocks: &mut Blocks, _session: &SessionView<'_>) -> Result<(), ContextError> {
        // Blocks are in precedence order, so the first of a kind is the one kept.
        // A per-assembly map: foldhash, not SipHash (it hashed every system block's text).
        let mut first_of: foldhash::HashMap<Key<'_>, usize> =
            foldhash::HashMapExt::with_capacity(blocks.blocks().len());
        let mut duplicates: foldhash::HashSet<usize> = foldhash::HashSetExt::new();
        for (i, b) in blocks.blocks().iter().enumerate() {
            let placement = b.placement();
            let key = match (&b.metadata.message_id, placement) {
                (Some(id), _) => Key::Message(placement, id.as_str()),
                (None, Placement::Prefix | Placement::System | Placement::SystemEnd) => {
                    Key::Text(placement, &b.content)
                }
                (None, _) => continue,
            };
            if first_of.insert(key, i).is_some() && !b.immutable {
                duplicates.insert(i);
            }
        }
        if duplicates.is_empty() {
            return Ok(());
        }
        let mut i = 0usize;
        blocks.drop_where(|_| {
            let dup = duplicates.contains(&i);
            i += 1;
            dup.then(|| "repeats a block of higher precedence".to_string())
        });
        Ok(())
    }
}
