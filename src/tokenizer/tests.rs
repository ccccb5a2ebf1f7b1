//! Whole-tokenizer tests on small hand-made vocabularies (the real-model comparisons with
//! llama.cpp are in `reference_tests`).

use super::*;

fn spm_spec() -> VocabSpec {
    // id: 0 <unk>, 1 <s>, 2 </s>, 3.. normal pieces, then byte tokens for 0x0A and 0xC3/0xA9
    let tokens = [
        "<unk>", "<s>", "</s>", "▁", "a", "b", "ab", "▁ab", "▁a", "<0x0A>", "<0xC3>", "<0xA9>",
        "<tool>",
    ];
    let scores = [
        0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -0.5, -3.0, 0.0, 0.0, 0.0, 0.0,
    ];
    let types = [2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6, 4];
    VocabSpec {
        model: "llama".into(),
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        scores: Some(scores.to_vec()),
        token_types: Some(types.to_vec()),
        ..VocabSpec::default()
    }
}

#[test]
fn spm_merges_by_score_and_falls_back_to_bytes() {
    let tok = Tokenizer::new(spm_spec()).unwrap();
    assert!(tok.add_bos());
    // " ab" → "▁ab" wins over "▁a"+"b" because "ab" (-1.5) merges before "▁a" (-3.0)
    assert_eq!(tok.encode("ab", true, false), [1, 7]);
    // the space prefix goes at the start and again after every special token
    assert_eq!(tok.encode("ab<tool>ab", false, false), [7, 12, 7]);
    // "é" is not a token: its two UTF-8 bytes fall back to byte tokens; "\n" too
    assert_eq!(tok.encode("a\né", false, false), [8, 9, 10, 11]);
    // leading space removed on decode (add_space_prefix), byte tokens reassembled
    assert_eq!(tok.decode(&tok.encode("ab\né", false, false)), "ab\né");
    // llama.cpp strips the prefix space only when the sequence does not start with BOS
    assert_eq!(tok.decode(&[7]), "ab");
    assert_eq!(tok.decode(&[1, 7]), " ab");
    let strip_bos = DetokenizeOptions {
        remove_special: true,
        ..DetokenizeOptions::default()
    };
    assert_eq!(tok.detokenize(&[1, 7], strip_bos), b" ab");
}

#[test]
fn spm_without_space_prefix() {
    let mut spec = spm_spec();
    spec.add_space_prefix = Some(false);
    let tok = Tokenizer::new(spec).unwrap();
    assert_eq!(tok.encode("ab ab", false, false), [6, 7]);
    assert_eq!(tok.decode(&[6, 7]), "ab ab");
}

fn bpe_spec() -> VocabSpec {
    let tokens = [
        "<|endoftext|>",
        "<|im_end|>",
        "h",
        "i",
        "Ġ",
        "hi",
        "Ġhi",
        "!",
        "1",
        "2",
        "12",
        "Ã",
        "©",
    ];
    let merges = ["h i", "Ġ hi", "1 2"];
    VocabSpec {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        token_types: Some(vec![3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
        merges: Some(merges.iter().map(|s| s.to_string()).collect()),
        ids: SpecialIds {
            eos: Some(1),
            bos: Some(0),
            ..SpecialIds::default()
        },
        ..VocabSpec::default()
    }
}

#[test]
fn bpe_merges_words_and_parses_specials_on_request() {
    let tok = Tokenizer::new(bpe_spec()).unwrap();
    assert!(!tok.add_bos());
    assert_eq!(tok.encode("hi hi!", true, false), [5, 6, 7]);
    // qwen2 splits digits one by one, so "12" never merges
    assert_eq!(tok.encode("12", false, false), [8, 9]);
    assert_eq!(tok.encode("hi<|im_end|>", false, true), [5, 1]);
    assert_ne!(tok.encode("hi<|im_end|>", false, false), [5, 1]);
    // "é" is two bytes, spelled "Ã©" without a merged token here
    assert_eq!(tok.encode("é", false, false), [11, 12]);
    assert_eq!(tok.decode(&[5, 6, 7, 1]), "hi hi!");
    let shown = DetokenizeOptions {
        render_special: true,
        ..DetokenizeOptions::default()
    };
    assert_eq!(tok.detokenize(&[5, 1], shown), b"hi<|im_end|>");
}

#[test]
fn eog_covers_eos_and_chat_terminators() {
    let tok = Tokenizer::new(bpe_spec()).unwrap();
    assert!(tok.is_eog(1) && tok.is_eog(0));
    assert!(!tok.is_eog(5));
    assert_eq!(tok.eos(), Some(1));
}

#[test]
fn stream_decoder_waits_for_whole_characters() {
    let tok = Tokenizer::new(bpe_spec()).unwrap();
    let mut stream = StreamDecoder::new();
    assert_eq!(stream.push(&tok, 5), "hi");
    assert_eq!(stream.push(&tok, 11), ""); // first byte of "é"
    assert_eq!(stream.push(&tok, 12), "é");
    assert_eq!(stream.push(&tok, 11), "");
    assert_eq!(stream.flush(), "\u{FFFD}");
    // an invalid byte followed by a valid one is not held back
    assert_eq!(stream.push(&tok, 12), "\u{FFFD}");
    assert_eq!(stream.push(&tok, 1), ""); // control token hidden
    assert_eq!(
        StreamDecoder::showing_specials().push(&tok, 1),
        "<|im_end|>"
    );
}

#[test]
fn bad_specs_are_rejected() {
    let mut no_merges = bpe_spec();
    no_merges.merges = None;
    assert!(matches!(
        Tokenizer::new(no_merges),
        Err(TokenizerError::MissingMerges)
    ));
    let mut dup = bpe_spec();
    dup.tokens[3] = "h".into();
    assert!(matches!(
        Tokenizer::new(dup),
        Err(TokenizerError::DuplicateToken {
            first: 2,
            second: 3,
            ..
        })
    ));
    let mut unknown = bpe_spec();
    unknown.model = "wordpiece".into();
    assert!(matches!(
        Tokenizer::new(unknown),
        Err(TokenizerError::UnknownModel(_))
    ));
    let mut short = spm_spec();
    short.scores = Some(vec![0.0]);
    assert!(matches!(
        Tokenizer::new(short),
        Err(TokenizerError::LengthMismatch { .. })
    ));
    let mut no_bos = bpe_spec();
    no_bos.add_bos = Some(true);
    no_bos.tokens.truncate(10);
    no_bos.ids.bos = Some(99); // out of range: ignored, and the default (11) is out of range too
    assert!(matches!(
        Tokenizer::new(no_bos),
        Err(TokenizerError::MissingSpecialToken { .. })
    ));
}

#[test]
fn wordpiece_cuts_words_greedily_with_cls_and_sep() {
    let tokens = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "▁hello",
        "▁play",
        "ing",
        "▁,",
        "▁cafe",
        "▁playing",
        "▁pl",
    ];
    let spec = VocabSpec {
        model: "bert".into(),
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        token_types: Some(vec![3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1]),
        ids: SpecialIds {
            bos: Some(2),
            unk: Some(1),
            sep: Some(3),
            pad: Some(0),
            ..SpecialIds::default()
        },
        ..VocabSpec::default()
    };
    let tok = Tokenizer::new(spec).unwrap();
    assert!(tok.add_bos() && tok.add_sep() && !tok.add_eos());
    // lowercased, accent stripped, punctuation split off, the longest piece first
    // ("▁playing" over "▁play" + "ing"), "plays" cut into no whole pieces is one [UNK]
    assert_eq!(
        tok.encode("Hello, PLAYING café plays", true, false),
        [2, 4, 7, 9, 8, 1, 3]
    );
    assert_eq!(tok.encode("hello [SEP] hello", false, true), [4, 3, 4]);
    assert_eq!(tok.encode("", true, false), [2, 3]);
}
