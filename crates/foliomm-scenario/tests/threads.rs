//! Threads behind the `Backend` seam on the model: two threads of one
//! process fault at once, each on its own CPU, in one address space.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mm_types::Prot;
use foliomm::internals::pgtable::{pte_lockptr, walk_pmd};
use foliomm_scenario::lang::Tunable;
use foliomm_scenario::op::{Access, MmapRequest};
use foliomm_scenario::ModelBackend;
use foliomm_scenario::{Backend, BackendResult, Op, Reply, Thread};

const MB: u64 = 1 << 20;

/// A started model with process `p`, THP off (every fault maps 4K), a
/// second thread, and a 4M mapping whose two 2M halves have their own PTE
/// tables.
fn two_threads() -> (ModelBackend, u64) {
    let b = ModelBackend::new();
    b.start(&[]).unwrap();
    b.tune(&Tunable::Thp { enabled: Some(ThpMode::Never), sizes: Vec::new() }).unwrap();
    b.perform(Thread::main("p"), Op::Spawn).unwrap();
    b.perform(Thread { proc: "p", tid: 1 }, Op::SpawnThread).unwrap();
    let req = MmapRequest { at: Some(0x4000_0000), fixed: true, ..MmapRequest::anon(4 * MB, Prot::RW) };
    let at = b.perform(Thread::main("p"), Op::Mmap(req)).and_then(Reply::value).unwrap();
    (b, at)
}

/// An access of thread `t`; a read returns the bytes.
fn access(b: &ModelBackend, t: Thread, addr: u64, len: u64, access: Access) -> BackendResult<Vec<u8>> {
    b.perform(t, Op::Access { addr, len, access }).and_then(Reply::bytes)
}

/// Thread 1 faults in the second half while thread 0's fault in the first
/// half is held at its page-table lock: calls of different threads are not
/// serialized anywhere in the backend, and both faults land.
#[test]
fn a_thread_faults_while_another_threads_fault_is_in_flight() {
    let (b, at) = two_threads();
    let (t0, t1) = (Thread::main("p"), Thread { proc: "p", tid: 1 });
    // Thread 0 faults in the first page, so that the first half's PTE table exists.
    access(&b, t0, at, 1, Access::Write { val: 1, every_byte: false }).unwrap();
    let m = b.machine().unwrap().clone();
    let mm = b.mm("p").unwrap();
    let table = walk_pmd(&m.phys, mm.pgd, at).unwrap().load(&m.phys).pfn();
    let ptl = pte_lockptr(&m.phys, table).lock();
    let frames = m.frames_in_use();
    let b = &b;
    std::thread::scope(|s| {
        let first = s.spawn(move || access(b, t0, at + 4096, 4096, Access::Write { val: 2, every_byte: true }));
        // do_anonymous_page allocates its folio before it takes the PTL:
        // one more frame in use means thread 0 is inside its fault.
        let deadline = Instant::now() + Duration::from_secs(30);
        while m.frames_in_use() == frames {
            assert!(Instant::now() < deadline, "thread 0 never reached its fault");
            std::thread::yield_now();
        }
        let (done, finished) = mpsc::channel();
        s.spawn(move || done.send(access(b, t1, at + 2 * MB, 2 * MB, Access::Write { val: 3, every_byte: true })));
        let second = finished.recv_timeout(Duration::from_secs(30));
        assert!(!first.is_finished(), "thread 0's fault finished although its PTL was held");
        drop(ptl);
        second.expect("thread 1's faults did not complete while thread 0's fault was in flight").unwrap();
        first.join().unwrap().unwrap();
    });
    // Both threads see both writes: one address space.
    assert_eq!(access(b, t1, at + 4096, 4096, Access::Read { every_byte: true }).unwrap(), vec![2; 4096]);
    assert_eq!(
        access(b, t0, at + 2 * MB, 2 * MB, Access::Read { every_byte: true }).unwrap(),
        vec![3; 2 * MB as usize]
    );
    assert_eq!(b.check(foliomm::internals::check::Scope::Base), Vec::new());
}

/// Many rounds of both threads faulting disjoint pages of one mapping at
/// once: every byte lands, the checker agrees, and each thread's accesses
/// fill its own TLB (a write by one thread is found by the other's walk).
#[test]
fn two_threads_fault_in_parallel_and_every_byte_lands() {
    let (b, at) = two_threads();
    let threads = [Thread::main("p"), Thread { proc: "p", tid: 1 }];
    for round in 0..8u8 {
        b.perform(threads[0], Op::Madvise { addr: at, len: 4 * MB, advice: foliomm::internals::mm::Advice::DontNeed })
            .unwrap();
        std::thread::scope(|s| {
            for (i, &t) in threads.iter().enumerate() {
                let b = &b;
                // Interleaved pages: both threads fault into the same PTE tables.
                s.spawn(move || {
                    for page in (i as u64..1024).step_by(2) {
                        let val = round.wrapping_mul(7) ^ page as u8;
                        access(b, t, at + page * 4096, 1, Access::Write { val, every_byte: false }).unwrap();
                    }
                });
            }
        });
        let got = access(&b, threads[1], at, 1024 * 4096, Access::Read { every_byte: false }).unwrap();
        let want: Vec<u8> = (0..1024u64).map(|page| round.wrapping_mul(7) ^ page as u8).collect();
        assert_eq!(got, want, "round {round}");
        assert_eq!(b.check(foliomm::internals::check::Scope::Base), Vec::new(), "round {round}");
    }
    b.perform(threads[1], Op::ExitThread).unwrap();
    assert!(access(&b, threads[1], at, 1, Access::Read { every_byte: false }).is_err(), "an exited thread cannot run");
}
