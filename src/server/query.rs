//! Query strings, strictly: axum's `Query` decodes percent-escapes lossily, so `?after=%FF`
//! became a cursor of U+FFFD and a `200` for a request that means nothing. [`StrictQuery`]
//! answers `400 invalid_query` when a name or value does not decode to UTF-8, then
//! deserializes as `Query` does.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A query string deserialized into `T`, refused unless every part decodes to UTF-8.
#[derive(Debug)]
pub(super) struct StrictQuery<T>(pub(super) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let raw = parts.uri.query().unwrap_or("");
        check_utf8(raw)?;
        axum::extract::Query::try_from_uri(&parts.uri)
            .map(|q| StrictQuery(q.0))
            .map_err(|e| ApiError::bad_request("bad_request", e.body_text()))
    }
}

/// `Err` naming the first `name=value` part whose percent-decoded bytes are not UTF-8.
fn check_utf8(raw: &str) -> Result<(), ApiError> {
    for part in raw.split('&') {
        for (i, side) in part.splitn(2, '=').enumerate() {
            if std::str::from_utf8(&percent_decode(side)).is_err() {
                let name = part.split('=').next().unwrap_or_default();
                let what = if i == 0 {
                    "a parameter name"
                } else {
                    "the value"
                };
                return Err(ApiError::bad_request(
                    "bad_request",
                    format!("{what} of query parameter {name:?} is not UTF-8 once decoded"),
                )
                .with_param(name.to_string()));
            }
        }
    }
    Ok(())
}

/// `%XX` escapes decoded (a `%` not followed by two hex digits is kept, as browsers send it).
pub(super) fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_that_are_not_utf8_are_refused_and_the_rest_pass() {
        assert!(check_utf8("after=%FF").is_err());
        assert!(check_utf8("session_key=a%C3").is_err());
        assert!(check_utf8("%FF=1").is_err());
        assert!(check_utf8("").is_ok());
        assert!(check_utf8("after=agent%3Amain%3Ax&limit=5").is_ok());
        assert!(check_utf8("q=%C3%A9t%C3%A9+ok&x=100%").is_ok());
        assert_eq!(percent_decode("a%2Fb%zz%4"), b"a/b%zz%4".to_vec());
    }
}
