//! The workload language: one step per line.
//!
//! ```text
//! # comment                          blank lines and comments are ignored
//! set memory 64M                     model RAM (before the first process)
//! set mapcount mm-id                 mapcount design (before the first process)
//! set zap per-page                   zap strategy: batched or per-page (likewise)
//! set tlb 0                          entries per CPU TLB, 0 for none (likewise)
//! set debug no-large-reuse           a model debug switch (likewise)
//! set thp enabled=madvise 64K=always 2048K=inherit
//! set check on|off                   run the invariant checker after each step
//! P: a = mmap 4M rw [populate] [at 0x7f0000000000] [fixed] [align 64K]
//! P: munmap a[8K..12K]               a, a[OFF] (one page), a[START..END]
//! P: mprotect a[0..4K] r             r, rw, rwx, none
//! P: madvise a hugepage              hugepage nohugepage dontneed dontfork dofork
//! P: b = mremap a[8K..16K] [size 16K] [to c]
//! P: fork C                          C: exit        P: wait C
//! P: write a [= 0x5a]                one byte per page (default value: line-derived)
//! P: fill a[0..8K] [= 0x5a]          every byte
//! P: fill a pattern [SEED]           every byte from its address (and a seed)
//! P: read a                          one byte per page, checked against the reference
//! P: verify a                        every byte, checked against the reference
//! P: observe a[20K] as before        record frame, folio order, exclusive, RSS...
//! P: p = pin a[0..4K] [write] [longterm]   GUP pin (FOLL_PIN); `unpin p` releases it
//! P: g = get a[0..4K]                GUP reference (FOLL_GET, as vmsplice takes)
//! P: observe pin p as x              the first pinned page: frame, order, byte
//! expect after.frame == before.frame
//! expect stat.pgreuse >= 1
//! expect [mm-id] after.frame == before.frame   only under these mapcount designs
//! measure fault-all                  time the steps up to `end` (backend time only)
//! end
//! P: write a fails ENOMEM            the step must fail with that error
//! ```
//! A parse error names the line and column and what was expected.

use foliomm::machine::ZapStrategy;
use foliomm::mm::{Advice, Prot};
use foliomm::thp::ThpMode;
use foliomm::Errno;

use crate::backend::GupKind;

/// A parse error with its position (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {msg}")]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

/// A place in a mapping: the whole mapping, one page at an offset, or a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub map: String,
    /// Byte offsets into the mapping; `None` means the whole mapping.
    pub range: Option<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// A setting that shapes the machine; only before the first process step.
    SetMachine(MachineSetting),
    SetThp {
        enabled: Option<ThpMode>,
        sizes: Vec<(u32, ThpMode)>,
    },
    SetCheck(bool),
    /// Start timing the following steps (`measure NAME`).
    Measure(String),
    /// Stop timing (`end`).
    End,
    Mmap {
        name: String,
        len: u64,
        prot: Prot,
        populate: bool,
        at: Option<u64>,
        fixed: bool,
        /// Place the mapping at a multiple of this (over-allocate, then trim).
        align: Option<u64>,
    },
    Munmap(Place),
    Mprotect(Place, Prot),
    Madvise(Place, Advice),
    Mremap {
        name: String,
        from: Place,
        size: Option<u64>,
        to: Option<String>,
    },
    Fork(String),
    Exit,
    Wait(String),
    /// One byte per page (`every_byte` false) or every byte.
    Write {
        place: Place,
        val: Option<u8>,
        every_byte: bool,
    },
    /// Every byte from the address pattern with a seed.
    Pattern {
        place: Place,
        seed: u8,
    },
    Read {
        place: Place,
        every_byte: bool,
    },
    Observe {
        place: Place,
        name: String,
    },
    /// GUP references to a range: `NAME = pin PLACE [write] [longterm]`
    /// (FOLL_PIN) or `NAME = get PLACE` (FOLL_GET, as vmsplice takes).
    Pin {
        name: String,
        place: Place,
        kind: GupKind,
    },
    Unpin(String),
    /// Observe the first page a pin holds (`observe pin NAME as OBS`).
    ObservePin {
        pin: String,
        name: String,
    },
    Expect {
        lhs: Operand,
        op: CmpOp,
        rhs: Operand,
        /// Only under these mapcount designs (`expect [mm-id] ...`); all if empty.
        designs: Vec<String>,
    },
}

/// Settings fixed when the machine is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineSetting {
    /// Model RAM in bytes.
    Memory(u64),
    /// Mapcount design name.
    Mapcount(String),
    /// Zap strategy: `batched` or `per-page`.
    Zap(ZapStrategy),
    /// Entries per CPU TLB (0: no TLB).
    Tlb(u64),
    /// A model debug switch (see `foliomm::machine::DebugSwitches::NAMES`).
    Debug(String),
    /// The highest MM ID the allocator hands out (`set mm_ids N`), so that
    /// a scenario can run out of IDs.
    MmIds(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// `name.field` of an observation, or `stat.counter`.
    Field {
        obj: String,
        field: String,
    },
    Num(u64),
    Bool(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn holds(self, a: u64, b: u64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
    pub fn symbol(self) -> &'static str {
        ["==", "!=", "<", "<=", ">", ">="][self as usize]
    }
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub line: usize,
    pub text: String,
    /// The process that runs it (`None` for `set` and `expect`).
    pub proc: Option<String>,
    pub cmd: Cmd,
    /// The step must fail with this error.
    pub fails: Option<Errno>,
}

struct Tok<'a> {
    text: &'a str,
    col: usize,
}

struct Line<'a> {
    line: usize,
    toks: Vec<Tok<'a>>,
    pos: usize,
    end_col: usize,
}

impl<'a> Line<'a> {
    fn err<T>(&self, col: usize, msg: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError { line: self.line, col, msg: msg.into() })
    }
    fn col(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end_col, |t| t.col)
    }
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.pos).map(|t| t.text)
    }
    fn next(&mut self, what: &str) -> Result<&'a str, ParseError> {
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t.text)
            }
            None => self.err(self.end_col, format!("expected {what}, found the end of the line")),
        }
    }
    fn eat(&mut self, word: &str) -> bool {
        if self.peek() == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn done(&self) -> Result<(), ParseError> {
        match self.toks.get(self.pos) {
            Some(t) => self.err(t.col, format!("unexpected '{}'", t.text)),
            None => Ok(()),
        }
    }
    fn size(&mut self, what: &str) -> Result<u64, ParseError> {
        let col = self.col();
        let t = self.next(what)?;
        parse_size(t).ok_or_else(|| ParseError {
            line: self.line,
            col,
            msg: format!("expected {what} (like 4K, 2M, 0x1000), found '{t}'"),
        })
    }
    fn ident(&mut self, what: &str) -> Result<String, ParseError> {
        let col = self.col();
        let t = self.next(what)?;
        if is_ident(t) {
            Ok(t.to_string())
        } else {
            self.err(col, format!("expected {what} (a name), found '{t}'"))
        }
    }
    fn place(&mut self) -> Result<Place, ParseError> {
        let col = self.col();
        let t = self.next("a mapping (like a, a[4K] or a[0..8K])")?;
        parse_place(t).map_err(|msg| ParseError { line: self.line, col, msg })
    }
    fn prot(&mut self) -> Result<Prot, ParseError> {
        let col = self.col();
        let t = self.next("a protection (r, rw, rwx or none)")?;
        Prot::parse(t).ok_or_else(|| ParseError {
            line: self.line,
            col,
            msg: format!("expected a protection (r, rw, rwx or none), found '{t}'"),
        })
    }
    fn value(&mut self) -> Result<Option<u8>, ParseError> {
        if !self.eat("=") {
            return Ok(None);
        }
        let col = self.col();
        let t = self.next("a byte value")?;
        match parse_size(t).filter(|&v| v <= 255) {
            Some(v) => Ok(Some(v as u8)),
            None => self.err(col, format!("expected a byte value 0..=255, found '{t}'")),
        }
    }
    fn operand(&mut self) -> Result<Operand, ParseError> {
        let col = self.col();
        let t = self.next("an operand (name.field, a number, true or false)")?;
        if t == "true" || t == "false" {
            return Ok(Operand::Bool(t == "true"));
        }
        if let Some(n) = parse_size(t) {
            return Ok(Operand::Num(n));
        }
        match t.split_once('.') {
            // Counters may carry a size: stat.anon_fault_alloc[64K].
            Some((o, f))
                if is_ident(o) && (is_ident(f) || (o == "stat" && is_ident(f.split('[').next().unwrap_or("")))) =>
            {
                Ok(Operand::Field { obj: o.into(), field: f.into() })
            }
            _ => self.err(col, format!("expected name.field, a number, true or false, found '{t}'")),
        }
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Parses `4096`, `0x1000`, `4K`, `2M`, `1G`.
pub fn parse_size(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

fn parse_place(t: &str) -> Result<Place, String> {
    let Some((map, rest)) = t.split_once('[') else {
        return if is_ident(t) {
            Ok(Place { map: t.into(), range: None })
        } else {
            Err(format!("expected a mapping name, found '{t}'"))
        };
    };
    let inner = rest.strip_suffix(']').ok_or_else(|| format!("missing ']' in '{t}'"))?;
    if !is_ident(map) {
        return Err(format!("expected a mapping name before '[', found '{map}'"));
    }
    let bad = || format!("expected an offset (a[4K]) or a range (a[0..8K]) in '{t}'");
    let range = match inner.split_once("..") {
        Some((s, e)) => {
            let (s, e) = (parse_size(s).ok_or_else(bad)?, parse_size(e).ok_or_else(bad)?);
            if e <= s {
                return Err(format!("empty range in '{t}': the end must be above the start"));
            }
            (s, e)
        }
        None => {
            let o = parse_size(inner).ok_or_else(bad)?;
            (o, o + 1)
        }
    };
    Ok(Place { map: map.into(), range: Some(range) })
}

fn tokenize(text: &str) -> Vec<Tok<'_>> {
    let mut toks = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                toks.push(Tok { text: &text[s..i], col: s + 1 });
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        toks.push(Tok { text: &text[s..], col: s + 1 });
    }
    toks
}

/// Parses a whole scenario file.
pub fn parse(src: &str) -> Result<Vec<Step>, ParseError> {
    let mut steps = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let text = raw.split('#').next().unwrap_or("");
        let toks = tokenize(text);
        if toks.is_empty() {
            continue;
        }
        let mut l = Line { line: i + 1, toks, pos: 0, end_col: text.trim_end().len() + 1 };
        steps.push(parse_line(&mut l, text.trim())?);
    }
    Ok(steps)
}

fn parse_line(l: &mut Line, text: &str) -> Result<Step, ParseError> {
    let first = l.peek().unwrap();
    let proc = match first.strip_suffix(':') {
        Some(p) if is_ident(p) => {
            l.pos += 1;
            Some(p.to_string())
        }
        Some(_) => return l.err(1, format!("expected a process name before ':', found '{first}'")),
        None => None,
    };
    // A trailing "fails ERRNO".
    let mut fails = None;
    let n = l.toks.len();
    if n >= 2 && l.toks[n - 2].text == "fails" {
        let t = &l.toks[n - 1];
        fails = Some(Errno::from_name(t.text).ok_or_else(|| ParseError {
            line: l.line,
            col: t.col,
            msg: format!("expected an error name (ENOMEM, EINVAL, EFAULT, EACCES, EBUSY, EEXIST), found '{}'", t.text),
        })?);
        l.toks.truncate(n - 2);
    }
    let cmd = match proc {
        None => parse_global(l)?,
        Some(_) => parse_proc_cmd(l)?,
    };
    l.done()?;
    Ok(Step { line: l.line, text: text.to_string(), proc, cmd, fails })
}

fn parse_global(l: &mut Line) -> Result<Cmd, ParseError> {
    let col = l.col();
    match l.next("a command")? {
        "set" => {
            let col = l.col();
            match l.next("a setting (memory, mapcount, zap, tlb, debug, mm_ids, thp, check)")? {
                "memory" => Ok(Cmd::SetMachine(MachineSetting::Memory(l.size("a memory size")?))),
                "mapcount" => Ok(Cmd::SetMachine(MachineSetting::Mapcount(l.ident("a mapcount design")?))),
                "tlb" => Ok(Cmd::SetMachine(MachineSetting::Tlb(l.size("a number of TLB entries")?))),
                "debug" => Ok(Cmd::SetMachine(MachineSetting::Debug(l.ident("a debug switch")?))),
                "mm_ids" => Ok(Cmd::SetMachine(MachineSetting::MmIds(l.size("a number of MM IDs")?))),
                "zap" => {
                    let col = l.col();
                    let t = l.next("a zap strategy (batched or per-page)")?;
                    match ZapStrategy::parse(t) {
                        Some(z) => Ok(Cmd::SetMachine(MachineSetting::Zap(z))),
                        None => l.err(col, format!("expected a zap strategy (batched or per-page), found '{t}'")),
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
                t => l.err(
                    col,
                    format!("expected a setting (memory, mapcount, zap, tlb, debug, mm_ids, thp, check), found '{t}'"),
                ),
            }
        }
        "measure" => Ok(Cmd::Measure(l.ident("a name for the measurement")?)),
        "end" => Ok(Cmd::End),
        "expect" => {
            let mut designs = Vec::new();
            if let Some(list) = l.peek().and_then(|t| t.strip_prefix('[')) {
                let col = l.col();
                // `[a,b]` may be one token or several (`[a, b]`).
                let mut text = list.to_string();
                l.pos += 1;
                while !text.ends_with(']') {
                    text.push_str(l.next("a ']' closing the list of designs")?);
                }
                designs = text
                    .trim_end_matches(']')
                    .split(',')
                    .map(|d| d.trim().to_string())
                    .filter(|d| !d.is_empty())
                    .collect();
                if let Some(bad) = designs.iter().find(|d| !foliomm::mapcount::DESIGN_NAMES.contains(&d.as_str())) {
                    let known = foliomm::mapcount::DESIGN_NAMES.join(", ");
                    return l.err(col, format!("unknown mapcount design '{bad}' (known: {known})"));
                }
            }
            let lhs = l.operand()?;
            let col = l.col();
            let op = match l.next("a comparison (==, !=, <, <=, >, >=)")? {
                "==" => CmpOp::Eq,
                "!=" => CmpOp::Ne,
                "<" => CmpOp::Lt,
                "<=" => CmpOp::Le,
                ">" => CmpOp::Gt,
                ">=" => CmpOp::Ge,
                t => return l.err(col, format!("expected a comparison (==, !=, <, <=, >, >=), found '{t}'")),
            };
            Ok(Cmd::Expect { lhs, op, rhs: l.operand()?, designs })
        }
        t => l.err(col, format!("expected 'set', 'expect', 'measure', 'end' or 'NAME:' (a process), found '{t}'")),
    }
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
    Ok(Cmd::SetThp { enabled, sizes })
}

fn parse_proc_cmd(l: &mut Line) -> Result<Cmd, ParseError> {
    // "NAME = mmap ..." or "NAME = mremap ..."
    if l.toks.get(l.pos + 1).is_some_and(|t| t.text == "=") {
        let name = l.ident("a mapping name")?;
        l.pos += 1;
        let col = l.col();
        return match l.next("mmap or mremap")? {
            "mmap" => {
                let len = l.size("a length")?;
                let (mut prot, mut populate, mut at, mut fixed, mut align) = (Prot::RW, false, None, false, None);
                while let Some(t) = l.peek() {
                    match t {
                        _ if Prot::parse(t).is_some() => prot = Prot::parse(t).unwrap(),
                        "populate" => populate = true,
                        "fixed" => fixed = true,
                        "anon" | "private" => {}
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
                                format!("expected a protection (r, rw, none), populate, fixed, anon, private, 'at ADDR' or 'align SIZE', found '{t}'"),
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
                Ok(Cmd::Mmap { name, len, prot, populate, at, fixed, align })
            }
            "mremap" => {
                let from = l.place()?;
                let (mut size, mut to) = (None, None);
                while let Some(t) = l.peek() {
                    l.pos += 1;
                    match t {
                        "size" => size = Some(l.size("a new size")?),
                        "to" => to = Some(l.ident("a mapping to move onto")?),
                        _ => {
                            return l.err(
                                l.col() - t.len() - 1,
                                format!("expected 'size LEN' or 'to MAPPING', found '{t}'"),
                            )
                        }
                    }
                }
                Ok(Cmd::Mremap { name, from, size, to })
            }
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
            t => l.err(col, format!("expected mmap, mremap, pin or get, found '{t}'")),
        };
    }
    let col = l.col();
    let verb = l.next("a command")?;
    Ok(match verb {
        "munmap" => Cmd::Munmap(l.place()?),
        "mprotect" => Cmd::Mprotect(l.place()?, l.prot()?),
        "madvise" => {
            let p = l.place()?;
            let col = l.col();
            let t = l.next("an advice")?;
            match Advice::parse(t) {
                Some(a) => Cmd::Madvise(p, a),
                None => return l.err(col, format!("expected hugepage, nohugepage, dontneed, dontfork or dofork, found '{t}'")),
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
        "observe" if l.peek() == Some("pin") => {
            l.pos += 1;
            let pin = l.ident("a pin")?;
            let col = l.col();
            if !l.eat("as") {
                return l.err(col, "expected 'as NAME' after the pin to observe");
            }
            Cmd::ObservePin { pin, name: l.ident("an observation name")? }
        }
        "observe" => {
            let place = l.place()?;
            let col = l.col();
            if !l.eat("as") {
                return l.err(col, "expected 'as NAME' after the place to observe");
            }
            Cmd::Observe { place, name: l.ident("an observation name")? }
        }
        t => {
            return l.err(
                col,
                format!("expected a command (mmap, munmap, mprotect, madvise, mremap, fork, exit, wait, write, fill, read, verify, observe), found '{t}'"),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_design_example() {
        let src = "set thp 2048K=inherit enabled=madvise\nP: a = mmap 4M anon rw\nP: madvise a hugepage\nP: mprotect a[0..4K] r\nP: fork C\nC: exit\nP: observe a[20K] as before\nexpect after.frame == before.frame\n";
        let steps = parse(src).unwrap();
        assert_eq!(steps.len(), 8);
        assert_eq!(steps[0].cmd, Cmd::SetThp { enabled: Some(ThpMode::Madvise), sizes: vec![(9, ThpMode::Inherit)] });
        assert_eq!(steps[3].cmd, Cmd::Mprotect(Place { map: "a".into(), range: Some((0, 4096)) }, Prot(1)));
        assert_eq!(
            steps[6].cmd,
            Cmd::Observe { place: Place { map: "a".into(), range: Some((20480, 20481)) }, name: "before".into() }
        );
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse("# ok\nP: a = mmap 4Q rw\n").unwrap_err();
        assert_eq!((e.line, e.col), (2, 13));
        assert!(e.msg.contains("expected a length"), "{}", e.msg);
        let e = parse("P: madvise a sideways\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 14));
        let e = parse("P: write a fails ENOPE\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 18));
        let e = parse("P: munmap a[8K..4K]\n").unwrap_err();
        assert!(e.msg.contains("empty range"));
        let e = parse("P: observe a\n").unwrap_err();
        assert_eq!(e.col, 13, "{e}");
    }

    #[test]
    fn trailing_fails_is_an_expected_error() {
        let s = &parse("P: write a fails ENOMEM\n").unwrap()[0];
        assert_eq!(s.fails, Some(Errno::ENOMEM));
    }
}
