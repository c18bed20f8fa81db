//! The host's event counters, under the model's names: /proc/vmstat and
//! the per-size mTHP statistics in sysfs.

use crate::sysfs;

/// Counters of /proc/vmstat that the model also keeps, under the model's names.
const VMSTAT: &[&str] = &[
    "thp_fault_alloc",
    "thp_fault_fallback",
    "thp_split_pmd",
    "thp_deferred_split_page",
    "thp_split_page",
    "thp_split_page_failed",
    "thp_underused_split_page",
    "pgreuse",
    "thp_collapse_alloc",
    "thp_collapse_alloc_failed",
    "thp_scan_exceed_none_pte",
    "thp_scan_exceed_swap_pte",
    "thp_scan_exceed_shared_pte",
    "pgmigrate_success",
    "pgmigrate_fail",
    "thp_migration_success",
    "thp_migration_fail",
    "thp_migration_split",
    "numa_pte_updates",
    "numa_huge_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pswpin",
    "pswpout",
    "thp_swpout",
    "thp_swpout_fallback",
];

/// The counters' values since boot (the backend subtracts its baseline).
pub(crate) fn since_boot() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    for l in vmstat.lines() {
        if let Some((k, v)) = l.split_once(' ') {
            if VMSTAT.contains(&k) {
                out.push((k.to_string(), v.trim().parse().unwrap_or(0)));
            }
        }
    }
    for order in 2..=9u32 {
        let dir = format!("{}/hugepages-{}kB/stats", sysfs::THP, 4u64 << order);
        for name in
            ["anon_fault_alloc", "split_deferred", "split", "split_failed", "swpout", "swpout_fallback", "swpin"]
        {
            let file = name;
            if let Ok(v) = std::fs::read_to_string(format!("{dir}/{file}")) {
                out.push((format!("{name}[{}K]", 4u64 << order), v.trim().parse().unwrap_or(0)));
            }
        }
    }
    out
}
