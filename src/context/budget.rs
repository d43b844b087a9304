//! The token budget of one turn.

use serde::Serialize;

/// The answer's reserve is at most `1 / OUTPUT_RESERVE_WINDOW_DIVISOR` of the window: a
/// `context.reserve_output_tokens` sized for a large model (4,096) would otherwise take all of
/// a small one's window (2,048) and leave the prompt nothing.
pub(crate) const OUTPUT_RESERVE_WINDOW_DIVISOR: u32 = 4;

/// The context budget never falls below this many tokens (or the profile's `max_tokens`, if
/// smaller): a budget of 0 would send the user's message as a bare cut marker. A real window
/// smaller than that is the server's to refuse, and the overflow path (compact, retry, error
/// reply) handles it.
pub(crate) const MIN_CONTEXT_BUDGET_TOKENS: u32 = 128;

/// The token budget of one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokenBudget {
    /// Tokens the context may use: min(profile max_tokens, context window − reserved).
    pub total: u32,
    /// Tokens reserved for the answer.
    pub reserved: u32,
    /// Tokens used by kept blocks.
    pub used: u32,
}

impl TokenBudget {
    /// The budget for a profile allowing `max_tokens` and a model with `context_window` tokens,
    /// `reserved` of which are kept for the answer.
    pub fn new(max_tokens: u32, context_window: u32, reserved: u32) -> Self {
        Self {
            total: max_tokens.min(context_window.saturating_sub(reserved)),
            reserved,
            used: 0,
        }
    }

    /// The budget for a model whose window is `context_window` tokens, with the answer's
    /// reserve shrunk to fit small windows: `reserved = min(reserve_output_tokens,
    /// context_window / OUTPUT_RESERVE_WINDOW_DIVISOR)`, `total = min(max_tokens,
    /// context_window − reserved)`, but at least [`MIN_CONTEXT_BUDGET_TOKENS`] (capped at
    /// `max_tokens`).
    pub fn for_window(max_tokens: u32, context_window: u32, reserve_output_tokens: u32) -> Self {
        let reserved = reserve_output_tokens.min(context_window / OUTPUT_RESERVE_WINDOW_DIVISOR);
        let floor = MIN_CONTEXT_BUDGET_TOKENS.min(max_tokens);
        let mut budget = Self::new(max_tokens, context_window, reserved);
        budget.total = budget.total.max(floor);
        budget
    }

    /// Tokens still free.
    pub fn remaining(&self) -> u32 {
        self.total.saturating_sub(self.used)
    }

    /// True when `tokens` more still fit.
    pub fn fits(&self, tokens: u32) -> bool {
        tokens <= self.remaining()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_is_min_of_profile_and_window() {
        assert_eq!(TokenBudget::new(32_000, 8_192, 1_024).total, 7_168);
        assert_eq!(TokenBudget::new(4_000, 128_000, 4_096).total, 4_000);
        assert_eq!(TokenBudget::new(4_000, 100, 4_096).total, 0);
        let mut b = TokenBudget::new(10, 100, 0);
        b.used = 7;
        assert_eq!(b.remaining(), 3);
        assert!(b.fits(3) && !b.fits(4));
    }

    #[test]
    fn the_reserve_shrinks_to_fit_small_windows() {
        // A large window keeps the configured reserve.
        let big = TokenBudget::for_window(32_000, 128_000, 4_096);
        assert_eq!((big.total, big.reserved), (32_000, 4_096));
        // SmolLM2 with -c 2048: a quarter of the window is reserved, the rest is the prompt's.
        let small = TokenBudget::for_window(32_000, 2_048, 4_096);
        assert_eq!((small.total, small.reserved), (1_536, 512));
        // A reserve smaller than a quarter is kept as configured.
        let modest = TokenBudget::for_window(32_000, 2_048, 256);
        assert_eq!((modest.total, modest.reserved), (1_792, 256));
        // A 1,000-token window no longer drives the budget to 0.
        let tiny = TokenBudget::for_window(32_000, 1_000, 4_096);
        assert_eq!((tiny.total, tiny.reserved), (750, 250));
    }

    #[test]
    fn the_budget_never_falls_below_the_floor() {
        let b = TokenBudget::for_window(32_000, 0, 4_096);
        assert_eq!((b.total, b.reserved), (MIN_CONTEXT_BUDGET_TOKENS, 0));
        let b = TokenBudget::for_window(32_000, 100, 4_096);
        assert_eq!(b.total, MIN_CONTEXT_BUDGET_TOKENS);
        // A profile asking for less than the floor gets what it asked for.
        assert_eq!(TokenBudget::for_window(50, 100, 4_096).total, 50);
    }
}
