//! A chat message's text: owned, or shared with the record that already holds it.
//!
//! A turn's request carries its whole history window. Its texts live in stored transcript
//! entries that the context already shares (see `context::block_text`), so copying each one
//! into its message cost an allocation and a copy per history entry per turn (about 3% of a
//! turn over HTTP). A shared text is a reference count instead: an entry keeps its text as an
//! `Arc<str>`, and the message holds another count of it.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The text of a chat message. Reads, compares, prints and serialises as a `str`; a writer
/// that needs to change it takes [`MessageText::make_mut`] (a shared text is copied first).
#[derive(Clone, Default)]
pub struct MessageText {
    /// The text, when this message owns it (empty while `shared` lends it).
    owned: String,
    /// The shared text, if any.
    shared: Option<Arc<str>>,
}

impl MessageText {
    /// `text`, shared, not copied.
    pub fn shared(text: Arc<str>) -> Self {
        Self {
            owned: String::new(),
            shared: Some(text),
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.shared {
            Some(text) => text,
            None => &self.owned,
        }
    }

    /// The text as a `String` this message owns, to change in place.
    pub fn make_mut(&mut self) -> &mut String {
        if let Some(text) = self.shared.take() {
            self.owned = text.as_ref().to_owned();
        }
        &mut self.owned
    }

    /// Appends `s` (a shared text is copied first).
    pub fn push_str(&mut self, s: &str) {
        self.make_mut().push_str(s);
    }

    /// The text as an owned `String` (a copy only when shared).
    pub fn into_string(self) -> String {
        match self.shared {
            Some(text) => text.as_ref().to_owned(),
            None => self.owned,
        }
    }
}

impl Deref for MessageText {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for MessageText {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for MessageText {
    fn from(owned: String) -> Self {
        Self {
            owned,
            shared: None,
        }
    }
}

impl From<&str> for MessageText {
    fn from(s: &str) -> Self {
        Self::from(s.to_owned())
    }
}

impl From<&String> for MessageText {
    fn from(s: &String) -> Self {
        Self::from(s.clone())
    }
}

impl From<MessageText> for String {
    fn from(t: MessageText) -> Self {
        t.into_string()
    }
}

impl fmt::Debug for MessageText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for MessageText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for MessageText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for MessageText {}

impl PartialEq<str> for MessageText {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for MessageText {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for MessageText {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Serialize for MessageText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for MessageText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_text_reads_as_its_holders_without_a_copy() {
        let holder: Arc<str> = Arc::from("hello");
        let text = MessageText::shared(holder.clone());
        assert_eq!(text, "hello");
        assert!(std::ptr::eq(text.as_str(), &*holder));
        assert_eq!(text, MessageText::from("hello"));
        assert_eq!(format!("{text} {text:?}"), "hello \"hello\"");
    }

    #[test]
    fn changing_a_shared_text_copies_it_and_leaves_the_holder_alone() {
        let holder: Arc<str> = Arc::from("hello");
        let mut text = MessageText::shared(holder.clone());
        text.push_str(", world");
        assert_eq!(text, "hello, world");
        assert_eq!(&*holder, "hello");
        assert_eq!(text.into_string(), "hello, world");
    }

    #[test]
    fn it_serialises_as_a_plain_string() {
        let text = MessageText::shared(Arc::from("a \"quote\""));
        let json = serde_json::to_string(&text).unwrap();
        assert_eq!(json, r#""a \"quote\"""#);
        let back: MessageText = serde_json::from_str(&json).unwrap();
        assert_eq!(back, text);
    }
}
