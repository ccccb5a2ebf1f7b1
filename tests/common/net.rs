//! Client sockets the standard library cannot make: connected from a chosen local address (a
//! second loopback address such as 127.0.0.2 is another client to the server) and with a small
//! receive buffer (a client that stops reading fills it quickly). Plus a one-shot HTTP request
//! over such a socket.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::Duration;

/// Connects to 127.0.0.1:`port` from `local` (port chosen by the kernel), with the receive
/// buffer set to `rcvbuf` bytes before connecting when given.
pub fn connect_from(local: Ipv4Addr, port: u16, rcvbuf: Option<i32>) -> io::Result<TcpStream> {
    // SAFETY: plain socket(2) call; the descriptor is owned by the TcpStream below or closed.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket we own and nothing else refers to; the stream closes it on drop.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    if let Some(size) = rcvbuf {
        // SAFETY: the option value is a live c_int and its exact size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let bind = sockaddr(local, 0);
    let peer = sockaddr(Ipv4Addr::LOCALHOST, port);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: the addresses are live sockaddr_in values and `len` is their size.
    if unsafe { libc::bind(fd, (&bind as *const libc::sockaddr_in).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::connect(fd, (&peer as *const libc::sockaddr_in).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stream)
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Sends one `Connection: close` request from `local` and returns the status and body (the
/// body still chunked, when it was). Fails on any socket error or after `timeout`.
pub fn request_from(
    local: Ipv4Addr,
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> io::Result<(u16, String)> {
    let mut s = connect_from(local, port, None)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)?;
    let text = String::from_utf8_lossy(&reply).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no status line in {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}
