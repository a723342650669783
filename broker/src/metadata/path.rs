//! Node paths: `/`-separated, absolute, like ZooKeeper's. `/` is the root.

use super::command::StoreError;

/// The root of the tree.
pub const ROOT: &str = "/";

/// Checks that `path` is absolute, has no empty, `.` or `..` segment, no trailing `/`
/// (except the root itself) and no NUL, so that every node has exactly one spelling and a
/// single parent.
pub fn validate(path: &str) -> Result<(), StoreError> {
    let invalid = |reason: &str| {
        Err(StoreError::InvalidPath {
            path: path.to_string(),
            reason: reason.to_string(),
        })
    };
    if !path.starts_with('/') {
        return invalid("must start with '/'");
    }
    if path == ROOT {
        return Ok(());
    }
    if path.contains('\0') {
        return invalid("must not contain NUL");
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return invalid("empty segment (\"//\" or a trailing '/')"),
            "." | ".." => return invalid("relative segment"),
            _ => {}
        }
    }
    Ok(())
}

/// The parent of a valid path; `None` for the root.
pub fn parent(path: &str) -> Option<&str> {
    if path == ROOT {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some(ROOT),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The last segment of a valid path (empty for the root).
pub fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, name: &str) -> String {
    if parent == ROOT {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Whether `path` is `root` or lies below it, segment-wise (`/a` does not contain `/ab`).
pub fn in_subtree(root: &str, path: &str) -> bool {
    if root == ROOT {
        return true;
    }
    match path.strip_prefix(root) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_paths() {
        for good in ["/", "/a", "/brokers/ids/1", "/partitions/t/0/state"] {
            assert_eq!(validate(good), Ok(()), "{good}");
        }
        for bad in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a\0"] {
            assert!(
                matches!(validate(bad), Err(StoreError::InvalidPath { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn parents_names_and_subtrees() {
        assert_eq!(parent("/"), None);
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/a/b/c"), Some("/a/b"));
        assert_eq!(name("/a/b/c"), "c");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert!(in_subtree("/a", "/a"));
        assert!(in_subtree("/a", "/a/b"));
        assert!(!in_subtree("/a", "/ab"));
        assert!(!in_subtree("/a/b", "/a"));
        assert!(in_subtree("/", "/anything"));
    }
}
