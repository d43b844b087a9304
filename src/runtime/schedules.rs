//! The runtime's side of scheduled turns (`src/schedules/`): the scheduler's task, and one run
//! as a message into its session, submitted and answered as any other, its outcome the turn's
//! reply.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{Runtime, SubmitError};
use crate::config::ScheduleConfig;
use crate::inbound::{
    ChatKind, DropReason, IdOrigin, InboundMessage, MessageKind, Refusal, Sender,
};
use crate::pipeline::ReplicationError;
use crate::schedules::{
    answer_outcome, excerpt, job_session, outcome_of, quiet_text, run_message_id, run_scheduler,
    RunChange, RunTurns, Schedules, HEARTBEAT_OK,
};
use crate::store::RunOutcome;

/// Longest wait for a run's answer. Turns end by their own deadlines long before; this
/// bounds a run whose message was answered so long ago its answer is no longer found.
const MAX_RUN_WAIT: Duration = Duration::from_secs(30 * 60);
/// The channel of a run's message when its session has no chat to answer in.
pub(crate) const SCHEDULE_CHANNEL: &str = "schedule";
/// The sender of a run's message.
const SCHEDULER_SENDER: &str = "scheduler";
/// Longest `HEARTBEAT.md` read, in bytes.
const MAX_HEARTBEAT_FILE_BYTES: u64 = 20_000;

/// What a heartbeat is asked (OpenClaw's heartbeat prompt, with the file inlined).
fn heartbeat_text(extra: Option<&str>, file: Option<&str>) -> String {
    let mut text = String::from(
        "Heartbeat. Follow your standing instructions (HEARTBEAT.md) strictly; do not infer or \
         repeat old tasks from earlier chats.",
    );
    if let Some(extra) = extra {
        text.push_str("\n\n");
        text.push_str(extra);
    }
    match file {
        Some(f) if !f.trim().is_empty() => {
            text.push_str("\n\nHEARTBEAT.md:\n");
            text.push_str(f.trim());
        }
        _ => text.push_str("\n\n(There is no HEARTBEAT.md.)"),
    }
    text.push_str(&format!(
        "\n\nIf nothing needs attention, answer exactly {HEARTBEAT_OK}."
    ));
    text
}

/// The scheduler's way into the runtime.
struct ScheduledTurns {
    runtime: Runtime,
}

impl RunTurns for ScheduledTurns {
    fn run(
        &self,
        job: ScheduleConfig,
        due_ms: u64,
    ) -> Pin<Box<dyn Future<Output = Option<RunOutcome>> + Send>> {
        let runtime = self.runtime.clone();
        Box::pin(async move { runtime.run_scheduled(job, due_ms).await })
    }

    fn owns(&self, session_key: &str) -> bool {
        self.runtime.inner.engine.replication().owns(session_key)
    }

    fn record<'a>(
        &'a self,
        session_key: &'a str,
        change: &'a RunChange,
    ) -> BoxFuture<'a, Result<(), ReplicationError>> {
        Box::pin(async move {
            match self.runtime.inner.engine.replication().get() {
                None => Ok(()),
                Some(Ok(replication)) => replication.append_run(session_key, change).await,
                Some(Err(e)) => Err(e),
            }
        })
    }
}

impl Runtime {
    /// The scheduled jobs (`[[schedules]]` and `/v1/schedules`).
    pub fn schedules(&self) -> &Arc<Schedules> {
        &self.inner.schedules
    }

    /// Starts the scheduler; it stops with the channels' tasks at shutdown.
    pub(crate) fn start_scheduler(&self) {
        let stopping = self.inner.channel_tasks.stopping();
        let turns: Arc<dyn RunTurns> = Arc::new(ScheduledTurns {
            runtime: self.clone(),
        });
        let task = tokio::spawn(run_scheduler(
            Arc::clone(&self.inner.schedules),
            turns,
            stopping,
        ));
        self.inner.channel_tasks.push(task);
    }

    /// Runs `job`'s turn due at `due_ms` and says how it ended.
    async fn run_scheduled(&self, job: ScheduleConfig, due_ms: u64) -> Option<RunOutcome> {
        let key = job_session(&job, &self.inner.config);
        let id = run_message_id(&job, due_ms);
        let text = if job.heartbeat {
            let file = self.heartbeat_file(&key).await;
            heartbeat_text(job.message.as_deref(), file.as_deref())
        } else {
            job.message.clone().unwrap_or_default()
        };
        let message = self.scheduled_message(&job, &key, &id, text);
        let mut waiter = self.reply_to(&id);
        match self
            .submit_for_reply(message, Some(key.clone()), IdOrigin::Given)
            .await
        {
            Ok(admitted) => {
                if let Err(e) = self.admitted_durable(&admitted, true).await {
                    return Some(RunOutcome::Failed {
                        error: excerpt(&e.to_string()),
                    });
                }
                // In a cluster the replicated inbox takes a message it has seen as a
                // duplicate, silently: a run resumed by a partition's new owner may have
                // been answered already (this node keeps the partition, so the answer is
                // here); the waiter above hears one answered from now on.
                if self.is_clustered() {
                    if let Ok(Some(answer)) = self.stored_answer(&key, &id) {
                        let quiet = job.heartbeat && quiet_text(&answer.text);
                        return Some(answer_outcome(&answer.text, false, quiet));
                    }
                }
            }
            // Submitted before (a run resumed after a restart): its stored answer, or its
            // reply still to come.
            Err(e) if e.dropped() == Some(DropReason::Duplicate) => {
                match self.stored_answer(&key, &id) {
                    Ok(Some(answer)) => {
                        let quiet = job.heartbeat && quiet_text(&answer.text);
                        return Some(answer_outcome(&answer.text, false, quiet));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        return Some(RunOutcome::Failed {
                            error: excerpt(&e.to_string()),
                        })
                    }
                }
            }
            Err(SubmitError::Refused(Refusal::ShuttingDown)) => return None,
            Err(e) => {
                return Some(RunOutcome::Failed {
                    error: excerpt(&e.to_string()),
                })
            }
        }
        match tokio::time::timeout(MAX_RUN_WAIT, waiter.recv()).await {
            Ok(Some(reply)) => Some(outcome_of(&reply)),
            // The hub closed: the runtime is stopping.
            Ok(None) => None,
            Err(_) => Some(RunOutcome::Failed {
                error: format!("no answer within {} minutes", MAX_RUN_WAIT.as_secs() / 60),
            }),
        }
    }

    /// The message of a run: into the session's chat when it has one (so the reply is
    /// delivered there), else on the `schedule` channel, read through the API only.
    fn scheduled_message(
        &self,
        job: &ScheduleConfig,
        key: &str,
        id: &str,
        text: String,
    ) -> InboundMessage {
        let chat = self.inner.store.session_chat(key).ok().flatten();
        // A thread's session (`…:thread:<id>`) answers in its thread.
        let thread_id = chat
            .as_ref()
            .and_then(|_| key.rsplit_once(":thread:"))
            .map(|(_, t)| t.to_string());
        let (channel, chat_id, chat_kind) = match chat {
            Some((channel, chat_id)) => {
                // A chat record scoped to an agent names its channel `<channel>\u{1f}<agent>`.
                let channel = channel
                    .split('\u{1f}')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                (channel, chat_id, crate::context::chat_kind_of_key(key))
            }
            None => (
                SCHEDULE_CHANNEL.to_string(),
                job.id.clone(),
                ChatKind::Direct,
            ),
        };
        InboundMessage {
            channel,
            account_id: "default".into(),
            chat_kind,
            chat_id,
            thread_id,
            message_id: id.to_string(),
            sender: Sender {
                id: SCHEDULER_SENDER.into(),
                name: "Scheduler".into(),
                is_bot: false,
            },
            text,
            mentions: Vec::new(),
            mentioned_bot: true,
            reply_to: None,
            timestamp_ms: 0,
            attachments: Vec::new(),
            kind: MessageKind::Message,
        }
    }

    /// The `HEARTBEAT.md` of the workspace of `key`'s agent, if it has one (read on the
    /// blocking pool, at most [`MAX_HEARTBEAT_FILE_BYTES`]).
    async fn heartbeat_file(&self, key: &str) -> Option<String> {
        let agent = self.agent_of_session(key).to_string();
        let dir = self
            .agents()
            .profile(&agent)?
            .config
            .agent
            .workspace_dir
            .clone()?;
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let file = std::fs::File::open(dir.join("HEARTBEAT.md")).ok()?;
            let mut text = String::new();
            file.take(MAX_HEARTBEAT_FILE_BYTES)
                .read_to_string(&mut text)
                .ok()?;
            Some(text)
        })
        .await
        .ok()
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_carries_its_file_and_the_quiet_answer() {
        let t = heartbeat_text(Some("Check the queue."), Some("- look at the inbox\n"));
        assert!(t.contains("Check the queue."), "{t}");
        assert!(t.contains("HEARTBEAT.md:\n- look at the inbox"), "{t}");
        assert!(t.ends_with("answer exactly HEARTBEAT_OK."), "{t}");
        assert!(heartbeat_text(None, None).contains("There is no HEARTBEAT.md"));
    }
}
