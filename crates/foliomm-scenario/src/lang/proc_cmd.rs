//! The commands a process runs (`NAME: ...`): mapping and unmapping,
//! files, protection and advice, remapping, fork and exit, accesses,
//! observations and pins.

use foliomm::internals::folio::thp::ShmemHuge;
use foliomm::internals::machine::HugeSize;
use foliomm::internals::mm::Advice;
use foliomm::internals::mm_types::Prot;
use foliomm::internals::shmem::seals::SEAL_NAMES;

use super::ast::{Cmd, ParseError};
use super::lexer::{parse_size, Line};
use crate::observation::Observation;
use crate::op::{FileKind, GupKind};

/// CPUs a thread may be put on (`cpu N`): the model's per-CPU slots.
const MAX_CPUS: u32 = foliomm::internals::phys::NR_PCP as u32;

pub(super) fn parse_proc_cmd(l: &mut Line) -> Result<Cmd, ParseError> {
    if l.toks.get(l.pos + 1).is_some_and(|t| t.text == "=") {
        return parse_assignment(l);
    }
    let col = l.col();
    let verb = l.next("a command")?;
    Ok(match verb {
        "munmap" => Cmd::Munmap(l.place()?),
        "mprotect" => Cmd::Mprotect(l.place()?, l.prot()?),
        "mlock" => Cmd::Mlock(l.place()?, true),
        "munlock" => Cmd::Mlock(l.place()?, false),
        "clear_refs" => {
            let col = l.col();
            if !l.eat("soft_dirty") {
                return l.err(col, "expected 'soft_dirty' (clear_refs soft_dirty: echo 4 > /proc/PID/clear_refs)");
            }
            Cmd::ClearSoftDirty
        }
        "cpu" => {
            let col = l.col();
            let t = l.next("a CPU number")?;
            match t.parse::<u32>() {
                Ok(n) if n < MAX_CPUS => Cmd::SetCpu(n),
                _ => return l.err(col, format!("expected a CPU number from 0 to {}, found '{t}'", MAX_CPUS - 1)),
            }
        }
        "split" => {
            let p = l.place()?;
            let order = if l.eat("to") {
                let col = l.col();
                if !l.eat("order") {
                    return l.err(col, "expected 'order' (split PLACE to order N)");
                }
                let col = l.col();
                let t = l.next("an order")?;
                match t.parse::<u32>() {
                    Ok(n) if n < 9 => n,
                    _ => return l.err(col, format!("expected an order from 0 to 8 (below a PMD's), found '{t}'")),
                }
            } else {
                0
            };
            let at = if l.eat("at") {
                let col = l.col();
                let t = l.next("a page offset in the folio")?;
                match t.parse::<u64>() {
                    Ok(n) if n < 512 => Some(n),
                    _ => return l.err(col, format!("expected a page offset in a folio, 0 to 511, found '{t}'")),
                }
            } else {
                None
            };
            Cmd::Split(p, order, at)
        }
        "move_pages" => super::numa_cmd::parse_move_pages(l)?,
        "mbind" => super::numa_cmd::parse_mbind(l)?,
        "numa_scan" => Cmd::NumaScan(l.place()?),
        "madvise" => {
            let p = l.place()?;
            let col = l.col();
            let t = l.next("an advice")?;
            match Advice::parse(t) {
                Some(a) => Cmd::Madvise(p, a),
                None => {
                    let names: Vec<&str> = Advice::ALL.iter().map(|&(_, n)| n).collect();
                    return l.err(col, format!("expected an advice ({}), found '{t}'", names.join(", ")));
                }
            }
        }
        "truncate" => Cmd::Truncate { file: l.ident("a file")?, size: l.size("a file size")? },
        "close" => Cmd::Close(l.ident("a file")?),
        "unlink" => Cmd::Unlink(l.ident("a file")?),
        "shmdt" => Cmd::ShmDt(l.ident("an attached segment's mapping")?),
        "shmrm" => Cmd::ShmRm(l.ident("a segment")?),
        "seal" => parse_seal(l)?,
        "punch" => {
            let (file, offset, len) = file_range(l)?;
            Cmd::Punch { file, offset, len }
        }
        "fallocate" => {
            let (file, offset, len) = file_range(l)?;
            Cmd::Fallocate { file, offset, len, keep_size: l.eat("keep_size") }
        }
        "pread" => {
            let (file, offset, len) = file_range(l)?;
            Cmd::Pread { file, offset, len }
        }
        "pwrite" => {
            let (file, offset, len) = file_range(l)?;
            let col = l.col();
            match l.value()? {
                Some(val) => Cmd::Pwrite { file, offset, len, val },
                None => return l.err(col, "expected '= VALUE' after the file range"),
            }
        }
        "fork" => Cmd::Fork(l.ident("the child's name")?),
        "exit" => Cmd::Exit,
        "wait" => Cmd::Wait(l.ident("the child's name")?),
        "write" | "fill" => {
            let place = l.place()?;
            if verb == "fill" && l.eat("pattern") {
                let col = l.col();
                let seed = match l.peek() {
                    None => 0,
                    Some(t) => match parse_size(t).filter(|&v| v <= 255) {
                        Some(v) => {
                            l.pos += 1;
                            v as u8
                        }
                        None => return l.err(col, format!("expected a pattern seed 0..=255, found '{t}'")),
                    },
                };
                Cmd::Pattern { place, seed }
            } else {
                Cmd::Write { place, val: l.value()?, every_byte: verb == "fill" }
            }
        }
        "read" | "verify" => Cmd::Read { place: l.place()?, every_byte: verb == "verify" },
        "unpin" => Cmd::Unpin(l.ident("the pin to release")?),
        v if super::uffd_cmd::VERBS.contains(&v) => super::uffd_cmd::parse_uffd(l, v)?,
        "observe" if l.peek() == Some("pin") => {
            l.pos += 1;
            let pin = l.ident("a pin")?;
            let col = l.col();
            if !l.eat("as") {
                return l.err(col, "expected 'as NAME' after the pin to observe");
            }
            Cmd::ObservePin { pin, name: l.ident("an observation name")? }
        }
        "observe" if l.eat("zero_page") => {
            let col = l.col();
            if !l.eat("as") {
                return l.err(col, "expected 'as NAME' after zero_page");
            }
            Cmd::Query { op: crate::op::Op::ObserveZeroPage, name: l.ident("an observation name")? }
        }
        "observe" => {
            let place = l.place()?;
            let col = l.col();
            if !l.eat("as") {
                return l.err(col, "expected 'as NAME' after the place to observe");
            }
            let name = l.ident("an observation name")?;
            Cmd::Observe { place, name, except: parse_except(l)? }
        }
        t => return l.err(col, unknown_command(t)),
    })
}

/// The commands a process runs as they are (`P: munmap a`).
const COMMANDS: &[&str] = &[
    "munmap",
    "mprotect",
    "mlock",
    "munlock",
    "split",
    "move_pages",
    "mbind",
    "numa_scan",
    "madvise",
    "truncate",
    "close",
    "unlink",
    "shmdt",
    "shmrm",
    "seal",
    "punch",
    "fallocate",
    "pread",
    "pwrite",
    "fork",
    "clear_refs",
    "exit",
    "wait",
    "write",
    "fill",
    "read",
    "verify",
    "unpin",
    "observe",
    "uffd_register",
    "uffd_unregister",
    "uffd_copy",
    "uffd_zeropage",
    "uffd_continue",
    "uffd_wp",
    "uffd_move",
    "on",
];

/// The commands that name what they make (`P: a = mmap 64K`).
const ASSIGNED: &[&str] = &["mmap", "memfd", "tmpfs", "shmget", "shmat", "mremap", "pin", "get", "userfaultfd"];

/// Whether `t` is a process's command, named or not.
pub(super) fn is_command(t: &str) -> bool {
    COMMANDS.contains(&t) || ASSIGNED.contains(&t)
}

/// The lines that belong to no process (`repeat 3`, not `P: repeat 3`).
pub(super) const GLOBAL: &[&str] = &["set", "expect", "khugepaged", "ksmd", "measure", "repeat", "parallel", "end"];

/// What a process line whose command is `t` is told: how to write a
/// command that names what it makes, that a global line takes no process,
/// or the closest command.
fn unknown_command(t: &str) -> String {
    if ASSIGNED.contains(&t) {
        return format!("'{t}' names what it makes: write 'PROCESS: NAME = {t} ...' (as in 'P: a = {t} ...')");
    }
    if GLOBAL.contains(&t) {
        return format!("'{t}' is not a process's command: write the line without 'PROCESS:' (as '{t} ...')");
    }
    let hint = super::suggest::did_you_mean(t, COMMANDS.iter().chain(ASSIGNED).copied());
    format!(
        "expected a command, found '{t}'{hint} (commands: {}; and NAME = {})",
        COMMANDS.join(", "),
        ASSIGNED.join(" | ")
    )
}

/// `[except FIELD...]` after an observation: fields not to record.
fn parse_except(l: &mut Line) -> Result<Vec<String>, ParseError> {
    let mut except = Vec::new();
    if !l.eat("except") {
        return Ok(except);
    }
    while l.peek().is_some() {
        let col = l.col();
        let f = l.ident("a field")?;
        if !Observation::field_names().any(|n| n == f) {
            let all = Observation::field_names().collect::<Vec<_>>().join(", ");
            let hint = super::suggest::did_you_mean(&f, Observation::field_names());
            return l.err(col, format!("expected an observation field, found '{f}'{hint} (fields: {all})"));
        }
        except.push(f);
    }
    match except.is_empty() {
        true => l.err(l.col(), "expected the fields not to record after 'except'"),
        false => Ok(except),
    }
}

/// `NAME = ...`: a step that names what it makes (a mapping, a file, a pin).
fn parse_assignment(l: &mut Line) -> Result<Cmd, ParseError> {
    let name = l.ident("a mapping name")?;
    l.pos += 1;
    let col = l.col();
    match l.next("mmap, memfd, tmpfs, shmget, shmat, mremap, pin, get or userfaultfd")? {
        "mmap" => parse_mmap(l, name, col),
        "memfd" => {
            let size = l.size("a file size")?;
            let kind = match l.peek() {
                Some(t) if t.starts_with("hugetlb") => FileKind::Hugetlbfs(huge_size(l)?),
                _ => FileKind::Memfd,
            };
            Ok(Cmd::CreateFile { name, size, kind })
        }
        "tmpfs" => parse_tmpfs(l, name),
        "shmget" => {
            let size = l.size("a segment size")?;
            let hugetlb = match l.peek() {
                Some(t) if t.starts_with("hugetlb") => Some(huge_size(l)?),
                _ => None,
            };
            Ok(Cmd::ShmGet { name, size, hugetlb })
        }
        "shmat" => Ok(Cmd::ShmAt { name, shm: l.ident("a segment")?, readonly: l.eat("r") }),
        "mremap" => parse_mremap(l, name),
        "pin" => {
            let place = l.place()?;
            let (mut write, mut longterm) = (false, false);
            while let Some(t) = l.peek() {
                match t {
                    "write" => write = true,
                    "longterm" => longterm = true,
                    _ => return l.err(l.col(), format!("expected 'write' or 'longterm', found '{t}'")),
                }
                l.pos += 1;
            }
            Ok(Cmd::Pin { name, place, kind: GupKind::Pin { write, longterm } })
        }
        "get" => Ok(Cmd::Pin { name, place: l.place()?, kind: GupKind::Get }),
        "userfaultfd" => super::uffd_cmd::parse_userfaultfd(l, name),
        t if COMMANDS.contains(&t) => l.err(col, format!("'{t}' makes nothing to name: write 'PROCESS: {t} ...'")),
        t => {
            let hint = super::suggest::did_you_mean(t, ASSIGNED.iter().copied());
            let all = ASSIGNED.join(", ");
            l.err(col, format!("expected one of {all}, found '{t}'{hint}"))
        }
    }
}

/// `NAME = mmap LEN [options]`, after the `mmap`.
fn parse_mmap(l: &mut Line, name: String, col: usize) -> Result<Cmd, ParseError> {
    let len_col = l.col();
    let bare = l.peek().is_some_and(|t| t.bytes().all(|b| b.is_ascii_digit()));
    let len = l.size("a length")?;
    // A bare number counts bytes: `mmap 64` is rarely meant as 64 bytes.
    if bare && len % 4096 != 0 {
        return l.err(
            len_col,
            format!("a length of {len} bytes is not a whole number of pages: write {len}K for KiB (a bare number counts bytes)"),
        );
    }
    let (mut prot, mut populate, mut at, mut fixed, mut align) = (Prot::RW, false, None, false, None);
    let (mut shared, mut file, mut offset, mut hugetlb, mut noreserve) = (false, None, 0, None, false);
    let mut locked = false;
    while let Some(t) = l.peek() {
        match t {
                _ if Prot::parse(t).is_some() => prot = Prot::parse(t).unwrap(),
                "populate" => populate = true,
                "fixed" => fixed = true,
                "shared" => shared = true,
                _ if t.starts_with("hugetlb") => {
                    hugetlb = Some(huge_size(l)?);
                    continue;
                }
                "noreserve" => noreserve = true,
                "locked" => locked = true,
                "anon" | "private" => {}
                "file" => {
                    l.pos += 1;
                    file = Some(l.ident("a file name")?);
                    continue;
                }
                "offset" => {
                    l.pos += 1;
                    let col = l.col();
                    offset = l.size("a file offset")?;
                    if offset % 4096 != 0 {
                        return l.err(col, format!("expected a file offset that is a multiple of 4K, found {offset:#x}"));
                    }
                    continue;
                }
                "at" => {
                    l.pos += 1;
                    at = Some(l.size("an address")?);
                    continue;
                }
                "align" => {
                    l.pos += 1;
                    let col = l.col();
                    let a = l.size("an alignment")?;
                    if !a.is_power_of_two() || a < 4096 {
                        return l.err(col, format!("expected a power-of-two alignment of at least 4K, found {a:#x}"));
                    }
                    align = Some(a);
                    continue;
                }
                _ => {
                    return l.err(
                        l.col(),
                        format!("expected a protection (r, rw, none), populate, locked, fixed, anon, private, shared, hugetlb, noreserve, 'file F', 'offset OFF', 'at ADDR' or 'align SIZE', found '{t}'"),
                    )
                }
            }
        l.pos += 1;
    }
    if fixed && at.is_none() {
        return l.err(col, "'fixed' needs 'at ADDR'");
    }
    if align.is_some() && at.is_some() {
        return l.err(col, "'align' and 'at' exclude each other");
    }
    if offset != 0 && file.is_none() {
        return l.err(col, "'offset' needs 'file F'");
    }
    Ok(Cmd::Mmap { name, len, prot, populate, at, fixed, align, shared, file, offset, hugetlb, noreserve, locked })
}

/// `NAME = tmpfs SIZE [huge=MODE] [unlinked]`, after the `tmpfs`.
fn parse_tmpfs(l: &mut Line, name: String) -> Result<Cmd, ParseError> {
    let size = l.size("a file size")?;
    let (mut huge, mut named) = (ShmemHuge::Never, true);
    while let Some(t) = l.peek() {
        let col = l.col();
        match t.strip_prefix("huge=").map(ShmemHuge::parse) {
            Some(Some(h)) if !matches!(h, ShmemHuge::Deny | ShmemHuge::Force) => huge = h,
            _ if t == "unlinked" => named = false,
            _ => return l.err(col, format!("expected huge=never|always|within_size|advise or unlinked, found '{t}'")),
        }
        l.pos += 1;
    }
    Ok(Cmd::CreateFile { name, size, kind: FileKind::Tmpfs { huge, named } })
}

/// `seal FILE SEAL...`, after the `seal`: one or more `F_SEAL_*` names.
fn parse_seal(l: &mut Line) -> Result<Cmd, ParseError> {
    let file = l.ident("a file")?;
    let mut seals = 0;
    loop {
        let col = l.col();
        let t = l.next("a seal (seal, shrink, grow, write, future_write)")?;
        match SEAL_NAMES.iter().find(|(n, _)| *n == t) {
            Some((_, bit)) => seals |= bit,
            None => return l.err(col, format!("expected seal, shrink, grow, write or future_write, found '{t}'")),
        }
        if l.peek().is_none() {
            return Ok(Cmd::Seal { file, seals });
        }
    }
}

/// `NAME = mremap PLACE [size LEN] [to MAPPING]`, after the `mremap`.
fn parse_mremap(l: &mut Line, name: String) -> Result<Cmd, ParseError> {
    let from = l.place()?;
    let (mut size, mut to, mut dontunmap) = (None, None, false);
    while let Some(t) = l.peek() {
        l.pos += 1;
        match t {
            "size" => size = Some(l.size("a new size")?),
            "to" => to = Some(l.ident("a mapping to move onto")?),
            "dontunmap" => dontunmap = true,
            _ => {
                let col = l.col() - t.len() - 1;
                return l.err(col, format!("expected 'size LEN', 'to MAPPING' or 'dontunmap', found '{t}'"));
            }
        }
    }
    Ok(Cmd::Mremap { name, from, size, to, dontunmap })
}

/// A file and a non-empty byte range of it, written `f[4K..12K]`.
fn file_range(l: &mut Line) -> Result<(String, u64, u64), ParseError> {
    let col = l.col();
    let p = l.place()?;
    match p.range.filter(|(s, e)| s < e) {
        Some((s, e)) => Ok((p.map, s, e - s)),
        None => l.err(col, "expected a file range like f[4K..12K]"),
    }
}

/// `hugetlb` (2 MiB pages) or `hugetlb=2M` / `hugetlb=1G`: the page size
/// of a hugetlb mapping or file.
fn huge_size(l: &mut Line) -> Result<HugeSize, ParseError> {
    let col = l.col();
    let t = l.next("hugetlb")?;
    match t.strip_prefix("hugetlb") {
        Some("") => Ok(HugeSize::Pmd),
        Some(v) => match v.strip_prefix('=').and_then(parse_size).and_then(HugeSize::of_bytes) {
            Some(size) => Ok(size),
            None => l.err(col, format!("expected hugetlb, hugetlb=2M or hugetlb=1G, found '{t}'")),
        },
        None => l.err(col, format!("expected hugetlb, found '{t}'")),
    }
}
