//! What the cluster carries, as JSON: an accepted message in a partition's inbox, the records
//! of a partition's changelog (a new tenure, a turn, a deleted session, a scheduled run), and a delete asked of
//! a partition's owner with its answer (core NATS request-reply).

use serde::{Deserialize, Serialize};

use crate::inbound::{InboundEvent, InboundMessage, RouteHints};
use crate::pipeline::ReplicatedTurn;
use crate::replies::Delta;

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
    /// A streaming request waits for its answer on the node that accepted it: the owner's
    /// turn streams, and its deltas reach that node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streamed: bool,
}

impl InboxEnvelope {
    /// The envelope of `event` (`streamed`: a streaming request waits for its answer).
    pub(super) fn of(event: &InboundEvent, streamed: bool) -> Self {
        Self {
            message: event.message.clone(),
            session_key: event.session_key.clone(),
            route: event.route.clone(),
            streamed,
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

/// A streaming delta of a turn as the owner publishes it to the other nodes (core NATS,
/// [`super::names::delta_subject`]; lost ones are not sent again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct DeltaEnvelope {
    /// The node whose turn made it (which does not take it back).
    pub node: String,
    /// The session.
    pub session_key: String,
    /// The message ids the turn answers.
    pub in_reply_to: Vec<String>,
    /// 1, 2, 3… within the turn.
    pub seq: u64,
    /// The new text.
    pub text: String,
    /// The model call of the turn it belongs to.
    pub round: u32,
}

impl DeltaEnvelope {
    /// The envelope of `delta`, made on `node`.
    pub(super) fn of(node: &str, delta: &Delta) -> Self {
        Self {
            node: node.to_string(),
            session_key: delta.session_key.clone(),
            in_reply_to: delta.in_reply_to.clone(),
            seq: delta.seq,
            text: delta.text.clone(),
            round: delta.round,
        }
    }

    /// The delta it carries.
    pub(super) fn into_delta(self) -> Delta {
        Delta {
            session_key: self.session_key,
            in_reply_to: self.in_reply_to,
            seq: self.seq,
            text: self.text,
            round: self.round,
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
    /// The owner deleted a session (asked by an operator on any node). Turns of the session
    /// before it are deleted with it; a turn after it starts the session anew.
    Delete {
        /// Unique per record, like a turn's (the append's message id).
        id: String,
        /// The owner that deleted it.
        node: String,
        /// Its tenure's epoch.
        epoch: u64,
        /// The deleted session.
        session_key: String,
    },
    /// A scheduled run of a job whose session is in the partition started or ended on its
    /// owner (`src/schedules/`): every replica records it, so a new owner knows which due
    /// times were run.
    ScheduleRun {
        /// Unique per record, like a turn's (the append's message id).
        id: String,
        /// The owner that ran it.
        node: String,
        /// Its tenure's epoch.
        epoch: u64,
        /// The change to the job's runs.
        change: crate::schedules::RunChange,
    },
}

/// A delete asked of the owner of the session's partition (on [`super::names::delete_subject`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct DeleteRequest {
    /// The session, normalised.
    pub session_key: String,
}

/// The owner's answer to a [`DeleteRequest`]. A node that does not own the partition (any
/// more) does not answer at all, so the asker hears the owner or nobody.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub(super) enum DeleteAnswer {
    /// Deleted here and appended to the changelog at `seq`.
    Deleted {
        /// The changelog sequence of the [`LogRecord::Delete`].
        seq: u64,
        /// Transcript entries removed.
        entries: u64,
        /// Accepted but unanswered messages removed.
        pending_messages: u64,
    },
    /// No such session.
    NotFound,
    /// A turn of the session is running (as on a single node: retry when it has finished).
    Busy,
    /// The delete failed; nothing was appended.
    Failed {
        /// Why.
        reason: String,
    },
}

/// The message id the inbox stream deduplicates by: a platform's redelivery of a message has
/// the same session and message id.
pub(super) fn inbox_message_id(session_key: &str, message_id: &str) -> String {
    format!("{session_key}\u{1f}{message_id}")
}

/// A partition's owner's answer to a forwarded session read (`reads`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(super) enum ReadAnswer {
    /// The JSON the API shows for it.
    Found {
        /// The body.
        body: serde_json::Value,
    },
    /// No such session.
    NotFound,
    /// The read failed there.
    Failed {
        /// Why, for the client.
        reason: String,
    },
}

/// A final reply of a turn, published by the node that ran it for the waiters of nodes that
/// do not keep its partition (`replies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ReplyEnvelope {
    /// The node whose turn made it (which does not take it back).
    pub node: String,
    /// The reply.
    pub reply: crate::replies::Reply,
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
            streamed: true,
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
        let delete = LogRecord::Delete {
            id: "n1/7/2".into(),
            node: "n1".into(),
            epoch: 7,
            session_key: "agent:main:x".into(),
        };
        let json = serde_json::to_vec(&delete).unwrap();
        assert_eq!(serde_json::from_slice::<LogRecord>(&json).unwrap(), delete);
        for answer in [
            DeleteAnswer::Deleted {
                seq: 9,
                entries: 4,
                pending_messages: 1,
            },
            DeleteAnswer::NotFound,
            DeleteAnswer::Busy,
            DeleteAnswer::Failed {
                reason: "no quorum".into(),
            },
        ] {
            let json = serde_json::to_vec(&answer).unwrap();
            assert_eq!(
                serde_json::from_slice::<DeleteAnswer>(&json).unwrap(),
                answer
            );
        }
    }
}
