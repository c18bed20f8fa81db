//! HugeTLB Vmemmap Optimization (HVO) through the library: huge pages made
//! while `vm.hugetlb_optimize_vmemmap` is on share one descriptor for every
//! tail past their first 64, keep their bytes and counts, get their own
//! descriptors back before they leave the pool, and a write through the
//! shared descriptor is caught by the invariant checker.

use std::sync::Arc;

use foliomm::internals::folio::Folio;
use foliomm::internals::phys::KEPT_DESCRIPTORS;
use foliomm::{Config, HugeSize, Machine, Mm, MmapFlags, Prot};

const M: u64 = 1024 * 1024;

fn machine() -> Arc<Machine> {
    Machine::new(Config { memory: 64 * M, ..Config::default() }).unwrap()
}

fn violations(m: &Machine) -> Vec<String> {
    m.check().iter().map(ToString::to_string).collect()
}

/// A 2 MiB hugetlb mapping of `mm`, written with `byte`; its frame.
fn map_written(m: &Machine, mm: &Mm, shared: bool, byte: u8) -> (u64, u64) {
    let flags = MmapFlags { shared, hugetlb: Some(HugeSize::Pmd), ..MmapFlags::default() };
    let a = mm.mmap(0, 2 * M, Prot::RW, flags).unwrap();
    m.new_cpu().write(mm, a, &vec![byte; 2 * M as usize]).unwrap();
    (a, mm.page_info(a).pfn)
}

#[test]
fn an_optimized_page_shares_its_tails_descriptor_and_gets_its_own_back() {
    let m = machine();
    m.kernel.set_hugetlb_optimize_vmemmap(true);
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 2), 2);
    let (p, q) = (m.new_mm().unwrap(), m.new_mm().unwrap());
    let (a, pfn) = map_written(&m, &p, true, 0x5a);
    let phys = &m.kernel.phys;
    assert!(phys.vmemmap_optimized(pfn));
    let (late, later) = (phys.page(pfn + KEPT_DESCRIPTORS + 5), phys.page(pfn + 511));
    assert!(std::ptr::eq(late, later), "tails past the kept page share one descriptor");
    let (kept, next) = (phys.page(pfn + 10), phys.page(pfn + 11));
    assert!(!std::ptr::eq(kept, next), "the first 64 descriptors are the folio's own");
    assert_eq!(Folio::containing(phys, pfn + 300).pfn, pfn, "a shared tail still names its head");
    // Another process maps the same file pages through fork, and reads the bytes.
    let c = p.fork().unwrap();
    let mut buf = vec![0u8; 2 * M as usize];
    m.new_cpu().read(&c, a, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0x5a), "the child reads every byte the parent wrote");
    assert!(violations(&m).is_empty(), "{:?}", violations(&m));
    // A page made after the switch is turned off is not optimized (the
    // pool hands out the page it got last).
    m.kernel.set_hugetlb_optimize_vmemmap(false);
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 3), 3);
    let (_, private) = map_written(&m, &q, false, 0x33);
    assert!(!phys.vmemmap_optimized(private));
    drop((c, p, q));
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 0), 0);
    assert!(!phys.vmemmap_optimized(pfn), "a page leaving the pool gets its memmap back");
    let (late, later) = (phys.page(pfn + KEPT_DESCRIPTORS + 5), phys.page(pfn + 511));
    assert!(!std::ptr::eq(late, later));
    assert!(violations(&m).is_empty(), "{:?}", violations(&m));
}

#[test]
fn a_write_through_the_shared_tail_descriptor_is_a_violation() {
    let m = machine();
    m.kernel.set_hugetlb_optimize_vmemmap(true);
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 1), 1);
    let p = m.new_mm().unwrap();
    let (_, pfn) = map_written(&m, &p, false, 0x11);
    assert!(violations(&m).is_empty(), "{:?}", violations(&m));
    // What Linux would fault on: a store to a tail past the kept page.
    let tail = m.kernel.phys.page(pfn + 200);
    tail.refcount.store(1, std::sync::atomic::Ordering::Relaxed);
    let bad = violations(&m);
    assert!(bad.iter().any(|v| v.contains("optimized memmap")), "{bad:?}");
    tail.refcount.store(0, std::sync::atomic::Ordering::Relaxed);
    assert!(violations(&m).is_empty(), "{:?}", violations(&m));
}
