//! The names llama.cpp gives a model's `general.file_type`.

/// llama.cpp's names of `general.file_type` values (its `llama_model_ftype_name`), as
/// llama-bench and llama-server print them; `?` for one it has no name for.
pub fn file_type_name(ft: u32) -> &'static str {
    match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        32 => "BF16",
        _ => "?",
    }
}
