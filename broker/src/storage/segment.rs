//! One segment file: the frames of a contiguous run of offsets starting at its base
//! offset, and an in-memory index (byte position and leader epoch of each record) that
//! is rebuilt by scanning the file on open.

use super::checkpoint::io_error;
use super::frame::{self, FrameError, HEADER_LEN};
use crate::log::LogError;
use crate::record::{LeaderEpoch, Offset, Record};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const SEGMENT_SUFFIX: &str = ".log";
const NAME_DIGITS: usize = 20;
const SCAN_BUFFER_BYTES: usize = 64 * 1024;

/// The file name of the segment whose first offset is `base_offset`:
/// `00000000000000000042.log`, so that names sort as offsets do.
pub fn segment_file_name(base_offset: Offset) -> String {
    format!("{base_offset:0width$}{SEGMENT_SUFFIX}", width = NAME_DIGITS)
}

/// The base offset a segment file name stands for; `None` for any other file.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<Offset> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    position: u64,
    leader_epoch: LeaderEpoch,
}

/// Where and why recovery cut a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cut {
    /// The offset of the first record dropped (the next offset the segment expected).
    pub offset: Offset,
    /// The byte the file was truncated at.
    pub position: u64,
    pub reason: String,
}

#[derive(Debug)]
pub(crate) struct Segment {
    base_offset: Offset,
    path: PathBuf,
    file: File,
    /// Entry `i` is the record at `base_offset + i`.
    index: Vec<IndexEntry>,
    /// Bytes of whole, valid frames; the file holds nothing we serve past this.
    size: u64,
}

impl Segment {
    /// Creates an empty segment, replacing any untracked file of that name (which can
    /// only be the remains of a deletion that failed).
    pub(crate) fn create(dir: &Path, base_offset: Offset) -> Result<Segment, LogError> {
        let path = dir.join(segment_file_name(base_offset));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(io_error(&path))?;
        Ok(Segment {
            base_offset,
            path,
            file,
            index: Vec::new(),
            size: 0,
        })
    }

    /// Opens a segment file and indexes its frames. The first frame that is torn,
    /// corrupt or out of sequence (its offset is not the next one) ends the segment: the
    /// file is truncated there and fsynced, and the cut is returned so the caller can
    /// drop the segments after it.
    pub(crate) fn recover(
        path: PathBuf,
        base_offset: Offset,
    ) -> Result<(Segment, Option<Cut>), LogError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        let file_len = file.metadata().map_err(io_error(&path))?.len();
        let mut reader = BufReader::with_capacity(SCAN_BUFFER_BYTES, &file);
        let mut index = Vec::new();
        let mut position = 0u64;
        let mut buffer = Vec::new();
        let problem = loop {
            let expected = base_offset + index.len() as Offset;
            let available = file_len - position;
            if available == 0 {
                break None;
            }
            match scan_frame(&mut reader, available, &mut buffer) {
                Ok((offset, leader_epoch, len)) if offset == expected => {
                    index.push(IndexEntry {
                        position,
                        leader_epoch,
                    });
                    position += len as u64;
                }
                Ok((offset, ..)) => {
                    break Some(format!(
                        "record offset {offset} where offset {expected} is next"
                    ))
                }
                Err(ScanError::Frame(e)) => break Some(e.to_string()),
                Err(ScanError::Io(e)) => return Err(io_error(&path)(e)),
            }
        };
        let cut = match problem {
            None => None,
            Some(reason) => {
                file.set_len(position).map_err(io_error(&path))?;
                file.sync_all().map_err(io_error(&path))?;
                let offset = base_offset + index.len() as Offset;
                tracing::warn!(
                    file = %path.display(),
                    offset,
                    position,
                    reason = %reason,
                    "log cut during recovery: records from this offset on are dropped"
                );
                Some(Cut {
                    offset,
                    position,
                    reason,
                })
            }
        };
        let segment = Segment {
            base_offset,
            path,
            file,
            index,
            size: position,
        };
        Ok((segment, cut))
    }

    pub(crate) fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// One past the last record held.
    pub(crate) fn end_offset(&self) -> Offset {
        self.base_offset + self.index.len() as Offset
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    fn slot(&self, offset: Offset) -> Option<usize> {
        let slot = usize::try_from(offset.checked_sub(self.base_offset)?).ok()?;
        (slot < self.index.len()).then_some(slot)
    }

    /// How many records from `from` on (at most `max_records`) have values that fit in
    /// `max_bytes`, their value bytes, and whether the byte limit is what stopped the
    /// count (the next record would not fit). From the index alone: nothing is read.
    pub(crate) fn count_within(
        &self,
        from: Offset,
        max_records: usize,
        max_bytes: usize,
    ) -> (usize, usize, bool) {
        let Some(first) = self.slot(from) else {
            return (0, 0, false);
        };
        let last = first.saturating_add(max_records).min(self.index.len());
        let mut bytes = 0usize;
        for slot in first..last {
            let end = self
                .index
                .get(slot + 1)
                .map_or(self.size, |entry| entry.position);
            let frame_len = end.saturating_sub(self.index[slot].position);
            let value_len = usize::try_from(frame_len.saturating_sub(frame::FRAME_OVERHEAD))
                .unwrap_or(usize::MAX);
            if bytes.saturating_add(value_len) > max_bytes {
                return (slot - first, bytes, true);
            }
            bytes += value_len;
        }
        (last - first, bytes, false)
    }

    pub(crate) fn epoch_at(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.slot(offset).map(|slot| self.index[slot].leader_epoch)
    }

    /// Writes `records` (the caller has checked they are the next offsets and fit a
    /// frame) with one pwrite(2). On failure the file is cut back so a partial batch
    /// cannot be found by a later recovery.
    pub(crate) fn append(&mut self, records: &[Record]) -> Result<(), LogError> {
        let mut bytes = Vec::new();
        let mut entries = Vec::with_capacity(records.len());
        for record in records {
            entries.push(IndexEntry {
                position: self.size + bytes.len() as u64,
                leader_epoch: record.leader_epoch,
            });
            frame::encode(record, &mut bytes);
        }
        if let Err(source) = self.file.write_all_at(&bytes, self.size) {
            // Best effort: if this fails too, the next append overwrites from `size`
            // and recovery rejects any stale tail by CRC and offset.
            let _ = self.file.set_len(self.size);
            return Err(io_error(&self.path)(source));
        }
        self.size += bytes.len() as u64;
        self.index.extend(entries);
        Ok(())
    }

    /// Up to `max_records` records from `from` (which this segment holds), with one
    /// read(2) of the byte range they span.
    pub(crate) fn read(&self, from: Offset, max_records: usize) -> Result<Vec<Record>, LogError> {
        let Some(first) = self.slot(from) else {
            return Ok(Vec::new());
        };
        let last = first.saturating_add(max_records).min(self.index.len());
        if first == last {
            return Ok(Vec::new());
        }
        let start = self.index[first].position;
        let end = self
            .index
            .get(last)
            .map_or(self.size, |entry| entry.position);
        let len = usize::try_from(end - start)
            .map_err(|_| self.corrupt(format!("{} bytes do not fit in memory", end - start)))?;
        let mut bytes = vec![0u8; len];
        self.file
            .read_exact_at(&mut bytes, start)
            .map_err(io_error(&self.path))?;
        let mut records = Vec::with_capacity(last - first);
        let mut at = 0usize;
        for expected in from..from + (last - first) as Offset {
            // The file changed under us since it was indexed: report, never serve it.
            let frame = frame::decode(&bytes[at..]).map_err(|e| {
                self.corrupt(format!(
                    "offset {expected} at byte {}: {e}",
                    start + at as u64
                ))
            })?;
            if frame.offset != expected {
                return Err(self.corrupt(format!(
                    "record offset {} at byte {} where {expected} was indexed",
                    frame.offset,
                    start + at as u64
                )));
            }
            records.push(frame.to_record());
            at += frame.len;
        }
        Ok(records)
    }

    /// Removes the records at and above `offset` and fsyncs, so that records appended
    /// after a truncation can never be followed, after a crash, by ones before it.
    pub(crate) fn truncate_to(&mut self, offset: Offset) -> Result<(), LogError> {
        let Some(keep) = self.slot(offset) else {
            return Ok(());
        };
        let position = self.index[keep].position;
        self.file.set_len(position).map_err(io_error(&self.path))?;
        self.file.sync_all().map_err(io_error(&self.path))?;
        self.index.truncate(keep);
        self.size = position;
        Ok(())
    }

    /// fsyncs the records written so far (fdatasync also persists the file length).
    pub(crate) fn sync(&self) -> Result<(), LogError> {
        self.file.sync_data().map_err(io_error(&self.path))
    }

    /// Deletes the file (the open handle stays usable until dropped, so a caller can
    /// forget the segment only once this succeeded); the caller fsyncs the directory.
    pub(crate) fn delete(&self) -> Result<(), LogError> {
        fs::remove_file(&self.path).map_err(io_error(&self.path))
    }

    fn corrupt(&self, message: String) -> LogError {
        LogError::Corrupt {
            path: self.path.clone(),
            message,
        }
    }
}

enum ScanError {
    Frame(FrameError),
    Io(io::Error),
}

/// Reads the next frame during recovery: its offset, leader epoch and length.
/// `available` is the bytes left in the file, which bound what a length field may claim.
fn scan_frame(
    reader: &mut impl Read,
    available: u64,
    buffer: &mut Vec<u8>,
) -> Result<(Offset, LeaderEpoch, usize), ScanError> {
    if available < HEADER_LEN as u64 {
        return Err(ScanError::Frame(FrameError::Torn {
            needed: HEADER_LEN as u64,
            available,
        }));
    }
    buffer.resize(HEADER_LEN, 0);
    read_exact_or_torn(reader, buffer, available)?;
    let len = frame::checked_frame_len(buffer, available).map_err(ScanError::Frame)?;
    buffer.resize(len, 0);
    read_exact_or_torn(reader, &mut buffer[HEADER_LEN..], available)?;
    let frame = frame::decode(buffer).map_err(ScanError::Frame)?;
    Ok((frame.offset, frame.leader_epoch, frame.len))
}

/// A file that shrinks while we scan it is torn where it ends, not an I/O failure.
fn read_exact_or_torn(
    reader: &mut impl Read,
    into: &mut [u8],
    available: u64,
) -> Result<(), ScanError> {
    reader.read_exact(into).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ScanError::Frame(FrameError::Torn {
                needed: into.len() as u64,
                available,
            })
        } else {
            ScanError::Io(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_twenty_digit_base_offsets() {
        assert_eq!(segment_file_name(42), "00000000000000000042.log");
        assert_eq!(segment_file_name(u64::MAX), "18446744073709551615.log");
        assert_eq!(
            parse_segment_file_name("00000000000000000042.log"),
            Some(42)
        );
        assert_eq!(
            parse_segment_file_name("18446744073709551615.log"),
            Some(u64::MAX)
        );
        for other in [
            "42.log",
            "0000000000000000042.log",
            "000000000000000000042.log",
            "99999999999999999999.log",
            "0000000000000000004x.log",
            "00000000000000000042.log.tmp",
            "00000000000000000042.index",
            "leader-epoch-checkpoint",
        ] {
            assert_eq!(parse_segment_file_name(other), None, "{other}");
        }
    }
}
