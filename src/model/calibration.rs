//! Per-model calibration: what a model's server really counts, learned from its answers.
//!
//! Budgets are computed with tiktoken, but local models use other tokenizers, and a configured
//! context window may be wrong. Two things are learned per model name:
//! - the **ratio** of the server's prompt tokens to ours, from `usage.prompt_tokens` and from
//!   overflow errors that state the prompt size; smoothed and clamped to
//!   [`MIN_RATIO`]..=[`MAX_RATIO`] so one odd answer cannot wreck budgets;
//! - the **real context window**, from overflow errors that state it. A stated window below
//!   [`MIN_PLAUSIBLE_WINDOW`] is logged and ignored (no chat model works in less, so the text
//!   was misread or the server is broken), and a successful call whose prompt alone was larger
//!   than the learned window proves it wrong: it is forgotten.
//!
//! Everything is keyed by the model that answered: what one model teaches never changes the
//! budget of another.
//!
//! [`CalibrationStore::effective_window`] turns a configured window into one in our tokens.
//! The store is in memory (it re-learns after a restart in a few turns), bounded to
//! [`MAX_CALIBRATED_MODELS`] models, and a cheap-clone handle.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;

use crate::error::ModelError;

/// Most models remembered; the least recently updated is forgotten first.
pub(crate) const MAX_CALIBRATED_MODELS: usize = 256;

/// Smallest ratio (server tokens per our token) believed.
pub(crate) const MIN_RATIO: f64 = 0.5;

/// Largest ratio believed.
pub(crate) const MAX_RATIO: f64 = 3.0;

/// Weight of a new sample in the smoothed ratio (exponential moving average).
pub(crate) const RATIO_SMOOTHING: f64 = 0.3;

/// Prompts smaller than this (in our tokens) teach nothing about the ratio: the chat template's
/// fixed overhead dominates them.
pub(crate) const MIN_SAMPLE_TOKENS: u32 = 64;

/// Smallest context window (server tokens) an overflow error is believed to state. Below it
/// the statement is ignored: believing it would starve every session of the model.
pub(crate) const MIN_PLAUSIBLE_WINDOW: u32 = 256;

/// What is known about one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// The real context window in server tokens, when an error stated it.
    pub window: Option<u32>,
    /// Server tokens per our token (1.0 until a sample arrives).
    pub ratio: f64,
    /// Ratio samples taken.
    pub samples: u32,
}

impl Default for Calibration {
    fn default() -> Self {
        Self {
            window: None,
            ratio: 1.0,
            samples: 0,
        }
    }
}

/// Model name → calibration, least recently updated first (reads only peek). hashbrown's
/// default (foldhash) hasher: model names come from the configuration.
type Models = LruCache<String, Calibration>;

/// The calibration of every model in use. Clones share the same store.
#[derive(Clone)]
pub struct CalibrationStore {
    // A std mutex: every critical section is a few map operations, never across an await.
    inner: Arc<Mutex<Models>>,
}

impl std::fmt::Debug for CalibrationStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CalibrationStore")
            .field("models", &self.len())
            .finish()
    }
}

impl Default for CalibrationStore {
    fn default() -> Self {
        Self::new()
    }
}

impl CalibrationStore {
    /// An empty store holding at most [`MAX_CALIBRATED_MODELS`] models.
    pub fn new() -> Self {
        Self::with_capacity(MAX_CALIBRATED_MODELS)
    }

    /// An empty store holding at most `capacity` models (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            inner: Arc::new(Mutex::new(LruCache::new(capacity))),
        }
    }

    fn update(&self, model: &str, change: impl FnOnce(&mut Calibration)) {
        let mut models = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        change(models.get_or_insert_mut_ref(model, Calibration::default));
    }

    fn sample(calibration: &mut Calibration, ours: u32, server: u32) {
        if ours < MIN_SAMPLE_TOKENS || server == 0 {
            return;
        }
        let sample = (f64::from(server) / f64::from(ours)).clamp(MIN_RATIO, MAX_RATIO);
        calibration.ratio = if calibration.samples == 0 {
            sample
        } else {
            calibration.ratio + RATIO_SMOOTHING * (sample - calibration.ratio)
        }
        .clamp(MIN_RATIO, MAX_RATIO);
        calibration.samples = calibration.samples.saturating_add(1);
    }

    /// Learns from a successful call: we counted `our_tokens` for the prompt, the server
    /// reported `reported_tokens`. A prompt the server accepted that is larger than the
    /// learned window shows that window was wrong: it is forgotten.
    pub fn record_usage(&self, model: &str, our_tokens: u32, reported_tokens: u32) {
        if reported_tokens == 0 {
            return;
        }
        let disproves_window = self
            .get(model)
            .and_then(|c| c.window)
            .is_some_and(|w| reported_tokens > w);
        if our_tokens < MIN_SAMPLE_TOKENS && !disproves_window {
            return;
        }
        self.update(model, |c| {
            if c.window.is_some_and(|w| reported_tokens > w) {
                tracing::info!(
                    model,
                    learned = c.window,
                    accepted = reported_tokens,
                    "the server accepted a prompt larger than the learned window; forgetting it"
                );
                c.window = None;
            }
            Self::sample(c, our_tokens, reported_tokens);
        });
    }

    /// Learns from an overflow error: the window it states (`limit`) and the prompt size the
    /// server counted (`prompt_tokens`) for a prompt of `our_tokens`. An error stating neither
    /// teaches nothing: it may have overflowed because of the reserved answer tokens.
    pub fn record_overflow(
        &self,
        model: &str,
        our_tokens: u32,
        limit: Option<u32>,
        prompt_tokens: Option<u32>,
    ) {
        let limit = limit.filter(|l| {
            let plausible = *l >= MIN_PLAUSIBLE_WINDOW;
            if !plausible {
                tracing::warn!(
                    model,
                    stated = *l,
                    min = MIN_PLAUSIBLE_WINDOW,
                    "an overflow error states an implausibly small context window; ignoring it"
                );
            }
            plausible
        });
        if limit.is_none() && prompt_tokens.is_none() {
            return;
        }
        self.update(model, |c| {
            if let Some(limit) = limit {
                c.window = Some(limit);
            }
            if let Some(server) = prompt_tokens {
                Self::sample(c, our_tokens, server);
            }
        });
    }

    /// Learns from any model error (only overflows teach something).
    pub fn record_error(&self, model: &str, our_tokens: u32, error: &ModelError) {
        if let ModelError::ContextOverflow {
            limit,
            prompt_tokens,
            ..
        } = error
        {
            self.record_overflow(model, our_tokens, *limit, *prompt_tokens);
        }
    }

    /// What is known about `model`.
    pub fn get(&self, model: &str) -> Option<Calibration> {
        let models = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        models.peek(model).copied()
    }

    /// Server tokens per our token for `model` (1.0 when unknown).
    pub fn ratio(&self, model: &str) -> f64 {
        self.get(model).map_or(1.0, |c| c.ratio)
    }

    /// Our estimate of what the server will count for a prompt we counted as `our_tokens`.
    pub fn scale(&self, model: &str, our_tokens: u32) -> u32 {
        to_u32(f64::from(our_tokens) * self.ratio(model))
    }

    /// The context window of `model` in *our* tokens: the configured window (in the server's
    /// tokens), lowered to the learned real window, divided by the ratio; never above
    /// `configured`, so a server that counts fewer tokens than we do cannot raise a budget
    /// past what the operator set.
    pub fn effective_window(&self, model: &str, configured: u32) -> u32 {
        let calibration = self.get(model).unwrap_or_default();
        let server_window = calibration.window.map_or(configured, |w| w.min(configured));
        to_u32(f64::from(server_window) / calibration.ratio).min(configured)
    }

    /// Models currently remembered.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn to_u32(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else if x >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        x.floor() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_models_pass_budgets_through() {
        let store = CalibrationStore::new();
        assert_eq!(store.effective_window("m", 8_000), 8_000);
        assert_eq!(store.scale("m", 1_000), 1_000);
        assert!(store.get("m").is_none());
        assert!(store.is_empty());
    }

    #[test]
    fn usage_teaches_a_smoothed_ratio() {
        let store = CalibrationStore::new();
        store.record_usage("llama", 1_000, 1_200);
        assert!((store.ratio("llama") - 1.2).abs() < 1e-9);
        store.record_usage("llama", 1_000, 1_500);
        let expected = 1.2 + RATIO_SMOOTHING * (1.5 - 1.2);
        assert!((store.ratio("llama") - expected).abs() < 1e-9);
        assert_eq!(store.get("llama").unwrap().samples, 2);
        assert_eq!(store.scale("llama", 1_000), (1_000.0 * expected) as u32);
        assert_eq!(
            store.effective_window("llama", 10_000),
            (10_000.0 / expected) as u32
        );
        // Other models are unaffected.
        assert_eq!(store.ratio("gpt"), 1.0);
    }

    #[test]
    fn odd_samples_are_clamped_or_ignored() {
        let store = CalibrationStore::new();
        store.record_usage("m", 1_000, 100_000);
        assert_eq!(store.ratio("m"), MAX_RATIO);
        store.record_usage("tiny", 10, 900);
        assert!(store.get("tiny").is_none(), "small prompts teach nothing");
        store.record_usage("zero", 1_000, 0);
        assert!(store.get("zero").is_none());
        store.record_usage("low", 1_000, 1);
        assert_eq!(store.ratio("low"), MIN_RATIO);
        // A low ratio never raises the window past the configured one.
        assert_eq!(store.effective_window("low", 8_000), 8_000);
    }

    #[test]
    fn overflow_teaches_the_real_window() {
        let store = CalibrationStore::new();
        let error = ModelError::ContextOverflow {
            message: "too long".into(),
            limit: Some(4_096),
            prompt_tokens: Some(5_000),
        };
        store.record_error("local", 4_000, &error);
        let c = store.get("local").unwrap();
        assert_eq!(c.window, Some(4_096));
        assert!((c.ratio - 1.25).abs() < 1e-9);
        assert_eq!(store.effective_window("local", 128_000), 3_276);
        // A larger configured window is lowered; a smaller one stays the cap.
        assert_eq!(store.effective_window("local", 2_000), 1_600);
        // An overflow that states nothing teaches nothing; other errors neither.
        store.record_overflow("other", 4_000, None, None);
        store.record_error("other", 4_000, &ModelError::Cancelled);
        assert!(store.get("other").is_none());
    }

    #[test]
    fn a_learned_window_applies_to_its_model_only() {
        let store = CalibrationStore::new();
        store.record_overflow("small", 2_000, Some(1_000), None);
        assert_eq!(store.effective_window("small", 128_000), 1_000);
        assert_eq!(store.effective_window("big", 128_000), 128_000);
        assert!(store.get("big").is_none());
    }

    #[test]
    fn implausibly_small_stated_windows_are_ignored() {
        let store = CalibrationStore::new();
        store.record_overflow("m", 2_000, Some(MIN_PLAUSIBLE_WINDOW - 1), None);
        assert!(store.get("m").is_none(), "nothing else was stated");
        assert_eq!(store.effective_window("m", 8_000), 8_000);
        store.record_overflow("m", 2_000, Some(5), Some(2_400));
        let c = store.get("m").unwrap();
        assert_eq!(c.window, None, "the tiny limit is ignored");
        assert_eq!(c.samples, 1, "the prompt size still teaches the ratio");
        store.record_overflow("m", 2_000, Some(MIN_PLAUSIBLE_WINDOW), None);
        assert_eq!(store.get("m").unwrap().window, Some(MIN_PLAUSIBLE_WINDOW));
    }

    #[test]
    fn an_accepted_larger_prompt_disproves_the_learned_window() {
        let store = CalibrationStore::new();
        store.record_overflow("m", 900, Some(1_000), None);
        assert_eq!(store.effective_window("m", 8_000), 1_000);
        store.record_usage("m", 900, 900);
        assert_eq!(
            store.get("m").unwrap().window,
            Some(1_000),
            "within it: kept"
        );
        // Even a prompt too small to sample the ratio disproves it.
        store.record_usage("m", 40, 1_500);
        assert_eq!(store.get("m").unwrap().window, None);
        assert_eq!(
            store.get("m").unwrap().samples,
            1,
            "the small prompt taught no ratio"
        );
    }

    #[test]
    fn bounded_with_least_recently_updated_evicted() {
        let store = CalibrationStore::with_capacity(2);
        store.record_usage("a", 100, 100);
        store.record_usage("b", 100, 100);
        store.record_usage("a", 100, 100);
        store.record_usage("c", 100, 100);
        assert_eq!(store.len(), 2);
        assert!(store.get("a").is_some() && store.get("c").is_some());
        assert!(store.get("b").is_none());
        let clone = store.clone();
        clone.record_usage("d", 100, 100);
        assert!(store.get("d").is_some(), "clones share one store");
    }
}
