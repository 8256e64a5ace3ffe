//! Object names under the state root. Epochs are zero-padded so that a
//! lexicographic listing is also an epoch-ordered one.

use object_store::path::Path;

use crate::manifest::TableId;

pub(crate) const MANIFEST_DIR: &str = "manifest";
pub(crate) const DATA_DIR: &str = "data";
pub(crate) const BASE_DIR: &str = "base";
/// Sources' dead letters, a folder per source (written by the readers).
pub(crate) const DEAD_LETTER_DIR: &str = "dead_letters";

pub(crate) fn manifest_path(root: &Path, epoch: u64) -> Path {
    root.clone().join(MANIFEST_DIR).join(format!("{epoch:020}"))
}

pub(crate) fn data_path(root: &Path, epoch: u64, n: u32) -> Path {
    root.clone().join(DATA_DIR).join(format!("{epoch:020}-{n}"))
}

pub(crate) fn base_path(root: &Path, table: TableId, epoch: u64) -> Path {
    root.clone()
        .join(BASE_DIR)
        .join(table.to_string())
        .join(format!("{epoch:020}"))
}

/// The epoch a manifest, data or base object belongs to, read from its name.
pub(crate) fn epoch_of(path: &Path) -> Option<u64> {
    let name = path.filename()?;
    name.split('-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_epoch_and_parse_back() {
        let root = Path::from("state");
        let a = manifest_path(&root, 9);
        let b = manifest_path(&root, 10);
        assert!(a.as_ref() < b.as_ref());
        assert_eq!(epoch_of(&b), Some(10));
        assert_eq!(epoch_of(&data_path(&root, 42, 3)), Some(42));
        assert_eq!(epoch_of(&base_path(&root, 7, 5)), Some(5));
    }
}
