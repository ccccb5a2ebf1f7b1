//! The compute thread pool. A forward pass is hundreds of short parallel steps (a few µs to a
//! few hundred µs each); waking sleeping threads through the kernel for every one of them cost
//! more than the steps themselves on small models. Here a fixed set of workers spins for a
//! short while after each job, so the next job starts within a cache-line transfer, and parks
//! only when the pool goes idle. The calling thread always takes part in its own job.
//!
//! Jobs are `Fn(task index)` closures that borrow the caller's data: a worker joins a job
//! before it touches it, and the caller does not return before every worker that joined has
//! checked out, which is what makes lending them sound. Once the caller has finished its share
//! and no task is left, it closes the job: a worker that had not joined by then (descheduled on
//! a busy machine) never will, so the caller does not wait a scheduler time slice for a thread
//! that has nothing left to do. A job submitted while another is running (another thread, or a
//! task calling back in) runs on its caller's thread alone.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker spins without giving up its core.
const SPIN_ONLY: Duration = Duration::from_micros(30);
/// How long an idle worker keeps polling (yielding its core between polls) before it parks.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(300);

/// The bit of [`Shared::gate`] that says the job takes no more workers.
const CLOSED: u64 = 1 << 31;
/// The bits of [`Shared::gate`] that count the workers inside the job.
const JOINED: u64 = CLOSED - 1;

/// The gate of job `epoch`, open, with nobody inside.
fn open_gate(epoch: u64) -> u64 {
    epoch << 32
}

/// A job's body, with the caller's lifetime erased while workers hold it (see `run`).
type Job = dyn Fn(usize) + Sync;

/// The state every worker watches.
struct Shared {
    /// Bumped once per job; a worker runs a job when it sees the value change.
    epoch: AtomicU64,
    /// The current job. Written only by the submitter while no worker is inside a job.
    job: UnsafeCell<Option<&'static Job>>,
    /// Tasks in the current job.
    n_tasks: AtomicUsize,
    /// The next task index to hand out.
    next_task: AtomicUsize,
    /// Who is inside the current job: the job's number (the low 32 bits of `epoch`) in the
    /// high half, [`CLOSED`] once no worker may join any more, and the workers that joined and
    /// have not checked out in the low bits.
    gate: AtomicU64,
    /// A task of the current job panicked on a worker.
    panicked: AtomicBool,
    /// Per worker: it is parked, or about to park.
    sleeping: Vec<AtomicBool>,
    shutdown: AtomicBool,
}

// SAFETY: `job` is written only by the thread holding `Pool::submit` while no worker is inside
// a job (the gate's count is 0, read with acquire), and read by workers only between joining
// the gate of the epoch that published it (acquire) and checking out (release); those orderings
// make the accesses race-free.
unsafe impl Sync for Shared {}

/// A fixed-size pool of compute threads.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<Thread>,
    /// Held while a job runs; a second submitter runs its job inline instead of waiting.
    submit: Mutex<()>,
}

impl Pool {
    /// A pool that runs jobs on `threads` threads: the caller plus `threads - 1` workers.
    pub fn new(threads: usize) -> Pool {
        let n_workers = threads.max(1) - 1;
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            n_tasks: AtomicUsize::new(0),
            next_task: AtomicUsize::new(0),
            gate: AtomicU64::new(open_gate(0) | CLOSED),
            panicked: AtomicBool::new(false),
            sleeping: (0..n_workers).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
        });
        let workers = (0..n_workers)
            .map(|i| {
                let shared = Arc::clone(&shared);
                thread::Builder::new()
                    .name(format!("compute-{}", i + 1))
                    .spawn(move || worker_loop(&shared, i))
                    .expect("spawning a compute thread")
                    .thread()
                    .clone()
            })
            .collect();
        Pool {
            shared,
            workers,
            submit: Mutex::new(()),
        }
    }

    /// Threads a job runs on, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `task(i)` for every `i` in `0..n_tasks`, spread over the pool, and returns when all
    /// have finished. A panic in a task is re-raised here after every thread has left the job.
    pub fn run(&self, n_tasks: usize, task: impl Fn(usize) + Sync) {
        if n_tasks == 0 {
            return;
        }
        let guard = match self.submit.try_lock() {
            Ok(g) if n_tasks > 1 && !self.workers.is_empty() => g,
            _ => {
                (0..n_tasks).for_each(task);
                return;
            }
        };
        let s = &*self.shared;
        let job: &(dyn Fn(usize) + Sync + '_) = &task;
        // SAFETY: the lifetime is erased only for the duration of this call: workers touch the
        // job only between joining its gate and checking out, and this function does not return
        // (or unwind) before it has closed the gate and seen every joined worker check out,
        // after which the slot is cleared.
        let job: &'static Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        // SAFETY: no worker is inside a job (the previous gate was closed and emptied, and we
        // hold `submit`), so nothing reads the slot while it is written.
        unsafe { *s.job.get() = Some(job) };
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next_task.store(0, Ordering::Relaxed);
        let epoch = s.epoch.load(Ordering::Relaxed).wrapping_add(1);
        s.gate
            .store(open_gate(epoch & u64::from(u32::MAX)), Ordering::Relaxed);
        s.epoch.store(epoch, Ordering::SeqCst);
        for (w, sleeping) in self.workers.iter().zip(&s.sleeping) {
            if sleeping.load(Ordering::SeqCst) {
                w.unpark();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| run_tasks(s, job)));
        // Every task is claimed: a worker that has not joined yet would find nothing to do.
        let mut gate = s.gate.fetch_or(CLOSED, Ordering::Acquire) | CLOSED;
        let mut spins = 0u32;
        while gate & JOINED != 0 {
            spins += 1;
            if spins < 1 << 10 {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
            gate = s.gate.load(Ordering::Acquire);
        }
        // SAFETY: the gate is closed and every worker that joined has checked out (acquire
        // above), so nobody reads the slot.
        unsafe { *s.job.get() = None };
        let worker_panicked = s.panicked.swap(false, Ordering::Relaxed);
        drop(guard);
        if let Err(e) = mine {
            resume_unwind(e);
        }
        assert!(!worker_panicked, "a compute task panicked on a pool thread");
    }

    /// Splits `data` into chunks of `chunk` elements (the last may be shorter) and runs
    /// `f(chunk index, chunk)` on each in parallel.
    pub fn for_each_chunk<T: Send>(
        &self,
        data: &mut [T],
        chunk: usize,
        f: impl Fn(usize, &mut [T]) + Sync,
    ) {
        let chunk = chunk.max(1);
        let len = data.len();
        let base = SendPtr(data.as_mut_ptr());
        self.run(len.div_ceil(chunk), |i| {
            let start = i * chunk;
            let n = chunk.min(len - start);
            // SAFETY: `run` hands out every index exactly once, so the chunks are disjoint
            // sub-slices of `data`, which stays mutably borrowed for the whole call.
            let part = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), n) };
            f(i, part);
        });
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.workers.iter().for_each(Thread::unpark);
    }
}

/// A raw pointer that may cross threads; users guarantee disjoint access.
struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used by `for_each_chunk`, whose tasks touch disjoint ranges.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// Claims and runs tasks of the current job until none is left.
fn run_tasks(s: &Shared, job: &Job) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let i = s.next_task.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        job(i);
    }
}

fn worker_loop(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let mut idle_since = None;
        loop {
            let epoch = s.epoch.load(Ordering::Acquire);
            if epoch != seen {
                seen = epoch;
                break;
            }
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            let idle = since.elapsed();
            if idle < SPIN_ONLY {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                continue;
            }
            if idle < SPIN_BEFORE_PARK {
                // Still ready at once, but a preempted submitter gets the core back.
                thread::yield_now();
                continue;
            }
            // Announce the park, then look at the epoch again; the submitter bumps the epoch,
            // then looks at this flag: one of the two sees the other. A swap (a read-modify-
            // write), not a store: an emulator may let a plain store pass the load after it
            // (qemu-aarch64 on x86-64 hosts does, and a wake-up was lost: a hang one run in six).
            s.sleeping[index].swap(true, Ordering::SeqCst);
            if s.epoch.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                thread::park();
            }
            s.sleeping[index].store(false, Ordering::SeqCst);
            idle_since = None;
        }
        if !join(s, seen) {
            continue;
        }
        // SAFETY: the submitter wrote the slot before opening this epoch's gate and keeps it
        // until every worker that joined (this one, above) has checked out.
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            if catch_unwind(AssertUnwindSafe(|| run_tasks(s, job))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        s.gate.fetch_sub(1, Ordering::Release);
    }
}

/// Enters job `epoch` unless its caller has already closed it (or moved on to a later job).
fn join(s: &Shared, epoch: u64) -> bool {
    let open = open_gate(epoch & u64::from(u32::MAX));
    let mut gate = s.gate.load(Ordering::Acquire);
    loop {
        if gate & !JOINED != open {
            return false;
        }
        match s
            .gate
            .compare_exchange_weak(gate, gate + 1, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(now) => gate = now,
        }
    }
}

static GLOBAL: OnceLock<Pool> = OnceLock::new();

/// Sizes the process-wide pool; only the first call (or first use) counts. Returns false when
/// the pool already existed with another size.
pub fn init(threads: usize) -> bool {
    GLOBAL.get_or_init(|| Pool::new(threads)).threads() == threads.max(1)
}

/// The process-wide pool, sized by [`init`] or, failing that, to the machine's physical cores.
pub fn global() -> &'static Pool {
    GLOBAL.get_or_init(|| Pool::new(crate::cores::physical_cores()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once() {
        let pool = Pool::new(3);
        for n in [1, 2, 3, 7, 100] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
        }
    }

    #[test]
    fn chunks_cover_the_slice() {
        let pool = Pool::new(2);
        let mut v = vec![0usize; 1003];
        pool.for_each_chunk(&mut v, 10, |c, part| {
            for (j, x) in part.iter_mut().enumerate() {
                *x = c * 10 + j;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| i == x));
    }

    #[test]
    fn nested_jobs_run_inline() {
        let pool = Pool::new(2);
        let total = AtomicUsize::new(0);
        pool.run(4, |_| {
            pool.run(3, |_| {
                total.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(total.load(Ordering::Relaxed), 12);
    }

    #[test]
    fn a_panicking_task_panics_the_caller_and_the_pool_survives() {
        let pool = Pool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(8, |i| assert!(i != 5, "task 5"));
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(8, |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 8);
    }

    #[test]
    fn many_short_jobs_each_run_every_task_once() {
        // Jobs closed while workers are still on their way in: a worker must neither run a
        // task of a closed job nor miss the next one.
        let pool = Pool::new(3);
        for round in 0..20_000usize {
            let n = 1 + round % 5;
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "round {round}"
            );
        }
    }

    #[test]
    fn workers_wake_after_parking() {
        let pool = Pool::new(2);
        thread::sleep(SPIN_BEFORE_PARK * 4);
        let count = AtomicUsize::new(0);
        pool.run(64, |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 64);
    }
}
