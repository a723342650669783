//! The small files beside the segments: high watermark, leader-epoch cache, log start
//! offset. Each is replaced atomically (temp file, fsync, rename, fsync the directory),
//! so a reader sees the old contents or the new, never a mix; anything else in one means
//! it was edited by hand, and we refuse it rather than guess.
//!
//! Formats (text, `\n` after every line, Kafka's layout with a version line first):
//!
//! ```text
//! replication-offset-checkpoint   log-start-offset   leader-epoch-checkpoint
//! 0                               0                  0
//! <high watermark>                <offset>           <number of entries>
//!                                                    <epoch> <start offset>   (per entry)
//! ```

use crate::log::{EpochEntry, LogError};
use crate::record::Offset;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

pub(crate) const HIGH_WATERMARK_FILE: &str = "replication-offset-checkpoint";
pub(crate) const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";
pub(crate) const LOG_START_OFFSET_FILE: &str = "log-start-offset";
/// Suffix of a checkpoint being written; one left over from a crash is deleted on open.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";
const VERSION: &str = "0";

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Makes renames, creations and deletions in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Replaces `dir/name` with `contents` so that a crash leaves the old or the new file.
pub(crate) fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> Result<(), LogError> {
    let path = dir.join(name);
    let temp = dir.join(format!("{name}{TEMP_SUFFIX}"));
    let mut file = File::create(&temp).map_err(io_error(&temp))?;
    file.write_all(contents).map_err(io_error(&temp))?;
    file.sync_all().map_err(io_error(&temp))?;
    drop(file);
    fs::rename(&temp, &path).map_err(io_error(&path))?;
    sync_dir(dir)
}

/// The contents of `dir/name`, or `None` when there is no such file.
fn read_text(dir: &Path, name: &str) -> Result<Option<String>, LogError> {
    let path = dir.join(name);
    match fs::read(&path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| corrupt(&path, "not UTF-8 text".to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(&path)(e)),
    }
}

fn corrupt(path: &Path, message: String) -> LogError {
    LogError::Corrupt {
        path: path.to_path_buf(),
        message,
    }
}

/// The offset in checkpoint `name` (high watermark or log start offset); 0 if missing.
pub(crate) fn read_offset(dir: &Path, name: &str) -> Result<Offset, LogError> {
    match read_text(dir, name)? {
        None => Ok(0),
        Some(text) => parse_offset(&text).map_err(|message| corrupt(&dir.join(name), message)),
    }
}

pub(crate) fn write_offset(dir: &Path, name: &str, offset: Offset) -> Result<(), LogError> {
    write_atomic(dir, name, format!("{VERSION}\n{offset}\n").as_bytes())
}

/// The leader-epoch cache; empty if the file is missing.
pub(crate) fn read_epochs(dir: &Path) -> Result<Vec<EpochEntry>, LogError> {
    match read_text(dir, LEADER_EPOCH_FILE)? {
        None => Ok(Vec::new()),
        Some(text) => {
            parse_epochs(&text).map_err(|message| corrupt(&dir.join(LEADER_EPOCH_FILE), message))
        }
    }
}

pub(crate) fn write_epochs(dir: &Path, entries: &[EpochEntry]) -> Result<(), LogError> {
    if let Some(message) = epochs_out_of_order(entries) {
        // Written, this could never be read back: the next open would refuse it.
        return Err(LogError::Contract(format!(
            "leader-epoch checkpoint: {message}"
        )));
    }
    let mut text = format!("{VERSION}\n{}\n", entries.len());
    for entry in entries {
        text.push_str(&format!("{} {}\n", entry.epoch, entry.start_offset));
    }
    write_atomic(dir, LEADER_EPOCH_FILE, text.as_bytes())
}

fn epochs_out_of_order(entries: &[EpochEntry]) -> Option<String> {
    entries.windows(2).find_map(|pair| {
        (pair[1].epoch <= pair[0].epoch).then(|| {
            format!(
                "epoch {} follows epoch {}: epochs must increase",
                pair[1].epoch, pair[0].epoch
            )
        })
    })
}

/// Splits `text` into lines, requiring the version line first and a final newline.
fn versioned_lines(text: &str) -> Result<Vec<&str>, String> {
    let body = text
        .strip_suffix('\n')
        .ok_or_else(|| "does not end with a newline".to_string())?;
    let lines: Vec<&str> = body.split('\n').collect();
    match lines.first() {
        Some(&VERSION) => Ok(lines),
        Some(other) => Err(format!("unknown version {other:?} (expected {VERSION})")),
        None => Err("empty".to_string()),
    }
}

/// Digits only: `str::parse` would also take a leading `+`, which we never write.
fn parse_number<T: std::str::FromStr>(field: &str, what: &str, line: usize) -> Result<T, String> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("line {line}: {what} {field:?} is not a number"));
    }
    field
        .parse()
        .map_err(|_| format!("line {line}: {what} {field:?} is out of range"))
}

fn parse_offset(text: &str) -> Result<Offset, String> {
    let lines = versioned_lines(text)?;
    match lines.as_slice() {
        [_, offset] => parse_number(offset, "offset", 2),
        _ => Err(format!("{} lines, expected 2", lines.len())),
    }
}

fn parse_epochs(text: &str) -> Result<Vec<EpochEntry>, String> {
    let lines = versioned_lines(text)?;
    let count_line = lines
        .get(1)
        .ok_or_else(|| "no entry count on line 2".to_string())?;
    let count: usize = parse_number(count_line, "entry count", 2)?;
    let entry_lines = &lines[2..];
    if entry_lines.len() != count {
        return Err(format!(
            "{} entries where line 2 says {count}",
            entry_lines.len()
        ));
    }
    let entries = entry_lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let line_number = i + 3;
            match line.split(' ').collect::<Vec<_>>().as_slice() {
                [epoch, start_offset] => Ok(EpochEntry {
                    epoch: parse_number(epoch, "epoch", line_number)?,
                    start_offset: parse_number(start_offset, "start offset", line_number)?,
                }),
                _ => Err(format!(
                    "line {line_number}: {line:?} is not \"<epoch> <start offset>\""
                )),
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    match epochs_out_of_order(&entries) {
        Some(message) => Err(message),
        None => Ok(entries),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("broker-checkpoint-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn entry(epoch: u32, start_offset: u64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    #[test]
    fn missing_checkpoints_read_as_zero_and_empty() {
        let dir = TempDir::new("missing");
        assert_eq!(read_offset(&dir.0, HIGH_WATERMARK_FILE).unwrap(), 0);
        assert_eq!(read_offset(&dir.0, LOG_START_OFFSET_FILE).unwrap(), 0);
        assert!(read_epochs(&dir.0).unwrap().is_empty());
    }

    #[test]
    fn writes_read_back_and_replace_whole_files() {
        let dir = TempDir::new("round-trip");
        write_offset(&dir.0, HIGH_WATERMARK_FILE, 123_456).unwrap();
        assert_eq!(read_offset(&dir.0, HIGH_WATERMARK_FILE).unwrap(), 123_456);
        write_offset(&dir.0, HIGH_WATERMARK_FILE, 7).unwrap();
        assert_eq!(
            fs::read_to_string(dir.0.join(HIGH_WATERMARK_FILE)).unwrap(),
            "0\n7\n"
        );
        let entries = [entry(1, 0), entry(3, 10), entry(4, 10)];
        write_epochs(&dir.0, &entries).unwrap();
        assert_eq!(read_epochs(&dir.0).unwrap(), entries);
        assert_eq!(
            fs::read_to_string(dir.0.join(LEADER_EPOCH_FILE)).unwrap(),
            "0\n3\n1 0\n3 10\n4 10\n"
        );
        write_epochs(&dir.0, &[]).unwrap();
        assert!(read_epochs(&dir.0).unwrap().is_empty());
        // The temp file was renamed away, not left beside the checkpoint.
        let names: Vec<String> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(TEMP_SUFFIX)), "{names:?}");
    }

    #[test]
    fn a_leftover_temp_file_does_not_affect_the_checkpoint() {
        // A crash between writing the temp file and the rename leaves both behind.
        let dir = TempDir::new("atomic");
        write_offset(&dir.0, HIGH_WATERMARK_FILE, 5).unwrap();
        fs::write(
            dir.0.join(format!("{HIGH_WATERMARK_FILE}{TEMP_SUFFIX}")),
            "0\n9",
        )
        .unwrap();
        assert_eq!(read_offset(&dir.0, HIGH_WATERMARK_FILE).unwrap(), 5);
        write_offset(&dir.0, HIGH_WATERMARK_FILE, 6).unwrap();
        assert_eq!(read_offset(&dir.0, HIGH_WATERMARK_FILE).unwrap(), 6);
    }

    #[test]
    fn malformed_offset_checkpoints_are_corrupt_and_name_the_file() {
        let dir = TempDir::new("malformed-offset");
        for text in [
            "",
            "0\n",
            "0\n5",
            "1\n5\n",
            "0\n-5\n",
            "0\n+5\n",
            "0\n5 \n",
            "0\n5\n6\n",
            "0\nfive\n",
            "0\n99999999999999999999999\n",
        ] {
            fs::write(dir.0.join(HIGH_WATERMARK_FILE), text).unwrap();
            match read_offset(&dir.0, HIGH_WATERMARK_FILE) {
                Err(LogError::Corrupt { path, .. }) => {
                    assert_eq!(path, dir.0.join(HIGH_WATERMARK_FILE), "{text:?}")
                }
                other => panic!("{text:?} read as {other:?}"),
            }
        }
        fs::write(dir.0.join(HIGH_WATERMARK_FILE), [0xFF, b'\n']).unwrap();
        assert!(matches!(
            read_offset(&dir.0, HIGH_WATERMARK_FILE),
            Err(LogError::Corrupt { .. })
        ));
    }

    #[test]
    fn malformed_epoch_checkpoints_are_corrupt() {
        let dir = TempDir::new("malformed-epochs");
        for text in [
            "0\n",
            "0\n1\n",
            "0\n2\n1 0\n",
            "0\n1\n1 0\n2 5\n",
            "0\n1\n1\n",
            "0\n1\n1  0\n",
            "0\n1\n1 0 3\n",
            "0\n2\n3 0\n3 5\n",
            "0\n2\n4 0\n3 5\n",
            "0\nx\n",
            "0\n1\n1 0",
        ] {
            fs::write(dir.0.join(LEADER_EPOCH_FILE), text).unwrap();
            match read_epochs(&dir.0) {
                Err(LogError::Corrupt { path, .. }) => {
                    assert_eq!(path, dir.0.join(LEADER_EPOCH_FILE), "{text:?}")
                }
                other => panic!("{text:?} read as {other:?}"),
            }
        }
    }

    #[test]
    fn refuses_to_write_epochs_it_could_not_read_back() {
        let dir = TempDir::new("unordered");
        assert!(matches!(
            write_epochs(&dir.0, &[entry(2, 0), entry(2, 5)]),
            Err(LogError::Contract(_))
        ));
        assert!(!dir.0.join(LEADER_EPOCH_FILE).exists());
    }
}
