//! The workload language: one step per line.
//!
//! ```text
//! # comment                          blank lines and comments are ignored
//! set memory 64M                     model RAM, 4M to 1T (before the first process)
//! set mapcount mm-id                 mapcount design (before the first process)
//! set kernel 6.8                     the Linux release whose behaviour the model follows where releases
//!                                    differ (6.1 to 6.18; default: the design's; without set mapcount,
//!                                    also the design of its era)
//! set rmap_id_stage batch            seed 000's stage of the rmap-id designs: rmap-id, 123, batch,
//!                                    exclusive, nocmpxchg, all (the default; likewise)
//! set zap per-page                   zap strategy: batched or per-page (likewise)
//! set vma_lock vma-rwsem             how faults lock their VMA: mmap-lock, vma-rwsem, vma-refcount (likewise)
//! set tlb 0                          entries per CPU TLB, 0 for none (likewise)
//! set max_map_count 100              vm.max_map_count, default 65530 (likewise)
//! set swap 64M                       a swap device, as zram (none by default)
//! set nodes 2                        NUMA nodes, 1 to 8 (the memory cut in equal parts)
//! set debug no-large-reuse           a model debug switch (likewise)
//! set thp enabled=madvise 64K=always 2048K=inherit
//! set shmem enabled=always 64K=inherit   shmem_enabled and per-size shmem modes
//! set check on|off                   run the invariant checker after each step
//! P: a = mmap 4M rw [populate] [locked] [at 0x7f0000000000] [fixed] [align 64K]
//! P: f = memfd 64K                   a shmem file; later forks inherit it
//! P: s = mmap 64K rw shared file f [offset 16K]   shared or private file mapping
//! P: m = mmap 64K rw shared          shared anonymous memory
//! P: truncate f 32K                  ftruncate
//! P: close f                        this process's descriptor (mappings keep the file)
//! P: unlink f                       a named tmpfs file's name (it lives on while held)
//! P: s = shmget 4M [hugetlb[=1G]]    a System V segment (hugetlb: its pages reserved now)
//! P: a = shmat s [r]                 attach it (read-only with r); shmdt a; shmrm s (IPC_RMID)
//! P: seal f write grow               fcntl(F_ADD_SEALS): seal shrink grow write future_write
//! P: punch f[4K..12K]                fallocate(PUNCH_HOLE | KEEP_SIZE)
//! P: munmap a[8K..12K]               a, a[OFF] (one page), a[START..END]
//! P: mprotect a[0..4K] r             r, rw, rwx, none
//! P: mlock a[0..8K]                  mlock (populates, VM_LOCKED); munlock a
//! P: madvise a hugepage              hugepage nohugepage dontneed remove dontfork dofork
//!                                    populate_read populate_write pageout cold collapse
//! P: split a [to order 2] [at 3]     debugfs split_huge_pages over the place
//! khugepaged [3]                     full khugepaged scans (1 unless given)
//! P: move_pages a [to 1] [all] [unmoved N] [status [ONLY] 1 EBUSY 1*510 -]...
//!                                    move_pages(2) of every page (a query without `to`);
//!                                    the first status list whose [ONLY] matches holds
//! P: mbind a bind 1 [move|move_all] [strict]   mbind(2): default, preferred, bind, interleave
//! P: numa_scan a                     one NUMA balancing scan pass (task_numa_work; model only)
//! P: b = mremap a[8K..16K] [size 16K] [to c] [dontunmap]
//! P: fork C                          C: exit        P: wait C
//! P.t1: write a                      a line of thread t1 of P (started at its first
//!                                    line; `P.t1: exit` ends it); `P:` is P's first thread
//! P: write a [= 0x5a]                one byte per page (default value: line-derived)
//! P: fill a[0..8K] [= 0x5a]          every byte
//! P: fill a pattern [SEED]           every byte from its address (and a seed)
//! P: read a                          one byte per page, checked against the reference
//! P: verify a                        every byte, checked against the reference
//! P: observe a[20K] as before        record frame, folio order, exclusive, RSS...
//! P: observe a as x except frame     the same without the fields named
//! P: observe f[8K] as st             a file's page in the cache, its fstat, seals, SEEK_DATA/HOLE
//! P: p = pin a[0..4K] [write] [longterm]   GUP pin (FOLL_PIN); `unpin p` releases it
//! P: g = get a[0..4K]                GUP reference (FOLL_GET, as vmsplice takes)
//! P: observe pin p as x              the first pinned page: frame, order, byte
//! P: observe zero_page as zp         the shared zero page (ZERO_PAGE(0)): its frame
//! expect after.frame == before.frame
//! expect stat.pgreuse >= 1
//! expect after.rss_kb == before.rss_kb + 16    sums and differences, left to right
//! expect [mm-id] after.frame == before.frame   only under these mapcount designs
//! expect [6.13+] w.pmd_mapped == true         only from Linux 6.13 on ([<6.13]: before it; with
//!                                              designs, both must match; !STAGE: not at that
//!                                              stage of the rmap-id designs)
//! measure fault-all                  time the steps up to `end` (backend time only; lines/s)
//! end
//! repeat 40                          the lines up to its `end` run 40 times (blocks nest)
//! end
//! parallel                           each thread's lines up to `end` on an OS thread of
//! P.t1: write a                      their own, all at once (process lines only; repeat
//! P.t2: write b                      may nest inside); see crate::interp::parallel
//! end
//! P: write a fails ENOMEM            the step must fail with that error
//! ```
//! A parse error names the line and column and what was expected.
//!
//! `lexer` splits a line into tokens and reads sizes, names and places from
//! them, `parser` turns each line into a [`Step`], and `ast` holds the types
//! of the syntax tree.

mod ast;
mod daemon;
mod lexer;
mod machine_setting;
mod numa_cmd;
mod parser;
mod place;
mod proc_cmd;
mod set_cmd;
pub mod settings;
pub mod suggest;
mod uffd_cmd;
mod uffd_step;

pub use ast::{Cmd, CmpOp, Only, Operand, ParseError, Place, Run, Step, Tunable};
pub use daemon::Daemon;
pub use lexer::parse_size;
pub use machine_setting::MachineSetting;
pub use parser::parse;
pub use set_cmd::MAX_TLB_ENTRIES;
pub use uffd_step::{UffdStep, UffdStepCall};
