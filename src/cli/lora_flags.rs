//! The LoRA flags as llama.cpp takes them: `--lora FNAME` (comma-separated values load
//! several, each at scale 1), `--lora-scaled FNAME:SCALE,...`, both repeatable and kept in the
//! order given (an adapter's id is its place in that order), and `--lora-init-without-apply`
//! (loaded at scale 0, for the server's `POST /lora-adapters` to set).

use clap::{ArgMatches, Args};

/// LoRA adapter flags.
#[derive(Args, Debug, Clone, Default)]
pub struct LoraArgs {
    /// LoRA adapter (llama.cpp's GGUF adapter); comma-separated values load several.
    #[arg(long = "lora", value_name = "FNAME")]
    pub lora: Vec<String>,

    /// LoRA adapter with a scale of its own: FNAME:SCALE, comma-separated values load several.
    #[arg(long = "lora-scaled", value_name = "FNAME:SCALE,...")]
    pub lora_scaled: Vec<String>,

    /// Load the adapters at scale 0, to be applied later (the server's POST /lora-adapters).
    #[arg(long = "lora-init-without-apply")]
    pub lora_init_without_apply: bool,

    /// The adapters to load, in command-line order, with their scales (set by `resolve`).
    #[arg(skip)]
    pub adapters: Vec<(String, f32)>,
}

impl LoraArgs {
    /// Splits the values into adapters in the order they were given; a `--lora-scaled` item
    /// that is not `FNAME:SCALE` is refused in one line.
    pub fn resolve(&mut self, m: &ArgMatches) -> Result<(), String> {
        let indexed = |id: &str, values: &[String]| -> Vec<(usize, String)> {
            let idx: Vec<usize> = m.indices_of(id).map(|i| i.collect()).unwrap_or_default();
            idx.into_iter().zip(values.iter().cloned()).collect()
        };
        let mut given: Vec<(usize, bool, String)> = indexed("lora", &self.lora)
            .into_iter()
            .map(|(i, v)| (i, false, v))
            .chain(
                indexed("lora_scaled", &self.lora_scaled)
                    .into_iter()
                    .map(|(i, v)| (i, true, v)),
            )
            .collect();
        given.sort_by_key(|g| g.0);
        self.adapters.clear();
        for (_, scaled, value) in given {
            for item in csv_items(&value) {
                if !scaled {
                    self.adapters.push((item, 1.0));
                    continue;
                }
                let parts: Vec<&str> = item.split(':').collect();
                let [path, scale] = parts[..] else {
                    return Err(format!(
                        "--lora-scaled {value}: each item must be FNAME:SCALE, not {item:?}"
                    ));
                };
                let scale: f32 = scale.trim().parse().map_err(|_| {
                    format!("--lora-scaled {value}: the scale of {path} is not a number: {scale:?}")
                })?;
                self.adapters.push((path.to_string(), scale));
            }
        }
        Ok(())
    }

    /// The scale each adapter starts at: its own, or 0 with `--lora-init-without-apply`.
    pub fn initial_scales(&self) -> Vec<f32> {
        self.adapters
            .iter()
            .map(|&(_, s)| if self.lora_init_without_apply { 0.0 } else { s })
            .collect()
    }
}

/// The fields of a comma-separated row as llama.cpp's `parse_csv_row` reads them: a field may
/// be quoted (`"a,b.gguf"`), `""` inside quotes is one quote, and a quote in the middle of an
/// unquoted field is kept as it is.
fn csv_items(row: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' if quoted => quoted = false,
            '"' if field.is_empty() => quoted = true,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod tests {
    use super::csv_items;

    #[test]
    fn csv_rows_split_as_llama_cpp_splits_them() {
        assert_eq!(csv_items("a.gguf"), ["a.gguf"]);
        assert_eq!(csv_items("a.gguf,b.gguf"), ["a.gguf", "b.gguf"]);
        assert_eq!(csv_items("\"a,b.gguf\",c"), ["a,b.gguf", "c"]);
        assert_eq!(csv_items("\"a\"\"b\""), ["a\"b"]);
        assert_eq!(csv_items("a\"b"), ["a\"b"]);
    }
}
