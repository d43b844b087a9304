//! [`JetStreamIngress`]: a cluster node accepts a message by publishing it to its partition's
//! inbox subject and acknowledges it only once JetStream has (the message is then on a quorum
//! of the stream's replicas: the cluster's equivalent of a single node's flush).

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::Context;
use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::names::inbox_subject;
use super::partition_of;
use super::record::{inbox_message_id, InboxEnvelope};
use crate::inbound::{InboundEvent, Refusal};
use crate::runtime::Ingress;

/// Publishes accepted messages to the partitions' inboxes.
pub(super) struct JetStreamIngress {
    js: Context,
    partitions: u32,
}

impl JetStreamIngress {
    /// Publishes through `js` into `partitions` partitions.
    pub(super) fn new(js: Context, partitions: u32) -> Self {
        Self { js, partitions }
    }

    async fn publish_event(
        &self,
        session_key: &str,
        event: &InboundEvent,
        streamed: bool,
    ) -> Result<(), Refusal> {
        let body = serde_json::to_vec(&InboxEnvelope::of(event, streamed))
            .map_err(|e| Refusal::Storage(format!("cannot encode the message: {e}")))?;
        let partition = partition_of(session_key, self.partitions);
        let message = PublishMessage::build()
            .payload(Bytes::from(body))
            .message_id(inbox_message_id(session_key, &event.message.message_id));
        let unavailable = |e: async_nats::jetstream::context::PublishError| match e.kind() {
            PublishErrorKind::MaxPayloadExceeded => Refusal::Overloaded(format!(
                "the message is too large for the cluster's inbox: {e}"
            )),
            _ => Refusal::Unavailable(format!(
                "partition {partition}'s inbox did not acknowledge the message: {e}"
            )),
        };
        let ack = self
            .js
            .send_publish(inbox_subject(partition), message)
            .await
            .map_err(unavailable)?
            .await
            .map_err(unavailable)?;
        if ack.duplicate {
            tracing::debug!(session_key, message_id = %event.message.message_id, "a redelivered message: already in the inbox");
        }
        Ok(())
    }
}

impl Ingress for JetStreamIngress {
    fn publish<'a>(
        &'a self,
        session_key: &'a str,
        event: &'a InboundEvent,
        streamed: bool,
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(self.publish_event(session_key, event, streamed))
    }
}
