//! What the samplers need to know about the vocabulary: each token's bytes (as llama.cpp's
//! `token_to_piece(id, special = false)` gives them), which tokens end generation, the prefix
//! tree for grammar masks (built on first use), and tokenization for DRY's sequence breakers.
//! Built once per model and shared by every sampler.

use super::grammar::TokenTrie;
use crate::tokenizer::Tokenizer;
use std::sync::OnceLock;

/// The vocabulary as samplers see it.
pub struct TokenVocab {
    pieces: Vec<Box<[u8]>>,
    eog: Vec<u32>,
    /// For DRY's multi-token breakers; absent in vocabularies built from bare pieces.
    tokenizer: Option<Tokenizer>,
    trie: OnceLock<TokenTrie>,
}

impl std::fmt::Debug for TokenVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVocab")
            .field("n_vocab", &self.pieces.len())
            .finish()
    }
}

impl TokenVocab {
    pub fn new(tok: &Tokenizer) -> TokenVocab {
        let pieces = (0..tok.n_vocab() as u32)
            .map(|id| tok.token_to_piece(id, false).into())
            .collect();
        TokenVocab {
            pieces,
            eog: tok.eog_ids().to_vec(),
            tokenizer: Some(tok.clone()),
            trie: OnceLock::new(),
        }
    }

    /// A vocabulary of bare byte strings (tests, tools): breakers that span tokens are not
    /// tokenized.
    pub fn from_pieces(pieces: Vec<Box<[u8]>>, mut eog: Vec<u32>) -> TokenVocab {
        eog.sort_unstable();
        TokenVocab {
            pieces,
            eog,
            tokenizer: None,
            trie: OnceLock::new(),
        }
    }

    pub fn n_vocab(&self) -> usize {
        self.pieces.len()
    }

    /// The token's bytes (empty for control tokens).
    pub fn piece(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], |p| p)
    }

    pub fn pieces(&self) -> &[Box<[u8]>] {
        &self.pieces
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// End-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Tokens of `text` (no BOS, specials as plain text); empty without a tokenizer.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.tokenizer
            .as_ref()
            .map(|t| t.encode(text, false, false))
            .unwrap_or_default()
    }

    /// The prefix tree of every token's bytes.
    pub fn trie(&self) -> &TokenTrie {
        self.trie.get_or_init(|| TokenTrie::new(&self.pieces))
    }
}
