//! HTTP/1.1 as the workers' client speaks it: a request written whole into a reused
//! buffer, sent on a kept-alive connection, its answer read whole and delimited by
//! `content-length`, chunked encoding or the connection's end. Only what
//! [`super::client`] needs (no proxy, no redirects, one request at a time); it is on the
//! recording path's hot loop, where a general client costs several times the CPU per
//! request (`cargo bench -p harness --bench record`, `http-floor` vs `reqwest-floor`).

use std::io::Write as _;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use sut::error_chain;

/// Longest answer head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Most bytes of one answer (head, body and chunk framing) accepted; a read of the
/// broker's limit of 10,000 records is far below.
const MAX_ANSWER: usize = 64 * 1024 * 1024;
/// Initial size of a client's answer buffer: the workloads' answers fit.
const ANSWER_BUFFER: usize = 16 * 1024;
/// An answer buffer grown past this (by a long read) shrinks back before the next answer.
const ANSWER_BUFFER_KEPT: usize = 1024 * 1024;

/// A kept connection can take a request: nothing arrived on it since its last answer (a
/// node that closed it, or sent anything unasked, makes it unusable). Costs no system
/// call unless the socket became readable.
pub(crate) fn is_idle(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// The buffers of a client's request in flight.
pub(crate) struct Buffers {
    /// The request as sent: head and body.
    pub(crate) request: Vec<u8>,
    /// A produce's JSON body, before its head is finished (its length goes first).
    pub(crate) json: Vec<u8>,
    pub(crate) answer: AnswerBuffer,
}

impl Buffers {
    pub(crate) fn new() -> Buffers {
        Buffers {
            request: Vec::with_capacity(512),
            json: Vec::with_capacity(128),
            answer: AnswerBuffer::new(),
        }
    }

    /// Starts a request: its method and target, to which a query may be appended before
    /// [`Buffers::finish`].
    pub(crate) fn begin(&mut self, method: &str, path: &str) {
        self.request.clear();
        self.request.extend_from_slice(method.as_bytes());
        self.request.push(b' ');
        self.request.extend_from_slice(path.as_bytes());
    }

    /// Ends the request line and writes the headers; with `json_body`, the body is
    /// `self.json`.
    pub(crate) fn finish(&mut self, host: &str, json_body: bool) {
        self.request.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        self.request.extend_from_slice(host.as_bytes());
        if json_body {
            let _ = write!(
                self.request,
                "\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                self.json.len()
            );
            self.request.extend_from_slice(&self.json);
        } else {
            self.request.extend_from_slice(b"\r\n\r\n");
        }
    }
}

/// Why a round trip did not end with an answer.
pub(crate) enum Failure {
    /// Not a byte of the request was written.
    NotSent(String),
    /// The request may have been sent.
    Failed(String),
}

/// Writes `request` and reads its whole answer into `answer` (no timeout of its own).
pub(crate) async fn round_trip(
    stream: &mut TcpStream,
    request: &[u8],
    answer: &mut AnswerBuffer,
) -> Result<Framing, Failure> {
    let mut written = 0;
    while written < request.len() {
        let wrote =
            std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write(cx, &request[written..]))
                .await;
        let broke = |detail: String| {
            if written == 0 {
                Failure::NotSent(detail)
            } else {
                Failure::Failed(detail)
            }
        };
        match wrote {
            Ok(0) => return Err(broke("the connection took no more of the request".into())),
            Ok(n) => written += n,
            Err(e) => return Err(broke(error_chain(&e))),
        }
    }
    answer.read(stream).await.map_err(Failure::Failed)
}

/// How an answer's body is delimited, and where it is once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Framing {
    pub(crate) status: u16,
    /// The connection can take the next request.
    pub(crate) keep_alive: bool,
    pub(crate) body: BodyAt,
}

/// Where a complete answer's body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyAt {
    /// These bytes of the answer buffer.
    Raw(std::ops::Range<usize>),
    /// The chunked body, decoded.
    Decoded,
}

/// The answer read so far, and a chunked body decoded.
pub(crate) struct AnswerBuffer {
    /// Always fully initialized; `filled` bytes of it are the answer so far.
    pub(crate) data: Vec<u8>,
    pub(crate) filled: usize,
    pub(crate) decoded: Vec<u8>,
}

/// A complete answer.
pub(crate) struct Answer<'a> {
    pub(crate) status: u16,
    pub(crate) body: &'a [u8],
}

impl AnswerBuffer {
    pub(crate) fn new() -> AnswerBuffer {
        AnswerBuffer {
            data: vec![0; ANSWER_BUFFER],
            filled: 0,
            decoded: Vec::new(),
        }
    }

    pub(crate) fn answer(&self, framing: &Framing) -> Answer<'_> {
        let body = match &framing.body {
            BodyAt::Raw(range) => self.data.get(range.clone()).unwrap_or_default(),
            BodyAt::Decoded => &self.decoded,
        };
        Answer {
            status: framing.status,
            body,
        }
    }

    /// Reads more of the answer; false at the end of the stream.
    pub(crate) async fn fill(&mut self, stream: &mut TcpStream) -> Result<bool, String> {
        if self.filled == self.data.len() {
            if self.data.len() >= MAX_ANSWER {
                return Err(format!("answer longer than {MAX_ANSWER} bytes"));
            }
            let grown = (self.data.len() * 2).min(MAX_ANSWER);
            self.data.resize(grown, 0);
        }
        let free = &mut self.data[self.filled..];
        let read = std::future::poll_fn(|cx| {
            let mut buffer = ReadBuf::new(free);
            match Pin::new(&mut *stream).poll_read(cx, &mut buffer) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(buffer.filled().len())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
        .map_err(|e| error_chain(&e))?;
        self.filled += read;
        Ok(read > 0)
    }

    /// Reads one whole answer (after any interim 1xx heads).
    pub(crate) async fn read(&mut self, stream: &mut TcpStream) -> Result<Framing, String> {
        self.filled = 0;
        if self.data.len() > ANSWER_BUFFER_KEPT {
            self.data.truncate(ANSWER_BUFFER);
            self.data.shrink_to_fit();
        }
        if self.decoded.capacity() > ANSWER_BUFFER_KEPT {
            self.decoded = Vec::new();
        }
        let closed = |what: &str| format!("connection closed before the answer's {what}");
        let head = loop {
            match parse_head(&self.data[..self.filled])? {
                Some(head) if head.interim => {
                    self.data.copy_within(head.length..self.filled, 0);
                    self.filled -= head.length;
                }
                Some(head) => break head,
                None if self.filled > MAX_HEAD => {
                    return Err(format!("answer head longer than {MAX_HEAD} bytes"))
                }
                None => {
                    if !self.fill(stream).await? {
                        return Err(closed("head"));
                    }
                }
            }
        };
        let start = head.length;
        match head.body {
            BodyLength::Known(length) => {
                let end = start
                    .checked_add(length)
                    .filter(|end| *end <= MAX_ANSWER)
                    .ok_or_else(|| format!("answer body of {length} bytes is too long"))?;
                if self.data.len() < end {
                    self.data.resize(end, 0);
                }
                while self.filled < end {
                    if !self.fill(stream).await? {
                        return Err(closed("end"));
                    }
                }
                Ok(Framing {
                    status: head.status,
                    // Bytes past the answer were never asked for.
                    keep_alive: head.keep_alive && self.filled == end,
                    body: BodyAt::Raw(start..end),
                })
            }
            BodyLength::Chunked => {
                self.decoded.clear();
                let mut at = start;
                loop {
                    let data = &self.data[..self.filled];
                    if let Some(end) = decode_chunks(data, &mut at, &mut self.decoded)? {
                        return Ok(Framing {
                            status: head.status,
                            keep_alive: head.keep_alive && self.filled == end,
                            body: BodyAt::Decoded,
                        });
                    }
                    if !self.fill(stream).await? {
                        return Err(closed("end"));
                    }
                }
            }
            BodyLength::UntilClose => {
                while self.fill(stream).await? {}
                Ok(Framing {
                    status: head.status,
                    keep_alive: false,
                    body: BodyAt::Raw(start..self.filled),
                })
            }
        }
    }
}

/// An answer's head, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) status: u16,
    /// Bytes of the head, its blank line included.
    pub(crate) length: usize,
    /// A 1xx head that another head follows.
    pub(crate) interim: bool,
    pub(crate) keep_alive: bool,
    pub(crate) body: BodyLength,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyLength {
    Known(usize),
    Chunked,
    /// No length given: the body ends with the connection.
    UntilClose,
}

/// The position of the first `\r\n` in `data`.
pub(crate) fn find_line_end(data: &[u8]) -> Option<usize> {
    data.windows(2).position(|pair| pair == b"\r\n")
}

/// Parses the head at the start of `data`: `None` until it is complete. Reads the status
/// and the headers that delimit the body or end the connection (RFC 9112 §6.3).
pub(crate) fn parse_head(data: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let malformed = |what: &str| format!("malformed answer head: {what}");
    let mut lines = data[..end]
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let status_line = lines.next().unwrap_or_default();
    let http_1_1 = match status_line.get(..9) {
        Some(b"HTTP/1.1 ") => true,
        Some(b"HTTP/1.0 ") => false,
        _ => return Err(malformed("not an HTTP/1.x status line")),
    };
    let status = status_line
        .get(9..12)
        .filter(|code| code.iter().all(u8::is_ascii_digit))
        .filter(|_| matches!(status_line.get(12), None | Some(b' ')))
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| *code >= 100)
        .ok_or_else(|| malformed("no status code"))?;
    let mut content_length: Option<usize> = None;
    let mut chunked = None;
    let mut close = !http_1_1;
    for line in lines {
        if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return Err(malformed("folded header line"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| malformed("header line without a colon"))?;
        let name = &line[..colon];
        let value = line[colon + 1..].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            let length = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or_else(|| malformed("bad content-length"))?;
            if content_length.is_some_and(|known| known != length) {
                return Err(malformed("conflicting content-lengths"));
            }
            content_length = Some(length);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Chunked if it is the last coding; any other coding ends with the
            // connection.
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && !http_1_1 {
                    close = false;
                }
            }
        }
    }
    let interim = (100..200).contains(&status);
    if status == 101 {
        return Err(malformed("unasked protocol switch"));
    }
    let body = if interim || status == 204 || status == 304 {
        BodyLength::Known(0)
    } else {
        match (chunked, content_length) {
            (Some(true), _) => BodyLength::Chunked,
            (Some(false), _) => BodyLength::UntilClose,
            (None, Some(length)) => BodyLength::Known(length),
            (None, None) => BodyLength::UntilClose,
        }
    };
    Ok(Some(Head {
        status,
        length: end + 4,
        interim,
        keep_alive: !close && body != BodyLength::UntilClose,
        body,
    }))
}

/// Decodes the complete chunks of a chunked body from `*at` on, appending their data to
/// `out` and moving `*at` past them. `Some(end)` once the last chunk and the trailers are
/// in: the index one past the body.
pub(crate) fn decode_chunks(
    data: &[u8],
    at: &mut usize,
    out: &mut Vec<u8>,
) -> Result<Option<usize>, String> {
    let malformed = |what: &str| format!("malformed chunked body: {what}");
    loop {
        let rest = data.get(*at..).unwrap_or_default();
        let Some(line_end) = find_line_end(rest) else {
            if rest.len() > 1024 {
                return Err(malformed("chunk size line too long"));
            }
            return Ok(None);
        };
        let line = &rest[..line_end];
        // The size, then maybe `;extensions`.
        let digits = line
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let size = std::str::from_utf8(digits)
            .ok()
            .filter(|d| !d.is_empty() && d.len() <= 15)
            .and_then(|d| usize::from_str_radix(d, 16).ok())
            .ok_or_else(|| malformed("bad chunk size"))?;
        let start = *at + line_end + 2;
        if size == 0 {
            // Trailers, each a line, up to a blank line.
            let mut trailer = start;
            loop {
                let Some(length) = find_line_end(data.get(trailer..).unwrap_or_default()) else {
                    if data.len() - trailer.min(data.len()) > MAX_HEAD {
                        return Err(malformed("trailers too long"));
                    }
                    return Ok(None);
                };
                trailer += length + 2;
                if length == 0 {
                    return Ok(Some(trailer));
                }
            }
        }
        let end = start
            .checked_add(size)
            .filter(|end| *end <= MAX_ANSWER)
            .ok_or_else(|| malformed("chunk too long"))?;
        let Some(after) = data.get(end..end + 2) else {
            return Ok(None);
        };
        if after != b"\r\n" {
            return Err(malformed("chunk not followed by CRLF"));
        }
        out.extend_from_slice(&data[start..end]);
        *at = end + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_heads_give_status_framing_and_keep_alive() {
        let head = |text: &str| parse_head(text.as_bytes());
        let ok = head(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 12\r\n\r\n{}",
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.status, 200);
        assert_eq!(ok.body, BodyLength::Known(12));
        assert!(ok.keep_alive && !ok.interim);
        assert_eq!(
            ok.length,
            ok_length(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 12\r\n\r\n"
            )
        );
        // Incomplete: more to read.
        assert_eq!(
            head("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n").unwrap(),
            None
        );
        assert_eq!(head("").unwrap(), None);
        let close = head(
            "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\ncontent-length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!((close.status, close.keep_alive), (503, false));
        let chunked = head(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\ncontent-length: 5\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(chunked.body, BodyLength::Chunked);
        assert!(chunked.keep_alive);
        let gzip = head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (gzip.body, gzip.keep_alive),
            (BodyLength::UntilClose, false)
        );
        let unframed = head("HTTP/1.1 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(
            (unframed.body, unframed.keep_alive),
            (BodyLength::UntilClose, false)
        );
        let old = head("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!old.keep_alive);
        let old_kept =
            head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 1\r\n\r\n")
                .unwrap()
                .unwrap();
        assert!(old_kept.keep_alive);
        let empty = head("HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(empty.body, BodyLength::Known(0));
        let interim = head("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
            .unwrap()
            .unwrap();
        assert!(interim.interim);
        assert_eq!(interim.length, "HTTP/1.1 100 Continue\r\n\r\n".len());
        for bad in [
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 099 Odd\r\n\r\n",
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            "HTTP/1.1 200 OK\r\nx: 1\r\n folded\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
        ] {
            assert!(head(bad).is_err(), "{bad:?}");
        }
        // The same length twice is fine.
        let twice = head("HTTP/1.1 200 OK\r\ncontent-length: 3\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(twice.unwrap().unwrap().body, BodyLength::Known(3));
    }

    fn ok_length(head: &str) -> usize {
        head.len()
    }

    #[test]
    fn chunked_bodies_decode_whole_or_piece_by_piece() {
        let wire = b"5;name=value\r\nhello\r\n1\r\n,\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n";
        let mut out = Vec::new();
        let mut at = 0;
        assert_eq!(decode_chunks(wire, &mut at, &mut out), Ok(Some(wire.len())));
        assert_eq!(out, b"hello, world");
        // Arriving a byte at a time: the same body, ending at the same place.
        for cut in 0..wire.len() {
            let (mut out, mut at) = (Vec::new(), 0);
            let first = decode_chunks(&wire[..cut], &mut at, &mut out);
            assert_eq!(first, Ok(None), "cut at {cut}");
            assert_eq!(decode_chunks(wire, &mut at, &mut out), Ok(Some(wire.len())));
            assert_eq!(out, b"hello, world", "cut at {cut}");
        }
        let (mut out, mut at) = (Vec::new(), 0);
        assert_eq!(decode_chunks(b"0\r\n\r\n", &mut at, &mut out), Ok(Some(5)));
        assert!(out.is_empty());
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"3\r\nabcd\r\n",
            b"fffffffffffffffff\r\n",
        ] {
            let (mut out, mut at) = (Vec::new(), 0);
            assert!(decode_chunks(bad, &mut at, &mut out).is_err(), "{bad:?}");
        }
    }
}
