//! CRC-32C (Castagnoli), the checksum Kafka's v2 record batches carry.
//!
//! Table-driven, one byte at a time: segments are checksummed once on recovery and per
//! read, which is far from the cost of the I/O around it.

/// The Castagnoli polynomial 0x1EDC6F41, bit-reversed because the CRC is computed
/// least-significant bit first (the "reflected" form every CRC-32C user agrees on).
const POLYNOMIAL_REFLECTED: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLYNOMIAL_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
}

/// The CRC-32C of `bytes`.
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc = TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::crc32c;

    #[test]
    fn matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn matches_rfc_3720_test_vectors() {
        // iSCSI (RFC 3720 §B.4) publishes these for CRC-32C.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
    }

    #[test]
    fn empty_input_is_zero_and_any_flipped_bit_changes_it() {
        assert_eq!(crc32c(&[]), 0);
        let data = b"a record value".to_vec();
        let original = crc32c(&data);
        for i in 0..data.len() * 8 {
            let mut flipped = data.clone();
            flipped[i / 8] ^= 1 << (i % 8);
            assert_ne!(crc32c(&flipped), original, "bit {i}");
        }
    }
}
