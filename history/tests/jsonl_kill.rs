//! A writer killed with SIGKILL mid-stream leaves a history that reads up to its last
//! flush: dense indices from 0, at most the last line torn (and reported as such).

use history::jsonl::{read_jsonl, JsonlWriter};
use history::{Op, OpType, Process};
use std::process::Command;
use std::time::{Duration, Instant};

const WRITER_ENV: &str = "HISTORY_KILL_TEST_WRITER";

/// Runs as the child: appends ops until killed.
fn write_forever(path: &str) -> ! {
    let writer = match JsonlWriter::with_flush_every(std::path::Path::new(path), 64) {
        Ok(writer) => writer,
        Err(e) => {
            eprintln!("writer: {e}");
            std::process::exit(1)
        }
    };
    let padding = "p".repeat(300);
    for index in 0u64.. {
        let process = Process::Client(index % 7);
        let kind = if index % 2 == 0 {
            OpType::Invoke
        } else {
            OpType::Ok
        };
        let value = serde_json::json!({"key": "t/0", "value": index, "padding": padding});
        if writer
            .append(&Op::new(index, process, kind, "append", value))
            .is_err()
        {
            std::process::exit(1);
        }
        if index % 500 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::process::exit(0)
}

#[test]
fn a_killed_writer_leaves_a_readable_history() {
    if let Ok(path) = std::env::var(WRITER_ENV) {
        write_forever(&path);
    }
    let dir = std::env::temp_dir().join(format!("history-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("history.jsonl");
    let me = std::env::current_exe().expect("test binary path");
    let mut child = Command::new(me)
        .args([
            "--exact",
            "a_killed_writer_leaves_a_readable_history",
            "--nocapture",
        ])
        .env(WRITER_ENV, &path)
        .spawn()
        .expect("spawn the writer");
    // Kill it once it has written plenty (bounded wait).
    let started = Instant::now();
    while std::fs::metadata(&path).map_or(0, |m| m.len()) < 2 << 20
        && started.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL the writer");
    let _ = child.wait();

    let history = read_jsonl(&path).expect("a killed writer's history reads cleanly");
    assert!(history.len() > 1000, "only {} ops written", history.len());
    for (i, op) in history.ops.iter().enumerate() {
        assert_eq!(
            op.index, i as u64,
            "indices are dense: nothing torn or lost before the last flush"
        );
    }
    // A kill may cut the last write(2) short; then exactly the last line is incomplete.
    let text = std::fs::read_to_string(&path).expect("read back");
    let line_count = text.lines().count();
    match &history.torn_tail {
        Some(torn) => {
            assert!(!text.ends_with('\n'));
            assert_eq!(torn.line, line_count, "only the last line may be torn");
            assert_eq!(history.len(), line_count - 1);
        }
        None => {
            assert!(text.ends_with('\n'));
            assert_eq!(history.len(), line_count);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
