//! "Did you mean": the known word closest to a mistyped one, for the
//! parser's and the interpreter's messages.

/// The word of `known` closest to `word` (Damerau-Levenshtein distance), if
/// it is near enough to be a typo of it: an edit per four letters of the
/// known word, at most 3 (none for a word of up to 3 letters, such as a
/// process name). None for an exact match.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(word, k), k))
        .filter(|&(d, k)| d > 0 && d <= (k.len() / 4).min(3))
        .min()
        .map(|(_, k)| k)
}

/// `": did you mean 'K'?"` for the closest known word, or nothing.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, known).map_or(String::new(), |k| format!(": did you mean '{k}'?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_its_word_and_nonsense_finds_none() {
        assert_eq!(closest("mprotcet", ["mmap", "mprotect", "munmap"]), Some("mprotect"));
        assert_eq!(closest("frobnicate", ["mmap", "mprotect"]), None);
        assert_eq!(closest("mmap", ["mmap"]), None);
        assert_eq!(did_you_mean("foliio_order", ["folio_order", "frame"]), ": did you mean 'folio_order'?");
    }
}
