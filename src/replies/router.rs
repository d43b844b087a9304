//! The channel router: sends each published reply to the channel that serves the platform of
//! the message it answers (`Reply::route.channel`), or to the fallback channel (callbacks) when
//! none claims it. Replies reach the reply hub's stream and waiters whatever happens here.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use turnstile_actors::ActorsError;

use super::hub::{Delta, Reply, ReplyRoute};
use crate::error::ConfigError;
use crate::metrics;

/// Something that takes a reply for delivery without waiting for it (a channel actor's
/// mailbox). Implemented for every started channel by `Runtime::add_channel`.
pub(crate) trait ReplySink: Send + Sync + 'static {
    /// The channel's name (metrics, logs).
    fn name(&self) -> &str;
    /// Hands the reply over; delivery (and its retries) happens elsewhere. Fails only when the
    /// channel's actor is gone.
    fn deliver(&self, reply: Arc<Reply>) -> Result<(), ActorsError>;
    /// Whether the channel shows replies while they stream (then turns it serves stream).
    fn wants_deltas(&self) -> bool {
        false
    }
    /// Takes a delta of a streaming reply (going back to `route`) without waiting; the final
    /// reply still comes through [`ReplySink::deliver`].
    fn deliver_delta(&self, _route: &ReplyRoute, _delta: Arc<Delta>) {}
}

/// Which replies a channel serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serves {
    /// Replies to messages whose `channel` is one of these names.
    Channels(Vec<String>),
    /// Replies that no named claim covers (at most one channel may be the fallback).
    Unclaimed,
}

#[derive(Default)]
struct Routes {
    named: HashMap<String, Arc<dyn ReplySink>>,
    fallback: Option<Arc<dyn ReplySink>>,
}

/// Reply routes by message channel. Written when channels start, read per reply.
#[derive(Default)]
pub(crate) struct ChannelRouter {
    routes: RwLock<Routes>,
}

impl ChannelRouter {
    /// Routes the replies `serves` names to `sink`. Two channels claiming the same name, or two
    /// fallbacks, are a configuration error.
    pub(crate) fn add(&self, sink: Arc<dyn ReplySink>, serves: Serves) -> Result<(), ConfigError> {
        let mut routes = self
            .routes
            .write()
            .map_err(|_| ConfigError::Invalid("channel routes poisoned".into()))?;
        match serves {
            Serves::Channels(names) => {
                for name in &names {
                    if let Some(other) = routes.named.get(name) {
                        return Err(ConfigError::Invalid(format!(
                            "channels: replies of {name:?} are already served by {:?}",
                            other.name()
                        )));
                    }
                }
                for name in names {
                    routes.named.insert(name, Arc::clone(&sink));
                }
            }
            Serves::Unclaimed => {
                if let Some(other) = &routes.fallback {
                    return Err(ConfigError::Invalid(format!(
                        "channels: {:?} already receives every unclaimed reply",
                        other.name()
                    )));
                }
                routes.fallback = Some(sink);
            }
        }
        Ok(())
    }

    /// The channel serving `route`, if any.
    fn sink(&self, route: &ReplyRoute) -> Option<Arc<dyn ReplySink>> {
        match self.routes.read() {
            Ok(routes) => routes
                .named
                .get(&route.channel)
                .or(routes.fallback.as_ref())
                .cloned(),
            Err(_) => None,
        }
    }

    /// Whether the channel serving replies to messages of `channel` takes deltas.
    pub(crate) fn wants_deltas(&self, channel: &str) -> bool {
        match self.routes.read() {
            Ok(routes) => routes
                .named
                .get(channel)
                .or(routes.fallback.as_ref())
                .is_some_and(|s| s.wants_deltas()),
            Err(_) => false,
        }
    }

    /// Hands `delta` to the channel serving `route`, if it takes deltas.
    pub(crate) fn route_delta(&self, route: Option<&ReplyRoute>, delta: &Arc<Delta>) {
        let Some(route) = route else { return };
        if let Some(sink) = self.sink(route) {
            if sink.wants_deltas() {
                sink.deliver_delta(route, Arc::clone(delta));
            }
        }
    }

    /// Hands `reply` to the channel serving its route, if any.
    pub(crate) fn route(&self, reply: &Arc<Reply>) {
        let Some(route) = &reply.route else { return };
        // A heartbeat with nothing to report stays in the transcript and goes nowhere.
        if crate::schedules::is_quiet_heartbeat(reply) {
            return;
        }
        let Some(sink) = self.sink(route) else { return };
        if let Err(error) = sink.deliver(Arc::clone(reply)) {
            metrics::delivery(sink.name(), false);
            tracing::warn!(
                channel = sink.name(),
                session_key = %reply.session_key,
                %error,
                "reply not handed to its channel; it stays readable through the API"
            );
        }
    }

    /// Forgets every route (at shutdown, so channel actors can stop).
    pub(crate) fn clear(&self) {
        if let Ok(mut routes) = self.routes.write() {
            *routes = Routes::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::inbound::ChatKind;
    use crate::replies::ReplyRoute;

    struct Recorder(&'static str, Mutex<Vec<String>>);

    impl ReplySink for Recorder {
        fn name(&self) -> &str {
            self.0
        }
        fn deliver(&self, reply: Arc<Reply>) -> Result<(), ActorsError> {
            self.1.lock().unwrap().push(reply.text.clone());
            Ok(())
        }
    }

    fn reply(channel: &str) -> Arc<Reply> {
        Arc::new(Reply {
            session_key: "k".into(),
            text: channel.into(),
            in_reply_to: vec!["1".into()],
            seq: 1,
            error: false,
            usage: None,
            finish_reason: None,
            model: None,
            error_kind: None,
            route: Some(ReplyRoute {
                channel: channel.into(),
                account_id: "default".into(),
                chat_kind: ChatKind::Direct,
                chat_id: "c".into(),
                thread_id: None,
                message_id: "1".into(),
            }),
            tool_calls: Vec::new(),
        })
    }

    #[test]
    fn named_routes_win_and_the_fallback_takes_the_rest() {
        let router = ChannelRouter::default();
        let tg = Arc::new(Recorder("telegram", Mutex::default()));
        let cb = Arc::new(Recorder("callback", Mutex::default()));
        router
            .add(tg.clone(), Serves::Channels(vec!["telegram".into()]))
            .unwrap();
        router.add(cb.clone(), Serves::Unclaimed).unwrap();
        assert!(router.add(cb.clone(), Serves::Unclaimed).is_err());
        assert!(router
            .add(cb.clone(), Serves::Channels(vec!["telegram".into()]))
            .is_err());
        router.route(&reply("telegram"));
        router.route(&reply("webhook"));
        assert_eq!(*tg.1.lock().unwrap(), vec!["telegram"]);
        assert_eq!(*cb.1.lock().unwrap(), vec!["webhook"]);
        router.clear();
        router.route(&reply("telegram"));
        assert_eq!(tg.1.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_heartbeat_with_nothing_to_report_is_not_delivered() {
        let router = ChannelRouter::default();
        let tg = Arc::new(Recorder("telegram", Mutex::default()));
        router
            .add(tg.clone(), Serves::Channels(vec!["telegram".into()]))
            .unwrap();
        let heartbeat = |text: &str| {
            let mut r = (*reply("telegram")).clone();
            r.text = text.into();
            r.in_reply_to = vec!["heartbeat:hb:1".into()];
            Arc::new(r)
        };
        router.route(&heartbeat("HEARTBEAT_OK"));
        router.route(&heartbeat("The backup failed last night."));
        assert_eq!(*tg.1.lock().unwrap(), vec!["The backup failed last night."]);
    }
}
