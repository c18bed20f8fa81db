//! What the model backend shows of its pages: an observation of a
//! range (pagemap, smaps and status fields, the THP hint), a peek for a
//! trace, and a GUP reference's page.

use std::sync::Arc;

use foliomm::internals::arch::PAGE_SIZE;
use foliomm::internals::shmem::Inode;
use foliomm::{Errno, Mm};

use super::{thp_hint, ModelBackend};
use crate::backend::Thread;
use crate::error::BackendResult;
use crate::observation::{Observation, ProcessInfo};
use crate::op::Peek;

/// The status lines of `mm` and the VMA holding `addr` (zeros in a hole).
fn process_info(mm: &Mm, addr: u64) -> ProcessInfo {
    let status = mm.status();
    ProcessInfo {
        rss_anon_kb: status.rss_anon_kb,
        rss_file_kb: 0,
        rss_shmem_kb: status.rss_shmem_kb,
        hugetlb_kb: status.hugetlb_kb,
        swap_kb: status.swap_kb,
        ksm_merging_pages: mm.ksm_merging_pages(),
        vma: mm.vma_info(addr).unwrap_or_default(),
    }
}

impl ModelBackend {
    pub(super) fn observe(&self, t: Thread, addr: u64, len: u64) -> BackendResult<Observation> {
        let (mm, cpu) = self.thread(t)?;
        let page = mm.page_info(addr);
        let range = mm.range_info(addr, addr + len);
        let process = process_info(&mm, addr);
        // The byte, where a read is allowed (the host reads only those).
        let mut byte = [0u8];
        if page.present && process.vma.flags & foliomm::internals::mm::VmaInfo::READ != 0 {
            cpu.lock().unwrap().read(&mm, addr, &mut byte)?;
        }
        let (pgtables_kb, vma_count) = (mm.pgtables_kb(), mm.map_count());
        let thp_allowed_order = thp_hint::order_the_vma_missed(self.m(), &mm, addr, &page);
        let o = Observation {
            page,
            range,
            byte: byte[0],
            pgtables_kb,
            vma_count,
            addr,
            process,
            thp_allowed_order,
            ..Default::default()
        };
        match self.m().kernel.config.soft_dirty {
            true => Ok(o),
            false => Ok(o.unsupported("soft_dirty")),
        }
    }

    pub(super) fn peek(&self, t: Thread, addr: u64) -> BackendResult<Peek> {
        let mm = self.mm_of(t)?;
        let page = mm.page_peek(addr);
        let byte = if page.present { self.m().phys.read_byte(page.pfn, (addr % PAGE_SIZE) as usize) } else { 0 };
        let vma = mm.vmas().into_iter().find(|v| v.contains(addr));
        // mincore of a hugetlb mapping reports its entry, not the cache.
        let hugetlb = vma.as_ref().is_some_and(|v| v.is_hugetlb());
        let file_page = vma.and_then(|v| Some((v.file()?, v.page_index(addr))));
        let in_cache = |(inode, index): (Arc<Inode>, u64)| {
            inode.get_cached(index).is_some_and(|(f, _)| {
                self.m().kernel.folio_put_refs(f, 1);
                true
            })
        };
        let cached = if hugetlb { page.present } else { file_page.is_some_and(in_cache) };
        Ok(Peek { page, byte, cached, fields: mm.folio_fields(addr) })
    }

    pub(super) fn observe_pin(&self, pin: u64) -> BackendResult<Observation> {
        let pins = self.pins.lock().unwrap();
        let p = pins.1.get(&pin).ok_or(Errno::EINVAL)?;
        let m = self.m();
        let pfn = p.frames.first().copied().flatten().unwrap_or(m.zero_pfn);
        let f = foliomm::internals::folio::Folio::containing(&m.phys, pfn);
        let page = foliomm::internals::mm::PageInfo {
            present: true,
            pfn,
            zero_page: f.is_zero_page(),
            folio_order: f.order(),
            refcount: f.refcount() as u64,
            ..Default::default()
        };
        let byte = m.phys.read_byte(pfn, (p.addr % 4096) as usize);
        Ok(Observation { page, byte, via_gup: true, ..Default::default() })
    }
}
