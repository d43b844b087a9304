//! [`Summarizer`]: summarises a transcript span with the configured model, chunk by chunk,
//! retrying failed calls, and falls back to the built-in extractive summariser when no model
//! is configured or the model keeps failing. Every summary, whoever wrote it, ends with the
//! fact-retention check and the `summary_max_tokens` cap.
//!
//! Token counting, identifier extraction and extractive ranking are CPU work on spans of tens
//! of thousands of tokens, so they run on tokio's blocking pool, not on the caller's task.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::compaction::extractive::ExtractiveSummarizer;
use crate::compaction::prompt;
use crate::compaction::retention::{self, Retained};
use crate::config::{CompactionConfig, Config};
use crate::error::{ConfigError, ModelError};
use crate::model::{Encoding, Model, OpenAiModel, OpenAiSettings, TokenCounter};

/// First pause before retrying a failed summariser call; doubles per retry.
pub(crate) const SUMMARY_RETRY_DELAY: Duration = Duration::from_millis(250);

/// How a summary was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SummaryMethod {
    /// By the summariser model, in `chunks` calls.
    Model {
        /// The model's name.
        name: String,
        /// Calls made (one per chunk).
        chunks: usize,
    },
    /// By the built-in extractive summariser.
    Extractive {
        /// Why no model summary was used.
        reason: FallbackReason,
    },
}

/// Why the extractive summariser was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FallbackReason {
    /// No summariser model is configured.
    NoModel,
    /// The span needs more than [`prompt::MAX_CHUNKS`] chunks.
    TooLarge,
    /// The model failed after its retries; the last error.
    ModelFailed(String),
}

/// A finished summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The text, ending with the `Exact identifiers` list when one was needed.
    pub text: String,
    /// Its tokens.
    pub tokens: u32,
    /// Who wrote it.
    pub method: SummaryMethod,
    /// Identifiers the retention check appended.
    pub restored_identifiers: usize,
    /// Identifiers left out because the list alone exceeded `summary_max_tokens`.
    pub omitted_identifiers: usize,
    /// Whether the body was cut to fit `summary_max_tokens`.
    pub truncated: bool,
}

impl Summary {
    fn new(retained: Retained, method: SummaryMethod) -> Self {
        Self {
            text: retained.text,
            tokens: retained.tokens,
            method,
            restored_identifiers: retained.restored,
            omitted_identifiers: retained.omitted,
            truncated: retained.truncated,
        }
    }
}

/// A summary could not be produced at all (the blocking worker died).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum SummarizeError {
    /// The blocking task running the CPU work panicked or was cancelled.
    #[error("summariser worker failed: {0}")]
    Worker(String),
}

/// Summarises transcript spans. Cheap to share behind an `Arc`.
pub(crate) struct Summarizer {
    model: Option<Arc<dyn Model>>,
    counter: TokenCounter,
    summary_max_tokens: u32,
    chunk_tokens: u32,
    max_retries: u32,
    retry_delay: Duration,
    /// The model's context window as an overflow error stated it (0: not known yet). Chunks
    /// are cut to fit it, so a small model is not sent a request it must refuse every time.
    window: AtomicU32,
}

/// Tokens of a summariser request besides its chunk and the previous summary: the
/// instructions and message framing.
const PROMPT_OVERHEAD_TOKENS: u32 = 256;
/// Smallest chunk worth a model call; in a smaller window the extractive summariser writes.
const MIN_CHUNK_TOKENS: u32 = 256;

impl std::fmt::Debug for Summarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarizer")
            .field("model", &self.model.as_ref().map(|m| m.name().to_string()))
            .field("summary_max_tokens", &self.summary_max_tokens)
            .field("chunk_tokens", &self.chunk_tokens)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

impl Summarizer {
    /// A summariser using `model` (or only the extractive one when `None`), with the limits of
    /// `config`, counting tokens with `counter`.
    pub(crate) fn new(
        model: Option<Arc<dyn Model>>,
        config: &CompactionConfig,
        counter: TokenCounter,
    ) -> Self {
        Self {
            model,
            counter,
            summary_max_tokens: config.summary_max_tokens,
            chunk_tokens: config.chunk_tokens,
            max_retries: config.max_retries,
            retry_delay: SUMMARY_RETRY_DELAY,
            window: AtomicU32::new(0),
        }
    }

    /// The chunk size that fits the model's known window beside the previous summary and the
    /// answer (each at most `summary_max_tokens`); `None` when nothing fits.
    fn fitting_chunk_tokens(&self) -> Option<u32> {
        match self.window.load(Ordering::Relaxed) {
            0 => Some(self.chunk_tokens),
            window => {
                let room = window
                    .saturating_sub(self.summary_max_tokens.saturating_mul(2))
                    .saturating_sub(PROMPT_OVERHEAD_TOKENS);
                (room >= MIN_CHUNK_TOKENS).then(|| room.min(self.chunk_tokens))
            }
        }
    }

    /// The token counter it measures summaries with.
    pub(crate) fn counter(&self) -> TokenCounter {
        self.counter
    }

    /// The summariser `config` describes: `[compaction] model` (by default the answering
    /// model of a real server) on the `[model]` server, or the extractive one. Tokens are counted like the answering model's, since summaries go into
    /// its context. The client does not retry by itself: the summariser retries whole calls.
    pub(crate) fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let counter = TokenCounter::new(Encoding::for_model(&config.model.model));
        let model: Option<Arc<dyn Model>> =
            if let Some(name) = config.compaction.summarizer_model(&config.model) {
                let mut settings = OpenAiSettings::from_config(&config.model);
                settings.model = name;
                settings.fallbacks = Vec::new();
                settings.max_retries = 0;
                Some(Arc::new(OpenAiModel::new(settings)?))
            } else {
                None
            };
        Ok(Self::new(model, &config.compaction, counter))
    }

    /// Uses `delay` as the first pause between retries (tests use zero).
    #[cfg(test)]
    pub(crate) fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The summariser model's name, if one is configured.
    #[cfg(test)]
    pub(crate) fn model_name(&self) -> Option<&str> {
        self.model.as_ref().map(|m| m.name())
    }

    /// Summarises `span`, rolling `previous` (the last summary) forward. Never fails because of
    /// the model: without a usable model answer, the extractive summariser writes it.
    pub(crate) async fn summarize(
        &self,
        span: &str,
        previous: Option<&str>,
    ) -> Result<Summary, SummarizeError> {
        let reason = match &self.model {
            None => FallbackReason::NoModel,
            Some(model) => match self.with_model(model.as_ref(), span, previous).await? {
                Ok(summary) => return Ok(summary),
                Err(reason) => {
                    tracing::warn!(
                        model = model.name(),
                        ?reason,
                        "summariser model unusable; using the extractive summariser"
                    );
                    reason
                }
            },
        };
        let (span, previous) = (span.to_string(), previous.map(str::to_string));
        let (counter, max) = (self.counter, self.summary_max_tokens);
        let retained = blocking(move || {
            ExtractiveSummarizer::new(counter).summarize(&span, previous.as_deref(), max)
        })
        .await?;
        Ok(Summary::new(retained, SummaryMethod::Extractive { reason }))
    }

    /// The model path: chunk, summarise each chunk onto the previous summary, then check
    /// retention. The outer error is a dead worker; the inner one says why to fall back.
    async fn with_model(
        &self,
        model: &dyn Model,
        span: &str,
        previous: Option<&str>,
    ) -> Result<Result<Summary, FallbackReason>, SummarizeError> {
        let Some(chunk_tokens) = self.fitting_chunk_tokens() else {
            return Ok(Err(FallbackReason::TooLarge));
        };
        let (owned_span, counter) = (span.to_string(), self.counter);
        let Some(chunks) =
            blocking(move || prompt::chunks(&owned_span, chunk_tokens, &counter)).await?
        else {
            return Ok(Err(FallbackReason::TooLarge));
        };
        let count = chunks.len();
        let mut rolling = previous.map(str::to_string);
        for (index, chunk) in chunks.iter().enumerate() {
            let request = prompt::request(
                chunk,
                rolling.as_deref(),
                (index, count),
                self.summary_max_tokens,
                &self.counter,
            );
            match self.call(model, &request).await {
                Ok(text) => rolling = Some(text),
                Err(e) => {
                    // Next time, chunks fit the window the server stated.
                    if let ModelError::ContextOverflow {
                        limit: Some(limit), ..
                    } = &e
                    {
                        self.window.store(*limit, Ordering::Relaxed);
                    }
                    return Ok(Err(FallbackReason::ModelFailed(e.to_string())));
                }
            }
        }
        let summary = rolling.unwrap_or_default();
        let sources = (span.to_string(), previous.map(str::to_string));
        let (counter, max) = (self.counter, self.summary_max_tokens);
        let retained = blocking(move || {
            let mut texts = vec![sources.0.as_str()];
            texts.extend(sources.1.as_deref());
            retention::enforce(&texts, &summary, max, &counter)
        })
        .await?;
        Ok(Ok(Summary::new(
            retained,
            SummaryMethod::Model {
                name: model.name().to_string(),
                chunks: count,
            },
        )))
    }

    /// One summariser call, retried up to `max_retries` times. An overflow, billing error or
    /// cancellation is not retried: the same request cannot succeed.
    async fn call(
        &self,
        model: &dyn Model,
        request: &crate::model::ModelRequest,
    ) -> Result<String, ModelError> {
        let mut retry = 0u32;
        loop {
            let error = match model.complete(request).await {
                Ok(reply) => {
                    let text = strip_reasoning(&reply.text).trim().to_string();
                    if !text.is_empty() {
                        return Ok(text);
                    }
                    ModelError::Protocol("the summariser answered with nothing".into())
                }
                Err(e) => e,
            };
            let hopeless = matches!(
                error,
                ModelError::ContextOverflow { .. }
                    | ModelError::Billing { .. }
                    | ModelError::Cancelled
            );
            if hopeless || retry >= self.max_retries {
                return Err(error);
            }
            let pause = self
                .retry_delay
                .saturating_mul(2u32.saturating_pow(retry.min(16)));
            tracing::debug!(retry, %error, "summariser call failed; retrying");
            tokio::time::sleep(pause).await;
            retry += 1;
        }
    }
}

/// Drops a `<think>…</think>` preamble that reasoning models put before their answer.
fn strip_reasoning(text: &str) -> &str {
    match text.rfind("</think>") {
        Some(at) => &text[at + "</think>".len()..],
        None => text,
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SummarizeError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SummarizeError::Worker(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::compaction::extractive::EXTRACTIVE_HEADER;
    use crate::compaction::identifiers::extract_all;
    use crate::model::{ModelReply, ModelRequest};

    /// A fake summariser model: answers from a script and records what it was asked.
    struct ScriptedModel {
        answers: Mutex<VecDeque<Result<String, ModelError>>>,
        seen: Mutex<Vec<ModelRequest>>,
    }

    impl ScriptedModel {
        fn new(answers: Vec<Result<String, ModelError>>) -> Arc<Self> {
            Arc::new(Self {
                answers: Mutex::new(answers.into()),
                seen: Mutex::new(Vec::new()),
            })
        }

        fn calls(&self) -> usize {
            self.seen.lock().unwrap().len()
        }
    }

    impl Model for ScriptedModel {
        fn name(&self) -> &str {
            "scripted-summariser"
        }

        fn complete<'a>(
            &'a self,
            request: &'a ModelRequest,
        ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
            self.seen.lock().unwrap().push(request.clone());
            let answer = self
                .answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Err(ModelError::Transport("script exhausted".into())));
            Box::pin(async move {
                answer.map(|text| ModelReply {
                    text,
                    ..ModelReply::default()
                })
            })
        }
    }

    const SPAN: &str = "user (Alice): Our build 5521 fails on src/main.rs line 88.\n\
        assistant: Known issue JIRA-301; the fix is in commit 4f2a9c1e. See https://git.example.com/pr/77.\n\
        user (Alice): Then we decided to pin serde to 1.0.197 until @dave reviews `Cargo.lock`.";

    fn summarizer(model: Option<Arc<dyn Model>>) -> Summarizer {
        Summarizer::new(
            model,
            &CompactionConfig::default(),
            TokenCounter::new(Encoding::Cl100k),
        )
        .with_retry_delay(Duration::ZERO)
    }

    fn assert_keeps_identifiers(summary: &Summary, sources: &[&str]) {
        for id in extract_all(sources) {
            assert!(
                id.appears_in(&summary.text),
                "{:?} lost in {}",
                id.text,
                summary.text
            );
        }
        assert!(summary.tokens <= CompactionConfig::default().summary_max_tokens);
    }

    #[tokio::test]
    async fn without_a_model_the_extractive_summariser_writes_it() {
        let s = summarizer(None);
        assert_eq!(s.model_name(), None);
        let summary = s.summarize(SPAN, None).await.unwrap();
        assert_eq!(
            summary.method,
            SummaryMethod::Extractive {
                reason: FallbackReason::NoModel
            }
        );
        assert!(summary.text.starts_with(EXTRACTIVE_HEADER));
        assert_keeps_identifiers(&summary, &[SPAN]);
    }

    #[tokio::test]
    async fn a_model_summary_gets_dropped_identifiers_back() {
        let model = ScriptedModel::new(vec![Ok(
            "<think>hmm</think>## Decisions\n- Pin serde until review.\n## Open TODOs\n- Review the lock file."
                .into(),
        )]);
        let summary = summarizer(Some(model.clone()))
            .summarize(SPAN, Some("Earlier: ticket T-9 opened."))
            .await
            .unwrap();
        assert_eq!(
            summary.method,
            SummaryMethod::Model {
                name: "scripted-summariser".into(),
                chunks: 1
            }
        );
        assert!(summary
            .text
            .starts_with("## Decisions\n- Pin serde until review."));
        assert!(
            summary.restored_identifiers >= 8,
            "{}",
            summary.restored_identifiers
        );
        assert_keeps_identifiers(&summary, &[SPAN, "T-9"]);
        let request = &model.seen.lock().unwrap()[0];
        assert!(request.messages[1]
            .content
            .contains("Earlier: ticket T-9 opened."));
        assert!(request.messages[0].content.contains("## Pending user asks"));
    }

    #[tokio::test]
    async fn retries_then_falls_back_to_extractive_when_the_model_keeps_failing() {
        let model = ScriptedModel::new(vec![
            Err(ModelError::Transport("refused".into())),
            Ok("   ".into()),
            Err(ModelError::Status {
                status: 500,
                message: "boom".into(),
            }),
            Err(ModelError::Transport("refused again".into())),
            Ok("too late".into()),
        ]);
        let summary = summarizer(Some(model.clone()))
            .summarize(SPAN, None)
            .await
            .unwrap();
        assert_eq!(model.calls(), 4, "one call and three retries");
        assert_eq!(
            summary.method,
            SummaryMethod::Extractive {
                reason: FallbackReason::ModelFailed("model transport error: refused again".into())
            }
        );
        assert_keeps_identifiers(&summary, &[SPAN]);
    }

    #[tokio::test]
    async fn an_overflow_is_not_retried() {
        let model = ScriptedModel::new(vec![Err(ModelError::ContextOverflow {
            message: "too long".into(),
            limit: Some(4096),
            prompt_tokens: None,
        })]);
        let summary = summarizer(Some(model.clone()))
            .summarize(SPAN, None)
            .await
            .unwrap();
        assert_eq!(model.calls(), 1);
        assert!(matches!(summary.method, SummaryMethod::Extractive { .. }));
    }

    #[tokio::test]
    async fn a_large_span_is_summarised_chunk_by_chunk() {
        let span: String = (0..400)
            .map(|i| {
                format!(
                    "user: step {i} of the migration is done, next is step {}.\n",
                    i + 1
                )
            })
            .collect();
        let model = ScriptedModel::new(
            (0..20)
                .map(|i| Ok(format!("## Decisions\n- summary {i}")))
                .collect(),
        );
        let config = CompactionConfig {
            chunk_tokens: 2_000,
            ..CompactionConfig::default()
        };
        let s = Summarizer::new(
            Some(model.clone()),
            &config,
            TokenCounter::new(Encoding::Cl100k),
        );
        let summary = s.summarize(&span, None).await.unwrap();
        let calls = model.calls();
        assert!(calls >= 3, "{calls} calls");
        assert_eq!(
            summary.method,
            SummaryMethod::Model {
                name: "scripted-summariser".into(),
                chunks: calls
            }
        );
        let seen = model.seen.lock().unwrap();
        assert!(!seen[0].messages[1].content.contains("<previous_summary>"));
        assert!(seen[1].messages[1]
            .content
            .contains("<previous_summary>\n## Decisions\n- summary 0\n</previous_summary>"));
        assert!(summary
            .text
            .starts_with(&format!("## Decisions\n- summary {}", calls - 1)));
        // 800 numbers do not all fit in 1,024 tokens: the cap holds and says what it left out.
        assert!(summary.tokens <= 1_024);
    }

    #[test]
    fn from_config_picks_the_summariser() {
        let s = Summarizer::from_config(&Config::default()).unwrap();
        assert_eq!(s.model_name(), None);
        let config = Config::parse(
            "[model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"big\"\n\
             [compaction]\nmodel = \"small\"\n",
        )
        .unwrap();
        let s = Summarizer::from_config(&config).unwrap();
        assert_eq!(s.model_name(), Some("small"));
    }
}
