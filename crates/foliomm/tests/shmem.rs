//! shmem files and file mappings through the library API (issue #12, first
//! slice): shared and private mappings of a memfd, shared anonymous memory,
//! fork, fault-around, SIGBUS past the end, truncate under a mapping. Every
//! test checks bytes and runs the invariant checker.

use std::sync::Arc;

use foliomm::internals::machine::HugeSize;
use foliomm::internals::mm::Advice;
use foliomm::internals::shmem::Inode;
use foliomm::{Config, Errno, Machine, Mm, MmapFlags, Prot};

const K: u64 = 1024;
const M: u64 = 1024 * K;

fn machine() -> Arc<Machine> {
    Machine::new(Config { memory: 64 * M, ..Config::default() }).unwrap()
}

fn assert_clean(m: &Machine) {
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "invariant violations:\n{}", bad.join("\n"));
}

fn map(mm: &Mm, inode: &Arc<Inode>, len: u64, offset: u64, shared: bool) -> u64 {
    let flags = MmapFlags { shared, ..MmapFlags::default() };
    mm.mmap_file(0, len, Prot::RW, flags, Some((inode, offset))).unwrap()
}

fn byte(m: &Machine, mm: &Mm, addr: u64) -> u8 {
    let mut b = [0u8];
    m.new_cpu().read(mm, addr, &mut b).unwrap();
    b[0]
}

#[test]
fn a_shared_mapping_shows_writes_to_every_process_and_survives_unmap() {
    let m = machine();
    let f = m.memfd_create(64 * K).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 64 * K, 0, true);
    let mut cpu = m.new_cpu();
    cpu.write(&p, a + 5 * 4096 + 7, b"shared").unwrap();
    assert_eq!(p.rss_shmem.load(std::sync::atomic::Ordering::Relaxed), 1);
    let c = p.fork().unwrap();
    assert!(!c.page_info(a + 5 * 4096).present, "fork copies no PTE of a shared file VMA");
    assert_eq!(byte(&m, &c, a + 5 * 4096 + 7), b's');
    cpu.write(&c, a + 5 * 4096 + 7, b"S").unwrap();
    assert_eq!(byte(&m, &p, a + 5 * 4096 + 7), b'S', "the child's write reaches the parent");
    assert_eq!(p.page_info(a + 5 * 4096).pfn, c.page_info(a + 5 * 4096).pfn);
    assert_clean(&m);
    p.munmap(a, 64 * K).unwrap();
    c.exit();
    assert_clean(&m);
    let b = map(&p, &f, 16 * K, 4 * 4096, true);
    assert_eq!(byte(&m, &p, b + 4096 + 8), b'h', "the file kept its bytes");
    assert_clean(&m);
}

#[test]
fn a_private_mapping_copies_on_write_and_never_writes_the_file() {
    let m = machine();
    let f = m.memfd_create(16 * K).unwrap();
    let p = m.new_mm().unwrap();
    let shared = map(&p, &f, 16 * K, 0, true);
    let private = map(&p, &f, 16 * K, 0, false);
    let mut cpu = m.new_cpu();
    cpu.write(&p, shared, b"file").unwrap();
    assert_eq!(byte(&m, &p, private), b'f', "a private mapping reads the file");
    assert!(!p.page_info(private).writable);
    cpu.write(&p, private, b"mine").unwrap();
    assert_eq!(byte(&m, &p, shared), b'f', "a private write never reaches the file");
    assert_ne!(p.page_info(private).pfn, p.page_info(shared).pfn);
    // A write fault on a hole of a private mapping copies from the file.
    cpu.write(&p, private + 8 * K, b"x").unwrap();
    assert_eq!(byte(&m, &p, shared + 8 * K), 0);
    let c = p.fork().unwrap();
    assert_eq!(byte(&m, &c, private), b'm', "the child inherits the private copy");
    cpu.write(&p, shared + 4 * K, b"later").unwrap();
    assert_eq!(byte(&m, &c, private + 4 * K), b'l', "pages not copied still read the file");
    assert_clean(&m);
}

#[test]
fn read_faults_map_cached_neighbours_and_past_the_end_is_sigbus() {
    let m = machine();
    let f = m.memfd_create(128 * K).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 128 * K, 0, true);
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&p, a, 128 * K, 1).unwrap();
    let q = m.new_mm().unwrap();
    let b = map(&q, &f, 192 * K, 0, true);
    assert_eq!(byte(&m, &q, b + 20 * K), 1);
    let present: Vec<bool> = (0..32).map(|i| q.page_info(b + i * 4096).present).collect();
    assert!(present[..16].iter().all(|&p| p) && !present[16], "fault-around maps the aligned 64K block");
    assert_eq!(cpu.write(&q, b + 128 * K, b"x"), Err(Errno::SIGBUS));
    assert_clean(&m);
}

#[test]
fn truncate_unmaps_every_mapping_of_the_pages_it_drops() {
    let m = machine();
    let f = m.memfd_create(64 * K).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 64 * K, 0, true);
    let private = map(&p, &f, 64 * K, 0, false);
    let mut cpu = m.new_cpu();
    cpu.fill(&p, a, 64 * K, 0x5a).unwrap();
    cpu.write(&p, private + 40 * K, b"cow").unwrap();
    let c = p.fork().unwrap();
    assert_eq!(byte(&m, &c, a + 60 * K), 0x5a);
    m.ftruncate(&f, 32 * K).unwrap();
    assert_clean(&m);
    assert!(!p.page_info(a + 40 * K).present && !c.page_info(a + 60 * K).present);
    assert!(!p.page_info(private + 40 * K).present, "truncation takes COWed copies too");
    assert_eq!(cpu.read(&p, a + 40 * K, &mut [0]), Err(Errno::SIGBUS));
    assert_eq!(byte(&m, &c, a + 4 * K), 0x5a, "pages before the end stay");
    m.ftruncate(&f, 64 * K).unwrap();
    assert_eq!(byte(&m, &p, a + 40 * K), 0, "a grown file reads zeros");
    assert_clean(&m);
}

#[test]
fn shared_anonymous_memory_is_shared_across_fork_and_dontneed_keeps_it() {
    let m = machine();
    let base = m.frames_in_use();
    let p = m.new_mm().unwrap();
    let flags = MmapFlags { shared: true, ..MmapFlags::default() };
    let a = p.mmap(0, 32 * K, Prot::RW, flags).unwrap();
    let c = p.fork().unwrap();
    let mut cpu = m.new_cpu();
    cpu.write(&c, a + 8 * K, b"from the child").unwrap();
    assert_eq!(byte(&m, &p, a + 8 * K), b'f');
    p.madvise(a, 32 * K, Advice::DontNeed).unwrap();
    assert!(!p.page_info(a + 8 * K).present);
    assert_eq!(byte(&m, &p, a + 8 * K), b'f', "MADV_DONTNEED keeps shared memory");
    drop(c);
    drop(p);
    assert_clean(&m);
    // The file's folio waits in the CPU's LRU batch, which exit (from
    // 6.14) does not drain, until the batch moves.
    m.kernel.lru_add_drain_all();
    assert_eq!(m.frames_in_use(), base, "the memory goes with its last mapping");
}

#[test]
fn shmem_thp_is_pmd_mapped_and_splitting_the_pmd_unmaps_it() {
    use foliomm::internals::folio::thp::ShmemHuge;
    let m = machine();
    m.thp.set_shmem_enabled(ShmemHuge::Always);
    let f = m.memfd_create(4 * M).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 4 * M, 0, true);
    assert_eq!(a % (2 * M), 0);
    let mut cpu = m.new_cpu();
    cpu.write(&p, a + 5, b"huge").unwrap();
    let info = p.page_info(a + 4096);
    assert!(info.pmd_mapped && info.folio_order == 9, "{info:?}");
    assert_eq!(p.rss_shmem.load(std::sync::atomic::Ordering::Relaxed), 512);
    let c = p.fork().unwrap();
    assert!(!c.page_info(a).present, "fork copies no file PMD");
    assert_eq!(byte(&m, &c, a + 5), b'h');
    assert!(c.page_info(a).pmd_mapped, "the child refaults the PMD");
    assert_clean(&m);
    // mprotect of one page splits the PMD: it is unmapped and refaults by PTEs.
    p.mprotect(a + 8192, 4096, Prot(Prot::READ)).unwrap();
    assert!(!p.page_info(a).pmd_mapped);
    assert_eq!(byte(&m, &p, a + 5), b'h');
    let info = p.page_info(a);
    assert!(info.present && !info.pmd_mapped && info.folio_order == 9);
    assert_clean(&m);
    // A private mapping reads the THP by PMD and copies one page on write.
    let private = map(&p, &f, 2 * M, 0, false);
    assert_eq!(byte(&m, &p, private + 5), b'h');
    assert!(p.page_info(private).pmd_mapped);
    cpu.write(&p, private + 5, b"mine").unwrap();
    assert!(!p.page_info(private).pmd_mapped && p.page_info(private).folio_order == 0);
    assert_eq!(byte(&m, &c, a + 5), b'h', "the file keeps its byte");
    m.ftruncate(&f, 3 * M).unwrap();
    assert_clean(&m);
    drop((c, p));
    assert_clean(&m);
}

#[test]
fn a_punched_hole_unmaps_file_pages_everywhere_but_keeps_private_copies() {
    let m = machine();
    let f = m.memfd_create(32 * K).unwrap();
    let p = m.new_mm().unwrap();
    let s = map(&p, &f, 32 * K, 0, true);
    let private = map(&p, &f, 32 * K, 0, false);
    let mut cpu = m.new_cpu();
    cpu.fill(&p, s, 32 * K, 0x44).unwrap();
    cpu.write(&p, private + 4 * K, b"cow").unwrap();
    assert_eq!(byte(&m, &p, private + 8 * K), 0x44);
    let c = p.fork().unwrap();
    assert_eq!(byte(&m, &c, s + 8 * K), 0x44);
    m.punch_hole(&f, 2 * K, 14 * K).unwrap();
    assert_clean(&m);
    assert!(!p.page_info(s + 8 * K).present && !c.page_info(s + 8 * K).present);
    assert!(!p.page_info(private + 8 * K).present, "file pages of a private mapping go");
    assert_eq!(byte(&m, &p, private + 4 * K), b'c', "a private copy stays");
    assert_eq!(byte(&m, &c, s + 8 * K), 0, "the hole reads zeros");
    assert_eq!(byte(&m, &c, s + K), 0x44, "bytes before the hole stay");
    assert_eq!(byte(&m, &c, s + 2 * K), 0, "a partly covered page is zeroed where covered");
    assert_eq!(f.size(), 32 * K, "the size stays");
    assert_eq!(p.madvise(private, 4 * K, foliomm::internals::mm::Advice::Remove), Err(Errno::EACCES));
    p.madvise(s + 16 * K, 8 * K, foliomm::internals::mm::Advice::Remove).unwrap();
    assert_eq!(byte(&m, &c, s + 20 * K), 0);
    assert_clean(&m);
}

#[test]
fn zapping_dirty_file_ptes_removes_their_rmap_after_the_tlb_flush() {
    use std::sync::atomic::Ordering::Relaxed;
    let m = machine();
    let f = m.memfd_create(64 * K).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 64 * K, 0, true);
    let mut cpu = m.new_cpu();
    cpu.read_byte_per_page(&p, a, 32 * K).unwrap();
    cpu.write_byte_per_page(&p, a + 32 * K, 32 * K, 1).unwrap();
    let anon = p.mmap(0, 16 * K, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write_byte_per_page(&p, anon, 16 * K, 1).unwrap();
    p.munmap(anon, 16 * K).unwrap();
    assert_eq!(m.stats.rmap_delayed.load(Relaxed), 0, "anon pages are never delayed");
    p.munmap(a, 64 * K).unwrap();
    assert_eq!(m.stats.rmap_delayed.load(Relaxed), 8, "the 8 written pages, not the 8 only read");
    assert_clean(&m);
    let b = map(&p, &f, 64 * K, 0, true);
    assert_eq!(byte(&m, &p, b + 32 * K), 1);
}

/// Running out of memory in fallocate loses nothing and keeps nothing:
/// the folios it added leave again, the size stays, the bytes already in
/// the file stay. A pwrite that runs out stops short and keeps what it
/// wrote.
#[test]
fn fallocate_and_pwrite_out_of_memory_lose_nothing() {
    let m = Machine::new(Config { memory: 8 * M, ..Config::default() }).unwrap();
    let f = m.memfd_create(8 * K).unwrap();
    assert_eq!(f.write(100, b"kept"), Ok(4));
    let in_use = m.kernel.frames_in_use();
    assert_eq!(f.fallocate(0, 64 * M, false), Err(Errno::ENOMEM));
    assert_eq!(f.size(), 8 * K, "fallocate's size change waits for success");
    // The last folios it added wait in the CPU's LRU batch until it moves.
    m.kernel.lru_add_drain_all();
    assert_eq!(m.kernel.frames_in_use(), in_use, "the folios fallocate added were freed");
    let mut buf = [0u8; 4];
    assert_eq!(f.read(100, &mut buf), Ok(4));
    assert_eq!(&buf, b"kept");
    assert_clean(&m);
    let big = vec![0x61u8; 64 * M as usize];
    let written = f.write(0, &big).unwrap();
    assert!(written > 0 && written < big.len(), "a short write: {written} bytes");
    assert_eq!(f.size(), written as u64, "the size covers what was written");
    let mut back = vec![0u8; written];
    assert_eq!(f.read(0, &mut back), Ok(written));
    assert!(back.iter().all(|&b| b == 0x61));
    assert_clean(&m);
    assert_eq!(f.fallocate(0, 0, false), Err(Errno::EINVAL));
    assert_eq!(f.write(foliomm::internals::shmem::MAX_FILE_SIZE, b"x"), Err(Errno::EFBIG));
}

/// A hole punched in a THP that a mapping maps by a PMD splits it: the
/// pieces the hole covers are freed, the rest stays cached with its bytes,
/// and every i_mmap record matches its VMA throughout.
#[test]
fn a_hole_in_a_mapped_thp_splits_it_and_frees_the_covered_pieces() {
    let m = machine();
    m.thp.set_shmem_enabled(foliomm::internals::folio::thp::ShmemHuge::Always);
    let f = m.memfd_create(2 * M).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 2 * M, 0, true);
    m.new_cpu().write(&p, a + 200 * K, b"around").unwrap();
    assert!(p.page_info(a).pmd_mapped);
    let in_use = m.kernel.frames_in_use();
    m.punch_hole(&f, 64 * K, 64 * K).unwrap();
    assert_eq!(m.kernel.frames_in_use(), in_use - 16, "the 16 pages of the hole were freed");
    assert!(!p.page_info(a).present, "the split unmapped the whole folio");
    assert_eq!(byte(&m, &p, a + 200 * K), b'a');
    assert_eq!(p.page_info(a + 200 * K).folio_order, 4, "pages 48..63 form an order-4 piece");
    assert_eq!(byte(&m, &p, a + 64 * K), 0);
    assert_clean(&m);
}

/// A private MAP_HUGETLB mapping reserves its pages for itself: its own
/// faults use the reservation, a child's do not (hugetlb_dup_vma_private).
/// With a pool of exactly the reserved pages, the child's first fault on a
/// page the parent never touched fails with SIGBUS while the parent's
/// succeeds.
#[test]
fn a_private_hugetlb_reservation_belongs_to_the_mapping_that_made_it() {
    let m = machine();
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 2), 2);
    let p = m.new_mm().unwrap();
    let flags = MmapFlags { hugetlb: Some(HugeSize::Pmd), ..MmapFlags::default() };
    let a = p.mmap(0, 4 * M, Prot::RW, flags).unwrap();
    let mut cpu = m.new_cpu();
    cpu.write(&p, a, b"owner").unwrap();
    let c = p.fork().unwrap();
    assert_eq!(cpu.write(&c, a + 2 * M, b"child"), Err(Errno::SIGBUS), "the child has no reservation");
    cpu.write(&p, a + 2 * M, b"owner").unwrap();
    assert_eq!(byte(&m, &c, a), b'o', "the child reads the parent's page");
    assert_clean(&m);
}

#[test]
fn a_grow_seal_stops_a_write_at_the_first_page_past_the_end() {
    use foliomm::internals::shmem::seals::{SEAL_GROW, SEAL_SEAL, SEAL_WRITE};
    let m = machine();
    let f = m.memfd_create(16 * K).unwrap();
    f.add_seals(SEAL_GROW).unwrap();
    // Page-sized chunks (no large folios): the chunk inside i_size is
    // written, the next one refused, so the write comes back short.
    assert_eq!(f.write(12 * K, &[0x5a; 8192]), Ok(4096));
    assert_eq!(f.write(16 * K, &[0x5b; 10]), Err(Errno::EPERM));
    assert_eq!(f.size(), 16 * K);
    let mut buf = [0u8; 2];
    assert_eq!(f.read(16 * K - 1, &mut buf), Ok(1));
    assert_eq!(buf[0], 0x5a);
    // A writable shared mapping keeps F_SEAL_WRITE out until it goes.
    let mm = m.new_mm().unwrap();
    let a = map(&mm, &f, 16 * K, 0, true);
    assert_eq!(f.add_seals(SEAL_WRITE), Err(Errno::EBUSY));
    mm.munmap(a, 16 * K).unwrap();
    f.add_seals(SEAL_WRITE | SEAL_SEAL).unwrap();
    assert_eq!(f.add_seals(SEAL_GROW), Err(Errno::EPERM));
    assert_eq!(f.seals(), SEAL_GROW | SEAL_WRITE | SEAL_SEAL);
    assert_clean(&m);
}

#[test]
fn madvise_hugepage_of_shmem_under_advise_gives_no_khugepaged_slot() {
    // khugepaged_enter_vma() judges a shmem VMA by the flags it has before
    // MADV_HUGEPAGE sets VM_HUGEPAGE (shmem_allowable_huge_orders reads
    // vma->vm_flags); an anonymous VMA by the new flags, once it has an
    // anon_vma.
    use foliomm::internals::folio::thp::{ShmemHuge, ThpMode};
    use std::sync::atomic::Ordering::Relaxed;
    let m = machine();
    m.kernel.thp.set_enabled(ThpMode::Madvise).unwrap();
    m.kernel.thp.set_shmem_enabled(ShmemHuge::Advise);
    let f = m.memfd_create(4 * M).unwrap();
    let p = m.new_mm().unwrap();
    let a = map(&p, &f, 4 * M, 0, true);
    p.madvise(a, 4 * M, Advice::HugePage).unwrap();
    assert!(!p.khugepaged.load(Relaxed), "shmem MADV_HUGEPAGE under advise");
    let anon = p.mmap(0, 4 * M, Prot::RW, MmapFlags::default()).unwrap();
    p.madvise(anon, 4 * M, Advice::HugePage).unwrap();
    assert!(!p.khugepaged.load(Relaxed), "an anonymous VMA without an anon_vma");
    let touched = p.mmap(0, 4 * M, Prot::RW, MmapFlags::default()).unwrap();
    m.new_cpu().write(&p, touched, b"x").unwrap();
    assert!(!p.khugepaged.load(Relaxed), "a small-page fault gives no slot");
    p.madvise(touched, 4 * M, Advice::HugePage).unwrap();
    assert!(p.khugepaged.load(Relaxed), "an anonymous VMA with an anon_vma");
    assert_clean(&m);
}

/// Seed 002's lock order in a hugetlbfs hole punch: while a fault holds a
/// shared VMA's hugetlb lock, the range's unmap skips that VMA and the
/// page's removal backs out of `i_mmap_rwsem` to wait for the lock
/// (`hugetlb_unmap_file_folio`); once the fault lets go, the page leaves
/// the mapping and the file, and reads zero.
#[test]
fn a_hole_punch_waits_for_a_fault_holding_the_vma_lock() {
    let m = machine();
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 2), 2);
    let f = m.hugetlbfs_create(4 * M, HugeSize::Pmd).unwrap();
    let mm = m.new_mm().unwrap();
    let flags = MmapFlags { shared: true, hugetlb: Some(HugeSize::Pmd), ..MmapFlags::default() };
    let a = mm.mmap_file(0, 4 * M, Prot::RW, flags, Some((&f, 0))).unwrap();
    m.new_cpu().write(&mm, a, b"held").unwrap();
    let vma = mm.published_vmas().into_iter().find(|v| v.start() == a).unwrap();
    let vma_lock = vma.hugetlb_vma_lock().expect("a shared hugetlb VMA has a lock");
    let fault = vma_lock.read().unwrap();
    let punch = {
        let (m, f) = (m.clone(), f.clone());
        std::thread::spawn(move || m.punch_hole(&f, 0, 2 * M))
    };
    // The punch cannot finish while the fault holds the lock.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!punch.is_finished(), "the hole punch went past a VMA whose lock a fault holds");
    assert!(mm.page_info(a).present, "the page stays mapped while the fault holds the lock");
    drop(fault);
    punch.join().unwrap().unwrap();
    let backed_out = m.stats.hugetlb_unmap_backed_out.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(backed_out, 1, "the removal backed out once to wait for the VMA's lock");
    assert!(!mm.page_info(a).present, "the page left the mapping");
    assert_eq!(byte(&m, &mm, a), 0, "the hole reads zero");
    assert_clean(&m);
}
