//! n-gram lookup cache files (`-lcs`/`-lcd`, llama.cpp's format) from arbitrary bytes: parsing
//! never panics nor allocates beyond the input, a parsed cache writes back to bytes that parse
//! to the same cache, and lookup decoding with it as the static and the dynamic cache drafts
//! without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llamafile::engine::speculative::lookup_file::{parse, to_bytes};
use llamafile::engine::speculative::ngram_cache::{draft, NgramCache};

fuzz_target!(|data: &[u8]| {
    let Ok(cache) = parse(data) else {
        return;
    };
    assert_eq!(parse(&to_bytes(&cache)).ok().as_ref(), Some(&cache));
    // A context made of the file's first tokens, so look-ups can hit.
    let ctx: Vec<u32> = cache
        .keys()
        .take(2)
        .flat_map(|g| g.iter().filter(|&&t| t >= 0).map(|&t| t as u32))
        .collect();
    let _ = draft(&ctx, 8, &NgramCache::new(), &cache, &cache);
});
