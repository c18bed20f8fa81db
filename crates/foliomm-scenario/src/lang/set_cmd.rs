//! The `set` lines: machine settings and tunables, each checked as the
//! settings table ([`super::settings`]) describes it.

use foliomm::internals::folio::thp::khugepaged::KhugepagedKnob;
use foliomm::internals::folio::thp::{ShmemHuge, ShmemMode, ThpMode};
use foliomm::internals::machine::{HugeSize, HugetlbSync, VmaLayout, VmaLockDesign, ZapStrategy};
use foliomm::internals::mapcount::{CompoundLock, Design, RmapIdStage};

use super::ast::{Cmd, ParseError, Tunable};
use super::lexer::{parse_size, Line};
use super::machine_setting::MachineSetting;
use super::settings;

/// The most TLB entries per CPU `set tlb` takes (real TLBs hold a few
/// thousand; the table is allocated per CPU).
pub const MAX_TLB_ENTRIES: u64 = 1 << 20;

/// A model RAM size, within [`foliomm::internals::machine::MEMORY_RANGE`].
fn memory_size(l: &mut Line) -> Result<u64, ParseError> {
    let col = l.col();
    let bytes = l.size("a memory size")?;
    let range = foliomm::internals::machine::MEMORY_RANGE;
    if range.contains(&bytes) {
        return Ok(bytes);
    }
    l.err(col, format!("expected a memory size from 4M to 1T, found {bytes} bytes"))
}

/// `set shmem enabled=MODE SIZE=MODE...`: `shmem_enabled` (always,
/// within_size, advise, never, deny, force) and the per-size modes
/// (always, inherit, within_size, advise, never) for 8K to 2M.
/// `set NAME VALUE`, after the `set`: a setting of the table in
/// [`super::settings`].
pub(super) fn parse_set(l: &mut Line) -> Result<Cmd, ParseError> {
    let col = l.col();
    match l.next(&format!("a setting ({})", settings::names(None)))? {
        "memory" if l.eat("at") => {
            let col = l.col();
            if !l.eat("least") {
                return l.err(col, "expected 'least' (set memory at least SIZE)");
            }
            Ok(Cmd::SetMachine(MachineSetting::MemoryAtLeast(memory_size(l)?)))
        }
        "memory" if l.eat("limit") => Ok(Cmd::SetMachine(MachineSetting::MemoryLimit(memory_size(l)?))),
        "memory" => Ok(Cmd::SetMachine(MachineSetting::Memory(memory_size(l)?))),
        "mapcount" => {
            let d = named(l, "mapcount design", Design::parse, &Design::names())?;
            Ok(Cmd::SetMachine(MachineSetting::Mapcount(d)))
        }
        "kernel" => {
            let col = l.col();
            match l.next("a kernel release (like 6.8)")?.parse() {
                Ok(v) => Ok(Cmd::SetMachine(MachineSetting::Kernel(v))),
                Err(why) => l.err(col, why),
            }
        }
        "compound_lock" => {
            let lock = named(l, "compound lock", CompoundLock::parse, &CompoundLock::names())?;
            Ok(Cmd::SetMachine(MachineSetting::CompoundLock(lock)))
        }
        "rmap_id_stage" => {
            let s = named(l, "seed 000 stage", RmapIdStage::parse, &RmapIdStage::names())?;
            Ok(Cmd::SetMachine(MachineSetting::RmapIdStage(s)))
        }
        "tlb" => {
            let col = l.col();
            match l.size("a number of TLB entries")? {
                n if n <= MAX_TLB_ENTRIES => Ok(Cmd::SetMachine(MachineSetting::Tlb(n))),
                n => l.err(col, format!("expected at most {MAX_TLB_ENTRIES} TLB entries per CPU, found {n}")),
            }
        }
        "debug" => Ok(Cmd::SetMachine(MachineSetting::Debug(l.ident("a debug switch")?))),
        "mm_ids" => Ok(Cmd::SetMachine(MachineSetting::MmIds(l.size("a number of MM IDs")?))),
        "swap" => {
            let col = l.col();
            match l.size("a swap size")? {
                b if (64 << 10..=64 << 30).contains(&b) && b % 4096 == 0 => {
                    Ok(Cmd::SetMachine(MachineSetting::Swap(b)))
                }
                b => l.err(col, format!("expected a swap size from 64K to 64G in whole pages, found {b}")),
            }
        }
        "nodes" => {
            let col = l.col();
            match l.size("a number of NUMA nodes")? {
                n if (1..=8).contains(&n) => Ok(Cmd::SetMachine(MachineSetting::Nodes(n))),
                n => l.err(col, format!("expected 1 to 8 NUMA nodes, found {n}")),
            }
        }
        "sim_cpus" => {
            let col = l.col();
            match l.size("a number of simulated CPUs")? {
                n if (1..=64).contains(&n) => Ok(Cmd::SetMachine(MachineSetting::SimCpus(n))),
                n => l.err(col, format!("expected 1 to 64 simulated CPUs, found {n}")),
            }
        }
        "max_map_count" => {
            // The sysctl takes 0 to INT_MAX.
            let col = l.col();
            match l.size("a number of VMAs")? {
                n if n <= i32::MAX as u64 => Ok(Cmd::SetMachine(MachineSetting::MaxMapCount(n))),
                n => l.err(col, format!("expected at most {} VMAs, found {n}", i32::MAX)),
            }
        }
        "zap" => {
            Ok(Cmd::SetMachine(MachineSetting::Zap(named(l, "zap strategy", ZapStrategy::parse, "batched, per-page")?)))
        }
        "vma_lock" => Ok(Cmd::SetMachine(MachineSetting::VmaLock(named(
            l,
            "VMA-lock design",
            VmaLockDesign::parse,
            "mmap-lock, vma-rwsem, vma-refcount",
        )?))),
        "vma_layout" => Ok(Cmd::SetMachine(MachineSetting::VmaLayout(named(
            l,
            "VMA layout",
            VmaLayout::parse,
            "design, embedded",
        )?))),
        "hugetlb_sync" => Ok(Cmd::SetMachine(MachineSetting::HugetlbSync(named(
            l,
            "hugetlb synchronization design",
            HugetlbSync::parse,
            "i-mmap-rwsem, vma-lock, no-lock",
        )?))),
        "frames" => {
            let col = l.col();
            match l.next("sparse or dense")? {
                "sparse" => Ok(Cmd::SetMachine(MachineSetting::DenseFrames(false))),
                "dense" => Ok(Cmd::SetMachine(MachineSetting::DenseFrames(true))),
                t => l.err(col, format!("expected sparse or dense, found '{t}'")),
            }
        }
        "init_on_free" => Ok(Cmd::SetMachine(MachineSetting::InitOnFree(on_off(l)?))),
        "page_mapcount" => Ok(Cmd::SetMachine(MachineSetting::PageMapcount(on_off(l)?))),
        "soft_dirty" => Ok(Cmd::SetMachine(MachineSetting::SoftDirty(on_off(l)?))),
        "gather_limit" => {
            if l.eat("off") {
                return Ok(Cmd::SetMachine(MachineSetting::GatherLimit(None)));
            }
            let col = l.col();
            match l.size("a number of pages, or off")? {
                0 => l.err(col, "expected at least 1 page (or off)".to_string()),
                n => Ok(Cmd::SetMachine(MachineSetting::GatherLimit(Some(n)))),
            }
        }
        "check" => {
            let col = l.col();
            match l.next("on or off")? {
                "on" => Ok(Cmd::SetCheck(true)),
                "off" => Ok(Cmd::SetCheck(false)),
                t => l.err(col, format!("expected on or off, found '{t}'")),
            }
        }
        "thp" => parse_thp(l),
        "shmem" => parse_shmem(l),
        "hugetlb" => parse_hugetlb(l),
        "hugetlb_optimize_vmemmap" => Ok(Cmd::Tune(Tunable::HugetlbVmemmap(on_off(l)?))),
        "khugepaged" => parse_khugepaged(l),
        t => l.err(col, settings::unknown(t)),
    }
}

/// `set khugepaged KNOB=N...`, after the `khugepaged`: `max_ptes_none`,
/// `max_ptes_swap`, `max_ptes_shared` (0 to 511) and `pages_to_scan` (1 or
/// more), as their sysfs stores take them.
fn parse_khugepaged(l: &mut Line) -> Result<Cmd, ParseError> {
    let mut knobs = Vec::new();
    let names = || KhugepagedKnob::ALL.map(|k| k.name()).join(", ");
    while l.peek().is_some() || knobs.is_empty() {
        let col = l.col();
        let t = l.next("a khugepaged setting (KNOB=N)")?;
        let Some((k, v)) = t.split_once('=') else {
            return l.err(col, format!("expected KNOB=N ({}), found '{t}'", names()));
        };
        let Some(knob) = KhugepagedKnob::parse(k) else {
            return l.err(col, format!("expected one of {}, found '{k}'", names()));
        };
        match v.parse::<u32>() {
            Ok(n) if knob.valid(n) => knobs.push((knob, n)),
            _ => {
                let range = if knob == KhugepagedKnob::PagesToScan { "1 or more" } else { "0 to 511" };
                return l.err(col + k.len() + 1, format!("expected a number from {range} for {k}, found '{v}'"));
            }
        }
    }
    Ok(Cmd::Tune(Tunable::Khugepaged(knobs)))
}

/// `set hugetlb pages=N [overcommit=N] [size=2M|1G]`, after the `hugetlb`.
fn parse_hugetlb(l: &mut Line) -> Result<Cmd, ParseError> {
    let col = l.col();
    let t = l.next("pages=N")?;
    let Some(pages) = t.strip_prefix("pages=").and_then(parse_size) else {
        return l.err(col, format!("expected pages=N (the pool's nr_hugepages), found '{t}'"));
    };
    let (mut overcommit, mut size) = (None, HugeSize::Pmd);
    while let Some(t) = l.peek() {
        let col = l.col();
        if let Some(v) = t.strip_prefix("size=") {
            let Some(s) = parse_size(v).and_then(HugeSize::of_bytes) else {
                return l.err(col, format!("expected size=2M or size=1G, found '{t}'"));
            };
            size = s;
        } else {
            overcommit = t.strip_prefix("overcommit=").and_then(parse_size);
            if overcommit.is_none() {
                return l
                    .err(col, format!("expected overcommit=N (nr_overcommit_hugepages) or size=2M|1G, found '{t}'"));
            }
        }
        l.pos += 1;
    }
    if size == HugeSize::Pud && overcommit.is_some_and(|n| n > 0) {
        return l.err(col, "1 GiB huge pages cannot be overcommitted (Linux: EINVAL)");
    }
    Ok(Cmd::Tune(Tunable::Hugetlb { pages, overcommit, size }))
}

fn parse_shmem(l: &mut Line) -> Result<Cmd, ParseError> {
    let (mut enabled, mut sizes) = (None, Vec::new());
    while l.peek().is_some() {
        let col = l.col();
        let t = l.next("a shmem setting")?;
        let Some((k, v)) = t.split_once('=') else {
            return l.err(col, format!("expected KEY=MODE (enabled=always, 2048K=inherit), found '{t}'"));
        };
        let vcol = col + k.len() + 1;
        if k == "enabled" {
            let Some(mode) = ShmemHuge::parse(v) else {
                return l.err(vcol, format!("expected always, within_size, advise, never, deny or force, found '{v}'"));
            };
            enabled = Some(mode);
            continue;
        }
        let order = parse_size(k)
            .filter(|s| s.is_power_of_two() && *s >= 8 << 10 && *s <= 2 << 20)
            .map(|s| s.trailing_zeros() - 12);
        let Some(order) = order else {
            return l.err(col, format!("expected 'enabled' or a folio size from 8K to 2M, found '{k}'"));
        };
        match ShmemMode::parse(v) {
            Some(m) => sizes.push((order, m)),
            None => return l.err(vcol, format!("expected always, inherit, within_size, advise or never, found '{v}'")),
        }
    }
    Ok(Cmd::Tune(Tunable::Shmem { enabled, sizes }))
}

fn parse_thp(l: &mut Line) -> Result<Cmd, ParseError> {
    let (mut enabled, mut sizes) = (None, Vec::new());
    while l.peek().is_some() {
        let col = l.col();
        let t = l.next("a THP setting")?;
        let Some((k, v)) = t.split_once('=') else {
            return l.err(col, format!("expected KEY=MODE (enabled=madvise, 64K=always), found '{t}'"));
        };
        let Some(mode) = ThpMode::parse(v) else {
            return l.err(col + k.len() + 1, format!("expected always, madvise, never or inherit, found '{v}'"));
        };
        if k == "enabled" {
            enabled = Some(mode);
            continue;
        }
        let order = parse_size(k)
            .filter(|s| s.is_power_of_two() && *s >= 16 << 10 && *s <= 2 << 20)
            .map(|s| s.trailing_zeros() - 12);
        match order {
            Some(o) => sizes.push((o, mode)),
            None => return l.err(col, format!("expected 'enabled' or a folio size from 16K to 2M, found '{k}'")),
        }
    }
    Ok(Cmd::Tune(Tunable::Thp { enabled, sizes }))
}

/// The next token as one of a strategy's names (`parse`); an unknown one is
/// an error at its column listing the `known` names.
fn named<T>(l: &mut Line, what: &str, parse: fn(&str) -> Option<T>, known: &str) -> Result<T, ParseError> {
    let col = l.col();
    let t = l.next(&format!("a {what}"))?;
    match parse(t) {
        Some(v) => Ok(v),
        None => l.err(col, format!("unknown {what} '{t}' (known: {known})")),
    }
}

/// `on` or `off`.
fn on_off(l: &mut Line) -> Result<bool, ParseError> {
    let col = l.col();
    match l.next("on or off")? {
        "on" => Ok(true),
        "off" => Ok(false),
        t => l.err(col, format!("expected on or off, found '{t}'")),
    }
}
