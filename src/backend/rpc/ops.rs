//! The ggml op numbers this client emits, as `enum ggml_op` of the ggml version the worker was
//! built from numbers them (the RPC protocol's 7.0.0 pins `GGML_OP_COUNT` at 101), and the GLU
//! variants of `enum ggml_glu_op`. A test checks them against `ggml/include/ggml.h` when the
//! llama.cpp source tree is on this machine.

/// `GGML_OP_COUNT` of the ggml version the protocol was built with.
#[cfg(test)]
pub const OP_COUNT: u32 = 101;

/// `GGML_GLU_OP_GEGLU` and `GGML_GLU_OP_SWIGLU`.
pub const GLU_GEGLU: i32 = 1;
pub const GLU_SWIGLU: i32 = 2;

/// The ops a block's graph uses, with their numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Op {
    None = 0,
    Add = 2,
    Mul = 7,
    RmsNorm = 25,
    MulMat = 29,
    Reshape = 36,
    View = 37,
    Permute = 38,
    GetRows = 40,
    SetRows = 42,
    Rope = 48,
    FlashAttnExt = 74,
    Glu = 100,
}

impl Op {
    /// Every op here with ggml's name for it (`GGML_OP_` + this).
    #[cfg(test)]
    pub const ALL: [(Op, &'static str); 13] = [
        (Op::None, "NONE"),
        (Op::Add, "ADD"),
        (Op::Mul, "MUL"),
        (Op::RmsNorm, "RMS_NORM"),
        (Op::MulMat, "MUL_MAT"),
        (Op::Reshape, "RESHAPE"),
        (Op::View, "VIEW"),
        (Op::Permute, "PERMUTE"),
        (Op::GetRows, "GET_ROWS"),
        (Op::SetRows, "SET_ROWS"),
        (Op::Rope, "ROPE"),
        (Op::FlashAttnExt, "FLASH_ATTN_EXT"),
        (Op::Glu, "GLU"),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of a C enum's members in order, from the header's text.
    fn enum_members(header: &str, opening: &str, prefix: &str) -> Vec<String> {
        let body = &header[header.find(opening).expect("enum in header")..];
        let body = &body[..body.find("};").expect("enum end")];
        body.lines()
            .map(|l| l.split("//").next().unwrap_or("").trim())
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|l| {
                l.split(|c: char| c == ',' || c == '=' || c.is_whitespace())
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn op_numbers_match_the_ggml_header() {
        let Some(home) = std::env::var_os("HOME") else {
            eprintln!("skipped: no HOME, so no llama.cpp source tree to check against");
            return;
        };
        let path = std::path::Path::new(&home).join(
            ".cache/llama-cpp-ref/src/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/include/ggml.h",
        );
        let Ok(header) = std::fs::read_to_string(&path) else {
            eprintln!("skipped: {} is absent", path.display());
            return;
        };
        let ops = enum_members(&header, "enum ggml_op {", "GGML_OP_");
        assert_eq!(
            ops.iter().position(|o| o == "COUNT"),
            Some(OP_COUNT as usize)
        );
        for (op, name) in Op::ALL {
            assert_eq!(ops[op as usize], name, "GGML_OP_{name}");
        }
        let glu = enum_members(&header, "enum ggml_glu_op {", "GGML_GLU_OP_");
        assert_eq!(glu[GLU_SWIGLU as usize], "SWIGLU");
        assert_eq!(glu[GLU_GEGLU as usize], "GEGLU");
    }
}
