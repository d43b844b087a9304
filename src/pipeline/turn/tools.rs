//! A turn's model calls and the tool rounds between them: call the model until it answers
//! without tool calls, running the registered tools it asks for, letting steered messages
//! in, and stopping at the round limit or at a call of a client-side tool.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use turnstile_actors::TurnControl;

use super::call::Stop;
use super::{now_ms, Turn, TurnEngine};
use crate::agents::Agent;
use crate::context::processors::CLEARED_TOOL_RESULT;
use crate::context::{Assembly, TokenBudget};
use crate::inbound::sanitize_text;
use crate::model::{
    ChatMessage, ModelReply, ModelRequest, Role, TokenCounter, ToolCall, ToolSpec,
    MESSAGE_OVERHEAD_TOKENS,
};
use crate::pipeline::requests::{place_tool_results, ClientToolResult, RequestExtras};
use crate::replies::ReplyUsage;
use crate::store::{InboxItem, ToolInfo, TranscriptEntry};
use crate::tools::{call_message, repair_tool_messages, result_message, run_handler};

/// What the tool loop adds to a turn: the entries to store, the final answer, and the
/// messages steered into the turn while it ran (consumed with it).
pub(super) struct Answer {
    pub(super) entries: Vec<TranscriptEntry>,
    pub(super) text: String,
    pub(super) steered: Vec<InboxItem>,
    /// Token counts of the final call (the server's when it reports usage, else ours).
    pub(super) usage: ReplyUsage,
    /// Why the model stopped, as it said.
    pub(super) finish_reason: Option<String>,
    /// The model that answered.
    pub(super) model: Option<String>,
    /// Calls of client-side tools the turn stopped at (empty: a final answer).
    pub(super) client_calls: Vec<ToolCall>,
}

/// The request of a turn's model calls as it grows over the tool rounds, and what the rounds
/// add to the transcript.
struct Rounds {
    request: ModelRequest,
    /// Tokens of `request` as we count them, kept up to date as messages join it.
    prompt_tokens: u32,
    budget: TokenBudget,
    /// (call id, tokens, round) of each tool result added in this turn.
    results: Vec<(String, u32, u32)>,
    entries: Vec<TranscriptEntry>,
    steered: Vec<InboxItem>,
    /// Tool rounds run so far.
    round: u32,
    tokens: TokenCounter,
}

/// Whether `call` is of one of the request's client-side tools (the client runs it).
fn is_client(client_tools: &[ToolSpec], call: &ToolCall) -> bool {
    client_tools.iter().any(|t| t.name == call.name)
}

impl TurnEngine {
    /// Calls the model until it answers without tool calls (or the round limit is reached),
    /// running the tools it asks for in between.
    pub(super) async fn answer(
        &self,
        assembly: Arc<Assembly>,
        control: &mut TurnControl<InboxItem>,
        turn: &mut Turn<'_>,
    ) -> Result<Answer, Stop> {
        let agent = Arc::clone(&turn.agent);
        let extras = turn.extras.as_deref();
        let client_tools = self.client_tools(&agent, extras);
        let mut rounds = self.first_request(&agent, assembly, extras, &turn.results, &client_tools);
        loop {
            if rounds.round > 0 {
                // Steer mode: messages that arrived during the tool round join the turn.
                for item in control.take_steered() {
                    let entry = Self::user_entry(agent.tokens, &item);
                    rounds.steer_in(item, entry);
                }
            }
            repair_tool_messages(&mut rounds.request.messages);
            rounds.request.prompt_tokens = rounds.prompt_tokens;
            let reply = self
                .complete(&*agent.model, &rounds.request, control, &mut turn.fanout)
                .await?;
            if reply.tool_calls.is_empty() {
                return Ok(rounds.final_answer(reply));
            }
            if rounds.round >= self.config.tools.max_rounds {
                return Ok(rounds.out_of_rounds(reply));
            }
            rounds.round += 1;
            let outputs = self
                .run_tools(&agent, &reply.tool_calls, &client_tools)
                .await;
            let client_calls = rounds.add_round(&reply, outputs, &client_tools);
            if !client_calls.is_empty() {
                return Ok(rounds.stop_for_client(reply, client_calls));
            }
            rounds.clear_older_results();
        }
    }

    /// The first request of a turn: the assembly's messages with the client's tool results
    /// placed after their calls, the registered and the client's tools, and the request's
    /// parameters.
    fn first_request(
        &self,
        agent: &Agent,
        assembly: Arc<Assembly>,
        extras: Option<&RequestExtras>,
        results: &[ClientToolResult],
        client_tools: &[ToolSpec],
    ) -> Rounds {
        let mut messages = assembly.messages();
        let budget = assembly.budget;
        // Dropped before the model call, while its blocks are still in the CPU's caches: a
        // block per history entry, each releasing its entry.
        drop(assembly);
        place_tool_results(&mut messages, results);
        let mut tools = self.server_tools(agent);
        tools.extend(client_tools.iter().cloned());
        let request = ModelRequest {
            prompt_tokens: budget.used,
            messages,
            tools,
            max_output_tokens: budget.reserved,
            params: extras.map(|e| e.params.clone()).unwrap_or_default(),
        };
        let prompt_tokens = budget.used.saturating_add(
            results
                .iter()
                .map(|r| agent.tokens.count(&r.content) + MESSAGE_OVERHEAD_TOKENS)
                .sum(),
        );
        Rounds {
            request,
            prompt_tokens,
            budget,
            results: Vec::new(),
            entries: Vec::new(),
            steered: Vec::new(),
            round: 0,
            tokens: agent.tokens,
        }
    }

    /// Runs the registered tools of one round's `calls`, at most `max_calls_per_round` of
    /// them, at once; a client tool's output is empty (the client runs it, its result comes
    /// with the next request).
    async fn run_tools(
        &self,
        agent: &Agent,
        calls: &[ToolCall],
        client_tools: &[ToolSpec],
    ) -> Vec<String> {
        let limits = &self.config.tools;
        let timeout = Duration::from_millis(limits.timeout_ms);
        join_all(calls.iter().enumerate().map(|(i, call)| async move {
            if is_client(client_tools, call) {
                String::new()
            } else if i >= limits.max_calls_per_round {
                format!(
                    "error: at most {} tool calls run per round",
                    limits.max_calls_per_round
                )
            } else if self.offers_mcp(agent, &call.name) {
                let name = call.name.as_str();
                run_handler(call, timeout, limits.max_result_chars, |arguments| {
                    self.mcp.call(name, arguments)
                })
                .await
            } else {
                agent
                    .tools
                    .run(call, timeout, limits.max_result_chars)
                    .await
            }
        }))
        .await
    }

    /// The tools the turn runs itself: the agent's registered ones, then the MCP tools it is
    /// offered, less any named like a registered one (the registered tool runs).
    fn server_tools(&self, agent: &Agent) -> Vec<ToolSpec> {
        let mut tools = agent.tools.specs();
        tools.extend(
            self.mcp
                .specs_for(agent.mcp_scope(), &[], &[])
                .into_iter()
                .filter(|t| agent.profile.tools.allows(&t.name) && !agent.tools.has(&t.name)),
        );
        tools
    }

    /// Whether `name` is a tool of an MCP server this turn's agent is offered, and its filter
    /// lets it through (a call of any other is refused like an unknown tool's; one of a down
    /// server in scope is answered with why it is down).
    fn offers_mcp(&self, agent: &Agent, name: &str) -> bool {
        !agent.tools.has(name)
            && agent.profile.tools.allows(name)
            && self.mcp.owns_within(name, agent.mcp_scope())
    }

    /// The request's client-side tools, except those named like a registered or MCP tool
    /// (the turn's own runs).
    fn client_tools(&self, agent: &Agent, extras: Option<&RequestExtras>) -> Vec<ToolSpec> {
        let registered = self.server_tools(agent);
        extras
            .map(|e| {
                e.client_tools
                    .iter()
                    .filter(|t| !registered.iter().any(|r| r.name == t.name))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Rounds {
    /// Adds a message steered in between rounds (`entry`: its user entry).
    fn steer_in(&mut self, item: InboxItem, entry: TranscriptEntry) {
        let text = sanitize_text(&item.record.message.text);
        self.prompt_tokens = self
            .prompt_tokens
            .saturating_add(entry.tokens + MESSAGE_OVERHEAD_TOKENS);
        self.entries.push(entry);
        self.request
            .messages
            .push(ChatMessage::text(Role::User, text));
        self.steered.push(item);
    }

    /// The answer of a reply without tool calls.
    fn final_answer(self, reply: ModelReply) -> Answer {
        let usage = match reply.usage {
            Some(u) => ReplyUsage::new(u.prompt_tokens, u.completion_tokens),
            None => ReplyUsage::new(self.prompt_tokens, self.tokens.count(&reply.text)),
        };
        self.into_answer(
            reply.text,
            usage,
            reply.finish_reason,
            reply.model,
            Vec::new(),
        )
    }

    /// The answer of a reply that still asks for tools after the last round allowed.
    fn out_of_rounds(self, reply: ModelReply) -> Answer {
        let round = self.round;
        let text = if reply.text.trim().is_empty() {
            format!("(stopped after {round} rounds of tool calls without a final answer)")
        } else {
            reply.text
        };
        let usage = ReplyUsage::new(
            reply.usage.map_or(self.prompt_tokens, |u| u.prompt_tokens),
            self.tokens.count(&text),
        );
        self.into_answer(text, usage, reply.finish_reason, reply.model, Vec::new())
    }

    /// The answer of a reply that calls client-side tools (`client_calls`): the turn stops and
    /// hands them to the client.
    fn stop_for_client(self, reply: ModelReply, client_calls: Vec<ToolCall>) -> Answer {
        let usage = ReplyUsage::new(
            reply.usage.map_or(self.prompt_tokens, |u| u.prompt_tokens),
            reply
                .usage
                .map_or_else(|| self.tokens.count(&reply.text), |u| u.completion_tokens),
        );
        let finish_reason = Some("tool_calls".into());
        self.into_answer(reply.text, usage, finish_reason, reply.model, client_calls)
    }

    /// The answer: `text` and what the rounds added.
    fn into_answer(
        self,
        text: String,
        usage: ReplyUsage,
        finish_reason: Option<String>,
        model: Option<String>,
        client_calls: Vec<ToolCall>,
    ) -> Answer {
        Answer {
            entries: self.entries,
            text,
            steered: self.steered,
            usage,
            finish_reason,
            model,
            client_calls,
        }
    }

    /// Adds a round of tool calls (`reply`) and the `outputs` of the registered tools to the
    /// request and the transcript; returns the calls of client tools, which have no output yet.
    fn add_round(
        &mut self,
        reply: &ModelReply,
        outputs: Vec<String>,
        client_tools: &[ToolSpec],
    ) -> Vec<ToolCall> {
        let calls = &reply.tool_calls;
        let now = now_ms();
        for (i, call) in calls.iter().enumerate() {
            let text = if i == 0 { reply.text.as_str() } else { "" };
            let tokens = self.tokens.count(text)
                + self.tokens.count(&call.name)
                + self.tokens.count(&call.arguments);
            self.prompt_tokens = self
                .prompt_tokens
                .saturating_add(tokens + MESSAGE_OVERHEAD_TOKENS);
            let info = ToolInfo {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            };
            self.entries
                .push(TranscriptEntry::tool_call(text, tokens, now, info));
        }
        self.request.messages.push(call_message(&reply.text, calls));
        let client_calls: Vec<ToolCall> = calls
            .iter()
            .filter(|c| is_client(client_tools, c))
            .cloned()
            .collect();
        for (call, output) in calls.iter().zip(outputs) {
            if is_client(client_tools, call) {
                continue;
            }
            let tokens = self.tokens.count(&output);
            self.prompt_tokens = self
                .prompt_tokens
                .saturating_add(tokens + MESSAGE_OVERHEAD_TOKENS);
            self.results.push((call.id.clone(), tokens, self.round));
            self.request
                .messages
                .push(result_message(&call.id, &output));
            self.entries.push(TranscriptEntry::tool_result(
                output,
                tokens,
                now,
                call.id.clone(),
                call.name.clone(),
            ));
        }
        client_calls
    }

    /// Over budget: clears this turn's older tool results in the request, oldest first (the
    /// newest round's results stay, the model has not seen them yet).
    fn clear_older_results(&mut self) {
        let cleared = self.tokens.count_recurring(CLEARED_TOOL_RESULT);
        for (id, tokens, r) in self.results.iter_mut() {
            if self.prompt_tokens <= self.budget.total {
                break;
            }
            if *r == self.round || *tokens <= cleared {
                continue;
            }
            let found = self
                .request
                .messages
                .iter_mut()
                .rev()
                .find(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(id));
            if let Some(m) = found {
                m.content = CLEARED_TOOL_RESULT.into();
                self.prompt_tokens -= *tokens - cleared;
                *tokens = cleared;
            }
        }
    }
}
