//! What an `observe` step records, field by field, and which fields the
//! kernel reports too.

use foliomm::internals::mm::{PageInfo, RangeInfo};

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
    /// tables and mappings count in `pgtables_kb` and `vma_count` (compare
    /// their differences: `b.pgtables_kb - a.pgtables_kb == 4`), and where
    /// a mapping lands depends on the layout (`pmd_aligned`: the observed
    /// address is a multiple of 2 MiB, which holds on every backend only
    /// where the kernel aligns the mapping).
    pub const UNCOMPARED_FIELDS: &'static [&'static str] = &["pgtables_kb", "vma_count", "pmd_aligned"];

    /// Every field `expect` can use: `frame`, the kernel's and the model's.
    pub fn field_names() -> impl Iterator<Item = &'static str> {
        let fields = Self::KERNEL_FIELDS.iter().chain(Self::MODEL_FIELDS).chain(Self::UNCOMPARED_FIELDS);
        std::iter::once("frame").chain(fields.copied())
    }

    /// The value of a field, booleans as 0/1.
    pub fn field(&self, name: &str) -> Option<u64> {
        let p = &self.page;
        let r = &self.range;
        Some(match name {
            "frame" => p.pfn,
            "folio_order" => p.folio_order as u64,
            "folio_kb" => 4 << p.folio_order,
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
            "pgtables_kb" => self.pgtables_kb,
            "vma_count" => self.vma_count,
            "pmd_aligned" => self.addr.is_multiple_of(2 << 20) as u64,
            _ => return None,
        })
    }
}
