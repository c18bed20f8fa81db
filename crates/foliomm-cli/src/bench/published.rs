//! The seeds' published figures, which `foliomm bench zap-batching`,
//! `seed-000` and `seed-004` print beside the model's. They are copied from
//! the results the seed series reported: seed 001 is the "optimize unmap/zap
//! with PTE-mapped THP" series (munmap times per folio size), seed 000 the
//! "precise mapped shared" series (% change per stage of the series for its
//! micro benchmarks and for vm-scalability), seed 004 the "per-vma lock as a
//! refcount" series (page faults per CPU-second and per second, 1 to 56
//! CPUs), each measured on the machines named below.

/// Seed 001's published munmap times (Intel Xeon Silver 4210R, 1 GiB):
/// (folio KiB, mm-unstable s, with the series s, change %).
pub(super) const SEED_001: [(u64, f64, f64, i32); 9] = [
    (4, 0.058110, 0.057715, -1),
    (16, 0.044198, 0.035469, -20),
    (32, 0.034216, 0.023522, -31),
    (64, 0.029207, 0.018434, -37),
    (128, 0.026579, 0.014026, -47),
    (256, 0.025130, 0.011756, -53),
    (512, 0.024292, 0.010703, -56),
    (1024, 0.023812, 0.010294, -57),
    (2048, 0.023785, 0.009910, -58),
];

/// Seed 000's micro benchmarks, in the seed's order, then its two
/// vm-scalability cases.
pub(super) const SEED_000_COLUMNS: [&str; 10] = [
    "remap",
    "munmap",
    "fork",
    "cow",
    "cow-byte",
    "cow-reuse",
    "cow-reuse-byte",
    "pte-dontneed",
    "anon-cow-seq",
    "anon-cow-rand",
];

/// How many of SEED_000_COLUMNS are micro benchmarks.
pub(super) const SEED_000_MICRO: usize = 8;

/// Seed 000's published % change against v6.7-rc1 (Intel Xeon Silver 4210R).
pub(super) const SEED_000_INTEL: [(&str, [f64; 8]); 7] = [
    ("mapcount", [13.4, 0.3, 14.2, 0.5, 0.2, -0.2, -0.4, 2.8]),
    ("rmap-id", [123.7, 48.8, 105.9, 3.0, 3.2, -30.0, -64.2, 14.8]),
    ("123", [108.7, 42.1, 93.3, 1.7, 2.7, -30.0, -64.3, 12.9]),
    ("batch", [-8.1, 41.4, 95.5, 1.5, 2.2, -29.7, -64.2, 5.7]),
    ("exclusive", [-8.8, 15.1, 40.5, 1.1, 0.9, -29.6, -64.0, 1.1]),
    ("nocmpxchg", [-10.4, 12.6, 46.4, 0.9, 1.4, -30.0, -64.3, 0.8]),
    ("all", [-34.8, 1.0, 27.8, 0.7, 0.4, -30.0, -63.9, -0.5]),
];

/// The same on AMD EPYC 7313.
pub(super) const SEED_000_AMD: [(&str, [f64; 8]); 7] = [
    ("mapcount", [24.3, 1.8, 25.9, 1.5, 2.6, 1.4, 1.9, 4.5]),
    ("rmap-id", [55.4, 12.5, 27.9, 2.6, 4.3, -50.4, -60.9, 6.3]),
    ("123", [45.6, 6.3, 30.4, 2.9, 4.1, -51.1, -60.5, 6.7]),
    ("batch", [-9.6, 7.2, 31.5, 2.1, 3.0, -51.1, -60.7, 4.0]),
    ("exclusive", [-10.8, 14.0, 48.4, 0.5, 2.3, -51.4, -61.0, 5.0]),
    ("nocmpxchg", [-11.3, 25.9, 55.7, 2.0, 3.3, -50.9, -60.2, 3.4]),
    ("all", [-21.8, 16.1, 43.0, 3.2, 4.8, -50.2, -60.8, 5.8]),
];

/// Seed 000's published vm-scalability % change in throughput (seq, rand),
/// Intel Xeon Silver 4210R and AMD EPYC 7313, one instance per core.
pub(super) const SEED_000_VMSCAL: [(&str, [f64; 2], [f64; 2]); 7] = [
    ("mapcount", [-8.2, -0.1], [-2.1, -0.1]),
    ("rmap-id", [-16.2, -0.3], [-10.4, -0.1]),
    ("123", [-12.3, -0.3], [-10.8, -0.7]),
    ("batch", [-8.3, -0.4], [-3.8, -0.1]),
    ("exclusive", [-7.1, 0.4], [-4.2, 0.0]),
    ("nocmpxchg", [-6.6, -0.3], [-4.6, 0.0]),
    ("all", [-5.6, -0.3], [-4.5, -0.5]),
];

/// Seed 004's mmtests page-fault figures (the "reimplement per-vma lock as
/// a refcount" series): (CPUs, faults/cpu before, after, faults/sec before,
/// after), harmonic means; "before" is the separate `vm_lock` rwsem
/// (`vma-rwsem`), "after" the refcount (`vma-refcount`).
pub(super) const SEED_004: [(u32, f64, f64, f64, f64); 8] = [
    (1, 507926.5547, 506519.3692, 507566.1468, 506139.0811),
    (4, 479119.7051, 481333.6802, 1880478.2402, 1886795.6329),
    (7, 452880.2961, 455845.6211, 3106394.3438, 3140550.7485),
    (12, 347639.1021, 352004.2254, 4061358.4795, 4112477.0206),
    (21, 200061.2238, 229597.0317, 3988619.1169, 4577747.1436),
    (30, 145251.2001, 164202.5067, 3909839.5449, 4311052.2787),
    (48, 106848.4434, 120641.5504, 4761108.4691, 5283790.5026),
    (56, 92472.3835, 103464.7916, 4885561.4590, 5415839.4045),
];

/// Seed 002's figures (48-CPU VM, 250 GB shared hugetlb area), avg per
/// instance, for i_mmap_rwsem (next-20220629 unmodified), no locking (the
/// revert) and the VMA lock (the series): fork program with 1 and 24
/// instances (forks/s), faulting program with 1 and 24 (faults/s), and the
/// combined run of 24 + 24 (forks/s, faults/s).
pub(super) const SEED_002: [(&str, [f64; 6]); 3] = [
    ("i-mmap-rwsem", [3546.4, 581.428, 491609.0, 75485.1, 448.606, 2144.06]),
    ("no-lock", [3494.16, 739.105, 495693.0, 95231.3, 76.0802, 83110.8]),
    ("vma-lock", [3467.29, 663.257, 477994.0, 90512.1, 151.34, 65596.6]),
];
