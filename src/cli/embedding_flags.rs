//! llama-server's embedding and infill flags this program acts on: `--embedding` (serve
//! `/embedding`, `/embeddings` and `/v1/embeddings`), `--pooling` (how token vectors become
//! one; `rank`, reranking, is refused) and `--spm-infill` (suffix before prefix in `/infill`
//! prompts). `--embd-normalize` stays in the no-op table: llama-server's endpoints take the
//! normalisation from each request, defaulting to Euclidean, whatever the flag says.

use super::table::env_switch;
use crate::embedding::Pooling;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};

/// Embedding and infill flags.
#[derive(Args, Debug, Clone, Default)]
pub struct EmbeddingArgs {
    /// Serve the embedding endpoints (/embedding, /embeddings, /v1/embeddings); completions
    /// are still served (env LLAMA_ARG_EMBEDDINGS).
    #[arg(long = "embedding", visible_alias = "embeddings")]
    pub embedding: bool,

    /// How token vectors become one embedding: none, mean, cls, last (default: the model's,
    /// none for decoder models; rank, reranking, is not built).
    #[arg(
        long = "pooling",
        value_name = "none|mean|cls|last|rank",
        env = "LLAMA_ARG_POOLING",
        value_parser = ["none", "mean", "cls", "last", "rank"]
    )]
    pub pooling: Option<String>,

    /// /infill prompts put the suffix before the prefix (Suffix/Prefix/Middle), for models
    /// trained that way.
    #[arg(long = "spm-infill")]
    pub spm_infill: bool,

    /// `--pooling` checked (set by [`EmbeddingArgs::resolve`]; `None`: the model's default).
    #[arg(skip)]
    pub pooling_type: Option<Pooling>,
}

impl EmbeddingArgs {
    /// Reads `LLAMA_ARG_EMBEDDINGS` when the command line does not say, and checks `--pooling`.
    pub fn resolve(&mut self, m: &ArgMatches) -> Result<(), String> {
        if m.value_source("embedding") != Some(ValueSource::CommandLine) {
            self.embedding = env_switch("LLAMA_ARG_EMBEDDINGS")?.unwrap_or(false);
        }
        self.pooling_type = self
            .pooling
            .as_deref()
            .map(Pooling::parse)
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}
