//! Stored values: bincode 2 behind a one-byte format version, so the layout can change with a
//! migration instead of a corrupt read.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;

/// The format version written in front of every value.
pub(crate) const VALUE_VERSION: u8 = 1;

/// The largest value decoded or encoded. A stored value is at most a few hundred KB (texts are
/// capped at admission); the limit makes a corrupt length prefix an error instead of an
/// attempt to allocate it (found by the `stored_value` fuzz target).
pub(crate) const MAX_VALUE_BYTES: usize = 16 << 20;

fn config() -> bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_VALUE_BYTES>,
> {
    bincode::config::standard().with_limit::<MAX_VALUE_BYTES>()
}

/// Encodes `value` with the version byte in front.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![VALUE_VERSION];
    bincode::serde::encode_into_std_write(value, &mut out, config())
        .map_err(|e| StoreError::Encode(e.to_string()))?;
    Ok(out)
}

/// Decodes a value written by [`encode`]; anything else is a clear error, never a panic.
pub(crate) fn decode<T: DeserializeOwned>(
    tree: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    let (version, body) = bytes.split_first().ok_or_else(|| StoreError::Decode {
        tree,
        reason: "empty value".into(),
    })?;
    if *version != VALUE_VERSION {
        return Err(StoreError::Decode {
            tree,
            reason: format!("unknown value version {version}"),
        });
    }
    let (value, used) =
        bincode::serde::decode_from_slice(body, config()).map_err(|e| StoreError::Decode {
            tree,
            reason: e.to_string(),
        })?;
    if used != body.len() {
        return Err(StoreError::Decode {
            tree,
            reason: format!("{} trailing bytes", body.len() - used),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let v = (7u64, "hé".to_string(), Some(3u32));
        let bytes = encode(&v).unwrap();
        assert_eq!(
            decode::<(u64, String, Option<u32>)>("t", &bytes).unwrap(),
            v
        );
        assert!(decode::<(u64, String)>("t", &[]).is_err());
        assert!(decode::<(u64, String)>("t", &[9, 1, 2]).is_err());
        assert!(decode::<(u64, String)>("t", &[1, 0xff, 0xff, 0xff]).is_err());
        // A length prefix claiming ~3 EB: an error, not an allocation (fuzzer finding).
        let huge = [1u8, 0, 0xfd, 0, 0x70, 0x70, 0x70, 0x70, 0x70, 0x70, 0x2a];
        assert!(decode::<crate::store::TranscriptEntry>("t", &huge).is_err());
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode::<(u64, String, Option<u32>)>("t", &long).is_err());
    }
}
