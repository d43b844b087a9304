//! One connection's socket with the read deadlines of the HTTP edge: a connection waiting for
//! a request may stay silent for `idle_timeout_ms`; once a request's first byte arrives its
//! head must be complete within `header_read_timeout_ms` (else `408`), and its request line
//! must end within a bound (else `414`). While a request is being served (its body, the
//! handler, a long response such as an SSE stream) no read deadline applies here: the body has
//! its own in the router (`edge::edge`).
//!
//! hyper answers a request it cannot parse (bad request line or header, too many or too large
//! headers) itself, before any service runs, with an empty `4xx`; the socket replaces that
//! answer with the JSON error shape ([`automatic_error`]).
//!
//! The socket learns what hyper is doing from [`Activity`], which the connection's service
//! updates: a request is in flight from the service call until its response body is dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::error::ApiError;
use crate::metrics;

/// The read bounds of one connection (from `[server]`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadBounds {
    /// From a request's first byte to the end of its head.
    pub(super) header: Duration,
    /// Silence allowed while waiting for a request.
    pub(super) idle: Duration,
    /// Longest request line (method, URI, version) in bytes.
    pub(super) max_request_line: usize,
}

/// What the connection's service reports to its socket.
#[derive(Debug, Default)]
pub(super) struct Activity {
    in_flight: AtomicUsize,
    finished: AtomicU64,
    /// The read that found a request in flight (and so armed no deadline): woken when the
    /// request ends, so the idle deadline starts even if no byte ever comes. A std `Mutex`:
    /// held only to swap a waker, never across an await.
    parked_read: Mutex<Option<Waker>>,
    /// Set when the accept loop takes this connection's place for a newer one: its socket then
    /// answers `503` (unless a response was begun) before it closes.
    evicted: AtomicBool,
}

impl Activity {
    /// Marks the connection as closed for a newer one (see [`Activity::evicted`]).
    pub(super) fn evict(&self) {
        self.evicted.store(true, Ordering::SeqCst);
    }

    /// Marks a request in flight until the returned guard drops.
    pub(super) fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }
}

/// A request in flight on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        let parked = self.0.parked_read.lock().ok().and_then(|mut w| w.take());
        if let Some(waker) = parked {
            waker.wake();
        }
    }
}

/// Where the connection is between two reads.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request, silent since the instant.
    Idle(Instant),
    /// A request head is arriving: started at `since`, `line` bytes of its request line seen
    /// (`line_done` once its end was).
    Head {
        since: Instant,
        line: usize,
        line_done: bool,
    },
    /// A request is in flight.
    Busy,
}

/// Most sockets at once that are closing slowly (see [`linger`]); past it a socket closes at
/// once, and a client with unread request bytes may see a reset instead of its answer.
pub(super) const MAX_LINGERING: usize = 256;

/// How long a closing socket keeps reading (and discarding) what the client still sends.
const LINGER_TIME: Duration = Duration::from_secs(2);

/// Most bytes a closing socket reads and discards.
const LINGER_BYTES: usize = 1 << 20;

/// Sockets closing slowly now (bounded by [`MAX_LINGERING`]).
static LINGERING: AtomicUsize = AtomicUsize::new(0);

/// The socket handed to hyper.
#[derive(Debug)]
pub(super) struct ConnIo {
    /// `None` only once dropped (the drop may hand the socket to [`linger`]).
    stream: Option<TcpStream>,
    /// Whether any response byte was written: an evicted connection that wrote none answers
    /// `503` as it closes.
    wrote: bool,
    /// A response saying `connection: close` was written: what the client still sends is the
    /// rest of a refused body, not a request, and gets no `408`/`414` of its own.
    last_response: bool,
    activity: Arc<Activity>,
    bounds: ReadBounds,
    phase: Phase,
    /// `activity.finished` when the phase was last updated: a change means a request ended.
    seen_finished: u64,
    sleep: Pin<Box<Sleep>>,
    armed: Instant,
}

impl ConnIo {
    /// Wraps a freshly accepted connection (idle from now).
    pub(super) fn new(stream: TcpStream, activity: Arc<Activity>, bounds: ReadBounds) -> Self {
        let now = Instant::now();
        let armed = now + bounds.idle;
        Self {
            stream: Some(stream),
            wrote: false,
            last_response: false,
            activity,
            bounds,
            phase: Phase::Idle(now),
            seen_finished: 0,
            sleep: Box::pin(tokio::time::sleep_until(armed)),
            armed,
        }
    }

    fn update_phase(&mut self) {
        let finished = self.activity.finished.load(Ordering::SeqCst);
        if self.activity.in_flight.load(Ordering::SeqCst) > 0 {
            self.phase = Phase::Busy;
        } else if matches!(self.phase, Phase::Busy) || finished != self.seen_finished {
            self.phase = Phase::Idle(Instant::now());
        }
        self.seen_finished = finished;
    }

    /// Accounts for `bytes` just read; `Err` when the request line is over its bound.
    fn saw(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() || self.last_response {
            return Ok(());
        }
        if let Phase::Idle(_) = self.phase {
            self.phase = Phase::Head {
                since: Instant::now(),
                line: 0,
                line_done: false,
            };
        }
        if let Phase::Head {
            line, line_done, ..
        } = &mut self.phase
        {
            if !*line_done {
                match bytes.iter().position(|b| *b == b'\n') {
                    Some(end) => {
                        *line += end;
                        *line_done = true;
                    }
                    None => *line += bytes.len(),
                }
                if *line > self.bounds.max_request_line {
                    metrics::http_rejected("uri_too_long");
                    self.answer(ApiError::new(
                        StatusCode::URI_TOO_LONG,
                        "uri_too_long",
                        format!(
                            "the request line is over {} bytes",
                            self.bounds.max_request_line
                        ),
                    ));
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "request line too long",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The deadline of the current phase, if any.
    fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Idle(since) => Some(since + self.bounds.idle),
            Phase::Head { since, .. } => Some(since + self.bounds.header),
            Phase::Busy => None,
        }
    }

    /// The error that ends the connection at its deadline (after answering `408` to a client
    /// that began a request).
    fn expire(&mut self) -> io::Error {
        if let Phase::Head { .. } = self.phase {
            metrics::http_rejected("header_timeout");
            self.answer(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request head did not arrive within {} ms",
                    self.bounds.header.as_millis()
                ),
            ));
            io::Error::new(io::ErrorKind::TimedOut, "request head timed out")
        } else {
            io::Error::new(io::ErrorKind::TimedOut, "idle connection timed out")
        }
    }

    /// Writes `error` as a whole response without waiting: the connection closes right after,
    /// and nothing else is being written on it (the client is mid-request), so the few hundred
    /// bytes fit the empty send buffer. A client that cannot take them just sees the close.
    fn answer(&self, error: ApiError) {
        if let Some(stream) = &self.stream {
            let _ = stream.try_write(&error.to_http1_bytes());
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.update_phase();
        let before = buf.filled().len();
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(Err(gone()));
        };
        match Pin::new(stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => Poll::Ready(this.saw(&buf.filled()[before..])),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(deadline) = this.deadline() else {
                    if let Ok(mut parked) = this.activity.parked_read.lock() {
                        *parked = Some(cx.waker().clone());
                    }
                    // The request may have ended before the waker was stored.
                    if this.activity.in_flight.load(Ordering::SeqCst) == 0 {
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                };
                if deadline != this.armed {
                    this.sleep.as_mut().reset(deadline);
                    this.armed = deadline;
                }
                match this.sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(this.expire())),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

/// The status of hyper's own answer to an unparsable request, if `bytes` is one: a `4xx` head
/// with `content-length: 0` and `connection: close`, and nothing after it. The router never
/// writes such a head: its error answers all carry a JSON body (`edge::json_errors`).
fn automatic_error(bytes: &[u8]) -> Option<StatusCode> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 4")?;
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    if head_end != bytes.len() {
        return None;
    }
    let code = std::str::from_utf8(rest.get(..2)?).ok()?;
    let status = StatusCode::from_u16(400 + code.parse::<u16>().ok()?).ok()?;
    let head = String::from_utf8_lossy(bytes).to_ascii_lowercase();
    (head.contains("\r\ncontent-length: 0\r\n") && head.contains("\r\nconnection: close\r\n"))
        .then_some(status)
}

impl ConnIo {
    /// When hyper writes its own answer to an unparsable request, answers the JSON shape
    /// instead and reports hyper's bytes as written.
    fn replace_automatic_error(&self, bytes: &[u8]) -> Option<usize> {
        if self.activity.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let status = automatic_error(bytes)?;
        metrics::http_rejected("unparsable_request");
        let message = match status {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "the request head is too large",
            StatusCode::URI_TOO_LONG => "the request URI is too long",
            _ => "the request could not be parsed as HTTP/1.1",
        };
        self.answer(ApiError::new(status, super::edge::code_of(status), message));
        Some(bytes.len())
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(n) = this.replace_automatic_error(buf) {
            return Poll::Ready(Ok(n));
        }
        this.note_written(buf);
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(Err(gone()));
        };
        Pin::new(stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next()) {
            if let Some(n) = this.replace_automatic_error(only) {
                return Poll::Ready(Ok(n));
            }
        }
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            this.note_written(first);
        }
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(Err(gone()));
        };
        Pin::new(stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream.as_mut() {
            Some(stream) => Pin::new(stream).poll_flush(cx),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream.as_mut() {
            Some(stream) => Pin::new(stream).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl ConnIo {
    /// Records that a response is being written, and whether it is the connection's last.
    fn note_written(&mut self, bytes: &[u8]) {
        self.wrote = true;
        if bytes.starts_with(b"HTTP/1.") && closes_connection(bytes) {
            self.last_response = true;
        }
    }
}

/// Whether the response head at the start of `bytes` says `connection: close`.
fn closes_connection(bytes: &[u8]) -> bool {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    bytes[..head_end]
        .split(|b| *b == b'\n')
        .any(|line| line.trim_ascii().eq_ignore_ascii_case(b"connection: close"))
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the socket was handed over")
}

impl Drop for ConnIo {
    /// Closes the socket so that the client can read what it was sent. Closing a socket whose
    /// client's bytes were not all read (a refused body, an over-long request line, a request
    /// sent on a connection that is evicted) makes the kernel send a reset, which can reach
    /// the client before it reads the answer; so such a socket lingers (see [`linger`]). An
    /// evicted connection that had not begun a response is answered `503` first.
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        let evicted = self.activity.evicted.load(Ordering::SeqCst);
        if evicted && !self.wrote {
            metrics::http_rejected("over_capacity");
            let refusal = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "over_capacity",
                "too many connections; retry",
            )
            .with_retry_after(1);
            let _ = stream.try_write(&refusal.to_http1_bytes());
        }
        let mut probe = [0u8; 1];
        let unread = matches!(stream.try_read(&mut probe), Ok(n) if n > 0);
        if !(unread || evicted) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if LINGERING.fetch_add(1, Ordering::SeqCst) >= MAX_LINGERING {
            LINGERING.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        runtime.spawn(async move {
            linger(stream).await;
            LINGERING.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Ends the sending side (the client reads everything it was sent, then end of file) and
/// reads and discards what the client still sends, for at most [`LINGER_TIME`] and
/// [`LINGER_BYTES`], then closes.
async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut read = 0;
        while read < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const BOUNDS: ReadBounds = ReadBounds {
        header: Duration::from_secs(5),
        idle: Duration::from_secs(20),
        max_request_line: 64,
    };

    /// A connected pair: the client's stream and the server side wrapped.
    async fn pair() -> (TcpStream, ConnIo, Arc<Activity>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let activity = Arc::new(Activity::default());
        let io = ConnIo::new(server, Arc::clone(&activity), BOUNDS);
        (client, io, activity)
    }

    async fn read_all(client: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_after_the_idle_timeout() {
        let (mut client, mut io, _activity) = pair().await;
        let start = Instant::now();
        let mut buf = [0u8; 64];
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= BOUNDS.idle);
        drop(io);
        assert_eq!(read_all(&mut client).await, "", "closed without a response");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unfinished_head_gets_408_after_the_header_timeout() {
        let (mut client, mut io, _activity) = pair().await;
        client
            .write_all(b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let start = Instant::now();
        let n = io.read(&mut buf).await.unwrap();
        assert!(n > 0);
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        let waited = start.elapsed();
        assert!(
            waited >= BOUNDS.header && waited < BOUNDS.idle,
            "{waited:?}"
        );
        drop(io);
        let answer = read_all(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
    }

    #[tokio::test(start_paused = true)]
    async fn no_deadline_while_a_request_is_in_flight_then_idle_again() {
        let (mut client, mut io, activity) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 256];
        assert!(io.read(&mut buf).await.unwrap() > 0);
        let request = activity.begin();
        let read = io.read(&mut buf);
        tokio::pin!(read);
        let waited = tokio::time::timeout(BOUNDS.idle * 3, &mut read).await;
        assert!(waited.is_err(), "a busy connection has no read deadline");
        drop(request);
        // The same pending read (hyper's) now runs into the idle deadline.
        let start = Instant::now();
        let err = read.await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= BOUNDS.idle, "the idle time restarts");
    }

    #[test]
    fn only_hyper_s_empty_4xx_answers_are_automatic_errors() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\
                          date: Tue, 01 Dec 2026 12:40:08 GMT\r\n\r\n";
        assert_eq!(automatic_error(hyper_400), Some(StatusCode::BAD_REQUEST));
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                          content-length: 0\r\n\r\n";
        assert_eq!(
            automatic_error(hyper_431),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        let json_404 = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n\
                         content-length: 20\r\n\r\n{\"error\":{\"code\":1}}";
        assert_eq!(automatic_error(json_404), None);
        let kept_alive = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error(kept_alive), None);
        let ok = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error(ok), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_over_long_request_line_gets_414() {
        let (mut client, mut io, _activity) = pair().await;
        let line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
        client.write_all(line.as_bytes()).await.unwrap();
        let mut buf = [0u8; 256];
        let err = io.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        drop(io);
        let answer = read_all(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 414 "), "{answer}");
    }
}
