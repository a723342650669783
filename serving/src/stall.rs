//! A stream whose writes may not stall for long: a peer that stops reading a response
//! (its receive window full) would otherwise hold its connection, and the response's
//! memory, for ever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Wraps a stream: a write, flush or shutdown that stays pending for `limit` fails with
/// `TimedOut`. Reads pass through untouched (waiting for a request is bounded elsewhere).
pub struct WriteStallLimit<S> {
    inner: S,
    limit: Duration,
    /// Running while a write is pending; dropped as soon as one makes progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteStallLimit<S> {
    pub fn new(inner: S, limit: Duration) -> WriteStallLimit<S> {
        WriteStallLimit {
            inner,
            limit,
            stalled: None,
        }
    }

    /// Called when a write is pending: starts the stall timer, or fails once it ran out.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.stalled = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the peer read nothing for {limit:?}"),
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(&mut self, result: io::Result<T>) -> Poll<io::Result<T>> {
        self.stalled = None;
        Poll::Ready(result)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStallLimit<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStallLimit<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.pending(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(result) => this.progressed(result),
            Poll::Pending => this.pending(cx),
        }
    }
}
