//! HTTP/1 serving with bounds on what one peer can hold.
//!
//! `axum::serve` keeps a connection for as long as its peer likes: an idle one, one that
//! sent half a request head, one that stalls its request body or stops reading the
//! response. A few hundred of those exhaust a process's file descriptors. [`serve`] runs
//! the same router with [`Limits`]:
//!
//! - at most `max_connections` at once: one accepted beyond the cap is closed at once;
//! - a request head must arrive within `header_timeout` of the connection becoming ready
//!   for one (so an idle keep-alive connection ends after it too);
//! - a handler, reading its request body included, answers within `request_timeout`, or
//!   the request is answered `503` with `Retry-After` (its outcome unknown to the caller);
//! - a response write that makes no progress for `write_timeout` ends the connection;
//! - request bodies in flight hold at most `max_body_bytes_in_flight` bytes in all (a
//!   request counts its `Content-Length`, or `unknown_length_body_bytes` when it streams
//!   its body without one): one more is answered `503` with `Retry-After` at once, before
//!   its body is read.
//!
//! When `shutdown` resolves it stops accepting, lets each connection finish the request
//! it is serving, and returns once every connection ended.

mod stall;

pub use stall::WriteStallLimit;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// What one listener allows its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a connection may take to send a request head, counted from when it is
    /// ready for one (accepted, or done with its previous request).
    pub header_timeout: Duration,
    /// How long a request may take from its head to its answer, reading its body included.
    pub request_timeout: Duration,
    /// How long a response write may wait for the peer to read.
    pub write_timeout: Duration,
    /// Request body bytes that requests being served may hold at once.
    pub max_body_bytes_in_flight: usize,
    /// What a request streaming its body without a `Content-Length` counts as (the
    /// router's per-request body limit is the natural value).
    pub unknown_length_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(60),
            max_body_bytes_in_flight: 256 << 20,
            unknown_length_body_bytes: 64 << 20,
        }
    }
}

/// How long an accept error (out of file descriptors, say) pauses the accept loop, so
/// that it does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then waits
/// for the open connections to finish what they are serving.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(BodyBudget::new(&limits)),
            hold_body_bytes,
        ))
        .layer(axum::middleware::from_fn_with_state(
            limits.request_timeout,
            answer_within,
        ));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let cap = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(cap));
    let (stop, stopping) = watch::channel(false);
    let mut refusals = Refusals::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refusals.refused(peer, cap);
            drop(stream);
            continue;
        };
        // Small request/response exchanges: Nagle's algorithm would only add latency.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let io = TokioIo::new(WriteStallLimit::new(stream, limits.write_timeout));
        let connection = http.serve_connection(io, TowerToHyperService::new(router.clone()));
        let mut stopping = stopping.clone();
        let finish_bound = limits.request_timeout + limits.write_timeout;
        tokio::spawn(async move {
            tokio::pin!(connection);
            // Resolves to `()` so that no borrow of the watch value lives across an await.
            let stop_requested = async move {
                let _ = stopping.wait_for(|stopping| *stopping).await;
            };
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "connection ended");
                    }
                }
                () = stop_requested => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(finish_bound, connection).await;
                }
            }
            drop(permit);
        });
    }
    let _ = stop.send(true);
    // Every permit back: every connection ended.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}

/// Warns of connections closed at the cap: the first at once, then at most one warning
/// every [`REFUSAL_WARNING_PERIOD`] with how many there were (a flood of connections must
/// not become a flood of log lines).
#[derive(Default)]
struct Refusals {
    last_warning: Option<tokio::time::Instant>,
    since_warning: u64,
}

const REFUSAL_WARNING_PERIOD: Duration = Duration::from_secs(10);

impl Refusals {
    fn refused(&mut self, peer: std::net::SocketAddr, cap: usize) {
        self.since_warning += 1;
        let now = tokio::time::Instant::now();
        if self
            .last_warning
            .is_some_and(|last| now.duration_since(last) < REFUSAL_WARNING_PERIOD)
        {
            return;
        }
        tracing::warn!(
            %peer,
            cap,
            closed = self.since_warning,
            "connection closed: the listener is at its cap"
        );
        self.last_warning = Some(now);
        self.since_warning = 0;
    }
}

/// The request body bytes the requests being served may hold, as semaphore permits.
struct BodyBudget {
    bytes: Arc<Semaphore>,
    total: u32,
    unknown_length: u32,
}

impl BodyBudget {
    fn new(limits: &Limits) -> BodyBudget {
        let total = u32::try_from(limits.max_body_bytes_in_flight).unwrap_or(u32::MAX);
        let total = total.clamp(1, u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total as usize)),
            total,
            unknown_length: u32::try_from(limits.unknown_length_body_bytes)
                .unwrap_or(u32::MAX)
                .min(total),
        }
    }

    /// What `request`'s body counts: its declared length (at most the whole budget),
    /// the unknown-length charge for a streamed body, nothing without a body.
    fn charge(&self, request: &Request) -> u32 {
        let headers = request.headers();
        if let Some(length) = headers.get(header::CONTENT_LENGTH) {
            return length
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .map_or(self.unknown_length, |n| {
                    u32::try_from(n).unwrap_or(u32::MAX).min(self.total)
                });
        }
        if headers.contains_key(header::TRANSFER_ENCODING) {
            return self.unknown_length;
        }
        0
    }
}

/// Holds the request's body bytes from [`BodyBudget`] while it is served, or answers
/// `503` at once when they are not to be had.
async fn hold_body_bytes(
    State(budget): State<Arc<BodyBudget>>,
    request: Request,
    next: Next,
) -> Response {
    let charge = budget.charge(&request);
    if charge == 0 {
        return next.run(request).await;
    }
    let Ok(held) = Arc::clone(&budget.bytes).try_acquire_many_owned(charge) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "too many request bytes in flight: not taken, send it again\n",
        )
            .into_response();
    };
    let response = next.run(request).await;
    drop(held);
    response
}

/// Answers `503` when the handler (its body reading included) takes longer than `limit`.
async fn answer_within(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            format!(
                "no answer within {} s: the request may or may not have taken effect\n",
                limit.as_secs_f64()
            ),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use std::net::SocketAddr;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::sync::oneshot;

    const BIG: usize = 64 << 20;

    fn router() -> Router {
        Router::new()
            .route("/", get(|| async { "hello" }))
            .route("/echo", post(|body: String| async move { body }))
            .route("/big", get(|| async { vec![b'x'; BIG] }))
            .route(
                "/slow",
                post(|body: String| async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    body.len().to_string()
                }),
            )
    }

    fn limits(millis: u64, max_connections: usize) -> Limits {
        Limits {
            max_connections,
            header_timeout: Duration::from_millis(millis),
            request_timeout: Duration::from_millis(millis),
            write_timeout: Duration::from_millis(millis),
            ..Limits::default()
        }
    }

    struct Server {
        addr: SocketAddr,
        stop: Option<oneshot::Sender<()>>,
        done: tokio::task::JoinHandle<()>,
    }

    async fn start(limits: Limits) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(serve(listener, router(), limits, async move {
            let _ = stopped.await;
        }));
        Server {
            addr,
            stop: Some(stop),
            done,
        }
    }

    /// Reads until the server closes the connection; what it sent, and when it closed.
    async fn read_until_closed(stream: &mut TcpStream, bound: Duration) -> (String, Duration) {
        let started = Instant::now();
        let mut text = Vec::new();
        let _ = tokio::time::timeout(bound, stream.read_to_end(&mut text))
            .await
            .expect("the server closed the connection within the bound");
        (
            String::from_utf8_lossy(&text).into_owned(),
            started.elapsed(),
        )
    }

    async fn get_root(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        read_until_closed(&mut stream, Duration::from_secs(5))
            .await
            .0
    }

    #[tokio::test]
    async fn serves_requests_and_keeps_connections_alive() {
        let server = start(limits(2_000, 8)).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        for _ in 0..3 {
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut answer = Vec::new();
            let mut buf = vec![0u8; 4096];
            while !answer.ends_with(b"hello") {
                let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                    .await
                    .expect("an answer within the bound")
                    .unwrap();
                assert!(n > 0, "closed after {}", String::from_utf8_lossy(&answer));
                answer.extend_from_slice(&buf[..n]);
            }
            assert!(answer.starts_with(b"HTTP/1.1 200"));
        }
    }

    #[tokio::test]
    async fn idle_and_half_sent_heads_are_closed_after_the_header_timeout() {
        let server = start(limits(300, 8)).await;
        let started = Instant::now();
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        let mut half = TcpStream::connect(server.addr).await.unwrap();
        half.write_all(b"GET / HTTP/1.1\r\nHost:").await.unwrap();
        for stream in [&mut idle, &mut half] {
            let (answer, _) = read_until_closed(stream, Duration::from_secs(5)).await;
            assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
            let after = started.elapsed();
            assert!(after >= Duration::from_millis(250), "{after:?}");
        }
        // A connection idle after an answer is closed too.
        let mut kept = TcpStream::connect(server.addr).await.unwrap();
        kept.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (answer, _) = read_until_closed(&mut kept, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[tokio::test]
    async fn a_stalled_body_is_answered_within_the_request_timeout() {
        let server = start(limits(300, 8)).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten..")
            .await
            .unwrap();
        let (answer, after) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1"),
            "{answer}"
        );
        assert!(after < Duration::from_secs(3), "{after:?}");
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_once() {
        let server = start(limits(60_000, 2)).await;
        let _first = TcpStream::connect(server.addr).await.unwrap();
        let second = TcpStream::connect(server.addr).await.unwrap();
        // Both are accepted (the accept loop ran) once a third is closed.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut third = TcpStream::connect(server.addr).await.unwrap();
        let (answer, _) = read_until_closed(&mut third, Duration::from_secs(5)).await;
        assert_eq!(answer, "");
        // One closed: a new connection is served again.
        drop(second);
        let mut served = String::new();
        for _ in 0..50 {
            served = get_root(server.addr).await;
            if !served.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    }

    #[tokio::test]
    async fn a_reader_that_stops_reading_loses_its_connection() {
        // One connection allowed: the stalled download must end for another to be served.
        let server = start(limits(300, 1)).await;
        let mut stalled = TcpStream::connect(server.addr).await.unwrap();
        stalled
            .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let mut served = String::new();
        while started.elapsed() < Duration::from_secs(5) {
            served = get_root(server.addr).await;
            if !served.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(served.starts_with("HTTP/1.1 200"), "{served}");
        drop(stalled);
    }

    /// POSTs `len` bytes to `/slow`: the status and body of the answer.
    async fn post_slow(addr: SocketAddr, len: usize) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&vec![b'y'; len]).await.unwrap();
        read_until_closed(&mut stream, Duration::from_secs(5))
            .await
            .0
    }

    #[tokio::test]
    async fn request_bytes_in_flight_are_bounded() {
        let server = start(Limits {
            max_body_bytes_in_flight: 1000,
            ..limits(5_000, 8)
        })
        .await;
        let first = tokio::spawn(post_slow(server.addr, 600));
        tokio::time::sleep(Duration::from_millis(100)).await;
        // 600 of 1000 bytes held: 600 more do not fit, 300 do.
        let refused = post_slow(server.addr, 600).await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused.contains("too many request bytes in flight"),
            "{refused}"
        );
        let fits = post_slow(server.addr, 300).await;
        assert!(
            fits.starts_with("HTTP/1.1 200") && fits.ends_with("300"),
            "{fits}"
        );
        let first = first.await.unwrap();
        assert!(
            first.starts_with("HTTP/1.1 200") && first.ends_with("600"),
            "{first}"
        );
        // Released: the same request is taken now.
        let again = post_slow(server.addr, 600).await;
        assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    }

    #[tokio::test]
    async fn shutdown_stops_accepting_and_ends_idle_connections() {
        let mut server = start(limits(60_000, 8)).await;
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(stop) = server.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(5), &mut server.done)
            .await
            .expect("serve returned")
            .unwrap();
        let (answer, _) = read_until_closed(&mut idle, Duration::from_secs(5)).await;
        assert_eq!(answer, "");
        assert!(TcpStream::connect(server.addr).await.is_err());
    }
}
