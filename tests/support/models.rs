//! Small in-process test models standing in for a remote one: a fixed answer, and a gate a
//! test opens.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use turnstile::error::ModelError;
use turnstile::model::{Model, ModelReply, ModelRequest};

/// A model that answers with a fixed text, or `long_text` when the last message contains
/// "long".
pub struct FixedModel {
    pub long_text: String,
}

impl Model for FixedModel {
    fn name(&self) -> &str {
        "fixed"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        let last = request
            .messages
            .last()
            .map(|m| m.content.clone())
            .unwrap_or_default();
        let text = if last.contains("long") {
            self.long_text.clone()
        } else {
            format!("re: {last}")
        };
        Box::pin(async move {
            Ok(ModelReply {
                text,
                ..ModelReply::default()
            })
        })
    }
}

/// A model that waits for `release` before answering; `entered` is notified when a call
/// starts.
#[derive(Default)]
pub struct GateModel {
    pub entered: Notify,
    pub release: Notify,
}

impl Model for GateModel {
    fn name(&self) -> &str {
        "gate"
    }

    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            self.entered.notify_one();
            self.release.notified().await;
            Ok(ModelReply {
                text: "done".into(),
                ..ModelReply::default()
            })
        })
    }
}

/// `Arc<GateModel>` as a model.
pub struct SharedGate(pub Arc<GateModel>);

impl Model for SharedGate {
    fn name(&self) -> &str {
        "gate"
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.0.complete(request)
    }
}
