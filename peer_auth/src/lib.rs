//! Who may talk to a broker's peer listeners (replication, metadata) and arm its
//! failpoints: whoever holds the cluster's secret.
//!
//! The harness draws a fresh [`ClusterSecret`] for every cluster it starts and writes it
//! into each node's configuration. Every request between brokers (and every failpoint
//! request of the harness) carries two headers:
//!
//! - [`SENDER_HEADER`]: who sends it, `broker-<id>` or `harness` ([`Sender`]);
//! - [`MAC_HEADER`]: HMAC-SHA256 under the secret, in hex, over the sender, the method,
//!   the path with its query, and the body ([`mac`]).
//!
//! A listener recomputes the MAC over what it received ([`verify`]) and refuses the
//! request when a header is missing or the MAC differs, so a request can neither be made
//! nor altered (sender, path or body) without the secret, and the sender it names is the
//! one that signed it.
//!
//! What this does not do, on purpose (TLS would, at the cost of certificates bound to
//! addresses on every backend, a handshake after every fault that breaks a connection,
//! and a TLS stack in the build): hide the traffic, authenticate the answers, or stop
//! someone who can watch the network from sending a request seen earlier again. No
//! timestamp is signed: a window would tie the brokers' talk to their clocks, which the
//! clock faults move.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header naming the sender.
pub const SENDER_HEADER: &str = "x-cluster-sender";
/// The header carrying the MAC, 64 hex digits.
pub const MAC_HEADER: &str = "x-cluster-mac";

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;
/// The longest secret accepted, in bytes.
pub const MAX_SECRET_BYTES: usize = 256;
/// The length of a drawn secret, in bytes.
const DRAWN_SECRET_BYTES: usize = 32;

/// Why a secret, a sender or a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a cluster secret is {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes written as hex digits: {0}")]
    BadSecret(String),
    #[error("cannot draw a cluster secret: {0}")]
    NoRandomness(String),
    #[error("no `{SENDER_HEADER}` header: requests on this listener must come from a peer of the cluster")]
    NoSender,
    #[error("`{SENDER_HEADER}` is {0:?}, neither `broker-<id>` nor `harness`")]
    BadSender(String),
    #[error("no `{MAC_HEADER}` header: requests on this listener must be signed with the cluster secret")]
    NoMac,
    #[error("the `{MAC_HEADER}` header does not match the request: not signed with this cluster's secret, or altered")]
    WrongMac,
    #[error("a request with a streamed body cannot be signed")]
    StreamedBody,
}

/// A cluster's shared secret. Its `Debug` shows no byte of it.
#[derive(Clone)]
pub struct ClusterSecret {
    bytes: Vec<u8>,
    /// HMAC keyed with `bytes` once, cloned for each MAC.
    keyed: Hmac<Sha256>,
}

impl PartialEq for ClusterSecret {
    fn eq(&self, other: &ClusterSecret) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for ClusterSecret {}

impl ClusterSecret {
    /// A fresh secret from the system's randomness (`/dev/urandom`).
    pub fn draw() -> Result<ClusterSecret, AuthError> {
        let mut bytes = vec![0u8; DRAWN_SECRET_BYTES];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|e| AuthError::NoRandomness(format!("/dev/urandom: {e}")))?;
        Ok(ClusterSecret::from_bytes(bytes))
    }

    /// The secret as written in a configuration: hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.bytes)
    }

    /// A secret from its hex form.
    pub fn from_hex(text: &str) -> Result<ClusterSecret, AuthError> {
        let text = text.trim();
        if !text.len().is_multiple_of(2) {
            return Err(AuthError::BadSecret("an odd number of digits".into()));
        }
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                    .ok_or_else(|| AuthError::BadSecret(format!("not hex at character {}", i + 1)))
            })
            .collect::<Result<Vec<u8>, AuthError>>()?;
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&bytes.len()) {
            return Err(AuthError::BadSecret(format!("{} bytes", bytes.len())));
        }
        Ok(ClusterSecret::from_bytes(bytes))
    }

    /// A name for the cluster derived from its secret (16 hex digits of a MAC of a fixed
    /// text): the same for every node of the cluster, another for another cluster, and
    /// telling nothing of the secret.
    pub fn cluster_id(&self) -> String {
        let mut mac = self.hmac();
        mac.update(b"peer-auth cluster id");
        hex(&mac.finalize().into_bytes()[..8])
    }

    fn from_bytes(bytes: Vec<u8>) -> ClusterSecret {
        // HMAC takes a key of any length; this cannot fail.
        let keyed =
            <Hmac<Sha256> as Mac>::new_from_slice(&bytes).unwrap_or_else(|_| unreachable!());
        ClusterSecret { bytes, keyed }
    }

    fn hmac(&self) -> Hmac<Sha256> {
        self.keyed.clone()
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.bytes.len())
    }
}

/// Who signs a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sender {
    /// A broker of the cluster, by its id.
    Broker(u32),
    /// The test harness (failpoints).
    Harness,
}

impl fmt::Display for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sender::Broker(id) => write!(f, "broker-{id}"),
            Sender::Harness => f.write_str("harness"),
        }
    }
}

impl FromStr for Sender {
    type Err = AuthError;

    fn from_str(text: &str) -> Result<Sender, AuthError> {
        if text == "harness" {
            return Ok(Sender::Harness);
        }
        text.strip_prefix("broker-")
            .filter(|id| !id.starts_with('+') && !id.starts_with('0'))
            .and_then(|id| id.parse::<u32>().ok())
            .map(Sender::Broker)
            .ok_or_else(|| AuthError::BadSender(text.chars().take(64).collect()))
    }
}

/// The MAC of one request, in hex: HMAC-SHA256 under `secret` over the sender, the
/// method, the path with its query, and the body, each length-prefixed so that no two
/// different requests share an input.
pub fn mac(
    secret: &ClusterSecret,
    sender: Sender,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> String {
    let mut mac = secret.hmac();
    feed(&mut mac, sender, method, path_and_query, body);
    hex(&mac.finalize().into_bytes())
}

/// Checks a received request's headers against what was received; the sender it names
/// when they match.
pub fn verify(
    secret: &ClusterSecret,
    sender: Option<&[u8]>,
    signature: Option<&[u8]>,
    method: &str,
    path_and_query: &str,
    body: &[u8],
) -> Result<Sender, AuthError> {
    let sender = sender.ok_or(AuthError::NoSender)?;
    let sender: Sender = std::str::from_utf8(sender)
        .map_err(|_| AuthError::BadSender(String::from_utf8_lossy(sender).into_owned()))?
        .parse()?;
    let signature = signature.ok_or(AuthError::NoMac)?;
    let signature = unhex(signature).ok_or(AuthError::WrongMac)?;
    let mut mac = secret.hmac();
    feed(&mut mac, sender, method, path_and_query, body);
    // A constant-time comparison.
    mac.verify_slice(&signature)
        .map_err(|_| AuthError::WrongMac)?;
    Ok(sender)
}

fn feed(mac: &mut Hmac<Sha256>, sender: Sender, method: &str, path_and_query: &str, body: &[u8]) {
    mac.update(b"peer-auth v1\n");
    for part in [
        sender.to_string().as_bytes(),
        method.as_bytes(),
        path_and_query.as_bytes(),
        body,
    ] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
}

/// Signs the requests of one sender, or leaves them as they are when the cluster has no
/// secret.
#[derive(Debug, Clone)]
pub struct Signer {
    secret: Option<ClusterSecret>,
    sender: Sender,
}

impl Signer {
    pub fn new(secret: Option<ClusterSecret>, sender: Sender) -> Signer {
        Signer { secret, sender }
    }

    /// Adds the headers to `request` (its body must be bytes, not a stream).
    pub fn sign(&self, request: &mut reqwest::Request) -> Result<(), AuthError> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        let body = match request.body() {
            None => &[][..],
            Some(body) => body.as_bytes().ok_or(AuthError::StreamedBody)?,
        };
        let url = request.url();
        let path_and_query = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        };
        let signature = mac(
            secret,
            self.sender,
            request.method().as_str(),
            &path_and_query,
            body,
        );
        let headers = request.headers_mut();
        for (name, value) in [
            (SENDER_HEADER, self.sender.to_string()),
            (MAC_HEADER, signature),
        ] {
            // Both are ASCII: a sender's text and hex digits.
            if let Ok(value) = reqwest::header::HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        Ok(())
    }

    /// Builds `request` with `client`, signs it and sends it.
    pub async fn send(
        &self,
        client: &reqwest::Client,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, SendError> {
        let mut request = request.build().map_err(SendError::Http)?;
        self.sign(&mut request).map_err(SendError::Auth)?;
        client.execute(request).await.map_err(SendError::Http)
    }
}

/// Why a signed request was not answered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Http(reqwest::Error),
    #[error(transparent)]
    Auth(AuthError),
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 128 {
        return None;
    }
    text.chunks(2)
        .map(|pair| {
            let digit = |c: u8| char::from(c).to_digit(16);
            u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ClusterSecret {
        ClusterSecret::from_hex("000102030405060708090a0b0c0d0e0f").expect("secret")
    }

    #[test]
    fn a_signed_request_verifies_and_names_its_sender() {
        let s = secret();
        let m = mac(&s, Sender::Broker(2), "POST", "/raft/vote", b"{}");
        let got = verify(
            &s,
            Some(b"broker-2"),
            Some(m.as_bytes()),
            "POST",
            "/raft/vote",
            b"{}",
        );
        assert_eq!(got, Ok(Sender::Broker(2)));
        let h = mac(
            &s,
            Sender::Harness,
            "PUT",
            "/v1/debug/failpoints/x?y=1",
            b"",
        );
        let got = verify(
            &s,
            Some(b"harness"),
            Some(h.as_bytes()),
            "PUT",
            "/v1/debug/failpoints/x?y=1",
            b"",
        );
        assert_eq!(got, Ok(Sender::Harness));
    }

    #[test]
    fn any_change_to_the_request_or_the_key_is_refused() {
        let s = secret();
        let m = mac(&s, Sender::Broker(2), "POST", "/raft/vote", b"{\"a\":1}");
        let wrong = |sender: &[u8], method, path, body: &[u8]| {
            verify(&s, Some(sender), Some(m.as_bytes()), method, path, body)
        };
        assert_eq!(
            wrong(b"broker-3", "POST", "/raft/vote", b"{\"a\":1}"),
            Err(AuthError::WrongMac)
        );
        assert_eq!(
            wrong(b"broker-2", "PUT", "/raft/vote", b"{\"a\":1}"),
            Err(AuthError::WrongMac)
        );
        assert_eq!(
            wrong(b"broker-2", "POST", "/raft/append", b"{\"a\":1}"),
            Err(AuthError::WrongMac)
        );
        assert_eq!(
            wrong(b"broker-2", "POST", "/raft/vote", b"{\"a\":2}"),
            Err(AuthError::WrongMac)
        );
        let other = ClusterSecret::from_hex("ff0102030405060708090a0b0c0d0e0f").expect("secret");
        assert_eq!(
            verify(
                &other,
                Some(b"broker-2"),
                Some(m.as_bytes()),
                "POST",
                "/raft/vote",
                b"{\"a\":1}"
            ),
            Err(AuthError::WrongMac)
        );
        // A part's bytes moved into its neighbour make another input.
        let a = mac(&s, Sender::Broker(1), "POST", "/ab", b"c");
        let b = mac(&s, Sender::Broker(1), "POST", "/a", b"bc");
        assert_ne!(a, b);
    }

    #[test]
    fn missing_or_malformed_headers_are_refused() {
        let s = secret();
        let m = mac(&s, Sender::Broker(1), "GET", "/", b"");
        assert_eq!(
            verify(&s, None, Some(m.as_bytes()), "GET", "/", b""),
            Err(AuthError::NoSender)
        );
        assert_eq!(
            verify(&s, Some(b"broker-1"), None, "GET", "/", b""),
            Err(AuthError::NoMac)
        );
        for bad in [
            &b"broker-"[..],
            b"broker-x",
            b"broker-01",
            b"broker-+1",
            b"root",
            b"\xff",
            b"broker-99999999999",
        ] {
            assert!(matches!(
                verify(&s, Some(bad), Some(m.as_bytes()), "GET", "/", b""),
                Err(AuthError::BadSender(_))
            ));
        }
        for bad in [&b""[..], b"zz", b"abc", &[b'a'; 1000]] {
            assert_eq!(
                verify(&s, Some(b"broker-1"), Some(bad), "GET", "/", b""),
                Err(AuthError::WrongMac)
            );
        }
    }

    #[test]
    fn secrets_parse_from_hex_within_bounds_and_hide_in_debug() {
        assert!(ClusterSecret::from_hex("00").is_err());
        assert!(ClusterSecret::from_hex("0g0102030405060708090a0b0c0d0e0f").is_err());
        assert!(ClusterSecret::from_hex("000102030405060708090a0b0c0d0e0").is_err());
        assert!(ClusterSecret::from_hex(&"ab".repeat(MAX_SECRET_BYTES + 1)).is_err());
        assert!(ClusterSecret::from_hex("é0102030405060708090a0b0c0d0e0f").is_err());
        let drawn = ClusterSecret::draw().expect("draw");
        assert_eq!(ClusterSecret::from_hex(&drawn.to_hex()), Ok(drawn.clone()));
        assert_ne!(drawn, ClusterSecret::draw().expect("draw"));
        assert!(!format!("{drawn:?}").contains(&drawn.to_hex()[..8]));
        let id = drawn.cluster_id();
        assert_eq!(id.len(), 16);
        assert_eq!(
            ClusterSecret::from_hex(&drawn.to_hex())
                .unwrap()
                .cluster_id(),
            id
        );
        assert_ne!(ClusterSecret::draw().unwrap().cluster_id(), id);
        assert!(!drawn.to_hex().contains(&id));
    }

    #[test]
    fn a_signer_signs_what_verify_accepts_and_nothing_without_a_secret() {
        let s = secret();
        let client = reqwest::Client::new();
        let mut request = client
            .post("http://127.0.0.1:1/v1/replication/fetch?x=1")
            .body("{\"k\":1}")
            .build()
            .expect("request");
        Signer::new(Some(s.clone()), Sender::Broker(4))
            .sign(&mut request)
            .expect("sign");
        let header = |name| request.headers().get(name).map(|v| v.as_bytes());
        let got = verify(
            &s,
            header(SENDER_HEADER),
            header(MAC_HEADER),
            "POST",
            "/v1/replication/fetch?x=1",
            b"{\"k\":1}",
        );
        assert_eq!(got, Ok(Sender::Broker(4)));
        let mut plain = client.get("http://127.0.0.1:1/").build().expect("request");
        Signer::new(None, Sender::Harness)
            .sign(&mut plain)
            .expect("no-op");
        assert!(plain.headers().get(MAC_HEADER).is_none());
    }
}
