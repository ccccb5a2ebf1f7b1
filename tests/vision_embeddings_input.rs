//! Feeding input rows instead of token ids (the path an image's embeddings take into the text
//! model): the rows of a prompt's own token embeddings give the logits of the ids, bit for bit,
//! whether the rows come first or after a chunk of ids in the same cache.

mod common;

use common::model_path;
use llamafile::engine::load_model;
use llamafile::model::Batch;

#[test]
fn token_rows_give_the_logits_of_their_ids() {
    let Some(path) = model_path("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    let loaded = load_model(path.to_str().unwrap(), None).expect("model loads");
    let model = &loaded.model;
    let prompt: Vec<u32> = (0..10).map(|i| 100 + 41 * i).collect();
    let bits = |l: Vec<f32>| -> Vec<u32> { l.iter().map(|v| v.to_bits()).collect() };

    let mut caches = vec![model.new_cache(64)];
    let want = bits(model.forward(&Batch::sequence(&prompt, 0, true), &mut caches));

    // All ten as rows.
    let mut caches = vec![model.new_cache(64)];
    let rows = model.token_embeddings(&prompt);
    let batch = Batch::sequence(&vec![0; prompt.len()], 0, true);
    let got = model
        .try_forward_embeddings(&batch, &rows, &mut caches)
        .unwrap();
    assert_eq!(bits(got), want);

    // Four ids, then six rows continuing the same cache, then the last logits again by id.
    let mut caches = vec![model.new_cache(64)];
    let first = model.forward(&Batch::sequence(&prompt[..4], 0, true), &mut caches);
    let rows = model.token_embeddings(&prompt[4..]);
    let batch = Batch::sequence(&[0; 6], 4, true);
    let rest = model
        .try_forward_embeddings(&batch, &rows, &mut caches)
        .unwrap();
    let n_vocab = model.config.n_vocab;
    assert_eq!(bits(first), want[..4 * n_vocab]);
    assert_eq!(bits(rest), want[4 * n_vocab..]);

    // Rows that are not the ids' embeddings change the logits: the rows are what is read.
    let mut caches = vec![model.new_cache(64)];
    let mut rows = model.token_embeddings(&prompt);
    rows.iter_mut().for_each(|v| *v *= 0.5);
    let batch = Batch::sequence(&vec![0; prompt.len()], 0, true);
    let halved = model
        .try_forward_embeddings(&batch, &rows, &mut caches)
        .unwrap();
    assert_ne!(bits(halved), want);
}
