use super::*;
use crate::sync::cacheline::{self, Aligned, Structure::*};
use crate::sync::Mutex as FacadeMutex;

/// Every CPU increments one shared counter `n` times, under a facade lock:
/// the line and the lock ping-pong between the CPUs.
fn counter_workload(cpus: usize, seed: u64) -> (u64, Vec<CpuReport>) {
    let counter = Aligned(FacadeMutex::new(0u64));
    let (_, reports) = run(cpus, Profile::two_socket_server(), seed, 0, |_| {
        for _ in 0..50 {
            let mut g = counter.lock().unwrap();
            cacheline::write(Folio, &*g);
            *g += 1;
            drop(g);
            work(Work::Syscall);
        }
    });
    let total = *counter.0.lock().unwrap();
    (total, reports)
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let (total, a) = counter_workload(8, 7);
    assert_eq!(total, 400);
    let (_, b) = counter_workload(8, 7);
    assert_eq!(a, b, "two runs with one seed");
    assert!(a.iter().map(|r| r.transfers.of(Folio)).sum::<u64>() > 0, "the line moved between CPUs");
}

#[test]
fn clocks_advance_by_the_profile_and_cpus_take_turns() {
    let p = Profile::two_socket_server();
    let (_, reports) = run(2, p.clone(), 1, 0, |_| {
        for _ in 0..10 {
            work(Work::Fault);
        }
    });
    for r in &reports {
        assert_eq!(r.clock, 10 * p.fault, "private work only");
    }
}

#[test]
fn a_cpu_waiting_for_a_lock_waits_in_simulated_time() {
    let lock = FacadeMutex::new(());
    let p = Profile::two_socket_server();
    let (_, reports) = run(2, p.clone(), 3, 0, |cpu| {
        if cpu == 0 {
            let _g = lock.lock().unwrap();
            for _ in 0..20 {
                work(Work::Fault);
            }
        } else {
            // Let CPU 0 take the lock first.
            work(Work::Syscall);
            let _g = lock.lock().unwrap();
        }
    });
    assert!(reports[1].waited > 0, "CPU 1 spun while CPU 0 held the lock");
    assert!(reports[1].clock >= 20 * p.fault, "CPU 1 got the lock only after CPU 0 let it go");
}

#[test]
fn spinning_waiters_take_a_spinlock_in_arrival_order_whatever_the_seed() {
    for seed in 1..6 {
        let order = FacadeMutex::new(Vec::new());
        let (_, reports) = run(4, Profile::two_socket_server(), seed, 0, |cpu| {
            // CPU 0 takes the lock first; CPUs 3, 2, 1 queue in that order.
            (0..[0, 3, 2, 1][cpu]).for_each(|_| work(Work::Syscall));
            let mut g = order.lock().unwrap();
            g.push(cpu);
            (0..20).for_each(|_| work(Work::Fault));
        });
        assert_eq!(*order.lock().unwrap(), [0, 3, 2, 1], "seed {seed}");
        assert!(reports[1].waited > reports[2].waited, "the last to queue waited longest (seed {seed})");
    }
}

#[test]
fn a_panicking_cpu_fails_the_run_and_the_others_finish() {
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(3, Profile::two_socket_server(), 1, 0, |cpu| {
            work(Work::Fault);
            assert_ne!(cpu, 1, "CPU 1 fails");
            work(Work::Fault);
            finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
    }));
    assert!(run.is_err(), "the run reports the panic");
    assert_eq!(finished.into_inner(), 2, "the other CPUs ran to their end");
}

#[test]
fn a_sleeping_waiter_resumes_a_wake_up_after_the_release_and_is_charged_to_its_structure() {
    let lock = Aligned(crate::sync::RwLock::new(()));
    let p = Profile::two_socket_server();
    let (_, reports) = run(2, p.clone(), 5, 0, |cpu| {
        if cpu == 0 {
            cacheline::write(MmapLock, &lock.0);
            let _g = lock.0.write().unwrap();
            for _ in 0..20 {
                work(Work::Fault);
            }
        } else {
            work(Work::Syscall);
            cacheline::write(MmapLock, &lock.0);
            let _g = lock.0.read().unwrap();
        }
    });
    let r = &reports[1];
    assert_eq!(r.waited, r.transfers.waited_of(MmapLock), "the lock's line names its structure");
    assert!(r.clock >= reports[0].clock + p.wakeup, "woken after the release, a wake-up later");
    assert!(r.clock < reports[0].clock + p.wakeup + p.fault, "and no later");
}

#[test]
fn a_waiting_writer_blocks_new_readers() {
    let lock = crate::sync::RwLock::new(Vec::new());
    let order = FacadeMutex::new(Vec::new());
    // CPU 0 reads long; CPU 1 then comes to write, spins past the
    // readers' threshold and queues; CPU 2 comes to read after that and
    // must wait for the writer although only readers hold it.
    run(3, Profile::two_socket_server(), 9, 0, |cpu| {
        (0..[0, 8, 24][cpu]).for_each(|_| work(Work::Fault));
        match cpu {
            0 => {
                let _g = lock.read().unwrap();
                (0..30).for_each(|_| work(Work::Fault));
            }
            1 => lock.write().unwrap().push(1),
            _ => {
                assert!(lock.try_read().is_err(), "a trylock fails while a writer waits");
                let seen = lock.read().unwrap().clone();
                order.lock().unwrap().push(seen);
            }
        }
    });
    assert_eq!(*order.lock().unwrap(), [vec![1]], "the reader came after the writer");
}

#[test]
fn every_cpu_asleep_is_a_deadlock_that_fails_the_run() {
    let (a, b) = (crate::sync::RwLock::new(()), crate::sync::RwLock::new(()));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(2, Profile::two_socket_server(), 1, 0, |cpu| {
            let (first, second) = if cpu == 0 { (&a, &b) } else { (&b, &a) };
            let _g = first.write().unwrap();
            // A guard whose release is an accounted access, dropped while
            // the failing CPU unwinds.
            let word = crate::sync::atomic::AtomicU64::new(0);
            let _bit = crate::sync::BitSpinLock::lock(Folio, &word, 0);
            work(Work::Syscall);
            let _h = second.write().unwrap();
        })
    }));
    assert!(run.is_err(), "an ABBA deadlock is reported, not hung");
}

#[test]
fn a_writer_that_panics_wakes_its_waiter_with_the_poison() {
    let lock = crate::sync::RwLock::new(());
    let poisoned = std::sync::atomic::AtomicBool::new(false);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(2, Profile::two_socket_server(), 1, 0, |cpu| {
            if cpu == 0 {
                let _g = lock.write().unwrap();
                work(Work::Syscall);
                work(Work::Syscall);
                panic!("CPU 0 fails holding the lock");
            }
            work(Work::Syscall);
            poisoned.store(lock.read().is_err(), std::sync::atomic::Ordering::Relaxed);
        })
    }));
    assert!(run.is_err(), "the run reports CPU 0's panic");
    assert!(poisoned.into_inner(), "CPU 1 was woken and got the poison, as outside a simulation");
}

#[test]
fn readers_that_steal_the_lock_delay_a_woken_writer_only_until_its_handoff() {
    let lock = crate::sync::RwLock::new(0u32);
    // Three readers hold the lock in overlapping turns for 10 ms; the
    // writer queues behind them at once. Each time it is woken, a reader
    // may steal the free lock first (as Linux's may); once it has waited
    // RWSEM_WAIT_TIMEOUT it has the handoff, and gets the lock then, not
    // when the readers are done.
    let (done, _) = run(4, Profile::two_socket_server(), 3, 0, |cpu| {
        if cpu == 0 {
            work(Work::Syscall);
            *lock.write().unwrap() += 1;
            return now();
        }
        for i in 0..6000 {
            let g = lock.read().unwrap();
            (0..cpu).for_each(|_| work(Work::Syscall));
            drop(g);
            if i % 2 == 0 {
                work(Work::Syscall);
            }
        }
        now()
    });
    let (writer, readers) = (done[0] as f64 / 1e6, done[1..].iter().max().copied().unwrap_or(0) as f64 / 1e6);
    let handoff = wait::HANDOFF_AFTER as f64 / 1e6;
    assert!(readers > 2.0 * handoff, "the readers ran {readers:.1} µs");
    assert!(writer < handoff + 100.0, "the writer got the lock {writer:.1} µs in, not by its handoff");
}

#[test]
fn a_writer_that_waited_past_the_timeout_has_the_handoff() {
    let lock = crate::sync::RwLock::new(());
    let order = FacadeMutex::new(Vec::new());
    // CPU 0 reads for 5 ms; CPU 1 queues to write at once; CPU 2 comes to
    // read 0.5 µs after CPU 0 let go, while CPU 1 is being woken: the lock
    // is free, but CPU 1 has waited past RWSEM_WAIT_TIMEOUT, so CPU 2 may
    // not steal it.
    run(3, Profile::two_socket_server(), 5, 0, |cpu| match cpu {
        0 => {
            let _g = lock.read().unwrap();
            (0..5000).for_each(|_| work(Work::Fault));
        }
        1 => {
            work(Work::Syscall);
            let _g = lock.write().unwrap();
            order.lock().unwrap().push("writer");
        }
        _ => {
            (0..10_001).for_each(|_| work(Work::Syscall));
            let _g = lock.read().unwrap();
            order.lock().unwrap().push("reader");
        }
    });
    assert_eq!(*order.lock().unwrap(), ["writer", "reader"]);
}

/// CPU 0 holds `lock` (to write if `write`) for `faults` faults while CPU
/// 1 comes to write; returns when CPU 0 let go and when CPU 1 had it.
fn writer_after_holder(write: bool, faults: usize) -> (u64, u64) {
    let lock = crate::sync::RwLock::new(());
    let (times, _) = run(2, Profile::two_socket_server(), 4, 0, |cpu| {
        if cpu == 0 {
            let g = if write { Ok(lock.write().unwrap()) } else { Err(lock.read().unwrap()) };
            (0..faults).for_each(|_| work(Work::Fault));
            drop(g);
            return now();
        }
        work(Work::Syscall);
        drop(lock.write().unwrap());
        now()
    });
    (times[0], times[1])
}

#[test]
fn a_writer_spins_on_a_running_writer_and_takes_the_lock_without_a_wake_up() {
    let p = Profile::two_socket_server();
    let (released, taken) = writer_after_holder(true, 20);
    assert!(taken >= released && taken <= released + p.spin, "a spin round after the release, not a wake-up");
}

#[test]
fn a_writer_spins_on_readers_only_up_to_the_threshold() {
    let p = Profile::two_socket_server();
    // One reader: 10.5 µs of spinning at most.
    let (released, taken) = writer_after_holder(false, 5);
    assert!(taken <= released + p.spin, "5 µs of readers: still spinning at the release");
    let (released, taken) = writer_after_holder(false, 20);
    assert!(taken >= released + p.wakeup, "20 µs of readers: asleep by then, woken");
}

#[test]
fn readers_past_the_threshold_stop_later_writers_spinning_and_a_writer_sleeping_stops_its_spinners() {
    let p = Profile::two_socket_server();
    let (a, b) = (crate::sync::RwLock::new(()), crate::sync::RwLock::new(()));
    // CPU 0 reads `a` for 40 µs: CPU 1's spin on it times out and marks
    // it non-spinnable, so CPU 2, coming later, sleeps at once. CPU 3
    // holds `b` to write and then sleeps on `a`; CPU 4 spins on `b` until
    // CPU 3 sleeps, then sleeps too.
    let (times, reports) = run(5, p.clone(), 2, 0, |cpu| match cpu {
        0 => {
            let g = a.read().unwrap();
            (0..40).for_each(|_| work(Work::Fault));
            drop(g);
            now()
        }
        1 | 2 => {
            (0..cpu * 15).for_each(|_| work(Work::Fault));
            drop(a.write().unwrap());
            now()
        }
        3 => {
            let g = b.write().unwrap();
            (0..20).for_each(|_| work(Work::Fault));
            drop(a.write().unwrap());
            drop(g);
            now()
        }
        _ => {
            (0..10).for_each(|_| work(Work::Fault));
            drop(b.write().unwrap());
            now()
        }
    });
    assert!(times[1] >= times[0] + p.wakeup, "CPU 1 slept after its spin");
    assert!(reports[2].waited > 10 * p.fault, "CPU 2 waited for the readers");
    assert!(times[4] >= times[3] + p.wakeup, "CPU 4 stopped spinning when CPU 3 slept, and was woken");
}

/// CPU 0 holds a `struct mutex` for 20 faults, after waiting (if
/// `owner_sleeps`, from its second fault) to write a rwsem CPU 2 reads for
/// 30 faults, past its spin threshold, so that it sleeps holding the
/// mutex; CPU 1 comes for
/// the mutex after `arrive` faults. Returns when CPU 0 let go of the mutex
/// and when CPU 1 had it.
#[cfg(not(any(loom, shuttle)))] // the facade's mutex is loom's or shuttle's there
fn mutex_waiter(owner_sleeps: bool, arrive: usize) -> (u64, u64) {
    let (m, a) = (crate::sync::Mutex::new_mutex(()), crate::sync::RwLock::new(()));
    let (times, _) = run(3, Profile::two_socket_server(), 4, 0, |cpu| match cpu {
        0 => {
            let g = m.lock().unwrap();
            if owner_sleeps {
                (0..2).for_each(|_| work(Work::Fault));
                drop(a.write().unwrap());
            }
            (0..20).for_each(|_| work(Work::Fault));
            drop(g);
            now()
        }
        1 => {
            (0..arrive).for_each(|_| work(Work::Fault));
            drop(m.lock().unwrap());
            now()
        }
        _ => {
            let g = a.read().unwrap();
            (0..30).for_each(|_| work(Work::Fault));
            drop(g);
            now()
        }
    });
    (times[0], times[1])
}

#[test]
#[cfg(not(any(loom, shuttle)))]
fn a_mutex_waiter_spins_while_the_owner_runs_and_sleeps_once_it_sleeps() {
    let p = Profile::two_socket_server();
    let (released, taken) = mutex_waiter(false, 5);
    assert!(taken >= released && taken <= released + p.spin, "spinning: a spin round after the release");
    // CPU 0 sleeps at about 12.5 µs: CPU 1 spins first, or finds it asleep.
    for arrive in [5, 15] {
        let (released, taken) = mutex_waiter(true, arrive);
        assert!(taken >= released + p.wakeup, "the owner slept on the rwsem: woken after the release ({arrive})");
    }
}

#[test]
#[cfg(not(any(loom, shuttle)))] // loom's and shuttle's rwsems cannot downgrade
fn a_downgrade_lets_the_queued_reader_in_and_keeps_the_writer_out() {
    let lock = crate::sync::RwLock::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    let seen = FacadeMutex::new(Vec::new());
    // CPU 0 writes, then downgrades and reads on; CPU 1 queued to read
    // meanwhile and gets in beside it; CPU 2's write waits for them both.
    run(3, Profile::two_socket_server(), 3, 0, |cpu| {
        (0..[0, 2, 4][cpu]).for_each(|_| work(Work::Fault));
        match cpu {
            0 => {
                let mut g = lock.write().unwrap();
                *g = 1;
                (0..10).for_each(|_| work(Work::Fault));
                let g = g.downgrade();
                (0..20).for_each(|_| work(Work::Fault));
                assert_eq!(*g, 1);
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            1 => {
                let g = lock.read().unwrap();
                seen.lock().unwrap().push((1, *g, done.load(std::sync::atomic::Ordering::Relaxed)));
            }
            _ => {
                let mut g = lock.write().unwrap();
                *g = 2;
                seen.lock().unwrap().push((2, 2, done.load(std::sync::atomic::Ordering::Relaxed)));
            }
        }
    });
    assert_eq!(*seen.lock().unwrap(), [(1, 1, false), (2, 2, true)], "(CPU, value, the downgraded hold over)");
}
