//! Steps on a memfd behind a mapping: writes through the file, hole
//! punches and truncations (hugetlbfs files: [`super::hugetlb`]).

use rand::Rng;

use super::{Mapping, World, K};

impl World {
    /// A step on the file behind mapping `m`, by a process holding it.
    pub(super) fn file_step(&mut self, p: &str, m: &Mapping) {
        let Some(f) = m.file.clone().filter(|_| p == "P") else {
            return self.lines.push(format!("{p}: read {}", m.name));
        };
        let size = self.files.iter().find(|(n, _)| *n == f).map_or(m.len, |(_, s)| *s);
        if let Some(unit) = m.huge {
            return self.hugetlbfs_file_step(&f, size, unit);
        }
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
