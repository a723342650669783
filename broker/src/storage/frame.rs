//! The on-disk frame of one record. Layout (all integers little-endian):
//!
//! ```text
//! byte 0   u32  length        bytes after this field: 20 + value_len
//! byte 4   u64  offset
//! byte 12  u32  leader_epoch
//! byte 16  u32  value_len
//! byte 20  [u8; value_len] value
//! then     u32  crc32c        over bytes [0, 20 + value_len): header and value
//! ```
//!
//! `length` and `value_len` say the same thing twice on purpose: a scan must decide how
//! many bytes to read before it can check the CRC, and a corrupt length that still fits
//! the file is caught by the disagreement instead of by reading a garbage-sized frame.
//! The CRC covers the length field too, so no bit of a frame goes unchecked.

use super::crc::crc32c;
use crate::record::{LeaderEpoch, Offset, Record};

/// Bytes of the fixed header: length, offset, leader epoch, value length.
pub(crate) const HEADER_LEN: usize = 20;
const LENGTH_FIELD_LEN: usize = 4;
const CRC_LEN: usize = 4;

/// Bytes a frame adds to its value: `frame length = FRAME_OVERHEAD + value length`.
pub const FRAME_OVERHEAD: u64 = (HEADER_LEN + CRC_LEN) as u64;

/// The largest value a frame can hold: its `length` field is a u32.
pub(crate) const MAX_VALUE_LEN: usize =
    u32::MAX as usize - (HEADER_LEN - LENGTH_FIELD_LEN) - CRC_LEN;

/// Why bytes on disk are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("torn record: {needed} bytes needed, {available} on disk")]
    Torn { needed: u64, available: u64 },
    #[error("bad length field {length} for a value of {value_len} bytes")]
    BadLength { length: u32, value_len: u32 },
    #[error("bad CRC: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
}

/// A frame decoded in place.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    pub offset: Offset,
    pub leader_epoch: LeaderEpoch,
    pub value: &'a [u8],
    /// Bytes the whole frame occupies.
    pub len: usize,
}

impl Frame<'_> {
    pub(crate) fn to_record(&self) -> Record {
        Record::new(self.offset, self.leader_epoch, self.value)
    }
}

/// Bytes the frame of a value of `value_len` bytes occupies.
pub(crate) fn frame_len(value_len: usize) -> u64 {
    FRAME_OVERHEAD + value_len as u64
}

/// Appends the frame of `record` to `out`. The caller has checked that the value is at
/// most [`MAX_VALUE_LEN`] bytes; a longer one would not round-trip.
pub(crate) fn encode(record: &Record, out: &mut Vec<u8>) {
    debug_assert!(record.value.len() <= MAX_VALUE_LEN);
    let start = out.len();
    let value_len = record.value.len() as u32;
    let length = value_len + (HEADER_LEN - LENGTH_FIELD_LEN + CRC_LEN) as u32;
    out.extend_from_slice(&length.to_le_bytes());
    out.extend_from_slice(&record.offset.to_le_bytes());
    out.extend_from_slice(&record.leader_epoch.to_le_bytes());
    out.extend_from_slice(&value_len.to_le_bytes());
    out.extend_from_slice(&record.value);
    let crc = crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// The length of the frame whose header starts `bytes`, checked against the header's two
/// length fields and against the `available` bytes from the frame's start to the end of
/// the file. Lets a scan size its read before trusting anything else.
pub(crate) fn checked_frame_len(bytes: &[u8], available: u64) -> Result<usize, FrameError> {
    if bytes.len() < HEADER_LEN {
        return Err(FrameError::Torn {
            needed: HEADER_LEN as u64,
            available: available.min(bytes.len() as u64),
        });
    }
    let length = le_u32(bytes, 0);
    let value_len = le_u32(bytes, 16);
    let expected = u64::from(value_len) + (HEADER_LEN - LENGTH_FIELD_LEN + CRC_LEN) as u64;
    if u64::from(length) != expected {
        return Err(FrameError::BadLength { length, value_len });
    }
    let needed = LENGTH_FIELD_LEN as u64 + u64::from(length);
    if needed > available {
        return Err(FrameError::Torn { needed, available });
    }
    usize::try_from(needed).map_err(|_| FrameError::BadLength { length, value_len })
}

/// Decodes the frame at the start of `bytes` (which may hold more after it).
pub(crate) fn decode(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
    let len = checked_frame_len(bytes, bytes.len() as u64)?;
    let body_end = len - CRC_LEN;
    let stored = le_u32(bytes, body_end);
    let computed = crc32c(&bytes[..body_end]);
    if stored != computed {
        return Err(FrameError::BadCrc { stored, computed });
    }
    Ok(Frame {
        offset: le_u64(bytes, 4),
        leader_epoch: le_u32(bytes, 12),
        value: &bytes[HEADER_LEN..body_end],
        len,
    })
}

// Callers have checked that `bytes` holds the field, so indexing cannot go out of range.
fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(record: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        encode(record, &mut out);
        out
    }

    #[test]
    fn round_trips_and_has_the_documented_layout() {
        let record = Record::new(0x0102_0304_0506_0708, 7, "hello");
        let bytes = encoded(&record);
        assert_eq!(bytes.len() as u64, frame_len(5));
        assert_eq!(&bytes[0..4], &25u32.to_le_bytes());
        assert_eq!(&bytes[4..12], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&bytes[12..16], &7u32.to_le_bytes());
        assert_eq!(&bytes[16..20], &5u32.to_le_bytes());
        assert_eq!(&bytes[20..25], b"hello");
        assert_eq!(&bytes[25..29], &crc32c(&bytes[..25]).to_le_bytes());
        let frame = decode(&bytes).unwrap();
        assert_eq!(frame.to_record(), record);
        assert_eq!(frame.len, bytes.len());
    }

    #[test]
    fn empty_value_round_trips() {
        let record = Record::new(3, 0, Vec::new());
        let bytes = encoded(&record);
        assert_eq!(bytes.len() as u64, FRAME_OVERHEAD);
        assert_eq!(decode(&bytes).unwrap().to_record(), record);
    }

    #[test]
    fn decodes_the_first_of_several_frames() {
        let mut bytes = encoded(&Record::new(0, 1, "a"));
        let first_len = bytes.len();
        encode(&Record::new(1, 1, "bb"), &mut bytes);
        let first = decode(&bytes).unwrap();
        assert_eq!((first.offset, first.len), (0, first_len));
        let second = decode(&bytes[first_len..]).unwrap();
        assert_eq!((second.offset, second.value), (1, &b"bb"[..]));
    }

    #[test]
    fn every_truncation_is_torn() {
        let bytes = encoded(&Record::new(9, 2, "value"));
        for cut in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..cut]), Err(FrameError::Torn { .. })),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = encoded(&Record::new(9, 2, "some value"));
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x40;
            let result = decode(&flipped);
            assert!(
                matches!(
                    result,
                    Err(FrameError::BadCrc { .. } | FrameError::BadLength { .. })
                ),
                "byte {i}: {result:?}"
            );
        }
    }

    #[test]
    fn a_length_beyond_the_file_is_torn_not_allocated() {
        let mut bytes = encoded(&Record::new(0, 0, "x"));
        bytes[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        bytes[16..20].copy_from_slice(&(u32::MAX - 20).to_le_bytes());
        assert_eq!(
            checked_frame_len(&bytes, bytes.len() as u64),
            Err(FrameError::Torn {
                needed: 4 + u64::from(u32::MAX),
                available: bytes.len() as u64
            })
        );
    }
}
