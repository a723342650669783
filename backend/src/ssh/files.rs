//! Copying files and folders to and from the hosts: a file through a size-checked
//! upload script, a folder as a tar archive; downloads into a temporary file renamed
//! into place.

use super::quote::{parent_arg, path_arg, with_prelude};
use super::scripts::{UPLOAD_DIR, UPLOAD_FILE, WATCHDOG};
use super::session::{Call, Inner, Stdin, Stdout};
use crate::tools::{self, display_command};
use crate::BackendError;
use std::path::{Path, PathBuf};

impl Inner {
    /// A temporary file name in the control folder.
    fn scratch_file(&self, what: &str) -> PathBuf {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.control_dir.join(format!("{what}-{n}"))
    }

    pub(super) async fn upload(
        &self,
        local: &Path,
        node: &str,
        remote: &Path,
    ) -> Result<(), BackendError> {
        self.open()?;
        let host = self.host(node)?;
        let io = |what: &str, path: &Path| {
            let what = what.to_string();
            let path = path.to_path_buf();
            move |source| BackendError::Io { what, path, source }
        };
        let meta = std::fs::metadata(local).map_err(io("reading", local))?;
        let remote_text = path_arg(remote)?;
        let _channel = host
            .channels
            .acquire()
            .await
            .map_err(|_| BackendError::TornDown)?;
        let shown = format!("upload {} to {remote_text}", local.display());
        if meta.is_dir() {
            let archive = self.scratch_file("upload.tar");
            let argv = vec![
                "tar".to_string(),
                "-cf".to_string(),
                archive.display().to_string(),
                "-C".to_string(),
                local.display().to_string(),
                ".".to_string(),
            ];
            let packed = tools::run_cancellable(argv).await;
            let outcome = match packed {
                Ok(_) => {
                    let file = std::fs::File::open(&archive).map_err(io("opening", &archive))?;
                    self.invoke(
                        host,
                        Call {
                            script: &with_prelude(UPLOAD_DIR, false),
                            args: &[remote_text],
                            as_user: false,
                            stdin: Stdin::File(file),
                            stdout: Stdout::Capture,
                            shown: &shown,
                        },
                    )
                    .await
                    .map(drop)
                }
                Err(error) => Err(error),
            };
            let _ = std::fs::remove_file(&archive);
            return outcome;
        }
        use std::os::unix::fs::PermissionsExt;
        let file = std::fs::File::open(local).map_err(io("opening", local))?;
        let args = vec![
            parent_arg(remote)?,
            remote_text,
            meta.len().to_string(),
            format!("{:o}", meta.permissions().mode() & 0o7777),
        ];
        self.invoke(
            host,
            Call {
                script: &with_prelude(UPLOAD_FILE, false),
                args: &args,
                as_user: false,
                stdin: Stdin::File(file),
                stdout: Stdout::Capture,
                shown: &shown,
            },
        )
        .await
        .map(drop)
    }

    pub(super) async fn download(
        &self,
        node: &str,
        remote: &Path,
        local: &Path,
    ) -> Result<(), BackendError> {
        self.open()?;
        let host = self.host(node)?;
        let remote_text = path_arg(remote)?;
        let io = |what: &str, path: &Path| {
            let what = what.to_string();
            let path = path.to_path_buf();
            move |source| BackendError::Io { what, path, source }
        };
        let _channel = host
            .channels
            .acquire()
            .await
            .map_err(|_| BackendError::TornDown)?;
        let kind = self
            .run_argv(
                host,
                &[
                    "sh".into(),
                    "-c".into(),
                    "if [ -d \"$1\" ]; then echo dir; else echo file; fi".into(),
                    "sh".into(),
                    remote_text.clone(),
                ],
                false,
            )
            .await?;
        if let Some(parent) = local.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        let is_dir = kind.stdout.trim() == "dir";
        let temp = if is_dir {
            self.scratch_file("download.tar")
        } else {
            let name = local
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_else(|| "download".into());
            local.with_file_name(format!(".{name}.part-{}", std::process::id()))
        };
        let file = std::fs::File::create(&temp).map_err(io("creating", &temp))?;
        let argv: Vec<String> = if is_dir {
            vec![
                "tar".into(),
                "-C".into(),
                remote_text.clone(),
                "-cf".into(),
                "-".into(),
                ".".into(),
            ]
        } else {
            vec!["cat".into(), "--".into(), remote_text.clone()]
        };
        let copied = self
            .invoke(
                host,
                Call {
                    script: &with_prelude(WATCHDOG, false),
                    args: &argv,
                    as_user: false,
                    stdin: Stdin::Held,
                    stdout: Stdout::File(file),
                    shown: &display_command(&argv),
                },
            )
            .await;
        let outcome = match copied {
            Err(error) => Err(error),
            Ok(_) if is_dir => {
                match std::fs::create_dir_all(local).map_err(io("creating", local)) {
                    Ok(()) => tools::run_cancellable(vec![
                        "tar".into(),
                        "-xf".into(),
                        temp.display().to_string(),
                        "-C".into(),
                        local.display().to_string(),
                    ])
                    .await
                    .map(drop),
                    Err(error) => Err(error),
                }
            }
            Ok(_) => {
                return std::fs::rename(&temp, local).map_err(|source| {
                    let _ = std::fs::remove_file(&temp);
                    BackendError::Io {
                        what: format!("renaming {} to", temp.display()),
                        path: local.to_path_buf(),
                        source,
                    }
                })
            }
        };
        let _ = std::fs::remove_file(&temp);
        outcome
    }
}
