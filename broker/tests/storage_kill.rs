//! A writer SIGKILLed mid-stream (with `FlushPolicy::OsOnly`, so nothing was fsynced on
//! purpose) loses no append that returned: `append` puts the bytes in the OS before it
//! returns, and the OS outlives the process. Recovery serves nothing beyond the LEO.

use broker::log::ReplicaLog;
use broker::record::{Offset, Record};
use broker::storage::{FlushPolicy, SegmentLog, StorageConfig};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WRITER_ENV: &str = "BROKER_STORAGE_KILL_WRITER_DIR";
const TEST_NAME: &str = "storage_kill_nine_loses_no_returned_append";
const CONFIG: StorageConfig = StorageConfig {
    segment_bytes: 64 * 1024,
    flush_policy: FlushPolicy::OsOnly,
};
/// Printed-record bytes after which the parent kills the writer.
const KILL_AFTER_BYTES: usize = 1 << 20;
/// The writer stops by itself past this, should the parent be gone.
const WRITER_LIMIT_BYTES: usize = 256 << 20;
const LINE_PREFIX: &str = "appended ";

/// The record at `offset`, recomputable by the parent.
fn expected_record(offset: Offset) -> Record {
    let len = 20 + (offset * 7919 % 300) as usize;
    let value: Vec<u8> = (0..len)
        .map(|i| (offset.wrapping_mul(2_654_435_761).wrapping_add(i as u64) >> 3) as u8)
        .collect();
    Record::new(offset, (offset / 1000) as u32 + 1, value)
}

/// Runs as the child: appends batches of 1–4 records forever, printing each offset
/// after its `append` returned.
fn write_forever(dir: &Path) -> ! {
    let mut log = match SegmentLog::open(dir, CONFIG) {
        Ok(log) => log,
        Err(e) => {
            eprintln!("writer: open: {e}");
            std::process::exit(1)
        }
    };
    let mut stdout = std::io::stdout().lock();
    let mut written = 0usize;
    let mut next: Offset = 0;
    while written < WRITER_LIMIT_BYTES {
        let batch: Vec<Record> = (next..next + 1 + next % 4).map(expected_record).collect();
        if let Err(e) = log.append(&batch) {
            eprintln!("writer: append: {e}");
            std::process::exit(1);
        }
        for record in &batch {
            written += record.value.len();
            if writeln!(stdout, "{LINE_PREFIX}{}", record.offset)
                .and_then(|()| stdout.flush())
                .is_err()
            {
                std::process::exit(1);
            }
        }
        next += batch.len() as Offset;
    }
    std::process::exit(0)
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn storage_kill_nine_loses_no_returned_append() {
    if let Some(dir) = std::env::var_os(WRITER_ENV) {
        write_forever(Path::new(&dir));
    }
    let dir =
        TempDir(std::env::temp_dir().join(format!("broker-storage-kill-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    let me = std::env::current_exe().expect("test binary path");
    let mut child = Command::new(me)
        .args(["--exact", TEST_NAME, "--nocapture"])
        .env(WRITER_ENV, &dir.0)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    // A reader thread, so every wait below is bounded even if the child hangs.
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut acknowledged: Vec<Offset> = Vec::new();
    let mut acknowledged_bytes = 0usize;
    while acknowledged_bytes < KILL_AFTER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match lines.recv_timeout(left) {
            Ok(line) => line,
            Err(e) => {
                let _ = child.kill();
                panic!(
                    "writer went quiet after {} appends: {e}",
                    acknowledged.len()
                );
            }
        };
        // The test harness prints its own lines ("running 1 test") on the same stdout.
        if let Some(offset) = line.strip_prefix(LINE_PREFIX) {
            let offset: Offset = offset.parse().expect("an offset");
            acknowledged_bytes += expected_record(offset).value.len();
            acknowledged.push(offset);
        }
    }
    child.kill().expect("SIGKILL the writer");
    let status = child.wait().expect("reap the writer");
    assert!(
        !status.success(),
        "the writer was killed, not finished: {status}"
    );
    // Lines the child printed before dying count as acknowledged too.
    let drain_deadline = Instant::now() + Duration::from_secs(5);
    while let Ok(line) =
        lines.recv_timeout(drain_deadline.saturating_duration_since(Instant::now()))
    {
        if let Some(offset) = line.strip_prefix(LINE_PREFIX) {
            acknowledged.push(offset.parse().expect("an offset"));
        }
    }
    let _ = reader.join();

    for (i, &offset) in acknowledged.iter().enumerate() {
        assert_eq!(offset, i as Offset, "the writer printed offsets in order");
    }
    let mut log = SegmentLog::open(&dir.0, CONFIG).expect("reopen after the kill");
    let end = log.log_end_offset();
    eprintln!(
        "killed after {} acknowledged appends; recovered LEO {end}",
        acknowledged.len()
    );
    assert!(
        end >= acknowledged.len() as Offset,
        "LEO {end} after {} acknowledged appends",
        acknowledged.len()
    );
    assert!(
        log.segment_base_offsets().len() > 4,
        "the writer rolled segments"
    );
    // Every record served, acknowledged or written just before the kill, is exact.
    let records = log.read(0, usize::MAX).expect("read the recovered log");
    assert_eq!(records.len() as Offset, end);
    for record in &records {
        assert_eq!(*record, expected_record(record.offset));
    }
    assert!(log.read(end, 10).expect("read at the LEO").is_empty());
    assert!(log.read(end + 1, 1).is_err());
    assert_eq!(log.epoch_at(end), None);
    log.append(&[expected_record(end)])
        .expect("append after recovery");
    assert_eq!(log.log_end_offset(), end + 1);
}
