//! What the kernel says about the worker's own memory: `/proc/self/pagemap`
//! (frame, present, `PM_MMAP_EXCLUSIVE`), `/proc/kpageflags` (compound
//! head/tail, zero page: the folio order follows), the `PAGEMAP_SCAN` ioctl
//! (`PAGE_IS_HUGE`: mapped by a PMD; `PAGE_IS_PFNZERO`), and `/proc/self/maps`
//! (VMA permissions, to turn an access the VMA forbids into an error instead
//! of a SIGSEGV).

use std::fs::File;
use std::os::unix::fs::FileExt;

use foliomm::internals::mm::{PageInfo, RangeInfo};
use foliomm::Errno;

use crate::sys::{pagemap_scan, PageRegion};

const PAGE: u64 = 4096;
const PM_PRESENT: u64 = 1 << 63;
const PM_SWAP: u64 = 1 << 62;
/// `PM_FILE`: a file page or shared anonymous (shmem) page, not anon.
const PM_FILE: u64 = 1 << 61;
const PM_EXCLUSIVE: u64 = 1 << 56;
const PM_UFFD_WP: u64 = 1 << 57;
const PM_SOFT_DIRTY: u64 = 1 << 55;
const PM_PFN: u64 = (1 << 55) - 1;
const PMD: u64 = 2 << 20;
const KPF_COMPOUND_HEAD: u64 = 1 << 15;
const KPF_COMPOUND_TAIL: u64 = 1 << 16;
const KPF_ZERO_PAGE: u64 = 1 << 24;
/// `KPF_HUGE`: a hugetlb page.
const KPF_HUGE: u64 = 1 << 17;
const KPF_KSM: u64 = 1 << 21;

const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_PFNZERO: u64 = 1 << 5;
const PAGE_IS_HUGE: u64 = 1 << 6;

pub struct Procfs {
    pagemap: File,
    kpageflags: File,
    kpagecount: File,
}

/// Per-page facts of a range.
struct PageFacts {
    present: bool,
    /// `PM_SWAP`: a swap entry stands for the page.
    swapped: bool,
    zero: bool,
    huge: bool,
    exclusive: bool,
    uffd_wp: bool,
    soft_dirty: bool,
    /// `PM_FILE`: the page is not anonymous. Taken from pagemap rather
    /// than `KPF_ANON`: kpageflags (from Linux 6.17 a `snapshot_page` of
    /// the struct page) can report no flags at all for a mapped page,
    /// while pagemap and smaps, which look at the folio itself, see it
    /// anonymous. Seen on this 6.18 host, persistently until reboot, on
    /// pages of the 1 GiB range where a 1 GiB hugetlb page with HVO had
    /// been made and freed.
    file: bool,
    pfn: u64,
}

impl Procfs {
    pub fn open() -> std::io::Result<Procfs> {
        Ok(Procfs {
            pagemap: File::open("/proc/self/pagemap")?,
            kpageflags: File::open("/proc/kpageflags")?,
            kpagecount: File::open("/proc/kpagecount")?,
        })
    }

    fn pagemap(&self, addr: u64, pages: u64) -> Vec<u64> {
        let mut buf = vec![0u8; pages as usize * 8];
        let _ = self.pagemap.read_exact_at(&mut buf, addr / PAGE * 8);
        buf.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// Whether a page table entry maps the page at `addr` (`PM_PRESENT`).
    pub fn present(&self, addr: u64) -> bool {
        self.pagemap(addr, 1)[0] & PM_PRESENT != 0
    }

    /// Whether kpageflags reports nothing at all for frame `pfn`, which a
    /// mapped page never is (`KPF_MMAP`): the kernel's snapshot of its
    /// struct page was given up on.
    pub fn kpageflags_lost(&self, pfn: u64) -> bool {
        self.kpageflags(pfn, 1)[0] == 0
    }

    /// `/proc/kpagecount` of frame `pfn` (0 if unreadable).
    pub fn kpagecount(&self, pfn: u64) -> u64 {
        let mut buf = [0u8; 8];
        let _ = self.kpagecount.read_exact_at(&mut buf, pfn * 8);
        u64::from_le_bytes(buf)
    }

    fn kpageflags(&self, pfn: u64, n: u64) -> Vec<u64> {
        let mut buf = vec![0u8; n as usize * 8];
        let _ = self.kpageflags.read_exact_at(&mut buf, pfn * 8);
        buf.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// `PAGEMAP_SCAN` categories of every page of `[addr, addr+len)`; on a
    /// kernel without it (before 6.7), the zero page from kpageflags and
    /// PMD mappings from smaps ([`crate::smaps`]), or why they cannot be
    /// told apart.
    fn categories(&self, addr: u64, len: u64) -> Result<Vec<u64>, String> {
        let pages = (len / PAGE) as usize;
        let mut out = vec![0u64; pages];
        let mut regions = vec![PageRegion::default(); 64];
        let mut start = addr;
        while start < addr + len {
            let mask = PAGE_IS_PRESENT | PAGE_IS_PFNZERO | PAGE_IS_HUGE;
            let (n, walk_end) = match pagemap_scan(&self.pagemap, start, addr + len, mask, &mut regions) {
                Ok(scanned) => scanned,
                Err(_) if start == addr => return self.categories_without_scan(addr, len),
                Err(_) => break,
            };
            for r in &regions[..n] {
                for p in ((r.start - addr) / PAGE)..((r.end - addr) / PAGE) {
                    out[p as usize] = r.categories;
                }
            }
            if walk_end <= start || walk_end >= addr + len {
                break;
            }
            start = walk_end;
        }
        Ok(out)
    }

    fn categories_without_scan(&self, addr: u64, len: u64) -> Result<Vec<u64>, String> {
        // smaps leaves the huge zero folio out of AnonHugePages: not a candidate.
        let zero_window = |w: u64| self.kpageflags(self.pagemap(w, 1)[0] & PM_PFN, 1)[0] & KPF_ZERO_PAGE != 0;
        let mut huge = crate::smaps::pmd_mapped(addr, len, |w| self.maps_one_thp(w) && !zero_window(w))?;
        // The huge zero page is only ever mapped by a PMD, and smaps does
        // not count it: a window that maps it in order is PMD-mapped.
        for w in (addr & !(PMD - 1)..addr + len).step_by(PMD as usize) {
            if zero_window(w) && self.maps_one_thp(w) {
                for p in (w.max(addr)..(w + PMD).min(addr + len)).step_by(PAGE as usize) {
                    huge[((p - addr) / PAGE) as usize] = true;
                }
            }
        }
        let pm = self.pagemap(addr, len / PAGE);
        let flags = |e: u64| if e & PM_PRESENT != 0 { self.kpageflags(e & PM_PFN, 1)[0] } else { 0 };
        // A hugetlb page is always mapped by a huge entry (PMD or PUD).
        for (h, &e) in huge.iter_mut().zip(&pm) {
            *h |= flags(e) & KPF_HUGE != 0;
        }
        let zero = |e: u64| flags(e) & KPF_ZERO_PAGE != 0;
        let cats = pm.iter().zip(huge).map(|(&e, h)| {
            ((e & PM_PRESENT != 0) as u64 * PAGE_IS_PRESENT)
                | (zero(e) as u64 * PAGE_IS_PFNZERO)
                | (h as u64 * PAGE_IS_HUGE)
        });
        Ok(cats.collect())
    }

    /// Whether the 2 MiB at `w` map one PMD-sized folio, page by page in
    /// order (as a PMD would; a PTE-mapped THP looks the same).
    fn maps_one_thp(&self, w: u64) -> bool {
        let pm = self.pagemap(w, 512);
        let first = pm[0] & PM_PFN;
        pm[0] & PM_PRESENT != 0
            && first.is_multiple_of(512)
            && pm.iter().enumerate().all(|(i, &e)| e & PM_PRESENT != 0 && e & PM_PFN == first + i as u64)
            && self.folio_order(first) == 9
    }

    fn facts(&self, addr: u64, len: u64) -> Result<Vec<PageFacts>, String> {
        let pm = self.pagemap(addr, len / PAGE);
        let cats = self.categories(addr, len)?;
        Ok(pm
            .iter()
            .zip(cats)
            .map(|(&e, c)| PageFacts {
                present: e & PM_PRESENT != 0,
                swapped: e & PM_SWAP != 0,
                zero: c & PAGE_IS_PFNZERO != 0,
                huge: c & PAGE_IS_HUGE != 0,
                exclusive: e & PM_EXCLUSIVE != 0,
                uffd_wp: e & PM_UFFD_WP != 0,
                soft_dirty: e & PM_SOFT_DIRTY != 0,
                file: e & PM_FILE != 0,
                pfn: e & PM_PFN,
            })
            .collect())
    }

    /// The order of the folio containing `pfn`, from compound head/tail
    /// flags: looked for within 4 MiB first, then within 1 GiB (a gigantic
    /// hugetlb folio).
    fn folio_order(&self, pfn: u64) -> u32 {
        for max in [1u64 << 10, 1 << 18] {
            let first = pfn.saturating_sub(max);
            let back = self.kpageflags(first, pfn - first + 1);
            let here = *back.last().unwrap();
            if here & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL) == 0 {
                return 0;
            }
            let Some(head_pos) = back.iter().rposition(|f| f & KPF_COMPOUND_HEAD != 0) else { continue };
            let head = first + head_pos as u64;
            let fwd = self.kpageflags(head + 1, max);
            let tails = fwd.iter().take_while(|f| *f & KPF_COMPOUND_TAIL != 0).count() as u64;
            if tails < max {
                return (1 + tails).next_power_of_two().trailing_zeros();
            }
        }
        0
    }

    /// pagemap/kpageflags/PAGEMAP_SCAN facts of the page at `addr`. Fields
    /// the kernel does not expose (PTE write bit, mapcounts, refcount) stay 0.
    pub fn page_info(&self, addr: u64) -> Result<PageInfo, String> {
        let page = addr & !(PAGE - 1);
        let f = &self.facts(page, PAGE)?[0];
        if !f.present {
            let (swapped, uffd_wp, soft_dirty) = (f.swapped, f.uffd_wp, f.soft_dirty);
            return Ok(PageInfo { swapped, uffd_wp, soft_dirty, ..PageInfo::default() });
        }
        let kpf = self.kpageflags(f.pfn, 1)[0];
        Ok(PageInfo {
            present: true,
            pfn: f.pfn,
            zero_page: f.zero || kpf & KPF_ZERO_PAGE != 0,
            anon: !f.file,
            ksm: kpf & KPF_KSM != 0,
            pmd_mapped: f.huge,
            folio_order: match kpf {
                0 => order_without_kpageflags(page, f.huge).unwrap_or(0),
                _ if kpf & KPF_HUGE == 0 => self.folio_order(f.pfn),
                _ => hugetlb_order(page).unwrap_or_else(|| self.folio_order(f.pfn)),
            },
            exclusive: f.exclusive,
            uffd_wp: f.uffd_wp,
            soft_dirty: f.soft_dirty,
            node: crate::sys::scenario::page_node(page),
            ..PageInfo::default()
        })
    }

    /// smaps-style sums over `[addr, addr+len)`, from per-page facts.
    pub fn range_info(&self, addr: u64, len: u64) -> Result<RangeInfo, String> {
        let start = addr & !(PAGE - 1);
        let end = (addr + len).div_ceil(PAGE) * PAGE;
        let mut r = RangeInfo::default();
        let facts = self.facts(start, end - start)?;
        r.swap_kb = 4 * facts.iter().filter(|f| f.swapped).count() as u64;
        for f in facts.iter().filter(|f| f.present && !f.zero) {
            r.rss_kb += 4;
            let anon = !f.file;
            // Every file page a scenario maps is shmem (memfd, shared anonymous).
            *(if anon { &mut r.anonymous_kb } else { &mut r.shmem_kb }) += 4;
            if f.huge {
                *(if anon { &mut r.anon_huge_kb } else { &mut r.shmem_pmd_kb }) += 4;
            }
            if f.exclusive {
                r.private_kb += 4;
            } else {
                r.shared_kb += 4;
            }
        }
        Ok(r)
    }
}

/// One VMA of `/proc/self/maps`.
#[derive(Clone, Copy, Debug)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub write: bool,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// Whether a file backs it (a non-zero inode).
    pub file: bool,
    /// A private mapping (`p`), where a write to a file's page copies it.
    pub private: bool,
}

pub fn maps() -> Vec<MapsEntry> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (s, e) = it.next()?.split_once('-')?;
            let perms = it.next()?.as_bytes();
            let offset = u64::from_str_radix(it.next()?, 16).ok()?;
            let _dev = it.next()?;
            let inode: u64 = it.next()?.parse().ok()?;
            Some(MapsEntry {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                read: perms[0] == b'r',
                write: perms[1] == b'w',
                offset,
                file: inode != 0,
                private: perms[3] == b'p',
            })
        })
        .collect()
}

/// Whether an access to the page at `addr` is allowed: EFAULT outside any
/// VMA, EACCES where the VMA forbids it (the model's convention), SIGBUS
/// past the end of the file a VMA maps.
pub fn check_access(maps: &[MapsEntry], addr: u64, write: bool) -> Result<(), Errno> {
    let v = maps.iter().find(|v| v.start <= addr && addr < v.end).ok_or(Errno::EFAULT)?;
    // x86: write permission implies read permission.
    let allowed = if write { v.write } else { v.read || v.write };
    if !allowed {
        return Err(Errno::EACCES);
    }
    if v.file {
        // The file's size, through the mapping's own link (so that no
        // descriptor is needed).
        let link = format!("/proc/self/map_files/{:x}-{:x}", v.start, v.end);
        let size = std::fs::metadata(link).map(|m| m.len()).unwrap_or(0);
        if v.offset + (addr & !(PAGE - 1)) - v.start >= size.div_ceil(PAGE) * PAGE {
            return Err(Errno::SIGBUS);
        }
    }
    Ok(())
}

/// The host's RAM in bytes (`MemTotal` of /proc/meminfo; 0 if unreadable).
pub fn mem_total() -> u64 {
    meminfo("MemTotal")
}

/// A /proc/meminfo value in bytes, like `MemAvailable`; 0 if unreadable.
pub fn meminfo(field: &str) -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kb.unwrap_or(0) << 10
}

/// The number of NUMA nodes with memory (`/sys/devices/system/node/has_memory`,
/// a list such as `0-1`); 1 where the file is missing (a kernel without NUMA).
pub fn memory_nodes() -> u64 {
    let list = std::fs::read_to_string("/sys/devices/system/node/has_memory").unwrap_or_default();
    let count = |r: &str| match r.split_once('-') {
        Some((a, b)) => b.parse::<u64>().ok().zip(a.parse::<u64>().ok()).map_or(0, |(b, a)| b + 1 - a),
        None => r.parse::<u64>().map_or(0, |_| 1),
    };
    list.trim().split(',').map(count).sum::<u64>().max(1)
}

/// Whether the kernel booted with `init_on_free` on (`init_on_free=1`, `on`
/// or `y` in /proc/cmdline); may be wrong where the kernel's config turns
/// it on by default (`CONFIG_INIT_ON_FREE_DEFAULT_ON`) and the command line
/// says nothing.
pub fn init_on_free() -> bool {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    cmdline.split_whitespace().any(|w| matches!(w, "init_on_free=1" | "init_on_free=on" | "init_on_free=y"))
}

/// Whether the running kernel was built with `CONFIG_MEM_SOFT_DIRTY`: a
/// new mapping is soft-dirty as a whole (`VM_SOFTDIRTY`), so pagemap's
/// `PM_SOFT_DIRTY` of its first page is set exactly then. Probed once, on
/// a mapping of its own, so that no `clear_refs` of the caller can
/// mislead it; false when pagemap cannot be read.
pub fn soft_dirty() -> bool {
    static BUILT_IN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BUILT_IN.get_or_init(|| {
        use std::os::unix::fs::FileExt;
        let Ok(addr) =
            crate::sys::scenario::mmap(0, PAGE, libc::PROT_READ as u32, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        else {
            return false;
        };
        let mut entry = [0u8; 8];
        let read = std::fs::File::open("/proc/self/pagemap").and_then(|f| f.read_exact_at(&mut entry, addr / PAGE * 8));
        let _ = crate::sys::scenario::munmap(addr, PAGE);
        read.is_ok() && u64::from_ne_bytes(entry) & PM_SOFT_DIRTY != 0
    })
}

/// Whether the running kernel was built with `CONFIG_NO_PAGE_MAPCOUNT`
/// (its /boot/config); false when the config cannot be read.
pub fn no_page_mapcount() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).unwrap_or_default();
    config.lines().any(|l| l == "CONFIG_NO_PAGE_MAPCOUNT=y")
}

/// The hugetlb and swap lines of /proc/meminfo under the names of
/// `foliomm_scenario::backend::meminfo_counters` (swap: the run's zram
/// device, the host having no other).
pub fn meminfo_hugetlb_and_swap() -> Vec<(String, u64)> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let names = [
        ("HugePages_Total:", "meminfo_hugepages_total"),
        ("HugePages_Free:", "meminfo_hugepages_free"),
        ("HugePages_Rsvd:", "meminfo_hugepages_rsvd"),
        ("HugePages_Surp:", "meminfo_hugepages_surp"),
        ("Hugetlb:", "meminfo_hugetlb_kb"),
        ("SwapTotal:", "meminfo_swap_total_kb"),
        ("SwapFree:", "meminfo_swap_free_kb"),
        ("SwapCached:", "meminfo_swap_cached_kb"),
    ];
    let value = |key: &str| {
        let line = meminfo.lines().find_map(|l| l.strip_prefix(key))?;
        line.split_whitespace().next()?.parse().ok()
    };
    names.iter().filter_map(|(key, name)| Some((name.to_string(), value(key)?))).collect()
}

/// The order of the folio mapped at `addr` where kpageflags lost its
/// frame (see `PageFacts::file`): a hugetlb VMA's page size, or a PMD's
/// for a PMD-mapped page; None where only kpageflags could tell.
pub fn order_without_kpageflags(addr: u64, pmd_mapped: bool) -> Option<u32> {
    hugetlb_order(addr).or(pmd_mapped.then_some(9))
}

/// The order of the hugetlb folio mapped at `addr`: its VMA's page size.
/// Not from kpageflags: from Linux 6.17 (`stable_page_flags` reading a
/// `snapshot_page`) every 64th tail of a hugetlb folio whose memmap is
/// optimized (HVO) shows `KPF_COMPOUND_HEAD`, since its struct page is the
/// alias of the head's (a "fake head" that the snapshot does not see
/// through, where `page_folio` did), so the flags alone would give order 6.
/// None outside a hugetlb VMA (smaps says 4 kB for every other VMA).
fn hugetlb_order(addr: u64) -> Option<u32> {
    let kb = crate::smaps::kernel_page_kb(addr).filter(|kb| kb.is_power_of_two() && *kb > 4)?;
    Some((kb / 4).trailing_zeros())
}
