//! llama-server's embedding, reranking and infill flags this program acts on: `--embedding`
//! (serve `/embedding`, `/embeddings` and `/v1/embeddings`), `--pooling` (how token vectors
//! become one; `rank` scores through a reranker's classification head), `--rerank` (the same as
//! `--embedding --pooling rank`, serving `/rerank`) and `--spm-infill` (suffix before prefix in
//! `/infill` prompts). `--embd-normalize` stays in the no-op table: llama-server's endpoints take the
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

    /// How token vectors become one embedding: none, mean, cls, last, or rank (a reranker's
    /// scores; default: the model's, none for decoder models).
    #[arg(
        long = "pooling",
        value_name = "none|mean|cls|last|rank",
        env = "LLAMA_ARG_POOLING",
        value_parser = ["none", "mean", "cls", "last", "rank"]
    )]
    pub pooling: Option<String>,

    /// Serve the reranking endpoints (/rerank, /reranking, /v1/rerank, /v1/reranking): the same
    /// as --embedding --pooling rank, for reranker models (env LLAMA_ARG_RERANKING).
    #[arg(long = "rerank", visible_alias = "reranking")]
    pub rerank: bool,

    /// /infill prompts put the suffix before the prefix (Suffix/Prefix/Middle), for models
    /// trained that way.
    #[arg(long = "spm-infill")]
    pub spm_infill: bool,

    /// `--pooling` checked (set by [`EmbeddingArgs::resolve`]; `None`: the model's default).
    #[arg(skip)]
    pub pooling_type: Option<Pooling>,
}

impl EmbeddingArgs {
    /// Reads `LLAMA_ARG_EMBEDDINGS` and `LLAMA_ARG_RERANKING` when the command line does not
    /// say, and checks `--pooling`. `--rerank` turns embeddings on and sets rank pooling, as
    /// llama.cpp does where it appears: a `--pooling` later on the command line wins over it.
    pub fn resolve(&mut self, m: &ArgMatches) -> Result<(), String> {
        if m.value_source("embedding") != Some(ValueSource::CommandLine) {
            self.embedding = env_switch("LLAMA_ARG_EMBEDDINGS")?.unwrap_or(false);
        }
        if m.value_source("rerank") != Some(ValueSource::CommandLine) {
            self.rerank = env_switch("LLAMA_ARG_RERANKING")?.unwrap_or(false);
        }
        self.pooling_type = self
            .pooling
            .as_deref()
            .map(Pooling::parse)
            .transpose()
            .map_err(|e| e.to_string())?;
        if self.rerank {
            self.embedding = true;
            let pooling_after = match (m.index_of("rerank"), m.index_of("pooling")) {
                (Some(r), Some(p)) => {
                    m.value_source("pooling") == Some(ValueSource::CommandLine) && p > r
                }
                _ => false,
            };
            if !pooling_after {
                self.pooling_type = Some(Pooling::Rank);
            }
        }
        Ok(())
    }

    /// Whether the reranking endpoints are served: embeddings on with rank pooling asked for
    /// (`--rerank`, or `--embedding --pooling rank`), as llama-server decides.
    pub fn reranking(&self) -> bool {
        self.embedding && self.pooling_type == Some(Pooling::Rank)
    }
}
