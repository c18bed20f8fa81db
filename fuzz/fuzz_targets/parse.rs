//! Any text either parses or is refused with an error: never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        let _ = foliomm_scenario::parse(src);
    }
});
