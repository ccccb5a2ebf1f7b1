//! The decode loop with speculation: after each emitted token, ask for a draft, run the target
//! once over the token and the draft (logits for every position), then sample the target at each
//! position in turn, keeping drafted tokens while they match. The first mismatch (or the token
//! after a fully accepted draft) is emitted too, and the cache forgets the rejected tail.

use super::Speculator;
use crate::generate::{Session, StopReason, TokenEvent};
use crate::sampling::Sampler;

/// [`Session::generate`] with drafts from `spec`: same arguments, same events, same stop
/// reasons. With greedy sampling the tokens are exactly those of `Session::generate`.
pub fn generate(
    session: &mut Session,
    logits: Vec<f32>,
    sampler: &mut Sampler,
    n_predict: i64,
    is_eog: impl Fn(u32) -> bool,
    mut on_token: impl FnMut(&TokenEvent) -> bool,
    spec: &mut Speculator,
) -> StopReason {
    let n_vocab = session.model.config.n_vocab;
    let mut produced: i64 = 0;
    // Emits `id` (sampled from `logits`); Some(reason) when generation must stop.
    let mut emit = |id: u32, logits: &[f32], produced: &mut i64| -> Option<StopReason> {
        *produced += 1;
        let eog = is_eog(id);
        if !on_token(&TokenEvent {
            id,
            logits,
            is_eog: eog,
        }) {
            return Some(StopReason::Cancelled);
        }
        if eog {
            return Some(StopReason::EndOfGeneration);
        }
        None
    };
    if n_predict == 0 {
        return StopReason::Length;
    }
    let mut id = sampler.sample(&logits, &session.tokens);
    if let Some(stop) = emit(id, &logits, &mut produced) {
        return stop;
    }
    loop {
        if n_predict >= 0 && produced >= n_predict {
            return StopReason::Length;
        }
        if !session.make_room() {
            return StopReason::ContextFull;
        }
        // `id` is emitted but not yet fed. Room for it plus the draft, and no more drafted
        // tokens than could still be emitted.
        let budget = if n_predict < 0 {
            usize::MAX
        } else {
            (n_predict - produced) as usize
        };
        let room = (session.remaining() - 1).min(budget.saturating_sub(1));
        let mut context = session.tokens.clone();
        context.push(id);
        let draft = spec.draft(&context, room);
        let base = session.tokens.len();
        let mut batch = Vec::with_capacity(draft.len() + 1);
        batch.push(id);
        batch.extend_from_slice(&draft);
        let rows = session.feed(&batch, true);
        if !draft.is_empty() {
            spec.stats.steps += 1;
            spec.stats.drafted += draft.len();
        }
        // Verify: row i holds the logits after batch[i].
        let mut accepted = 0;
        let mut next = None;
        for i in 0..batch.len() {
            let row = &rows[i * n_vocab..(i + 1) * n_vocab];
            let t = sampler.sample(row, &session.tokens[..base + i + 1]);
            if let Some(stop) = emit(t, row, &mut produced) {
                session.truncate(base + i + 1);
                return stop;
            }
            let matched = draft.get(i) == Some(&t);
            if matched {
                accepted += 1;
            }
            let budget_left = n_predict < 0 || produced < n_predict;
            if !matched || !budget_left {
                next = Some(t);
                break;
            }
        }
        spec.stats.accepted += accepted;
        // Keep `id` and the accepted draft tokens; the last emitted token is fed next round.
        session.truncate(base + 1 + accepted);
        id = next.expect("verification emits at least one token");
    }
}
