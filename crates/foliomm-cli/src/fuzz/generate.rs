//! Random but valid workloads in the scenario language: a seed and the
//! generator's version name one scenario. Each step is drawn with weights
//! from what is possible in the state built so far (the processes, their
//! mappings and the files), so every generated line parses and names
//! things that exist; observations carry no `expect`, so that the model
//! and a kernel report the same fields and the comparison decides.
//!
//! Weighted towards the corners where large folios meet boundaries:
//! mappings of 64K and 2M+ with THP on, partial unmaps, protections and
//! `MADV_DONTNEED` of sub-ranges, fork while mapped, COW writes on both
//! sides, shared memfd mappings with truncation and hole punches. From
//! `g2` also hugetlb mappings of 2M and 1G pages with pool changes, GUP
//! pins held across fork and unmap, and threads in `parallel` blocks, each
//! on a mapping of its own so that no result depends on timing. From `g3`
//! also a swap device in most workloads and `MADV_PAGEOUT` of sub-ranges
//! (of memfd mappings too from `g5`), from `g4` `MADV_COLLAPSE`, from `g6`
//! hugetlbfs files mapped shared and private, with hole punches,
//! truncation and `pread` ([`hugetlb`]), from `g7` `MADV_FREE` of
//! anonymous memory, from `g8` shmem's large folios and more advice,
//! `mlock` and `MADV_DONTFORK` ([`g8`]), from `g9` huge page pools made
//! with HVO (`set hugetlb_optimize_vmemmap on`) in half the workloads
//! that have one.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod g8;
mod hugetlb;
mod memfd;

/// The generators, oldest first: a seed names one scenario only together
/// with one of them. An older one keeps its draws (its code paths are
/// kept), so an old seed names the same workload as before.
pub const VERSIONS: [&str; 9] = ["g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "g9"];

/// The kinds of step, each with its share of a step's roll (`g1` rolls
/// below 100, `g2` below 112, `g3` below 118, `g4` below 122): the default weights, which
/// feedback ([`super::feedback`]) multiplies.
pub const KINDS: [(&str, u32, u32); 17] = [
    ("mmap", 0, 11),
    ("write", 12, 29),
    ("read", 30, 41),
    ("observe", 42, 55),
    ("fork", 56, 61),
    ("exit", 62, 65),
    ("mprotect", 66, 73),
    ("madvise", 74, 81),
    ("munmap", 82, 87),
    ("file", 88, 92),
    ("mremap", 93, 99),
    ("pin", 100, 103),
    ("parallel", 104, 107),
    ("pool", 108, 111),
    ("pageout", 112, 117),
    ("collapse", 118, 121),
    ("lock", 122, 125),
];

/// How many of [`KINDS`] generator `version` (1 for `g1`) draws from.
fn kinds_of(version: u8) -> usize {
    match version {
        1 => 11,
        2 => 14,
        3 => 15,
        4..=7 => 16,
        _ => KINDS.len(),
    }
}

/// The default weight of kind `i` of [`KINDS`]: the width of its share.
pub fn kind_weight(i: usize) -> f64 {
    f64::from(KINDS[i].2 - KINDS[i].1 + 1)
}

/// A mapping the generator made, in the processes that have it.
#[derive(Clone)]
struct Mapping {
    name: String,
    len: u64,
    /// A file mapping's file (memfd), which truncation may shorten.
    file: Option<String>,
    procs: Vec<String>,
    /// It may be more than one VMA (a sub-range was advised or
    /// protected): mremap, which needs one, leaves it alone.
    split: bool,
    /// The hugetlb page size of a hugetlb mapping: ranges that unmap,
    /// protect or advise are whole pages of it.
    huge: Option<u64>,
    /// A `MAP_SHARED` mapping.
    shared: bool,
    /// `MADV_DONTFORK` (of the whole mapping): a child does not get it.
    dontfork: bool,
}

/// What the workload built so far.
struct World {
    rng: StdRng,
    lines: Vec<String>,
    live: Vec<String>,
    exited: Vec<String>,
    maps: Vec<Mapping>,
    files: Vec<(String, u64)>,
    next: usize,
    /// 2 for `g2`, 1 for `g1`.
    version: u8,
    /// The hugetlb pools of this workload (`g2`): page size, pages, and
    /// pages mapped so far (never less: reservations are given back at
    /// unmap and exit, which the generator does not follow). A pool keeps
    /// a page beyond them, for a child's copy on write.
    pools: Vec<(u64, u64, u64)>,
    /// GUP references of P not yet released.
    pins: Vec<String>,
    /// Multipliers of the kinds' weights ([`KINDS`]), if feedback steers.
    bias: Option<Vec<f64>>,
    /// How many steps of each kind were drawn.
    drawn: Vec<u32>,
}

const K: u64 = 1024;
const SIZES: [u64; 6] = [4 * K, 16 * K, 64 * K, 128 * K, 2048 * K, 4096 * K];

impl World {
    fn name(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.rng.gen_range(0..items.len())].clone())
    }

    /// A mapping process `p` has.
    fn mapping_of(&mut self, p: &str) -> Option<Mapping> {
        let mine: Vec<Mapping> = self.maps.iter().filter(|m| m.procs.iter().any(|q| q == p)).cloned().collect();
        self.pick(&mine)
    }

    /// A page-aligned sub-range `[start, end)` of `len` bytes, often whole
    /// or a 64K/2M-aligned piece.
    fn range(&mut self, len: u64) -> (u64, u64) {
        self.range_of(len, 4 * K)
    }

    /// A sub-range of `len` bytes in whole units of `unit` bytes.
    fn range_of(&mut self, len: u64, unit: u64) -> (u64, u64) {
        let units = len / unit;
        let a = self.rng.gen_range(0..units);
        let b = self.rng.gen_range(a + 1..=units);
        (a * unit, b * unit)
    }

    /// A place in `m` to access: whole, or a page range (at most 2M of a
    /// 1G mapping, whose whole would be slow to fill and compare).
    fn place(&mut self, m: &Mapping) -> String {
        match self.rng.gen_range(0..3) {
            0 if m.len <= 4096 * K => m.name.clone(),
            _ => {
                let (s, mut e) = self.range(m.len);
                if m.len > 4096 * K {
                    e = e.min(s + 2048 * K);
                }
                format!("{}[{}K..{}K]", m.name, s / K, e / K)
            }
        }
    }

    /// A place in `m` that unmaps, protects or advises: page-aligned, and
    /// whole hugetlb pages of a hugetlb mapping.
    fn vma_place(&mut self, m: &Mapping) -> String {
        match (self.rng.gen_range(0..3), m.huge) {
            (0, _) => m.name.clone(),
            (_, unit) => {
                let (s, e) = self.range_of(m.len, unit.unwrap_or(4 * K));
                format!("{}[{}K..{}K]", m.name, s / K, e / K)
            }
        }
    }

    /// One random step of a live process.
    fn step(&mut self) {
        let p = self.pick(&self.live.clone()).expect("P lives to the end");
        let kind = KINDS[self.roll()].0;
        let m = self.mapping_of(&p);
        // A kind that cannot be made here becomes another (as `g1` drew).
        match (kind, m) {
            ("mmap", _) | (_, None) => self.mmap(&p),
            ("write", Some(m)) => {
                let (place, v) = (self.place(&m), self.rng.gen_range(1..=255));
                let verb = if self.rng.gen_bool(0.5) { "write" } else { "fill" };
                self.lines.push(format!("{p}: {verb} {place} = {v:#04x}"));
            }
            ("read", Some(m)) => {
                let place = self.place(&m);
                let verb = if self.rng.gen_bool(0.5) { "read" } else { "verify" };
                self.lines.push(format!("{p}: {verb} {place}"));
            }
            ("observe", Some(m)) => self.observe(&p, &m),
            ("fork", _) if p == "P" && self.live.len() < 4 => {
                let c = self.name("C");
                self.lines.push(format!("P: fork {c}"));
                for m in self.maps.iter_mut().filter(|m| m.procs.iter().any(|q| q == "P") && !m.dontfork) {
                    m.procs.push(c.clone());
                }
                self.live.push(c);
            }
            ("exit", _) if p != "P" => {
                self.lines.push(format!("{p}: exit"));
                self.lines.push(format!("P: wait {p}"));
                self.live.retain(|q| *q != p);
                self.exited.push(p.clone());
                for m in &mut self.maps {
                    m.procs.retain(|q| *q != p);
                }
                self.maps.retain(|m| !m.procs.is_empty());
            }
            ("mprotect", Some(m)) => {
                // A protection taken away and given back: the VMA splits
                // and merges (or, by the anon_vma rules, stays split), the
                // entries stay write-protected until the next write fault.
                let place = self.vma_place(&m);
                self.mark_split(&p, &m.name, &place);
                let prot = self.pick(&["r", "none"]).unwrap();
                self.lines.push(format!("{p}: mprotect {place} {prot}"));
                self.observe(&p, &m);
                self.lines.push(format!("{p}: mprotect {place} rw"));
            }
            ("madvise", Some(m)) => self.advise(&p, &m),
            ("munmap", Some(m)) => self.munmap(&p, &m),
            ("file", Some(m)) => self.file_step(&p, &m),
            ("pin", Some(m)) if p == "P" => self.pin_step(&m),
            ("parallel", _) if p == "P" => self.parallel(),
            ("pool", _) if !self.pools.is_empty() => self.pool_step(),
            // Not hugetlb; memfds from g5 (small folios before g8).
            ("pageout", Some(m)) if m.huge.is_none() && (m.file.is_none() || self.version >= 5) => {
                let place = self.vma_place(&m);
                self.lines.push(format!("{p}: madvise {place} pageout"));
            }
            // MADV_COLLAPSE of anonymous whole 2M ranges that an `align 2M`
            // mmap owns (not an mremap's: its place differs on the kernel),
            // so that no neighbour's page table or VMA merge decides.
            ("collapse", Some(m))
                if m.huge.is_none() && m.file.is_none() && m.name.starts_with('m') && m.len % (2048 * K) == 0 =>
            {
                let n = m.len / (2048 * K);
                let (i, j) = (self.rng.gen_range(0..n), self.rng.gen_range(0..n));
                let (i, j) = (i.min(j), i.max(j) + 1);
                let place = format!("{}[{}K..{}K]", m.name, i * 2048, j * 2048);
                self.lines.push(format!("{p}: madvise {place} collapse"));
            }
            ("lock", Some(m)) => self.lock_step(&p, &m),
            ("pin" | "parallel" | "pool" | "pageout" | "collapse", Some(m)) => self.observe(&p, &m),
            (_, Some(m)) if m.split || m.huge.is_some() => self.observe(&p, &m),
            (_, Some(m)) => {
                // Shrink in place, or move whole.
                let new = self.name("r");
                let size = if self.rng.gen_bool(0.5) { m.len } else { (m.len / 2).max(4 * K) };
                self.lines.push(format!("{p}: {new} = mremap {} size {}K", m.name, size / K));
                self.unmapped(&p, &m.name);
                self.maps.push(Mapping {
                    name: new,
                    len: size,
                    file: m.file,
                    procs: vec![p.clone()],
                    split: false,
                    huge: None,
                    shared: m.shared,
                    dontfork: m.dontfork,
                });
            }
        }
    }

    /// A step's kind (its index in [`KINDS`]), from a roll: uniform, or
    /// with feedback a kind drawn by its weight times its multiplier and a
    /// roll inside that kind's share.
    fn roll(&mut self) -> usize {
        let kinds = kinds_of(self.version);
        let roll = match &self.bias {
            None => self.rng.gen_range(0..KINDS[kinds - 1].2 + 1),
            Some(bias) => {
                let weight = |i: usize| kind_weight(i) * bias[i];
                let mut x = self.rng.gen_range(0.0..(0..kinds).map(weight).sum::<f64>());
                let mut i = 0;
                while i + 1 < kinds && x >= weight(i) {
                    x -= weight(i);
                    i += 1;
                }
                self.rng.gen_range(KINDS[i].1..=KINDS[i].2)
            }
        };
        let kind = KINDS.iter().position(|k| (k.1..=k.2).contains(&roll)).unwrap();
        self.drawn[kind] += 1;
        kind
    }

    /// Notes that `p`'s mapping `name` may be split into VMAs when `place`
    /// is a part of it.
    fn mark_split(&mut self, p: &str, name: &str, place: &str) {
        if place.contains('[') {
            for m in self.maps.iter_mut().filter(|m| m.name == name && m.procs.iter().any(|q| q == p)) {
                m.split = true;
            }
        }
    }

    fn observe(&mut self, p: &str, m: &Mapping) {
        let (s, _) = self.range(m.len);
        let o = self.name("o");
        self.lines.push(format!("{p}: observe {}[{}K] as {o}", m.name, s / K));
    }

    /// Unmaps part or all of `m` in `p`; either way `p` leaves the mapping
    /// alone from then on (a backend may place later mappings in the hole,
    /// where another unmap or an observation would meet them by layout).
    fn munmap(&mut self, p: &str, m: &Mapping) {
        let (s, e) = self.range_of(m.len, m.huge.unwrap_or(4 * K));
        self.lines.push(format!("{p}: munmap {}[{}K..{}K]", m.name, s / K, e / K));
        self.unmapped(p, &m.name);
    }

    /// `p` no longer has mapping `name` (whole unmap, or moved away).
    fn unmapped(&mut self, p: &str, name: &str) {
        for m in self.maps.iter_mut().filter(|m| m.name == name) {
            m.procs.retain(|q| q != p);
        }
        self.maps.retain(|m| !m.procs.is_empty());
    }

    /// A new mapping of `p`: anonymous (often THP-sized), or a shared or
    /// private mapping of a memfd, 64K-aligned so that fault-around's
    /// window is the same on every backend.
    fn mmap(&mut self, p: &str) {
        let name = self.name("m");
        if !self.pools.is_empty() && self.rng.gen_bool(0.3) && self.mmap_hugetlb(p, &name) {
            return;
        }
        let len = self.pick(&SIZES).unwrap();
        if self.rng.gen_bool(0.25) && p == "P" {
            let f = self.name("f");
            let kind = if self.rng.gen_bool(0.5) { "shared" } else { "private" };
            self.lines.push(format!("P: {f} = memfd {}K", len / K));
            self.lines.push(format!("P: {name} = mmap {}K rw {kind} file {f} align 64K", len / K));
            self.files.push((f.clone(), len));
            let shared = kind == "shared";
            let procs = vec!["P".into()];
            self.maps.push(Mapping {
                name,
                len,
                file: Some(f),
                procs,
                split: false,
                huge: None,
                shared,
                dontfork: false,
            });
            return;
        }
        // Aligned, so that where a folio fits does not depend on where a
        // backend puts the mapping.
        let align = if len >= 2048 * K { " align 2M" } else { " align 64K" };
        self.lines.push(format!("{p}: {name} = mmap {}K rw{align}", len / K));
        if len >= 64 * K && self.rng.gen_bool(0.3) {
            self.lines.push(format!("{p}: madvise {name} hugepage"));
        }
        let procs = vec![p.to_string()];
        self.maps.push(Mapping {
            name,
            len,
            file: None,
            procs,
            split: false,
            huge: None,
            shared: false,
            dontfork: false,
        });
    }

    /// P pins part of a mapping (a longterm R/W pin, or a plain GUP
    /// reference), or releases a pin it holds.
    fn pin_step(&mut self, m: &Mapping) {
        if !self.pins.is_empty() && self.rng.gen_bool(0.4) {
            let i = self.rng.gen_range(0..self.pins.len());
            let pin = self.pins.remove(i);
            return self.lines.push(format!("P: unpin {pin}"));
        }
        let (s, e) = self.range(m.len.min(2048 * K));
        let pin = self.name("p");
        let how = if self.rng.gen_bool(0.7) { "pin" } else { "get" };
        let opts = if how == "pin" { " write longterm" } else { "" };
        self.lines.push(format!("P: {pin} = {how} {}[{}K..{}K]{opts}", m.name, s / K, e / K));
        self.pins.push(pin);
    }

    /// A `parallel` block: two or three threads of P, each on a mapping of
    /// its own (writes, reads, `MADV_DONTNEED`), so that the result does
    /// not depend on how they interleave. No hugetlb mapping: which thread
    /// gets the pool's last page would.
    fn parallel(&mut self) {
        let mut mine: Vec<Mapping> =
            self.maps.iter().filter(|m| m.huge.is_none() && m.procs.iter().any(|q| q == "P")).cloned().collect();
        if mine.len() < 2 {
            return;
        }
        let threads = self.rng.gen_range(2..=3.min(mine.len()));
        self.lines.push("parallel".into());
        for t in 1..=threads {
            let m = mine.remove(self.rng.gen_range(0..mine.len()));
            for _ in 0..self.rng.gen_range(1..=3) {
                let place = self.place(&m);
                let line = match self.rng.gen_range(0..4) {
                    0 => format!("write {place} = {:#04x}", self.rng.gen_range(1..=255)),
                    1 => format!("fill {place} = {:#04x}", self.rng.gen_range(1..=255)),
                    2 => format!("madvise {} dontneed", m.name),
                    _ => format!("verify {place}"),
                };
                self.lines.push(format!("P.t{t}: {line}"));
            }
        }
        self.lines.push("end".into());
    }
}

/// The workload of `seed` by generator `version` (one of [`VERSIONS`]):
/// about `steps` random steps after a few settings, ending with the
/// release of P's pins and every child's exit; with `bias`, the kinds of
/// step ([`KINDS`]) weighted by it. Returns the scenario and how many
/// steps of each kind it drew.
pub fn scenario(version: &str, seed: u64, steps: usize, bias: Option<&[f64]>) -> (String, Vec<u32>) {
    let mut w = World {
        rng: StdRng::seed_from_u64(seed),
        lines: Vec::new(),
        live: vec!["P".into()],
        exited: Vec::new(),
        maps: Vec::new(),
        files: Vec::new(),
        next: 0,
        version: VERSIONS.iter().position(|v| *v == version).expect("a known generator") as u8 + 1,
        pools: Vec::new(),
        pins: Vec::new(),
        bias: bias.map(<[f64]>::to_vec),
        drawn: vec![0; KINDS.len()],
    };
    let thp = w.pick(&["never", "always", "madvise"]).unwrap();
    let mthp = w.pick(&["64K=never", "64K=always", "64K=inherit"]).unwrap();
    w.lines.push(format!("# foliomm fuzz {version} seed {seed}"));
    w.lines.push(format!("set thp enabled={thp} {mthp}"));
    let shmem = w.shmem_setting();
    w.lines.push(shmem);
    if w.version >= 2 {
        // A quarter of the workloads have a pool of 2M pages, one in
        // twelve also one of 1G pages (of which the model needs the
        // memory, a machine setting that comes first).
        // From g6 half of them, with more pages for files mapped twice.
        if w.rng.gen_bool(if w.version >= 6 { 0.5 } else { 0.25 }) {
            let pages = w.rng.gen_range(2..=if w.version >= 6 { 10 } else { 7 });
            w.pools.push((2048 * K, pages, 0));
            w.lines.push(format!("set hugetlb pages={pages}"));
        }
        if w.rng.gen_bool(1.0 / 12.0) {
            w.pools.push((1024 * 1024 * K, 2, 0));
            w.lines.insert(1, "set memory at least 3G".into());
            w.lines.push("set hugetlb pages=2 size=1G".into());
        }
    }
    if w.version >= 9 && !w.pools.is_empty() && w.rng.gen_bool(0.5) {
        let at = w.lines.iter().position(|l| l.starts_with("set hugetlb pages")).expect("a pool's line");
        w.lines.insert(at, "set hugetlb_optimize_vmemmap on".into());
    }
    if w.version >= 3 && w.rng.gen_bool(0.75) {
        w.lines.insert(1, "set swap 64M".into());
    }
    for _ in 0..steps {
        w.step();
    }
    for pin in std::mem::take(&mut w.pins) {
        w.lines.push(format!("P: unpin {pin}"));
    }
    for c in w.live.clone().into_iter().filter(|c| c != "P") {
        w.lines.push(format!("{c}: exit"));
        w.lines.push(format!("P: wait {c}"));
    }
    (w.lines.join("\n") + "\n", w.drawn)
}
