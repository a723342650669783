//! `harness serve`: the store over HTTP (loopback by default).
//!
//! - `GET /`: the index of every run ([`report::index`]), rescanned on each request.
//! - `GET /<name>/<time>/<file>` (any path under the store): the file, typed by its
//!   extension; a folder (its URL ending in `/`) as a plain listing.
//!
//! Paths are percent-decoded, then refused (400) if a segment is empty, `.` or `..`;
//! what remains is resolved with symlinks followed and must still lie inside the store,
//! or it is not found (404). Only regular files are served (a FIFO, a socket or a device
//! in the store is not found), streamed in chunks as the browser takes them (no range
//! requests). The listener has the bounds of [`serving::Limits`]: a connection cap, and
//! timeouts on request heads, answers and stalled downloads.
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The store to serve.
    #[arg(long, default_value = "store", value_name = "DIR")]
    pub store: PathBuf,

    /// The port to listen on.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,

    /// The address to bind (loopback unless asked otherwise).
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: std::net::IpAddr,
}

pub fn run(args: &ServeArgs) -> Result<i32> {
    let store = args
        .store
        .canonicalize()
        .with_context(|| format!("cannot open the store {}", args.store.display()))?;
    if !store.is_dir() {
        anyhow::bail!("the store {} is not a folder", args.store.display());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((args.bind, args.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", args.bind, args.port))?;
        let addr = listener
            .local_addr()
            .context("cannot read the bound address")?;
        println!("serving {} at http://{addr}/", args.store.display());
        serving::serve(listener, router(store), limits(), ctrl_c()).await;
        println!("stopped");
        Ok(0)
    })
}

/// The listener's bounds: the defaults, with fewer connections (a browser opens a few).
fn limits() -> serving::Limits {
    serving::Limits {
        max_connections: 256,
        ..serving::Limits::default()
    }
}

/// Resolves on Ctrl-C; never, should the handler not install.
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The routes over `store` (canonicalized here when it can be).
pub fn router(store: PathBuf) -> Router {
    let root = store.canonicalize().unwrap_or(store);
    Router::new()
        .route("/", get(index))
        .route("/{*path}", get(file))
        .with_state(Arc::new(root))
}

async fn index(State(root): State<Arc<PathBuf>>) -> Response {
    let page = tokio::task::spawn_blocking(move || {
        report::index::scan(&root).map(|runs| report::index::render(&root, &runs))
    })
    .await;
    match page {
        Ok(Ok(page)) => no_cache(Html(page).into_response()),
        Ok(Err(error)) => text(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the index could not be built",
        ),
    }
}

/// What a request under the store comes to.
#[derive(Debug)]
enum Reply {
    File {
        file: std::fs::File,
        len: u64,
        content_type: &'static str,
    },
    Listing(String),
    /// A folder asked for without the trailing `/`.
    AddSlash,
    NotFound,
}

async fn file(State(root): State<Arc<PathBuf>>, uri: Uri) -> Response {
    let raw = uri.path();
    let Some(segments) = segments(raw) else {
        return text(StatusCode::BAD_REQUEST, "bad path");
    };
    let wants_folder = raw.ends_with('/');
    let reply = tokio::task::spawn_blocking(move || lookup(&root, &segments, wants_folder)).await;
    match reply {
        Ok(Ok(Reply::File {
            file,
            len,
            content_type,
        })) => no_cache(
            (
                [
                    (header::CONTENT_TYPE, content_type),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                ],
                Body::new(FileBody::new(tokio::fs::File::from_std(file), len)),
            )
                .into_response(),
        ),
        Ok(Ok(Reply::Listing(page))) => no_cache(Html(page).into_response()),
        Ok(Ok(Reply::AddSlash)) => match HeaderValue::try_from(format!("{raw}/")) {
            Ok(location) => (
                StatusCode::PERMANENT_REDIRECT,
                [(header::LOCATION, location)],
            )
                .into_response(),
            Err(_) => text(StatusCode::BAD_REQUEST, "bad path"),
        },
        Ok(Ok(Reply::NotFound)) => text(StatusCode::NOT_FOUND, "not found"),
        Ok(Err(error)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot read: {error}"),
        ),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "cannot read"),
    }
}

/// The decoded segments of a request path, or `None` when it is malformed or tries to
/// leave its folder: bad percent-encoding, not UTF-8, a NUL, an empty segment (`//`,
/// which would also make an absolute path), `.` or `..`. A trailing `/` is dropped.
fn segments(raw: &str) -> Option<Vec<String>> {
    let path = raw.strip_prefix('/')?;
    let path = path.strip_suffix('/').unwrap_or(path);
    let decoded = String::from_utf8(percent_decode(path)?).ok()?;
    let segments: Vec<String> = decoded.split('/').map(str::to_string).collect();
    let bad = |s: &String| s.is_empty() || s == "." || s == ".." || s.contains('\0');
    (!segments.iter().any(bad)).then_some(segments)
}

/// `%XX` decoded; `None` on a malformed escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Finds `segments` under `root`, following symlinks only as far as they stay inside it.
fn lookup(root: &Path, segments: &[String], wants_folder: bool) -> std::io::Result<Reply> {
    let candidate = segments.iter().fold(root.to_path_buf(), |p, s| p.join(s));
    let resolved = match candidate.canonicalize() {
        Ok(resolved) => resolved,
        Err(e) if is_missing(&e) => return Ok(Reply::NotFound),
        Err(e) => return Err(e),
    };
    if !resolved.starts_with(root) {
        return Ok(Reply::NotFound);
    }
    if resolved.is_dir() {
        if !wants_folder {
            return Ok(Reply::AddSlash);
        }
        return Ok(Reply::Listing(listing(&resolved, &segments.join("/"))?));
    }
    if wants_folder {
        return Ok(Reply::NotFound);
    }
    // Only regular files: opening a FIFO would wait for a writer, a device may never end.
    // (`is_dir` above and `metadata` here follow the path's symlinks, as `canonicalize` did.)
    match std::fs::metadata(&resolved) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Ok(Reply::NotFound),
        Err(e) if is_missing(&e) => return Ok(Reply::NotFound),
        Err(e) => return Err(e),
    }
    let mut file = match std::fs::File::open(&resolved) {
        Ok(file) => file,
        Err(e) if is_missing(&e) => return Ok(Reply::NotFound),
        Err(e) => return Err(e),
    };
    // What was opened, not what the path named a moment earlier.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Reply::NotFound);
    }
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    (&mut file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(Reply::File {
        file,
        len: meta.len(),
        content_type: content_type(&resolved, &head),
    })
}

/// How much of a file of unknown extension is looked at to tell text from bytes.
const SNIFF_BYTES: usize = 8192;

/// How much of a file one chunk of its response carries.
const CHUNK_BYTES: usize = 64 << 10;

/// A file's first `len` bytes as a response body, read a chunk at a time as the peer
/// takes them, so that a large history costs one chunk of memory per download. A file
/// that grows meanwhile (a running test's history) is sent as it was when opened; one
/// that shrinks ends the response with an error (the peer sees it cut short).
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    chunk: Vec<u8>,
}

impl FileBody {
    fn new(file: tokio::fs::File, len: u64) -> FileBody {
        FileBody {
            file,
            remaining: len,
            chunk: Vec::new(),
        }
    }
}

impl http_body::Body for FileBody {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.remaining).map_or(CHUNK_BYTES, |r| r.min(CHUNK_BYTES));
        this.chunk.resize(want, 0);
        let mut buf = tokio::io::ReadBuf::new(&mut this.chunk);
        match tokio::io::AsyncRead::poll_read(Pin::new(&mut this.file), cx, &mut buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len();
                if read == 0 {
                    return Poll::Ready(Some(Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "the file shrank while it was sent",
                    ))));
                }
                this.remaining -= read as u64;
                let data = bytes::Bytes::copy_from_slice(&this.chunk[..read]);
                Poll::Ready(Some(Ok(http_body::Frame::data(data))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// The listing page of folder `dir`, shown as `shown`.
fn listing(dir: &Path, shown: &str) -> std::io::Result<String> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // Follows symlinks: `latest` lists as the folder it points to.
        let meta = std::fs::metadata(entry.path()).ok();
        let is_dir = meta.as_ref().is_some_and(|m| m.is_dir());
        entries.push(report::index::ListingEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            is_dir,
            size: meta.filter(|m| m.is_file()).map(|m| m.len()),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(report::index::render_listing(shown, &entries))
}

/// The content type for a file, by extension; text or bytes by content when unknown.
fn content_type(path: &Path, bytes: &[u8]) -> &'static str {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("jsonl" | "log" | "txt" | "toml" | "md" | "csv") => "text/plain; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        _ if std::str::from_utf8(&bytes[..bytes.len().min(8192)]).is_ok() => {
            "text/plain; charset=utf-8"
        }
        _ => "application/octet-stream",
    }
}

fn text(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

/// Runs change while served: let the browser revalidate.
fn no_cache(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::SocketAddr;
    use std::time::Duration;

    /// A fresh folder under the system temp folder, removed on drop.
    struct Temp(PathBuf);

    impl Temp {
        fn new(tag: &str) -> Temp {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir().join(format!(
                "harness-serve-{tag}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Temp(dir)
        }

        fn file(&self, rel: &str, content: &str) {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const RUN: &str = "log/20260101T000000";

    /// `<tmp>/store` with one run, and `<tmp>/secret.txt` outside it, linked from the run.
    fn sample() -> Temp {
        let tmp = Temp::new("sample");
        tmp.file(
            &format!("store/{RUN}/test.json"),
            r#"{"seed":7,"workload":"log"}"#,
        );
        tmp.file(&format!("store/{RUN}/history.jsonl"), "{\"index\":0}\n");
        tmp.file(
            &format!("store/{RUN}/results.json"),
            r#"{"verdict":"invalid"}"#,
        );
        tmp.file(&format!("store/{RUN}/report.html"), "<html>report</html>");
        tmp.file(&format!("store/{RUN}/nodes/n1/broker.log"), "started\n");
        tmp.file(&format!("store/{RUN}/nodes/n1/<b>.txt"), "x");
        tmp.file("secret.txt", "TOP SECRET");
        let run = tmp.0.join("store").join(RUN);
        std::os::unix::fs::symlink(tmp.0.join("secret.txt"), run.join("secret.txt")).unwrap();
        std::os::unix::fs::symlink(&tmp.0, run.join("outside")).unwrap();
        std::os::unix::fs::symlink(&run, tmp.0.join("store/log/latest")).unwrap();
        tmp
    }

    async fn start(store: PathBuf) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serving::serve(
            listener,
            router(store),
            limits(),
            std::future::pending(),
        ));
        addr
    }

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    /// Sends `target` verbatim (clients would normalize `..` away); status and body.
    async fn raw_get(addr: SocketAddr, target: &str) -> (u16, String) {
        let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            stream.write_all(request.as_bytes()).unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            let status = response
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap();
            (status, response)
        })
        .await
        .unwrap()
    }

    async fn get(addr: SocketAddr, path: &str) -> reqwest::Response {
        client()
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap()
    }

    fn content_type_of(response: &reqwest::Response) -> String {
        response.headers()[header::CONTENT_TYPE.as_str()]
            .to_str()
            .unwrap()
            .to_string()
    }

    #[tokio::test]
    async fn index_lists_the_runs() {
        let tmp = sample();
        let addr = start(tmp.0.join("store")).await;
        let response = get(addr, "/").await;
        assert_eq!(response.status(), 200);
        assert_eq!(content_type_of(&response), "text/html; charset=utf-8");
        let page = response.text().await.unwrap();
        assert!(page.contains(r#"<table id="runs">"#));
        assert!(page.contains(r#"<tr data-verdict="invalid">"#));
        assert_eq!(
            page.matches("<tr data-verdict=").count(),
            1,
            "latest is not a run"
        );
        assert!(page.contains(r#"href="./log/20260101T000000/report.html""#));
    }

    #[tokio::test]
    async fn files_are_served_with_their_content_type() {
        let tmp = sample();
        let addr = start(tmp.0.join("store")).await;
        for (file, content_type, body) in [
            (
                "report.html",
                "text/html; charset=utf-8",
                "<html>report</html>",
            ),
            (
                "results.json",
                "application/json",
                r#"{"verdict":"invalid"}"#,
            ),
            (
                "history.jsonl",
                "text/plain; charset=utf-8",
                "{\"index\":0}\n",
            ),
            (
                "nodes/n1/broker.log",
                "text/plain; charset=utf-8",
                "started\n",
            ),
        ] {
            let response = get(addr, &format!("/{RUN}/{file}")).await;
            assert_eq!(response.status(), 200, "{file}");
            assert_eq!(content_type_of(&response), content_type, "{file}");
            assert_eq!(response.text().await.unwrap(), body, "{file}");
        }
        // Through the `latest` link (it stays inside the store), percent-encoded.
        let response = get(addr, "/log/latest/report%2Ehtml").await;
        assert_eq!(response.status(), 200);
        assert_eq!(get(addr, &format!("/{RUN}/nope.json")).await.status(), 404);
        assert_eq!(
            get(addr, &format!("/{RUN}/report.html/")).await.status(),
            404
        );
    }

    #[tokio::test]
    async fn folders_redirect_then_list_escaped() {
        let tmp = sample();
        let addr = start(tmp.0.join("store")).await;
        let response = get(addr, &format!("/{RUN}/nodes")).await;
        assert_eq!(response.status(), 308);
        assert_eq!(
            response.headers()["location"],
            format!("/{RUN}/nodes/").as_str()
        );
        let response = get(addr, &format!("/{RUN}/nodes/n1/")).await;
        assert_eq!(response.status(), 200);
        let page = response.text().await.unwrap();
        assert!(page.contains(r#"<a href="./broker.log">broker.log</a>"#));
        assert!(page.contains(r#"<a href="./%3Cb%3E.txt">&lt;b&gt;.txt</a>"#));
        assert!(!page.contains("<b>"));
    }

    #[tokio::test]
    async fn traversal_is_refused() {
        let tmp = sample();
        let addr = start(tmp.0.join("store")).await;
        for target in [
            "/../secret.txt",
            "/../../../../etc/passwd",
            "/%2e%2e/secret.txt",
            "/%2E%2E/%2e%2e/etc/passwd",
            "/log/..%2f..%2fsecret.txt",
            "/log/%2e%2e/%2e%2e/secret.txt",
            "//etc/passwd",
            "/log/./20260101T000000/report.html",
            "/%2fetc/passwd",
            "/log/%00",
            "/log/%zz",
        ] {
            let (status, response) = raw_get(addr, target).await;
            assert_eq!(status, 400, "{target}: {response}");
            assert!(response.ends_with("bad path\n"), "{target}: {response}");
        }
        for target in [
            format!("/{RUN}/secret.txt"),
            format!("/{RUN}/outside/secret.txt"),
            format!("/{RUN}/outside/"),
        ] {
            let (status, response) = raw_get(addr, &target).await;
            assert_eq!(status, 404, "{target}: {response}");
            assert!(!response.contains("TOP SECRET"));
        }
    }

    #[tokio::test]
    async fn only_regular_files_are_served_and_large_ones_whole() {
        let tmp = sample();
        let run = tmp.0.join("store").join(RUN);
        // A FIFO nobody writes to: opening it would wait for ever.
        let fifo = run.join("pipe.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", run.join("zero.log")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", tmp.0.join("store/dev-zero")).unwrap();
        let big: String = (0..200_000).map(|i| format!("{i:09}\n")).collect();
        tmp.file(&format!("store/{RUN}/big.jsonl"), &big);
        let addr = start(tmp.0.join("store")).await;
        for path in [
            format!("/{RUN}/pipe.jsonl"),
            format!("/{RUN}/zero.log"),
            "/dev-zero".to_string(),
        ] {
            let response = tokio::time::timeout(Duration::from_secs(5), get(addr, &path))
                .await
                .expect("answered at once");
            assert_eq!(response.status(), 404, "{path}");
        }
        let response = get(addr, &format!("/{RUN}/big.jsonl")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-length"],
            big.len().to_string().as_str()
        );
        assert_eq!(response.text().await.unwrap(), big);
    }

    #[test]
    fn segments_decode_and_refuse() {
        assert_eq!(
            segments("/a%20b/c/"),
            Some(vec!["a b".to_string(), "c".to_string()])
        );
        assert_eq!(segments("/a/%2E%2e"), None);
        assert_eq!(segments("/a//b"), None);
        assert_eq!(segments("/a/%"), None);
        assert_eq!(segments("/a/%ff"), None);
        assert_eq!(segments("a"), None);
    }
}
