//! What `g8` adds: shmem's large folios (memfds under every
//! `shmem_enabled` mode and 64K mTHP setting), `MADV_COLD`, `MADV_REMOVE`
//! of shared memfd mappings, `MADV_POPULATE_READ`, `MADV_DONTFORK` and
//! `MADV_DOFORK` of whole mappings (a child then lacks the mapping), and
//! `mlock`/`munlock` of sub-ranges.

use rand::Rng;

use super::{Mapping, World};

impl World {
    /// The shmem setting line: `never` before `g8`; from it any mode, and
    /// the 64K size's own.
    pub(super) fn shmem_setting(&mut self) -> String {
        if self.version < 8 {
            return "set shmem enabled=never".into();
        }
        let mode = self.pick(&["never", "always", "within_size", "advise"]).unwrap();
        let size = self.pick(&["64K=never", "64K=always", "64K=inherit", "64K=within_size"]).unwrap();
        format!("set shmem enabled={mode} {size}")
    }

    /// One `madvise` of `p` on `m`: before `g8` as the older generators
    /// drew it, from `g8` with the advices above besides.
    pub(super) fn advise(&mut self, p: &str, m: &Mapping) {
        let place = self.vma_place(m);
        let anon = m.file.is_none() && m.huge.is_none();
        let advice = match (self.version, anon) {
            (8.., _) => self.advice_g8(p, m),
            // From g7, MADV_FREE where it applies: private anonymous memory.
            (7, true) => self.pick(&["dontneed", "free", "hugepage", "nohugepage", "populate_write"]).unwrap(),
            _ => self.pick(&["dontneed", "dontneed", "hugepage", "nohugepage", "populate_write"]).unwrap(),
        };
        if matches!(advice, "dontfork" | "dofork") {
            // Whole mappings only, so that a child has a mapping or not.
            self.lines.push(format!("{p}: madvise {} {advice}", m.name));
            for n in self.maps.iter_mut().filter(|n| n.name == m.name) {
                n.dontfork = advice == "dontfork";
            }
            return;
        }
        if advice.ends_with("hugepage") {
            self.mark_split(p, &m.name, &place);
        }
        self.lines.push(format!("{p}: madvise {place} {advice}"));
    }

    /// An advice of `p` that applies to `m`; `MADV_DONTFORK` and
    /// `MADV_DOFORK` only for P, the one process that forks (its flag is
    /// the mapping's record).
    fn advice_g8(&mut self, p: &str, m: &Mapping) -> &'static str {
        let mut advices = vec!["dontneed", "hugepage", "nohugepage", "populate_write", "populate_read", "cold"];
        if m.huge.is_none() && p == "P" {
            advices.extend(["dontfork", "dofork"]);
        }
        match (&m.file, m.huge) {
            (None, None) => advices.push("free"),
            (Some(_), None) if m.shared => advices.push("remove"),
            _ => {}
        }
        self.pick(&advices).unwrap()
    }

    /// `mlock` of part of `m` (which splits its VMA), or `munlock` of it.
    pub(super) fn lock_step(&mut self, p: &str, m: &Mapping) {
        let place = self.vma_place(m);
        self.mark_split(p, &m.name, &place);
        let verb = if self.rng.gen_bool(0.7) { "mlock" } else { "munlock" };
        self.lines.push(format!("{p}: {verb} {place}"));
    }
}
