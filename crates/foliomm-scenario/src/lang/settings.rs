//! The one table of `set` lines: each setting's name, syntax, what it
//! means, the Linux knob it mirrors and where it is honoured. The parser's
//! errors, the interpreter's "too late" message, `foliomm settings` and
//! the language reference read it; nothing else lists setting names.

/// When a setting may appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum When {
    /// Before the first step that uses the machine: it shapes the machine.
    Machine,
    /// At any point: it changes a tunable of the running system.
    Anytime,
}

/// One setting of the scenario language.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Setting {
    pub name: &'static str,
    /// How its line is written.
    pub syntax: &'static str,
    /// What it does, in one line.
    pub doc: &'static str,
    /// The Linux interface it mirrors, if any.
    pub linux: Option<&'static str>,
    pub when: When,
    /// What the host and guest backends do with it (the model honours all).
    pub host: &'static str,
    /// The names its value takes, where they come from a table of their own.
    #[serde(skip)]
    pub names: Option<fn() -> String>,
    /// The values `all` stands for in a command-line flag (`--mapcount
    /// all`: one run per design, a design matrix); none where a setting has
    /// no such list.
    #[serde(skip)]
    pub every: Option<fn() -> Vec<String>>,
}

impl Setting {
    /// The doc line, with the names its value takes.
    pub fn describe(&self) -> String {
        match self.names {
            Some(names) => format!("{} (one of: {})", self.doc, names()),
            None => self.doc.to_string(),
        }
    }
}

/// Every setting, in the order the reference lists them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "memory",
        syntax: "set memory SIZE | set memory at least SIZE | set memory limit SIZE",
        doc: "model RAM, 4M to 1T (default 4G); 'at least' states a need, not a limit; \
              'limit' is the RAM a workload larger than it is reclaimed to",
        linux: None,
        when: When::Machine,
        names: None,
        every: None,
        host: "'at least' is checked against MemTotal; 'limit' puts the workers in a memory cgroup \
               of that limit; an exact size is refused",
    },
    Setting {
        name: "mapcount",
        syntax: "set mapcount DESIGN",
        doc: "the mapcount design",
        linux: None,
        when: When::Machine,
        names: Some(foliomm::internals::mapcount::Design::names),
        every: Some(|| foliomm::internals::mapcount::Design::ALL.iter().map(|d| d.name().to_string()).collect()),
        host: "only the running kernel's era's design",
    },
    Setting {
        name: "kernel",
        syntax: "set kernel MAJOR.MINOR",
        doc: "the Linux release (6.1 to 6.18) the model follows where releases differ; alone, also its era's design",
        linux: Some("uname -r"),
        when: When::Machine,
        names: None,
        every: Some(|| foliomm::KernelVersion::all().map(|v| v.to_string()).collect()),
        host: "only the running release",
    },
    Setting {
        name: "rmap_id_stage",
        syntax: "set rmap_id_stage STAGE",
        doc: "seed 000's patch stage of the rmap-id designs",
        linux: None,
        when: When::Machine,
        names: Some(foliomm::internals::mapcount::RmapIdStage::names),
        every: Some(|| foliomm::internals::mapcount::RmapIdStage::ALL.iter().map(|s| s.name().to_string()).collect()),
        host: "refused (the RFC was never merged)",
    },
    Setting {
        name: "compound_lock",
        syntax: "set compound_lock bit-spinlock|sleeping|unlocked",
        doc: "how seed 003's compound-locked design serialises its mapcount updates: its bit spinlock, a sleeping \
              lock (its PREEMPT_RT alternative) or none (the racy predecessor, whose NR_ANON_MAPPED drifts)",
        linux: None,
        when: When::Machine,
        names: Some(foliomm::CompoundLock::names),
        every: Some(|| foliomm::CompoundLock::ALL.iter().map(|l| l.name().to_string()).collect()),
        host: "refused (the series never reached a release)",
    },
    Setting {
        name: "zap",
        syntax: "set zap batched|per-page",
        doc: "how zap and fork walk PTE-mapped large folios (folio_pte_batch, 6.9+, or page by page)",
        linux: None,
        when: When::Machine,
        names: None,
        every: Some(|| foliomm::ZapStrategy::ALL.iter().map(|(_, n)| n.to_string()).collect()),
        host: "only batched",
    },
    Setting {
        name: "vma_lock",
        syntax: "set vma_lock mmap-lock|vma-rwsem|vma-refcount",
        doc: "how a fault locks its VMA (seed 004)",
        linux: None,
        when: When::Machine,
        names: None,
        every: Some(|| foliomm::VmaLockDesign::ALL.iter().map(|(_, n)| n.to_string()).collect()),
        host: "only vma-refcount",
    },
    Setting {
        name: "vma_layout",
        syntax: "set vma_layout design|embedded",
        doc: "where the VMA lock lies for the cache-line accounting: the design's own (6.15's aligned vm_refcnt, \
              6.4-6.14's slab vm_lock) or embedded in the VMA's first line (seed 004's false sharing)",
        linux: None,
        when: When::Machine,
        names: None,
        every: Some(|| foliomm::VmaLayout::ALL.iter().map(|(_, n)| n.to_string()).collect()),
        host: "only design",
    },
    Setting {
        name: "hugetlb_sync",
        syntax: "set hugetlb_sync i-mmap-rwsem|vma-lock|no-lock",
        doc: "how hugetlb faults and PMD unsharing synchronize (seed 002)",
        linux: None,
        when: When::Machine,
        names: None,
        every: Some(|| foliomm::HugetlbSync::ALL.iter().map(|(_, n)| n.to_string()).collect()),
        host: "only vma-lock",
    },
    Setting {
        name: "tlb",
        syntax: "set tlb N",
        doc: "entries per CPU TLB, 0 for none (default 2048)",
        linux: None,
        when: When::Machine,
        names: None,
        every: None,
        host: "refused (the TLB is hardware)",
    },
    Setting {
        name: "frames",
        syntax: "set frames sparse|dense",
        doc: "how model frames keep their bytes: sparse (the default) stores a frame that holds one byte repeated \
              with up to two others in a word, so a machine larger than the host fits; dense keeps every written \
              frame's 4 KiB, so zeroing and copying take their real time (what benchmarks time)",
        linux: None,
        when: When::Machine,
        names: None,
        every: Some(|| vec!["sparse".into(), "dense".into()]),
        host: "ignored: the host's frames always hold their bytes",
    },
    Setting {
        name: "init_on_free",
        syntax: "set init_on_free on|off",
        doc: "zero every freed page (init_on_free=1), a cost at munmap and exit (seed 001's thread); off by default",
        linux: Some("init_on_free= (boot parameter)"),
        when: When::Machine,
        names: None,
        every: Some(|| vec!["off".into(), "on".into()]),
        host: "only what the host booted with (/proc/cmdline)",
    },
    Setting {
        name: "page_mapcount",
        syntax: "set page_mapcount on|off",
        doc: "off: the mm-id design built without per-page mapcounts in large folios (CONFIG_NO_PAGE_MAPCOUNT, \
              6.15+): /proc/kpagecount gives the folio's average and PM_MMAP_EXCLUSIVE whether it may be mapped \
              shared; on by default, and only mm-id can go without",
        linux: Some("CONFIG_PAGE_MAPCOUNT / CONFIG_NO_PAGE_MAPCOUNT (build option)"),
        when: When::Machine,
        names: None,
        every: Some(|| vec!["on".into(), "off".into()]),
        host: "only what the host kernel was built with (/boot/config-*)",
    },
    Setting {
        name: "soft_dirty",
        syntax: "set soft_dirty on|off",
        doc: "on: the kernel is built with soft-dirty tracking (CONFIG_MEM_SOFT_DIRTY): pagemap's soft_dirty bit, \
              and clear_refs soft_dirty clears it and write-protects so that the next write sets it again; off \
              by default, as Kconfig has it",
        linux: Some("CONFIG_MEM_SOFT_DIRTY (build option)"),
        when: When::Machine,
        names: None,
        every: Some(|| vec!["off".into(), "on".into()]),
        host: "only what the host kernel was built with (probed through pagemap)",
    },
    Setting {
        name: "gather_limit",
        syntax: "set gather_limit N|off",
        doc: "stop an mmu_gather after N pages, the page-count cap seed 001's thread weighed; off by default (Linux limits slots only)",
        linux: None,
        when: When::Machine,
        names: None,
        every: None,
        host: "refused but for off (Linux has no such cap)",
    },
    Setting {
        name: "debug",
        syntax: "set debug SWITCH",
        doc: "a deliberate model bug, for tests that show the checks catch it",
        linux: None,
        when: When::Machine,
        names: Some(|| foliomm::internals::machine::DebugSwitches::NAMES.join(", ")),
        every: None,
        host: "refused",
    },
    Setting {
        name: "mm_ids",
        syntax: "set mm_ids N",
        doc: "the highest MM ID handed out, to run out of IDs",
        linux: None,
        when: When::Machine,
        names: None,
        every: None,
        host: "refused",
    },
    Setting {
        name: "max_map_count",
        syntax: "set max_map_count N",
        doc: "the most VMAs an MM may hold (default 65530)",
        linux: Some("/proc/sys/vm/max_map_count"),
        when: When::Machine,
        names: None,
        every: None,
        host: "only the host's current value (it is system-wide)",
    },
    Setting {
        name: "swap",
        syntax: "set swap SIZE",
        doc: "a swap device of SIZE (a synchronous one, as zram), 64K to 64G; none by default",
        linux: Some("swapon(2) of /dev/zram0 (disksize, mkswap)"),
        when: When::Machine,
        names: None,
        every: None,
        host: "sets up zram0 as swap for the run (refused where zram0 is missing or busy)",
    },
    Setting {
        name: "nodes",
        syntax: "set nodes N",
        doc: "NUMA nodes, 1 to 8 (default 1): the memory is cut into N equal nodes; tasks run on node 0",
        linux: Some("the machine's NUMA topology (qemu -numa), numa_node_id()"),
        when: When::Machine,
        names: None,
        every: None,
        host: "checked against the online nodes with memory (refused where fewer)",
    },
    Setting {
        name: "sim_cpus",
        syntax: "set sim_cpus N",
        doc: "run each parallel block's threads on simulated CPUs with virtual time, 1 to 64 (at least a block's \
              threads): interleavings fixed by the clocks, and a contention report per block",
        linux: None,
        when: When::Machine,
        names: None,
        every: None,
        host: "ignored: its threads are real",
    },
    Setting {
        name: "thp",
        syntax: "set thp [enabled=MODE] [SIZE=MODE ...]",
        doc: "anonymous THP: the top-level mode and per-size modes (always, madvise, never, inherit)",
        linux: Some("/sys/kernel/mm/transparent_hugepage/enabled, hugepages-*kB/enabled"),
        when: When::Anytime,
        names: None,
        every: None,
        host: "written to sysfs, restored afterwards",
    },
    Setting {
        name: "shmem",
        syntax: "set shmem [enabled=MODE] [SIZE=MODE ...]",
        doc: "shmem THP: shmem_enabled and per-size modes",
        linux: Some("/sys/kernel/mm/transparent_hugepage/shmem_enabled, hugepages-*kB/shmem_enabled"),
        when: When::Anytime,
        names: None,
        every: None,
        host: "written to sysfs, restored afterwards",
    },
    Setting {
        name: "hugetlb",
        syntax: "set hugetlb pages=N [overcommit=N] [size=2M|1G]",
        doc: "the huge page pool of a size",
        linux: Some("/sys/kernel/mm/hugepages/hugepages-*kB/nr_hugepages, nr_overcommit_hugepages"),
        when: When::Anytime,
        names: None,
        every: None,
        host: "written to sysfs, restored afterwards; skipped if the kernel gives fewer pages",
    },
    Setting {
        name: "hugetlb_optimize_vmemmap",
        syntax: "set hugetlb_optimize_vmemmap on|off",
        doc: "HVO: huge pages made from now on keep one page of memmap (struct pages) and share it for \
              their other tails; off by default",
        linux: Some("/proc/sys/vm/hugetlb_optimize_vmemmap"),
        when: When::Anytime,
        names: None,
        every: None,
        host: "written to procfs, restored afterwards; skipped where the kernel has no such sysctl",
    },
    Setting {
        name: "khugepaged",
        syntax: "set khugepaged KNOB=N...",
        doc: "khugepaged's max_ptes_none, max_ptes_swap, max_ptes_shared (0-511) and pages_to_scan",
        linux: Some("/sys/kernel/mm/transparent_hugepage/khugepaged/*"),
        when: When::Anytime,
        names: None,
        every: None,
        host: "written to sysfs, restored afterwards",
    },
    Setting {
        name: "check",
        syntax: "set check on|off",
        doc: "the invariant checker after every step (run --check turns it on)",
        linux: None,
        when: When::Anytime,
        names: None,
        every: None,
        host: "no checker (nothing to check against)",
    },
];

/// The names of the settings that may appear `when`, comma-separated.
pub fn names(when: Option<When>) -> String {
    let names: Vec<&str> = SETTINGS.iter().filter(|s| when.is_none_or(|w| s.when == w)).map(|s| s.name).collect();
    names.join(", ")
}

/// What an unknown setting `name` gets told: the known ones, and the
/// closest if it looks like a typo of one.
pub fn unknown(name: &str) -> String {
    let hint = super::suggest::did_you_mean(name, SETTINGS.iter().map(|s| s.name));
    format!("unknown setting '{name}'{hint} (known: {})", names(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_gets_the_closest_name() {
        assert!(unknown("mapcont").contains("did you mean 'mapcount'?"));
        assert!(unknown("max_map_cont").contains("did you mean 'max_map_count'?"));
        assert!(!unknown("frobnicate").contains("did you mean"));
        assert!(unknown("frobnicate").contains("kernel, rmap_id_stage"));
    }

    /// Every name the parser takes after `set` is in the table, and no
    /// other: a `set` line of each parses, an unknown one does not.
    #[test]
    fn the_table_is_the_parsers_vocabulary() {
        let examples = [
            "set memory 64M",
            "set mapcount mm-id",
            "set kernel 6.8",
            "set rmap_id_stage batch",
            "set compound_lock sleeping",
            "set zap per-page",
            "set vma_lock vma-rwsem",
            "set vma_layout embedded",
            "set hugetlb_sync no-lock",
            "set tlb 0",
            "set frames dense",
            "set init_on_free on",
            "set page_mapcount off",
            "set soft_dirty on",
            "set gather_limit 512",
            "set debug no-large-reuse",
            "set mm_ids 5",
            "set max_map_count 9",
            "set swap 64M",
            "set nodes 2",
            "set sim_cpus 8",
            "set thp enabled=never",
            "set shmem enabled=never",
            "set hugetlb pages=1",
            "set hugetlb_optimize_vmemmap on",
            "set khugepaged max_ptes_shared=0 pages_to_scan=8",
            "set check on",
        ];
        for (s, line) in SETTINGS.iter().zip(examples) {
            assert_eq!(line.split(' ').nth(1), Some(s.name));
            crate::lang::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert_eq!(SETTINGS.len(), examples.len());
        for line in ["set memory at least 64M", "set memory limit 64M"] {
            crate::lang::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        let e = crate::lang::parse("set mapcont mm-id").unwrap_err().to_string();
        assert!(e.contains("did you mean 'mapcount'"), "{e}");
    }
}
