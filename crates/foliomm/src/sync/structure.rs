//! The kernel structures whose cache lines the fault path shares, and
//! what one simulated CPU did to them: the names both the thread-based
//! accounting ([`super::cacheline`]) and the simulation ([`super::sim`])
//! count under.

/// The kernel structure a shared line belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structure {
    /// `mm->mmap_lock`'s count.
    MmapLock,
    /// `mm->mm_lock_seq`.
    MmLockSeq,
    /// A VMA's lock: `vm_refcnt`, or the `vm_lock` rwsem, `vm_lock_seq` and `detached`.
    VmaLock,
    /// The fields of a VMA a fault reads (`vm_start`, `vm_end`, `vm_mm`,
    /// `vm_flags`): the VMA's first line.
    Vma,
    /// Split page-table locks.
    Ptl,
    /// `mm->rss_stat`, a per-CPU counter that folds into the shared count once per batch.
    MmCounters,
    /// A folio's head `struct page` (refcount, mapcount, flags).
    Folio,
    /// The zone lock of the page allocator.
    ZoneLock,
    /// A file's `i_mmap_rwsem`.
    IMmapRwsem,
    /// A shared hugetlb VMA's lock (`hugetlb_vma_lock`'s `rw_sema`).
    HugetlbVmaLock,
    /// A hugetlb fault mutex (`hugetlb_fault_mutex_table[hash]`).
    FaultMutex,
    /// The LRU lists' lock (`lruvec->lru_lock`).
    LruLock,
    /// An anon_vma's `rwsem` (fork, exit, rmap walks of anon folios).
    AnonVma,
    /// A shmem file's page cache (`mapping->i_pages`: its `xa_lock` and
    /// slots).
    PageCache,
    /// Seed 000's rmap sub-IDs of an MM (`mm->mm_rmap_subid_*`), or their
    /// per-CPU copy (stage `all-percpu`).
    MmRmapIds,
}

impl Structure {
    pub const ALL: [Structure; 15] = [
        Structure::MmapLock,
        Structure::MmLockSeq,
        Structure::VmaLock,
        Structure::Vma,
        Structure::Ptl,
        Structure::MmCounters,
        Structure::Folio,
        Structure::ZoneLock,
        Structure::IMmapRwsem,
        Structure::HugetlbVmaLock,
        Structure::FaultMutex,
        Structure::LruLock,
        Structure::AnonVma,
        Structure::PageCache,
        Structure::MmRmapIds,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Structure::MmapLock => "mmap_lock",
            Structure::MmLockSeq => "mm_lock_seq",
            Structure::VmaLock => "vma_lock",
            Structure::Vma => "vma",
            Structure::Ptl => "ptl",
            Structure::MmCounters => "mm_counters",
            Structure::Folio => "folio",
            Structure::ZoneLock => "zone_lock",
            Structure::IMmapRwsem => "i_mmap_rwsem",
            Structure::HugetlbVmaLock => "hugetlb_vma_lock",
            Structure::FaultMutex => "fault_mutex",
            Structure::LruLock => "lru_lock",
            Structure::AnonVma => "anon_vma",
            Structure::PageCache => "i_pages",
            Structure::MmRmapIds => "mm_rmap_ids",
        }
    }
}

/// The number of structures.
pub const N: usize = Structure::ALL.len();

/// Accesses and transfers one simulated CPU made, and on simulated CPUs
/// ([`super::sim`]) the picoseconds it waited for locks, per [`Structure`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    pub accesses: [u64; N],
    pub transfers: [u64; N],
    pub waited: [u64; N],
}

impl Transfers {
    /// Transfers into this CPU of lines of `s`.
    pub fn of(&self, s: Structure) -> u64 {
        self.transfers[s as usize]
    }

    /// Accesses to lines of `s`.
    pub fn accesses_of(&self, s: Structure) -> u64 {
        self.accesses[s as usize]
    }

    /// Picoseconds waited for locks in lines of `s` (simulated CPUs only).
    pub fn waited_of(&self, s: Structure) -> u64 {
        self.waited[s as usize]
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Transfers) {
        self.combine(other, u64::wrapping_add);
    }

    /// The counts since `earlier`, a copy of these taken before.
    pub fn since(&self, earlier: &Transfers) -> Transfers {
        let mut t = *self;
        t.combine(earlier, u64::wrapping_sub);
        t
    }

    fn combine(&mut self, other: &Transfers, f: fn(u64, u64) -> u64) {
        for i in 0..N {
            self.accesses[i] = f(self.accesses[i], other.accesses[i]);
            self.transfers[i] = f(self.transfers[i], other.transfers[i]);
            self.waited[i] = f(self.waited[i], other.waited[i]);
        }
    }
}
