//! Addresses, lengths, offsets and sizes near 2^64 at every library entry
//! point: an errno, never a panic or a wrapped sum, in debug builds
//! (overflow checks on) and release builds alike; and the machine is left
//! consistent.

use foliomm::internals::arch::TASK_SIZE;
use foliomm::internals::machine::HugeSize;
use foliomm::internals::mm::Advice;
use foliomm::internals::shmem::MAX_FILE_SIZE;
use foliomm::{Config, Machine, MmapFlags, Prot};

const NEAR_END: [u64; 5] = [u64::MAX, u64::MAX - 4095, u64::MAX - (1 << 21) + 1, 1 << 63, TASK_SIZE];

#[test]
fn extreme_ranges_are_errors_at_every_entry_point() {
    let m = Machine::new(Config { memory: 16 << 20, ..Config::default() }).unwrap();
    let mut cpu = m.new_cpu();
    let mm = m.new_mm().unwrap();
    let a = mm.mmap(0, 64 << 10, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write(&mm, a, &[1]).unwrap();
    let fixed = MmapFlags { fixed: true, ..MmapFlags::default() };
    let huge = MmapFlags { hugetlb: Some(HugeSize::Pmd), ..fixed };
    let memfd = m.memfd_create(64 << 10).unwrap();
    for x in NEAR_END {
        // Every range ends past the address space, most past 2^64.
        for (addr, len) in [(x, 4096), (a, x), (x, x)] {
            let what = format!("addr {addr:#x}, len {len:#x}");
            assert!(addr.checked_add(len).is_none_or(|end| end > TASK_SIZE), "{what}");
            assert!(mm.mmap(addr, len, Prot::RW, fixed).is_err(), "mmap fixed {what}");
            assert!(mm.mmap(addr, len, Prot::RW, huge).is_err(), "mmap hugetlb {what}");
            assert!(mm.munmap(addr, len).is_err(), "munmap {what}");
            assert!(mm.mprotect(addr, len, Prot::RW).is_err(), "mprotect {what}");
            for advice in [Advice::DontNeed, Advice::HugePage, Advice::Remove] {
                assert!(mm.madvise(addr, len, advice).is_err(), "madvise {advice:?} {what}");
            }
            assert!(mm.mremap(addr, len, 4096, true, None).is_err(), "mremap from {what}");
            assert!(len == 4096 || mm.mremap(a, 4096, len, true, None).is_err(), "mremap to length {len:#x}");
            assert!(mm.mremap(a, 4096, len, true, Some(addr)).is_err(), "mremap fixed to {what}");
            assert!(mm.pin_user_pages(addr, len, true, true).is_err(), "pin {what}");
            assert!(mm.get_user_pages(addr, len).is_err(), "gup {what}");
            assert!(cpu.fill(&mm, addr, len, 2).is_err(), "fill {what}");
            assert!(cpu.write_byte_per_page(&mm, addr, len, 2).is_err(), "write per page {what}");
            assert!(cpu.read_byte_per_page(&mm, addr, len).is_err(), "read per page {what}");
            // File offsets: an error where the end passes the largest file.
            let past_file = addr.checked_add(len).is_none_or(|end| end > MAX_FILE_SIZE);
            assert!(!past_file || m.punch_hole(&memfd, addr, len).is_err(), "punch {what}");
            assert!(!past_file || memfd.fallocate(addr, len, true).is_err(), "fallocate {what}");
        }
        assert!(cpu.write(&mm, x, &[2; 8]).is_err(), "write at {x:#x}");
        assert!(cpu.read(&mm, x, &mut [0; 8]).is_err(), "read at {x:#x}");
        assert!(x < MAX_FILE_SIZE || memfd.write(x, &[3; 8]).is_err(), "pwrite at {x:#x}");
        assert_eq!(memfd.read(x, &mut [0; 8]), Ok(0), "pread at {x:#x}");
        assert!(x < MAX_FILE_SIZE || m.ftruncate(&memfd, x).is_err(), "ftruncate to {x:#x}");
        assert!(x < MAX_FILE_SIZE || m.memfd_create(x).is_err(), "memfd_create of {x:#x}");
        assert!(m.hugetlbfs_create(x, HugeSize::Pmd).is_err(), "hugetlbfs_create of {x:#x}");
    }
    let mut b = [0];
    cpu.read(&mm, a, &mut b).unwrap();
    assert_eq!(b, [2], "writes from `a` over the end of its mapping wrote its pages first, as a CPU does");
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
