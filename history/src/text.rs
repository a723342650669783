//! Reading a history file's text with its memory bounded per line: a history is many short
//! lines, so a line longer than [`MAX_LINE_BYTES`] means the file is not one (a device such
//! as `/dev/zero`, a binary file, a damaged file) and reading stops there with an error,
//! instead of growing until the kernel kills the process.

use crate::error::{HistoryError, Location};
use std::io::{ErrorKind, Read};
use std::path::Path;

/// The longest line any history format may have: far above the longest op line the harness
/// writes or Jepsen prints, far below what would hurt the machine.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// Reads `path` as UTF-8 text, refusing a line longer than [`MAX_LINE_BYTES`].
pub fn read_text(path: &Path) -> Result<String, HistoryError> {
    read_text_limited(path, MAX_LINE_BYTES)
}

/// Reads `path` as UTF-8 text, refusing a line longer than `max_line_bytes`. Works on
/// pipes and FIFOs as well as regular files (it never asks for the size first).
pub fn read_text_limited(path: &Path, max_line_bytes: usize) -> Result<String, HistoryError> {
    let mut file = std::fs::File::open(path).map_err(|e| HistoryError::io(path, e))?;
    let source = path.display().to_string();
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let mut line = 1usize;
    let mut line_bytes = 0usize;
    loop {
        let read = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => &chunk[..n],
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(HistoryError::io(path, e)),
        };
        let mut rest = read;
        while !rest.is_empty() {
            let (piece, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                Some(at) => (at, true),
                None => (rest.len(), false),
            };
            line_bytes += piece;
            if line_bytes > max_line_bytes {
                return Err(HistoryError::parse(
                    Location {
                        source: Some(source),
                        line,
                    },
                    format!(
                        "line longer than {max_line_bytes} bytes: not a history (a device, a binary or a damaged file?)"
                    ),
                ));
            }
            if ends_line {
                line += 1;
                line_bytes = 0;
                rest = &rest[piece + 1..];
            } else {
                rest = &[];
            }
        }
        bytes.extend_from_slice(read);
    }
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bad_line = 1 + e.as_bytes()[..valid]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        HistoryError::parse(
            Location {
                source: Some(source),
                line: bad_line,
            },
            "not UTF-8 text: not a history (a binary or a damaged file?)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str, bytes: &[u8]) -> Scratch {
            let path =
                std::env::temp_dir().join(format!("history-text-{name}-{}", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn reads_text_whose_lines_fit() {
        let file = Scratch::new("fits", b"0123456789\n0123456789\n\n0123");
        assert_eq!(
            read_text_limited(&file.0, 10).unwrap(),
            "0123456789\n0123456789\n\n0123"
        );
    }

    #[test]
    fn a_line_over_the_limit_names_its_line() {
        let file = Scratch::new("long", b"short\nshort\n0123456789A\nshort\n");
        let err = read_text_limited(&file.0, 10).unwrap_err().to_string();
        assert!(err.ends_with(":3: line longer than 10 bytes: not a history (a device, a binary or a damaged file?)"), "{err}");
    }

    #[test]
    fn an_endless_device_stops_at_the_limit() {
        // /dev/zero is one endless line of NUL bytes: reading stops after the limit.
        let err = read_text_limited(Path::new("/dev/zero"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/dev/zero:1: line longer than"), "{err}");
    }

    #[test]
    fn bytes_that_are_not_utf8_name_their_line() {
        let file = Scratch::new("binary", b"ok\nok\n\xff\xfe\n");
        let err = read_text_limited(&file.0, 100).unwrap_err().to_string();
        assert!(err.contains(":3: not UTF-8 text"), "{err}");
    }
}
