//! Tokenizing: a line split at whitespace into tokens with their columns,
//! and the cursor the parser reads them with, which turns tokens into sizes,
//! names, places, protections and operands or into a [`ParseError`].

use foliomm::internals::mm_types::Prot;

use super::ast::{Operand, ParseError, Place};

/// A word of a line and its column (1-based).
pub(super) struct Tok<'a> {
    pub(super) text: &'a str,
    pub(super) col: usize,
}

/// The tokens of one line and the parser's position in them.
pub(super) struct Line<'a> {
    pub(super) line: usize,
    pub(super) toks: Vec<Tok<'a>>,
    pub(super) pos: usize,
    pub(super) end_col: usize,
}

impl<'a> Line<'a> {
    pub(super) fn err<T>(&self, col: usize, msg: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError { line: self.line, col, msg: msg.into() })
    }
    pub(super) fn col(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end_col, |t| t.col)
    }
    pub(super) fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.pos).map(|t| t.text)
    }
    pub(super) fn next(&mut self, what: &str) -> Result<&'a str, ParseError> {
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t.text)
            }
            None => self.err(self.end_col, format!("expected {what}, found the end of the line")),
        }
    }
    pub(super) fn eat(&mut self, word: &str) -> bool {
        if self.peek() == Some(word) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    pub(super) fn done(&self) -> Result<(), ParseError> {
        match self.toks.get(self.pos) {
            Some(t) => self.err(t.col, format!("unexpected '{}'", t.text)),
            None => Ok(()),
        }
    }
    pub(super) fn size(&mut self, what: &str) -> Result<u64, ParseError> {
        let col = self.col();
        let t = self.next(what)?;
        parse_size(t).ok_or_else(|| ParseError {
            line: self.line,
            col,
            msg: format!("expected {what} (like 4K, 2M, 0x1000), found '{t}'"),
        })
    }
    pub(super) fn ident(&mut self, what: &str) -> Result<String, ParseError> {
        let col = self.col();
        let t = self.next(what)?;
        if is_ident(t) {
            Ok(t.to_string())
        } else {
            self.err(col, format!("expected {what} (a name), found '{t}'"))
        }
    }
    pub(super) fn place(&mut self) -> Result<Place, ParseError> {
        let col = self.col();
        let t = self.next("a mapping (like a, a[4K] or a[0..8K])")?;
        parse_place(t).map_err(|msg| ParseError { line: self.line, col, msg })
    }
    pub(super) fn prot(&mut self) -> Result<Prot, ParseError> {
        let col = self.col();
        let t = self.next("a protection (r, rw, rwx or none)")?;
        Prot::parse(t).ok_or_else(|| ParseError {
            line: self.line,
            col,
            msg: format!("expected a protection (r, rw, rwx or none), found '{t}'"),
        })
    }
    pub(super) fn value(&mut self) -> Result<Option<u8>, ParseError> {
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
    /// Operands joined by `+` and `-`, left to right.
    pub(super) fn expression(&mut self) -> Result<Operand, ParseError> {
        let mut e = self.operand()?;
        while let Some(sign @ ("+" | "-")) = self.peek() {
            self.pos += 1;
            let rhs = self.operand()?;
            e = Operand::Sum { lhs: Box::new(e), minus: sign == "-", rhs: Box::new(rhs) };
        }
        Ok(e)
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

pub(super) fn is_ident(s: &str) -> bool {
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
        b'T' | b't' => (&s[..s.len() - 1], 1 << 40),
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
            (o, o.checked_add(1).ok_or_else(|| format!("offset {o:#x} in '{t}' is past the end of any mapping"))?)
        }
    };
    Ok(Place { map: map.into(), range: Some(range) })
}

pub(super) fn tokenize(text: &str) -> Vec<Tok<'_>> {
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
