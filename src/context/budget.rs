//! The token budget of one turn.

use serde::Serialize;

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
}
