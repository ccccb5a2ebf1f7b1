//! GGUF parsing of arbitrary bytes: header, metadata, tensor infos, then what loading does
//! with them (model configuration, tokenizer, chat template). Errors are fine; panics, hangs
//! and reads outside the input are not.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llamafile::chat::ChatTemplate;
use llamafile::gguf::GgufFile;
use llamafile::model::Config;
use llamafile::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    for (key, value) in file.metadata() {
        assert!(file.get(key).is_some());
        let _ = value.value_type();
    }
    for tensor in file.tensors() {
        assert_eq!(file.tensor_data(tensor).len() as u64, tensor.n_bytes());
    }
    let _ = Config::from_gguf(&file);
    if let Ok(tok) = Tokenizer::from_gguf(&file) {
        let ids = tok.encode("Hello <|im_start|> world", true, true);
        for id in ids {
            let _ = tok.token_to_piece(id, true);
        }
        let _ = ChatTemplate::from_gguf(&file, &tok);
    }
});
