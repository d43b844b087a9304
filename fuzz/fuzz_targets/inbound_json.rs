//! Inbound JSON: parsing and validating an `InboundMessage` from arbitrary bytes must never
//! panic, and whatever validates must survive a round trip through the store's codec.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::config::LimitsConfig;
use turnstile::inbound::InboundMessage;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = serde_json::from_slice::<InboundMessage>(data) else {
        return;
    };
    let Ok(valid) = message.validated(&LimitsConfig::default(), 1_764_470_000_000) else {
        return;
    };
    let bytes = turnstile::store::encode(&valid).expect("a valid message encodes");
    let back: InboundMessage = turnstile::store::decode("fuzz", &bytes).expect("and decodes");
    assert_eq!(back, valid);
});
