//! Building a [`Tokenizer`] from a [`VocabSpec`] with llama.cpp's rules (`llama_vocab::impl::load`):
//! per-model defaults for special ids and flags, token attributes from token types, the
//! text-based detection of end-of-turn / fill-in-the-middle tokens, the end-of-generation set,
//! the special-token cache and the piece cache.

use std::collections::{BTreeSet, HashMap};

use super::bpe::Bpe;
use super::detok::{render_piece, Spelling};
use super::error::TokenizerError;
use super::pretokenize::PreConfig;
use super::spec::{SpecialIds, VocabSpec};
use super::special::Specials;
use super::vocab::{attr, Token, Vocab};
use super::wpm::Normalizer;
use super::{Model, Tokenizer};

/// Token texts llama.cpp treats as end of turn when `eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Token texts that end generation whatever the metadata says (llama.cpp 0c1e570's list). Each
/// is also made a control token, so that text spelling it is not cut out as that token unless
/// specials are parsed (Gemma's user-defined `</s>`, for one).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

pub fn build(mut spec: VocabSpec) -> Result<Tokenizer, TokenizerError> {
    let n_tokens = spec.tokens.len();
    if n_tokens == 0 {
        return Err(TokenizerError::NoTokens);
    }
    // per-model defaults (llama.cpp: "default special tokens" and the pre-tokenizer table)
    let (mut ids, model, mut add_bos, mut add_space_prefix, clean_spaces) = match spec
        .model
        .as_str()
    {
        "llama" => {
            let ids = SpecialIds {
                bos: Some(1),
                eos: Some(2),
                unk: Some(0),
                ..SpecialIds::default()
            };
            (ids, None, true, true, false)
        }
        "bert" => {
            let ids = SpecialIds {
                bos: Some(101),
                unk: Some(100),
                sep: Some(102),
                pad: Some(0),
                mask: Some(103),
                ..SpecialIds::default()
            };
            (ids, None, true, false, true)
        }
        "gpt2" => {
            let merges = spec
                .merges
                .as_deref()
                .ok_or(TokenizerError::MissingMerges)?;
            let pre = match spec.pre.as_deref() {
                None => {
                    eprintln!("tokenizer: missing pre-tokenizer type, using 'default'; generation quality will suffer");
                    PreConfig::fallback()
                }
                Some(name) => PreConfig::for_name(name).unwrap_or_else(|| {
                    eprintln!("tokenizer: unknown pre-tokenizer type '{name}', using 'default'");
                    PreConfig::fallback()
                }),
            };
            let ids = SpecialIds {
                bos: Some(11),
                eos: Some(11),
                ..SpecialIds::default()
            };
            (
                ids,
                Some(Bpe::new(merges, pre)),
                pre.add_bos,
                false,
                pre.clean_spaces,
            )
        }
        "" => return Err(TokenizerError::MissingModel),
        other => return Err(TokenizerError::UnknownModel(other.to_string())),
    };
    if let Some(v) = spec.add_space_prefix {
        add_space_prefix = v;
    }

    let mut vocab = build_vocab(&mut spec)?;

    // default ids out of range are disabled; metadata ids out of range are ignored
    let defaults = [
        &mut ids.bos,
        &mut ids.eos,
        &mut ids.unk,
        &mut ids.sep,
        &mut ids.pad,
        &mut ids.mask,
    ];
    for id in defaults {
        if id.is_some_and(|i| i as usize >= n_tokens) {
            *id = None;
        }
    }
    merge_ids(&mut ids, &spec.ids, n_tokens);

    add_bos = spec.add_bos.unwrap_or(add_bos);
    let add_eos = spec.add_eos.unwrap_or(false);
    if add_bos && ids.bos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            flag: "add_bos_token",
            id_key: "bos_token_id",
        });
    }
    if add_eos && ids.eos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            flag: "add_eos_token",
            id_key: "eos_token_id",
        });
    }

    detect_by_text(&mut vocab, &mut ids);
    mark_unused(&mut vocab);
    let eog = end_of_generation(&mut vocab, &ids);

    let mut specials: Vec<u32> = (0..n_tokens as u32)
        .filter(|&id| vocab.has_attr(id, attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN))
        .collect();
    specials.sort_by_key(|&id| std::cmp::Reverse(vocab.token(id).map_or(0, |t| t.text.len())));
    let specials = Specials::new(&vocab, specials);

    let spelling = if model.is_some() {
        Spelling::ByteLevel
    } else {
        Spelling::Spm
    };
    let pieces: Vec<Box<[u8]>> = vocab
        .tokens()
        .iter()
        .map(|t| render_piece(t, spelling).into_boxed_slice())
        .collect();

    let wpm = spec.model == "bert";
    let lowercase = spec.lowercase.unwrap_or(true);
    let model = match model {
        Some(bpe) => Model::Bpe(bpe),
        None if wpm => Model::Wpm {
            norm: Normalizer {
                lowercase,
                strip_accents: spec.strip_accents.unwrap_or(lowercase),
            },
            max_len: vocab
                .tokens()
                .iter()
                .map(|t| t.text.len())
                .max()
                .unwrap_or(0),
        },
        None => Model::Spm {
            byte_tokens: Box::new(spm_byte_tokens(&vocab, ids.unk)),
        },
    };
    Ok(Tokenizer {
        vocab: vocab.into(),
        model: model.into(),
        ids,
        add_bos,
        add_eos,
        add_sep: spec.add_sep.unwrap_or(wpm),
        add_space_prefix,
        clean_spaces,
        eog,
        specials: specials.into(),
        pieces: pieces.into(),
    })
}

fn build_vocab(spec: &mut VocabSpec) -> Result<Vocab, TokenizerError> {
    let n = spec.tokens.len();
    if let Some(scores) = &spec.scores {
        if scores.len() < n {
            return Err(TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.scores",
                got: scores.len(),
                want: n,
            });
        }
    }
    if let Some(types) = &spec.token_types {
        if types.len() < n {
            return Err(TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.token_type",
                got: types.len(),
                want: n,
            });
        }
    }
    let mut tokens = Vec::with_capacity(n);
    let mut ids: HashMap<Box<str>, u32> = HashMap::with_capacity(n);
    for (i, text) in std::mem::take(&mut spec.tokens).into_iter().enumerate() {
        let text: Box<str> = if text.is_empty() {
            format!("[EMPTY_{i}]").into()
        } else {
            text.into_boxed_str()
        };
        if let Some(&first) = ids.get(&text) {
            return Err(TokenizerError::DuplicateToken {
                text: text.into(),
                first,
                second: i as u32,
            });
        }
        ids.insert(text.clone(), i as u32);
        let score = spec.scores.as_ref().map_or(0.0, |s| s[i]);
        let attr = spec
            .token_types
            .as_ref()
            .map_or(attr::NORMAL, |t| attr::from_token_type(t[i]));
        tokens.push(Token { text, score, attr });
    }
    Ok(Vocab::new(tokens, ids))
}

/// Copies the ids the metadata sets (and that are in range) over the defaults.
fn merge_ids(ids: &mut SpecialIds, given: &SpecialIds, n_tokens: usize) {
    let pairs = [
        (&mut ids.bos, given.bos),
        (&mut ids.eos, given.eos),
        (&mut ids.eot, given.eot),
        (&mut ids.eom, given.eom),
        (&mut ids.unk, given.unk),
        (&mut ids.sep, given.sep),
        (&mut ids.pad, given.pad),
        (&mut ids.mask, given.mask),
        (&mut ids.fim_pre, given.fim_pre),
        (&mut ids.fim_suf, given.fim_suf),
        (&mut ids.fim_mid, given.fim_mid),
        (&mut ids.fim_pad, given.fim_pad),
        (&mut ids.fim_rep, given.fim_rep),
        (&mut ids.fim_sep, given.fim_sep),
    ];
    for (slot, value) in pairs {
        match value {
            Some(v) if (v as usize) < n_tokens => *slot = Some(v),
            Some(v) => eprintln!("tokenizer: special token id {v} is out of range, ignored"),
            None => {}
        }
    }
}

/// Finds unset end-of-turn / end-of-message / fill-in-the-middle tokens by their text (the first
/// by id wins) and forces them to be control tokens.
fn detect_by_text(vocab: &mut Vocab, ids: &mut SpecialIds) {
    let rules: [(&mut Option<u32>, &[&str]); 8] = [
        (&mut ids.eot, EOT_TEXTS),
        (&mut ids.eom, &["<|eom_id|>"]),
        (&mut ids.fim_pre, FIM_PRE_TEXTS),
        (&mut ids.fim_suf, FIM_SUF_TEXTS),
        (&mut ids.fim_mid, FIM_MID_TEXTS),
        (&mut ids.fim_pad, FIM_PAD_TEXTS),
        (&mut ids.fim_rep, FIM_REP_TEXTS),
        (&mut ids.fim_sep, FIM_SEP_TEXTS),
    ];
    for (slot, texts) in rules {
        if slot.is_some() {
            continue;
        }
        let found = texts.iter().filter_map(|t| vocab.id(t)).min();
        if let Some(id) = found {
            *slot = Some(id);
            force_control(vocab, id);
        }
    }
}

fn force_control(vocab: &mut Vocab, id: u32) {
    let a = vocab.attr(id);
    if a & attr::CONTROL == 0 {
        vocab.set_attr(id, a | attr::CONTROL);
    }
}

/// Control tokens whose text says "unused" are marked unused.
fn mark_unused(vocab: &mut Vocab) {
    let unused: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&id| {
            vocab
                .token(id)
                .is_some_and(|t| t.attr & attr::CONTROL != 0 && t.text.contains("unused"))
        })
        .collect();
    for id in unused {
        let a = vocab.attr(id);
        vocab.set_attr(id, a | attr::UNUSED);
    }
}

/// The end-of-generation set: FIM pad/repo/file-separator, the listed texts, EOS, EOT and EOM.
fn end_of_generation(vocab: &mut Vocab, ids: &SpecialIds) -> Vec<u32> {
    let mut eog: BTreeSet<u32> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for text in EOG_TEXTS {
        if let Some(id) = vocab.id(text) {
            eog.insert(id);
            force_control(vocab, id);
        }
    }
    eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
    let has = |vocab: &Vocab, eog: &BTreeSet<u32>, t: &str| {
        vocab.id(t).is_some_and(|id| eog.contains(&id))
    };
    // gpt-oss ("<|return|>", "<|call|>") and solar-open ("<|calls|>", "<|flush|>"): "<|end|>"
    // only ends a message
    let call = has(vocab, &eog, "<|call|>") || has(vocab, &eog, "<|calls|>");
    if call && (has(vocab, &eog, "<|return|>") || has(vocab, &eog, "<|flush|>")) {
        if let Some(end) = vocab.id("<|end|>").filter(|id| eog.contains(id)) {
            eog.remove(&end);
            vocab.set_attr(end, attr::USER_DEFINED);
        }
    }
    // Gemma 4 and PLaMo: "</s>" is a normal token there
    if has(vocab, &eog, "<|tool_response>") || has(vocab, &eog, "<|plamo:eos|>") {
        if let Some(s) = vocab.id("</s>").filter(|id| eog.contains(id)) {
            eog.remove(&s);
            vocab.set_attr(s, attr::NORMAL);
        }
    }
    eog.into_iter().collect()
}

/// The token for each byte in SentencePiece byte fallback.
fn spm_byte_tokens(vocab: &Vocab, unk: Option<u32>) -> [Option<u32>; 256] {
    let mut table = [None; 256];
    for (b, slot) in table.iter_mut().enumerate() {
        let hex = format!("<0x{b:02X}>");
        let plain = char::from_u32(b as u32)
            .filter(|_| b < 0x80)
            .map(String::from);
        *slot = vocab
            .id(&hex)
            .or_else(|| plain.and_then(|p| vocab.id(&p)))
            .or(unk);
    }
    table
}
