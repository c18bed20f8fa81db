//! Cache-line accounting of the fault path (seed 004): two simulated CPUs
//! take turns on one OS thread, so the interleaving, and with it every
//! transfer, is fixed. The tests run one after the other from one test
//! function: the owner table is global, and tests run in parallel.

use foliomm::internals::machine::{VmaLayout, VmaLockDesign};
use foliomm::internals::mm::Advice;
use foliomm::internals::sync::cacheline::{self, Structure::*, Transfers};
use foliomm::{Config, Machine, MmapFlags, Prot};

const PAGES: u64 = 256;
const REGION: u64 = PAGES * 4096;

/// Two CPUs write one byte to each page of their own region in turn,
/// page by page: regions in two VMAs 4 MiB apart, or halves of one VMA.
/// Returns the transfers and the faults taken.
fn faults_in_turn(design: VmaLockDesign, vma_layout: VmaLayout, shared: bool) -> (Transfers, u64) {
    let m = Machine::new(Config { memory: 64 << 20, vma_lock: design, vma_layout, ..Config::default() }).unwrap();
    let mm = m.new_mm().unwrap();
    let fixed = MmapFlags { noreplace: true, ..MmapFlags::default() };
    let regions = if shared {
        let a = mm.mmap(0x4000_0000, 2 * REGION, Prot::RW, fixed).unwrap();
        [a, a + REGION]
    } else {
        [0x4000_0000, 0x4040_0000].map(|a| mm.mmap(a, REGION, Prot::RW, fixed).unwrap())
    };
    for a in regions {
        mm.madvise(a, REGION, Advice::NoHugePage).unwrap();
    }
    let mut cpus = [m.new_cpu(), m.new_cpu()];
    cacheline::forget();
    cacheline::take();
    for page in 0..PAGES {
        for (i, cpu) in cpus.iter_mut().enumerate() {
            cacheline::account_as(i as u32 + 1);
            cpu.write(&mm, regions[i] + page * 4096, &[1]).unwrap();
        }
    }
    cacheline::account_as(0);
    let t = cacheline::take();
    assert!(m.check().is_empty());
    (t, m.stats.pgfault.load(std::sync::atomic::Ordering::Relaxed))
}

#[test]
fn fault_path_cache_lines() {
    the_mmap_lock_moves_on_every_fault_and_a_shared_vma_lock_on_every_shared_fault();
    packed_vmas_share_lines_with_their_neighbours_and_aligned_ones_do_not();
}

fn the_mmap_lock_moves_on_every_fault_and_a_shared_vma_lock_on_every_shared_fault() {
    let layouts = [VmaLayout::Design, VmaLayout::Embedded];
    for (design, layout) in [VmaLockDesign::MmapLock, VmaLockDesign::VmaRwsem, VmaLockDesign::VmaRefcount]
        .into_iter()
        .flat_map(|d| layouts.map(|l| (d, l)))
    {
        for shared in [false, true] {
            let (t, faults) = faults_in_turn(design, layout, shared);
            assert_eq!(faults, 2 * PAGES);
            let per = |s| t.of(s) as f64 / faults as f64;
            let what = format!("{design:?}, {layout:?}, shared VMA {shared}: {t:?}");
            // Each fault finds the line the other CPU's fault wrote last:
            // the shared VMA's lock word, and under vma-rwsem's own layout
            // the slab line the two VMAs' 40-byte vm_locks share.
            let per_vma = design != VmaLockDesign::MmapLock;
            let slab = design == VmaLockDesign::VmaRwsem && layout == VmaLayout::Design;
            let (mmap_lock, vma_lock) = if per_vma { (0.0, (shared || slab) as u32 as f64) } else { (1.0, 0.0) };
            assert!((per(MmapLock) - mmap_lock).abs() < 0.02, "mmap_lock {}: {what}", per(MmapLock));
            assert!((per(VmaLock) - vma_lock).abs() < 0.02, "vma_lock {}: {what}", per(VmaLock));
            // A fault's accesses of the lock's lines: vm_lock_seq read
            // before and after the take, the take and the release, and
            // under vma-rwsem the read of `detached` and the store of the
            // reader into `sem->owner` (`rwsem_set_reader_owned`).
            let lock_words = match design {
                VmaLockDesign::MmapLock => 0,
                VmaLockDesign::VmaRwsem => 6,
                VmaLockDesign::VmaRefcount => 4,
            };
            assert_eq!(t.accesses_of(VmaLock), lock_words * faults, "{what}");
            // Faults in turn: the members a fault reads stay clean in
            // their lines, but for the anon_vma the first fault of a VMA
            // installs, which the other CPU's next fault reads once.
            assert_eq!(t.of(Vma), shared as u64, "{what}");
            // Nobody writes mm_lock_seq while faults run. Separate PTE
            // tables have separate PTLs: only the PMD table's lock, taken
            // to install each region's PTE table, may move.
            assert_eq!(t.of(MmLockSeq), 0, "{what}");
            if !shared {
                assert!(t.of(Ptl) <= 2, "{what}");
            }
            // Each CPU refills its per-CPU page list from the zone once per
            // batch of 63 pages, and its folios are its own.
            assert!(per(ZoneLock) < 0.02, "zone_lock {}: {what}", per(ZoneLock));
            assert_eq!(t.of(Folio), 0, "{what}");
        }
    }
}

/// VMAs that the slab keeps `VMAS` apart; rounds of the writer.
const VMAS: u64 = 8;
const ROUNDS: u64 = 32;

/// CPU 2 changes the protection of each VMA in turn while CPU 1 faults a
/// new page of the VMA made just before it (a read: the VMA may be read-only) (its neighbour in the slab).
/// Returns the VMA-member transfers.
fn neighbours_in_turn(design: VmaLockDesign) -> u64 {
    let m = Machine::new(Config { memory: 64 << 20, vma_lock: design, ..Config::default() }).unwrap();
    let mm = m.new_mm().unwrap();
    let fixed = MmapFlags { noreplace: true, ..MmapFlags::default() };
    // A gap after each VMA keeps them apart (no merge).
    let vmas: Vec<u64> =
        (0..VMAS).map(|i| mm.mmap(0x4000_0000 + i * 2 * REGION, REGION, Prot::RW, fixed).unwrap()).collect();
    let mut cpus = [m.new_cpu(), m.new_cpu()];
    cacheline::forget();
    cacheline::take();
    for round in 0..ROUNDS {
        for i in 1..VMAS as usize {
            cacheline::account_as(2);
            let prot = if round % 2 == 0 { Prot(Prot::READ) } else { Prot::RW };
            mm.mprotect(vmas[i], REGION, prot).unwrap();
            cacheline::account_as(1);
            cpus[0].read(&mm, vmas[i - 1] + round * 4096, &mut [0]).unwrap();
        }
    }
    cacheline::account_as(0);
    drop(cpus);
    assert!(m.check().is_empty());
    cacheline::take().of(Vma)
}

/// 6.4 to 6.14 pack 184-byte VMAs: a writer dirtying one VMA's first line
/// takes away a line its neighbour's faults read (for two neighbours in
/// eight, whose `vm_policy` shares a line with the next VMA's flags; the
/// owner table may forget one). 6.15's cache is cacheline-aligned: no line
/// holds two VMAs.
fn packed_vmas_share_lines_with_their_neighbours_and_aligned_ones_do_not() {
    let packed = neighbours_in_turn(VmaLockDesign::VmaRwsem);
    let aligned = neighbours_in_turn(VmaLockDesign::VmaRefcount);
    assert_eq!(aligned, 0);
    assert!(packed >= ROUNDS, "packed VMAs: {packed} transfers in {ROUNDS} rounds");
    assert!(packed <= 2 * ROUNDS, "packed VMAs: {packed} transfers in {ROUNDS} rounds");
}
