//! `vm.max_map_count` as Linux 6.18 enforces it: `do_mmap` refuses once the
//! count is past the limit; `split_vma` (mprotect, madvise) refuses at it;
//! `munmap` refuses only a split in three; `mremap` keeps a margin of 3.
//! Every refusal is ENOMEM and changes nothing: VMAs and bytes stay.

use std::sync::Arc;

use foliomm::internals::mm::Advice;
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags, Prot};

const P: u64 = 4096;
const LIMIT: usize = 8;

fn setup() -> (Arc<Machine>, Cpu, Arc<Mm>) {
    let m = Machine::new(Config { memory: 16 << 20, max_map_count: LIMIT, ..Config::default() }).unwrap();
    let cpu = m.new_cpu();
    let mm = m.new_mm().unwrap();
    (m, cpu, mm)
}

/// Maps `n` one-page VMAs that cannot merge (alternating protections);
/// returns the address of a 16-page read-write VMA mapped first, with a
/// byte written to each of its pages.
fn fill_to(mm: &Mm, cpu: &mut Cpu, n: usize) -> u64 {
    let big = mm.mmap(0, 16 * P, Prot::RW, MmapFlags::default()).unwrap();
    for i in 0..16 {
        cpu.write(mm, big + i * P, &[i as u8 + 1]).unwrap();
    }
    for i in 1..n {
        let prot = if i % 2 == 0 { Prot::RW } else { Prot(Prot::READ) };
        mm.mmap(0, P, prot, MmapFlags::default()).unwrap();
    }
    assert_eq!(mm.vmas().len(), n, "the one-page VMAs did not merge");
    big
}

fn assert_intact(m: &Machine, cpu: &mut Cpu, mm: &Mm, big: u64, vmas: usize) {
    assert_eq!(mm.vmas().len(), vmas);
    for i in 0..16 {
        let mut b = [0];
        cpu.read(mm, big + i * P, &mut b).unwrap();
        assert_eq!(b[0], i as u8 + 1, "page {i}");
    }
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn mmap_fails_once_the_count_is_past_the_limit() {
    let (m, mut cpu, mm) = setup();
    let big = fill_to(&mm, &mut cpu, LIMIT);
    // `map_count > max`: at the limit one more mapping is still allowed.
    mm.mmap(0, P, Prot::NONE, MmapFlags::default()).unwrap();
    assert_eq!(mm.mmap(0, P, Prot::RW, MmapFlags::default()), Err(Errno::ENOMEM));
    assert_intact(&m, &mut cpu, &mm, big, LIMIT + 1);
}

#[test]
fn a_split_at_the_limit_fails_and_changes_nothing() {
    let (m, mut cpu, mm) = setup();
    let big = fill_to(&mm, &mut cpu, LIMIT);
    let ro = Prot(Prot::READ);
    assert_eq!(mm.mprotect(big + 4 * P, P, ro), Err(Errno::ENOMEM));
    assert_eq!(mm.madvise(big + 4 * P, P, Advice::NoHugePage), Err(Errno::ENOMEM));
    assert_eq!(mm.munmap(big + 4 * P, P), Err(Errno::ENOMEM), "a split in three");
    assert_intact(&m, &mut cpu, &mm, big, LIMIT);
    // What needs no split works: the same protection again, a whole VMA,
    // and an unmap at an edge (split in two, then one VMA fewer).
    mm.mprotect(big + 4 * P, P, Prot::RW).unwrap();
    mm.mprotect(big, 16 * P, Prot::RW).unwrap();
    mm.munmap(big + 15 * P, P).unwrap();
    assert_eq!(mm.vmas().len(), LIMIT);
}

#[test]
fn a_split_in_three_below_the_limit_keeps_the_first_split_when_the_second_fails() {
    let (m, mut cpu, mm) = setup();
    let big = fill_to(&mm, &mut cpu, LIMIT - 1);
    // vma_modify: the split at the start takes the last slot, the split
    // at the end fails; Linux keeps the first.
    assert_eq!(mm.mprotect(big + 4 * P, P, Prot(Prot::READ)), Err(Errno::ENOMEM));
    assert_intact(&m, &mut cpu, &mm, big, LIMIT);
}

#[test]
fn mremap_keeps_a_margin_of_three() {
    let (m, mut cpu, mm) = setup();
    let big = fill_to(&mm, &mut cpu, LIMIT - 4);
    // A guard page above, so that growing has to move.
    let guard = MmapFlags { fixed: true, ..MmapFlags::default() };
    mm.mmap(big + 16 * P, P, Prot::NONE, guard).unwrap();
    assert_eq!(mm.mremap(big, 16 * P, 64 * P, true, None), Err(Errno::ENOMEM));
    assert_eq!(mm.mremap(big, 16 * P, 16 * P, true, Some(0x1000_0000)), Err(Errno::ENOMEM));
    assert_intact(&m, &mut cpu, &mm, big, LIMIT - 3);
    mm.munmap(mm.vmas().first().unwrap().start(), P).unwrap();
    let moved = mm.mremap(big, 16 * P, 64 * P, true, None).unwrap();
    assert_ne!(moved, big);
    assert_intact(&m, &mut cpu, &mm, moved, LIMIT - 4);
}
