//! The pages a user opens, as a browser renders them: a stored run checked into the
//! project (`tests/data/run-KAFKA-1561-buggy`, a buggy KAFKA-1561 reproduction: invalid,
//! with lost writes and fault periods) gets its report written by `harness report`;
//! headless Chromium then loads `report.html`, `timeline.html` (at an anomaly's op
//! link) and the `harness serve` index. The rendered DOM must show the verdict, the
//! plots and the anomaly links, and the pages' error hook must have seen no script
//! error.
//!
//! Needs Chromium (`chromium`, which `scripts/install-test-deps` installs); without it
//! the test fails saying so.

mod common;

use common::Scratch;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FIXTURE: &str = "tests/data/run-KAFKA-1561-buggy";

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let out = Command::new("which").arg(name).output().ok()?;
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
        })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The DOM after load (and a few seconds of virtual time for scripts), as Chromium
/// serializes it.
fn dump_dom(browser: &Path, profile: &Path, url: &str) -> String {
    let out = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed on {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the first `name="..."` attribute after `from` in `dom`.
fn attribute<'a>(dom: &'a str, from: &str, name: &str) -> Option<&'a str> {
    let at = dom.find(from)?;
    let rest = &dom[at..];
    let start = rest.find(&format!("{name}=\""))? + name.len() + 2;
    let end = rest[start..].find('"')?;
    Some(&rest[start..start + end])
}

fn assert_no_script_errors(dom: &str, page: &str) {
    let errors = attribute(dom, "<body", "data-script-errors");
    assert_eq!(
        errors,
        Some("0"),
        "{page}: the page's error hook saw script errors (or never ran): {}",
        &dom[..dom.len().min(2000)]
    );
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
#[allow(non_snake_case)]
fn needs_chromium__report_timeline_and_index_render_in_a_browser_without_script_errors() {
    let Some(browser) = chromium() else {
        common::missing(
            "needs chromium (apt-get install chromium; looked for chromium, chromium-browser \
             and google-chrome on PATH)",
        );
    };
    let scratch = Scratch::new("report-browser");
    let store = scratch.0.join("store");
    let run = store.join("KAFKA-1561-buggy").join("20261130T052541");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE), &run);
    let profile = scratch.0.join("profile");

    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("report")
        .arg(&run)
        .output()
        .expect("harness runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "harness report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(run.join("report.html").is_file() && run.join("timeline.html").is_file());

    // report.html: verdict, both plots, anomaly links into the timeline.
    let dom = dump_dom(
        &browser,
        &profile,
        &format!("file://{}", run.join("report.html").display()),
    );
    assert_no_script_errors(&dom, "report.html");
    assert_eq!(
        attribute(&dom, "id=\"verdict\"", "data-verdict"),
        Some("invalid"),
        "verdict banner"
    );
    assert!(dom.contains("lost-write"), "the anomaly is named");
    for plot in ["latency", "throughput"] {
        let marker = format!("data-plot=\"{plot}\"");
        let at = dom
            .find(&marker)
            .unwrap_or_else(|| panic!("no {plot} plot"));
        // A plot with content: some marks after it.
        let after = &dom[at..dom.len().min(at + 200_000)];
        assert!(
            after.contains("<circle") || after.contains("<path") || after.contains("<rect"),
            "the {plot} plot is empty"
        );
    }
    let link = attribute(&dom, "class=\"op-link\"", "href")
        .or_else(|| {
            // The class may come after the href in the tag.
            let at = dom.find("class=\"op-link\"")?;
            let tag_start = dom[..at].rfind('<')?;
            attribute(&dom[tag_start..], "<a", "href")
        })
        .expect("an anomaly links to its ops");
    assert!(link.starts_with("timeline.html#i"), "{link}");
    let index: u64 = link["timeline.html#i".len()..]
        .parse()
        .expect("the link names an op index");

    // timeline.html, opened at that op: the op is on the page.
    let dom = dump_dom(
        &browser,
        &profile,
        &format!("file://{}#i{index}", run.join("timeline.html").display()),
    );
    assert_no_script_errors(&dom, "timeline.html");
    assert!(dom.contains("id=\"timeline\""), "timeline container");
    let ops = std::fs::read_to_string(run.join("history.jsonl"))
        .expect("history")
        .lines()
        .count();
    // Every operation (an invocation and its completion) is one bar.
    let shown = attribute(&dom, "<body", "data-ops").and_then(|n| n.parse::<usize>().ok());
    assert!(
        shown.is_some_and(|n| n >= ops / 2 && n <= ops),
        "data-ops {shown:?} for {ops} history lines"
    );
    // The op's bar (or, for a completion's index, the anchor inside its bar).
    assert!(
        dom.contains(&format!("id=\"i{index}\"")),
        "the linked op {index} is rendered"
    );
    assert!(dom.contains("class=\"op"), "bars are rendered");

    // The serve index lists the run, coloured invalid.
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["serve", "--port", &port.to_string(), "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("harness serve starts");
    let stderr = child.stderr.take();
    let server = Server(child);
    let began = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if began.elapsed() > Duration::from_secs(20) {
            let mut said = String::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_string(&mut said);
            }
            panic!("harness serve did not listen: {said}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let dom = dump_dom(&browser, &profile, &format!("http://127.0.0.1:{port}/"));
    assert_no_script_errors(&dom, "index");
    assert!(dom.contains("id=\"runs\""), "runs table");
    assert!(dom.contains("KAFKA-1561-buggy"), "the run is listed");
    assert_eq!(attribute(&dom, "<tr", "data-verdict").map(|_| ()), Some(()));
    assert!(
        dom.contains("data-verdict=\"invalid\""),
        "the run is invalid"
    );
    drop(server);
}
