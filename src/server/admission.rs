//! Admission of connections by client address: no address may hold more than a fixed number of
//! the server's connections at once, so that one client (a slowloris holding connections open,
//! a runaway script) can never take every worker and deny service to the others. An IPv6
//! client is counted by its /64 network, the block one host is usually given; an IPv4-mapped
//! IPv6 address counts as its IPv4 address.
//!
//! Owns the counting only; what a refused connection is answered is the server's business.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Counts the open connections of each client address against a cap.
#[derive(Clone)]
pub struct Admission {
    cap: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One admitted connection; its address's count goes down when this is dropped.
pub struct Ticket {
    key: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Admission {
    /// At most `cap` (at least 1) open connections per client address.
    pub fn new(cap: usize) -> Admission {
        Admission {
            cap: cap.max(1),
            open: Arc::default(),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A ticket for one more connection from `ip`, or `None` when it already holds the cap.
    pub fn admit(&self, ip: IpAddr) -> Option<Ticket> {
        let key = client_key(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(Ticket {
            key,
            open: self.open.clone(),
        })
    }

    /// Open connections of `ip`'s client.
    #[cfg(test)]
    fn open(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&client_key(ip)).copied().unwrap_or(0)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
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

    #[test]
    fn each_address_is_capped_and_tickets_give_back() {
        let a = Admission::new(2);
        let t1 = a.admit(ip("127.0.0.1")).unwrap();
        let _t2 = a.admit(ip("127.0.0.1")).unwrap();
        assert!(a.admit(ip("127.0.0.1")).is_none());
        // Another address is not affected.
        let _t3 = a.admit(ip("127.0.0.2")).unwrap();
        drop(t1);
        assert_eq!(a.open(ip("127.0.0.1")), 1);
        assert!(a.admit(ip("127.0.0.1")).is_some());
    }

    #[test]
    fn ipv6_counts_by_network_and_mapped_ipv4_as_ipv4() {
        let a = Admission::new(1);
        let _t = a.admit(ip("2001:db8:1:2::1")).unwrap();
        assert!(a.admit(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        assert!(a.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _v4 = a.admit(ip("10.0.0.1")).unwrap();
        assert!(a.admit(ip("::ffff:10.0.0.1")).is_none());
        assert_eq!(a.open(ip("::ffff:10.0.0.1")), 1);
    }
}
