//! How one model request travels. A plain `http://` endpoint that no proxy in the environment
//! intercepts (a local vLLM, Ollama or llama.cpp server, a sidecar) goes over hyper's pooled
//! keep-alive client directly; anything else (`https://`, a proxy from `HTTP_PROXY` and the
//! like) goes through reqwest, which brings TLS and proxies.
//!
//! Why two: reqwest's layers over the same hyper client (URL parsing twice per request in its
//! redirect policy and response, the proxy matcher, `Url` to `Uri`) cost about 7% of a whole
//! HTTP turn's instructions, measured with `benches/loadtest/http_instructions.sh`. The proxy
//! decision is hyper-util's own environment matcher, the one reqwest uses, so both paths
//! agree on which requests a proxy takes.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use reqwest::StatusCode;
use tokio::time::Instant;

use super::settings::OpenAiSettings;
use crate::error::{ConfigError, ModelError};

/// How long an idle pooled connection is kept (reqwest's default).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

const USER_AGENT_VALUE: &str = concat!("turnstile/", env!("CARGO_PKG_VERSION"));

/// The client for one model endpoint.
// One per model endpoint, built once: the size of hyper's client (larger since twilight-http
// turns on hyper-util's http2 in the tree) costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Transport {
    /// Plain HTTP, no proxy: hyper's pooled client.
    Direct {
        client: Client<HttpConnector, Full<Bytes>>,
        uri: hyper::Uri,
        /// The whole request, connect to the last body byte (as reqwest's `timeout`).
        timeout: Duration,
    },
    /// TLS or a proxy: reqwest.
    Reqwest {
        client: reqwest::Client,
        url: reqwest::Url,
    },
}

impl Transport {
    /// The transport for `endpoint`, an `http(s)://` URL already checked, given the proxies
    /// the environment sets (`Matcher::from_env()`, which reqwest reads too).
    pub(super) fn new(
        endpoint: &reqwest::Url,
        settings: &OpenAiSettings,
        proxies: &Matcher,
    ) -> Result<Self, ConfigError> {
        let uri: Option<hyper::Uri> = endpoint.as_str().parse().ok();
        let direct =
            uri.filter(|uri| uri.scheme_str() == Some("http") && proxies.intercept(uri).is_none());
        if let Some(uri) = direct {
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(settings.connect_timeout));
            connector.set_nodelay(true);
            let client = Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(settings.max_connections as usize)
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_timer(TokioTimer::new())
                .build(connector);
            return Ok(Self::Direct {
                client,
                uri,
                timeout: settings.timeout,
            });
        }
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.timeout)
            .user_agent(USER_AGENT_VALUE)
            .build()
            .map_err(|e| ConfigError::Invalid(format!("model: cannot build HTTP client: {e}")))?;
        Ok(Self::Reqwest {
            client,
            url: endpoint.clone(),
        })
    }

    /// True for the direct hyper path.
    #[cfg(test)]
    pub(super) fn is_direct(&self) -> bool {
        matches!(self, Self::Direct { .. })
    }

    /// POSTs the JSON `body`; the answer's head is in, its body still to read.
    pub(super) async fn post(
        &self,
        body: Vec<u8>,
        authorization: Option<HeaderValue>,
    ) -> Result<Answer, ModelError> {
        match self {
            Self::Direct {
                client,
                uri,
                timeout,
            } => {
                let deadline = Instant::now() + *timeout;
                let mut request = hyper::Request::post(uri.clone())
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                    .header(ACCEPT, HeaderValue::from_static("*/*"))
                    .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
                if let Some(value) = authorization {
                    request = request.header(AUTHORIZATION, value);
                }
                let request = request
                    .body(Full::new(Bytes::from(body)))
                    .map_err(|e| ModelError::Transport(format!("request failed: {e}")))?;
                let response = tokio::time::timeout_at(deadline, client.request(request))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| direct_error(&e))?;
                let (head, body) = response.into_parts();
                Ok(Answer {
                    status: head.status,
                    headers: head.headers,
                    body: AnswerBody::Direct { body, deadline },
                })
            }
            Self::Reqwest { client, url } => {
                let mut request = client
                    .post(url.clone())
                    .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                    .body(body);
                if let Some(value) = authorization {
                    request = request.header(AUTHORIZATION, value);
                }
                let mut response = request.send().await.map_err(reqwest_error)?;
                Ok(Answer {
                    status: response.status(),
                    headers: std::mem::take(response.headers_mut()),
                    body: AnswerBody::Reqwest(response),
                })
            }
        }
    }
}

/// An answer whose head has arrived.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    body: AnswerBody,
}

enum AnswerBody {
    Direct { body: Incoming, deadline: Instant },
    Reqwest(reqwest::Response),
}

impl Answer {
    /// The next piece of the body, `None` at its end.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, ModelError> {
        match &mut self.body {
            AnswerBody::Direct { body, deadline } => loop {
                let frame = tokio::time::timeout_at(*deadline, body.frame())
                    .await
                    .map_err(|_| timed_out())?;
                match frame {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(direct_error(&e)),
                    // Trailers carry no text: read on.
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some(data));
                        }
                    }
                }
            },
            AnswerBody::Reqwest(response) => response.chunk().await.map_err(reqwest_error),
        }
    }
}

fn timed_out() -> ModelError {
    ModelError::Transport("timed out".into())
}

/// The error and its causes, most general first (hyper's own text is terse).
fn direct_error(e: &(dyn std::error::Error + 'static)) -> ModelError {
    let connect = e
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .is_some_and(|e| e.is_connect());
    let what = if connect {
        "connection failed"
    } else {
        "request failed"
    };
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    ModelError::Transport(format!("{what}: {text}"))
}

fn reqwest_error(e: reqwest::Error) -> ModelError {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    // Without the URL: the text reaches transcripts and clients, the endpoint is internal.
    ModelError::Transport(format!("{what}: {}", e.without_url()))
}
