//! GUP pins (FOLL_PIN) as cow.c exercises them: a pin must keep seeing the
//! pinning process's page, never another process's writes, across fork and
//! COW. Every test checks bytes through the pin and runs the checker.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Cpu, Machine, Mm, MmapFlags, Prot};

fn machine() -> Arc<Machine> {
    Machine::new(Config { memory: 64 << 20, ..Config::default() }).unwrap()
}

fn clean(m: &Machine) {
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// A parent that wrote 0x11 to a page, and its child sharing it.
fn shared_page() -> (Arc<Machine>, Cpu, Arc<Mm>, Arc<Mm>, u64) {
    let m = machine();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 4096, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write(&p, a, &[0x11]).unwrap();
    let c = p.fork().unwrap();
    (m, cpu, p, c, a)
}

fn through_pin(m: &Machine, pin: &foliomm::internals::mm::gup::Pin, page: usize) -> u8 {
    m.phys.read_byte(pin.frames[page].expect("a pinned frame"), 0)
}

#[test]
fn fork_copies_a_pinned_exclusive_page_for_the_child() {
    let m = machine();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 4096, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write(&p, a, &[1]).unwrap();
    let pin = p.pin_user_pages(a, 4096, true, true).unwrap();
    clean(&m);
    let c = p.fork().unwrap();
    assert_eq!(m.stats.fork_copy_pinned.load(Relaxed), 1);
    assert_ne!(c.page_info(a).pfn, p.page_info(a).pfn, "the child got its own copy at fork");
    assert!(p.page_info(a).writable, "the parent's PTE stays writable");
    cpu.write(&c, a, &[2]).unwrap();
    cpu.write(&p, a, &[3]).unwrap();
    assert_eq!(through_pin(&m, &pin, 0), 3, "the pin sees the parent's page");
    clean(&m);
    m.unpin_user_pages(pin);
    clean(&m);
}

#[test]
fn a_read_only_pin_in_the_child_never_sees_the_parents_later_write() {
    // The CVE-2020-29374 shape: the child pins R/O a page it shares with
    // the parent, unmaps it, and the parent writes.
    let (m, mut cpu, p, c, a) = shared_page();
    let pin = c.pin_user_pages(a, 4096, false, false).unwrap();
    assert_ne!(c.page_info(a).pfn, p.page_info(a).pfn, "the R/O pin unshared the page first");
    assert!(!c.page_info(a).writable, "unsharing leaves the PTE read-only");
    c.munmap(a, 4096).unwrap();
    cpu.write(&p, a, &[0x42]).unwrap();
    assert_eq!(through_pin(&m, &pin, 0), 0x11, "the pin must not see the parent's write");
    clean(&m);
    m.unpin_user_pages(pin);
    clean(&m);
}

#[test]
fn pinned_mthp_and_thp_are_copied_per_page_at_fork() {
    for (order, advice) in [(4u32, None), (9, Some(Advice::HugePage))] {
        let m = machine();
        let size = 4096u64 << order;
        if order == 4 {
            m.thp.set_order(4, ThpMode::Always).unwrap();
        }
        let mut cpu = m.new_cpu();
        let p = m.new_mm().unwrap();
        let a = p.mmap(0, 2 << 20, Prot::RW, MmapFlags::default()).unwrap();
        if let Some(adv) = advice {
            p.madvise(a, 2 << 20, adv).unwrap();
        }
        cpu.fill(&p, a, size, 7).unwrap();
        assert_eq!(p.page_info(a).folio_order, order);
        let pin = p.pin_user_pages(a, 4096, true, true).unwrap();
        let c = p.fork().unwrap();
        assert_eq!(
            m.stats.fork_copy_pinned.load(Relaxed),
            size / 4096,
            "order {order}: every exclusive page of a maybe-pinned folio is copied"
        );
        assert_eq!(c.page_info(a).folio_order, 0);
        assert!(!p.page_info(a).pmd_mapped, "a pinned THP's PMD is split in the parent");
        cpu.write(&p, a, &[9]).unwrap();
        let mut b = [0];
        cpu.read(&c, a, &mut b).unwrap();
        assert_eq!(b[0], 7, "order {order}: the child keeps its copy");
        assert_eq!(through_pin(&m, &pin, 0), 9);
        clean(&m);
        m.unpin_user_pages(pin);
        drop(c);
        clean(&m);
    }
}

#[test]
fn a_longterm_read_only_pin_of_the_zero_page_unshares_it() {
    let m = machine();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 4096, Prot::RW, MmapFlags::default()).unwrap();
    cpu.read(&p, a, &mut [0]).unwrap();
    assert!(p.page_info(a).zero_page);
    let short = p.pin_user_pages(a, 4096, false, false).unwrap();
    assert_eq!(short.frames, vec![None], "a short-term R/O pin takes the zero page as it is");
    m.unpin_user_pages(short);
    let long = p.pin_user_pages(a, 4096, false, true).unwrap();
    assert!(!p.page_info(a).zero_page, "longterm: a real page replaces the zero page");
    cpu.write(&p, a, &[5]).unwrap();
    assert_eq!(through_pin(&m, &long, 0), 5, "and the pin follows the process's writes");
    clean(&m);
    m.unpin_user_pages(long);
    clean(&m);
}

#[test]
fn pinning_outside_a_mapping_or_writing_read_only_memory_fails() {
    let m = machine();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 8192, Prot(Prot::READ), MmapFlags::default()).unwrap();
    assert_eq!(p.pin_user_pages(a, 4096, true, false).unwrap_err(), foliomm::Errno::EFAULT);
    assert_eq!(p.pin_user_pages(0x1000, 4096, false, false).unwrap_err(), foliomm::Errno::EFAULT);
    clean(&m);
}

#[test]
fn a_foll_get_reference_makes_the_parent_copy_instead_of_unsharing() {
    // vmsplice() takes FOLL_GET references: nothing is unshared, but the
    // extra reference makes the parent's later write copy (refcount > 1), so
    // the reference still holds the old bytes.
    let (m, mut cpu, p, c, a) = shared_page();
    let got = c.get_user_pages(a, 4096).unwrap();
    assert_eq!(c.page_info(a).pfn, p.page_info(a).pfn, "FOLL_GET does not unshare");
    assert!(!c.has_pinned.load(Relaxed), "FOLL_GET does not mark the MM");
    c.munmap(a, 4096).unwrap();
    let before = p.page_info(a).pfn;
    cpu.write(&p, a, &[0x42]).unwrap();
    assert_ne!(p.page_info(a).pfn, before, "the parent copies: the extra reference forbids reuse");
    assert_eq!(through_pin(&m, &got, 0), 0x11);
    clean(&m);
    m.unpin_user_pages(got);
    clean(&m);
}
