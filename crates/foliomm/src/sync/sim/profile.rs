//! The costs of a simulation: what each kind of access to a shared cache
//! line, each round of waiting for a lock and each piece of private work
//! takes, in picoseconds of a simulated CPU's clock.

/// A cost profile. Costs are in picoseconds; `cpus_per_socket` places
/// simulated CPU `c` (from 0) on socket `c / cpus_per_socket`, and a line
/// modified on another socket costs `remote_hitm` instead of `hitm`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    /// The profile's name, for tables.
    pub name: String,
    /// An access to a line this CPU holds in a state that allows it.
    pub hit: u64,
    /// A line from memory (no CPU holds it).
    pub memory: u64,
    /// A clean line another CPU holds (a read, or the read of a write).
    pub clean_read: u64,
    /// A line modified in another CPU of this socket (`perf c2c`'s HITM).
    pub hitm: u64,
    /// A line modified in a CPU of another socket.
    pub remote_hitm: u64,
    /// Invalidating the other holders of a clean line before a write.
    pub invalidate: u64,
    /// One round of spinning for a lock.
    pub spin: u64,
    /// A locked read-modify-write of a mapcount design (`atomic_add`,
    /// `atomic_add_return`, a compare-exchange) beyond its line's access:
    /// the cost seed 000's "exclusive atomic seqcount" saves by plain
    /// stores, and that it found near 0 on AMD EPYC.
    #[serde(default = "Profile::default_atomic")]
    pub atomic: u64,
    /// From a release to the sleeping waiter it wakes running again
    /// (`try_to_wake_up` and the switch to the woken task).
    #[serde(default = "Profile::default_wakeup")]
    pub wakeup: u64,
    /// The fixed work of a page fault (entry, walk, exit), beyond its
    /// shared accesses.
    pub fault: u64,
    /// Zeroing a 4 KiB page.
    pub zero_page: u64,
    /// The fixed work of a system call (mmap, munmap, madvise).
    pub syscall: u64,
    /// The fixed work of a fork of a small process and of its exit
    /// (the task, the MM and its VMAs: `copy_process`, `exit_mmap`),
    /// beyond its page tables' and folios' shared accesses.
    #[serde(default = "Profile::default_fork")]
    pub fork: u64,
    /// Computing an MM's rmap sub-IDs for folios up to order 9 (seed
    /// 000's `calc_rmap_subid` for 1, 2 and 3 values: a multiply-add per
    /// bit of the ID, 48 in all).
    #[serde(default = "Profile::default_subid_calc")]
    pub subid_calc: u64,
    /// One step of a walk over page-table entries (each PMD entry the zap
    /// and fork look at, each huge page's entry of fork's hugetlb copy,
    /// whose skipped PUD windows cost one step; also each mapping
    /// `huge_pmd_share` looks at): the entry's load from a cached table
    /// and the checks on it.
    #[serde(default = "Profile::default_pt_step")]
    pub pt_step: u64,
    /// The body of a hugetlb fault, under the fault's locks
    /// (`hugetlb_fault` after the walk: the page-cache lookup, the page
    /// lock, the rmap and the entry), beyond its shared accesses, the
    /// fault's own work (`fault`) and a new page's zeroing.
    #[serde(default = "Profile::default_hugetlb_fault")]
    pub hugetlb_fault: u64,
    /// Moving one folio on or off an LRU list under `lru_lock`
    /// (`lruvec_add_folio` in `folio_batch_move_lru`, `lruvec_del_folio`
    /// in `folios_put_refs`), beyond the lock's own line: the folio's and
    /// its list neighbour's descriptors and the list sizes' statistics.
    #[serde(default = "Profile::default_lru_folio")]
    pub lru_folio: u64,
    /// CPUs per socket (0: one socket).
    pub cpus_per_socket: u32,
    /// NUMA nodes, one per socket, that the CPUs are dealt over: CPU `c`
    /// on node and socket `c mod nodes`, as the scheduler spreads a
    /// process's busy threads over the sockets (`cpus_per_socket` then
    /// places nothing). 0 or 1: one node, and the sockets filled in turn.
    #[serde(default)]
    pub nodes: u32,
    /// Whether the adjacent-line prefetcher fetches a line's 128-byte
    /// buddy with it (a transfer of one moves both).
    pub adjacent_prefetch: bool,
}

impl Profile {
    /// Published latencies of a two-socket Intel Xeon server (Skylake-SP:
    /// L1 hit about 1 ns, a clean line from another core's cache about
    /// 40 ns, a modified one (HITM) about 60 ns on the socket and 120 ns
    /// across the UPI link, DRAM about 90 ns; 28 CPUs per socket), with a
    /// fault's fixed work of 1 µs, 4 KiB zeroed in 400 ns (10 GB/s), and a
    /// wake-up of a sleeping waiter on an idle CPU in 4 µs; a locked RMW
    /// costs 8 ns more than a plain store (about 18 cycles, Skylake's
    /// `lock add` latency in Agner Fog's tables, at 2.2 GHz).
    pub fn two_socket_server() -> Profile {
        Profile {
            name: "two-socket-server".into(),
            hit: 1_000,
            memory: 90_000,
            clean_read: 40_000,
            hitm: 60_000,
            remote_hitm: 120_000,
            invalidate: 30_000,
            spin: 20_000,
            atomic: Profile::default_atomic(),
            wakeup: Profile::default_wakeup(),
            fault: 1_000_000,
            zero_page: 400_000,
            syscall: 500_000,
            fork: Profile::default_fork(),
            subid_calc: Profile::default_subid_calc(),
            pt_step: Profile::default_pt_step(),
            hugetlb_fault: Profile::default_hugetlb_fault(),
            lru_folio: Profile::default_lru_folio(),
            cpus_per_socket: 28,
            nodes: 0,
            adjacent_prefetch: false,
        }
    }

    /// [`Profile::two_socket_server`] on a CPU whose atomic RMWs cost no
    /// more than plain stores, as seed 000 found AMD EPYC's ("atomic
    /// additions seem to be just as fast as doing ordinary additions").
    pub fn cheap_atomics() -> Profile {
        Profile { name: "cheap-atomics".into(), atomic: 0, ..Profile::two_socket_server() }
    }

    /// The built-in profile `name` names, if any.
    pub fn builtin(name: &str) -> Option<Profile> {
        [Profile::two_socket_server(), Profile::cheap_atomics()].into_iter().find(|p| p.name == name)
    }

    /// A locked RMW's extra cost, for profiles saved before they had one.
    fn default_atomic() -> u64 {
        8_000
    }

    /// A fork's fixed work, for profiles saved before they had one: 270 µs,
    /// so that a fork-exit-wait cycle of seed 002's single fork program,
    /// whose other steps the model costs at about 12 µs, comes to the
    /// 3,546 per second of the seed's machine (on the 2-core VM foliomm is
    /// developed on, `sim calibrate` measured 212 µs and the host kernel
    /// ran the program at 4,292 per second).
    fn default_fork() -> u64 {
        270_000_000
    }

    /// Computing the sub-IDs: 48 dependent multiply-adds of about 4
    /// cycles each, some 90 ns at 2.2 GHz (also for profiles saved before
    /// they had it; `sim calibrate` does not measure it).
    pub fn default_subid_calc() -> u64 {
        90_000
    }

    /// A walk step: a load from a cached page-table line (the upper levels'
    /// too, for hugetlb's `huge_pte_offset`) and the tests on the entry,
    /// some 20 cycles, 10 ns at 2.2 GHz (also for profiles saved before
    /// they had it; `sim calibrate` does not measure it).
    pub fn default_pt_step() -> u64 {
        10_000
    }

    /// A hugetlb fault's body: 900 ns, so that seed 002's single faulting
    /// program (whose other steps the model costs at about 1.1 µs a
    /// fault) runs at the seed's 491,609 faults per second; on this
    /// machine's host kernel, `perf` puts 43% of such a fault's time in
    /// `hugetlb_fault`, as 0.9 of 2.0 µs is (also for profiles saved
    /// before they had it; `sim calibrate` does not measure it).
    pub fn default_hugetlb_fault() -> u64 {
        900_000
    }

    /// An LRU list move: 120 ns. On this machine's host kernel (6.18),
    /// `perf record -g` of a page_fault1 loop (one thread mapping,
    /// touching and unmapping 128 MiB) puts 4.2% of its 3.25 µs a fault
    /// in `folio_batch_move_lru`'s interrupts-off hold of `lru_lock` and
    /// 3.4% in `folios_put_refs`'s: 135 ns a folio added and 110 ns a
    /// folio freed (also for profiles saved before they had it; `sim
    /// calibrate` does not measure it).
    pub fn default_lru_folio() -> u64 {
        120_000
    }

    /// The wake-up latency of a profile saved before it had one.
    fn default_wakeup() -> u64 {
        4_000_000
    }

    /// The socket of simulated CPU `cpu` (from 0), which is its node
    /// when the profile deals the CPUs over nodes.
    pub fn socket(&self, cpu: usize) -> usize {
        match (self.nodes, self.cpus_per_socket) {
            (2.., _) => cpu % self.nodes as usize,
            (_, 0) => 0,
            (_, n) => cpu / n as usize,
        }
    }
}
