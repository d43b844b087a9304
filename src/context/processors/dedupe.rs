//! `dedupe`: drops a block that repeats one of higher precedence — the same platform message
//! twice in one placement, or the same text twice in the system message. Conversation blocks
//! without a message id are never compared by text: saying "ok" twice is not a duplicate.

use std::hash::{BuildHasher, Hash, Hasher};

use serde::Deserialize;

use crate::context::{
    Blocks, ContextError, ContextProcessor, MessageId, Placement, SessionView, StageContext,
    StageError,
};

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Params {}

/// The seed of message-id hashes: fixed, as a hash kept in an entry's memo must match one
/// computed later in the process.
const ID_HASH_SEED: u64 = 0x05ee_d1d5;

/// The hash of a message id; a history entry's is worked out once and kept in its memo.
fn id_hash(id: &MessageId) -> u64 {
    let hash = |s: &str| foldhash::fast::FixedState::with_seed(ID_HASH_SEED).hash_one(s);
    match id {
        MessageId::Entry(e) => e.memo().id_hash(|| hash(id.as_str())),
        MessageId::Owned(s) => hash(s),
    }
}

/// A message id in a placement, hashed by its kept hash: the set reads the id's bytes only to
/// confirm a match.
struct IdKey<'a> {
    placement: Placement,
    hash: u64,
    id: &'a str,
}

impl Hash for IdKey<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.placement.hash(state);
        state.write_u64(self.hash);
    }
}

impl PartialEq for IdKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.placement == other.placement && self.hash == other.hash && self.id == other.id
    }
}

impl Eq for IdKey<'_> {}

/// The `dedupe` processor.
#[derive(Debug, Default)]
pub(crate) struct Dedupe;

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
        // Message ids are found by their hash, which a history entry keeps in its memo: most
        // blocks are history entries, and hashing each id every turn cost a cache miss on the
        // id's bytes per entry. A match is confirmed on the text. System texts, a few per
        // assembly but kilobytes each (the system prompt), are compared with the earlier ones
        // instead of hashed: texts of different lengths differ at the first comparison.
        let mut first_message: foldhash::HashSet<IdKey<'_>> =
            foldhash::HashSetExt::with_capacity(blocks.blocks().len());
        let mut system_texts: Vec<(Placement, &str)> = Vec::new();
        let mut duplicates: Vec<usize> = Vec::new();
        for (i, b) in blocks.blocks().iter().enumerate() {
            let placement = b.placement();
            let repeated = match (&b.metadata.message_id, placement) {
                (Some(id), _) => !first_message.insert(IdKey {
                    placement,
                    hash: id_hash(id),
                    id: id.as_str(),
                }),
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
