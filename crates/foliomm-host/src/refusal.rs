//! The settings the host kernel cannot honour, and why: a scenario that
//! needs one is skipped on the host with that reason.

use foliomm::internals::mapcount::Design;
use foliomm_scenario::lang::MachineSetting;

use crate::{memcg, procfs, release, swap, sysfs};

/// Why the host cannot run under `s`, or `None` when it can (for a memory
/// limit, a swap device or NUMA nodes: when this machine allows it).
pub(crate) fn refusal(s: &MachineSetting) -> Option<String> {
    let why = match s {
        MachineSetting::Memory(_) => "the host's memory size is fixed",
        MachineSetting::MemoryAtLeast(m) if procfs::mem_total() < *m => "the host has less memory",
        MachineSetting::Mapcount(d) if *d != Design::of_release(release::version()) => {
            let design = Design::of_release(release::version());
            return Some(format!("cannot honour '{s}': the host kernel tracks mapcounts as {design}"));
        }
        MachineSetting::Kernel(v) if *v != release::version() => {
            return Some(format!("cannot honour '{s}': the host kernel is Linux {}", release::version()));
        }
        MachineSetting::RmapIdStage(_) => "seed 000's stages exist in the model only (the RFC was never merged)",
        MachineSetting::CompoundLock(_) => {
            "seed 003's compound lock exists in the model only (it never reached a release)"
        }
        MachineSetting::Zap(z) if *z != foliomm::internals::machine::ZapStrategy::Batched => {
            "the host kernel zaps batched"
        }
        MachineSetting::VmaLock(d) if *d != foliomm::internals::machine::VmaLockDesign::VmaRefcount => {
            "the host kernel locks VMAs by reference count (vma-refcount)"
        }
        MachineSetting::VmaLayout(l) if *l != foliomm::internals::machine::VmaLayout::Design => {
            "the host kernel's vm_area_struct is laid out as its release does (design)"
        }
        MachineSetting::HugetlbSync(d) if *d != foliomm::internals::machine::HugetlbSync::VmaLock => {
            "the host kernel synchronizes hugetlb faults with the hugetlb VMA lock (vma-lock)"
        }
        MachineSetting::Tlb(_) => "the host's TLB is hardware",
        MachineSetting::InitOnFree(on) if *on != procfs::init_on_free() => {
            return Some(format!(
                "cannot honour '{s}': init_on_free is a boot parameter, and this host booted with it {}",
                if procfs::init_on_free() { "on" } else { "off" }
            ));
        }
        MachineSetting::PageMapcount(on) if *on == procfs::no_page_mapcount() => {
            return Some(format!(
                "cannot honour '{s}': per-page mapcounts are a build option, and this host's kernel was built {}",
                if procfs::no_page_mapcount() { "without them" } else { "with them (CONFIG_PAGE_MAPCOUNT)" }
            ));
        }
        MachineSetting::SoftDirty(on) if *on != procfs::soft_dirty() => {
            return Some(format!(
                "cannot honour '{s}': soft-dirty tracking is a build option, and this host's kernel was built {}",
                if procfs::soft_dirty() { "with it (CONFIG_MEM_SOFT_DIRTY)" } else { "without it" }
            ));
        }
        MachineSetting::GatherLimit(Some(_)) => "Linux limits an mmu_gather by its slots, not by a page count",
        MachineSetting::Debug(_) => "debug switches break the model, not the kernel",
        MachineSetting::MmIds(_) => "the host kernel's MM ID space cannot be limited",
        MachineSetting::MaxMapCount(n) if Some(*n) != sysfs::max_map_count() => {
            "vm.max_map_count is system-wide: changing it would limit every process on the machine"
        }
        MachineSetting::MemoryLimit(_) => match memcg::unavailable() {
            Some(why) => return Some(format!("cannot honour '{s}': {why}")),
            None => return None,
        },
        MachineSetting::Nodes(n) if procfs::memory_nodes() < *n => {
            return Some(format!(
                "cannot honour '{s}': the machine has {} NUMA node(s) with memory",
                procfs::memory_nodes()
            ));
        }
        MachineSetting::Swap(_) => match swap::unavailable() {
            Some(why) => return Some(format!("cannot honour '{s}': {why}")),
            None => return None,
        },
        _ => return None,
    };
    Some(format!("cannot honour '{s}': {why}"))
}
