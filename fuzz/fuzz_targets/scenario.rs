//! A scenario run on the model with the checker after every step never
//! panics and never ends in an invariant violation, a backend failure or a
//! data-integrity failure the reference model can follow
//! (`foliomm_scenario::fuzz::check`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        if let Err(bug) = foliomm_scenario::fuzz::check(src) {
            panic!("{bug}");
        }
    }
});
