//! [`Op::Concurrent`]: two threads write while a third changes the
//! mappings next to theirs.

use super::*;

/// What the third thread of [`Op::Concurrent`] does to its range.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change {
    Munmap,
    Mprotect(u32),
    DontNeed,
    Mmap(u32),
    /// `move_pages` of the range to node 1 (`MPOL_MF_MOVE_ALL`).
    MovePages,
}

pub(crate) fn concurrent_op(proc: impl Strategy<Value = usize>) -> impl Strategy<Value = Op> {
    let change = prop_oneof![
        Just(Change::Munmap),
        prop_oneof![Just(0u32), Just(1), Just(3)].prop_map(Change::Mprotect),
        Just(Change::DontNeed),
        prop_oneof![Just(1u32), Just(3)].prop_map(Change::Mmap),
        Just(Change::MovePages),
    ];
    (proc, 0..WINDOW_PAGES, [1..600u64, 1..600u64, 1..600u64], any::<[u8; 2]>(), change).prop_map(
        |(proc, page, [a, b, c], vals, change)| {
            let room = WINDOW_PAGES - page;
            let a = a.min(room);
            let b = b.min(room - a);
            Op::Concurrent { proc, page, lens: [a, b, c.min(room - a - b)], vals, change }
        },
    )
}

/// [`Op::Concurrent`]: the two writers run on their own threads and CPUs
/// while this thread changes the third range; the reference takes the three
/// in any order, since the ranges are disjoint.
pub(crate) fn run_concurrent(
    cpus: &mut [Cpu; 2],
    mm: &Arc<Mm>,
    rs: &mut RefSpace,
    page: u64,
    lens: [u64; 3],
    vals: [u8; 2],
    change: Change,
) -> Result<(), TestCaseError> {
    let [a, b] = [addr(page), addr(page + lens[0])];
    let (c, c_len) = (addr(page + lens[0] + lens[1]), lens[2] * PAGE);
    let [cpu0, cpu1] = cpus;
    let (wa, wb, changed) = std::thread::scope(|s| {
        let wa = s.spawn(|| cpu0.write_byte_per_page(mm, a, lens[0] * PAGE, vals[0]));
        let wb = s.spawn(|| cpu1.write_byte_per_page(mm, b, lens[1] * PAGE, vals[1]));
        let changed = match change {
            _ if c_len == 0 => Ok(()),
            Change::Munmap => mm.munmap(c, c_len),
            Change::Mprotect(prot) => mm.mprotect(c, c_len, Prot(prot)),
            Change::DontNeed => mm.madvise(c, c_len, Advice::DontNeed),
            Change::Mmap(prot) => {
                mm.mmap(c, c_len, Prot(prot), MmapFlags { fixed: true, ..Default::default() }).map(|_| ())
            }
            Change::MovePages => {
                let pages: Vec<u64> = (c..c + c_len).step_by(PAGE as usize).collect();
                // A folio the writers hold for a moment may stay (EAGAIN
                // on every retry): only the bytes matter here.
                mm.move_pages(&pages, Some(&vec![1; pages.len()]), true).result.map(|_| ())
            }
        };
        (wa.join().unwrap(), wb.join().unwrap(), changed)
    });
    let covered = rs.covers(c, c_len);
    match change {
        _ if c_len == 0 => {}
        Change::Munmap => rs.unmap(c, c_len),
        Change::Mprotect(prot) if covered => rs.protect(c, c_len, Prot(prot)),
        Change::Mprotect(prot) => {
            prop_assert_eq!(changed, Err(Errno::ENOMEM), "mprotect over a hole");
            rs.protect_until_hole(c, c_len, Prot(prot));
        }
        Change::DontNeed => rs.zap(c, c_len),
        Change::Mmap(prot) => rs.map(c, c_len, Prot(prot)),
        Change::MovePages => {}
    }
    if matches!(change, Change::MovePages) {
        prop_assert!(matches!(changed, Ok(()) | Err(Errno::ENOMEM)), "move_pages: {:?}", changed);
    } else if !matches!(change, Change::Mprotect(_) | Change::DontNeed) || covered {
        prop_assert_eq!(changed, Ok(()), "{:?} of {:#x}+{:#x}", change, c, c_len);
    }
    same_outcome("thread 1's write", wa, rs.write_byte_per_page(a, lens[0] * PAGE, vals[0]))?;
    same_outcome("thread 2's write", wb, rs.write_byte_per_page(b, lens[1] * PAGE, vals[1]))?;
    Ok(())
}
