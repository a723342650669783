//! The pages' scripts and stylesheets, kept as real files under `report/assets/` and
//! compiled in, so every page stays self-contained (each is inlined into the HTML; no
//! page fetches anything).
//!
//! `base.css` holds the rules report.html and the nightly summary.html share; each page
//! inlines it followed by its own sheet. The scripts are static: what a page needs from
//! the run reaches them as data in the page (the timeline's JSON blocks, `data-`
//! attributes), never spliced into the code. None of them may contain `</script` or
//! `<!--`, nor a stylesheet `</style` (checked below), since they are inlined verbatim.

/// Rules shared by report.html and summary.html; inlined before the page's own sheet.
pub(crate) const BASE_CSS: &str = include_str!("../assets/base.css");
/// report.html's own rules, after [`BASE_CSS`].
pub(crate) const PAGE_CSS: &str = include_str!("../assets/page.css");
/// The nightly summary.html's own rules, after [`BASE_CSS`].
pub(crate) const NIGHTLY_CSS: &str = include_str!("../assets/nightly.css");
/// The store index and the folder listings.
pub(crate) const INDEX_CSS: &str = include_str!("../assets/index.css");
/// timeline.html.
pub(crate) const TIMELINE_CSS: &str = include_str!("../assets/timeline.css");
/// A linearizability failure drawn: the `<style>` inside its SVG.
pub(crate) const LINEAR_CSS: &str = include_str!("../assets/linear.css");

/// Records script errors in `body[data-script-errors]`: `"<count>: <messages>"` after an
/// error, `"0"` once loaded without one. report.html and summary.html start their body
/// with it.
pub(crate) const ONERROR_JS: &str = include_str!("../assets/onerror.js");
/// The index's row filter, with its own error count in `body[data-script-errors]`.
pub(crate) const INDEX_JS: &str = include_str!("../assets/index.js");
/// timeline.html's error hook, in its head; [`TIMELINE_JS`] sets `"0"` once drawn.
pub(crate) const TIMELINE_ONERROR_JS: &str = include_str!("../assets/timeline-onerror.js");
/// Draws the timeline from the page's data blocks.
pub(crate) const TIMELINE_JS: &str = include_str!("../assets/timeline.js");

/// Every script, by file name.
#[cfg(test)]
pub(crate) const SCRIPTS: [(&str, &str); 4] = [
    ("onerror.js", ONERROR_JS),
    ("index.js", INDEX_JS),
    ("timeline-onerror.js", TIMELINE_ONERROR_JS),
    ("timeline.js", TIMELINE_JS),
];

/// Every stylesheet, by file name.
#[cfg(test)]
pub(crate) const STYLESHEETS: [(&str, &str); 6] = [
    ("base.css", BASE_CSS),
    ("page.css", PAGE_CSS),
    ("nightly.css", NIGHTLY_CSS),
    ("index.css", INDEX_CSS),
    ("timeline.css", TIMELINE_CSS),
    ("linear.css", LINEAR_CSS),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// Inlined verbatim, an asset must not end its element or open an HTML comment.
    #[test]
    fn assets_cannot_close_their_element() {
        for (name, text) in SCRIPTS {
            let lower = text.to_ascii_lowercase();
            assert!(!lower.contains("</script"), "{name} contains </script");
            assert!(!lower.contains("<!--"), "{name} contains <!--");
        }
        for (name, text) in STYLESHEETS {
            let lower = text.to_ascii_lowercase();
            assert!(!lower.contains("</style"), "{name} contains </style");
            assert!(!lower.contains("<!--"), "{name} contains <!--");
        }
    }

    /// Every script under `report/assets/` is one of [`SCRIPTS`], so the syntax check
    /// below sees them all.
    #[test]
    fn every_script_file_is_listed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let entries = std::fs::read_dir(&dir).expect("report/assets is readable");
        for entry in entries {
            let name = entry.expect("a directory entry").file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".js") {
                assert!(
                    SCRIPTS.iter().any(|(listed, _)| *listed == name),
                    "report/assets/{name} is not in assets::SCRIPTS"
                );
            }
        }
    }

    /// `node --check` on every script (and the timeline test's DOM stub). Requires node:
    /// without it the test fails rather than passing unchecked.
    #[test]
    fn scripts_parse() {
        let version = Command::new("node").arg("--version").output();
        assert!(
            version.is_ok_and(|out| out.status.success()),
            "node is not on PATH: install nodejs (Debian: apt-get install nodejs) to check \
             the report's scripts"
        );
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = SCRIPTS
            .iter()
            .map(|(name, _)| root.join("assets").join(name))
            .chain([root.join("testdata/timeline-dom-stub.js")]);
        for file in files {
            let out = Command::new("node")
                .arg("--check")
                .arg(&file)
                .output()
                .expect("node runs");
            assert!(
                out.status.success(),
                "{} does not parse: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
