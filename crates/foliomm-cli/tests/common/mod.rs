//! What the binary's tests share.

use std::path::{Path, PathBuf};

/// Every THP and shmem THP knob, and every huge page pool size, by path.
pub fn thp_knobs() -> Vec<(PathBuf, String)> {
    let mut paths = vec![];
    let thp = Path::new("/sys/kernel/mm/transparent_hugepage");
    for name in ["enabled", "defrag", "shmem_enabled"] {
        paths.push(thp.join(name));
    }
    for dir in std::fs::read_dir(thp).into_iter().flatten().flatten() {
        if dir.file_name().to_string_lossy().starts_with("hugepages-") {
            paths.extend(["enabled", "shmem_enabled"].map(|n| dir.path().join(n)));
        }
    }
    for dir in std::fs::read_dir("/sys/kernel/mm/hugepages").into_iter().flatten().flatten() {
        paths.push(dir.path().join("nr_hugepages"));
    }
    paths.into_iter().filter_map(|p| Some((p.clone(), std::fs::read_to_string(&p).ok()?))).collect()
}
