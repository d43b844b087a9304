//! What the two streams carry, as JSON: an accepted message in a partition's inbox, and the
//! records of a partition's changelog (a new tenure, a turn).

use serde::{Deserialize, Serialize};

use crate::inbound::{InboundEvent, InboundMessage, RouteHints};
use crate::pipeline::ReplicatedTurn;

/// An accepted message in its partition's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct InboxEnvelope {
    /// The message, validated by the node that accepted it.
    pub message: InboundMessage,
    /// The explicit session key, if the submitter named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// What routes it to an agent beyond its fields (guild, roles), if anything.
    #[serde(default, skip_serializing_if = "RouteHints::is_empty")]
    pub route: RouteHints,
}

impl InboxEnvelope {
    /// The envelope of `event`.
    pub(super) fn of(event: &InboundEvent) -> Self {
        Self {
            message: event.message.clone(),
            session_key: event.session_key.clone(),
            route: event.route.clone(),
        }
    }

    /// The event it carries.
    pub(super) fn into_event(self) -> InboundEvent {
        InboundEvent {
            message: self.message,
            session_key: self.session_key,
            id_origin: crate::inbound::IdOrigin::Given,
            route: self.route,
            rules: crate::inbound::ChatRules::default(),
        }
    }
}

/// One record of a partition's changelog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub(super) enum LogRecord {
    /// A node took the partition over. Appended before its first turn, against the last
    /// sequence it read, so that the previous owner's next append fails.
    Tenure {
        /// The new owner.
        node: String,
        /// Its lease's epoch.
        epoch: u64,
    },
    /// A turn the owner committed.
    Turn {
        /// Unique per turn (node, epoch, a counter): the append's message id, so a retry
        /// after a lost acknowledgement is recognised.
        id: String,
        /// The owner that ran it.
        node: String,
        /// Its tenure's epoch.
        epoch: u64,
        /// What it appended and answered (boxed: a turn is far larger than a tenure).
        turn: Box<ReplicatedTurn>,
    },
}

/// The message id the inbox stream deduplicates by: a platform's redelivery of a message has
/// the same session and message id.
pub(super) fn inbox_message_id(session_key: &str, message_id: &str) -> String {
    format!("{session_key}\u{1f}{message_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replies::Reply;
    use crate::store::{InboxRecord, TranscriptEntry};

    #[test]
    fn records_survive_the_round_trip_through_json() {
        let record = InboxRecord::direct_for_test("m1", "hello there");
        let envelope = InboxEnvelope {
            message: record.message,
            session_key: Some("agent:main:x".into()),
            route: RouteHints {
                guild_id: Some("g1".into()),
                roles: vec!["r1".into()],
            },
        };
        let json = serde_json::to_vec(&envelope).unwrap();
        assert_eq!(
            serde_json::from_slice::<InboxEnvelope>(&json).unwrap(),
            envelope
        );
        let turn = LogRecord::Turn {
            id: "n1/7/1".into(),
            node: "n1".into(),
            epoch: 7,
            turn: Box::new(ReplicatedTurn {
                session_key: "agent:main:x".into(),
                entries: vec![TranscriptEntry::user("hello there", 3, 1).with_message_id("m1")],
                reply: Reply {
                    session_key: "agent:main:x".into(),
                    text: "hi".into(),
                    in_reply_to: vec!["m1".into()],
                    seq: 0,
                    error: false,
                    route: None,
                    tool_calls: Vec::new(),
                    usage: None,
                    finish_reason: Some("stop".into()),
                    model: None,
                    error_kind: None,
                },
            }),
        };
        let json = serde_json::to_vec(&turn).unwrap();
        assert_eq!(serde_json::from_slice::<LogRecord>(&json).unwrap(), turn);
    }
}
