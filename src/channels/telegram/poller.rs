//! The long-poll loop: `getMe` once (with retries), then `getUpdates` from the stored offset,
//! each update submitted through the channel port, the next offset stored durably after the
//! batch. Stops when the runtime shuts down (an in-flight long poll is abandoned).

use std::time::Duration;

use super::api::{ApiError, BotApi, Update};
use super::convert::{to_inbound, BotIdentity};
use super::TelegramChannel;
use crate::channels::retry::pause_unless_stopped;
use crate::config::TelegramConfig;
use crate::error::Error;
use crate::inbound::Refusal;
use crate::runtime::{ChannelPort, SubmitError};

/// Key of the stored offset in the channel's state.
const OFFSET_KEY: &str = "offset";

pub(super) struct Poller {
    api: BotApi,
    config: TelegramConfig,
    port: ChannelPort<TelegramChannel>,
}

/// What to do after one update.
enum Next {
    /// Handled (accepted, dropped, or unusable): move past it.
    Advance,
    /// The runtime cannot take it now: retry it later.
    Retry(String),
}

impl Poller {
    pub(super) fn new(
        api: BotApi,
        config: TelegramConfig,
        port: ChannelPort<TelegramChannel>,
    ) -> Self {
        Self { api, config, port }
    }

    fn pause(&self, failures: u32) -> Duration {
        crate::backoff::jittered(
            Duration::from_millis(self.config.retry_backoff_ms),
            Duration::from_millis(self.config.max_retry_backoff_ms),
            failures.saturating_sub(1),
        )
    }

    fn stored_offset(&self) -> i64 {
        match self.port.load_state(OFFSET_KEY) {
            Ok(Some(bytes)) => match <[u8; 8]>::try_from(bytes.as_slice()) {
                Ok(b) => i64::from_be_bytes(b),
                Err(_) => {
                    tracing::warn!("stored telegram offset is malformed; starting from 0");
                    0
                }
            },
            Ok(None) => 0,
            Err(error) => {
                tracing::warn!(%error, "cannot read the telegram offset; starting from 0");
                0
            }
        }
    }

    pub(super) async fn run(self) {
        let mut stop = self.port.stopping();
        let mut failures = 0u32;
        let bot = loop {
            let result = tokio::select! {
                r = self.api.get_me() => r,
                _ = stop.wait_for(|s| *s) => return,
            };
            match result {
                Ok(me) => break BotIdentity::from_user(&me),
                Err(error) => {
                    failures += 1;
                    tracing::warn!(%error, "telegram getMe failed; retrying");
                    if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                        return;
                    }
                }
            }
        };
        tracing::info!(bot = %bot.username, "telegram bot identified; polling");
        let mut offset = self.stored_offset();
        failures = 0;
        loop {
            let polled = tokio::select! {
                r = self.api.get_updates(offset, self.config.poll_limit, self.config.poll_timeout_secs) => r,
                _ = stop.wait_for(|s| *s) => return,
            };
            let updates = match polled {
                Ok(u) => u,
                Err(error) => {
                    failures += 1;
                    log_poll_error(&error);
                    if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                        return;
                    }
                    continue;
                }
            };
            failures = 0;
            let before = offset;
            let mut retry = None;
            for update in &updates {
                if update.update_id < offset {
                    continue;
                }
                match self.handle(update, &bot).await {
                    Next::Advance => offset = update.update_id.saturating_add(1),
                    Next::Retry(why) => {
                        retry = Some(why);
                        break;
                    }
                }
            }
            if offset != before {
                if let Err(error) = self
                    .port
                    .save_state(OFFSET_KEY, &offset.to_be_bytes())
                    .await
                {
                    tracing::warn!(%error, "cannot store the telegram offset; updates may be seen again after a restart");
                }
            }
            if let Some(why) = retry {
                failures += 1;
                tracing::warn!(reason = %why, "telegram update not accepted now; retrying");
                if !pause_unless_stopped(self.pause(failures), &mut stop).await {
                    return;
                }
            }
        }
    }

    async fn handle(&self, update: &Update, bot: &BotIdentity) -> Next {
        let Some(message) = to_inbound(update, bot, &self.config.account_id) else {
            return Next::Advance;
        };
        match self.port.submit(message).await {
            // Over a quota is final for the update: retrying it would only count it again.
            Ok(_) | Err(SubmitError::Refused(Refusal::Dropped(_) | Refusal::OverQuota(_))) => {
                Next::Advance
            }
            Err(SubmitError::Refused(refusal)) => Next::Retry(refusal.to_string()),
            Err(SubmitError::Failed(Error::Inbound(error))) => {
                tracing::warn!(update_id = update.update_id, %error, "telegram update is not a valid message; skipped");
                Next::Advance
            }
            Err(SubmitError::Failed(error)) => Next::Retry(error.to_string()),
        }
    }
}

fn log_poll_error(error: &ApiError) {
    match error {
        ApiError::Api { code: 409, .. } => tracing::error!(
            %error,
            "another getUpdates consumer or a webhook is active for this bot"
        ),
        _ => tracing::warn!(%error, "telegram getUpdates failed; retrying"),
    }
}
