//! The operator console: `/ui` (overview), `/ui/sessions` (list), `/ui/sessions/{key}` (one
//! session with the context inspector), served from assets compiled into the binary.
//!
//! The pages are one static shell plus one script and one stylesheet; the script fetches
//! every figure from the JSON API (`/v1/...`) with the API key as a bearer header. So the
//! shell and its assets hold no data and are answered without the key — a browser cannot send
//! a bearer header when it navigates — while every data request needs it as before. They do
//! pass the rate limiter (see `guard.rs`).
//!
//! The script builds the page with DOM calls and `textContent` only (never HTML strings), so
//! user text renders as text. Each response carries a `Content-Security-Policy` that allows
//! only the console's own script, stylesheet and API (no inline script or style, no other
//! origin, no framing).

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::AppState;

/// The policy of every console response: own assets and own API only.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// The HTML shell of every page (the script renders the page the path names).
const SHELL: Asset = Asset {
    name: "console.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("assets/console.html"),
};

/// `/`: where things are.
const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("assets/index.html"),
};

/// Files under `/ui/assets/`.
const ASSETS: &[Asset] = &[
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/console.js"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/console.css"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        body: include_str!("assets/icon.svg"),
    },
];

/// Bytes of every page's download: the shell plus each asset it loads.
#[cfg(test)]
fn page_weight_bytes() -> usize {
    SHELL.body.len() + ASSETS.iter().map(|a| a.body.len()).sum::<usize>()
}

/// True for paths that only serve embedded, data-free content (answered without the key).
pub(crate) fn is_public(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// The console's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|h: HeaderMap| async move { serve(&INDEX, &h) }))
        .route("/ui", get(shell))
        .route("/ui/", get(shell))
        .route("/ui/sessions", get(shell))
        .route("/ui/sessions/", get(shell))
        .route("/ui/sessions/{key}", get(shell))
        .route("/ui/assets/{name}", get(asset))
}

async fn shell(headers: HeaderMap) -> Response {
    serve(&SHELL, &headers)
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => serve(a, &headers),
        None => ApiError::not_found(format!("no console asset {name:?}")).into_response(),
    }
}

/// Answers `asset`, or `304` when the client already holds this build's copy.
fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = etag_of(asset);
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Revalidate on every load (cheap: a 304), so an upgraded binary's console is seen at once.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    response
}

/// A strong ETag per asset: a hash of its bytes, computed once.
fn etag_of(asset: &Asset) -> &'static str {
    static TAGS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .chain([&SHELL, &INDEX])
            .map(|a| (a.name, format!("\"{:016x}\"", fnv1a(a.body.as_bytes()))))
            .collect()
    });
    tags.iter()
        .find(|(name, _)| *name == asset.name)
        .map(|(_, tag)| tag.as_str())
        .unwrap_or("\"0\"")
}

/// FNV-1a, 64 bit: enough to tell two builds' assets apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_shell_names_is_embedded() {
        for (i, part) in SHELL.body.split("/ui/assets/").enumerate().skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
                .collect();
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "reference {i} to {name:?} is not embedded"
            );
        }
        assert!(SHELL.body.contains("/ui/assets/console.js"));
    }

    #[test]
    fn the_shell_has_no_inline_script_or_style() {
        // The CSP forbids them; a slip would silently break the page.
        for body in [SHELL.body, INDEX.body] {
            assert!(!body.contains("<script>"), "inline script");
            assert!(!body.contains("<style"), "inline style element");
            assert!(!body.contains("style="), "inline style attribute");
            // An attribute ` on<letters>=` is an inline event handler.
            for (at, _) in body.match_indices(" on") {
                let rest = &body[at + 3..];
                let name_len = rest.chars().take_while(|c| c.is_ascii_lowercase()).count();
                assert!(
                    !rest[name_len..].starts_with('='),
                    "inline event handler at byte {at}"
                );
            }
        }
    }

    #[test]
    fn public_paths_are_only_the_console() {
        for p in [
            "/",
            "/ui",
            "/ui/",
            "/ui/sessions",
            "/ui/sessions/a%3Ab",
            "/ui/assets/x",
        ] {
            assert!(is_public(p), "{p}");
        }
        for p in ["/v1/stats", "/uix", "/metrics", "/v1/sessions", "/u"] {
            assert!(!is_public(p), "{p}");
        }
    }

    #[test]
    fn the_console_stays_small() {
        // Loaded on every navigation (revalidated with a 304 after the first); README and
        // BENCHMARKS quote the figure.
        let kb = page_weight_bytes() as f64 / 1024.0;
        println!("console page weight: {kb:.1} KiB");
        assert!(kb < 64.0, "the console grew to {kb:.1} KiB");
    }

    #[test]
    fn etags_differ_between_assets() {
        let a = etag_of(&ASSETS[0]);
        let b = etag_of(&ASSETS[1]);
        assert_ne!(a, b);
        assert!(a.starts_with('"') && a.ends_with('"'));
    }
}
