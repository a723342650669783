//! What a broker's data folder must hold before it starts. A node whose `metadata/` is
//! gone but whose partition folders remain would start a new, empty metadata quorum over
//! old records: its topics unknown, and a topic created later under an old name bringing
//! the old records back. Kafka refuses the same with its `meta.properties` check, which
//! also refuses a folder of another cluster: a node configured with a `cluster_id` writes
//! it to [`CLUSTER_ID_FILE`] and refuses a folder that names another one.

use std::path::Path;

use crate::quorum::raft::METADATA_DIR;

/// The file in `data_dir` naming the cluster its data belongs to.
pub const CLUSTER_ID_FILE: &str = "cluster-id";

/// Refuses a data folder that belongs to another cluster than `configured`, and marks
/// one that belongs to no cluster yet (new, or from before cluster ids) as `configured`'s.
/// Nothing to check without a configured id.
pub(crate) fn check_cluster_id(
    data_dir: &Path,
    configured: Option<&str>,
) -> Result<(), ClusterIdError> {
    let Some(configured) = configured else {
        return Ok(());
    };
    let path = data_dir.join(CLUSTER_ID_FILE);
    let io = |source: std::io::Error| ClusterIdError::Io {
        path: path.display().to_string(),
        reason: source.to_string(),
    };
    match std::fs::read_to_string(&path) {
        Ok(found) if found.trim() == configured => Ok(()),
        Ok(found) => Err(ClusterIdError::OtherCluster {
            data_dir: data_dir.display().to_string(),
            found: found.trim().chars().take(80).collect(),
            configured: configured.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir).map_err(io)?;
            let temporary = data_dir.join(format!("{CLUSTER_ID_FILE}.tmp"));
            std::fs::write(&temporary, format!("{configured}\n")).map_err(io)?;
            std::fs::rename(&temporary, &path).map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

/// A data folder this node may not start on, as far as the cluster id says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterIdError {
    #[error(
        "{data_dir} belongs to cluster {found:?} ({CLUSTER_ID_FILE}), but this node's config \
         says cluster_id = {configured:?}: started like this, it would mix two clusters' \
         records. Point data_dir at this cluster's folder, or move the folder away to start \
         this node afresh"
    )]
    OtherCluster {
        data_dir: String,
        found: String,
        configured: String,
    },
    #[error("cannot read or write {path}: {reason}")]
    Io { path: String, reason: String },
}

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
    fn a_folder_of_another_cluster_is_refused_and_a_new_one_is_marked() {
        let dir = Temp::new("cluster-id");
        assert_eq!(check_cluster_id(&dir.0, None), Ok(()));
        assert!(
            !dir.0.join(CLUSTER_ID_FILE).exists(),
            "no id, nothing written"
        );
        assert_eq!(check_cluster_id(&dir.0, Some("c1")), Ok(()));
        assert_eq!(
            std::fs::read_to_string(dir.0.join(CLUSTER_ID_FILE)).unwrap(),
            "c1\n"
        );
        assert_eq!(check_cluster_id(&dir.0, Some("c1")), Ok(()));
        let refused = check_cluster_id(&dir.0, Some("c2")).unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains("belongs to cluster \"c1\"")
                && message.contains("cluster_id = \"c2\""),
            "{message}"
        );
        // A node without an id does not look.
        assert_eq!(check_cluster_id(&dir.0, None), Ok(()));
    }

    #[test]
    fn many_partitions_are_summed_up() {
        let names: Vec<String> = (0..8).map(|p| format!("t-{p}")).collect();
        assert_eq!(shown(&names), "t-0, t-1, t-2, t-3, t-4 and 3 more");
    }
}
