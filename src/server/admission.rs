//! Admission of connections: a waiting room in front of the HTTP workers, fair between client
//! addresses. An accepted connection waits here (costing its socket and a queue entry, not a
//! thread) until a worker takes it. Workers take connections round-robin over the addresses
//! that have some waiting, so one client queuing a thousand connections never keeps another
//! client waiting behind them; and no address may hold more than a fixed share of the workers
//! at once, so one client (a slowloris holding connections open, a runaway script) can never
//! take every worker. An IPv6 client is counted by its /64 network, the block one host is
//! usually given; an IPv4-mapped IPv6 address counts as its IPv4 address.
//!
//! Owns the queuing and counting only; what a refused connection is answered, and how a taken
//! one is served, is the server's business.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The limits of a [`WaitingRoom`].
#[derive(Clone, Copy, Debug)]
pub struct RoomLimits {
    /// Connections of one address being served at once (at least 1).
    pub active_per_client: usize,
    /// Connections waiting, all addresses together.
    pub waiting: usize,
    /// Connections waiting from one address.
    pub waiting_per_client: usize,
}

/// Why a connection was not let in; the server answers it 503.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The room holds its limit of waiting connections.
    Full(usize),
    /// This connection's address already has its limit waiting.
    ClientFull(usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Full(n) => write!(
                f,
                "the server is busy: {n} connections are waiting already; retry later"
            ),
            Refusal::ClientFull(n) => write!(
                f,
                "too many connections from your address ({n} waiting already); retry later"
            ),
        }
    }
}

/// Connections waiting for a worker, by client address.
pub struct WaitingRoom<T> {
    limits: RoomLimits,
    inner: Arc<Shared<T>>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
}

struct State<T> {
    /// Each address's waiting connections, oldest first.
    queues: HashMap<IpAddr, VecDeque<T>>,
    /// The addresses with connections waiting, in the order their turns come.
    turns: VecDeque<IpAddr>,
    /// Connections being served, by address.
    active: HashMap<IpAddr, usize>,
    waiting: usize,
}

/// One connection taken by a worker; its address's count goes down when this is dropped.
pub struct Ticket {
    key: IpAddr,
    release: Box<dyn Fn(IpAddr) + Send + Sync>,
}

impl<T> Clone for WaitingRoom<T> {
    fn clone(&self) -> Self {
        WaitingRoom {
            limits: self.limits,
            inner: self.inner.clone(),
        }
    }
}

impl<T: Send + 'static> WaitingRoom<T> {
    pub fn new(limits: RoomLimits) -> WaitingRoom<T> {
        WaitingRoom {
            limits: RoomLimits {
                active_per_client: limits.active_per_client.max(1),
                ..limits
            },
            inner: Arc::new(Shared {
                state: Mutex::new(State {
                    queues: HashMap::new(),
                    turns: VecDeque::new(),
                    active: HashMap::new(),
                    waiting: 0,
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Lets `item`, a connection from `ip`, wait for a worker; gives it back when the room or
    /// its address's share of it is full.
    pub fn enter(&self, ip: IpAddr, item: T) -> Result<(), (T, Refusal)> {
        let key = client_key(ip);
        let mut s = self.lock();
        if s.waiting >= self.limits.waiting {
            return Err((item, Refusal::Full(s.waiting)));
        }
        let queue = s.queues.entry(key).or_default();
        if queue.len() >= self.limits.waiting_per_client {
            let n = queue.len();
            return Err((item, Refusal::ClientFull(n)));
        }
        if queue.is_empty() {
            s.turns.push_back(key);
        }
        s.queues.get_mut(&key).expect("just made").push_back(item);
        s.waiting += 1;
        drop(s);
        self.inner.changed.notify_one();
        Ok(())
    }

    /// Waits for the next connection whose address may be served now: addresses take turns,
    /// each giving its oldest connection.
    pub fn take(&self) -> (T, Ticket) {
        let mut s = self.lock();
        loop {
            if let Some((item, key)) = self.next_turn(&mut s) {
                drop(s);
                return (item, self.ticket(key));
            }
            s = self
                .inner
                .changed
                .wait(s)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The oldest connection of the first address in turn that is under its share of workers.
    fn next_turn(&self, s: &mut State<T>) -> Option<(T, IpAddr)> {
        let cap = self.limits.active_per_client;
        let at = s
            .turns
            .iter()
            .position(|k| s.active.get(k).copied().unwrap_or(0) < cap)?;
        let key = s.turns.remove(at).expect("position is in range");
        let queue = s
            .queues
            .get_mut(&key)
            .expect("an address in turn has a queue");
        let item = queue
            .pop_front()
            .expect("an address in turn has a connection");
        if queue.is_empty() {
            s.queues.remove(&key);
        } else {
            s.turns.push_back(key);
        }
        s.waiting -= 1;
        *s.active.entry(key).or_insert(0) += 1;
        Some((item, key))
    }

    /// The ticket of a connection of `key` just taken: dropping it frees the worker's place.
    fn ticket(&self, key: IpAddr) -> Ticket {
        let shared = self.inner.clone();
        let release = Box::new(move |key: IpAddr| {
            let mut s = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = s.active.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    s.active.remove(&key);
                }
            }
            drop(s);
            shared.changed.notify_all();
        });
        Ticket { key, release }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections being served for `ip`'s client.
    #[cfg(test)]
    fn active(&self, ip: IpAddr) -> usize {
        self.lock()
            .active
            .get(&client_key(ip))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        (self.release)(self.key);
    }
}

/// What `ip` is counted as: IPv4 addresses as they are, IPv6 ones by their /64 network.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let network = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(network.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn room(active: usize, waiting: usize, per_client: usize) -> WaitingRoom<u32> {
        WaitingRoom::new(RoomLimits {
            active_per_client: active,
            waiting,
            waiting_per_client: per_client,
        })
    }

    /// Takes what can be taken now, without waiting.
    fn take_ready(r: &WaitingRoom<u32>) -> Option<(u32, Ticket)> {
        let mut s = r.lock();
        let (item, key) = r.next_turn(&mut s)?;
        drop(s);
        Some((item, r.ticket(key)))
    }

    #[test]
    fn addresses_take_turns_and_each_keeps_its_order() {
        let r = room(8, 100, 100);
        for i in 0..5 {
            r.enter(ip("127.0.0.1"), i).unwrap();
        }
        r.enter(ip("127.0.0.2"), 100).unwrap();
        r.enter(ip("127.0.0.2"), 101).unwrap();
        let order: Vec<u32> = (0..7).map(|_| take_ready(&r).unwrap().0).collect();
        assert_eq!(order, [0, 100, 1, 101, 2, 3, 4]);
        assert!(take_ready(&r).is_none());
    }

    #[test]
    fn an_address_at_its_share_of_workers_waits_and_others_pass() {
        let r = room(2, 100, 100);
        for i in 0..4 {
            r.enter(ip("127.0.0.1"), i).unwrap();
        }
        let (a, t1) = take_ready(&r).unwrap();
        let (b, _t2) = take_ready(&r).unwrap();
        assert_eq!((a, b), (0, 1));
        assert!(take_ready(&r).is_none(), "127.0.0.1 holds its share");
        r.enter(ip("127.0.0.2"), 7).unwrap();
        assert_eq!(take_ready(&r).unwrap().0, 7);
        drop(t1);
        assert_eq!(r.active(ip("127.0.0.1")), 1);
        assert_eq!(take_ready(&r).unwrap().0, 2);
    }

    #[test]
    fn a_full_room_and_a_full_address_refuse() {
        let r = room(1, 3, 2);
        r.enter(ip("10.0.0.1"), 1).unwrap();
        r.enter(ip("10.0.0.1"), 2).unwrap();
        assert_eq!(
            r.enter(ip("10.0.0.1"), 3).unwrap_err().1,
            Refusal::ClientFull(2)
        );
        r.enter(ip("10.0.0.2"), 4).unwrap();
        assert_eq!(r.enter(ip("10.0.0.3"), 5).unwrap_err().1, Refusal::Full(3));
    }

    #[test]
    fn take_blocks_until_a_connection_enters() {
        let r = room(1, 10, 10);
        let taker = {
            let r = r.clone();
            std::thread::spawn(move || r.take().0)
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        r.enter(ip("127.0.0.1"), 42).unwrap();
        assert_eq!(taker.join().unwrap(), 42);
    }

    #[test]
    fn a_released_ticket_wakes_a_worker_for_the_capped_address() {
        let r = room(1, 10, 10);
        r.enter(ip("127.0.0.1"), 1).unwrap();
        r.enter(ip("127.0.0.1"), 2).unwrap();
        let (_, ticket) = r.take();
        let taker = {
            let r = r.clone();
            std::thread::spawn(move || r.take().0)
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(ticket);
        assert_eq!(taker.join().unwrap(), 2);
    }

    #[test]
    fn ipv6_counts_by_network_and_mapped_ipv4_as_ipv4() {
        let r = room(1, 10, 1);
        r.enter(ip("2001:db8:1:2::1"), 1).unwrap();
        assert!(r.enter(ip("2001:db8:1:2:ffff::9"), 2).is_err(), "same /64");
        r.enter(ip("2001:db8:1:3::1"), 3).unwrap();
        r.enter(ip("10.0.0.1"), 4).unwrap();
        assert!(r.enter(ip("::ffff:10.0.0.1"), 5).is_err());
    }
}
