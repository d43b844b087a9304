//! Provider rate limits: a 429 with `Retry-After` pauses the model for every session at once
//! (the shared per-model limiter), instead of each turn retrying alone into the same quota.
