//! The scheduler: one thread that owns every slot's KV cache and runs the model. Each step it
//! takes new requests into free slots, then builds ONE batch holding the next token of every
//! decoding slot plus prompt chunks of the slots still reading their prompts, runs one forward
//! pass, and samples for each slot (continuous batching). Handlers talk to it through channels:
//! a request goes in as a [`Job`], text comes back as [`Event`]s; a request whose handler has
//! gone (the client disconnected) is cancelled at the next step and its slot freed. The
//! scheduler never waits on a handler: each job's events go through a bounded channel, and a
//! job whose handler lets it fill (its client stopped reading a stream) is cancelled.

use super::error::ApiError;
use super::metrics::Metrics;
use super::slots::{pick_slot, Event, Finish, GenParams, Job, Slot, Summary, TextStep};
use crate::app::Loaded;
use crate::generate::{keep_tokens, shift_context};
use crate::kv_cache::KvCache;
use crate::model::Batch;
use crate::sampling::{logprobs, TokenVocab};
use crate::speculative::Speculator;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

/// Events a job may have waiting for its handler before it is cancelled. A streaming handler
/// falls behind only while its client does not read and the socket buffers are full.
pub const EVENT_BUFFER: usize = 256;

/// Sizes of the scheduler.
#[derive(Clone, Copy, Debug)]
pub struct SchedulerOptions {
    pub n_slots: usize,
    /// Context positions of each slot.
    pub n_ctx_slot: usize,
    /// Most tokens in one forward pass.
    pub n_batch: usize,
    /// `--context-shift`: a full slot drops old tokens instead of ending the request.
    pub context_shift: bool,
    /// `--keep`: prompt tokens a context shift keeps (-1: the whole prompt).
    pub n_keep: i64,
}

/// A slot as `/slots` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SlotStatus {
    pub id: usize,
    pub n_ctx: usize,
    pub is_processing: bool,
    /// The request in the slot (-1: none).
    pub id_task: i64,
    pub n_prompt_tokens: usize,
    pub n_cached_tokens: usize,
    pub n_decoded: usize,
}

/// The handlers' side of the scheduler.
pub struct Scheduler {
    jobs: Mutex<mpsc::Sender<Job>>,
    status: Arc<Mutex<Vec<SlotStatus>>>,
    next_id: AtomicU64,
    pub options: SchedulerOptions,
}

/// A submitted request: its events, and cancellation when dropped.
pub struct JobHandle {
    pub events: mpsc::Receiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl Scheduler {
    /// Starts the scheduler thread for `loaded`.
    /// `speculators` holds each slot's draft sources (empty: no speculation).
    pub fn start(
        loaded: Arc<Loaded>,
        options: SchedulerOptions,
        metrics: Arc<Metrics>,
        speculators: Vec<Speculator<'static>>,
    ) -> Scheduler {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Mutex::new(Vec::new()));
        let worker = Worker {
            caches: (0..options.n_slots)
                .map(|_| loaded.model.new_cache(options.n_ctx_slot))
                .collect(),
            slots: (0..options.n_slots).map(Slot::new).collect(),
            speculators,
            queue: VecDeque::new(),
            vocab: Arc::new(TokenVocab::new(&loaded.tokenizer)),
            loaded,
            options,
            metrics,
            status: status.clone(),
        };
        worker.publish();
        std::thread::Builder::new()
            .name("scheduler".into())
            .spawn(move || worker.run(rx))
            .expect("cannot start the scheduler thread");
        Scheduler {
            jobs: Mutex::new(tx),
            status,
            next_id: AtomicU64::new(0),
            options,
        }
    }

    /// Queues a request. The prompt must be non-empty and shorter than a slot's context.
    pub fn submit(&self, prompt: Vec<u32>, params: GenParams) -> Result<JobHandle, ApiError> {
        debug_assert!(!prompt.is_empty() && prompt.len() < self.options.n_ctx_slot);
        let (tx, rx) = mpsc::sync_channel(EVENT_BUFFER);
        let cancel = Arc::new(AtomicBool::new(false));
        let job = Job {
            prompt,
            params,
            events: tx,
            cancel: cancel.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        };
        self.jobs
            .lock()
            .map_err(|_| ApiError::internal("the scheduler has stopped"))?
            .send(job)
            .map_err(|_| ApiError::internal("the scheduler has stopped"))?;
        Ok(JobHandle { events: rx, cancel })
    }

    /// The slots as they were after the last step.
    pub fn slots(&self) -> Vec<SlotStatus> {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

struct Worker {
    loaded: Arc<Loaded>,
    options: SchedulerOptions,
    caches: Vec<KvCache>,
    slots: Vec<Slot>,
    /// Per slot, when speculating: its draft sources (a draft model keeps a cache per slot).
    speculators: Vec<Speculator<'static>>,
    queue: VecDeque<Job>,
    /// Token bytes for grammars and DRY, shared by every slot's sampler.
    vocab: Arc<TokenVocab>,
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Vec<SlotStatus>>>,
}

impl Worker {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some());
            if !busy && self.queue.is_empty() {
                self.publish();
                match rx.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = rx.try_recv() {
                self.queue.push_back(job);
            }
            self.drop_cancelled();
            self.assign();
            self.step();
            self.publish();
        }
    }

    fn drop_cancelled(&mut self) {
        let before = self.queue.len();
        self.queue.retain(|j| !j.cancelled());
        let mut cancelled = before - self.queue.len();
        for slot in &mut self.slots {
            if slot.active.as_ref().is_some_and(|a| a.job.cancelled()) {
                slot.active = None;
                slot.last_used = Instant::now();
                cancelled += 1;
            }
        }
        self.metrics.requests_cancelled.add(cancelled as u64);
        self.metrics.requests_deferred.set(self.queue.len() as u64);
    }

    /// Moves queued requests into free slots, oldest first.
    fn assign(&mut self) {
        while let Some(job) = self.queue.front() {
            let Some(i) = pick_slot(&self.slots, &job.prompt, job.params.cache_prompt) else {
                break;
            };
            let job = self.queue.pop_front().expect("front exists");
            let keep = self.slots[i].start(job, &self.vocab);
            self.caches[i].truncate(keep);
        }
        let processing = self.slots.iter().filter(|s| s.active.is_some()).count();
        self.metrics.requests_processing.set(processing as u64);
        self.metrics.requests_deferred.set(self.queue.len() as u64);
    }

    /// One forward pass over every active slot.
    fn step(&mut self) {
        let mut batch = Batch::default();
        // The slot of each output row, in batch order.
        let mut rows: Vec<usize> = Vec::new();
        // Draft tokens each decoding slot feeds after its next token (verified after the pass).
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); self.slots.len()];
        for slot in &mut self.slots {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if let Some(id) = a.next_token.take() {
                let mut feed = vec![id];
                if let Some(spec) = self.speculators.get_mut(slot.id) {
                    // Room for the token, the draft and one spare position; no more drafted
                    // tokens than the request may still produce.
                    let ctx_room = self
                        .options
                        .n_ctx_slot
                        .saturating_sub(slot.tokens.len() + 2);
                    let n_predict = a.job.params.n_predict;
                    let budget = if n_predict < 0 {
                        usize::MAX
                    } else {
                        (n_predict as usize).saturating_sub(a.n_decoded + 1)
                    };
                    drafts[slot.id] = spec.draft(&slot.tokens, id, ctx_room.min(budget));
                    feed.extend_from_slice(&drafts[slot.id]);
                }
                for t in feed {
                    batch.tokens.push(t);
                    batch.pos.push(slot.tokens.len());
                    batch.seq.push(slot.id);
                    batch.logits.push(true);
                    slot.tokens.push(t);
                    rows.push(slot.id);
                }
            }
        }
        let n_decode = batch.len();
        let mut budget = self.options.n_batch.saturating_sub(batch.len()).max(1);
        let mut n_prompt_tokens = 0;
        for slot in &mut self.slots {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            let left = a.job.prompt.len() - a.prompt_done;
            if left == 0 || budget == 0 {
                continue;
            }
            let take = left.min(budget);
            for k in 0..take {
                let id = a.job.prompt[a.prompt_done + k];
                batch.tokens.push(id);
                batch.pos.push(slot.tokens.len());
                batch.seq.push(slot.id);
                let last = a.prompt_done + k + 1 == a.job.prompt.len();
                batch.logits.push(last);
                slot.tokens.push(id);
                if last {
                    rows.push(slot.id);
                }
            }
            a.prompt_done += take;
            budget -= take;
            n_prompt_tokens += take;
        }
        if batch.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let logits = self.loaded.model.forward(&batch, &mut self.caches);
        let elapsed = t0.elapsed().as_secs_f64();
        self.metrics.record_step(n_prompt_tokens, n_decode, elapsed);
        let busy = self.slots.iter().filter(|s| s.active.is_some()).count();
        let longest = self.slots.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
        self.metrics.record_slots(busy, longest);

        let n_vocab = self.loaded.model.config.n_vocab;
        // Each slot's rows are consecutive: one, or its next token's plus one per draft token.
        let mut r = 0;
        while r < rows.len() {
            let i = rows[r];
            let n = rows[r..].iter().take_while(|&&s| s == i).count();
            let draft = std::mem::take(&mut drafts[i]);
            self.verify(i, &logits[r * n_vocab..(r + n) * n_vocab], &draft);
            r += n;
        }
    }

    /// Samples slot `i` at each of its output rows in turn (`logits`, `n_vocab` each), keeping
    /// drafted tokens while they equal what was sampled; the cache forgets the rest.
    fn verify(&mut self, i: usize, logits: &[f32], draft: &[u32]) {
        let n_vocab = self.loaded.model.config.n_vocab;
        if draft.is_empty() {
            return self.sample_and_emit(i, &logits[..n_vocab]);
        }
        // Sampling sees only the tokens before each row, and the cache agrees with them.
        if let Some(a) = self.slots[i].active.as_mut() {
            a.draft_n += draft.len();
        }
        self.metrics.drafts.add(1);
        self.metrics.draft_tokens.add(draft.len() as u64);
        let base = self.slots[i].tokens.len() - draft.len();
        self.slots[i].tokens.truncate(base);
        self.caches[i].truncate(base);
        for (j, row) in logits.chunks_exact(n_vocab).enumerate() {
            self.sample_and_emit(i, row);
            let slot = &mut self.slots[i];
            let Some(a) = slot.active.as_mut() else {
                return;
            };
            match draft.get(j) {
                Some(&d) if a.next_token == Some(d) => {
                    // Already in the cache at the next position.
                    a.next_token = None;
                    a.draft_n_accepted += 1;
                    self.metrics.draft_accepted.add(1);
                    slot.tokens.push(d);
                    self.caches[i].mark_filled(slot.tokens.len() - 1);
                }
                _ => return,
            }
        }
    }

    /// Samples slot `i`'s next token from `logits` and tells its handler.
    fn sample_and_emit(&mut self, i: usize, logits: &[f32]) {
        let tok = &self.loaded.tokenizer;
        let n_ctx = self.options.n_ctx_slot;
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else {
            return;
        };
        let id = a.sampler.sample(logits, &slot.tokens);
        let now = Instant::now();
        a.first_token.get_or_insert(now);
        a.n_decoded += 1;
        self.metrics.tokens_predicted.add(1);
        let mut finish = None;
        let mut alive = true;
        if tok.is_eog(id) && !a.job.params.ignore_eos {
            finish = Some(Finish::Eog);
        } else {
            if let Some(n) = a.job.params.n_probs {
                a.pending_probs.push(logprobs::step(logits, id, n));
            }
            let (text, tokens, stopped) = match a.push_token(tok, id) {
                TextStep::Send(text, tokens) => (text, tokens, None),
                TextStep::Stopped(text, tokens, word) => (text, tokens, Some(word)),
            };
            if !text.is_empty() || !tokens.is_empty() {
                let probs = a.take_probs(!tokens.is_empty());
                // Full: the handler is EVENT_BUFFER events behind; cut it off.
                alive = a
                    .job
                    .events
                    .try_send(Event::Text {
                        text,
                        tokens,
                        probs,
                    })
                    .is_ok();
            }
            let n_predict = a.job.params.n_predict;
            if let Some(word) = stopped {
                finish = Some(Finish::StopWord(word));
            } else if n_predict >= 0 && a.n_decoded as i64 >= n_predict {
                finish = Some(Finish::Length);
            } else if slot.tokens.len() >= n_ctx
                && !(self.options.context_shift
                    && shift_context(
                        &self.loaded.model,
                        &mut self.caches[i],
                        &mut slot.tokens,
                        keep_tokens(
                            a.job.params.n_keep.unwrap_or(self.options.n_keep),
                            &a.job.prompt,
                            tok.bos(),
                        ),
                    ))
            {
                finish = Some(Finish::ContextFull);
            } else {
                a.next_token = Some(id);
            }
        }
        if !alive {
            slot.active = None;
            slot.last_used = now;
            self.metrics.requests_cancelled.add(1);
            return;
        }
        let Some(finish) = finish else {
            return;
        };
        let mut a = slot.active.take().expect("active");
        slot.last_used = now;
        if !matches!(finish, Finish::StopWord(_)) {
            let (text, tokens) = a.flush();
            if !text.is_empty() || !tokens.is_empty() {
                let probs = a.take_probs(!tokens.is_empty());
                let _ = a.job.events.try_send(Event::Text {
                    text,
                    tokens,
                    probs,
                });
            }
        }
        let first = a.first_token.unwrap_or(now);
        let summary = Summary {
            finish,
            slot: slot.id,
            n_prompt: a.job.prompt.len(),
            n_cached: a.n_cached,
            n_predicted: a.n_decoded,
            prompt_ms: (first - a.started).as_secs_f64() * 1e3,
            predicted_ms: (now - first).as_secs_f64() * 1e3,
            draft_n: a.draft_n,
            draft_n_accepted: a.draft_n_accepted,
        };
        self.metrics.requests_done.add(1);
        // The slot is free before the client hears it is done: `/slots` must not lag behind.
        self.publish();
        let _ = a.job.events.try_send(Event::Done(summary));
    }

    fn publish(&self) {
        // The gauge follows the slots, also when the last request ends and the loop sleeps.
        let processing = self.slots.iter().filter(|s| s.active.is_some()).count();
        self.metrics.requests_processing.set(processing as u64);
        let status = self
            .slots
            .iter()
            .map(|s| SlotStatus {
                id: s.id,
                n_ctx: self.options.n_ctx_slot,
                is_processing: s.active.is_some(),
                id_task: s.active.as_ref().map_or(-1, |a| a.job.id as i64),
                n_prompt_tokens: s.active.as_ref().map_or(0, |a| a.job.prompt.len()),
                n_cached_tokens: s.tokens.len(),
                n_decoded: s.active.as_ref().map_or(0, |a| a.n_decoded),
            })
            .collect();
        if let Ok(mut s) = self.status.lock() {
            *s = status;
        }
    }
}
