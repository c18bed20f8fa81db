//! Where in a mapping a step acts.

/// A place in a mapping: the whole mapping, one page at an offset, or a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub map: String,
    /// Byte offsets into the mapping; `None` means the whole mapping.
    pub range: Option<(u64, u64)>,
}
