//! What a broker's data folder must hold before it starts. A node whose `metadata/` is
//! gone but whose partition folders remain would start a new, empty metadata quorum over
//! old records: its topics unknown, and a topic created later under an old name bringing
//! the old records back. Kafka refuses the same with its `meta.properties` check.

use std::path::Path;

use crate::quorum::raft::METADATA_DIR;

/// Partition folders (`<topic>-<partition>`) in `data_dir`, sorted.
pub(crate) fn partition_folders(data_dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_partition_folder_name(&name) {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

/// `<topic>-<partition>`: a legal topic name, a dash, a partition number.
fn is_partition_folder_name(name: &str) -> bool {
    let Some((topic, partition)) = name.rsplit_once('-') else {
        return false;
    };
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    !topic.is_empty()
        && topic.chars().all(legal)
        && !partition.is_empty()
        && partition.chars().all(|c| c.is_ascii_digit())
        && partition.parse::<u32>().is_ok()
}

/// Refuses a data folder with partition folders but no `metadata/`: the names of the
/// partition folders, for the error.
pub(crate) fn check_metadata_present(data_dir: &Path) -> Result<(), DataWithoutMetadata> {
    if data_dir.join(METADATA_DIR).exists() {
        return Ok(());
    }
    let partitions = partition_folders(data_dir).map_err(|e| DataWithoutMetadata {
        data_dir: data_dir.display().to_string(),
        partitions: vec![format!("(cannot list the folder: {e})")],
    })?;
    if partitions.is_empty() {
        return Ok(());
    }
    Err(DataWithoutMetadata {
        data_dir: data_dir.display().to_string(),
        partitions,
    })
}

/// A data folder with partition data and no metadata.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{data_dir} holds partition data ({}) but no {METADATA_DIR}/ folder: started like this, \
     the node would begin a new, empty cluster over old records. Restore {data_dir}/{METADATA_DIR} \
     (from a backup of this node), or move the partition folders away to start this node \
     afresh (its replicas are then fetched again from the other brokers)",
    shown(.partitions)
)]
pub struct DataWithoutMetadata {
    pub data_dir: String,
    pub partitions: Vec<String>,
}

/// At most five names, and how many more.
fn shown(partitions: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = partitions
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if partitions.len() > SHOWN {
        text.push_str(&format!(" and {} more", partitions.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Temp(std::path::PathBuf);

    impl Temp {
        fn new(tag: &str) -> Temp {
            let dir =
                std::env::temp_dir().join(format!("broker-data-dir-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Temp(dir)
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn partition_folder_names() {
        for name in ["t-0", "my.topic_x-12", "a-b-3"] {
            assert!(is_partition_folder_name(name), "{name}");
        }
        for name in ["metadata", "t-", "-0", "t-x", "t-99999999999", "t 1-0"] {
            assert!(!is_partition_folder_name(name), "{name}");
        }
    }

    #[test]
    fn data_without_metadata_is_refused_and_named() {
        let dir = Temp::new("refused");
        // A fresh folder, and one with only stray files: fine.
        assert_eq!(check_metadata_present(&dir.0), Ok(()));
        std::fs::write(dir.0.join("broker.log"), "x").unwrap();
        assert_eq!(check_metadata_present(&dir.0), Ok(()));
        for name in ["f-0", "f-1", "g-0"] {
            std::fs::create_dir_all(dir.0.join(name)).unwrap();
        }
        let refused = check_metadata_present(&dir.0).unwrap_err();
        assert_eq!(refused.partitions, vec!["f-0", "f-1", "g-0"]);
        let message = refused.to_string();
        assert!(
            message.contains("holds partition data (f-0, f-1, g-0) but no metadata/ folder"),
            "{message}"
        );
        assert!(message.contains("Restore"), "{message}");
        // With its metadata folder, the same data starts.
        std::fs::create_dir_all(dir.0.join(METADATA_DIR)).unwrap();
        assert_eq!(check_metadata_present(&dir.0), Ok(()));
    }

    #[test]
    fn many_partitions_are_summed_up() {
        let names: Vec<String> = (0..8).map(|p| format!("t-{p}")).collect();
        assert_eq!(shown(&names), "t-0, t-1, t-2, t-3, t-4 and 3 more");
    }
}
