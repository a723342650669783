//! `harness clean` for ssh runs: every control folder in the temp dir whose run's harness
//! is gone is read for its record ([`SshRunRecord`]); the dead harness's ssh masters
//! (whose sockets are in the folder) are told to exit, then the run is torn down from a
//! core rebuilt from the record, as its own teardown would have: the hosts reconnected,
//! the recorded daemons and every process naming the run folder killed, the chain and
//! its rule deleted, the run folder removed, then the folder here.

use super::record::{SshRunRecord, CONTROL_DIR_PREFIX};
use super::session::Inner;
use super::teardown::{await_master_exit, exit_argv, master_process};
use crate::netns::CleanReport;
use crate::state::is_prefix;
use crate::tools;
use crate::BackendError;
use std::path::{Path, PathBuf};

/// The control folders (`harness-ssh-<run id>`) in `dir`, sorted.
pub fn control_folders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().into_string().ok()?;
            let run_id = name.strip_prefix(CONTROL_DIR_PREFIX)?;
            is_prefix(run_id).then(|| entry.path())
        })
        .collect();
    found.sort();
    found
}

/// Removes what ssh runs whose harness is no longer running left on their hosts and
/// here. Runs whose harness still runs are listed in `skipped`; folders without a record
/// (a run starting this moment, or one of a harness from before records) are left alone
/// and listed there too.
pub async fn clean_leftovers() -> CleanReport {
    let mut report = CleanReport::default();
    for folder in control_folders(&std::env::temp_dir()) {
        match SshRunRecord::read(&folder) {
            Err(BackendError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                report.skipped.push(format!(
                    "{} (no run record: a run starting now, or one from an older harness; \
                     remove it by hand once its run is gone)",
                    folder.display()
                ));
            }
            Err(error) => report
                .failures
                .push(format!("{error}; left alone, remove it by hand")),
            Ok(record) if record.is_live() => report.skipped.push(format!(
                "ssh run {} (its harness, pid {}, is still running)",
                record.run_id, record.owner.pid
            )),
            Ok(record) => {
                let mut failures = stop_masters(&folder).await;
                let inner = Inner::restored(&record, folder.clone());
                match inner.teardown().await {
                    Ok(()) if failures.is_empty() => report.removed.push(format!(
                        "ssh run {} ({} on {} host(s), its processes and cut chain there; \
                         {} here)",
                        record.run_id,
                        inner.run_dir_text,
                        record.hosts.len(),
                        folder.display()
                    )),
                    Ok(()) => {}
                    Err(error) => failures.push(format!(
                        "{error} (if its hosts are gone for good, remove {} by hand)",
                        folder.display()
                    )),
                }
                report.failures.extend(
                    failures
                        .into_iter()
                        .map(|failure| format!("ssh run {}: {failure}", record.run_id)),
                );
            }
        }
    }
    report
}

/// Tells every ssh master whose control socket is under `folder` to exit and waits until
/// it has (killing one that outstays its grace); returns what failed.
async fn stop_masters(folder: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for socket in sockets_under(folder, 3) {
        let Some(master) = master_process(&socket).await else {
            continue;
        };
        if let Err(error) = tools::run_cancellable(exit_argv(&socket)).await {
            tracing::debug!(socket = %socket.display(), %error, "stopping a leftover ssh master");
        }
        if let Err(error) = await_master_exit(&master).await {
            failures.push(error);
        }
    }
    failures
}

/// The Unix sockets at most `depth` folders below `dir` (links not followed).
fn sockets_under(dir: &Path, depth: usize) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_socket() {
            found.push(entry.path());
        } else if kind.is_dir() && depth > 1 {
            found.extend(sockets_under(&entry.path(), depth - 1));
        }
    }
    found.sort();
    found
}

impl Inner {
    /// A core for the run `record` describes, holding what it made (for a teardown).
    pub(super) fn restored(record: &SshRunRecord, control_dir: PathBuf) -> Inner {
        let inner = Inner::new(
            record.options(),
            record.hosts.len(),
            record.run_id.clone(),
            control_dir,
            record.owner.clone(),
            record.created.clone(),
        );
        inner.restore(record);
        inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_folders_named_after_a_run_id_are_control_folders() {
        let dir = std::env::temp_dir().join(format!("clean-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for name in [
            "harness-ssh-jh0a1b2c",
            "harness-ssh-jh0A1B2C",
            "harness-ssh-jh0a1b2",
            "harness-ssh-../x",
            "other-jh0a1b2c",
            "harness-ssh-jhffffff",
        ] {
            let _ = std::fs::create_dir_all(dir.join(name));
        }
        let names: Vec<String> = control_folders(&dir)
            .iter()
            .filter_map(|path| Some(path.file_name()?.to_str()?.to_string()))
            .collect();
        assert_eq!(names, ["harness-ssh-jh0a1b2c", "harness-ssh-jhffffff"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sockets_are_found_below_a_folder_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("sockets-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let deep = dir.join(".ssh-connection1");
        std::fs::create_dir_all(&deep).expect("folder");
        let _listener = std::os::unix::net::UnixListener::bind(deep.join("master")).expect("bind");
        std::fs::write(dir.join("run.json"), "{}").expect("file");
        assert_eq!(sockets_under(&dir, 3), vec![deep.join("master")]);
        assert_eq!(sockets_under(&dir, 1), Vec::<PathBuf>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
