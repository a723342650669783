//! The history formats the harness reads, and guessing which one a file is in.

use crate::error::HistoryError;
use crate::history::History;
use crate::{jepsen, jsonl, porcupine};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The harness's own: one JSON op per line.
    Jsonl,
    /// Jepsen/Knossos EDN: a vector of op maps, or one op map per line.
    JepsenEdn,
    /// Porcupine's etcd logs (`INFO  jepsen.util - 3 :ok :read 4`).
    PorcupineEtcd,
    /// Porcupine's kv histories: one EDN op map per line, each with `:key`.
    PorcupineKv,
}

impl Format {
    pub const ALL: [Format; 4] = [
        Format::Jsonl,
        Format::JepsenEdn,
        Format::PorcupineEtcd,
        Format::PorcupineKv,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::JepsenEdn => "jepsen-edn",
            Format::PorcupineEtcd => "porcupine-etcd",
            Format::PorcupineKv => "porcupine-kv",
        }
    }

    /// Guesses the format from the file name and its first non-blank, non-comment line.
    pub fn guess(path: &Path, text: &str) -> Option<Format> {
        let first = text
            .lines()
            .map(str::trim_start)
            .find(|line| !line.is_empty() && !line.starts_with(';'));
        if let Some(line) = first {
            if line.contains("jepsen.util - ") {
                return Some(Format::PorcupineEtcd);
            }
            if line.starts_with("{\"") {
                return Some(Format::Jsonl);
            }
            if line.starts_with("{:") && line.contains(":key ") {
                return Some(Format::PorcupineKv);
            }
            if line.starts_with('[')
                || line.starts_with("{:")
                || line.starts_with('(')
                || line.starts_with('#')
            {
                return Some(Format::JepsenEdn);
            }
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "json") => Some(Format::Jsonl),
            Some("edn") => Some(Format::JepsenEdn),
            // An empty Porcupine log is still a valid (empty) history.
            Some("log") if first.is_none() => Some(Format::PorcupineEtcd),
            _ => None,
        }
    }

    /// Parses `text` in this format; `source` names it in errors.
    /// Ops whose indices do not go strictly up are an error
    /// ([`History::check_index_order`]).
    pub fn parse(self, source: &str, text: &str) -> Result<History, HistoryError> {
        let history = match self {
            Format::Jsonl => jsonl::parse_jsonl(source, text),
            Format::JepsenEdn => jepsen::parse_jepsen_edn(source, text),
            Format::PorcupineEtcd => porcupine::parse_etcd_log(source, text),
            Format::PorcupineKv => porcupine::parse_kv(source, text),
        }?;
        history.check_index_order()?;
        Ok(history)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL
            .into_iter()
            .find(|format| format.name() == s)
            .ok_or_else(|| {
                format!("unknown format {s:?}: expected jsonl, jepsen-edn, porcupine-etcd or porcupine-kv")
            })
    }
}

/// Reads a history file in `format`, or in the format guessed from it.
pub fn read_history(
    path: &Path,
    format: Option<Format>,
) -> Result<(History, Format), HistoryError> {
    let text = crate::text::read_text(path)?;
    let source = path.display().to_string();
    let format = match format.or_else(|| Format::guess(path, &text)) {
        Some(format) => format,
        None => {
            return Err(HistoryError::parse(
                crate::Location {
                    source: Some(source),
                    line: 1,
                },
                "cannot tell the history format; pass --format jsonl|jepsen-edn|porcupine-etcd|porcupine-kv",
            ))
        }
    };
    Ok((format.parse(&source, &text)?, format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_from_content_then_extension() {
        let p = Path::new("x.txt");
        assert_eq!(
            Format::guess(p, "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n"),
            Some(Format::PorcupineEtcd)
        );
        assert_eq!(Format::guess(p, "{\"index\":0}\n"), Some(Format::Jsonl));
        assert_eq!(
            Format::guess(
                p,
                "{:process 0, :type :invoke, :f :get, :key \"1\", :value nil}\n"
            ),
            Some(Format::PorcupineKv)
        );
        assert_eq!(
            Format::guess(p, "; a comment\n[{:process 0 :type :invoke}]"),
            Some(Format::JepsenEdn)
        );
        assert_eq!(Format::guess(Path::new("h.jsonl"), ""), Some(Format::Jsonl));
        assert_eq!(
            Format::guess(Path::new("etcd_095.log"), ""),
            Some(Format::PorcupineEtcd)
        );
        assert_eq!(Format::guess(p, "hello"), None);
        assert_eq!("porcupine-kv".parse::<Format>(), Ok(Format::PorcupineKv));
        assert!("xml".parse::<Format>().is_err());
    }
}
