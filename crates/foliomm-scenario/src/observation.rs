//! What an `observe` step records, field by field, and which fields the
//! kernel reports too.

use foliomm::internals::mm::{PageInfo, RangeInfo, VmaInfo};

/// What an `observe` step records: the first page of the place as pagemap and
/// kpageflags report it, and smaps-style sums over the whole place.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Observation {
    pub page: PageInfo,
    pub range: RangeInfo,
    /// The byte at the observed address.
    pub byte: u8,
    /// Observed through a GUP reference rather than the page tables.
    #[serde(default)]
    pub via_gup: bool,
    /// The process's page-table memory (`VmPTE`) in KiB; on the host the
    /// worker's own tables count too, so compare it as a difference.
    #[serde(default)]
    pub pgtables_kb: u64,
    /// The process's VMAs (`map_count`, the lines of /proc/PID/maps); on
    /// the host the worker's own mappings count too: compare differences.
    #[serde(default)]
    pub vma_count: u64,
    /// The observed address (where the mapping landed); not a field
    /// itself (layouts differ between backends), only through
    /// `pmd_aligned`.
    #[serde(default)]
    pub addr: u64,
    /// What `fstat`, `F_GET_SEALS` and `lseek` say of an observed file
    /// (`observe FILE[OFF]`); zeros for a mapping.
    #[serde(default)]
    pub file: FileInfo,
    /// The backend could not look at the page without changing it (a
    /// hugetlbfs file's page cache on the host: `mincore` there reports
    /// page table entries, and a read would allocate a page): the page
    /// fields ([`Observation::PAGE_FIELDS`]) are unknown.
    #[serde(default)]
    pub page_hidden: bool,
    /// The VMA holding the address reaches beyond the observed mapping:
    /// the backend merged it with a neighbour that lies there only by its
    /// layout (another mapping, or the host worker's own memory), so the
    /// VMA fields ([`Observation::VMA_FIELDS`]) are not the scenario's.
    #[serde(default)]
    pub vma_hidden: bool,
    /// The process around the observed place: its /proc/PID/status memory
    /// lines and the VMA holding the address.
    #[serde(default)]
    pub process: ProcessInfo,
    /// The model's hint: the largest THP order its settings allow for the
    /// VMA, when the page's folio is smaller because the aligned block of
    /// that order around it does not fit in the VMA; 0 otherwise (and on a
    /// kernel).
    #[serde(default)]
    pub thp_allowed_order: u32,
    /// Fields the scenario asked not to record (`observe ... except
    /// FIELD...`: what a run cannot fix, such as placement): bit `i` is the
    /// `i`-th of [`Observation::field_names`].
    #[serde(default)]
    pub unrecorded: u128,
    /// Fields the backend's kernel does not have (`soft_dirty` without
    /// `CONFIG_MEM_SOFT_DIRTY`), in the bits of `unrecorded`: unknown, so
    /// expectations on them are skipped and `compare` leaves them alone.
    #[serde(default)]
    pub unsupported: u128,
}

/// What `/proc/PID/status` and `/proc/PID/smaps` say around an observed
/// address, in KiB where sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessInfo {
    /// `RssAnon`; on the host the worker's own memory counts too.
    pub rss_anon_kb: u64,
    /// `RssFile`; on the host the worker's program counts (the model maps
    /// no regular files: 0).
    pub rss_file_kb: u64,
    /// `RssShmem`; where the worker's program lives on tmpfs (the guest's
    /// initramfs) its pages count too.
    pub rss_shmem_kb: u64,
    /// `HugetlbPages`.
    pub hugetlb_kb: u64,
    /// `VmSwap`.
    #[serde(default)]
    pub swap_kb: u64,
    /// `/proc/PID/ksm_merging_pages`: the process's pages merged into KSM
    /// pages (as ksmd last counted them).
    #[serde(default)]
    pub ksm_merging_pages: u64,
    /// The smaps entry of the VMA holding the address (zeros in a hole).
    pub vma: VmaInfo,
}

/// A file as `fstat`, `fcntl(F_GET_SEALS)` and `lseek(SEEK_DATA /
/// SEEK_HOLE)` from the observed offset report it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileInfo {
    /// `st_size`.
    pub size: u64,
    /// `st_blocks` (512-byte units).
    pub blocks: u64,
    /// `st_nlink`.
    pub nlink: u64,
    /// `F_GET_SEALS`: `F_SEAL_SEAL` 1, `SHRINK` 2, `GROW` 4, `WRITE` 8,
    /// `FUTURE_WRITE` 0x10.
    pub seals: u64,
    /// `lseek(SEEK_DATA)` from the offset; the file size where it fails
    /// with ENXIO (no data there or after).
    pub seek_data: u64,
    /// `lseek(SEEK_HOLE)` from the offset; the file size where it fails
    /// with ENXIO (at or past the end).
    pub seek_hole: u64,
}

impl Observation {
    /// Fields the kernel reports too (pagemap, kpageflags, PAGEMAP_SCAN):
    /// the ones a comparison with the host checks.
    pub const KERNEL_FIELDS: &'static [&'static str] = &[
        "present",
        "zero_page",
        "pmd_mapped",
        "folio_order",
        "folio_kb",
        "exclusive",
        "byte",
        "rss_kb",
        "anonymous_kb",
        "anon_huge_kb",
        "shmem_kb",
        "shmem_pmd_kb",
        "shared_kb",
        "private_kb",
        "file_size",
        "file_blocks",
        "file_nlink",
        "file_seals",
        "seek_data",
        "seek_hole",
        "kpagecount",
        "hugetlb_total_kb",
        "swapped",
        "node",
        "swap_kb",
        "swap_total_kb",
        "uffd_wp",
        "soft_dirty",
        "ksm",
        "ksm_merging_pages",
    ];

    /// Fields only the model knows (the kernel exposes no PTE write bit,
    /// mapcount, refcount, AnonExclusive, "maybe shared" or the policy guess).
    pub const MODEL_FIELDS: &'static [&'static str] = &[
        "writable",
        "mapcount",
        "folio_mapcount",
        "refcount",
        "anon_exclusive",
        "maybe_shared",
        "likely_shared",
        "pmd_shared",
    ];

    /// Fields every backend reports that `foliomm compare` leaves alone,
    /// because a backend's own state moves them: the host worker's page
    /// tables and mappings count in `pgtables_kb` and `vma_count`, its own
    /// memory and program in `rss_anon_total_kb`, `rss_file_total_kb` and
    /// (where the program lives on tmpfs, as in the guest) `rss_shmem_total_kb`
    /// (compare their differences: `b.pgtables_kb - a.pgtables_kb == 4`), and where
    /// a mapping lands depends on the layout (`pmd_aligned`: the observed
    /// address is a multiple of 2 MiB, which holds on every backend only
    /// where the kernel aligns the mapping).
    pub const UNCOMPARED_FIELDS: &'static [&'static str] =
        &["pgtables_kb", "vma_count", "pmd_aligned", "rss_anon_total_kb", "rss_file_total_kb", "rss_shmem_total_kb"];

    /// The fields that describe the observed page itself, unknown when
    /// [`Observation::page_hidden`].
    pub const PAGE_FIELDS: &'static [&'static str] = &[
        "frame",
        "present",
        "swapped",
        "zero_page",
        "pmd_mapped",
        "folio_order",
        "folio_kb",
        "exclusive",
        "byte",
        "kpagecount",
        "uffd_wp",
        "soft_dirty",
        "ksm",
        "node",
    ];

    /// The fields that describe the VMA holding the address (the kernel
    /// reports them too), unknown when [`Observation::vma_hidden`].
    pub const VMA_FIELDS: &'static [&'static str] = &[
        "vma_offset_kb",
        "vma_kb",
        "vma_flags",
        "vma_shared_clean_kb",
        "vma_shared_dirty_kb",
        "vma_private_clean_kb",
        "vma_private_dirty_kb",
        "vma_shared_hugetlb_kb",
        "vma_private_hugetlb_kb",
        "vma_swap_kb",
        "vma_swap_pss_kb",
        "vma_lazyfree_kb",
    ];

    /// One line of what was observed: the frame and its folio, the page's
    /// and the folio's counts (`maybe-shared n/a` where the design cannot
    /// tell one MM from several), how it is mapped, and the range's RSS
    /// with its PMD-mapped part (AnonHugePages, or ShmemPmdMapped for a
    /// file page).
    pub fn summary(&self) -> String {
        let p = &self.page;
        if !p.present {
            let swapped = if p.swapped { ", swapped out" } else { "" };
            return format!("absent{swapped}; rss {}K", self.range.rss_kb);
        }
        let mut flags = Vec::new();
        for (on, name) in [
            (p.exclusive, "exclusive"),
            (p.anon_exclusive, "anon-exclusive"),
            (p.pmd_mapped, "pmd"),
            (p.uffd_wp, "uffd-wp"),
            (p.soft_dirty, "soft-dirty"),
            (p.ksm, "ksm"),
        ] {
            if on {
                flags.push(name);
            }
        }
        let shared = match (p.sharers_unknown, p.maybe_shared) {
            (true, _) => "n/a (the design cannot tell)",
            (false, true) => "yes",
            (false, false) => "no",
        };
        let huge = match p.anon || p.zero_page {
            true => format!("thp {}K", self.range.anon_huge_kb),
            false => format!("shmem-pmd {}K", self.range.shmem_pmd_kb),
        };
        let hint = match self.thp_allowed_order {
            0 => String::new(),
            o => {
                let (kb, vma) = (4u64 << o, &self.process.vma);
                format!(
                    "; note: {kb}K folios are allowed here, but the {kb}K-aligned block around this page does not fit \
                     in its VMA [{:#x}, {:#x}) (map it with 'align {kb}K', or longer)",
                    vma.start, vma.end
                )
            }
        };
        format!(
            "frame {:#x} order {}{}, mapcount {}, folio mapcount {}, refcount {}, maybe-shared {shared}; rss {}K, {huge}{hint}",
            p.pfn,
            p.folio_order,
            flags.iter().map(|f| format!(" {f}")).collect::<String>(),
            p.mapcount,
            p.folio_mapcount,
            p.refcount,
            self.range.rss_kb,
        )
    }

    /// Whether the backend saw `field` (every field unless the page or the
    /// VMA was hidden from it, or its kernel lacks the field).
    pub fn knows(&self, field: &str) -> bool {
        !(self.page_hidden && Self::PAGE_FIELDS.contains(&field)
            || self.vma_hidden && Self::VMA_FIELDS.contains(&field)
            || !self.recorded(field)
            || Self::field_bit(field).is_some_and(|b| self.unsupported & b != 0))
    }

    /// This observation with `field` unknown: the backend's kernel lacks it.
    pub fn unsupported(self, field: &str) -> Observation {
        let unsupported = self.unsupported | Self::field_bit(field).unwrap_or(0);
        Observation { unsupported, ..self }
    }

    /// Whether `field` was recorded (not named after `except`).
    pub fn recorded(&self, field: &str) -> bool {
        Self::field_bit(field).is_none_or(|b| self.unrecorded & b == 0)
    }

    /// This observation without the fields `except` (names of
    /// [`Observation::field_names`]).
    pub fn except(self, except: &[String]) -> Observation {
        let unrecorded = except.iter().filter_map(|f| Self::field_bit(f)).fold(self.unrecorded, |m, b| m | b);
        Observation { unrecorded, ..self }
    }

    /// The bit of `field` in [`Observation::unrecorded`].
    fn field_bit(field: &str) -> Option<u128> {
        Self::field_names().position(|f| f == field).map(|i| 1 << i)
    }

    /// Every field a comparison with a kernel checks: the page's and the
    /// range's ([`Observation::KERNEL_FIELDS`]) and the VMA's.
    pub fn compared_fields() -> impl Iterator<Item = &'static &'static str> {
        Self::KERNEL_FIELDS.iter().chain(Self::VMA_FIELDS)
    }

    /// Every field `expect` can use: `frame`, the kernel's and the model's.
    pub fn field_names() -> impl Iterator<Item = &'static str> {
        let fields = Self::compared_fields().chain(Self::MODEL_FIELDS).chain(Self::UNCOMPARED_FIELDS);
        std::iter::once("frame").chain(fields.copied())
    }

    /// The value of a field, booleans as 0/1.
    pub fn field(&self, name: &str) -> Option<u64> {
        let (p, r, v) = (&self.page, &self.range, &self.process.vma);
        Some(match name {
            "frame" => p.pfn,
            "folio_order" => p.folio_order as u64,
            "folio_kb" => 4 << p.folio_order,
            "node" => p.node as u64,
            "present" => p.present as u64,
            "exclusive" => p.exclusive as u64,
            "zero_page" => p.zero_page as u64,
            "pmd_mapped" => p.pmd_mapped as u64,
            "writable" => p.writable as u64,
            "byte" => self.byte as u64,
            "rss_kb" => r.rss_kb,
            "anonymous_kb" => r.anonymous_kb,
            "anon_huge_kb" => r.anon_huge_kb,
            "shmem_kb" => r.shmem_kb,
            "shmem_pmd_kb" => r.shmem_pmd_kb,
            "shared_kb" => r.shared_kb,
            "private_kb" => r.private_kb,
            "mapcount" => p.mapcount,
            "folio_mapcount" => p.folio_mapcount,
            "refcount" => p.refcount,
            "anon_exclusive" => p.anon_exclusive as u64,
            "maybe_shared" => p.maybe_shared as u64,
            "likely_shared" => p.likely_shared as u64,
            "pmd_shared" => p.pmd_shared as u64,
            "uffd_wp" => p.uffd_wp as u64,
            "soft_dirty" => p.soft_dirty as u64,
            "ksm" => p.ksm as u64,
            "ksm_merging_pages" => self.process.ksm_merging_pages,
            "pgtables_kb" => self.pgtables_kb,
            "vma_count" => self.vma_count,
            "pmd_aligned" => self.addr.is_multiple_of(2 << 20) as u64,
            "file_size" => self.file.size,
            "file_blocks" => self.file.blocks,
            "file_nlink" => self.file.nlink,
            "file_seals" => self.file.seals,
            "seek_data" => self.file.seek_data,
            "seek_hole" => self.file.seek_hole,
            "kpagecount" => p.mapcount,
            "rss_anon_total_kb" => self.process.rss_anon_kb,
            "rss_file_total_kb" => self.process.rss_file_kb,
            "rss_shmem_total_kb" => self.process.rss_shmem_kb,
            "hugetlb_total_kb" => self.process.hugetlb_kb,
            "swapped" => p.swapped as u64,
            "swap_kb" => r.swap_kb,
            "swap_total_kb" => self.process.swap_kb,
            "vma_offset_kb" => self.addr.saturating_sub(v.start).min(v.end - v.start) / 1024,
            "vma_kb" => (v.end - v.start) / 1024,
            "vma_flags" => v.flags,
            "vma_lazyfree_kb" => v.lazyfree_kb,
            "vma_shared_clean_kb" => v.shared_clean_kb,
            "vma_shared_dirty_kb" => v.shared_dirty_kb,
            "vma_private_clean_kb" => v.private_clean_kb,
            "vma_private_dirty_kb" => v.private_dirty_kb,
            "vma_shared_hugetlb_kb" => v.shared_hugetlb_kb,
            "vma_private_hugetlb_kb" => v.private_hugetlb_kb,
            "vma_swap_kb" => v.swap_kb,
            "vma_swap_pss_kb" => v.swap_pss_kb,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Observation;

    #[test]
    fn the_summary_says_what_a_design_cannot_tell_and_which_pmd_size_counts() {
        let mut o = Observation::default();
        o.page.present = true;
        o.page.anon = true;
        (o.page.folio_order, o.page.mapcount, o.page.folio_mapcount, o.page.refcount) = (4, 1, 16, 16);
        (o.page.maybe_shared, o.page.sharers_unknown) = (true, true);
        let s = o.summary();
        assert!(s.contains("mapcount 1, folio mapcount 16, refcount 16, maybe-shared n/a"), "{s}");
        o.page.sharers_unknown = false;
        assert!(o.summary().contains("maybe-shared yes"));
        // A PMD-mapped shmem page counts in ShmemPmdMapped, not AnonHugePages.
        (o.page.anon, o.page.pmd_mapped, o.range.shmem_pmd_kb) = (false, true, 2048);
        let s = o.summary();
        assert!(s.contains(" pmd,") && s.ends_with("shmem-pmd 2048K"), "{s}");
        o.page.present = false;
        assert_eq!(o.summary(), "absent; rss 0K");
    }

    #[test]
    fn every_field_has_a_bit_for_except() {
        let n = Observation::field_names().count();
        assert!(n <= 128, "{n} fields: `unrecorded` (u128) holds a bit per field");
        let o = Observation::default().except(&["frame".into(), "vma_swap_kb".into()]);
        assert!(!o.recorded("frame") && !o.recorded("vma_swap_kb") && o.recorded("byte"));
    }
}
