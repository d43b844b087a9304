//! [`BlockText`] and [`MessageId`]: a block's text and platform message id, either its own or
//! a stored transcript entry's, shared with the store's transcript tail cache. History blocks
//! are most of a context and are rebuilt for every turn; copying each entry's text and id into
//! its block was a measurable share of a turn's CPU over HTTP, and grew with the history.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::model::MessageText;
use crate::store::SharedEntry;

/// The text of a context block. Reads as a `str`; a processor that rewrites it assigns an
/// owned `String` (`block.content = text.into()`).
#[derive(Clone)]
pub enum BlockText {
    /// Text the block owns.
    Owned(String),
    /// The text of a stored entry, not copied.
    Entry(Arc<SharedEntry>),
}

impl BlockText {
    /// The text.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Owned(s) => s,
            Self::Entry(e) => &e.text,
        }
    }

    /// The text as an owned `String` (a copy only when shared).
    pub fn into_string(self) -> String {
        match self {
            Self::Owned(s) => s,
            Self::Entry(e) => e.text.to_string(),
        }
    }

    /// The text for a chat message: a stored entry's shared with it, not copied.
    pub fn to_message_text(&self) -> MessageText {
        match self {
            Self::Owned(s) => s.as_str().into(),
            Self::Entry(e) => MessageText::shared(Arc::clone(&e.text)),
        }
    }
}

impl Default for BlockText {
    fn default() -> Self {
        Self::Owned(String::new())
    }
}

impl From<&String> for BlockText {
    fn from(s: &String) -> Self {
        Self::Owned(s.clone())
    }
}

impl From<std::borrow::Cow<'_, str>> for BlockText {
    fn from(s: std::borrow::Cow<'_, str>) -> Self {
        Self::Owned(s.into_owned())
    }
}

impl From<BlockText> for String {
    fn from(t: BlockText) -> Self {
        t.into_string()
    }
}

/// A block's platform message id: its own, or its stored entry's, not copied (see the module
/// doc). Reads, compares, prints and serialises as a `str`.
#[derive(Clone)]
pub enum MessageId {
    /// An id the block owns.
    Owned(String),
    /// The id of a stored entry that has one ([`MessageId::of_entry`]).
    Entry(Arc<SharedEntry>),
}

impl MessageId {
    /// The id of `entry`, shared with it; `None` when it has none.
    pub fn of_entry(entry: &Arc<SharedEntry>) -> Option<Self> {
        entry
            .message_id
            .as_ref()
            .map(|_| Self::Entry(Arc::clone(entry)))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Owned(s) => s,
            Self::Entry(e) => e.message_id.as_deref().unwrap_or_default(),
        }
    }
}

/// Makes a type with an `as_str` and an `Owned(String)` variant read, compare, print and
/// serialise as that `str`, and be made from an owned or borrowed `str`.
macro_rules! str_like {
    ($t:ty) => {
        impl From<String> for $t {
            fn from(s: String) -> Self {
                Self::Owned(s)
            }
        }

        impl From<&str> for $t {
            fn from(s: &str) -> Self {
                Self::Owned(s.to_string())
            }
        }

        impl Deref for $t {
            type Target = str;

            fn deref(&self) -> &str {
                self.as_str()
            }
        }

        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl Eq for $t {}

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                self.as_str() == other
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self.as_str(), f)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

str_like!(BlockText);
str_like!(MessageId);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TranscriptEntry;

    #[test]
    fn shared_and_owned_text_read_and_compare_alike() {
        let entry = Arc::new(SharedEntry::new(TranscriptEntry::user("hello", 1, 0)));
        let shared = BlockText::Entry(Arc::clone(&entry));
        let owned = BlockText::from("hello");
        assert_eq!(shared, owned);
        assert_eq!(shared, "hello");
        assert_eq!(shared.len(), 5);
        assert_eq!(serde_json::to_string(&shared).unwrap(), "\"hello\"");
        assert_eq!(format!("{shared:?}"), "\"hello\"");
        let copy = shared.clone();
        assert_eq!(Arc::strong_count(&entry), 3, "shared, not copied");
        assert_eq!(copy.into_string(), "hello");
    }

    #[test]
    fn an_entry_id_is_shared_and_reads_like_an_owned_one() {
        let entry = Arc::new(SharedEntry::new(
            TranscriptEntry::user("hello", 1, 0).with_message_id("m-1"),
        ));
        let shared = MessageId::of_entry(&entry).expect("the entry has an id");
        assert_eq!(Arc::strong_count(&entry), 2, "shared, not copied");
        assert_eq!(shared, MessageId::from("m-1"));
        assert_eq!(shared, "m-1");
        assert_eq!(shared.as_str(), "m-1");
        assert_eq!(serde_json::to_string(&shared).unwrap(), "\"m-1\"");
        assert_eq!(format!("{shared:?} {shared}"), "\"m-1\" m-1");
        let anonymous = Arc::new(SharedEntry::new(TranscriptEntry::user("hello", 1, 0)));
        assert!(MessageId::of_entry(&anonymous).is_none());
    }

    #[test]
    fn a_history_message_sends_its_entrys_text_without_copying_it() {
        let entry = Arc::new(SharedEntry::new(TranscriptEntry::assistant(
            "an earlier answer",
            3,
            0,
        )));
        let block = crate::context::sources::entry_block(7, &entry);
        let messages = crate::context::render::messages(std::slice::from_ref(&block));
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].content, "an earlier answer");
        assert!(
            std::ptr::eq(messages[0].content.as_str(), &*entry.text),
            "the message reads the entry's own text"
        );
        let owned = BlockText::from("mine").to_message_text();
        assert_eq!(owned, "mine");
    }
}
