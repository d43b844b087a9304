//! Stored values: decoding arbitrary bytes as any stored record must return an error or a
//! value, never panic or allocate without bound; a decoded value survives a round trip
//! (bincode accepts non-minimal varints, so the bytes themselves may differ).
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::store::{decode, encode, InboxRecord, SessionRecord, TranscriptEntry};

fn check<T>(data: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(value) = decode::<T>("fuzz", data) {
        let again = encode(&value).expect("a decoded value encodes");
        let back: T = decode("fuzz", &again).expect("and decodes again");
        assert_eq!(back, value, "round trip");
    }
}

fuzz_target!(|data: &[u8]| {
    check::<SessionRecord>(data);
    check::<TranscriptEntry>(data);
    check::<InboxRecord>(data);
});
