//! Session reads a cluster node may not be able to serve itself: with `[cluster] replicas`
//! below the node count, a node keeps only its partitions' sessions and asks a node that
//! keeps the others ([`ClusterReads`], installed by the cluster layer). A read travels as a
//! [`SessionRead`] and comes back as the JSON the API shows, so the client sees the same
//! body wherever it asked. A single node serves every read itself.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Runtime, StoredAnswer};
use crate::error::Error;
use crate::inbound::normalize_session_key;

/// One session read of the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "read", rename_all = "snake_case")]
pub(crate) enum SessionRead {
    /// `GET /v1/sessions/{key}`.
    Session {
        /// The session key as the client gave it.
        key: String,
    },
    /// `GET /v1/sessions/{key}/transcript`.
    Transcript {
        /// The session key as the client gave it.
        key: String,
        /// Entries with a larger `seq`.
        after: u64,
        /// At most this many (the server bounds it).
        limit: usize,
    },
    /// `GET /v1/sessions/{key}/context`.
    Context {
        /// The session key as the client gave it.
        key: String,
    },
    /// The stored answer to one message (a waiter's fallback when its reply did not come).
    Answer {
        /// The session key as the client gave it.
        key: String,
        /// The message answered.
        message_id: String,
    },
}

impl SessionRead {
    /// The session read (normalised).
    pub(crate) fn session_key(&self) -> String {
        match self {
            SessionRead::Session { key }
            | SessionRead::Transcript { key, .. }
            | SessionRead::Context { key }
            | SessionRead::Answer { key, .. } => normalize_session_key(key),
        }
    }
}

/// How a cluster node reads sessions it does not keep.
pub(crate) trait ClusterReads: Send + Sync + 'static {
    /// Whether this node keeps `session_key`'s partition (then it reads it itself).
    fn keeps(&self, session_key: &str) -> bool;
    /// Asks a node that keeps it; `Ok(None)`: there is no such session.
    fn read<'a>(&'a self, read: &'a SessionRead) -> BoxFuture<'a, Result<Option<Value>, Error>>;
}

impl Runtime {
    /// Answers `read` as JSON, here or (a cluster node without the session's partition)
    /// from a node that keeps it; `None` if there is no such session.
    pub(crate) async fn read_session(&self, read: &SessionRead) -> Result<Option<Value>, Error> {
        if let Some(reads) = self.inner.reads.get() {
            if !reads.keeps(&read.session_key()) {
                return reads.read(read).await;
            }
        }
        self.read_here(read)
    }

    /// Answers `read` from this node's store.
    pub(crate) fn read_here(&self, read: &SessionRead) -> Result<Option<Value>, Error> {
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| Error::Replication(format!("cannot encode a session read: {e}")))
        };
        match read {
            SessionRead::Session { key } => match self.session(key)? {
                Some(info) => json(serde_json::to_value(info)).map(Some),
                None => Ok(None),
            },
            SessionRead::Transcript { key, after, limit } => {
                match self.transcript(key, *after, *limit)? {
                    Some(items) => json(serde_json::to_value(items)).map(Some),
                    None => Ok(None),
                }
            }
            SessionRead::Context { key } => {
                let Some(assembly) = self.context_dump(key)? else {
                    return Ok(None);
                };
                let mut dump = assembly.dump();
                let key = normalize_session_key(key);
                if let Some(fields) = dump.as_object_mut() {
                    fields.insert("agent".into(), Value::from(self.agent_of_session(&key)));
                }
                Ok(Some(dump))
            }
            SessionRead::Answer { key, message_id } => match self.stored_answer(key, message_id)? {
                Some(answer) => json(serde_json::to_value(answer)).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The stored answer to `message_id` of session `key`, read here or (a cluster node
    /// without the session's partition) from a node that keeps it.
    pub(crate) async fn stored_answer_anywhere(
        &self,
        key: &str,
        message_id: &str,
    ) -> Result<Option<StoredAnswer>, Error> {
        let read = SessionRead::Answer {
            key: key.to_string(),
            message_id: message_id.to_string(),
        };
        match self.read_session(&read).await? {
            Some(body) => serde_json::from_value(body)
                .map(Some)
                .map_err(|e| Error::Replication(format!("undecodable stored answer: {e}"))),
            None => Ok(None),
        }
    }

    /// Installs the cluster layer's reads; errs if installed before.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn install_reads(&self, reads: Arc<dyn ClusterReads>) -> Result<(), Error> {
        self.inner.reads.set(reads).map_err(|_| {
            Error::from(crate::error::StoreError::Invariant(
                "the cluster reads were installed twice",
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_travel_as_json_and_name_their_session() {
        let reads = [
            SessionRead::Session { key: "a".into() },
            SessionRead::Transcript {
                key: "a".into(),
                after: 3,
                limit: 10,
            },
            SessionRead::Context { key: "a".into() },
            SessionRead::Answer {
                key: "a".into(),
                message_id: "m1".into(),
            },
        ];
        for read in reads {
            let json = serde_json::to_vec(&read).unwrap();
            assert_eq!(serde_json::from_slice::<SessionRead>(&json).unwrap(), read);
            assert_eq!(read.session_key(), normalize_session_key("a"));
        }
        let answer = StoredAnswer {
            text: "hi".into(),
            tool_calls: Vec::new(),
        };
        let body = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            serde_json::from_value::<StoredAnswer>(body).unwrap(),
            answer
        );
    }
}
