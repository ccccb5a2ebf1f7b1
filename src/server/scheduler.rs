//! The scheduler: one thread that owns every slot (each with its own [`Session`]) and runs the
//! model. Each step it takes new requests into free slots, then builds ONE batch holding the
//! next token (and draft) of every decoding slot plus prompt chunks of the slots still reading
//! their prompts, runs one forward pass over the slots' caches, and samples for each slot
//! (continuous batching), verifying drafts with [`Session::verify`] as the CLI does.
//! The thread holds the models through an `Arc` and builds the slots' sessions, which borrow
//! them, itself. Handlers talk to it through channels:
//! a request goes in as a [`Job`], text comes back as [`Event`]s; a request whose handler has
//! gone (the client disconnected) is cancelled at the next step and its slot freed. The
//! scheduler never waits on a handler: each job's events go through a bounded channel, and a
//! job whose handler lets it fill (its client stopped reading a stream) is cancelled.
//!
//! A backend that fails (a device, an RPC worker gone or silent past `-to`) fails the server's
//! model for good: the requests in the slots and in the queue end with a 503 naming the failure
//! ([`Event::Failed`]), later requests are refused with it before they start, and `/health`
//! answers it ([`Scheduler::failure`]); the process stays up until it is restarted.

use super::error::ApiError;
use super::metrics::Metrics;
use super::protocol::{Event, GenParams, Job, SlotAction, SlotDone, SlotOp, Summary};
use super::slot_file::{self, ModelId, RestoreError};
use super::slots::{pick_slot, Active, Slot, TextStep};
use crate::backend::{BackendError, SeqCache};
use crate::engine::loaded::Loaded;
use crate::engine::session::{keep_tokens, Session};
use crate::engine::speculative::setup::SpecOptions;
use crate::engine::speculative::setup::{self, SpecError};
use crate::engine::StopReason;
use crate::model::{Batch, ForwardPlan, LoraMix};
use crate::sampling::{logprobs, TokenVocab};
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
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
    /// The request in the slot, or its last one (-1: none yet).
    pub id_task: i64,
    /// Tokens in the slot's cache (llama-server's `n_prompt_tokens`).
    pub n_prompt_tokens: usize,
    /// Of the request in progress, the prompt tokens evaluated and those found in the cache
    /// (0 while idle, as llama-server resets them when a slot is released).
    pub n_prompt_tokens_processed: usize,
    pub n_prompt_tokens_cache: usize,
    pub n_cached_tokens: usize,
    pub n_decoded: usize,
    /// The slot drafts tokens (speculative decoding).
    pub speculative: bool,
    /// The settings of the slot's request, or of its last one (`None`: it has had none).
    #[serde(skip)]
    pub params: Option<GenParams>,
    pub next_token: NextToken,
}

/// llama-server's `next_token` of a slot.
#[derive(Clone, Debug, Serialize)]
pub struct NextToken {
    /// The slot is generating.
    pub has_next_token: bool,
    /// The request's text so far has a line break.
    pub has_new_line: bool,
    /// Tokens the request may still generate (-1: no limit).
    pub n_remain: i64,
    pub n_decoded: usize,
}

/// What handlers send the scheduler thread.
enum Task {
    Generate(Box<Job>),
    Slot(SlotAction),
}

/// The handlers' side of the scheduler.
pub struct Scheduler {
    jobs: Mutex<mpsc::Sender<Task>>,
    status: Arc<Mutex<Vec<SlotStatus>>>,
    next_id: AtomicU64,
    pub options: SchedulerOptions,
    /// The backend failure that stopped generation, once one has.
    failed: Arc<OnceLock<String>>,
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
    /// Starts the scheduler thread for `loaded`; `spec` (validated flags) says how each slot
    /// drafts, with `draft` the draft model when one was given.
    pub fn start(
        loaded: Arc<Loaded>,
        draft: Option<Arc<Loaded>>,
        spec: &SpecOptions,
        options: SchedulerOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Scheduler, SpecError> {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let spec = spec.clone();
        let shared = status.clone();
        let failed = Arc::new(OnceLock::new());
        let failed_here = failed.clone();
        std::thread::Builder::new()
            .name("scheduler".into())
            .spawn(move || {
                // (One ngram-mod pool and one copy of the lookup caches for all slots.)
                let spec_shared = match setup::Shared::new(&spec) {
                    Ok(shared) => shared,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let slots = (0..options.n_slots)
                    .map(|id| {
                        let session =
                            Session::new(&loaded.model, options.n_ctx_slot, options.n_batch);
                        let drafter = setup::build_shared(
                            &spec,
                            &spec_shared,
                            false,
                            &loaded,
                            draft.as_deref(),
                            options.n_ctx_slot,
                            options.n_batch,
                        )?;
                        Ok(Slot::new(id, session, drafter))
                    })
                    .collect::<Result<Vec<_>, SpecError>>();
                let slots = match slots {
                    Ok(slots) => slots,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let worker = Worker {
                    loaded: &loaded,
                    model_id: ModelId::of(&loaded.model.file),
                    slots,
                    queue: VecDeque::new(),
                    actions: Vec::new(),
                    vocab: Arc::new(TokenVocab::new(&loaded.tokenizer)),
                    lora_turn: 0,
                    options,
                    metrics,
                    status: shared,
                    failed: failed_here,
                };
                worker.publish();
                let _ = ready_tx.send(Ok(()));
                worker.run(rx)
            })
            .expect("cannot start the scheduler thread");
        ready_rx
            .recv()
            .expect("the scheduler thread reports whether it started")?;
        Ok(Scheduler {
            jobs: Mutex::new(tx),
            status,
            next_id: AtomicU64::new(0),
            options,
            failed,
        })
    }

    /// Why the model can no longer run (a backend failed: a device, an RPC worker), as the
    /// 503 every request now gets; `None` while it runs.
    pub fn failure(&self) -> Option<ApiError> {
        self.failed.get().map(|m| ApiError::unavailable(m.clone()))
    }

    /// Queues a request. The prompt must be non-empty and shorter than a slot's context.
    /// Refused with the failure once the model's backend has failed.
    pub fn submit(&self, prompt: Vec<u32>, params: GenParams) -> Result<JobHandle, ApiError> {
        debug_assert!(!prompt.is_empty() && prompt.len() < self.options.n_ctx_slot);
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let (tx, rx) = mpsc::sync_channel(EVENT_BUFFER);
        let cancel = Arc::new(AtomicBool::new(false));
        let job = Job {
            prompt,
            params,
            events: tx,
            cancel: cancel.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        };
        self.send(Task::Generate(Box::new(job)))?;
        Ok(JobHandle { events: rx, cancel })
    }

    /// Queues `op` on slot `slot` (which must exist); it runs once the slot is idle, and its
    /// outcome comes back on the returned channel.
    pub fn slot_action(
        &self,
        slot: usize,
        op: SlotOp,
    ) -> Result<mpsc::Receiver<Result<SlotDone, ApiError>>, ApiError> {
        debug_assert!(slot < self.options.n_slots);
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let (reply, rx) = mpsc::channel();
        self.send(Task::Slot(SlotAction { slot, op, reply }))?;
        Ok(rx)
    }

    fn send(&self, task: Task) -> Result<(), ApiError> {
        self.jobs
            .lock()
            .map_err(|_| ApiError::internal("the scheduler has stopped"))?
            .send(task)
            .map_err(|_| ApiError::internal("the scheduler has stopped"))
    }

    /// The slots as they were after the last step.
    pub fn slots(&self) -> Vec<SlotStatus> {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

struct Worker<'m> {
    loaded: &'m Loaded,
    /// Written into slot files, checked when one is restored.
    model_id: ModelId,
    options: SchedulerOptions,
    slots: Vec<Slot<'m>>,
    queue: VecDeque<Job>,
    /// Slot operations waiting for their slot to be idle.
    actions: Vec<SlotAction>,
    /// Token bytes for grammars and DRY, shared by every slot's sampler.
    vocab: Arc<TokenVocab>,
    /// The slot whose LoRA scales the next pass runs first (see [`Worker::lora_group`]).
    lora_turn: usize,
    metrics: Arc<Metrics>,
    status: Arc<Mutex<Vec<SlotStatus>>>,
    /// Set once a backend has failed (see the module doc).
    failed: Arc<OnceLock<String>>,
}

impl Worker<'_> {
    fn run(mut self, rx: mpsc::Receiver<Task>) {
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some());
            if !busy && self.queue.is_empty() && self.actions.is_empty() {
                self.publish();
                match rx.recv() {
                    Ok(task) => self.take(task),
                    Err(_) => return,
                }
            }
            while let Ok(task) = rx.try_recv() {
                self.take(task);
            }
            self.drop_cancelled();
            self.run_actions();
            self.assign();
            self.step();
            self.publish();
        }
    }

    fn take(&mut self, task: Task) {
        match task {
            Task::Generate(job) => self.queue.push_back(*job),
            Task::Slot(action) => self.actions.push(action),
        }
    }

    /// Runs the slot operations whose slots are idle; the others wait.
    fn run_actions(&mut self) {
        if self.actions.is_empty() {
            return;
        }
        for action in std::mem::take(&mut self.actions) {
            let slot = &mut self.slots[action.slot];
            if slot.active.is_some() {
                self.actions.push(action);
                continue;
            }
            let t0 = Instant::now();
            let session = &mut slot.session;
            let result = match &action.op {
                // Qwen2-VL's image positions are not in the slot file's format.
                SlotOp::Save(_) if !session.rope_gaps.is_empty() => Err(ApiError::bad_request(
                    "the slot holds an image of an M-RoPE model (Qwen2-VL), whose positions a \
                     slot file does not keep: it cannot be saved",
                )),
                SlotOp::Save(path) => slot_file::save(session, &self.model_id, path)
                    .map(|n_bytes| (session.tokens.len(), n_bytes))
                    .map_err(|e| {
                        ApiError::internal(format!(
                            "cannot write the slot file {}: {e}",
                            path.display()
                        ))
                    }),
                SlotOp::Restore(path) => slot_file::restore(session, &self.model_id, path)
                    .map(|n_bytes| (session.tokens.len(), n_bytes))
                    .map_err(|e| restore_error(path, &e)),
                SlotOp::Erase => {
                    let n = session.tokens.len();
                    session.truncate(0);
                    Ok((n, 0))
                }
            };
            slot.last_used = Instant::now();
            let done = result.map(|(n_tokens, n_bytes)| SlotDone {
                n_tokens,
                n_bytes,
                ms: t0.elapsed().as_secs_f64() * 1e3,
            });
            // `/slots` shows the slot's new state before the client hears the action is done
            // (a client that reads `/slots` right after an erase must see it empty).
            self.publish();
            let _ = action.reply.send(done);
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

    /// Moves queued requests into free slots, oldest first (after a backend failure, ends them
    /// with it).
    fn assign(&mut self) {
        if let Some(m) = self.failed.get() {
            for job in self.queue.drain(..) {
                let _ = job
                    .events
                    .try_send(Event::Failed(ApiError::unavailable(m.clone())));
            }
        }
        while let Some(job) = self.queue.front() {
            let idle = self.slots.iter().filter_map(Slot::candidate);
            let Some(i) = pick_slot(idle, &job.prompt, job.params.cache_prompt) else {
                break;
            };
            let job = self.queue.pop_front().expect("front exists");
            let keep_on_shift = self.options.context_shift.then(|| {
                keep_tokens(
                    job.params.n_keep.unwrap_or(self.options.n_keep),
                    &job.prompt,
                    self.loaded.tokenizer.bos(),
                )
            });
            self.slots[i].start(job, &self.vocab, keep_on_shift);
            if let Some(a) = self.slots[i].active.as_ref() {
                // The 0% event: how much of the prompt the cache already held.
                a.send_progress();
            }
        }
        let processing = self.slots.iter().filter(|s| s.active.is_some()).count();
        self.metrics.requests_processing.set(processing as u64);
        self.metrics.requests_deferred.set(self.queue.len() as u64);
    }

    /// The LoRA scales of this pass: requests at different scales never share one, so a pass
    /// takes the busy slots at the scales of the first busy slot from `lora_turn` on, and the
    /// turn moves past it (each group of scales gets its passes in turn).
    fn lora_group(&mut self) -> Option<LoraMix> {
        let n = self.slots.len();
        let first = (0..n)
            .map(|k| (self.lora_turn + k) % n)
            .find(|&i| self.slots[i].active.is_some())?;
        self.lora_turn = (first + 1) % n;
        self.slots[first].session.lora.clone()
    }

    /// One forward pass over the active slots (of one group of LoRA scales).
    fn step(&mut self) {
        let group = self.lora_group();
        let mut batch = Batch::default();
        // The slot of each output row, in batch order.
        let mut rows: Vec<usize> = Vec::new();
        // Draft tokens each decoding slot feeds after its next token (verified after the pass).
        let mut drafts: Vec<Vec<u32>> = vec![Vec::new(); self.slots.len()];
        for slot in &mut self.slots {
            let Some(a) = slot.active.as_mut().filter(|_| slot.session.lora == group) else {
                continue;
            };
            if let Some(id) = a.next_token.take() {
                let feed = slot.session.next_feed(slot.spec.as_mut(), id, &a.budget);
                drafts[slot.id] = feed[1..].to_vec();
                slot.session.stage(&feed, slot.id, &mut batch, |_| true);
                rows.extend(std::iter::repeat_n(slot.id, feed.len()));
            }
        }
        let mut budget = self.options.n_batch.saturating_sub(batch.len()).max(1);
        let mut n_prompt_tokens = 0;
        // Slots that read prompt tokens in this pass (for `return_progress`).
        let mut progressed = Vec::new();
        // Slots whose prompt ended with an image, and the logits after it.
        let mut image_ends: Vec<(usize, Vec<f32>)> = Vec::new();
        // A backend's failure while an image was fed.
        let mut failure = None;
        for slot in &mut self.slots {
            let Some(a) = slot.active.as_mut().filter(|_| slot.session.lora == group) else {
                continue;
            };
            let left = a.job.prompt.len() - a.prompt_done;
            if left == 0 || budget == 0 {
                continue;
            }
            let media = a.job.params.media.clone();
            // An image starting here is fed now, on its own: rows, not tokens.
            if let Some(img) = media.as_ref().and_then(|m| m.image_at(a.prompt_done)) {
                progressed.push(slot.id);
                let logits = match slot.session.feed_image(img) {
                    Ok(logits) => logits,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                };
                a.prompt_done += img.n_tokens;
                n_prompt_tokens += img.n_tokens;
                if a.prompt_done == a.job.prompt.len() {
                    image_ends.push((slot.id, logits));
                }
                continue;
            }
            // Text up to the next image.
            let next_image = media
                .as_ref()
                .and_then(|m| m.next_image_after(a.prompt_done));
            let take = left
                .min(budget)
                .min(next_image.map_or(usize::MAX, |s| s - a.prompt_done));
            progressed.push(slot.id);
            let chunk = &a.job.prompt[a.prompt_done..a.prompt_done + take];
            // Logits for the prompt's last token only.
            let ends = a.prompt_done + take == a.job.prompt.len();
            slot.session
                .stage(chunk, slot.id, &mut batch, |k| ends && k + 1 == take);
            if ends {
                rows.push(slot.id);
            }
            a.prompt_done += take;
            budget -= take;
            n_prompt_tokens += take;
        }
        if let Some(e) = failure {
            return self.fail(e);
        }
        for (i, logits) in image_ends {
            self.verify(i, &logits, &[]);
        }
        if batch.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let mut caches: Vec<&mut SeqCache> = self
            .slots
            .iter_mut()
            .map(|s| &mut s.session.cache)
            .collect();
        let full = ForwardPlan::full(&self.loaded.model.config);
        let lora = group.as_ref().unwrap_or(self.loaded.model.lora_mix());
        let logits = match self
            .loaded
            .model
            .try_forward_mix(&batch, &mut caches, full, lora)
        {
            Ok(logits) => logits,
            Err(e) => return self.fail(e),
        };
        let elapsed = t0.elapsed().as_secs_f64();
        self.metrics.record_step(n_prompt_tokens, elapsed);
        let busy = self.slots.iter().filter(|s| s.active.is_some()).count();
        let longest = self
            .slots
            .iter()
            .map(|s| s.session.tokens.len())
            .max()
            .unwrap_or(0);
        self.metrics.record_slots(busy, longest);
        for i in progressed {
            if let Some(a) = self.slots[i].active.as_ref() {
                a.send_progress();
            }
        }

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
    /// drafted tokens while they equal what was sampled, and ends its request when one of the
    /// tokens finishes it or the context is full.
    fn verify(&mut self, i: usize, logits: &[f32], draft: &[u32]) {
        let tok = &self.loaded.tokenizer;
        let metrics = &*self.metrics;
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_mut() else {
            return;
        };
        if !draft.is_empty() {
            a.draft_n += draft.len();
            metrics.drafts.add(1);
            metrics.draft_tokens.add(draft.len() as u64);
        }
        // (A copy: `emit` borrows the rest of the request.)
        let mut budget = a.budget;
        let step = slot
            .session
            .step(logits, draft, &mut budget, |row, history| {
                emit(a, tok, row, history)
            });
        let step = match step {
            Ok(step) => step,
            Err(e) => return self.fail(e),
        };
        a.budget = budget;
        a.draft_n_accepted += step.accepted;
        if let Some(spec) = slot.spec.as_mut() {
            spec.accept(step.accepted);
        }
        metrics.draft_accepted.add(step.accepted as u64);
        match step.next {
            ControlFlow::Continue(id) => a.next_token = Some(id),
            ControlFlow::Break(reason) => self.end(i, reason),
        }
    }

    /// Ends slot `i`'s request: the text still held back and the summary go to its handler
    /// ([`StopReason::Cancelled`]: its handler fell [`EVENT_BUFFER`] events behind, as when its
    /// client stopped reading, and hears nothing more).
    fn end(&mut self, i: usize, finish: StopReason) {
        let now = Instant::now();
        let slot = &mut self.slots[i];
        slot.last_used = now;
        let Some(mut a) = slot.active.take() else {
            return;
        };
        let stats = a.stats(now);
        self.metrics
            .record_request(stats.n_predicted, stats.predicted_ms, stats.n_cached);
        if finish == StopReason::Cancelled {
            self.metrics.requests_cancelled.add(1);
            return;
        }
        if !matches!(finish, StopReason::StopWord(_)) {
            let (text, tokens) = a.flush();
            if !text.is_empty() || !tokens.is_empty() {
                let probs = a.take_probs(!tokens.is_empty());
                let _ = a.job.events.try_send(Event::Text {
                    text,
                    tokens,
                    probs,
                    stats: a.stats(now),
                });
            }
        }
        let summary = Summary {
            finish,
            slot: slot.id,
            stats: a.stats(now),
            n_tokens_cached: slot.session.tokens.len(),
        };
        self.metrics.requests_done.add(1);
        // The slot is free before the client hears it is done: `/slots` must not lag behind.
        self.publish();
        let _ = a.job.events.try_send(Event::Done(summary));
    }

    /// A backend failed: generation stops for good (see the module doc). Every request in a
    /// slot or in the queue ends with a 503 naming the failure; the slots forget their tokens
    /// (their caches no longer hold what they say).
    fn fail(&mut self, e: BackendError) {
        let message = e.to_string();
        eprintln!("llamafile: {message}; generation stops, requests get 503 until a restart");
        let _ = self.failed.set(message.clone());
        let now = Instant::now();
        for slot in &mut self.slots {
            slot.session.truncate(0);
            slot.last_used = now;
            if let Some(a) = slot.active.take() {
                let _ = a
                    .job
                    .events
                    .try_send(Event::Failed(ApiError::unavailable(message.clone())));
            }
        }
        self.assign();
        self.publish();
    }

    fn publish(&self) {
        // The gauge follows the slots, also when the last request ends and the loop sleeps.
        let processing = self.slots.iter().filter(|s| s.active.is_some()).count();
        self.metrics.requests_processing.set(processing as u64);
        let status = self
            .slots
            .iter()
            .map(|s| {
                let a = s.active.as_ref();
                let n_decoded = a.map_or(0, |a| a.n_decoded);
                let n_predict = a.map_or(-1, |a| a.job.params.n_predict);
                SlotStatus {
                    id: s.id,
                    n_ctx: self.options.n_ctx_slot,
                    is_processing: a.is_some(),
                    id_task: s.last_task.map_or(-1, |id| id as i64),
                    n_prompt_tokens: s.session.tokens.len(),
                    n_prompt_tokens_processed: a.map_or(0, |a| a.prompt_done - a.n_cached),
                    n_prompt_tokens_cache: a.map_or(0, |a| a.n_cached),
                    n_cached_tokens: s.session.tokens.len(),
                    n_decoded,
                    speculative: s.spec.is_some(),
                    params: s.last_params.clone(),
                    next_token: NextToken {
                        has_next_token: a.is_some(),
                        has_new_line: a.is_some_and(|a| a.has_new_line),
                        n_remain: if n_predict < 0 {
                            -1
                        } else {
                            (n_predict - n_decoded as i64).max(0)
                        },
                        n_decoded,
                    },
                }
            })
            .collect();
        if let Ok(mut s) = self.status.lock() {
            *s = status;
        }
    }
}

/// A restore's failure as llama-server answers it: 400, naming the file and what is wrong.
fn restore_error(path: &std::path::Path, e: &RestoreError) -> ApiError {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ApiError::field(
        "filename",
        format!("unable to restore the slot from '{name}': {e}"),
    )
}

/// Samples a request's next token from `row` (`history`: the tokens before it) and sends its
/// text to the handler; `Break` when the token ends the request (the budget is the step's).
fn emit(
    a: &mut Active,
    tok: &Tokenizer,
    row: &[f32],
    history: &[u32],
) -> ControlFlow<StopReason, u32> {
    let id = match a.job.params.n_probs {
        Some(n) if a.job.params.post_sampling_probs => {
            let (id, dist) = a.sampler.sample_with_probs(row, history);
            a.step_probs = Some(logprobs::after_sampling(&dist, id, n));
            id
        }
        Some(n) => {
            let id = a.sampler.sample(row, history);
            a.step_probs = Some(logprobs::step(row, id, n));
            id
        }
        None => a.sampler.sample(row, history),
    };
    a.first_token.get_or_insert_with(Instant::now);
    a.n_decoded += 1;
    if tok.is_eog(id) && !a.job.params.ignore_eos {
        return ControlFlow::Break(StopReason::EndOfGeneration);
    }
    if let Some(p) = a.step_probs.take() {
        a.pending_probs.push(p);
    }
    let (text, tokens, stopped) = match a.push_token(tok, id) {
        TextStep::Send(text, tokens) => (text, tokens, None),
        TextStep::Stopped(text, tokens, word) => (text, tokens, Some(word)),
    };
    a.has_new_line |= text.contains('\n');
    if !text.is_empty() || !tokens.is_empty() {
        let probs = a.take_probs(!tokens.is_empty());
        let event = Event::Text {
            text,
            tokens,
            probs,
            stats: a.stats(Instant::now()),
        };
        // Full: the handler is EVENT_BUFFER events behind; cut it off.
        if a.job.events.try_send(event).is_err() {
            return ControlFlow::Break(StopReason::Cancelled);
        }
    }
    match stopped {
        Some(word) => ControlFlow::Break(StopReason::StopWord(word)),
        None => ControlFlow::Continue(id),
    }
}
