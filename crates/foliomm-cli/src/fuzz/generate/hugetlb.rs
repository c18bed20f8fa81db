//! The generator's hugetlb steps: `MAP_HUGETLB` mappings (from `g2`), the
//! pool's size (from `g2`), and hugetlbfs files (from `g6`): a memfd of
//! huge pages that P maps shared, private, or both, whose hole punches zero
//! the parts of huge pages they cover and drop the pages they cover whole
//! from every mapping (private copies too), and whose truncations are in
//! whole huge pages (hugetlbfs has no `write`: `pread` instead of `pwrite`).

use rand::Rng;

use super::{Mapping, World, K};

impl World {
    /// A hugetlb mapping of one or two pages of a size whose pool has them
    /// to spare, private or shared: anonymous (`MAP_HUGETLB`), or from
    /// `g6` in half the cases of P a hugetlbfs file mapped once or twice;
    /// false if no pool has room.
    pub(super) fn mmap_hugetlb(&mut self, p: &str, name: &str) -> bool {
        let i = self.rng.gen_range(0..self.pools.len());
        let (size, pages, used) = self.pools[i];
        let n = self.rng.gen_range(1..=if size > 2048 * K { 1 } else { 2 });
        if used + n + 1 > pages {
            return false;
        }
        let opt = if size > 2048 * K { "hugetlb=1G" } else { "hugetlb" };
        if self.version >= 6 && p == "P" && self.rng.gen_bool(0.5) {
            return self.mmap_hugetlbfs(i, name, n, opt);
        }
        self.pools[i].2 += n;
        let shared = if self.rng.gen_bool(0.3) { " shared" } else { "" };
        self.lines.push(format!("{p}: {name} = mmap {}K rw{shared} {opt}", size * n / K));
        let m = Mapping {
            name: name.into(),
            len: size * n,
            file: None,
            procs: vec![p.into()],
            split: false,
            huge: Some(size),
            shared: !shared.is_empty(),
            dontfork: false,
        };
        self.maps.push(m);
        true
    }

    /// P makes a hugetlbfs file of `n` pages of pool `i` and maps it
    /// shared, private, or (if the pool has room for both reservations)
    /// both, the first mapping named `name`.
    fn mmap_hugetlbfs(&mut self, i: usize, name: &str, n: u64, opt: &str) -> bool {
        let (size, pages, used) = self.pools[i];
        let (f, len) = (self.name("f"), size * n);
        let both = used + 2 * n < pages && self.rng.gen_bool(0.5);
        let kinds: &[&str] = match (both, self.rng.gen_bool(0.5)) {
            (true, _) => &["shared", "private"],
            (false, true) => &["shared"],
            (false, false) => &["private"],
        };
        self.lines.push(format!("P: {f} = memfd {}K {opt}", len / K));
        self.files.push((f.clone(), len));
        for (j, kind) in kinds.iter().enumerate() {
            let m = if j == 0 { name.to_string() } else { self.name("m") };
            self.lines.push(format!("P: {m} = mmap {}K rw {kind} file {f}", len / K));
            let mapping = Mapping {
                name: m,
                len,
                file: Some(f.clone()),
                procs: vec!["P".into()],
                split: false,
                huge: Some(size),
                shared: *kind == "shared",
                dontfork: false,
            };
            self.maps.push(mapping);
        }
        self.pools[i].2 += n * kinds.len() as u64;
        true
    }

    /// A step on the hugetlbfs file `f` of `size` bytes in pages of
    /// `unit`: a hole punch of a page-aligned range, a truncation to whole
    /// pages and back, or a `pread` of a range.
    pub(super) fn hugetlbfs_file_step(&mut self, f: &str, size: u64, unit: u64) {
        match self.rng.gen_range(0..3) {
            0 => {
                let (s, e) = self.range(size);
                self.lines.push(format!("P: punch {f}[{}K..{}K]", s / K, e / K));
            }
            1 => {
                let (s, _) = self.range_of(size, unit);
                self.lines.push(format!("P: truncate {f} {}K", s / K));
                self.lines.push(format!("P: truncate {f} {}K", size / K));
            }
            _ => {
                let (s, e) = self.range(size.min(4096 * K));
                self.lines.push(format!("P: pread {f}[{}K..{}K]", s / K, e / K));
            }
        }
    }

    /// A new number of pages for the workload's pool of 2M pages: more, or
    /// fewer down to what was mapped and one to spare.
    pub(super) fn pool_step(&mut self) {
        if let Some(pool) = self.pools.iter_mut().find(|(size, ..)| *size == 2048 * K) {
            pool.1 = pool.2 + 1 + self.rng.gen_range(0..=4);
            let line = format!("set hugetlb pages={}", pool.1);
            self.lines.push(line);
        }
    }
}
