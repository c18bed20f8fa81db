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
//! sides, shared memfd mappings with truncation and hole punches.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The generator's version: a seed names one scenario only together with it.
pub const VERSION: &str = "g1";

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
        let pages = len / (4 * K);
        let a = self.rng.gen_range(0..pages);
        let b = self.rng.gen_range(a + 1..=pages);
        (a * 4 * K, b * 4 * K)
    }

    fn place(&mut self, m: &Mapping) -> String {
        match self.rng.gen_range(0..3) {
            0 => m.name.clone(),
            _ => {
                let (s, e) = self.range(m.len);
                format!("{}[{}K..{}K]", m.name, s / K, e / K)
            }
        }
    }

    /// One random step of a live process.
    fn step(&mut self) {
        let p = self.pick(&self.live.clone()).expect("P lives to the end");
        let roll = self.rng.gen_range(0..100);
        let m = self.mapping_of(&p);
        match (roll, m) {
            (0..=11, _) | (_, None) => self.mmap(&p),
            (12..=29, Some(m)) => {
                let (place, v) = (self.place(&m), self.rng.gen_range(1..=255));
                let verb = if self.rng.gen_bool(0.5) { "write" } else { "fill" };
                self.lines.push(format!("{p}: {verb} {place} = {v:#04x}"));
            }
            (30..=41, Some(m)) => {
                let place = self.place(&m);
                let verb = if self.rng.gen_bool(0.5) { "read" } else { "verify" };
                self.lines.push(format!("{p}: {verb} {place}"));
            }
            (42..=55, Some(m)) => self.observe(&p, &m),
            (56..=61, _) if p == "P" && self.live.len() < 4 => {
                let c = self.name("C");
                self.lines.push(format!("P: fork {c}"));
                for m in self.maps.iter_mut().filter(|m| m.procs.iter().any(|q| q == "P")) {
                    m.procs.push(c.clone());
                }
                self.live.push(c);
            }
            (62..=65, _) if p != "P" => {
                self.lines.push(format!("{p}: exit"));
                self.lines.push(format!("P: wait {p}"));
                self.live.retain(|q| *q != p);
                self.exited.push(p.clone());
                for m in &mut self.maps {
                    m.procs.retain(|q| *q != p);
                }
                self.maps.retain(|m| !m.procs.is_empty());
            }
            (66..=73, Some(m)) => {
                // A protection taken away and given back: the VMA splits
                // and merges (or, by the anon_vma rules, stays split), the
                // entries stay write-protected until the next write fault.
                let place = self.place(&m);
                self.mark_split(&p, &m.name, &place);
                let prot = self.pick(&["r", "none"]).unwrap();
                self.lines.push(format!("{p}: mprotect {place} {prot}"));
                self.observe(&p, &m);
                self.lines.push(format!("{p}: mprotect {place} rw"));
            }
            (74..=81, Some(m)) => {
                let place = self.place(&m);
                let advice = self.pick(&["dontneed", "dontneed", "hugepage", "nohugepage", "populate_write"]).unwrap();
                if advice.ends_with("hugepage") {
                    self.mark_split(&p, &m.name, &place);
                }
                self.lines.push(format!("{p}: madvise {place} {advice}"));
            }
            (82..=87, Some(m)) => self.munmap(&p, &m),
            (88..=92, Some(m)) => self.file_step(&p, &m),
            (_, Some(m)) if m.split => self.observe(&p, &m),
            (_, Some(m)) => {
                // Shrink in place, or move whole.
                let new = self.name("r");
                let size = if self.rng.gen_bool(0.5) { m.len } else { (m.len / 2).max(4 * K) };
                self.lines.push(format!("{p}: {new} = mremap {} size {}K", m.name, size / K));
                self.unmapped(&p, &m.name);
                self.maps.push(Mapping { name: new, len: size, file: m.file, procs: vec![p.clone()], split: false });
            }
        }
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
        let (s, e) = self.range(m.len);
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
        let len = self.pick(&SIZES).unwrap();
        if self.rng.gen_bool(0.25) && p == "P" {
            let f = self.name("f");
            let kind = if self.rng.gen_bool(0.5) { "shared" } else { "private" };
            self.lines.push(format!("P: {f} = memfd {}K", len / K));
            self.lines.push(format!("P: {name} = mmap {}K rw {kind} file {f} align 64K", len / K));
            self.files.push((f.clone(), len));
            self.maps.push(Mapping { name, len, file: Some(f), procs: vec!["P".into()], split: false });
            return;
        }
        // Aligned, so that where a folio fits does not depend on where a
        // backend puts the mapping.
        let align = if len >= 2048 * K { " align 2M" } else { " align 64K" };
        self.lines.push(format!("{p}: {name} = mmap {}K rw{align}", len / K));
        if len >= 64 * K && self.rng.gen_bool(0.3) {
            self.lines.push(format!("{p}: madvise {name} hugepage"));
        }
        self.maps.push(Mapping { name, len, file: None, procs: vec![p.to_string()], split: false });
    }

    /// A step on the file behind mapping `m`, by a process holding it.
    fn file_step(&mut self, p: &str, m: &Mapping) {
        let Some(f) = m.file.clone().filter(|_| p == "P") else {
            return self.lines.push(format!("{p}: read {}", m.name));
        };
        let size = self.files.iter().find(|(n, _)| *n == f).map_or(m.len, |(_, s)| *s);
        let (s, e) = self.range(size.max(4 * K));
        match self.rng.gen_range(0..3) {
            0 => {
                self.lines.push(format!("P: pwrite {f}[{}K..{}K] = {:#04x}", s / K, e / K, self.rng.gen_range(1..=255)))
            }
            1 => self.lines.push(format!("P: punch {f}[{}K..{}K]", s / K, e / K)),
            _ => {
                // Shrinking makes later accesses past the end SIGBUS on
                // every backend alike; growing back restores them.
                self.lines.push(format!("P: truncate {f} {}K", s / K));
                self.lines.push(format!("P: truncate {f} {}K", size / K));
            }
        }
    }
}

/// The workload of `seed`: about `steps` random steps after a few settings,
/// ending with every child's exit.
pub fn scenario(seed: u64, steps: usize) -> String {
    let mut w = World {
        rng: StdRng::seed_from_u64(seed),
        lines: Vec::new(),
        live: vec!["P".into()],
        exited: Vec::new(),
        maps: Vec::new(),
        files: Vec::new(),
        next: 0,
    };
    let thp = w.pick(&["never", "always", "madvise"]).unwrap();
    let mthp = w.pick(&["64K=never", "64K=always", "64K=inherit"]).unwrap();
    w.lines.push(format!("# foliomm fuzz {VERSION} seed {seed}"));
    w.lines.push(format!("set thp enabled={thp} {mthp}"));
    w.lines.push("set shmem enabled=never".into());
    for _ in 0..steps {
        w.step();
    }
    for c in w.live.clone().into_iter().filter(|c| c != "P") {
        w.lines.push(format!("{c}: exit"));
        w.lines.push(format!("P: wait {c}"));
    }
    w.lines.join("\n") + "\n"
}
